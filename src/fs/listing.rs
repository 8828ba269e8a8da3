//! Directory listings: reading a directory into a bounded, sorted list of entries, and
//! rendering it as an HTML page (a table, or a gallery of images) or as JSON, in the order
//! the query asks for (`?view=table|gallery`, `?sort=name|size|date`, `?order=asc|desc`).
//!
//! Reading works from a directory descriptor ([`read_dir_fd`]), so a listing can be made of
//! exactly the directory [`super::resolve`] opened under its policies, without walking a path
//! string again; [`read_dir`] is the same for a path (tools and tests).
//!
//! Invariants:
//! - Bounded: at most `max_entries` entries are returned. Reading stops as soon as one more
//!   entry than that has been accepted, and the listing is reported truncated. The entries kept
//!   are then the first ones in directory order (sorted afterwards), not the first by name:
//!   finding those would mean reading the whole directory, which is what the bound prevents.
//!   A rendering is bounded too: rows past `max_bytes` are left out, and it says so.
//! - Versioned: [`version`] hashes everything a rendering depends on, so a cached rendering is
//!   reused while the hash holds (`fs::cache`), and the hash is the listing's ETag. A
//!   [`View`] (format, layout, sort key and order) is the other half of the cache key.
//! - Only what the server could serve is listed: directories and regular files, with valid
//!   UTF-8 names (request paths are UTF-8), dotfiles only when `show_dotfiles`. A symlink is
//!   listed with its target's metadata and skipped if the target cannot be examined (dangling,
//!   a loop, no permission). Whether following it is allowed is decided by `resolve` when the
//!   link is requested; the listing may reveal the size and time of a target it would refuse.
//! - Order: directories first, then files, each by name in byte order ([`read_dir_fd`]); a
//!   view re-sorts by size or date (names break ties), ascending or descending, directories
//!   still first.
//! - The HTML has no script and loads nothing from elsewhere: style inline (`www/`'s, light
//!   and dark by `prefers-color-scheme`), sorting by links in the column headings, images of
//!   the gallery lazy-loaded (`loading="lazy"`) from the directory itself.
//! - Output is safe to embed: HTML text is escaped, hrefs are percent-encoded (every byte
//!   outside RFC 3986 `unreserved`, so a name can never become a scheme like `javascript:`, a
//!   query or a fragment), and JSON strings are escaped (including `<`, `>` and `&`, so the
//!   JSON cannot be sniffed into markup).
//! - The HTML uses relative links: `url_path` must end with `/`, as the server redirects
//!   directory requests without it.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use crate::sys;

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub is_dir: bool,
    /// Size in bytes; 0 for directories.
    pub size: u64,
    /// Modification time, seconds since the epoch (0 if before it).
    pub mtime: u64,
}

/// What to list.
pub struct ListOptions {
    /// List names starting with `.`.
    pub show_dotfiles: bool,
    /// Most entries to return; beyond it the listing is truncated (e.g. 10 000).
    pub max_entries: usize,
    /// Most bytes a rendered listing may take: rows that would not fit are left out and the
    /// listing says it was cut short (the page's heading and footing are always there).
    pub max_bytes: usize,
}

/// Reads the directory at `dir` (see [`read_dir_fd`]).
pub fn read_dir(dir: &Path, opts: &ListOptions) -> io::Result<(Vec<Entry>, bool)> {
    let file = File::open(dir)?;
    read_dir_fd(file.as_fd(), opts)
}

/// Reads the directory open at `dir` (any descriptor of it, `O_PATH` included; its file offset
/// is not used or moved) into sorted entries, and whether the listing was truncated.
pub fn read_dir_fd(dir: BorrowedFd<'_>, opts: &ListOptions) -> io::Result<(Vec<Entry>, bool)> {
    let mut stream = sys::DirStream::open(dir)?;
    let fd = stream.fd();
    let mut entries = Vec::new();
    let limit = opts.max_entries.saturating_add(1);
    while entries.len() < limit {
        let Some(name) = stream.next_name()? else {
            break;
        };
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." || (!opts.show_dotfiles && bytes.starts_with(b".")) {
            continue;
        }
        let Ok(utf8) = std::str::from_utf8(bytes) else {
            continue;
        };
        let Some(st) = sys::stat_at(fd, name) else {
            continue;
        };
        let is_dir = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => true,
            libc::S_IFREG => false,
            _ => continue,
        };
        entries.push(Entry {
            name: utf8.to_owned(),
            is_dir,
            size: if is_dir { 0 } else { u64::try_from(st.st_size).unwrap_or(0) },
            mtime: u64::try_from(st.st_mtime).unwrap_or(0),
        });
    }
    let truncated = entries.len() > opts.max_entries;
    entries.truncate(opts.max_entries);
    entries.sort_unstable_by(|a, b| b.is_dir.cmp(&a.is_dir).then_with(|| a.name.as_bytes().cmp(b.name.as_bytes())));
    Ok((entries, truncated))
}

/// Room kept at the end of an HTML page for its footing with the "only N are shown" note.
const HTML_FOOT: usize = 160;

/// The style of a listing page: `www/`'s colours and type, light or dark by the reader's
/// `prefers-color-scheme`; the gallery is a CSS grid. No script, nothing loaded from elsewhere.
const HTML_STYLE: &str = "<style>\
:root{--bg:#fdfdfc;--fg:#1f2328;--muted:#59636e;--accent:#b7410e;--link:#0b5cad;--tile:#f2f1ee;\
--border:#d8d6d0;--row-alt:#f7f6f3;color-scheme:light dark}\
@media (prefers-color-scheme:dark){:root{--bg:#16181b;--fg:#e4e6e8;--muted:#9aa3ad;--accent:#f08a4b;\
--link:#7cb7ff;--tile:#23262b;--border:#3a3f46;--row-alt:#1c1f23}}\
*,*::before,*::after{box-sizing:border-box}\
body{margin:0 auto;max-width:60rem;padding:1.5rem 1.25rem 3rem;background:var(--bg);color:var(--fg);\
font-family:system-ui,-apple-system,\"Segoe UI\",Roboto,\"Helvetica Neue\",Arial,sans-serif;line-height:1.5}\
h1{margin:0 0 .25rem;font-size:1.5rem;line-height:1.3;font-weight:600;overflow-wrap:anywhere}\
h1 a{color:var(--accent);text-decoration:none}h1 a:hover{text-decoration:underline}\
a{color:var(--link);text-underline-offset:.15em}\
nav{color:var(--muted);font-size:.95rem;margin-bottom:1rem}nav strong{color:var(--fg)}\
table{width:100%;border-collapse:collapse;font-size:.95rem}\
th,td{text-align:left;padding:.4rem .6rem;border-bottom:1px solid var(--border)}\
th{border-bottom-width:2px;white-space:nowrap}th a{color:inherit}\
tbody tr:nth-child(even) td{background:var(--row-alt)}\
td:first-child{overflow-wrap:anywhere}td.s,th.s{text-align:right;white-space:nowrap}\
td.d{white-space:nowrap;color:var(--muted)}\
ul.g{list-style:none;margin:0;padding:0;display:grid;gap:1rem;\
grid-template-columns:repeat(auto-fill,minmax(10rem,1fr))}\
ul.g li{margin:0;min-width:0}ul.g a{display:block;text-decoration:none;color:var(--fg)}\
ul.g img,ul.g span.t{display:flex;width:100%;aspect-ratio:1;object-fit:cover;border-radius:6px;\
background:var(--tile);border:1px solid var(--border);align-items:center;justify-content:center;\
color:var(--muted);font-size:1.1rem;font-weight:600;text-transform:uppercase;letter-spacing:.05em}\
ul.g span.n{display:block;margin-top:.3rem;font-size:.85rem;text-align:center;overflow-wrap:anywhere}\
ul.g a:hover span.n{text-decoration:underline}\
p.more{color:var(--muted)}\
</style>\n";

