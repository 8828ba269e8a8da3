//! Path safety: from the path of a request target to an open file under the document root.
//!
//! Two steps, both pure with respect to the request (no state kept between requests):
//!
//! 1. [`normalize`] percent-decodes the path exactly once and removes dot segments
//!    (RFC 3986 §5.2.4). Its output starts with `/`, is valid UTF-8, and has no empty, `.` or
//!    `..` segment, no NUL or other control byte and no backslash. A `..` that would climb above
//!    the root is a 400, never clamped. Dot segments are recognised *after* decoding, so `%2e%2e`
//!    is `..`, and `%2F` decodes to `/` and then separates segments: a file name cannot hold a
//!    `/`, so there is no file it could otherwise name, and treating it as data would only give
//!    a second spelling of `..` a chance to slip through.
//! 2. [`resolve`] maps that path to a file. Every open is relative to the root's directory
//!    descriptor ([`DocRoot`]), never by a string-built absolute path. The symlink policy is
//!    enforced by the kernel with `openat2(2)` (`RESOLVE_BENEATH`, `RESOLVE_NO_SYMLINKS`) where it
//!    exists; where it does not (kernel < 5.6, or a seccomp filter answering `EPERM`/`ENOSYS`),
//!    portable code that is just as strict takes over and the answer is remembered.
//!
//! Invariants of [`resolve`]:
//! - Under [`SymlinkPolicy::WithinRoot`] and [`SymlinkPolicy::Deny`], any file it returns is
//!   inside the document root (its canonical path starts with the root's canonical path); under
//!   `Deny` no symlink was followed to reach it. Only [`SymlinkPolicy::Follow`] may leave the root,
//!   and only through a symlink the administrator put there.
//! - It returns only regular files, opened `O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY`, with
//!   their metadata from `fstat` of that same descriptor (no stat-then-open race). `O_NONBLOCK`
//!   means a FIFO in the tree can never block the event loop; it has no effect on reads from a
//!   regular file.
//! - It never panics on request input.

use std::ffi::{CStr, CString};
use std::fmt;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

/// What to do with symbolic links met while resolving a request path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SymlinkPolicy {
    /// Follow symlinks as long as the final file is inside the document root (`"within-root"`).
    WithinRoot,
    /// Follow every symlink, wherever it leads (`"follow"`).
    Follow,
    /// Refuse any path that meets a symlink (`"deny"`).
    Deny,
}

/// Whether path components starting with `.` may be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DotfilePolicy {
    /// Refuse them with 403, except a first component `.well-known` (RFC 8615).
    Deny,
    /// Serve them like any other file.
    Allow,
}

/// Why a request path could not be mapped to a file.
#[derive(Debug)]
pub enum ResolveError {
    /// The path is malformed: bad escape, NUL, control byte, backslash, invalid UTF-8, or it
    /// climbs above the root.
    BadRequest,
    /// The file exists (or might) but policy or permissions refuse it.
    Forbidden,
    /// There is no such file.
    NotFound,
    /// An unexpected error from the filesystem (e.g. `EMFILE`, `EIO`).
    Io(io::Error),
}

impl ResolveError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> u16 {
        match self {
            ResolveError::BadRequest => 400,
            ResolveError::Forbidden => 403,
            ResolveError::NotFound => 404,
            ResolveError::Io(_) => 500,
        }
    }
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::BadRequest => f.write_str("malformed request path"),
            ResolveError::Forbidden => f.write_str("access to path forbidden"),
            ResolveError::NotFound => f.write_str("no such file"),
            ResolveError::Io(err) => write!(f, "filesystem error: {err}"),
        }
    }
}

impl std::error::Error for ResolveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ResolveError::Io(err) => Some(err),
            _ => None,
        }
    }
}

/// Percent-decode the path part of a request target (no query: the caller strips `?...`)
/// exactly once, and normalize it into `out` (cleared first; its capacity is reused).
///
/// - `raw` must start with `/`.
/// - `%XX` with two hex digits decodes; a malformed escape (`%`, `%4`, `%zz`) is refused.
/// - NUL and other control bytes (< 0x20, 0x7f), raw or decoded, are refused, and so is a
///   backslash (`\` or `%5C`). The decoded bytes must be valid UTF-8.
/// - Repeated `/` collapse (before `..` applies, as in the filesystem: `/a//../b` is `/b`),
///   `.` segments go, `..` removes the previous segment; a `..` that would climb above the root
///   is refused. Dot segments are recognised after decoding (`%2e%2e` is
///   `..`), and `%2F` is a separator once decoded.
/// - A trailing slash is kept (`/a/b/`, and `/a/b/..` gives `/a/`); the output starts with `/`.
///
/// Every refusal is [`ResolveError::BadRequest`]; on error `out` is left empty.
pub fn normalize(raw: &[u8], out: &mut String) -> Result<(), ResolveError> {
    let mut buf = std::mem::take(out).into_bytes();
    buf.clear();
    let result = decode_and_normalize(raw, &mut buf);
    if result.is_err() {
        buf.clear();
    }
    // `decode_and_normalize` checked the decoded bytes are UTF-8, and removing whole segments
    // split at ASCII '/' keeps them so; this cannot fail, but stays a checked conversion.
    match String::from_utf8(buf) {
        Ok(s) => {
            *out = s;
            result
        }
        Err(_) => Err(ResolveError::BadRequest),
    }
}

/// [`normalize`] for a path that is already a `str` (a request's): one that normalizing
/// would leave as it is (the usual case) is copied without decoding or the UTF-8 check.
pub fn normalize_str(raw: &str, out: &mut String) -> Result<(), ResolveError> {
    if already_normal(raw.as_bytes()) {
        out.clear();
        out.push_str(raw);
        return Ok(());
    }
    normalize(raw.as_bytes(), out)
}

/// True when [`normalize`] returns `raw` unchanged, and `raw` is UTF-8: it starts with `/`,
/// has nothing to decode or refuse, and no empty or dot segment but a last empty one (`/`
/// followed by `/` or `.` sends it the long way, `/.well-known` included).
fn already_normal(raw: &[u8]) -> bool {
    if raw.first() != Some(&b'/') {
        return false;
    }
    // One table look-up per byte; only a `/` needs a look at the byte after it.
    raw.iter().enumerate().all(|(i, &b)| match LONG_WAY[usize::from(b)] {
        Way::Plain => true,
        Way::Slash => !matches!(raw.get(i + 1), Some(b'/' | b'.')),
        Way::Long => false,
    })
}

/// What a byte of a path means for [`already_normal`].
#[derive(Clone, Copy)]
enum Way {
    Plain,
    /// `/`: an empty or dot segment follows if the next byte is `/` or `.`.
    Slash,
    /// A control byte, DEL, `\` or `%`: the path is decoded and checked the long way.
    Long,
}

const LONG_WAY: [Way; 256] = {
    let mut t = [Way::Plain; 256];
    let mut b = 0;
    while b < 256 {
        if b < 0x20 || b == 0x7f || b == b'\\' as usize || b == b'%' as usize {
            t[b] = Way::Long;
        }
        b += 1;
    }
    t[b'/' as usize] = Way::Slash;
    t
};

