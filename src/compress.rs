//! `ferrohttpd compress DIR`: writes precompressed siblings (`x.br`, `x.zst`, `x.gz`) beside
//! the compressible files of a tree, for the server to send to clients that accept them. This
//! runs offline, before or while the tree is served, at the highest levels; the server's own
//! on-demand compression (`crate::ondemand`) covers files without a sibling, at faster ones.
//!
//! Rules of [`compress_dir`]:
//! - The walk is recursive, does not follow symlinks (neither to directories nor to files: a
//!   sibling is only written beside a real file), and skips names starting with `.` except
//!   `.well-known` (so `.git` and our own temporary files are never entered or compressed).
//! - A file is compressed when its extension is in [`COMPRESSIBLE`] (text formats, `svg`,
//!   `wasm`, `ico`, ...; never already-compressed formats such as `png`, `jpg`, `woff2`, `zip`)
//!   and it has at least `min_size` bytes. Files ending in `.gz`, `.br` or `.zst` are siblings,
//!   never sources.
//! - A sibling that is a regular file at least as new as the original is fresh and left
//!   alone. Otherwise it is (re)written. A sibling that would save less than 5% of the
//!   original is not written, and a stale one is removed; such files are compressed again on
//!   every run, since nothing records the verdict.
//! - Writes are atomic: the sibling is written to a hidden temporary file in the same
//!   directory, given the original's permissions and modification time, synced, and renamed
//!   over the old one. A server reading the tree sees the old sibling or the new one, never a
//!   partial one.
//! - Equal modification times are what make a sibling count as current, for the server and
//!   for the next run. The time stamped on the sibling is the original's *before* it was read:
//!   if the original changes while it is being compressed, its new time is later and the
//!   sibling is stale at once; if its size changed, the sibling is discarded and counted as an
//!   error.
//! - A failure on one file is reported on stderr and counted; the walk goes on. Only a failure
//!   to read `dir` itself is returned as an error.
//!
//! The codings: gzip at flate2's best level, brotli at quality 11 (window 2^22), zstd at level
//! 19 with the window capped at 8 MiB as RFC 9659 requires for HTTP.

pub use crate::config::cli::CompressOptions;
use crate::http::encoding::Encoding;
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, FileTimes, Metadata};
use std::io::{self, BufWriter, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Extensions (lowercase) of the formats worth compressing.
pub const COMPRESSIBLE: &[&str] = &[
    "html",
    "htm",
    "xhtml",
    "shtml",
    "css",
    "js",
    "mjs",
    "cjs",
    "json",
    "jsonld",
    "map",
    "xml",
    "xsl",
    "xslt",
    "svg",
    "txt",
    "text",
    "md",
    "markdown",
    "csv",
    "tsv",
    "wasm",
    "ico",
    "cur",
    "bmp",
    "webmanifest",
    "manifest",
    "appcache",
    "atom",
    "rss",
    "ics",
    "vtt",
    "srt",
    "yaml",
    "yml",
    "toml",
    "ini",
    "conf",
    "log",
    "rtf",
    "ps",
    "eps",
    "pdb",
    "ttf",
    "otf",
    "eot",
    "tex",
    "sh",
    "py",
    "rs",
    "c",
    "h",
    "go",
    "java",
    "ts",
    "tsx",
    "jsx",
    "vue",
    "php",
    "pl",
    "rb",
    "lua",
    "sql",
    "graphql",
    "gql",
    "diff",
    "patch",
    "asc",
    "pem",
    "wat",
    "glsl",
    "obj",
    "gltf",
    "geojson",
    "topojson",
];

/// What [`compress_dir`] did. The first three count siblings (one per file and coding), the
/// next two count files, `errors` counts failures of either kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompressReport {
    /// Siblings written (new or refreshed).
    pub written: usize,
    /// Siblings already current, left alone.
    pub fresh: usize,
    /// Siblings not written because they saved less than 5%.
    pub skipped_no_gain: usize,
    /// Files of a type not worth compressing (including existing siblings).
    pub skipped_type: usize,
    /// Compressible files below `min_size`.
    pub skipped_small: usize,
    /// Files or directories that failed.
    pub errors: usize,
}

impl fmt::Display for CompressReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} written, {} fresh, {} not worth compressing, {} of other types, {} too small, {} errors",
            self.written, self.fresh, self.skipped_no_gain, self.skipped_type, self.skipped_small, self.errors
        )
    }
}

