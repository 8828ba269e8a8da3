//! The file cache: what a request for a path needs, kept between requests.
//!
//! An entry is keyed by the normalized URL path and holds the outcome of resolving it: a
//! file (metadata, Content-Type, validators, the constant part of the response head and the
//! body source), a redirect, or a refusal (404/403, cached briefly so a flood of misses does
//! not reach the disk every time). Files up to `max_file` bytes are memory-mapped and sent
//! with the head in one `sendmsg`; larger files keep an open descriptor for `sendfile`.
//!
//! Entries are revalidated at most once per `revalidate` interval by resolving the path
//! again (so the symlink and dotfile policies are re-applied) and comparing
//! (dev, inode, size, mtime) and (mode, owner, ctime); any change rebuilds the entry, which is
//! how a file replaced by `rename()` or deleted is picked up, and how a `chmod` or `chown`
//! reaches the access checks. An entry's size is its mapping's length, never a stale
//! `fstat`'s. The cache is bounded by entry count and by mapped (or rendered) bytes, evicting
//! the least recently used. Entries are reference-counted: a connection still sending from an
//! evicted or replaced entry keeps its mapping alive until it is done.
//!
//! Directory listings live here too ([`FileCache::listing`]): a rendering per directory and
//! view (key: the path's key, a NUL, the view's key), kept while the directory's version
//! holds, in the same LRU and byte budget. The last full reading of a listed directory has a
//! slot of its own (key: the path's key and a NUL), shared by its views; it is redone when the
//! directory's own stamp (dev, inode, mtime, ctime) changes, checked once per `revalidate`,
//! and otherwise at most every max(`revalidate`, `REREAD_FACTOR` (100) × what it cost), since a
//! stat per entry is what a listing costs.
//!
//! Mapped bytes are only handed to the kernel as `sendmsg` buffers, or copied out by
//! `sys::copy_mapped`, which survives a page gone from the file. See [`Body::Mapped`].

use std::cell::Cell;
#[cfg(feature = "http2")]
use std::cell::OnceCell;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::rc::Rc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use memmap2::Mmap;

use super::listing::{self, ListOptions, View};
use super::lru::Lru;
use super::resolve::{self, DocRoot, RealPath, ResolveError, ResolveOptions, Resolved};
use crate::http::mime::{MimeTypes, Negotiation};
use crate::http::response::Rendered;

/// Where a cached file's bytes come from.
pub enum Body {
    /// Nothing to send (empty file).
    Empty,
    /// The whole file, mapped read-only and shared.
    ///
    /// SAFETY (the invariant that makes this sound): if another process truncates the file,
    /// touching a page past the new end raises SIGBUS, which would kill the server. So these
    /// bytes are read in only two ways: by the kernel, as `sendmsg` buffers, where the fault
    /// becomes `EFAULT` (or a short write); and by `sys::copy_mapped` (TLS, HTTP/2, the
    /// on-demand compressor), a `memcpy` whose thread has recorded the source range for a
    /// SIGBUS/SIGSEGV handler: a fault inside that range gets a page of zeros mapped over it,
    /// the copy finishes and returns `EFAULT`, and the pages found gone, to the end of the
    /// range, are left `PROT_NONE` (so every later read of them is `EFAULT` too, never zeros
    /// taken for content). Either way the connection treats `EFAULT` as "file changed": it
    /// closes and the entry is dropped; the patched pages go with the mapping (`munmap` of
    /// the whole). Never dereference these bytes any other way: there a fault is SIGBUS.
    Mapped(Mmap),
    /// A file too large to map: an open descriptor, sent with `sendfile` at explicit offsets
    /// (so connections can share it).
    Fd(File),
    /// Bytes rendered by the server (a directory listing), shared like a mapping.
    Memory(Box<[u8]>),
}

impl Body {
    /// The bytes to send from memory: a mapping or a rendering (`None` for a descriptor).
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Body::Empty => Some(&[]),
            Body::Mapped(map) => Some(map),
            Body::Memory(bytes) => Some(bytes),
            Body::Fd(_) => None,
        }
    }
}

/// The largest fd-backed body HTTP/2 maps to send from ([`FileEntry::spliceable`]): beyond
/// it, a mapping would take address space (small 32-bit boxes) for little gain over
/// `pread` per frame.
#[cfg(feature = "http2")]
pub const SPLICE_MAP_MAX: u64 = 16 * 1024 * 1024;