fn decode_and_normalize(raw: &[u8], buf: &mut Vec<u8>) -> Result<(), ResolveError> {
    if raw.first() != Some(&b'/') {
        return Err(ResolveError::BadRequest);
    }
    buf.reserve(raw.len());
    let mut any = 0u8;
    let mut i = 0;
    while let Some(&c) = raw.get(i) {
        let byte = if c == b'%' {
            let hi = raw.get(i + 1).and_then(|&h| hex_value(h));
            let lo = raw.get(i + 2).and_then(|&l| hex_value(l));
            match (hi, lo) {
                (Some(hi), Some(lo)) => {
                    i += 3;
                    (hi << 4) | lo
                }
                _ => return Err(ResolveError::BadRequest),
            }
        } else {
            i += 1;
            c
        };
        if byte < 0x20 || byte == 0x7f || byte == b'\\' {
            return Err(ResolveError::BadRequest);
        }
        any |= byte;
        buf.push(byte);
    }
    // ASCII is UTF-8; only a path with a byte above 0x7f needs the check.
    if any >= 0x80 && std::str::from_utf8(buf).is_err() {
        return Err(ResolveError::BadRequest);
    }
    remove_dot_segments(buf)
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Remove empty, `.` and `..` segments from `buf` (which starts with `/`) in place.
///
/// The output so far is `buf[..w]`: empty for the root, else `/seg/seg` with no trailing
/// slash. Each segment is read at `r`, just after its '/', and `w <= r - 1` always holds, so
/// writing `'/' + segment` at `w` never overwrites bytes not yet read.
fn remove_dot_segments(buf: &mut Vec<u8>) -> Result<(), ResolveError> {
    let len = buf.len();
    let mut w = 0;
    let mut r = 1;
    let mut trailing_slash;
    loop {
        let end = buf[r..].iter().position(|&c| c == b'/').map_or(len, |p| r + p);
        match &buf[r..end] {
            b"" | b"." => trailing_slash = true,
            b".." => {
                if w == 0 {
                    return Err(ResolveError::BadRequest);
                }
                w = buf[..w].iter().rposition(|&c| c == b'/').unwrap_or(0);
                trailing_slash = true;
            }
            _ => {
                buf[w] = b'/';
                buf.copy_within(r..end, w + 1);
                w += 1 + (end - r);
                trailing_slash = false;
            }
        }
        if end >= len {
            break;
        }
        r = end + 1;
    }
    buf.truncate(w);
    // The last segment was empty or a dot segment (this includes the bare root).
    if trailing_slash {
        buf.push(b'/');
    }
    Ok(())
}

/// The document root, opened once at start-up.
///
/// Holds an `O_PATH | O_DIRECTORY` descriptor that every request is resolved against, and the
/// canonical path, used only by the `WithinRoot` slow path (an absolute symlink must be
/// compared against it) and for messages. If the root directory is renamed while the server
/// runs, the descriptor still names it; the slow path then refuses absolute symlinks.
#[derive(Debug)]
pub struct DocRoot {
    fd: OwnedFd,
    path: PathBuf,
}

impl DocRoot {
    /// Canonicalize `path` and open it as the document root; an error if it is not a directory.
    pub fn open(path: &Path) -> io::Result<DocRoot> {
        let path = std::fs::canonicalize(path)?;
        // std adds O_CLOEXEC and keeps O_RDONLY as the access mode, which O_PATH ignores.
        let dir = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_DIRECTORY).open(&path)?;
        Ok(DocRoot { fd: OwnedFd::from(dir), path })
    }

    /// The canonical path of the root.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// How [`resolve`] looks files up.
pub struct ResolveOptions<'a> {
    pub symlinks: SymlinkPolicy,
    pub dotfiles: DotfilePolicy,
    /// Index file names tried in order for a directory, e.g. `["index.html", "index.htm"]`.
    /// A name that is empty, contains `/` or NUL, or is `.`/`..` is ignored; under
    /// [`DotfilePolicy::Deny`] so is a name starting with `.`.
    pub index: &'a [String],
    /// Leading segments of the path that name the site's directory and are not part of the
    /// URL (thttpd `-v`: 1, the host directory). The `.well-known` exemption applies to the
    /// first segment after them.
    pub site_depth: usize,
}

/// What a request path resolved to.
// `Metadata` makes `File` ~200 bytes against an empty `Redirect`; the value is returned once
// per request and destructured at once, so boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Resolved {
    /// A regular file, opened read-only. `url_path` is the normalized URL path of the file
    /// actually served (for a directory, the index file: `/docs/index.html`), used for MIME
    /// lookup and logging.
    File { file: File, meta: Metadata, url_path: String },
    /// A directory was requested without its trailing slash; the caller answers 301 to the
    /// slash form.
    Redirect,
    /// A directory requested with its trailing slash that has no index file; the caller
    /// lists it (when listings are on) or answers 403.
    Directory { dir: File, meta: Metadata },
}

/// Where an opened file really is, for the policies that follow the resolved path rather
/// than the URL (thttpd checks `.htpasswd` next to the file a symlink leads to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RealPath {
    /// Where the URL path says.
    Same,
    /// Elsewhere (reached through a symlink): relative to the root, or absolute when outside
    /// it (`symlinks = "follow"`).
    Other(Box<Path>),
    /// Could not be confirmed (no `/proc`, and the path did not lead to the same file): the
    /// policies that need it fail closed.
    Unknown,
}

/// Finds where `file`, opened by [`resolve`] for the URL path `url_path`, really is: the
/// kernel's name for the descriptor (`/proc/self/fd`), else the canonical path of
/// `root/url_path`; either is accepted only if it names the same file (device and inode).
pub fn real_path(root: &DocRoot, url_path: &str, file: &File, meta: &Metadata) -> RealPath {
    use std::os::unix::fs::MetadataExt;
    let rel = Path::new(url_path.trim_start_matches('/'));
    let same_file = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino());
    let by_fd = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok().filter(|p| p.is_absolute());
    let found = by_fd
        .filter(|p| same_file(p))
        .or_else(|| std::fs::canonicalize(root.path.join(rel)).ok().filter(|p| same_file(p)));
    let Some(found) = found else { return RealPath::Unknown };
    match found.strip_prefix(&root.path) {
        Ok(inside) if inside == rel => RealPath::Same,
        Ok(inside) => RealPath::Other(inside.into()),
        Err(_) => RealPath::Other(found.into_boxed_path()),
    }
}

/// Map a normalized path (from [`normalize`]) to a file under the root.
///
/// - A component starting with `.` is [`ResolveError::Forbidden`] under
///   [`DotfilePolicy::Deny`], except a first component `.well-known` (the first after the
///   site's directory, [`ResolveOptions::site_depth`]).
/// - A regular file is returned open; a directory without a trailing slash is
///   [`Resolved::Redirect`]; a directory with one is served through the first index name that
///   is a regular file, else it is `Forbidden`. A trailing slash on anything but a directory is
///   `NotFound`; a FIFO, socket or device is `Forbidden`.
/// - Index files are looked up under the same symlink and dotfile policies.
/// - A path that does not have the shape `normalize` produces is `BadRequest`.
///
/// Errno mapping: `ENOENT`, `ENOTDIR`, `ENAMETOOLONG` → `NotFound`; `EACCES`, `EPERM`, and
/// `ELOOP`/`EXDEV` (a symlink the policy refuses, or a loop) → `Forbidden`; `ENXIO`/`ENODEV`
/// (a socket, or a device without a driver) → `Forbidden`; anything else → `Io`.
pub fn resolve(root: &DocRoot, normalized: &str, opts: &ResolveOptions<'_>) -> Result<Resolved, ResolveError> {
    resolve_with(root, normalized, opts, Backend::Auto)
}

/// Which implementation of the symlink policy to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    /// `openat2(2)` when the kernel allows it, else the portable code.
    Auto,
    /// Always the portable code (the fallback; tests force it with this).
    Portable,
}