/// Writes precompressed siblings for the tree at `dir` (see the module documentation).
pub fn compress_dir(dir: &Path, opts: &CompressOptions) -> io::Result<CompressReport> {
    let mut report = CompressReport::default();
    let mut encodings: Vec<Encoding> = Vec::with_capacity(opts.encodings.len());
    for &e in &opts.encodings {
        if !encodings.contains(&e) {
            encodings.push(e);
        }
    }
    let mut stack: Vec<PathBuf> = Vec::new();
    let top = fs::read_dir(dir)?;
    let mut next = Some(top);
    while let Some(entries) = next.take() {
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(err) => {
                    fail(&mut report, dir, &err);
                    continue;
                }
            };
            let name = entry.file_name();
            if name.as_bytes().starts_with(b".") && name != ".well-known" {
                continue;
            }
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() => compress_file(&path, &encodings, opts, &mut report),
                Ok(_) => {}
                Err(err) => fail(&mut report, &path, &err),
            }
        }
        while let Some(sub) = stack.pop() {
            match fs::read_dir(&sub) {
                Ok(entries) => {
                    next = Some(entries);
                    break;
                }
                Err(err) => fail(&mut report, &sub, &err),
            }
        }
    }
    Ok(report)
}

fn fail(report: &mut CompressReport, path: &Path, err: &io::Error) {
    report.errors += 1;
    eprintln!("ferrohttpd compress: {}: {err}", path.display());
}

/// Whether a file name has a compressible extension and is not itself a sibling.
fn is_compressible(name: &[u8]) -> bool {
    let Some(dot) = name.iter().rposition(|&b| b == b'.') else {
        return false;
    };
    let ext = &name[dot + 1..];
    COMPRESSIBLE.iter().any(|c| c.as_bytes().eq_ignore_ascii_case(ext))
}

fn compress_file(path: &Path, encodings: &[Encoding], opts: &CompressOptions, report: &mut CompressReport) {
    let name = path.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    if !is_compressible(name) {
        report.skipped_type += 1;
        return;
    }
    let meta = match fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return,
        Err(err) => return fail(report, path, &err),
    };
    if meta.len() < opts.min_size {
        report.skipped_small += 1;
        return;
    }
    let mtime = match meta.modified() {
        Ok(t) => t,
        Err(err) => return fail(report, path, &err),
    };
    for &enc in encodings {
        let mut sibling = OsString::from(path.as_os_str());
        sibling.push(enc.suffix());
        let sibling = PathBuf::from(sibling);
        match fs::symlink_metadata(&sibling) {
            Ok(m) if m.is_file() && m.modified().is_ok_and(|t| t >= mtime) => {
                report.fresh += 1;
                continue;
            }
            Ok(m) if m.is_dir() => {
                fail(report, &sibling, &io::Error::other("is a directory, not a compressed sibling"));
                continue;
            }
            _ => {}
        }
        match write_sibling(path, &sibling, enc, &meta, mtime) {
            Ok(Some(size)) => {
                report.written += 1;
                if opts.verbose {
                    println!("{} ({} -> {size} bytes)", sibling.display(), meta.len());
                }
            }
            Ok(None) => {
                report.skipped_no_gain += 1;
                match fs::remove_file(&sibling) {
                    Ok(()) => {}
                    Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                    Err(err) => fail(report, &sibling, &err),
                }
            }
            Err(err) => fail(report, &sibling, &err),
        }
    }
}

/// A temporary file removed on drop unless it was renamed into place.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