/// Appends an HTML page listing `entries` of the directory at URL path `url_path` (decoded,
/// ending in `/`) in `view`'s layout and order: breadcrumbs to every directory above, links
/// between the table and the gallery, and column headings that sort (by links with a
/// query, no script). Rows that would take the output past `max_bytes` are left out, and the
/// page then says how many are shown, as for a `truncated` reading.
pub fn html(url_path: &str, entries: &[Entry], truncated: bool, max_bytes: usize, view: View, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(b"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.extend_from_slice(b"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    out.extend_from_slice(b"<meta name=\"color-scheme\" content=\"light dark\">\n<title>Index of ");
    html_escape(url_path, out);
    out.extend_from_slice(b"</title>\n");
    out.extend_from_slice(HTML_STYLE.as_bytes());
    out.extend_from_slice(b"</head><body>\n<h1>");
    breadcrumbs(url_path, out);
    out.extend_from_slice(b"</h1>\n<nav>");
    let table = View { layout: Layout::Table, ..view };
    let gallery = View { layout: Layout::Gallery, ..view };
    for (i, (v, label)) in [(table, "Table"), (gallery, "Gallery")].into_iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b" \xc2\xb7 ");
        }
        if v == view {
            out.extend_from_slice(b"<strong>");
            out.extend_from_slice(label.as_bytes());
            out.extend_from_slice(b"</strong>");
        } else {
            out.extend_from_slice(b"<a href=\"");
            v.href(out);
            out.extend_from_slice(b"\">");
            out.extend_from_slice(label.as_bytes());
            out.extend_from_slice(b"</a>");
        }
    }
    if view.layout == Layout::Gallery {
        out.extend_from_slice(b" \xc2\xb7 sort by ");
        for (i, (sort, label)) in
            [(Sort::Name, "name"), (Sort::Size, "size"), (Sort::Date, "date")].into_iter().enumerate()
        {
            if i > 0 {
                out.extend_from_slice(b", ");
            }
            sort_link(view, sort, label, out);
        }
    }
    out.extend_from_slice(b"</nav>\n");
    let foot: &[u8] = match view.layout {
        Layout::Table => {
            out.extend_from_slice(b"<table>\n<thead><tr><th>");
            sort_link(view, Sort::Name, "Name", out);
            out.extend_from_slice(b"</th><th class=\"s\">");
            sort_link(view, Sort::Size, "Size", out);
            out.extend_from_slice(b"</th><th>");
            sort_link(view, Sort::Date, "Modified (UTC)", out);
            out.extend_from_slice(b"</th></tr></thead>\n<tbody>\n");
            if url_path != "/" {
                out.extend_from_slice(b"<tr><td><a href=\"../\">../</a></td><td class=\"s\">-</td><td></td></tr>\n");
            }
            b"</tbody></table>\n"
        }
        Layout::Gallery => {
            out.extend_from_slice(b"<ul class=\"g\">\n");
            if url_path != "/" {
                out.extend_from_slice(
                    b"<li><a href=\"../\"><span class=\"t\">..</span><span class=\"n\">../</span></a></li>\n",
                );
            }
            b"</ul>\n"
        }
    };
    let end = foot.len() + b"</body></html>\n".len();
    let mut order: Vec<&Entry> = entries.iter().collect();
    view.sort_entries(&mut order);
    let mut n = itoa::Buffer::new();
    let mut shown = order.len();
    for (i, e) in order.iter().enumerate() {
        let row = out.len();
        match view.layout {
            Layout::Table => table_row(e, out),
            Layout::Gallery => gallery_tile(e, out),
        }
        // Room for the footing: the short one after the last row of a complete listing.
        let room = if i + 1 == order.len() && !truncated { end } else { HTML_FOOT };
        if out.len() - start + room > max_bytes {
            out.truncate(row);
            shown = i;
            break;
        }
    }
    out.extend_from_slice(foot);
    if truncated || shown < entries.len() {
        out.extend_from_slice(b"<p class=\"more\">This directory has more entries; only ");
        out.extend_from_slice(n.format(shown).as_bytes());
        out.extend_from_slice(b" are shown.</p>\n");
    }
    out.extend_from_slice(b"</body></html>\n");
}

/// `/`, `a/`, `b/` of `/a/b/`, each a relative link to its directory but the last.
fn breadcrumbs(url_path: &str, out: &mut Vec<u8>) {
    let parts: Vec<&str> = url_path.split('/').filter(|s| !s.is_empty()).collect();
    let up = |levels: usize, out: &mut Vec<u8>| {
        if levels == 0 {
            out.extend_from_slice(b"./");
        }
        for _ in 0..levels {
            out.extend_from_slice(b"../");
        }
    };
    out.extend_from_slice(b"Index of ");
    if parts.is_empty() {
        out.push(b'/');
        return;
    }
    out.extend_from_slice(b"<a href=\"");
    up(parts.len(), out);
    out.extend_from_slice(b"\">/</a>");
    for (i, p) in parts.iter().enumerate() {
        let levels = parts.len() - 1 - i;
        if levels == 0 {
            html_escape(p, out);
            out.push(b'/');
        } else {
            out.extend_from_slice(b"<a href=\"");
            up(levels, out);
            out.extend_from_slice(b"\">");
            html_escape(p, out);
            out.extend_from_slice(b"</a>/");
        }
    }
}

/// A column heading (or the gallery's sort word): a link to this sort, ascending, or to the
/// other order if the view is sorted by it already, with an arrow for the current order.
fn sort_link(view: View, sort: Sort, label: &str, out: &mut Vec<u8>) {
    let current = view.sort == sort;
    let next = View { sort, descending: current && !view.descending, ..view };
    out.extend_from_slice(b"<a href=\"");
    next.href(out);
    out.extend_from_slice(b"\">");
    out.extend_from_slice(label.as_bytes());
    if current {
        out.extend_from_slice(if view.descending { " \u{2193}".as_bytes() } else { " \u{2191}".as_bytes() });
    }
    out.extend_from_slice(b"</a>");
}