fn resolve_with(
    root: &DocRoot,
    normalized: &str,
    opts: &ResolveOptions<'_>,
    backend: Backend,
) -> Result<Resolved, ResolveError> {
    let rel = relative_part(normalized)?;
    if opts.dotfiles == DotfilePolicy::Deny {
        check_dotfiles(rel, opts.site_depth)?;
    }

    if !normalized.ends_with('/') {
        // `rel` is not empty here: the only normalized path naming the root is "/".
        let file = open_with_policy(root, rel, opts.symlinks, backend)?;
        let meta = file.metadata().map_err(map_io)?;
        let kind = meta.file_type();
        return if kind.is_file() {
            Ok(Resolved::File { file, meta, url_path: normalized.to_owned() })
        } else if kind.is_dir() {
            Ok(Resolved::Redirect)
        } else {
            Err(ResolveError::Forbidden)
        };
    }

    // Directory form. Try the index files first, straight through the path: for the common
    // `GET /` that is one open and one fstat. If the base is not a directory each attempt
    // fails with ENOTDIR (NotFound), and the base itself is examined below.
    let mut candidate = String::with_capacity(rel.len() + 16);
    for name in opts.index {
        if !usable_index_name(name, opts.dotfiles) {
            continue;
        }
        candidate.clear();
        if !rel.is_empty() {
            candidate.push_str(rel);
            candidate.push('/');
        }
        candidate.push_str(name);
        match open_with_policy(root, &candidate, opts.symlinks, backend) {
            Ok(file) => {
                let meta = file.metadata().map_err(map_io)?;
                if meta.is_file() {
                    let mut url_path = String::with_capacity(normalized.len() + name.len());
                    url_path.push_str(normalized);
                    url_path.push_str(name);
                    return Ok(Resolved::File { file, meta, url_path });
                }
                // A directory or FIFO that happens to carry an index name is not an index.
            }
            Err(ResolveError::NotFound) => {}
            // Fail closed: an index that exists but is refused (an escaping symlink, no
            // permission) is not silently skipped for the next name.
            Err(err) => return Err(err),
        }
    }

    let base = open_with_policy(root, rel, opts.symlinks, backend)?;
    let meta = base.metadata().map_err(map_io)?;
    if meta.is_dir() {
        // No index file: the caller lists the directory or refuses it.
        Ok(Resolved::Directory { dir: base, meta })
    } else {
        Err(ResolveError::NotFound)
    }
}

/// Check `normalized` has the shape `normalize` gives it, and return it without its leading
/// and trailing slash ("" for the root). Defence in depth: `Follow` relies on there being no
/// `..`, and `resolve` is public.
fn relative_part(normalized: &str) -> Result<&str, ResolveError> {
    if normalized == "/" {
        return Ok("");
    }
    let rel = normalized.strip_prefix('/').ok_or(ResolveError::BadRequest)?;
    let rel = rel.strip_suffix('/').unwrap_or(rel);
    for segment in rel.split('/') {
        let bad_byte = segment.bytes().any(|b| b < 0x20 || b == 0x7f || b == b'\\');
        if segment.is_empty() || segment == "." || segment == ".." || bad_byte {
            return Err(ResolveError::BadRequest);
        }
    }
    Ok(rel)
}

fn check_dotfiles(rel: &str, site_depth: usize) -> Result<(), ResolveError> {
    for (i, segment) in rel.split('/').enumerate() {
        if segment.starts_with('.') && !(i == site_depth && segment == ".well-known") {
            return Err(ResolveError::Forbidden);
        }
    }
    Ok(())
}

fn usable_index_name(name: &str, dotfiles: DotfilePolicy) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\0'])
        && !(dotfiles == DotfilePolicy::Deny && name.starts_with('.'))
}

/// `ENOENT`... → status mapping; see [`resolve`].
fn map_io(err: io::Error) -> ResolveError {
    match err.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG) => ResolveError::NotFound,
        Some(libc::EACCES | libc::EPERM) => ResolveError::Forbidden,
        // A symlink the policy refuses (or a loop), or one that leaves the root.
        Some(libc::ELOOP | libc::EXDEV) => ResolveError::Forbidden,
        // open(2) of a socket, or of a device with no driver behind it.
        Some(libc::ENXIO | libc::ENODEV) => ResolveError::Forbidden,
        _ => ResolveError::Io(err),
    }
}

/// Flags of every descriptor handed out: read-only, and `O_NONBLOCK` so a FIFO cannot block.
const OPEN_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;

/// Walk flags for intermediate directories in the portable no-symlink walk: `O_PATH` needs no
/// permission but search, and with `O_NOFOLLOW` a symlink yields a descriptor of the link
/// itself, which `fstat` then identifies.
const WALK_FLAGS: libc::c_int = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;

const RESOLVE_WITHIN_ROOT: u64 = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
const RESOLVE_NO_LINKS: u64 = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

/// Open `rel` (relative, no empty/`.`/`..` segment; "" is the root) under `policy`.
fn open_with_policy(root: &DocRoot, rel: &str, policy: SymlinkPolicy, backend: Backend) -> Result<File, ResolveError> {
    let c_rel = c_path(rel.as_bytes())?;
    match policy {
        // `rel` has no "..", so the first step stays under the root; symlinks go anywhere.
        SymlinkPolicy::Follow => openat(root.fd(), &c_rel, OPEN_FLAGS).map(File::from).map_err(map_io),
        SymlinkPolicy::WithinRoot => {
            match try_openat2(root, &c_rel, RESOLVE_WITHIN_ROOT, backend) {
                Some(Ok(fd)) => Ok(File::from(fd)),
                // A symlink left the tree of the root descriptor: an absolute one, or one
                // climbing out. It may still land inside the root; the slow path decides.
                Some(Err(err)) if err.raw_os_error() == Some(libc::EXDEV) => open_canonical_within(root, rel, backend),
                Some(Err(err)) => Err(map_io(err)),
                None => open_canonical_within(root, rel, backend),
            }
        }
        SymlinkPolicy::Deny => match try_openat2(root, &c_rel, RESOLVE_NO_LINKS, backend) {
            Some(result) => result.map(File::from).map_err(map_io),
            None => open_no_symlinks_walk(root, rel.as_bytes()),
        },
    }
}

/// The `WithinRoot` slow path, and its whole implementation without `openat2`: canonicalize
/// `root/rel`, accept it only inside the canonical root, then open the canonical remainder
/// refusing any symlink, so a link swapped in after `canonicalize` cannot redirect the open.
fn open_canonical_within(root: &DocRoot, rel: &str, backend: Backend) -> Result<File, ResolveError> {
    let canonical = std::fs::canonicalize(root.path.join(rel)).map_err(map_io)?;
    let inside = canonical.strip_prefix(&root.path).map_err(|_| ResolveError::Forbidden)?;
    let inside = inside.as_os_str().as_bytes();
    let c_inside = c_path(inside)?;
    match try_openat2(root, &c_inside, RESOLVE_NO_LINKS, backend) {
        Some(result) => result.map(File::from).map_err(map_io),
        None => open_no_symlinks_walk(root, inside),
    }
}

/// Portable `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`: open `rel` one component at a time from
/// the root descriptor, never following a symlink. A symlink anywhere is `Forbidden`.
fn open_no_symlinks_walk(root: &DocRoot, rel: &[u8]) -> Result<File, ResolveError> {
    let mut components = rel.split(|&b| b == b'/').filter(|c| !c.is_empty());
    let Some(last) = components.next_back() else {
        return openat(root.fd(), c".", OPEN_FLAGS).map(File::from).map_err(map_io);
    };
    let mut dir: Option<OwnedFd> = None;
    for component in components {
        let name = c_component(component)?;
        let parent = dir.as_ref().map_or(root.fd(), |d| d.as_fd());
        let next = File::from(openat(parent, &name, WALK_FLAGS).map_err(map_io)?);
        let kind = next.metadata().map_err(map_io)?.file_type();
        if kind.is_symlink() {
            return Err(ResolveError::Forbidden);
        }
        if !kind.is_dir() {
            return Err(ResolveError::NotFound);
        }
        dir = Some(OwnedFd::from(next));
    }
    let name = c_component(last)?;
    let parent = dir.as_ref().map_or(root.fd(), |d| d.as_fd());
    // With O_NOFOLLOW a symlink as last component fails with ELOOP -> Forbidden.
    openat(parent, &name, OPEN_FLAGS | libc::O_NOFOLLOW).map(File::from).map_err(map_io)
}

/// A relative path as a C string; "" is the root itself (".").
fn c_path(rel: &[u8]) -> Result<CString, ResolveError> {
    if rel.is_empty() {
        return Ok(c".".to_owned());
    }
    CString::new(rel).map_err(|_| ResolveError::BadRequest)
}

/// One path component as a C string; never a dot segment.
fn c_component(component: &[u8]) -> Result<CString, ResolveError> {
    if component == b"." || component == b".." {
        return Err(ResolveError::BadRequest);
    }
    CString::new(component).map_err(|_| ResolveError::BadRequest)
}