/// Compresses `src` into a temporary file and renames it to `dst`. `Ok(None)` if the result
/// saves less than 5% (nothing is written then).
fn write_sibling(src: &Path, dst: &Path, enc: Encoding, meta: &Metadata, mtime: SystemTime) -> io::Result<Option<u64>> {
    let dir = dst.parent().unwrap_or(Path::new("."));
    let base = dst.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let (file, mut temp) = create_temp(dir, &base)?;
    let mut input = Counting { inner: File::open(src)?, count: 0 };
    let out = BufWriter::with_capacity(64 * 1024, file);
    let out = match enc {
        Encoding::Gzip => {
            let mut w = flate2::write::GzEncoder::new(out, flate2::Compression::best());
            io::copy(&mut input, &mut w)?;
            w.finish()?
        }
        Encoding::Br => {
            let mut w = out;
            let params = brotli::enc::BrotliEncoderParams {
                quality: 11,
                lgwin: 22,
                size_hint: usize::try_from(meta.len()).unwrap_or(usize::MAX),
                ..Default::default()
            };
            brotli::BrotliCompress(&mut input, &mut w, &params)?;
            w
        }
        Encoding::Zstd => {
            let mut w = zstd::stream::write::Encoder::new(out, 19)?;
            w.window_log(23)?;
            w.include_checksum(true)?;
            w.set_pledged_src_size(Some(meta.len()))?;
            io::copy(&mut input, &mut w)?;
            w.finish()?
        }
    };
    let file = out.into_inner().map_err(|e| e.into_error())?;
    if input.count != meta.len() {
        return Err(io::Error::other("the file changed while it was being compressed"));
    }
    let size = file.metadata()?.len();
    // Saves less than 5%: size > 95% of the original.
    if u128::from(size) * 100 > u128::from(meta.len()) * 95 {
        return Ok(None);
    }
    file.set_permissions(meta.permissions())?;
    file.set_times(FileTimes::new().set_modified(mtime))?;
    file.sync_data()?;
    drop(file);
    fs::rename(&temp.path, dst)?;
    temp.armed = false;
    Ok(Some(size))
}