fn entry_href(e: &Entry, out: &mut Vec<u8>) {
    percent_encode(&e.name, out);
    if e.is_dir {
        out.push(b'/');
    }
}

fn table_row(e: &Entry, out: &mut Vec<u8>) {
    out.extend_from_slice(b"<tr><td><a href=\"");
    entry_href(e, out);
    out.extend_from_slice(b"\">");
    html_escape(&e.name, out);
    if e.is_dir {
        out.extend_from_slice(b"/</a></td><td class=\"s\">-</td><td class=\"d\">");
    } else {
        out.extend_from_slice(b"</a></td><td class=\"s\" title=\"");
        out.extend_from_slice(itoa::Buffer::new().format(e.size).as_bytes());
        out.extend_from_slice(b" bytes\">");
        human_size(e.size, out);
        out.extend_from_slice(b"</td><td class=\"d\">");
    }
    utc_minutes(e.mtime, out);
    out.extend_from_slice(b"</td></tr>\n");
}

/// What a gallery tile shows for a file.
#[derive(Debug, PartialEq, Eq)]
enum Tile {
    Image,
    Video,
    Other,
}

fn tile_kind(name: &str) -> Tile {
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    let is = |list: &[&str]| list.iter().any(|x| x.eq_ignore_ascii_case(ext));
    if is(&["jpg", "jpeg", "png", "gif", "webp", "avif", "svg", "bmp", "ico", "apng"]) {
        Tile::Image
    } else if is(&["mp4", "m4v", "webm", "ogv", "mov", "mkv"]) {
        Tile::Video
    } else {
        Tile::Other
    }
}

fn gallery_tile(e: &Entry, out: &mut Vec<u8>) {
    out.extend_from_slice(b"<li><a href=\"");
    entry_href(e, out);
    out.extend_from_slice(b"\" title=\"");
    html_escape(&e.name, out);
    if !e.is_dir {
        out.extend_from_slice(b", ");
        human_size(e.size, out);
    }
    out.extend_from_slice(b"\">");
    let kind = if e.is_dir { Tile::Other } else { tile_kind(&e.name) };
    match kind {
        Tile::Image => {
            out.extend_from_slice(b"<img loading=\"lazy\" decoding=\"async\" alt=\"\" src=\"");
            percent_encode(&e.name, out);
            out.extend_from_slice(b"\">");
        }
        Tile::Video => out.extend_from_slice("<span class=\"t\">\u{25b6} video</span>".as_bytes()),
        // Words, not emoji: a system without an emoji font would show a box.
        Tile::Other if e.is_dir => out.extend_from_slice(b"<span class=\"t\">folder</span>"),
        Tile::Other => {
            out.extend_from_slice(b"<span class=\"t\">");
            match e.name.rsplit_once('.') {
                // A short extension as the tile's label; anything else a generic word.
                Some((stem, ext)) if !stem.is_empty() && (1..=5).contains(&ext.len()) => html_escape(ext, out),
                _ => out.extend_from_slice(b"file"),
            }
            out.extend_from_slice(b"</span>");
        }
    }
    out.extend_from_slice(b"<span class=\"n\">");
    html_escape(&e.name, out);
    if e.is_dir {
        out.push(b'/');
    }
    out.extend_from_slice(b"</span></a></li>\n");
}

/// Appends the listing as JSON:
/// `{"path":"/d/","truncated":false,"entries":[{"name":"a","type":"file","size":1,"mtime":2}]}`.
/// Entries that would take the output past `max_bytes` are left out, and `truncated` is then
/// true.
pub fn json<E: std::borrow::Borrow<Entry>>(
    url_path: &str,
    entries: &[E],
    truncated: bool,
    max_bytes: usize,
    out: &mut Vec<u8>,
) {
    const FOOT: usize = 3; // "]}\n"
    let start = out.len();
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(b"{\"path\":");
    json_string(url_path, out);
    let flag = out.len() + b",\"truncated\":".len();
    out.extend_from_slice(if truncated { b",\"truncated\":true" } else { b",\"truncated\":false" });
    out.extend_from_slice(b",\"entries\":[");
    for (i, e) in entries.iter().enumerate() {
        let e = e.borrow();
        let row = out.len();
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        json_string(&e.name, out);
        out.extend_from_slice(if e.is_dir { b",\"type\":\"dir\"" } else { b",\"type\":\"file\"" });
        out.extend_from_slice(b",\"size\":");
        out.extend_from_slice(n.format(e.size).as_bytes());
        out.extend_from_slice(b",\"mtime\":");
        out.extend_from_slice(n.format(e.mtime).as_bytes());
        out.push(b'}');
        if out.len() - start + FOOT > max_bytes {
            out.truncate(row);
            if !truncated {
                // `false` becomes `true`: one byte shorter.
                out[flag..flag + 4].copy_from_slice(b"true");
                out.remove(flag + 4);
            }
            break;
        }
    }
    out.extend_from_slice(b"]}\n");
}

/// `Content-Type` of [`html`] output.
pub const HTML_TYPE: &str = "text/html; charset=utf-8";
/// `Content-Type` of [`json`] output.
pub const JSON_TYPE: &str = "application/json";

/// The output format of a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Html,
    Json,
}

/// How an HTML listing lays its entries out: `?view=table` (the default) or `?view=gallery`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Table,
    Gallery,
}

/// What entries are ordered by: `?sort=name` (the default), `size` or `date` (mtime).
/// Directories always come first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    Name,
    Size,
    Date,
}

/// Which rendering of a directory's listing a request gets: everything the bytes depend on
/// besides the directory itself. It is a component of the listing's cache key and of its
/// ETag ([`View::key`]), so each (format, layout, order) is its own cached rendering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub format: Format,
    /// Always `Table` for JSON, which has no layout (one rendering, not two equal ones).
    pub layout: Layout,
    pub sort: Sort,
    pub descending: bool,
}

impl View {
    /// The default: HTML, a table, by name, ascending.
    pub const DEFAULT: View = View { format: Format::Html, layout: Layout::Table, sort: Sort::Name, descending: false };