/// A file ready to be served, or a rendered directory listing (`Body::Memory`: then the
/// identity, times and mode are the directory's, `url_path` is its path and the validators
/// are the listing's).
pub struct FileEntry {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: i64,
    pub mtime_nsec: i64,
    /// Status-change time (seconds, nanoseconds): moves on chmod, chown, link and write.
    pub ctime: (i64, i64),
    pub uid: u32,
    pub gid: u32,
    /// The URL path of the file served (the index file for a directory).
    pub url_path: Box<str>,
    pub content_type: Box<str>,
    /// `Content-Type: <content_type>` and `Content-Length: <size>` with their CRLFs, rendered
    /// once, each its own slice: `content_type_field` ends at `length_at`.
    pub fields: Box<[u8]>,
    pub length_at: usize,
    /// What this file may be sent as instead (by its Content-Type), decided once.
    pub negotiation: Negotiation,
    /// Strong validator: `"<inode>-<size>-<mtime ns>"` in hex.
    pub etag: Box<str>,
    /// mtime as seconds, unless it is 0 or 1 (reproducible-build stores).
    pub last_modified_secs: Option<u64>,
    pub last_modified: Option<Box<str>>,
    /// Permission bits (thttpd mode serves only world-readable files).
    pub mode: u32,
    /// Where the file really is when a symlink led elsewhere (`.htpasswd` rules follow it).
    pub real_path: RealPath,
    /// The constant part of every response head for this file, rendered once: the
    /// `ETag` and `Last-Modified` fields with their CRLFs, and their spans.
    pub validator_fields: Rendered,
    /// The HTTP/2 encoding of `length_field` and of `validator_fields`, made once
    /// (`h2::hpack::encode_unindexed`, the bytes every HPACK block carries for them, as
    /// those fields are never indexed): `h2_fields[..h2_validators_at]` is `content-length`,
    /// the rest `etag` and `last-modified`. A response whose head has the HTTP/1.1 bytes
    /// copies these instead of encoding them again (`conn/h2.rs`).
    #[cfg(feature = "http2")]
    pub h2_fields: Box<[u8]>,
    #[cfg(feature = "http2")]
    pub h2_validators_at: usize,
    pub body: Body,
    /// A mapping of an fd-backed body ([`Body::Fd`], up to [`SPLICE_MAP_MAX`]), made the first
    /// time HTTP/2 sends it on a plain connection ([`FileEntry::spliceable`]); `None` inside:
    /// it could not be made, or not with the entry's size.
    #[cfg(feature = "http2")]
    spliceable: OnceCell<Option<Mmap>>,
    /// Until when this file is known to have no sibling variant (`serve::pipeline` looked for
    /// `x.jpg.avif` and `x.jpg.webp`, or for `x.br`, `x.zst` and `x.gz`, and found none, or only
    /// older ones): until then a request for it costs no sibling lookup, so a file without
    /// variants is served at the cost it had before negotiation existed. A rebuilt entry
    /// starts unknown.
    pub no_variants_until: Cell<Option<Instant>>,
}

/// What an entry keeps of its file's (or directory's) metadata: identity, size, times, owner
/// and mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStat {
    pub dev: u64,
    pub ino: u64,
    /// The length `Metadata` gives; an entry's own `size` is its body's when that is in memory.
    pub len: u64,
    pub mtime: i64,
    pub mtime_nsec: i64,
    pub ctime: (i64, i64),
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

impl FileStat {
    pub fn of(m: &Metadata) -> FileStat {
        FileStat {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
            ctime: (m.ctime(), m.ctime_nsec()),
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode(),
        }
    }
}

impl FileEntry {
    /// The entry for `body`, described by `stat`, served as `url_path` with `content_type`
    /// and validators `etag` and `last_modified_secs`: every derived field (the size, the
    /// `Last-Modified` date, the rendered validator fields) is computed here, once. Its size
    /// is the body's length when it is in memory (a mapping's length, never a stale `fstat`'s),
    /// else `stat.len`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        stat: FileStat,
        url_path: Box<str>,
        content_type: Box<str>,
        etag: String,
        last_modified_secs: Option<u64>,
        real_path: RealPath,
        body: Body,
    ) -> FileEntry {
        let size = body.bytes().map_or(stat.len, |b| b.len() as u64);
        let last_modified =
            last_modified_secs.map(|s| httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(s)).into_boxed_str());
        let mut fields = Vec::with_capacity(content_type.len() + 48);
        fields.extend_from_slice(b"Content-Type: ");
        fields.extend_from_slice(content_type.as_bytes());
        fields.extend_from_slice(b"\r\n");
        let length_at = fields.len();
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(size).as_bytes();
        fields.extend_from_slice(b"Content-Length: ");
        fields.extend_from_slice(digits);
        fields.extend_from_slice(b"\r\n");
        #[cfg(feature = "http2")]
        let (h2_fields, h2_validators_at) = {
            use crate::h2::hpack::encode_unindexed;
            let mut h2 = Vec::with_capacity(64);
            encode_unindexed(b"content-length", digits, &mut h2);
            let at = h2.len();
            encode_unindexed(b"etag", etag.as_bytes(), &mut h2);
            if let Some(lm) = &last_modified {
                encode_unindexed(b"last-modified", lm.as_bytes(), &mut h2);
            }
            (h2.into_boxed_slice(), at)
        };
        FileEntry {
            dev: stat.dev,
            ino: stat.ino,
            size,
            mtime: stat.mtime,
            mtime_nsec: stat.mtime_nsec,
            ctime: stat.ctime,
            uid: stat.uid,
            gid: stat.gid,
            url_path,
            fields: fields.into_boxed_slice(),
            length_at,
            negotiation: Negotiation::of(&content_type),
            content_type,
            validator_fields: validator_fields(&etag, last_modified.as_deref()),
            #[cfg(feature = "http2")]
            h2_fields,
            #[cfg(feature = "http2")]
            h2_validators_at,
            etag: etag.into_boxed_str(),
            last_modified_secs,
            last_modified,
            mode: stat.mode,
            real_path,
            body,
            #[cfg(feature = "http2")]
            spliceable: OnceCell::new(),
            no_variants_until: Cell::new(None),
        }
    }

    /// The body's bytes in memory, for HTTP/2 on a plain connection to hand to `sendmsg` as
    /// they lie: a mapping's or a rendering's; for an fd-backed body (above `max_file`, which
    /// HTTP/1.1 sends with `sendfile`) a mapping made on first use and kept with the entry, up
    /// to [`SPLICE_MAP_MAX`]. HTTP/2 cuts a body into frames with a 9-byte header before each,
    /// so `sendfile` would take two system calls per 16 KiB frame, and `pread` copies each
    /// byte once more in the kernel than a `sendmsg` from the mapping. The same rules as for
    /// [`Body::Mapped`] apply to these bytes: only the kernel reads them.
    #[cfg(feature = "http2")]
    pub fn spliceable(&self) -> Option<&[u8]> {
        let Body::Fd(file) = &self.body else { return self.body.bytes() };
        if self.size > SPLICE_MAP_MAX {
            return None;
        }
        self.spliceable
            .get_or_init(|| {
                // SAFETY: as for `Body::Mapped`: this process never reads the bytes itself.
                let map = unsafe { Mmap::map(file) }.ok()?;
                // Shorter or longer than the entry says: the file changed, and the entry is
                // revalidated soon; until then the bytes go by `pread`, which sees the change.
                (map.len() as u64 == self.size).then_some(map)
            })
            .as_deref()
    }

    /// `Content-Type: <content_type>` and its CRLF.
    pub fn content_type_field(&self) -> &[u8] {
        &self.fields[..self.length_at]
    }

    /// `Content-Length: <size>` and its CRLF (for the whole body).
    pub fn length_field(&self) -> &[u8] {
        &self.fields[self.length_at..]
    }

    /// The HPACK encoding of [`FileEntry::length_field`].
    #[cfg(feature = "http2")]
    pub fn h2_length(&self) -> &[u8] {
        &self.h2_fields[..self.h2_validators_at]
    }

    /// The HPACK encoding of `validator_fields`.
    #[cfg(feature = "http2")]
    pub fn h2_validators(&self) -> &[u8] {
        &self.h2_fields[self.h2_validators_at..]
    }

    /// What this entry keeps of its file's metadata (`len`: its size).
    pub fn stat(&self) -> FileStat {
        FileStat {
            dev: self.dev,
            ino: self.ino,
            len: self.size,
            mtime: self.mtime,
            mtime_nsec: self.mtime_nsec,
            ctime: self.ctime,
            uid: self.uid,
            gid: self.gid,
            mode: self.mode,
        }
    }

    /// Whether `m` describes the file this entry was built from, unchanged: same inode, size
    /// and mtime (the content), and same mode, owner and ctime (what the access checks use:
    /// a `chmod` or `chown` must take effect at the next revalidation, not never).
    fn same_file(&self, m: &Metadata) -> bool {
        self.stat() == FileStat::of(m)
    }
}