/// Creates `.NAME.PID.N.tmp` in `dir` with `O_EXCL`, trying a few N.
fn create_temp(dir: &Path, base: &str) -> io::Result<(File, TempFile)> {
    let pid = std::process::id();
    let mut last = None;
    for n in 0..16 {
        let path = dir.join(format!(".{base}.{pid}.{n}.tmp"));
        match fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(f) => return Ok((f, TempFile { path, armed: true })),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => last = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary file name available")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::Duration;

    fn html_body() -> Vec<u8> {
        let mut s = String::from("<!DOCTYPE html><html><body>\n");
        for i in 0..400 {
            s.push_str(&format!("<p class=\"row\">Paragraph number {i} of a page that compresses well.</p>\n"));
        }
        s.push_str("</body></html>\n");
        s.into_bytes()
    }

    /// Bytes that do not compress (xorshift noise).
    fn noise(n: usize) -> Vec<u8> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn opts() -> CompressOptions {
        CompressOptions::default()
    }

    fn gunzip(p: &Path) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(File::open(p).unwrap()).read_to_end(&mut out).unwrap();
        out
    }

    fn unbrotli(p: &Path) -> Vec<u8> {
        let mut out = Vec::new();
        brotli::Decompressor::new(File::open(p).unwrap(), 4096).read_to_end(&mut out).unwrap();
        out
    }

    fn unzstd(p: &Path) -> Vec<u8> {
        zstd::stream::decode_all(File::open(p).unwrap()).unwrap()
    }

    fn mtime(p: &Path) -> SystemTime {
        fs::metadata(p).unwrap().modified().unwrap()
    }

    #[test]
    fn writes_siblings_and_is_idempotent() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let body = html_body();
        fs::create_dir_all(d.join("sub/deeper")).unwrap();
        fs::write(d.join("index.html"), &body).unwrap();
        fs::write(d.join("sub/deeper/app.JS"), &body).unwrap();
        fs::write(d.join("image.png"), &body).unwrap();
        fs::write(d.join("tiny.css"), b"body{}").unwrap();
        fs::write(d.join("README"), &body).unwrap();
        fs::write(d.join("old.html.gz"), &body).unwrap();
        fs::create_dir(d.join(".git")).unwrap();
        fs::write(d.join(".git/config.txt"), &body).unwrap();
        fs::write(d.join(".hidden.html"), &body).unwrap();
        std::os::unix::fs::symlink("index.html", d.join("link.html")).unwrap();
        std::os::unix::fs::symlink("sub", d.join("sublink")).unwrap();

        let r = compress_dir(d, &opts()).unwrap();
        assert_eq!(
            r,
            CompressReport { written: 6, fresh: 0, skipped_no_gain: 0, skipped_type: 3, skipped_small: 1, errors: 0 },
            "{r}"
        );
        for f in ["index.html", "sub/deeper/app.JS"] {
            let orig = d.join(f);
            for (suffix, decode) in [(".gz", gunzip as fn(&Path) -> Vec<u8>), (".br", unbrotli), (".zst", unzstd)] {
                let sib = PathBuf::from(format!("{}{suffix}", orig.display()));
                assert_eq!(decode(&sib), body, "{}", sib.display());
                assert_eq!(mtime(&sib), mtime(&orig));
                assert!(fs::metadata(&sib).unwrap().len() < body.len() as u64 / 5);
            }
        }
        // Nothing else was written; the symlinked directory was not entered (it would have
        // counted the siblings seen through it as fresh).
        for absent in [
            "image.png.gz",
            "tiny.css.gz",
            "README.gz",
            "old.html.gz.gz",
            ".git/config.txt.gz",
            ".hidden.html.br",
            "link.html.gz",
        ] {
            assert!(fs::symlink_metadata(d.join(absent)).is_err(), "{absent}");
        }
        // No temporary files left behind.
        let leftovers: Vec<_> = fs::read_dir(d)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());

        // Second run: everything fresh.
        let r = compress_dir(d, &opts()).unwrap();
        assert_eq!((r.written, r.fresh, r.errors), (0, 6, 0), "{r}");
    }

    #[test]
    fn refreshes_stale_siblings() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("data.json");
        fs::write(&f, html_body()).unwrap();
        let gz_only = CompressOptions { encodings: vec![Encoding::Gzip, Encoding::Gzip], ..opts() };
        assert_eq!(compress_dir(tmp.path(), &gz_only).unwrap().written, 1);
        // The original changes (and its time moves on).
        let changed = b"{\"changed\": true}\n".repeat(100);
        fs::write(&f, &changed).unwrap();
        let later = mtime(&tmp.path().join("data.json.gz")) + Duration::from_secs(5);
        File::options().write(true).open(&f).unwrap().set_modified(later).unwrap();
        let r = compress_dir(tmp.path(), &gz_only).unwrap();
        assert_eq!((r.written, r.fresh), (1, 0), "{r}");
        assert_eq!(gunzip(&tmp.path().join("data.json.gz")), changed);
        assert_eq!(mtime(&tmp.path().join("data.json.gz")), later);
    }

    #[test]
    fn no_gain_writes_nothing_and_removes_stale() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("random.txt");
        fs::write(&f, noise(10_000)).unwrap();
        // A stale sibling from an older version of the file.
        fs::write(tmp.path().join("random.txt.br"), b"stale").unwrap();
        let old = mtime(&f) - Duration::from_secs(60);
        File::options().write(true).open(tmp.path().join("random.txt.br")).unwrap().set_modified(old).unwrap();
        let r = compress_dir(tmp.path(), &opts()).unwrap();
        assert_eq!((r.written, r.skipped_no_gain, r.errors), (0, 3, 0), "{r}");
        let names: Vec<_> = fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![OsString::from("random.txt")]);
    }

    #[test]
    fn min_size_and_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("a.svg");
        fs::write(&f, b"<svg>".repeat(60)).unwrap(); // 300 bytes
        fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
        let big_min = CompressOptions { min_size: 301, encodings: vec![Encoding::Gzip], verbose: false };
        let r = compress_dir(tmp.path(), &big_min).unwrap();
        assert_eq!((r.written, r.skipped_small), (0, 1));
        let r = compress_dir(tmp.path(), &CompressOptions { min_size: 300, ..big_min }).unwrap();
        assert_eq!(r.written, 1);
        let mode = fs::metadata(tmp.path().join("a.svg.gz")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    #[test]
    fn errors_and_odd_siblings() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("x.css"), html_body()).unwrap();
        fs::create_dir(tmp.path().join("x.css.gz")).unwrap();
        let r = compress_dir(tmp.path(), &opts()).unwrap();
        assert_eq!((r.written, r.errors), (2, 1), "{r}");
        assert!(compress_dir(&tmp.path().join("missing"), &opts()).is_err());
        assert!(compress_dir(&tmp.path().join("x.css"), &opts()).is_err());
    }

    #[test]
    fn extension_rules() {
        for yes in
            ["a.html", "b.HTM", "c.min.js", "d.json", "e.svg", "f.wasm", "g.ico", "site.webmanifest", "x.tar.txt"]
        {
            assert!(is_compressible(yes.as_bytes()), "{yes}");
        }
        for no in [
            "a.png",
            "b.jpg",
            "c.gif",
            "d.webp",
            "e.avif",
            "f.mp4",
            "g.woff2",
            "h.gz",
            "i.br",
            "j.zst",
            "k.zip",
            "html",
            "l.",
            "m.html.gz",
            "n.js.br",
            "o.css.zst",
        ] {
            assert!(!is_compressible(no.as_bytes()), "{no}");
        }
    }
}