    /// The view a request asks for: the format by [`wants_json`]; then the query's `view=`
    /// (`table`, `gallery`), `sort=` (`name`, `size`, `date`) and `order=` (`asc`, `desc`),
    /// pairs separated by `&` (or `;`). A value not in these lists, or a key given twice,
    /// leaves the default or the first value: never an error.
    pub fn from_request(query: &[u8], accept: Option<&[u8]>) -> View {
        let mut v = View::DEFAULT;
        if wants_json(query, accept) {
            v.format = Format::Json;
        }
        let (mut layout, mut sort, mut order) = (None, None, None);
        for pair in query.split(|&b| b == b'&' || b == b';') {
            let Some(eq) = pair.iter().position(|&b| b == b'=') else { continue };
            let (key, value) = (&pair[..eq], &pair[eq + 1..]);
            match key {
                b"view" => {
                    layout = layout.or(match value {
                        b"table" => Some(Layout::Table),
                        b"gallery" => Some(Layout::Gallery),
                        _ => None,
                    })
                }
                b"sort" => {
                    sort = sort.or(match value {
                        b"name" => Some(Sort::Name),
                        b"size" => Some(Sort::Size),
                        b"date" => Some(Sort::Date),
                        _ => None,
                    })
                }
                b"order" => {
                    order = order.or(match value {
                        b"asc" => Some(false),
                        b"desc" => Some(true),
                        _ => None,
                    })
                }
                _ => {}
            }
        }
        if v.format == Format::Html {
            v.layout = layout.unwrap_or(Layout::Table);
        }
        v.sort = sort.unwrap_or(Sort::Name);
        v.descending = order.unwrap_or(false);
        v
    }

    /// Appends the view's key: characters from `[a-z0-9]`, distinct for distinct views, fit
    /// for a cache key and inside an entity tag (`htna`: HTML, table, by name, ascending).
    pub fn key(&self, out: &mut String) {
        out.push(match self.format {
            Format::Html => 'h',
            Format::Json => 'j',
        });
        out.push(match self.layout {
            Layout::Table => 't',
            Layout::Gallery => 'g',
        });
        out.push(match self.sort {
            Sort::Name => 'n',
            Sort::Size => 's',
            Sort::Date => 'd',
        });
        out.push(if self.descending { 'd' } else { 'a' });
    }

    /// Appends a relative link to this HTML view of the same directory: `./` for the default,
    /// else `?` and the parameters that differ from it.
    fn href(&self, out: &mut Vec<u8>) {
        let mut params: Vec<&[u8]> = Vec::with_capacity(3);
        if self.layout == Layout::Gallery {
            params.push(b"view=gallery");
        }
        match self.sort {
            Sort::Name => {}
            Sort::Size => params.push(b"sort=size"),
            Sort::Date => params.push(b"sort=date"),
        }
        if self.descending {
            params.push(b"order=desc");
        }
        if params.is_empty() {
            out.extend_from_slice(b"./");
            return;
        }
        out.push(b'?');
        // `&amp;`: the link is inside an HTML attribute.
        out.extend_from_slice(&params.join(&b"&amp;"[..]));
    }

    /// Orders `entries` for this view: directories first, then by the key (names break
    /// ties), ascending or descending.
    fn sort_entries(&self, entries: &mut [&Entry]) {
        entries.sort_by(|a, b| {
            let by = match self.sort {
                Sort::Name => std::cmp::Ordering::Equal,
                Sort::Size => a.size.cmp(&b.size),
                Sort::Date => a.mtime.cmp(&b.mtime),
            };
            let by = by.then_with(|| a.name.as_bytes().cmp(b.name.as_bytes()));
            b.is_dir.cmp(&a.is_dir).then(if self.descending { by.reverse() } else { by })
        });
    }

    pub fn content_type(&self) -> &'static str {
        match self.format {
            Format::Html => HTML_TYPE,
            Format::Json => JSON_TYPE,
        }
    }

    /// Appends the listing in this view (see [`html`] and [`json`]).
    pub fn render(&self, url_path: &str, entries: &[Entry], truncated: bool, max_bytes: usize, out: &mut Vec<u8>) {
        match self.format {
            Format::Html => html(url_path, entries, truncated, max_bytes, *self, out),
            Format::Json => {
                let mut order: Vec<&Entry> = entries.iter().collect();
                self.sort_entries(&mut order);
                json(url_path, &order, truncated, max_bytes, out)
            }
        }
    }
}

/// The version of a directory's listing: what its rendering depends on, read from the
/// directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    /// A hash of the directory's identity (device, inode), of every entry listed (name,
    /// kind, size, mtime), of whether the reading was cut short, of the options (a reload
    /// can change the byte cap), and of this program's version (the templates). Equal hashes
    /// mean the same rendering for the same view.
    pub hash: u64,
    /// The latest mtime of the directory and its entries, seconds since the epoch.
    pub mtime: u64,
}

/// The [`Version`] of a directory with metadata `dir` and the entries read from it with
/// `opts`.
pub fn version(dir: &std::fs::Metadata, entries: &[Entry], truncated: bool, opts: &ListOptions) -> Version {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let mut h = std::hash::DefaultHasher::new();
    env!("CARGO_PKG_VERSION").hash(&mut h);
    (dir.dev(), dir.ino(), truncated, entries.len()).hash(&mut h);
    (opts.show_dotfiles, opts.max_entries, opts.max_bytes).hash(&mut h);
    let mut mtime = u64::try_from(dir.mtime()).unwrap_or(0);
    for e in entries {
        (&e.name, e.is_dir, e.size, e.mtime).hash(&mut h);
        mtime = mtime.max(e.mtime);
    }
    Version { hash: h.finish(), mtime }
}

/// Whether a listing request asks for JSON rather than HTML. `query` is the raw query string
/// (without `?`): `format=json` or `format=html` decides. Otherwise the `Accept` field does:
/// JSON only if it names `application/json` with a weight above that of HTML (`text/html`,
/// else `text/*`, else `*/*`), so browsers and `curl`'s `*/*` get HTML. A response that
/// depends on `Accept` should carry `Vary: Accept`.
pub fn wants_json(query: &[u8], accept: Option<&[u8]>) -> bool {
    for pair in query.split(|&b| b == b'&') {
        if pair == b"format=json" {
            return true;
        }
        if pair == b"format=html" {
            return false;
        }
    }
    let Some(accept) = accept else {
        return false;
    };
    let (mut json, mut html, mut text_any, mut any) = (None, None, None, None);
    for (range, q) in crate::http::weighted::items(accept) {
        let slot = if range.eq_ignore_ascii_case(b"application/json") {
            &mut json
        } else if range.eq_ignore_ascii_case(b"text/html") {
            &mut html
        } else if range.eq_ignore_ascii_case(b"text/*") {
            &mut text_any
        } else if range == b"*/*" {
            &mut any
        } else {
            continue;
        };
        *slot = Some(slot.map_or(q, |old: u16| old.max(q)));
    }
    let html = html.or(text_any).or(any).unwrap_or(0);
    json.is_some_and(|json| json > 0 && json > html)
}

fn html_escape(s: &str, out: &mut Vec<u8>) {
    for &b in s.as_bytes() {
        match b {
            b'&' => out.extend_from_slice(b"&amp;"),
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'"' => out.extend_from_slice(b"&quot;"),
            b'\'' => out.extend_from_slice(b"&#39;"),
            _ => out.push(b),
        }
    }
}