/// A directory without an index file (listed, or refused, by the caller).
pub struct DirEntry {
    /// The open directory, for reading its entries relative to it.
    pub dir: File,
    pub mode: u32,
}

/// The cached outcome of resolving a path.
#[derive(Clone)]
pub enum Lookup {
    File(Rc<FileEntry>),
    Directory(Rc<DirEntry>),
    /// A directory without its trailing slash.
    Redirect,
    /// A refusal with this status (403, 404).
    Status(u16),
}

/// What a slot holds: the outcome of resolving a path, a listing rendered in one view, or
/// what the last full reading of a listed directory found (shared by its views).
enum Value {
    Path(Lookup),
    Listing { entry: Rc<FileEntry>, version: listing::Version },
    Directory(DirState),
}

/// A directory's own identity and times: they change when an entry is added, removed or
/// renamed (not when a file in it is written).
#[derive(Clone, Copy, PartialEq, Eq)]
struct DirStamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl DirStamp {
    fn of(m: &Metadata) -> DirStamp {
        DirStamp { dev: m.dev(), ino: m.ino(), mtime: (m.mtime(), m.mtime_nsec()), ctime: (m.ctime(), m.ctime_nsec()) }
    }
}

/// The last full reading of a listed directory.
#[derive(Clone, Copy)]
struct DirState {
    version: listing::Version,
    stamp: DirStamp,
    read_at: Instant,
    /// How long the reading took.
    cost: Duration,
}

/// A listed directory is read again (a stat per entry) at most this many times less often
/// than the reading takes, so re-checking a large directory for changes to its files costs
/// the loop at most 1% of its time; entries added, removed or renamed still show within
/// `revalidate`, since they change the directory's own stamp.
const REREAD_FACTOR: u32 = 100;

impl DirState {
    fn fresh_for(&self, revalidate: Duration) -> Duration {
        revalidate.max(self.cost.saturating_mul(REREAD_FACTOR))
    }
}

/// A cached value and when it was last checked against the filesystem; its weight in the
/// [`Lru`] is the bytes of mapping or rendering it accounts for.
struct Slot {
    value: Value,
    checked: Instant,
}

/// Cache limits and timing.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    pub max_bytes: u64,
    pub max_entries: usize,
    pub max_file: u64,
    pub revalidate: Duration,
    pub negative: Duration,
}

/// Counters for the status page.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
}

/// A value checked at `checked` is still fresh at `now` for a time to live of `ttl` (an
/// addition and a comparison: cheaper than the subtraction, and this runs on every hit).
/// `now` is never before `checked`: both come from the event loop's monotonic clock.
fn fresh_at(checked: Instant, ttl: Duration, now: Instant) -> bool {
    checked.checked_add(ttl).is_none_or(|due| now < due)
}