// --- openat2 availability -------------------------------------------------------------------

const OPENAT2_UNKNOWN: u8 = 0;
const OPENAT2_YES: u8 = 1;
const OPENAT2_NO: u8 = 2;

/// Whether `openat2(2)` works here, learned once per process: a kernel older than 5.6 answers
/// `ENOSYS`, and a seccomp filter (containers, sandboxes) often answers `EPERM`.
static OPENAT2: AtomicU8 = AtomicU8::new(OPENAT2_UNKNOWN);

/// `openat2` with `resolve` flags, or `None` when it is unavailable and the caller must use the
/// portable code.
fn try_openat2(root: &DocRoot, path: &CStr, resolve: u64, backend: Backend) -> Option<io::Result<OwnedFd>> {
    if backend == Backend::Portable {
        return None;
    }
    match OPENAT2.load(Ordering::Relaxed) {
        OPENAT2_YES => {}
        OPENAT2_NO => return None,
        _ => match probe_openat2(root) {
            Some(true) => OPENAT2.store(OPENAT2_YES, Ordering::Relaxed),
            Some(false) => {
                OPENAT2.store(OPENAT2_NO, Ordering::Relaxed);
                return None;
            }
            // A transient failure (EMFILE...) says nothing; use the portable code this time.
            None => return None,
        },
    }
    match openat2(root.fd(), path, OPEN_FLAGS, resolve) {
        Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => {
            OPENAT2.store(OPENAT2_NO, Ordering::Relaxed);
            None
        }
        // EPERM is a real refusal, or a seccomp filter installed after the probe: ask again.
        Err(err) if err.raw_os_error() == Some(libc::EPERM) => {
            if probe_openat2(root) == Some(false) {
                OPENAT2.store(OPENAT2_NO, Ordering::Relaxed);
                None
            } else {
                Some(Err(err))
            }
        }
        result => Some(result),
    }
}

/// Try `openat2` on the root itself: `Some(false)` if the syscall is unusable here, `None` if
/// the failure was transient and proves nothing.
fn probe_openat2(root: &DocRoot) -> Option<bool> {
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    match openat2(root.fd(), c".", flags, RESOLVE_NO_LINKS) {
        Ok(_) => Some(true),
        Err(err) => match err.raw_os_error() {
            Some(libc::ENOSYS | libc::EPERM | libc::EINVAL | libc::E2BIG) => Some(false),
            _ => None,
        },
    }
}

// --- system calls ---------------------------------------------------------------------------