/// Percent-encodes every byte outside RFC 3986 `unreserved`.
fn percent_encode(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

fn json_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f | b'<' | b'>' | b'&' | 0x7f => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 15)]);
            }
            // UTF-8 passes through: JSON text is UTF-8.
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// `512 B`, `1.5 KiB`, `23 MiB`: one decimal below 10 units, none above. Written without
/// allocating: a listing renders two of these per entry.
fn human_size(size: u64, out: &mut Vec<u8>) {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut n = itoa::Buffer::new();
    if size < 1024 {
        out.extend_from_slice(n.format(size).as_bytes());
        out.extend_from_slice(b" B");
        return;
    }
    let mut unit = 0;
    let mut scaled = size as f64;
    while scaled >= 1024.0 && unit < UNITS.len() - 1 {
        scaled /= 1024.0;
        unit += 1;
    }
    let tenths = (scaled * 10.0).round() as u64;
    if tenths < 100 {
        out.extend_from_slice(n.format(tenths / 10).as_bytes());
        out.push(b'.');
        out.push(b'0' + (tenths % 10) as u8);
    } else {
        out.extend_from_slice(n.format(scaled.round() as u64).as_bytes());
    }
    out.push(b' ');
    out.extend_from_slice(UNITS[unit].as_bytes());
}