pub struct FileCache {
    cfg: CacheConfig,
    /// Bounded by `cfg.max_entries` and by mapped bytes, `cfg.max_bytes`.
    slots: Lru<Slot>,
    /// Scratch for building keys.
    key: String,
    pub stats: CacheStats,
}

impl FileCache {
    pub fn new(cfg: CacheConfig) -> FileCache {
        FileCache {
            slots: Lru::new(cfg.max_entries, cfg.max_bytes),
            cfg,
            key: String::new(),
            stats: CacheStats::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes of files currently mapped, and of listings rendered, by cached entries.
    pub fn mapped_bytes(&self) -> u64 {
        self.slots.weight()
    }

    /// Looks `path` (normalized) up under `root`, resolving it when it is not cached or is
    /// due for revalidation. `space` keeps the keys of different roots apart (0 for the main
    /// root, 1.. for virtual hosts). Errors not worth caching (400, 500) come back as `Err`.
    #[allow(clippy::too_many_arguments)]
    pub fn get(
        &mut self,
        root: &DocRoot,
        space: usize,
        path: &str,
        opts: &ResolveOptions<'_>,
        mime: &MimeTypes,
        now: Instant,
        now_secs: u64,
    ) -> Result<Lookup, ResolveError> {
        if space == 0 {
            // The main root's keys are the paths themselves (see `path_key`).
            return self.get_keyed(root, path, path, opts, mime, now, now_secs);
        }
        let mut key = std::mem::take(&mut self.key);
        path_key(space, path, &mut key);
        let result = self.get_keyed(root, &key, path, opts, mime, now, now_secs);
        self.key = key;
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn get_keyed(
        &mut self,
        root: &DocRoot,
        key: &str,
        path: &str,
        opts: &ResolveOptions<'_>,
        mime: &MimeTypes,
        now: Instant,
        now_secs: u64,
    ) -> Result<Lookup, ResolveError> {
        if let Some(i) = self.slots.find(key) {
            let slot = self.slots.get(i);
            let Value::Path(value) = &slot.value else {
                // Keys of paths and of listings never collide; were they to, start afresh.
                self.slots.remove(i);
                return self.get_keyed(root, key, path, opts, mime, now, now_secs);
            };
            let ttl = match value {
                Lookup::File(_) | Lookup::Directory(_) => self.cfg.revalidate,
                Lookup::Redirect | Lookup::Status(_) => self.cfg.negative,
            };
            if fresh_at(slot.checked, ttl, now) {
                self.stats.hits += 1;
                let v = value.clone();
                self.slots.touch(i);
                return Ok(v);
            }
            // Due for revalidation: resolve again; keep the entry if the file is the same.
            let fresh = resolve::resolve(root, path, opts);
            if let (Ok(Resolved::File { meta, .. }), Lookup::File(e)) = (&fresh, value) {
                if e.same_file(meta) && meta.is_file() {
                    self.stats.hits += 1;
                    let v = Lookup::File(e.clone());
                    self.slots.get_mut(i).checked = now;
                    self.slots.touch(i);
                    return Ok(v);
                }
            }
            self.slots.remove(i);
            self.stats.misses += 1;
            return self.insert_resolved(root, key, fresh, mime, now, now_secs);
        }
        self.stats.misses += 1;
        let fresh = resolve::resolve(root, path, opts);
        self.insert_resolved(root, key, fresh, mime, now, now_secs)
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_resolved(
        &mut self,
        root: &DocRoot,
        key: &str,
        fresh: Result<Resolved, ResolveError>,
        mime: &MimeTypes,
        now: Instant,
        now_secs: u64,
    ) -> Result<Lookup, ResolveError> {
        let (value, mapped) = match fresh {
            Ok(Resolved::File { file, meta, url_path }) => {
                let entry = self.build(root, file, &meta, url_path, mime, now_secs).map_err(ResolveError::Io)?;
                let mapped = if matches!(entry.body, Body::Mapped(_)) { entry.size } else { 0 };
                (Lookup::File(Rc::new(entry)), mapped)
            }
            Ok(Resolved::Redirect) => (Lookup::Redirect, 0),
            Ok(Resolved::Directory { dir, meta }) => {
                (Lookup::Directory(Rc::new(DirEntry { dir, mode: meta.mode() })), 0)
            }
            Err(e @ (ResolveError::NotFound | ResolveError::Forbidden)) => (Lookup::Status(e.status()), 0),
            Err(e) => return Err(e),
        };
        self.insert(key, Value::Path(value.clone()), mapped, now);
        Ok(value)
    }

    /// Caches `value` under `key`, evicting the least recently used entries to make room; a
    /// value larger than the whole budget (or any value, with `max_entries = 0`) is not kept.
    fn insert(&mut self, key: &str, value: Value, mapped: u64, now: Instant) {
        self.slots.insert(key, Slot { value, checked: now }, mapped);
    }

    /// The listing of `dir` (the directory found at `path` in key space `space`, shown as
    /// `shown`) in `view`, rendered at most once per version of the directory: a cached
    /// rendering is used as is for `revalidate`, then the directory is read again and the
    /// rendering kept if its [`listing::Version`] did not change. Renderings count against
    /// the cache's byte budget like mappings.
    #[allow(clippy::too_many_arguments)]
    pub fn listing(
        &mut self,
        dir: &DirEntry,
        space: usize,
        path: &str,
        shown: &str,
        view: View,
        opts: &ListOptions,
        now: Instant,
        now_secs: u64,
    ) -> std::io::Result<Rc<FileEntry>> {
        let mut key = std::mem::take(&mut self.key);
        path_key(space, path, &mut key);
        // A NUL never survives `normalize`, so no path key looks like this one.
        key.push('\0');
        let tag_start = key.len();
        view.key(&mut key);
        let result = self.listing_keyed(dir, &key, tag_start, shown, view, opts, now, now_secs);
        self.key = key;
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn listing_keyed(
        &mut self,
        dir: &DirEntry,
        key: &str,
        tag_start: usize,
        shown: &str,
        view: View,
        opts: &ListOptions,
        now: Instant,
        now_secs: u64,
    ) -> std::io::Result<Rc<FileEntry>> {
        if let Some(i) = self.slots.find(key) {
            let slot = self.slots.get(i);
            if let Value::Listing { entry, .. } = &slot.value {
                if fresh_at(slot.checked, self.cfg.revalidate, now) {
                    self.stats.hits += 1;
                    let e = entry.clone();
                    self.slots.touch(i);
                    return Ok(e);
                }
            }
        }
        // What the directory holds now: from the last full reading, shared by every view,
        // while the directory itself is unchanged and that reading is recent enough; else
        // read again (a stat per entry: the costly part, so its rate is bounded).
        let meta = dir.dir.metadata()?;
        let stamp = DirStamp::of(&meta);
        let dkey = &key[..tag_start];
        let known = match self.slots.find(dkey).map(|i| &self.slots.get(i).value) {
            Some(Value::Directory(st))
                if st.stamp == stamp && fresh_at(st.read_at, st.fresh_for(self.cfg.revalidate), now) =>
            {
                Some(st.version)
            }
            _ => None,
        };
        let mut read = None;
        let version = match known {
            Some(v) => v,
            None => {
                let started = Instant::now();
                let (entries, truncated) = listing::read_dir_fd(std::os::fd::AsFd::as_fd(&dir.dir), opts)?;
                let version = listing::version(&meta, &entries, truncated, opts);
                let state = DirState { version, stamp, read_at: now, cost: started.elapsed() };
                self.insert(dkey, Value::Directory(state), 0, now);
                read = Some((entries, truncated));
                version
            }
        };
        if let Some(i) = self.slots.find(key) {
            if let Value::Listing { entry, version: v } = &self.slots.get(i).value {
                if *v == version {
                    self.stats.hits += 1;
                    let e = entry.clone();
                    self.slots.get_mut(i).checked = now;
                    self.slots.touch(i);
                    return Ok(e);
                }
            }
            self.slots.remove(i);
        }
        let (entries, truncated) = match read {
            Some(r) => r,
            None => listing::read_dir_fd(std::os::fd::AsFd::as_fd(&dir.dir), opts)?,
        };
        // Rendered from what was just read: if the directory changed since the shared
        // reading, the version must describe these entries.
        let version = listing::version(&meta, &entries, truncated, opts);
        self.stats.misses += 1;
        let mut out = Vec::new();
        view.render(shown, &entries, truncated, opts.max_bytes, &mut out);
        let body = out.into_boxed_slice();
        let size = body.len() as u64;
        let etag = format!("\"{:016x}-{}\"", version.hash, &key[tag_start..]);
        let last_modified_secs = Some(version.mtime.min(now_secs)).filter(|&s| s > 1);
        let entry = Rc::new(FileEntry::new(
            FileStat::of(&meta),
            shown.into(),
            view.content_type().into(),
            etag,
            last_modified_secs,
            // Access to a listing is checked on its directory before it is looked up here.
            RealPath::Same,
            Body::Memory(body),
        ));
        self.insert(key, Value::Listing { entry: entry.clone(), version }, size, now);
        Ok(entry)
    }

    fn build(
        &self,
        root: &DocRoot,
        file: File,
        meta: &Metadata,
        url_path: String,
        mime: &MimeTypes,
        now_secs: u64,
    ) -> std::io::Result<FileEntry> {
        let real_path = resolve::real_path(root, &url_path, &file, meta);
        let mut meta = meta.clone();
        let body = if meta.len() == 0 {
            Body::Empty
        } else if meta.len() <= self.cfg.max_file {
            // SAFETY: mapping a file is unsafe because the bytes can change or vanish under
            // the mapping. This process never reads them; see `Body::Mapped`.
            let map = unsafe { Mmap::map(&file)? };
            // `Mmap::map` maps the length the file has now, which is not `meta`'s if the file
            // changed in between (truncated, or grown). The mapping is what will be sent, so
            // the entry describes it: take fresh metadata; if the file is still changing, the
            // mapping's length wins and the next revalidation sees the difference.
            if map.len() as u64 != meta.len() {
                meta = file.metadata()?;
            }
            if map.is_empty() {
                Body::Empty
            } else {
                Body::Mapped(map)
            }
        } else {
            Body::Fd(file)
        };
        let size = body.bytes().map_or(meta.len(), |b| b.len() as u64);
        let mtime_secs = u64::try_from(meta.mtime()).ok().filter(|&s| s > 1);
        let last_modified_secs = mtime_secs.map(|s| s.min(now_secs));
        let mtime_ns = (meta.mtime() as i128) * 1_000_000_000 + meta.mtime_nsec() as i128;
        let etag = format!("\"{:x}-{:x}-{:x}\"", meta.ino(), size, mtime_ns.max(0));
        let content_type = mime.lookup(&url_path).into();
        Ok(FileEntry::new(
            FileStat::of(&meta),
            url_path.into_boxed_str(),
            content_type,
            etag,
            last_modified_secs,
            real_path,
            body,
        ))
    }

    /// Drops the entry that holds `entry` (its file changed under a transfer).
    pub fn invalidate(&mut self, entry: &Rc<FileEntry>) {
        let found = self.slots.position(|s| match &s.value {
            Value::Path(Lookup::File(e)) | Value::Listing { entry: e, .. } => Rc::ptr_eq(e, entry),
            Value::Path(_) | Value::Directory(_) => false,
        });
        if let Some(i) = found {
            self.slots.remove(i);
        }
    }

    /// Resolves and caches every regular file under `dir` (a path below the root, normalized
    /// form such as "/assets/"), up to the cache limits. Returns how many files were loaded.
    pub fn preload(
        &mut self,
        root: &DocRoot,
        dir: &str,
        opts: &ResolveOptions<'_>,
        mime: &MimeTypes,
        now: Instant,
        now_secs: u64,
    ) -> usize {
        let mut loaded = 0;
        let mut stack = vec![dir.trim_end_matches('/').to_string()];
        while let Some(d) = stack.pop() {
            let fs_dir = root.path().join(d.trim_start_matches('/'));
            let Ok(rd) = std::fs::read_dir(&fs_dir) else { continue };
            for ent in rd.flatten() {
                let Ok(name) = ent.file_name().into_string() else { continue };
                let Ok(ft) = ent.file_type() else { continue };
                let url = format!("{d}/{name}");
                if ft.is_dir() {
                    stack.push(url);
                } else if ft.is_file() || ft.is_symlink() {
                    if self.slots.len() >= self.slots.max_entries() {
                        return loaded;
                    }
                    if let Ok(Lookup::File(_)) = self.get(root, 0, &url, opts, mime, now, now_secs) {
                        loaded += 1;
                    }
                }
            }
        }
        loaded
    }
}

/// The cache key of `path` in key space `space` (0 for the main root, no prefix).
pub(crate) fn path_key(space: usize, path: &str, key: &mut String) {
    key.clear();
    if space > 0 {
        key.push_str(itoa::Buffer::new().format(space));
        key.push('\0');
    }
    key.push_str(path);
}

/// The `ETag` and `Last-Modified` fields with their CRLFs, rendered once per entry.
pub(crate) fn validator_fields(etag: &str, last_modified: Option<&str>) -> Rendered {
    Rendered::validators(etag.as_bytes(), last_modified.map(str::as_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::resolve::{DotfilePolicy, SymlinkPolicy};
    use std::collections::BTreeMap;

    fn setup() -> (tempfile::TempDir, DocRoot, MimeTypes) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), b"hello").unwrap();
        std::fs::write(dir.path().join("big.bin"), vec![7u8; 5000]).unwrap();
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let root = DocRoot::open(dir.path()).unwrap();
        (dir, root, MimeTypes::new(&BTreeMap::new(), "utf-8"))
    }

    fn cfg() -> CacheConfig {
        CacheConfig {
            max_bytes: 1 << 20,
            max_entries: 100,
            max_file: 1000,
            revalidate: Duration::from_secs(3600),
            negative: Duration::from_secs(3600),
        }
    }

    const INDEX: &[String] = &[];
    fn opts() -> ResolveOptions<'static> {
        ResolveOptions {
            symlinks: SymlinkPolicy::WithinRoot,
            dotfiles: DotfilePolicy::Deny,
            index: INDEX,
            site_depth: 0,
        }
    }

    fn file(l: Result<Lookup, ResolveError>) -> Rc<FileEntry> {
        match l {
            Ok(Lookup::File(e)) => e,
            _ => panic!("not a file"),
        }
    }

    #[test]
    fn hits_misses_and_kinds() {
        let (_d, root, mime) = setup();
        let mut c = FileCache::new(cfg());
        let now = Instant::now();
        let e = file(c.get(&root, 0, "/a.txt", &opts(), &mime, now, 2_000_000_000));
        assert!(matches!(e.body, Body::Mapped(_)));
        assert_eq!(&*e.content_type, "text/plain; charset=utf-8");
        assert_eq!(e.content_type_field(), b"Content-Type: text/plain; charset=utf-8\r\n");
        assert_eq!(e.length_field(), b"Content-Length: 5\r\n");
        assert_eq!(e.negotiation, Negotiation::Compress);
        let e2 = file(c.get(&root, 0, "/a.txt", &opts(), &mime, now, 2_000_000_000));
        assert!(Rc::ptr_eq(&e, &e2));
        assert_eq!((c.stats.hits, c.stats.misses), (1, 1));
        assert!(matches!(file(c.get(&root, 0, "/big.bin", &opts(), &mime, now, 0)).body, Body::Fd(_)));
        assert!(matches!(file(c.get(&root, 0, "/empty", &opts(), &mime, now, 0)).body, Body::Empty));
        assert!(matches!(c.get(&root, 0, "/d", &opts(), &mime, now, 0), Ok(Lookup::Redirect)));
        assert!(matches!(c.get(&root, 0, "/nope", &opts(), &mime, now, 0), Ok(Lookup::Status(404))));
        assert_eq!(c.len(), 5);
        assert_eq!(c.mapped_bytes(), 5);
    }

    #[test]
    fn revalidation_sees_changes() {
        let (d, root, mime) = setup();
        let mut cf = cfg();
        cf.revalidate = Duration::ZERO;
        cf.negative = Duration::ZERO;
        let mut c = FileCache::new(cf);
        let now = Instant::now();
        let e1 = file(c.get(&root, 0, "/a.txt", &opts(), &mime, now, 0));
        let e2 = file(c.get(&root, 0, "/a.txt", &opts(), &mime, now, 0));
        assert!(Rc::ptr_eq(&e1, &e2), "unchanged file keeps its entry");
        // Replace by rename: new inode.
        std::fs::write(d.path().join("tmp"), b"changed!").unwrap();
        std::fs::rename(d.path().join("tmp"), d.path().join("a.txt")).unwrap();
        let e3 = file(c.get(&root, 0, "/a.txt", &opts(), &mime, now, 0));
        assert_eq!(e3.size, 8);
        assert_ne!(e1.etag, e3.etag);
        std::fs::remove_file(d.path().join("a.txt")).unwrap();
        assert!(matches!(c.get(&root, 0, "/a.txt", &opts(), &mime, now, 0), Ok(Lookup::Status(404))));
        // The old entry is still usable by whoever holds it.
        assert_eq!(e1.size, 5);
    }

    #[test]
    fn revalidation_sees_permission_changes() {
        use std::os::unix::fs::PermissionsExt;
        let (d, root, mime) = setup();
        let mut cf = cfg();
        cf.revalidate = Duration::ZERO;
        let mut c = FileCache::new(cf);
        let now = Instant::now();
        let set =
            |m: u32| std::fs::set_permissions(d.path().join("a.txt"), std::fs::Permissions::from_mode(m)).unwrap();
        set(0o644);
        let e1 = file(c.get(&root, 0, "/a.txt", &opts(), &mime, now, 0));
        assert_eq!(e1.mode & 0o777, 0o644);
        // Same content, inode and mtime: only the mode (and ctime) moved.
        set(0o755);
        let e2 = file(c.get(&root, 0, "/a.txt", &opts(), &mime, now, 0));
        assert!(!Rc::ptr_eq(&e1, &e2), "a chmod rebuilds the entry");
        assert_eq!(e2.mode & 0o777, 0o755);
        assert_eq!(e1.etag, e2.etag, "the content did not change, nor does its validator");
        let e3 = file(c.get(&root, 0, "/a.txt", &opts(), &mime, now, 0));
        assert!(Rc::ptr_eq(&e2, &e3), "and is kept while nothing changes");
    }

    #[test]
    fn entry_size_is_the_mapping_length() {
        let (_d, root, mime) = setup();
        let mut c = FileCache::new(cfg());
        for path in ["/a.txt", "/big.bin", "/empty"] {
            let e = file(c.get(&root, 0, path, &opts(), &mime, Instant::now(), 0));
            match &e.body {
                Body::Mapped(m) => assert_eq!(m.len() as u64, e.size),
                Body::Empty => assert_eq!(e.size, 0),
                Body::Fd(f) => assert_eq!(f.metadata().unwrap().len(), e.size),
                Body::Memory(_) => panic!("a file is never rendered"),
            }
        }
    }

    fn dir_entry(c: &mut FileCache, root: &DocRoot, mime: &MimeTypes, path: &str) -> Rc<DirEntry> {
        match c.get(root, 0, path, &opts(), mime, Instant::now(), 0) {
            Ok(Lookup::Directory(d)) => d,
            _ => panic!("not a directory"),
        }
    }

    #[test]
    fn listings_are_rendered_once_per_version_and_view() {
        let (d, root, mime) = setup();
        std::fs::write(d.path().join("d/one.txt"), b"1").unwrap();
        let mut cf = cfg();
        cf.revalidate = Duration::from_secs(10);
        let mut c = FileCache::new(cf);
        let dir = dir_entry(&mut c, &root, &mime, "/d/");
        let lo = ListOptions { show_dotfiles: false, max_entries: 100, max_bytes: 1 << 20 };
        let html = View::DEFAULT;
        let json = View { format: listing::Format::Json, ..View::DEFAULT };
        let t0 = Instant::now();
        let get = |c: &mut FileCache, v: View, t: Instant| {
            c.listing(&dir, 0, "/d/", "/d/", v, &lo, t, 2_000_000_000).unwrap()
        };
        let a = get(&mut c, html, t0);
        assert!(matches!(&a.body, Body::Memory(b) if b.len() as u64 == a.size && a.size > 0));
        assert_eq!(&*a.content_type, listing::HTML_TYPE);
        assert!(a.etag.starts_with('"') && a.etag.ends_with("-htna\""), "{}", a.etag);
        let before = c.mapped_bytes();
        assert!(before >= a.size, "the rendering counts against the byte budget");
        // Fresh: the same bytes, shared.
        assert!(Rc::ptr_eq(&a, &get(&mut c, html, t0)));
        // Another view is another entry with another tag.
        let j = get(&mut c, json, t0);
        assert_eq!(&*j.content_type, listing::JSON_TYPE);
        assert_ne!(a.etag, j.etag);
        // Due for revalidation but unchanged: kept, not rendered again.
        let later = t0 + Duration::from_secs(11);
        assert!(Rc::ptr_eq(&a, &get(&mut c, html, later)));
        // Changed: a new rendering with a new validator, seen at the next revalidation.
        std::fs::write(d.path().join("d/two.txt"), b"22").unwrap();
        assert!(Rc::ptr_eq(&a, &get(&mut c, html, later)), "fresh until revalidate has passed");
        let b = get(&mut c, html, later + Duration::from_secs(11));
        assert!(!Rc::ptr_eq(&a, &b));
        assert_ne!(a.etag, b.etag);
        // A file's size changing (the directory's mtime does not move) is a new version too.
        std::fs::write(d.path().join("d/two.txt"), b"333").unwrap();
        let b2 = get(&mut c, html, later + Duration::from_secs(22));
        assert_ne!(b.etag, b2.etag);
        // Bounded by the entry count like everything else, and with nothing cached at all.
        let mut none = cfg();
        none.max_entries = 0;
        let mut c0 = FileCache::new(none);
        let x = c0.listing(&dir, 0, "/d/", "/d/", html, &lo, t0, 0).unwrap();
        assert!(x.size > 0);
        assert_eq!(c0.len(), 0);
    }

    #[test]
    fn large_directories_are_reread_less_often() {
        let (d, root, mime) = setup();
        let mut c = FileCache::new(cfg());
        let dir = dir_entry(&mut c, &root, &mime, "/d/");
        let lo = ListOptions { show_dotfiles: false, max_entries: 100, max_bytes: 1 << 20 };
        let html = View::DEFAULT;
        let t0 = Instant::now();
        c.listing(&dir, 0, "/d/", "/d/", html, &lo, t0, 0).unwrap();
        let state = |c: &FileCache| match c.slots.find("/d/\0").map(|i| &c.slots.get(i).value) {
            Some(Value::Directory(st)) => *st,
            _ => panic!("no directory state"),
        };
        let st = state(&c);
        assert_eq!(st.read_at, t0);
        let second = Duration::from_secs(1);
        assert_eq!(DirState { cost: Duration::from_micros(100), ..st }.fresh_for(second), second);
        assert_eq!(DirState { cost: Duration::from_millis(40), ..st }.fresh_for(second), Duration::from_secs(4));
        // A new entry changes the directory's stamp: read again at the next check.
        std::fs::write(d.path().join("d/new"), b"n").unwrap();
        let later = t0 + Duration::from_secs(3601);
        let e = c.listing(&dir, 0, "/d/", "/d/", html, &lo, later, 0).unwrap();
        assert_eq!(state(&c).read_at, later);
        assert!(matches!(&e.body, Body::Memory(b) if b.windows(3).any(|w| w == b"new")));
    }

    #[test]
    fn negative_entries_expire() {
        let (d, root, mime) = setup();
        let mut cf = cfg();
        cf.negative = Duration::from_millis(50);
        let mut c = FileCache::new(cf);
        let t0 = Instant::now();
        assert!(matches!(c.get(&root, 0, "/new", &opts(), &mime, t0, 0), Ok(Lookup::Status(404))));
        std::fs::write(d.path().join("new"), b"x").unwrap();
        assert!(matches!(c.get(&root, 0, "/new", &opts(), &mime, t0, 0), Ok(Lookup::Status(404))), "cached miss");
        let later = t0 + Duration::from_millis(60);
        assert!(matches!(c.get(&root, 0, "/new", &opts(), &mime, later, 0), Ok(Lookup::File(_))));
    }

    #[test]
    fn lru_bounds() {
        let (d, root, mime) = setup();
        for i in 0..10 {
            std::fs::write(d.path().join(format!("f{i}")), vec![b'x'; 100]).unwrap();
        }
        let mut cf = cfg();
        cf.max_entries = 4;
        cf.max_bytes = 250;
        let mut c = FileCache::new(cf);
        let now = Instant::now();
        for i in 0..10 {
            file(c.get(&root, 0, &format!("/f{i}"), &opts(), &mime, now, 0));
            assert!(c.len() <= 4);
            assert!(c.mapped_bytes() <= 250);
        }
        // The most recent two fit in 250 bytes.
        assert_eq!(c.mapped_bytes(), 200);
        let before = c.stats.misses;
        file(c.get(&root, 0, "/f9", &opts(), &mime, now, 0));
        assert_eq!(c.stats.misses, before, "most recent entry is a hit");
        file(c.get(&root, 0, "/f0", &opts(), &mime, now, 0));
        assert_eq!(c.stats.misses, before + 1, "evicted entry is a miss");
    }

    #[test]
    fn mtime_zero_has_no_last_modified() {
        let (d, root, mime) = setup();
        let f = File::options().write(true).open(d.path().join("a.txt")).unwrap();
        f.set_modified(UNIX_EPOCH + Duration::from_secs(1)).unwrap();
        let mut c = FileCache::new(cfg());
        let e = file(c.get(&root, 0, "/a.txt", &opts(), &mime, Instant::now(), 0));
        assert!(e.last_modified.is_none());
    }

    #[test]
    fn preload_loads_tree() {
        let (d, root, mime) = setup();
        std::fs::write(d.path().join("d/x.css"), b"a{}").unwrap();
        let mut c = FileCache::new(cfg());
        let n = c.preload(&root, "/", &opts(), &mime, Instant::now(), 0);
        assert_eq!(n, 4, "a.txt big.bin empty d/x.css");
    }
}