/// `openat(2)` without `O_CREAT`, retried on `EINTR`.
fn openat(dir: BorrowedFd<'_>, path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: `path` is a NUL-terminated string that outlives the call, `dir` is an open
        // descriptor borrowed for the duration of the call, and without O_CREAT/O_TMPFILE no
        // mode argument is read.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), path.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: the kernel just returned this descriptor and nothing else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// `openat2(2)` without `O_CREAT`, retried on `EINTR`, and a few times on `EAGAIN` (which
/// `RESOLVE_BENEATH` returns when a concurrent rename made a `..` check unsure).
fn openat2(dir: BorrowedFd<'_>, path: &CStr, flags: libc::c_int, resolve: u64) -> io::Result<OwnedFd> {
    // SAFETY: `open_how` is three integers (libc marks it non-exhaustive, so it cannot be
    // built with a literal); all-zero is a valid value, and the meaning of the unused fields.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    // Open flags are non-negative, so the widening cast is exact.
    how.flags = flags as u64;
    how.mode = 0;
    how.resolve = resolve;
    let mut eagain_retries = 3;
    loop {
        // SAFETY: `path` is NUL-terminated and `how` is a fully initialised `open_how`; both
        // outlive the call, and the size passed is the size of that struct. `dir` is an open
        // descriptor borrowed for the duration of the call.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if ret >= 0 {
            let fd = RawFd::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
            // SAFETY: the kernel just returned this descriptor and nothing else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) if eagain_retries > 0 => eagain_retries -= 1,
            _ => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;
    use tempfile::TempDir;

    // --- normalize ---------------------------------------------------------------------------

    /// `normalize`, checked against `normalize_str` (the request path's shortcut) on every case.
    fn norm(raw: &str) -> Result<String, u16> {
        let mut out = String::from("garbage from a previous request");
        let result = match normalize(raw.as_bytes(), &mut out) {
            Ok(()) => Ok(out),
            Err(err) => {
                assert!(out.is_empty(), "out must be empty on error, got {out:?}");
                Err(err.status())
            }
        };
        let mut fast = String::from("garbage from a previous request");
        let fast_result = normalize_str(raw, &mut fast).map(|()| fast).map_err(|e| e.status());
        assert_eq!(fast_result, result, "normalize_str({raw:?})");
        result
    }

    #[test]
    fn normalize_plain_paths() {
        assert_eq!(norm("/"), Ok("/".into()));
        assert_eq!(norm("/index.html"), Ok("/index.html".into()));
        assert_eq!(norm("/a/b/c.txt"), Ok("/a/b/c.txt".into()));
        assert_eq!(norm("/a%20b"), Ok("/a b".into()));
        assert_eq!(norm("/100%25"), Ok("/100%".into()));
    }

    #[test]
    fn normalize_collapses_slashes() {
        assert_eq!(norm("//"), Ok("/".into()));
        assert_eq!(norm("//a///b"), Ok("/a/b".into()));
        assert_eq!(norm("/a//"), Ok("/a/".into()));
    }

    #[test]
    fn normalize_drops_dot_segments() {
        assert_eq!(norm("/."), Ok("/".into()));
        assert_eq!(norm("/./a/./b"), Ok("/a/b".into()));
        assert_eq!(norm("/a/."), Ok("/a/".into()));
        assert_eq!(norm("/.a/..b/..."), Ok("/.a/..b/...".into()));
    }

    #[test]
    fn normalize_dot_dot_removes_previous_segment() {
        assert_eq!(norm("/a/../b"), Ok("/b".into()));
        assert_eq!(norm("/a/b/../../c"), Ok("/c".into()));
        assert_eq!(norm("/a/.."), Ok("/".into()));
        assert_eq!(norm("/a/b/.."), Ok("/a/".into()));
        // Slashes collapse first, as in the filesystem: "a//.." is "a/..".
        assert_eq!(norm("/a//../b"), Ok("/b".into()));
    }

    #[test]
    fn normalize_decodes_dots_before_removing_them() {
        assert_eq!(norm("/a/%2e%2e/b"), Ok("/b".into()));
        assert_eq!(norm("/a/.%2E/b"), Ok("/b".into()));
        assert_eq!(norm("/a/%2E./b"), Ok("/b".into()));
        assert_eq!(norm("/a/%2e/b"), Ok("/a/b".into()));
    }

    #[test]
    fn normalize_encoded_slash_is_a_separator() {
        assert_eq!(norm("/a%2Fb"), Ok("/a/b".into()));
        assert_eq!(norm("/a%2f%2fb"), Ok("/a/b".into()));
        assert_eq!(norm("/a/b%2F..%2Fc"), Ok("/a/c".into()));
        assert_eq!(norm("/a%2F"), Ok("/a/".into()));
    }

    #[test]
    fn normalize_refuses_escaping_the_root() {
        for raw in [
            "/..",
            "/../",
            "/../etc/passwd",
            "/a/../..",
            "/a/../../b",
            "/%2e%2e/etc/passwd",
            "/.%2e/x",
            "/%2E%2E",
            "/a%2F..%2F..%2Fetc",
            "/./../x",
        ] {
            assert_eq!(norm(raw), Err(400), "{raw}");
        }
    }

    #[test]
    fn normalize_refuses_nul_and_control_bytes() {
        for raw in ["/a%00b", "/a%00", "/%0a", "/%0D%0A", "/a%1f", "/a%7f", "/a%7F"] {
            assert_eq!(norm(raw), Err(400), "{raw}");
        }
        for raw in [&b"/a\0b"[..], b"/a\nb", b"/\t", b"/a\x7f", b"/\x01"] {
            let mut out = String::new();
            assert!(matches!(normalize(raw, &mut out), Err(ResolveError::BadRequest)));
        }
    }

    #[test]
    fn normalize_refuses_backslash() {
        assert_eq!(norm("/a\\b"), Err(400));
        assert_eq!(norm("/..\\etc"), Err(400));
        assert_eq!(norm("/a%5Cb"), Err(400));
        assert_eq!(norm("/a%5c..%5c..%5cetc"), Err(400));
    }

    #[test]
    fn normalize_refuses_invalid_utf8() {
        assert_eq!(norm("/%ff"), Err(400));
        assert_eq!(norm("/%C3"), Err(400), "truncated sequence");
        assert_eq!(norm("/%C0%AF"), Err(400), "overlong '/'");
        assert_eq!(norm("/%ff/.."), Err(400), "checked before dot segments");
        let mut out = String::new();
        assert!(normalize(b"/\xff", &mut out).is_err());
    }

    #[test]
    fn normalize_refuses_malformed_escapes() {
        for raw in ["/%", "/a%", "/%4", "/%4/", "/%zz", "/%g0", "/%0g", "/%%41", "/% 1"] {
            assert_eq!(norm(raw), Err(400), "{raw}");
        }
    }

    #[test]
    fn normalize_requires_leading_slash() {
        for raw in ["", "a", "a/b", "%2Fa", "*", "http://x/"] {
            assert_eq!(norm(raw), Err(400), "{raw:?}");
        }
    }

    #[test]
    fn normalize_keeps_trailing_slash() {
        assert_eq!(norm("/a/b/"), Ok("/a/b/".into()));
        assert_eq!(norm("/a/b/.."), Ok("/a/".into()));
        assert_eq!(norm("/a/b/../"), Ok("/a/".into()));
        assert_eq!(norm("/a/b/%2e"), Ok("/a/b/".into()));
        assert_eq!(norm("/a/b"), Ok("/a/b".into()));
    }

    #[test]
    fn normalize_decodes_unicode() {
        assert_eq!(norm("/caf%C3%A9"), Ok("/café".into()));
        assert_eq!(norm("/caf%c3%a9/%E2%82%AC"), Ok("/café/€".into()));
        assert_eq!(norm("/café"), Ok("/café".into()), "raw UTF-8 is accepted too");
    }

    #[test]
    fn normalize_decodes_exactly_once() {
        assert_eq!(norm("/%252e%252e"), Ok("/%2e%2e".into()));
        assert_eq!(norm("/%2500"), Ok("/%00".into()));
    }

    // --- small API pieces --------------------------------------------------------------------

    #[test]
    fn status_codes_and_display() {
        let io = ResolveError::Io(io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(ResolveError::BadRequest.status(), 400);
        assert_eq!(ResolveError::Forbidden.status(), 403);
        assert_eq!(ResolveError::NotFound.status(), 404);
        assert_eq!(io.status(), 500);
        assert!(io.to_string().starts_with("filesystem error"));
        assert!(std::error::Error::source(&io).is_some());
        assert!(!ResolveError::NotFound.to_string().is_empty());
    }

    #[test]
    fn errno_mapping() {
        let status = |errno| map_io(io::Error::from_raw_os_error(errno)).status();
        for errno in [libc::ENOENT, libc::ENOTDIR, libc::ENAMETOOLONG] {
            assert_eq!(status(errno), 404, "{errno}");
        }
        for errno in [libc::EACCES, libc::EPERM, libc::ELOOP, libc::EXDEV, libc::ENXIO] {
            assert_eq!(status(errno), 403, "{errno}");
        }
        for errno in [libc::EMFILE, libc::EIO, libc::ENOMEM] {
            assert_eq!(status(errno), 500, "{errno}");
        }
    }

    #[test]
    fn policies_deserialize_from_config_spelling() {
        #[derive(serde::Deserialize)]
        struct Conf {
            symlinks: SymlinkPolicy,
            dotfiles: DotfilePolicy,
        }
        let cases = [
            ("within-root", SymlinkPolicy::WithinRoot),
            ("follow", SymlinkPolicy::Follow),
            ("deny", SymlinkPolicy::Deny),
        ];
        for (text, want) in cases {
            let conf: Conf = toml::from_str(&format!("symlinks = \"{text}\"\ndotfiles = \"allow\"")).unwrap();
            assert_eq!(conf.symlinks, want);
            assert_eq!(conf.dotfiles, DotfilePolicy::Allow);
        }
        let conf: Conf = toml::from_str("symlinks = \"deny\"\ndotfiles = \"deny\"").unwrap();
        assert_eq!(conf.dotfiles, DotfilePolicy::Deny);
        assert!(toml::from_str::<Conf>("symlinks = \"WithinRoot\"\ndotfiles = \"deny\"").is_err());
    }

    #[test]
    fn relative_part_rejects_unnormalized_input() {
        assert_eq!(relative_part("/").ok(), Some(""));
        assert_eq!(relative_part("/a/b/").ok(), Some("a/b"));
        for bad in ["", "a", "//", "/a//b", "/../x", "/a/./b", "/a/..", "/a\0", "/a\\b"] {
            assert!(matches!(relative_part(bad), Err(ResolveError::BadRequest)), "{bad:?}");
        }
    }

    // --- resolve -----------------------------------------------------------------------------

    /// A temp dir holding `root/` (the document root) and `outside/` beside it.
    struct Tree {
        _tmp: TempDir,
        root: DocRoot,
        root_path: PathBuf,
        outside: PathBuf,
    }

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    fn tree() -> Tree {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root_path = base.join("root");
        let outside = base.join("outside");
        for dir in [
            &root_path,
            &root_path.join("sub"),
            &root_path.join("both"),
            &root_path.join("htm"),
            &root_path.join("empty"),
            &root_path.join("dirindex"),
            &root_path.join("dirindex/index.html"),
            &root_path.join(".git"),
            &root_path.join(".well-known"),
            &root_path.join("sub/.well-known"),
            &outside,
            &outside.join("dir"),
        ] {
            std::fs::create_dir(dir).unwrap();
        }
        let r = |p: &str| root_path.join(p);
        write(&r("a.txt"), "A");
        write(&r("sub/index.html"), "sub index");
        write(&r("sub/b.txt"), "B");
        write(&r("both/index.html"), "html");
        write(&r("both/index.htm"), "htm");
        write(&r("htm/index.htm"), "htm only");
        write(&r("dirindex/index.htm"), "dirindex htm");
        write(&r(".hidden"), "hidden");
        write(&r(".git/config"), "git");
        write(&r(".well-known/security.txt"), "security");
        write(&r("sub/.well-known/x"), "nested well-known");
        write(&r("sub/.dot"), "dot");
        write(&outside.join("secret.txt"), "SECRET");
        write(&outside.join("dir/index.html"), "outside index");

        // Inside the root.
        symlink("a.txt", r("rel_in")).unwrap();
        symlink(r("a.txt"), r("abs_in")).unwrap();
        symlink("../a.txt", r("sub/up_in")).unwrap();
        symlink("sub", r("dir_in")).unwrap();
        symlink(r("sub"), r("dir_abs_in")).unwrap();
        symlink(".hidden", r("to_dotfile")).unwrap();
        // Leaving the root.
        symlink("../outside/secret.txt", r("rel_out")).unwrap();
        symlink("../../outside/secret.txt", r("sub/rel_out2")).unwrap();
        symlink(outside.join("secret.txt"), r("abs_out")).unwrap();
        symlink("/etc/passwd", r("passwd")).unwrap();
        symlink("../outside/dir", r("dir_out")).unwrap();
        symlink(outside.join("dir"), r("dir_abs_out")).unwrap();
        symlink("/proc/self/root/etc/passwd", r("magic")).unwrap();
        // A symlink to the outside that is named like an index file.
        std::fs::create_dir(r("badindex")).unwrap();
        symlink("../../outside/secret.txt", r("badindex/index.html")).unwrap();
        write(&r("badindex/index.htm"), "must not be reached");
        // Broken ones.
        symlink("loop", r("loop")).unwrap();
        symlink("nowhere", r("dangling")).unwrap();

        let fifo = CString::new(r("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: `fifo` is a valid NUL-terminated path for the duration of the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);

        let root = DocRoot::open(&root_path).unwrap();
        Tree { _tmp: tmp, root, root_path, outside }
    }

    const BACKENDS: [Backend; 2] = [Backend::Auto, Backend::Portable];

    fn index_names() -> Vec<String> {
        vec!["index.html".to_owned(), "index.htm".to_owned()]
    }

    fn get_with(
        t: &Tree,
        raw: &str,
        symlinks: SymlinkPolicy,
        dotfiles: DotfilePolicy,
        backend: Backend,
    ) -> Result<Resolved, ResolveError> {
        let index = index_names();
        let opts = ResolveOptions { symlinks, dotfiles, index: &index, site_depth: 0 };
        let mut path = String::new();
        normalize(raw.as_bytes(), &mut path)?;
        resolve_with(&t.root, &path, &opts, backend)
    }

    /// What a request yields, as something comparable: the URL path and body of a file,
    /// "redirect", or the status.
    #[derive(Debug, PartialEq, Eq)]
    enum Got {
        File(String, String),
        Redirect,
        Directory,
        Status(u16),
    }

    fn summarize(result: Result<Resolved, ResolveError>) -> Got {
        match result {
            Ok(Resolved::File { mut file, meta, url_path }) => {
                assert!(meta.is_file());
                let mut body = String::new();
                file.read_to_string(&mut body).unwrap();
                Got::File(url_path, body)
            }
            Ok(Resolved::Redirect) => Got::Redirect,
            Ok(Resolved::Directory { meta, .. }) => {
                assert!(meta.is_dir());
                Got::Directory
            }
            Err(err) => Got::Status(err.status()),
        }
    }

    /// Request `raw` under every backend, check they agree, and return the answer.
    fn get(t: &Tree, raw: &str, symlinks: SymlinkPolicy, dotfiles: DotfilePolicy) -> Got {
        let mut answers = BACKENDS.iter().map(|&b| summarize(get_with(t, raw, symlinks, dotfiles, b)));
        let first = answers.next().unwrap();
        for other in answers {
            assert_eq!(first, other, "backends disagree on {raw} under {symlinks:?}");
        }
        first
    }

    fn file(url: &str, body: &str) -> Got {
        Got::File(url.to_owned(), body.to_owned())
    }

    use DotfilePolicy::{Allow, Deny as DenyDots};
    use SymlinkPolicy::{Deny, Follow, WithinRoot};
    const ALL_POLICIES: [SymlinkPolicy; 3] = [WithinRoot, Follow, Deny];

    #[test]
    fn docroot_open_canonicalizes_and_requires_a_directory() {
        let t = tree();
        assert_eq!(t.root.path(), t.root_path);
        let via_dots = DocRoot::open(&t.root_path.join("sub/..")).unwrap();
        assert_eq!(via_dots.path(), t.root_path);
        assert!(DocRoot::open(&t.root_path.join("a.txt")).is_err());
        assert!(DocRoot::open(&t.root_path.join("missing")).is_err());
        assert!(DocRoot::open(&t.outside.join("secret.txt")).is_err());
    }

    #[test]
    fn regular_file() {
        let t = tree();
        for p in ALL_POLICIES {
            assert_eq!(get(&t, "/a.txt", p, DenyDots), file("/a.txt", "A"));
            assert_eq!(get(&t, "/sub/b.txt", p, DenyDots), file("/sub/b.txt", "B"));
            assert_eq!(get(&t, "/sub/../a.txt", p, DenyDots), file("/a.txt", "A"));
        }
    }

    #[test]
    fn missing_file() {
        let t = tree();
        for p in ALL_POLICIES {
            assert_eq!(get(&t, "/nope", p, DenyDots), Got::Status(404));
            assert_eq!(get(&t, "/nope/", p, DenyDots), Got::Status(404));
            assert_eq!(get(&t, "/sub/nope/x", p, DenyDots), Got::Status(404));
            assert_eq!(get(&t, "/a.txt/x", p, DenyDots), Got::Status(404));
        }
    }

    #[test]
    fn overlong_name_is_not_found() {
        let t = tree();
        let long = format!("/{}", "x".repeat(300));
        let deep = "/abcdefgh".repeat(600);
        for p in ALL_POLICIES {
            assert_eq!(get(&t, &long, p, DenyDots), Got::Status(404));
            assert_eq!(get(&t, &deep, p, DenyDots), Got::Status(404));
        }
    }

    #[test]
    fn directory_without_slash_redirects() {
        let t = tree();
        for p in ALL_POLICIES {
            assert_eq!(get(&t, "/sub", p, DenyDots), Got::Redirect);
            assert_eq!(get(&t, "/empty", p, DenyDots), Got::Redirect);
            assert_eq!(get(&t, "/sub/%2e%2e/both", p, DenyDots), Got::Redirect);
        }
    }

    #[test]
    fn directory_index() {
        let t = tree();
        for p in ALL_POLICIES {
            assert_eq!(get(&t, "/sub/", p, DenyDots), file("/sub/index.html", "sub index"));
            assert_eq!(get(&t, "/htm/", p, DenyDots), file("/htm/index.htm", "htm only"));
        }
    }

    #[test]
    fn root_without_index_is_a_directory_and_with_index_is_served() {
        let t = tree();
        assert_eq!(get(&t, "/", WithinRoot, DenyDots), Got::Directory);
        write(&t.root_path.join("index.html"), "root index");
        for p in ALL_POLICIES {
            assert_eq!(get(&t, "/", p, DenyDots), file("/index.html", "root index"));
        }
    }

    #[test]
    fn directory_without_index_is_handed_back() {
        let t = tree();
        for p in ALL_POLICIES {
            assert_eq!(get(&t, "/empty/", p, DenyDots), Got::Directory);
        }
    }

    #[test]
    fn index_names_tried_in_order() {
        let t = tree();
        assert_eq!(get(&t, "/both/", WithinRoot, DenyDots), file("/both/index.html", "html"));
        let reversed = vec!["index.htm".to_owned(), "index.html".to_owned()];
        let opts = ResolveOptions { symlinks: WithinRoot, dotfiles: DenyDots, index: &reversed, site_depth: 0 };
        for backend in BACKENDS {
            let got = summarize(resolve_with(&t.root, "/both/", &opts, backend));
            assert_eq!(got, file("/both/index.htm", "htm"));
        }
        // No index names at all: every directory is "no index".
        let opts = ResolveOptions { symlinks: WithinRoot, dotfiles: DenyDots, index: &[], site_depth: 0 };
        assert_eq!(summarize(resolve(&t.root, "/sub/", &opts)), Got::Directory);
    }

    #[test]
    fn index_that_is_not_a_regular_file_is_skipped() {
        let t = tree();
        for p in ALL_POLICIES {
            let got = get(&t, "/dirindex/", p, DenyDots);
            assert_eq!(got, file("/dirindex/index.htm", "dirindex htm"));
        }
    }

    #[test]
    fn unusable_index_names_are_ignored() {
        let t = tree();
        write(&t.root_path.join("sub/.idx"), "dot index");
        let names: Vec<String> =
            ["", ".", "..", "../a.txt", "x\0", ".idx", "index.html"].iter().map(|s| s.to_string()).collect();
        let mut opts = ResolveOptions { symlinks: WithinRoot, dotfiles: DenyDots, index: &names, site_depth: 0 };
        let got = summarize(resolve(&t.root, "/sub/", &opts));
        assert_eq!(got, file("/sub/index.html", "sub index"));
        opts.dotfiles = Allow;
        let got = summarize(resolve(&t.root, "/sub/", &opts));
        assert_eq!(got, file("/sub/.idx", "dot index"));
    }

    #[test]
    fn escaping_index_symlink_is_forbidden_not_skipped() {
        let t = tree();
        for p in [WithinRoot, Deny] {
            assert_eq!(get(&t, "/badindex/", p, DenyDots), Got::Status(403));
        }
        let got = get(&t, "/badindex/", Follow, DenyDots);
        assert_eq!(got, file("/badindex/index.html", "SECRET"));
    }

    #[test]
    fn trailing_slash_on_a_file_is_not_found() {
        let t = tree();
        for p in ALL_POLICIES {
            assert_eq!(get(&t, "/a.txt/", p, DenyDots), Got::Status(404));
            assert_eq!(get(&t, "/sub/b.txt/", p, DenyDots), Got::Status(404));
            assert_eq!(get(&t, "/sub/b.txt/.", p, DenyDots), Got::Status(404));
        }
    }

    #[test]
    fn dotfiles_denied() {
        let t = tree();
        for p in ALL_POLICIES {
            for raw in [
                "/.hidden",
                "/.git/config",
                "/.git/",
                "/.git",
                "/sub/.dot",
                "/sub/.well-known/x",
                "/%2ehidden",
                "/sub/%2Edot",
            ] {
                assert_eq!(get(&t, raw, p, DenyDots), Got::Status(403), "{raw}");
            }
        }
    }

    #[test]
    fn dotfiles_allowed() {
        let t = tree();
        for p in ALL_POLICIES {
            assert_eq!(get(&t, "/.hidden", p, Allow), file("/.hidden", "hidden"));
            assert_eq!(get(&t, "/.git/config", p, Allow), file("/.git/config", "git"));
            assert_eq!(get(&t, "/sub/.dot", p, Allow), file("/sub/.dot", "dot"));
            assert_eq!(get(&t, "/.git", p, Allow), Got::Redirect);
        }
    }

    #[test]
    fn well_known_allowed_even_when_dotfiles_denied() {
        let t = tree();
        for p in ALL_POLICIES {
            let got = get(&t, "/.well-known/security.txt", p, DenyDots);
            assert_eq!(got, file("/.well-known/security.txt", "security"));
            assert_eq!(get(&t, "/.well-known", p, DenyDots), Got::Redirect);
            // Only as the first component, and not a prefix match.
            assert_eq!(get(&t, "/.well-known-not", p, DenyDots), Got::Status(403));
        }
    }

    #[test]
    fn real_path_names_where_a_symlink_leads() {
        let t = tree();
        let index = vec!["index.html".to_string()];
        let real = |url: &str, symlinks| {
            let opts = ResolveOptions { symlinks, dotfiles: Allow, index: &index, site_depth: 0 };
            match resolve(&t.root, url, &opts) {
                Ok(Resolved::File { file, meta, url_path }) => real_path(&t.root, &url_path, &file, &meta),
                other => panic!("{url}: {other:?}"),
            }
        };
        assert_eq!(real("/a.txt", WithinRoot), RealPath::Same);
        assert_eq!(real("/rel_in", WithinRoot), RealPath::Other(Path::new("a.txt").into()));
        assert_eq!(real("/sub/up_in", WithinRoot), RealPath::Other(Path::new("a.txt").into()));
        assert_eq!(real("/dir_in/b.txt", WithinRoot), RealPath::Other(Path::new("sub/b.txt").into()));
        let outside = std::fs::canonicalize(t.outside.join("secret.txt")).unwrap();
        assert_eq!(real("/rel_out", Follow), RealPath::Other(outside.into()));
    }

    #[test]
    fn well_known_exemption_comes_after_the_site_directory() {
        // thttpd `-v`: "/sub" stands for a host directory, so "/sub/.well-known/x" is that
        // host's "/.well-known/x" (issue 14, finding 12).
        let t = tree();
        let index = vec!["index.html".to_string()];
        for backend in BACKENDS {
            let opts = ResolveOptions { symlinks: WithinRoot, dotfiles: DenyDots, index: &index, site_depth: 1 };
            let got = resolve_with(&t.root, "/sub/.well-known/x", &opts, backend);
            assert!(matches!(got, Ok(Resolved::File { .. })), "{backend:?}: {got:?}");
            let got = resolve_with(&t.root, "/.well-known/security.txt", &opts, backend);
            assert!(matches!(got, Err(ResolveError::Forbidden)), "{backend:?}: {got:?}");
            let opts = ResolveOptions { site_depth: 0, ..opts };
            let got = resolve_with(&t.root, "/sub/.well-known/x", &opts, backend);
            assert!(matches!(got, Err(ResolveError::Forbidden)), "{backend:?}: {got:?}");
        }
    }

    #[test]
    fn dotfile_policy_is_about_the_url_not_the_symlink_target() {
        let t = tree();
        let got = get(&t, "/to_dotfile", WithinRoot, DenyDots);
        assert_eq!(got, file("/to_dotfile", "hidden"));
    }

    #[test]
    fn symlinks_inside_root_under_within_root() {
        let t = tree();
        let p = WithinRoot;
        assert_eq!(get(&t, "/rel_in", p, DenyDots), file("/rel_in", "A"));
        assert_eq!(get(&t, "/abs_in", p, DenyDots), file("/abs_in", "A"));
        assert_eq!(get(&t, "/sub/up_in", p, DenyDots), file("/sub/up_in", "A"));
        assert_eq!(get(&t, "/dir_in/b.txt", p, DenyDots), file("/dir_in/b.txt", "B"));
        assert_eq!(get(&t, "/dir_abs_in/b.txt", p, DenyDots), file("/dir_abs_in/b.txt", "B"));
        assert_eq!(get(&t, "/dir_in", p, DenyDots), Got::Redirect);
        assert_eq!(get(&t, "/dir_abs_in", p, DenyDots), Got::Redirect);
        let got = get(&t, "/dir_abs_in/", p, DenyDots);
        assert_eq!(got, file("/dir_abs_in/index.html", "sub index"));
    }

    #[test]
    fn symlinks_escaping_root_forbidden_under_within_root() {
        let t = tree();
        for raw in [
            "/rel_out",
            "/sub/rel_out2",
            "/abs_out",
            "/passwd",
            "/dir_out",
            "/dir_out/",
            "/dir_out/index.html",
            "/dir_abs_out",
            "/dir_abs_out/",
            "/dir_abs_out/index.html",
            "/magic",
        ] {
            assert_eq!(get(&t, raw, WithinRoot, DenyDots), Got::Status(403), "{raw}");
        }
    }

    #[test]
    fn any_symlink_forbidden_under_deny() {
        let t = tree();
        for raw in [
            "/rel_in",
            "/abs_in",
            "/sub/up_in",
            "/dir_in",
            "/dir_in/",
            "/dir_in/b.txt",
            "/dir_abs_in/b.txt",
            "/rel_out",
            "/abs_out",
            "/passwd",
            "/dir_out/index.html",
            "/magic",
            "/loop",
            "/dangling",
        ] {
            assert_eq!(get(&t, raw, Deny, DenyDots), Got::Status(403), "{raw}");
        }
    }

    #[test]
    fn escaping_symlinks_served_under_follow() {
        let t = tree();
        let p = Follow;
        assert_eq!(get(&t, "/rel_out", p, DenyDots), file("/rel_out", "SECRET"));
        assert_eq!(get(&t, "/sub/rel_out2", p, DenyDots), file("/sub/rel_out2", "SECRET"));
        assert_eq!(get(&t, "/abs_out", p, DenyDots), file("/abs_out", "SECRET"));
        assert_eq!(get(&t, "/dir_out", p, DenyDots), Got::Redirect);
        let got = get(&t, "/dir_out/", p, DenyDots);
        assert_eq!(got, file("/dir_out/index.html", "outside index"));
        let got = get(&t, "/dir_abs_out/index.html", p, DenyDots);
        assert_eq!(got, file("/dir_abs_out/index.html", "outside index"));
        assert_eq!(get(&t, "/rel_in", p, DenyDots), file("/rel_in", "A"));
    }

    #[test]
    fn broken_symlinks() {
        let t = tree();
        for p in [WithinRoot, Follow] {
            assert_eq!(get(&t, "/loop", p, DenyDots), Got::Status(403));
            assert_eq!(get(&t, "/dangling", p, DenyDots), Got::Status(404));
        }
    }

    #[test]
    fn fifo_is_forbidden_without_blocking() {
        let t = tree();
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for p in ALL_POLICIES {
                for backend in BACKENDS {
                    let got = summarize(get_with(&t, "/fifo", p, DenyDots, backend));
                    let trailing = summarize(get_with(&t, "/fifo/", p, DenyDots, backend));
                    let _ = done.send((got, trailing));
                }
            }
        });
        for _ in 0..ALL_POLICIES.len() * BACKENDS.len() {
            let answer = wait.recv_timeout(std::time::Duration::from_secs(10));
            assert_eq!(answer, Ok((Got::Status(403), Got::Status(404))));
        }
    }

    #[test]
    fn socket_is_forbidden() {
        let t = tree();
        let _listener = std::os::unix::net::UnixListener::bind(t.root_path.join("sock")).unwrap();
        for p in ALL_POLICIES {
            assert_eq!(get(&t, "/sock", p, DenyDots), Got::Status(403));
        }
    }

    #[test]
    fn resolve_rejects_paths_that_were_not_normalized() {
        let t = tree();
        let index = index_names();
        for p in ALL_POLICIES {
            let opts = ResolveOptions { symlinks: p, dotfiles: Allow, index: &index, site_depth: 0 };
            for bad in ["a.txt", "/sub/../a.txt", "//a.txt", "/./a.txt", "/../outside/secret.txt"] {
                let got = summarize(resolve(&t.root, bad, &opts));
                assert_eq!(got, Got::Status(400), "{bad}");
            }
        }
    }

    #[test]
    fn portable_walk_directly() {
        let t = tree();
        let read = |r: Result<File, ResolveError>| -> Result<String, u16> {
            let mut body = String::new();
            let mut f = r.map_err(|e| e.status())?;
            f.read_to_string(&mut body).unwrap();
            Ok(body)
        };
        assert_eq!(read(open_no_symlinks_walk(&t.root, b"sub/b.txt")), Ok("B".into()));
        assert_eq!(read(open_no_symlinks_walk(&t.root, b"dir_in/b.txt")), Err(403));
        assert_eq!(read(open_no_symlinks_walk(&t.root, b"rel_in")), Err(403));
        assert_eq!(read(open_no_symlinks_walk(&t.root, b"a.txt/x")), Err(404));
        assert_eq!(read(open_no_symlinks_walk(&t.root, b"sub/nope")), Err(404));
        assert_eq!(read(open_no_symlinks_walk(&t.root, b"sub/../a.txt")), Err(400));
        assert!(open_no_symlinks_walk(&t.root, b"").unwrap().metadata().unwrap().is_dir());

        let within = |rel: &str| read(open_canonical_within(&t.root, rel, Backend::Portable));
        assert_eq!(within("abs_in"), Ok("A".into()));
        assert_eq!(within("dir_abs_in/b.txt"), Ok("B".into()));
        assert_eq!(within("abs_out"), Err(403));
        assert_eq!(within("rel_out"), Err(403));
        assert_eq!(within("dir_out/index.html"), Err(403));
        assert_eq!(within("dangling"), Err(404));
        assert_eq!(within("loop"), Err(403));
    }

    #[test]
    fn openat2_probe_does_not_break_anything() {
        // On this machine openat2 may or may not be usable (old kernel, seccomp); either way
        // the probe must give a definite answer for the root, and resolution must work.
        let t = tree();
        assert!(probe_openat2(&t.root).is_some());
        assert_eq!(get(&t, "/a.txt", WithinRoot, DenyDots), file("/a.txt", "A"));
    }

    // --- properties --------------------------------------------------------------------------

    /// Bytes that make interesting paths, mixed with arbitrary ones.
    fn path_byte() -> impl Strategy<Value = u8> {
        prop_oneof![
            3 => prop::sample::select(b"/.%2eEfF5cC0aA\\\xc3\xa9\xff".to_vec()),
            1 => any::<u8>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn prop_normalize_output_is_clean(tail in prop::collection::vec(path_byte(), 0..48)) {
            let mut raw = vec![b'/'];
            raw.extend_from_slice(&tail);
            let mut out = String::new();
            if normalize(&raw, &mut out).is_ok() {
                prop_assert!(out.starts_with('/'));
                prop_assert!(!out.contains("//"), "{out:?}");
                prop_assert!(!out.contains("/./"), "{out:?}");
                prop_assert!(!out.contains("/../"), "{out:?}");
                prop_assert!(!out.ends_with("/.") && !out.ends_with("/.."), "{out:?}");
                prop_assert!(!out.bytes().any(|b| b < 0x20 || b == 0x7f || b == b'\\'));
                prop_assert!(relative_part(&out).is_ok(), "{out:?}");
                // Idempotent when nothing is left to decode.
                if !out.contains('%') {
                    let mut again = String::new();
                    prop_assert!(normalize(out.as_bytes(), &mut again).is_ok());
                    prop_assert_eq!(&again, &out);
                }
            } else {
                prop_assert!(out.is_empty());
            }
        }

        #[test]
        fn prop_normalize_str_is_normalize(tail in prop::collection::vec(path_byte(), 0..48)) {
            let mut raw = vec![b'/'];
            raw.extend_from_slice(&tail);
            let raw = String::from_utf8_lossy(&raw);
            let (mut fast, mut slow) = (String::from("stale"), String::new());
            let fast_result = normalize_str(&raw, &mut fast).is_ok();
            prop_assert_eq!(fast_result, normalize(raw.as_bytes(), &mut slow).is_ok());
            prop_assert_eq!(&fast, &slow);
        }

        #[test]
        fn prop_normalize_needs_leading_slash(raw in prop::collection::vec(any::<u8>(), 0..32)) {
            let mut out = String::new();
            let result = normalize(&raw, &mut out);
            if raw.first() != Some(&b'/') {
                prop_assert!(result.is_err());
            }
        }
    }

    const SEGMENTS: &[&str] = &[
        "a.txt",
        "sub",
        "b.txt",
        "..",
        ".",
        "%2e%2e",
        ".%2E",
        "%2f",
        "",
        "rel_in",
        "abs_in",
        "up_in",
        "rel_out",
        "rel_out2",
        "abs_out",
        "passwd",
        "magic",
        "dir_in",
        "dir_abs_in",
        "dir_out",
        "dir_abs_out",
        "badindex",
        "index.html",
        "secret.txt",
        "outside",
        "root",
        "etc",
        "loop",
        "dangling",
        ".hidden",
    ];

    #[test]
    fn prop_resolve_never_leaves_the_root() {
        let t = tree();
        let index = index_names();
        let root = t.root_path.clone();
        let segments = prop::collection::vec(prop::sample::select(SEGMENTS), 0..6);
        proptest!(ProptestConfig::with_cases(256), |(segs in segments, slash in any::<bool>())| {
            let mut raw = format!("/{}", segs.join("/"));
            if slash {
                raw.push('/');
            }
            let mut path = String::new();
            if normalize(raw.as_bytes(), &mut path).is_err() {
                return Ok(());
            }
            for symlinks in [WithinRoot, Deny] {
                for backend in BACKENDS {
                    let opts = ResolveOptions { symlinks, dotfiles: Allow, index: &index, site_depth: 0 };
                    let Ok(Resolved::File { file, meta, url_path }) =
                        resolve_with(&t.root, &path, &opts, backend)
                    else {
                        continue;
                    };
                    prop_assert!(meta.is_file());
                    let fd_link = format!("/proc/self/fd/{}", file.as_raw_fd());
                    let real = std::fs::read_link(fd_link).unwrap();
                    prop_assert!(real.starts_with(&root), "{raw} -> {real:?} ({symlinks:?})");
                    if symlinks == Deny {
                        // No symlink followed: the file is exactly where the URL says.
                        let want = root.join(url_path.trim_start_matches('/'));
                        prop_assert_eq!(&real, &want, "{}", raw);
                    }
                }
            }
        });
    }
}