/// `YYYY-MM-DD HH:MM`, UTC.
fn utc_minutes(secs: u64, out: &mut Vec<u8>) {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = crate::http::date::civil_from_days(i64::try_from(days).unwrap_or(i64::MAX / 2));
    let two = |v: u64, out: &mut Vec<u8>| out.extend_from_slice(&[b'0' + (v / 10 % 10) as u8, b'0' + (v % 10) as u8]);
    match u64::try_from(y) {
        Ok(y) if y <= 9999 => {
            two(y / 100, out);
            two(y % 100, out);
        }
        _ => out.extend_from_slice(format!("{y:04}").as_bytes()),
    }
    out.push(b'-');
    two(u64::try_from(m).unwrap_or(0), out);
    out.push(b'-');
    two(u64::try_from(d).unwrap_or(0), out);
    out.push(b' ');
    two(rem / 3600, out);
    out.push(b':');
    two(rem / 60 % 60, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::fs;
    use std::os::unix::ffi::OsStrExt;

    /// Names files with bytes that are not UTF-8.
    fn os(b: &[u8]) -> &OsStr {
        OsStr::from_bytes(b)
    }

    fn opts(show_dotfiles: bool, max_entries: usize) -> ListOptions {
        ListOptions { show_dotfiles, max_entries, max_bytes: usize::MAX }
    }

    fn e(name: &str, is_dir: bool, size: u64, mtime: u64) -> Entry {
        Entry { name: name.to_owned(), is_dir, size, mtime }
    }

    fn names(v: &[Entry]) -> Vec<&str> {
        v.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn reads_sorted_filtered() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for f in ["b.txt", "a.txt", "B.txt", ".hidden", "z"] {
            fs::write(d.join(f), b"12345").unwrap();
        }
        fs::create_dir(d.join("zdir")).unwrap();
        fs::create_dir(d.join("adir")).unwrap();
        fs::create_dir(d.join(".git")).unwrap();
        std::os::unix::fs::symlink("a.txt", d.join("link")).unwrap();
        std::os::unix::fs::symlink("adir", d.join("dirlink")).unwrap();
        std::os::unix::fs::symlink("nowhere", d.join("dangling")).unwrap();
        fs::write(d.join(os(b"bad\xffname")), b"x").unwrap();
        let fifo = std::ffi::CString::new(d.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

        let (v, truncated) = read_dir(d, &opts(false, 100)).unwrap();
        assert!(!truncated);
        assert_eq!(names(&v), ["adir", "dirlink", "zdir", "B.txt", "a.txt", "b.txt", "link", "z"]);
        assert!(v[0].is_dir && v[1].is_dir && !v[3].is_dir);
        assert_eq!(v[0].size, 0);
        assert_eq!(v[3].size, 5);
        // The symlink reports its target's metadata.
        assert_eq!(v[6].size, 5);
        assert!(v[3].mtime > 1_600_000_000);

        let (v, _) = read_dir(d, &opts(true, 100)).unwrap();
        assert_eq!(names(&v), [".git", "adir", "dirlink", "zdir", ".hidden", "B.txt", "a.txt", "b.txt", "link", "z"]);
    }

    #[test]
    fn truncation() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..25 {
            fs::write(tmp.path().join(format!("f{i:02}")), b"").unwrap();
        }
        let (v, truncated) = read_dir(tmp.path(), &opts(false, 10)).unwrap();
        assert!(truncated);
        assert_eq!(v.len(), 10);
        assert!(v.windows(2).all(|w| w[0].name < w[1].name));
        let (v, truncated) = read_dir(tmp.path(), &opts(false, 25)).unwrap();
        assert!(!truncated);
        assert_eq!(v.len(), 25);
        let (v, truncated) = read_dir(tmp.path(), &opts(false, 0)).unwrap();
        assert!(truncated && v.is_empty());
        let empty = tempfile::tempdir().unwrap();
        let (v, truncated) = read_dir(empty.path(), &opts(false, 0)).unwrap();
        assert!(!truncated && v.is_empty());
    }

    #[test]
    fn from_o_path_descriptor() {
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("x"), b"abc").unwrap();
        let dir =
            fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_DIRECTORY).open(tmp.path()).unwrap();
        for _ in 0..2 {
            let (v, _) = read_dir_fd(dir.as_fd(), &opts(false, 10)).unwrap();
            assert_eq!(v, vec![e("x", false, 3, v[0].mtime)]);
        }
        assert!(read_dir(&tmp.path().join("x"), &opts(false, 10)).is_err());
        assert!(read_dir(&tmp.path().join("missing"), &opts(false, 10)).is_err());
    }

    #[test]
    fn html_escaping() {
        let entries = [
            e("d&<i>r", true, 4096, 0),
            e("<script>alert(1)</script>", false, 12, 1_700_000_000),
            e("a\"b'c&d", false, 2048, 86_400 * 365),
            e("100% #1?x=y", false, 5 * 1024 * 1024, 0),
            e("héllo wörld.txt", false, 0, 0),
            e("javascript:alert(1)", false, 1, 0),
        ];
        let mut out = Vec::new();
        html("/docs/<x>/", &entries, false, usize::MAX, View::DEFAULT, &mut out);
        let page = String::from_utf8(out).unwrap();
        assert!(page.contains("<title>Index of /docs/&lt;x&gt;/</title>"));
        assert!(page.contains("<a href=\"../\">../</a>"));
        assert!(page.contains("<a href=\"d%26%3Ci%3Er/\">d&amp;&lt;i&gt;r/</a>"));
        assert!(page
            .contains("<a href=\"%3Cscript%3Ealert%281%29%3C%2Fscript%3E\">&lt;script&gt;alert(1)&lt;/script&gt;</a>"));
        assert!(page.contains("<a href=\"a%22b%27c%26d\">a&quot;b&#39;c&amp;d</a>"));
        assert!(page.contains("<a href=\"100%25%20%231%3Fx%3Dy\">100% #1?x=y</a>"));
        assert!(page.contains("<a href=\"h%C3%A9llo%20w%C3%B6rld.txt\">héllo wörld.txt</a>"));
        assert!(page.contains("<a href=\"javascript%3Aalert%281%29\">"));
        assert!(!page.contains("<script>"));
        assert!(page.contains("<td class=\"s\" title=\"12 bytes\">12 B</td><td class=\"d\">2023-11-14 22:13</td>"));
        assert!(page.contains("title=\"2048 bytes\">2.0 KiB</td><td class=\"d\">1971-01-01 00:00</td>"));
        assert!(page.contains("title=\"5242880 bytes\">5.0 MiB</td>"));
        assert!(page.contains("d&amp;&lt;i&gt;r/</a></td><td class=\"s\">-</td><td class=\"d\">1970-01-01 00:00</td>"));
        assert!(!page.contains("more entries"));
        // Directories come first in the table as given.
        assert!(page.find("d&amp;").unwrap() < page.find("&lt;script").unwrap());

        let mut out = Vec::new();
        html("/", &[], true, usize::MAX, View::DEFAULT, &mut out);
        let page = String::from_utf8(out).unwrap();
        assert!(!page.contains("../"));
        assert!(page.contains("only 0 are shown"));
    }

    #[test]
    fn renderings_are_cut_at_max_bytes() {
        let entries: Vec<Entry> = (0..200).map(|i| e(&format!("file-{i:03}.txt"), false, i, 0)).collect();
        let mut full = Vec::new();
        html("/d/", &entries, false, usize::MAX, View::DEFAULT, &mut full);
        for limit in [4096, 5000, 8000, full.len() - 1] {
            let mut out = b"prefix".to_vec();
            html("/d/", &entries, false, limit, View::DEFAULT, &mut out);
            let page = String::from_utf8(out[6..].to_vec()).unwrap();
            assert!(page.len() <= limit, "{} > {limit}", page.len());
            let rows = page.matches("<tr><td><a href=\"file-").count();
            assert!(rows < 200);
            assert!(page.contains(&format!("only {rows} are shown.")), "{page}");
            assert!(page.ends_with(" are shown.</p>\n</body></html>\n"), "{page}");
        }
        let mut out = Vec::new();
        html("/d/", &entries, false, full.len(), View::DEFAULT, &mut out);
        assert_eq!(out, full, "a limit the page fits in changes nothing");

        let mut full = Vec::new();
        json("/d/", &entries, false, usize::MAX, &mut full);
        for limit in [100, 1000, full.len() - 1] {
            let mut out = Vec::new();
            json("/d/", &entries, false, limit, &mut out);
            assert!(out.len() <= limit, "{} > {limit}", out.len());
            let text = String::from_utf8(out).unwrap();
            let Json::Obj(fields) = parse_json(&text) else { panic!("object") };
            assert_eq!(fields[1], ("truncated".to_owned(), Json::Bool(true)), "{text}");
        }
        let mut out = Vec::new();
        json("/d/", &entries, false, full.len(), &mut out);
        assert_eq!(out, full);
    }

    #[test]
    fn versions_follow_the_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = fs::metadata(tmp.path()).unwrap();
        let a = [e("a", false, 1, 100), e("b", true, 0, 200)];
        let o = opts(false, 100);
        let v = version(&meta, &a, false, &o);
        assert_eq!(v, version(&meta, &a, false, &o));
        assert_eq!(v.mtime, 200.max(meta.modified().unwrap().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()));
        for changed in [
            [e("a", false, 2, 100), e("b", true, 0, 200)],
            [e("a", false, 1, 101), e("b", true, 0, 200)],
            [e("a", true, 1, 100), e("b", true, 0, 200)],
            [e("c", false, 1, 100), e("b", true, 0, 200)],
        ] {
            assert_ne!(v.hash, version(&meta, &changed, false, &o).hash, "{changed:?}");
        }
        assert_ne!(v.hash, version(&meta, &a, true, &o).hash);
        let cut = ListOptions { max_bytes: 4096, ..opts(false, 100) };
        assert_ne!(v.hash, version(&meta, &a, false, &cut).hash, "another byte cap renders differently");
        assert_ne!(v.hash, version(&meta, &a[..1], false, &o).hash);
        let other = fs::metadata(tmp.path().parent().unwrap()).unwrap();
        assert_ne!(v.hash, version(&other, &a, false, &o).hash, "another directory");
        let mut k = String::new();
        View::DEFAULT.key(&mut k);
        View { format: Format::Json, ..View::DEFAULT }.key(&mut k);
        assert_eq!(k, "htnajtna");
        assert_eq!(View::from_request(b"format=json", None).content_type(), JSON_TYPE);
        assert_eq!(View::from_request(b"", Some(b"*/*")).content_type(), HTML_TYPE);
    }

    #[test]
    fn views_from_queries() {
        let v = |q: &str| View::from_request(q.as_bytes(), None);
        assert_eq!(v(""), View::DEFAULT);
        let g = v("view=gallery&sort=size&order=desc");
        assert_eq!((g.format, g.layout, g.sort, g.descending), (Format::Html, Layout::Gallery, Sort::Size, true));
        assert_eq!(v("sort=date;order=desc"), View { sort: Sort::Date, descending: true, ..View::DEFAULT });
        // Unknown keys and values, odd bytes: the default, never an error.
        for q in
            ["view=grid", "sort=SIZE", "order=up", "sort", "=", "&&;;", "view=gallery%00", "sort=size\u{0}", "C=N;O=D"]
        {
            assert_eq!(v(q), View::DEFAULT, "{q:?}");
        }
        // The first valid value of a key wins.
        assert_eq!(v("sort=size&sort=date").sort, Sort::Size);
        assert_eq!(v("sort=bogus&sort=date").sort, Sort::Date);
        // JSON has no layout, but has an order.
        let j = v("format=json&view=gallery&sort=date");
        assert_eq!((j.format, j.layout, j.sort), (Format::Json, Layout::Table, Sort::Date));
        // Keys are distinct for distinct views.
        let mut keys = std::collections::HashSet::new();
        for format in [Format::Html, Format::Json] {
            for layout in [Layout::Table, Layout::Gallery] {
                for sort in [Sort::Name, Sort::Size, Sort::Date] {
                    for descending in [false, true] {
                        let mut k = String::new();
                        View { format, layout, sort, descending }.key(&mut k);
                        assert!(k.bytes().all(|b| b.is_ascii_lowercase()));
                        keys.insert(k);
                    }
                }
            }
        }
        assert_eq!(keys.len(), 24);
    }

    /// The names of a rendered table or gallery, in page order.
    fn names_in(page: &str, marker: &str) -> Vec<String> {
        page.split(marker).skip(1).map(|s| s[..s.find('<').unwrap()].trim_end_matches('/').to_string()).collect()
    }

    #[test]
    fn sorted_every_way() {
        let entries = [
            e("b.txt", false, 10, 300),
            e("a.txt", false, 30, 100),
            e("c.txt", false, 20, 200),
            e("zdir", true, 0, 50),
            e("adir", true, 0, 400),
        ];
        let cases = [
            (Sort::Name, false, ["adir", "zdir", "a.txt", "b.txt", "c.txt"]),
            (Sort::Name, true, ["zdir", "adir", "c.txt", "b.txt", "a.txt"]),
            (Sort::Size, false, ["adir", "zdir", "b.txt", "c.txt", "a.txt"]),
            (Sort::Size, true, ["zdir", "adir", "a.txt", "c.txt", "b.txt"]),
            (Sort::Date, false, ["zdir", "adir", "a.txt", "c.txt", "b.txt"]),
            (Sort::Date, true, ["adir", "zdir", "b.txt", "c.txt", "a.txt"]),
        ];
        for (sort, descending, want) in cases {
            for layout in [Layout::Table, Layout::Gallery] {
                let view = View { format: Format::Html, layout, sort, descending };
                let mut out = Vec::new();
                view.render("/d/", &entries, false, usize::MAX, &mut out);
                let page = String::from_utf8(out).unwrap();
                let marker = if layout == Layout::Table { "<tr><td><a href=\"" } else { "<span class=\"n\">" };
                let names: Vec<String> = names_in(&page, marker)
                    .into_iter()
                    .map(|n| n.split('"').next().unwrap().trim_end_matches('/').to_string())
                    .filter(|n| n != "..")
                    .collect();
                assert_eq!(names, want, "{view:?}");
            }
            let mut out = Vec::new();
            View { format: Format::Json, layout: Layout::Table, sort, descending }.render(
                "/d/",
                &entries,
                false,
                usize::MAX,
                &mut out,
            );
            let text = String::from_utf8(out).unwrap();
            let got: Vec<&str> = text.split("\"name\":\"").skip(1).map(|s| &s[..s.find('"').unwrap()]).collect();
            assert_eq!(got, want, "JSON {sort:?} {descending}");
        }
    }

    #[test]
    fn headings_breadcrumbs_and_view_links() {
        let entries = [e("a.txt", false, 1, 1)];
        let render = |view: View, path: &str| {
            let mut out = Vec::new();
            html(path, &entries, false, usize::MAX, view, &mut out);
            String::from_utf8(out).unwrap()
        };
        let page = render(View::DEFAULT, "/a b/<c>/");
        assert!(
            page.contains("<h1>Index of <a href=\"../../\">/</a><a href=\"../\">a b</a>/&lt;c&gt;/</h1>"),
            "{page}"
        );
        // Sorted by name ascending: its heading flips the order; the others start ascending.
        assert!(page.contains("<a href=\"?order=desc\">Name \u{2191}</a>"), "{page}");
        assert!(page.contains("<a href=\"?sort=size\">Size</a>"));
        assert!(page.contains("<a href=\"?sort=date\">Modified (UTC)</a>"));
        assert!(page.contains("<strong>Table</strong> \u{b7} <a href=\"?view=gallery\">Gallery</a>"));
        assert!(page.contains("prefers-color-scheme:dark"));
        assert!(!page.contains("<script"));
        let g = View { layout: Layout::Gallery, sort: Sort::Size, descending: true, ..View::DEFAULT };
        let page = render(g, "/");
        assert!(page.contains("<h1>Index of /</h1>"));
        assert!(
            page.contains("<a href=\"?sort=size&amp;order=desc\">Table</a> \u{b7} <strong>Gallery</strong>"),
            "{page}"
        );
        assert!(page.contains("<a href=\"?view=gallery&amp;sort=size\">size \u{2193}</a>"), "{page}");
        assert!(page.contains("<a href=\"?view=gallery\">name</a>"), "{page}");
        assert!(!page.contains("href=\"../\""), "no parent at the root");
    }

    #[test]
    fn gallery_tiles_and_escaping() {
        let entries = [
            e("sub", true, 0, 0),
            e("a\"b'<c>&d.JPG", false, 1, 0),
            e("100% x.png", false, 1, 0),
            e("clip.webm", false, 1, 0),
            e("notes.txt", false, 1, 0),
            e("README", false, 1, 0),
            e("javascript:alert(1).svg", false, 1, 0),
        ];
        let mut out = Vec::new();
        html("/p/", &entries, false, usize::MAX, View { layout: Layout::Gallery, ..View::DEFAULT }, &mut out);
        let page = String::from_utf8(out).unwrap();
        assert_eq!(page.matches("<img ").count(), 3, "{page}");
        assert_eq!(page.matches("<img loading=\"lazy\" decoding=\"async\" alt=\"\" src=\"").count(), 3);
        assert!(
            page.contains("src=\"a%22b%27%3Cc%3E%26d.JPG\"><span class=\"n\">a&quot;b&#39;&lt;c&gt;&amp;d.JPG</span>"),
            "{page}"
        );
        assert!(page.contains("title=\"a&quot;b&#39;&lt;c&gt;&amp;d.JPG, 1 B\""));
        assert!(page.contains("src=\"100%25%20x.png\""));
        assert!(page.contains("src=\"javascript%3Aalert%281%29.svg\""));
        assert!(page.contains("<span class=\"t\">\u{25b6} video</span><span class=\"n\">clip.webm</span>"));
        assert!(page.contains("<span class=\"t\">txt</span><span class=\"n\">notes.txt</span>"));
        assert!(page.contains("<span class=\"t\">file</span><span class=\"n\">README</span>"));
        assert!(page
            .contains("<a href=\"sub/\" title=\"sub\"><span class=\"t\">folder</span><span class=\"n\">sub/</span>"));
        assert!(page.contains("<a href=\"../\"><span class=\"t\">..</span>"));
        assert!(!page.contains("<c>") && !page.contains("<script"));
        assert_eq!(tile_kind("x.AVIF"), Tile::Image);
        assert_eq!(tile_kind("jpg"), Tile::Other);
    }

    #[test]
    fn sizes_and_dates() {
        let f = |n| {
            let mut v = Vec::new();
            human_size(n, &mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(f(0), "0 B");
        assert_eq!(f(1023), "1023 B");
        assert_eq!(f(1024), "1.0 KiB");
        assert_eq!(f(1536), "1.5 KiB");
        assert_eq!(f(10 * 1024), "10 KiB");
        // Just under 10 units rounds to 10, written as the sizes above 10 are.
        assert_eq!(f(10_199), "10 KiB");
        assert_eq!(f(10 * 1024 * 1024 - 1), "10 MiB");
        assert_eq!(f(u64::MAX), "16 EiB");
        let t = |s| {
            let mut v = Vec::new();
            utc_minutes(s, &mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(t(0), "1970-01-01 00:00");
        assert_eq!(t(784_111_777), "1994-11-06 08:49");
        assert_eq!(t(951_782_400), "2000-02-29 00:00");
        assert_eq!(t(253_402_300_799), "9999-12-31 23:59");
        let _ = t(u64::MAX / 2);
    }

    /// A minimal JSON parser, enough to check the listing is valid JSON and round-trips.
    #[derive(Debug, PartialEq)]
    enum Json {
        Bool(bool),
        Num(u64),
        Str(String),
        Arr(Vec<Json>),
        Obj(Vec<(String, Json)>),
    }

    fn parse_json(s: &str) -> Json {
        let mut p = s.trim_end().as_bytes();
        let v = value(&mut p);
        assert!(p.is_empty(), "trailing bytes: {:?}", String::from_utf8_lossy(p));
        v
    }

    fn eat(p: &mut &[u8], c: u8) {
        assert_eq!(p.first(), Some(&c), "expected {:?} at {:?}", c as char, String::from_utf8_lossy(p));
        *p = &p[1..];
    }

    fn value(p: &mut &[u8]) -> Json {
        match p.first().copied() {
            Some(b'{') => {
                eat(p, b'{');
                let mut fields = Vec::new();
                if p.first() == Some(&b'}') {
                    eat(p, b'}');
                    return Json::Obj(fields);
                }
                loop {
                    let Json::Str(k) = value(p) else { panic!("key") };
                    eat(p, b':');
                    fields.push((k, value(p)));
                    if p.first() == Some(&b',') {
                        eat(p, b',');
                    } else {
                        eat(p, b'}');
                        return Json::Obj(fields);
                    }
                }
            }
            Some(b'[') => {
                eat(p, b'[');
                let mut items = Vec::new();
                if p.first() == Some(&b']') {
                    eat(p, b']');
                    return Json::Arr(items);
                }
                loop {
                    items.push(value(p));
                    if p.first() == Some(&b',') {
                        eat(p, b',');
                    } else {
                        eat(p, b']');
                        return Json::Arr(items);
                    }
                }
            }
            Some(b'"') => {
                eat(p, b'"');
                let mut buf = Vec::new();
                loop {
                    let c = p[0];
                    *p = &p[1..];
                    match c {
                        b'"' => return Json::Str(String::from_utf8(buf).unwrap()),
                        b'\\' => {
                            let esc = p[0];
                            *p = &p[1..];
                            match esc {
                                b'"' => buf.push(b'"'),
                                b'\\' => buf.push(b'\\'),
                                b'/' => buf.push(b'/'),
                                b'n' => buf.push(b'\n'),
                                b'r' => buf.push(b'\r'),
                                b't' => buf.push(b'\t'),
                                b'b' => buf.push(8),
                                b'f' => buf.push(12),
                                b'u' => {
                                    let hex = std::str::from_utf8(&p[..4]).unwrap();
                                    let cp = u32::from_str_radix(hex, 16).unwrap();
                                    *p = &p[4..];
                                    let ch = char::from_u32(cp).unwrap();
                                    buf.extend_from_slice(ch.to_string().as_bytes());
                                }
                                other => panic!("bad escape {other}"),
                            }
                        }
                        0..=0x1f => panic!("raw control character in string"),
                        _ => buf.push(c),
                    }
                }
            }
            Some(b't') => {
                *p = p.strip_prefix(b"true").unwrap();
                Json::Bool(true)
            }
            Some(b'f') => {
                *p = p.strip_prefix(b"false").unwrap();
                Json::Bool(false)
            }
            Some(b'0'..=b'9') => {
                let n = p.iter().take_while(|b| b.is_ascii_digit()).count();
                let v = std::str::from_utf8(&p[..n]).unwrap().parse().unwrap();
                *p = &p[n..];
                Json::Num(v)
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn json_or_html() {
        assert!(wants_json(b"format=json", None));
        assert!(wants_json(b"a=1&format=json", Some(b"text/html")));
        assert!(!wants_json(b"format=html", Some(b"application/json")));
        assert!(!wants_json(b"", None));
        assert!(!wants_json(b"format=JSONP", None));
        assert!(wants_json(b"", Some(b"application/json")));
        assert!(wants_json(b"", Some(b"Application/JSON, */*;q=0.1")));
        assert!(!wants_json(b"", Some(b"*/*")));
        assert!(!wants_json(b"", Some(b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")));
        assert!(!wants_json(b"", Some(b"application/json, text/html")));
        assert!(wants_json(b"", Some(b"application/json, text/html;q=0.5")));
        assert!(!wants_json(b"", Some(b"application/json;q=0")));
        assert!(!wants_json(b"", Some(b"application/json;q=2")));
        assert!(!wants_json(b"", Some(b"application/json;q=0.5, text/*")));
    }

    #[test]
    fn json_exact_and_valid() {
        let mut out = Vec::new();
        json("/a/", &[e("d", true, 0, 1), e("f", false, 2, 3)], false, usize::MAX, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"path\":\"/a/\",\"truncated\":false,\"entries\":[\
             {\"name\":\"d\",\"type\":\"dir\",\"size\":0,\"mtime\":1},\
             {\"name\":\"f\",\"type\":\"file\",\"size\":2,\"mtime\":3}]}\n"
        );
        let mut out = Vec::new();
        json::<Entry>("/", &[], true, usize::MAX, &mut out);
        assert_eq!(out, b"{\"path\":\"/\",\"truncated\":true,\"entries\":[]}\n");

        let tricky = [
            "<script>\"x\"</script>",
            "back\\slash",
            "tab\there\nnew\rline\u{1}\u{1f}\u{7f}",
            "héllo ✓ 𝄞",
            "a&b %2F #?",
            "\u{2028}",
        ];
        let entries: Vec<Entry> = tricky.iter().map(|n| e(n, false, u64::MAX, 0)).collect();
        let mut out = Vec::new();
        json("/\"q\"/", &entries, false, usize::MAX, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('&'));
        let Json::Obj(fields) = parse_json(&text) else { panic!("object") };
        assert_eq!(fields[0], ("path".to_owned(), Json::Str("/\"q\"/".to_owned())));
        assert_eq!(fields[1], ("truncated".to_owned(), Json::Bool(false)));
        let Json::Arr(items) = &fields[2].1 else { panic!("array") };
        for (item, name) in items.iter().zip(tricky) {
            let Json::Obj(f) = item else { panic!("entry") };
            assert_eq!(f[0], ("name".to_owned(), Json::Str(name.to_owned())));
            assert_eq!(f[1], ("type".to_owned(), Json::Str("file".to_owned())));
            assert_eq!(f[2], ("size".to_owned(), Json::Num(u64::MAX)));
        }
    }
}
