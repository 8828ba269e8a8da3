//! On-demand compression (feature `compression`, `[compression] on_demand`): compressible
//! files that have no fresh precompressed sibling are compressed once per version, off the
//! event loop, and the result is served like a sibling would be.
//!
//! - **Who asks.** `serve::pipeline`'s representation step (`pick_variant`), for a file whose type
//!   is compressible and whose size is within `min_size..=max_size`, when the client accepts
//!   one of `encodings` and no sibling was chosen. [`OnDemand::choose`] answers at once with
//!   the best variant it already has for the encodings the client accepts (or none: identity
//!   is served), and queues a job for the client's best encoding if that one is neither made
//!   nor under way. The loop never waits.
//! - **Who compresses.** One thread of its own (a [`Worker`], started on the first job), not
//!   the password verifier's: a job cannot be interrupted, and a 10 MB file at brotli 5 takes
//!   0.5 to 2 s of CPU (2.0 s measured for random words), which would hold a waiting login
//!   that long (and a bcrypt cost-12 verification, 0.3 s, would hold compressions). The
//!   thread runs at a nice value 10 above the process's, so on a one-core box the event loop
//!   keeps the CPU. It reads the file
//!   with `sys::copy_mapped` for a mapping (fault-recovering) and `pread` for a descriptor:
//!   a file truncated under it gives an error, never a `SIGBUS` (see `fs::cache::Body`).
//! - **Bounded.** At most [`QUEUE`] jobs are in flight; past that a job is dropped (counted in
//!   `queue_drops`) and identity is served; the next request asks again. Finished variants live
//!   in a [`VariantCache`] bounded by `cache_bytes` (compressed bytes) and `cache_entries`
//!   (files), evicting the least recently *requested* file with all its variants (LRU). Memory
//!   held is therefore at most `cache_bytes` plus the jobs in flight (each at most 95 % of
//!   `max_size`, since a result that saves less than 5 % is thrown away) plus the worker's
//!   encoder state.
//! - **Versions.** A file's variants are keyed by its URL path (and site) and remember the
//!   identity `ETag` they were made from; a request that finds a different one (the file
//!   changed) drops them all and starts again. A result for an old version is dropped.
//!   A version that does not compress by 5 % is remembered as such and not tried again.
//! - **Validators.** A variant's `ETag` is the identity's with the coding and level appended
//!   (`"ino-size-mtime-br5"`): distinct from identity's, stable for the file's version, and
//!   the same bytes whenever it is made again (the encoders are deterministic), as a strong
//!   validator must be. `Last-Modified` is the file's.
//! - **Safety of the shared bytes.** A job on a mapped file carries the mapping's address; the
//!   loop keeps the entry that owns the mapping (`Rc<FileEntry>`) in its table of jobs in
//!   flight until the job's result is taken, so the mapping outlives the job.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::Arc;

use crate::background::Worker;
use crate::config::CompressionSettings;
use crate::fs::cache::{self, Body, FileEntry};
use crate::fs::lru::Lru;
use crate::http::encoding::Encoding;

/// Jobs in flight (queued or running) at most.
pub const QUEUE: usize = 16;

/// Bytes read from the file per step of the encoder.
const CHUNK: usize = 64 * 1024;

/// What the loop counts, for the status page.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Variants made.
    pub compressed: u64,
    /// Bytes the variants made are smaller than their files, summed once per variant made.
    pub bytes_saved: u64,
    /// Jobs not queued because [`QUEUE`] were in flight.
    pub queue_drops: u64,
    /// Versions that saved less than 5 %, remembered so they are not tried again.
    pub no_gain: u64,
    /// Jobs that failed (the file changed while it was read, or the job panicked).
    pub failed: u64,
}

/// The bytes a job compresses.
enum Source {
    /// A cached file's mapping (address and length), kept alive by the loop (module docs).
    Mapped { ptr: *const u8, len: usize },
    /// A cached file's descriptor, duplicated, read with `pread`.
    Fd { file: File, len: u64 },
}

// SAFETY: the pointer of `Source::Mapped` is into a mapping owned by an `Rc<FileEntry>` that
// the loop keeps in `OnDemand::pending` until this job's result has been received (and never
// releases when `OnDemand` is dropped with the job still in flight: see its `Drop`), so the
// mapping outlives every use of the pointer on the worker thread; and the thread only hands
// it to `sys::copy_mapped`, which reports a page gone from the file as an error instead of
// dying of the fault. Nothing else in a `Source` is tied to a thread.
unsafe impl Send for Source {}

/// One compression to do.
pub struct Job {
    source: Source,
    encoding: Encoding,
    level: i32,
}

/// A job's result: the compressed bytes, `None` when they would not save 5 %.
type Outcome = io::Result<Option<Vec<u8>>>;

/// A job in flight, as the loop remembers it.
struct Pending {
    key: Box<str>,
    encoding: Encoding,
    level: i32,
    /// The entry compressed: it owns the mapping the job reads.
    source: Rc<FileEntry>,
}

/// On-demand compression as the loop sees it: the variants made, the jobs in flight, the
/// thread that does them.
pub struct OnDemand {
    cache: VariantCache,
    worker: Worker<Job, Outcome>,
    pending: HashMap<u64, Pending>,
    /// Scratch for building keys.
    key: String,
    pub stats: Stats,
}

impl OnDemand {
    /// Nothing is started until the first job; `waker` is the loop's (one per `Poll`).
    pub fn new(cfg: &CompressionSettings, waker: Arc<mio::Waker>) -> OnDemand {
        OnDemand {
            cache: VariantCache::new(cfg.cache_bytes, cfg.cache_entries),
            worker: Worker::new("ferrohttpd-zip", QUEUE, waker, run),
            pending: HashMap::new(),
            key: String::new(),
            stats: Stats::default(),
        }
    }

    /// Takes new settings (a reload): the cache's bounds, and a cache emptied when the
    /// codings or levels change. Jobs in flight finish; their results are kept if they fit.
    pub fn reconfigure(&mut self, old: &CompressionSettings, new: &CompressionSettings) {
        if old.encodings != new.encodings
            || (old.gzip_level, old.br_level, old.zstd_level) != (new.gzip_level, new.br_level, new.zstd_level)
            || !new.on_demand
        {
            self.cache = VariantCache::new(new.cache_bytes, new.cache_entries);
        } else {
            self.cache.set_bounds(new.cache_bytes, new.cache_entries);
        }
    }

    /// Whether `entry` is compressed on demand at all (given a compressible type).
    pub fn eligible(cfg: &CompressionSettings, entry: &FileEntry) -> bool {
        cfg.on_demand
            && entry.size >= cfg.min_size
            && entry.size <= cfg.max_size
            && matches!(entry.body, Body::Mapped(_) | Body::Fd(_))
    }

    /// The best variant of `entry` (site `space`) already made for the codings in `accepted`
    /// (the client's, best first); queues the best one if it is neither made nor under way.
    pub fn choose(
        &mut self,
        cfg: &CompressionSettings,
        space: usize,
        entry: &Rc<FileEntry>,
        accepted: &[Encoding],
    ) -> Option<(Rc<FileEntry>, Encoding)> {
        let &best = accepted.first()?;
        let mut key = std::mem::take(&mut self.key);
        cache::path_key(space, &entry.url_path, &mut key);
        let mut have = None;
        let mut ask = true;
        if let Some(slot) = self.cache.get(&key, &entry.etag) {
            ask = !slot.no_gain && matches!(slot.states[best.index()], State::Absent);
            have = accepted.iter().find_map(|&e| match &slot.states[e.index()] {
                State::Ready(v) => Some((v.clone(), e)),
                _ => None,
            });
        }
        if ask {
            self.request(cfg, &key, entry, best);
        }
        self.key = key;
        have
    }

    fn request(&mut self, cfg: &CompressionSettings, key: &str, entry: &Rc<FileEntry>, encoding: Encoding) {
        if !self.cache.can_hold() {
            return;
        }
        let source = match &entry.body {
            Body::Mapped(map) => Source::Mapped { ptr: map.as_ptr(), len: map.len() },
            Body::Fd(f) => match f.try_clone() {
                Ok(file) => Source::Fd { file, len: entry.size },
                Err(_) => {
                    self.stats.failed += 1;
                    return;
                }
            },
            Body::Empty | Body::Memory(_) => return,
        };
        let level = match encoding {
            Encoding::Gzip => cfg.gzip_level as i32,
            Encoding::Br => cfg.br_level as i32,
            Encoding::Zstd => cfg.zstd_level,
        };
        match self.worker.submit(Job { source, encoding, level }) {
            Ok(id) => {
                self.pending.insert(id, Pending { key: key.into(), encoding, level, source: entry.clone() });
                self.cache.mark_pending(key, &entry.etag, encoding.index());
            }
            Err(_) => self.stats.queue_drops += 1,
        }
    }

    /// Takes the finished jobs' results into the cache (the loop calls this when woken).
    pub fn finish(&mut self) {
        while let Some((id, outcome)) = self.worker.try_recv() {
            let Some(p) = self.pending.remove(&id) else { continue };
            let e = p.encoding.index();
            match outcome {
                Some(Ok(Some(bytes))) => {
                    self.stats.compressed += 1;
                    self.stats.bytes_saved += p.source.size.saturating_sub(bytes.len() as u64);
                    let v = Rc::new(variant(&p.source, p.encoding, p.level, bytes));
                    self.cache.set_ready(&p.key, &p.source.etag, e, v);
                }
                Some(Ok(None)) => {
                    self.stats.no_gain += 1;
                    self.cache.clear_pending(&p.key, &p.source.etag, e);
                    if let Some(slot) = self.cache.slot(&p.key, &p.source.etag) {
                        slot.no_gain = true;
                    }
                }
                Some(Err(_)) | None => {
                    self.stats.failed += 1;
                    self.cache.clear_pending(&p.key, &p.source.etag, e);
                }
            }
        }
    }

    /// Files in the cache (with variants, jobs or a verdict).
    pub fn entries(&self) -> usize {
        self.cache.len()
    }

    /// Compressed bytes the cache holds.
    pub fn bytes(&self) -> u64 {
        self.cache.bytes()
    }
}

impl Drop for OnDemand {
    /// Jobs still in flight may be reading their mappings: those are leaked, not unmapped
    /// under the worker thread. This happens only when the loop ends (the process exits).
    fn drop(&mut self) {
        for (_, p) in self.pending.drain() {
            std::mem::forget(p.source);
        }
    }
}

/// The variant entry: the file's metadata, its own validators, the compressed bytes.
fn variant(src: &FileEntry, encoding: Encoding, level: i32, bytes: Vec<u8>) -> FileEntry {
    let inner = src.etag.strip_suffix('"').unwrap_or(&src.etag);
    let etag = format!("{inner}-{}{level}\"", encoding.token());
    FileEntry::new(
        src.stat(),
        src.url_path.clone(),
        src.content_type.clone(),
        etag,
        src.last_modified_secs,
        src.real_path.clone(),
        Body::Memory(bytes.into_boxed_slice()),
    )
}

/// The worker thread's side: compress one job.
fn run(job: Job) -> Outcome {
    lower_priority();
    let len = match &job.source {
        Source::Mapped { len, .. } => *len as u64,
        Source::Fd { len, .. } => *len,
    };
    // Kept only if it saves at least 5 %, as `ferrohttpd compress` does.
    let limit = usize::try_from(len - len / 20).unwrap_or(usize::MAX);
    let out = Capped { buf: Vec::with_capacity(limit.min(1 << 20) / 2), limit, over: false };
    let result = match job.encoding {
        Encoding::Gzip => {
            let level = flate2::Compression::new(job.level.clamp(1, 9) as u32);
            let mut w = flate2::write::GzEncoder::new(out, level);
            feed(&job.source, &mut w).and_then(|()| w.finish())
        }
        Encoding::Br => {
            let params = brotli::enc::BrotliEncoderParams {
                quality: job.level,
                lgwin: 22,
                size_hint: usize::try_from(len).unwrap_or(usize::MAX),
                ..Default::default()
            };
            let mut w = brotli::CompressorWriter::with_params(out, CHUNK, &params);
            // `into_inner` finishes the stream (a write past the cap shows in `over`).
            feed(&job.source, &mut w).map(|()| w.into_inner())
        }
        Encoding::Zstd => zstd::stream::write::Encoder::new(out, job.level).and_then(|mut w| {
            w.set_pledged_src_size(Some(len))?;
            feed(&job.source, &mut w)?;
            w.finish()
        }),
    };
    match result {
        Ok(c) if c.over => Ok(None),
        Ok(c) => Ok(Some(c.buf)),
        Err(e) if e.get_ref().is_some_and(|r| r.is::<NoGain>()) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads the whole source into `w`, in chunks, through the kernel.
fn feed(source: &Source, w: &mut impl Write) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    let changed = || io::Error::other("the file changed while it was compressed");
    match source {
        Source::Mapped { ptr, len } => {
            // SAFETY: `ptr` and `len` describe a live mapping (see `Source`); the slice is
            // never read here, only given to the kernel by `copy_mapped`.
            let map = unsafe { std::slice::from_raw_parts(*ptr, *len) };
            let mut pos = 0;
            while pos < map.len() {
                let n = crate::sys::copy_mapped(&map[pos..], &mut buf)?;
                if n == 0 {
                    return Err(changed());
                }
                w.write_all(&buf[..n])?;
                pos += n;
            }
        }
        Source::Fd { file, len } => {
            let mut pos = 0u64;
            while pos < *len {
                let want = usize::try_from((*len - pos).min(CHUNK as u64)).unwrap_or(CHUNK);
                let n = file.read_at(&mut buf[..want], pos)?;
                if n == 0 {
                    return Err(changed());
                }
                w.write_all(&buf[..n])?;
                pos += n as u64;
            }
        }
    }
    Ok(())
}

/// Once per thread: a nice value 10 above the process's, so the event loop wins the CPU on a
/// busy or one-core box. (On Linux the nice value belongs to the thread: `setpriority` with
/// `PRIO_PROCESS` and 0 changes only the calling thread.) A failure changes nothing.
fn lower_priority() {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if DONE.with(|d| d.replace(true)) {
        return;
    }
    // SAFETY: plain system calls on the calling thread, no memory passed.
    unsafe {
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, 0);
        if now != -1 || *libc::__errno_location() == 0 {
            libc::setpriority(libc::PRIO_PROCESS, 0, (now + 10).min(19));
        }
    }
}

/// The marker error of a result that grew past its cap.
#[derive(Debug)]
struct NoGain;

impl std::fmt::Display for NoGain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("compressed output would not save 5%")
    }
}

impl std::error::Error for NoGain {}

/// A buffer that refuses to grow past `limit` bytes.
struct Capped {
    buf: Vec<u8>,
    limit: usize,
    over: bool,
}

impl Write for Capped {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.over || self.buf.len() + data.len() > self.limit {
            self.over = true;
            return Err(io::Error::other(NoGain));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A coding's variant of one file version.
#[derive(Default)]
enum State {
    #[default]
    Absent,
    /// A job is in flight.
    Pending,
    Ready(Rc<FileEntry>),
}

/// One file's variants; its weight in the [`Lru`] is the compressed bytes of the ready ones.
struct Slot {
    /// The identity `ETag` of the version the variants are of.
    source: Box<str>,
    /// By `Encoding::index`.
    states: [State; 3],
    /// This version saved less than 5 %: not tried again.
    no_gain: bool,
}

/// The variants made, per file (key: the file cache's path key), bounded by compressed bytes
/// and by files, least recently requested evicted first (LRU).
pub struct VariantCache {
    slots: Lru<Slot>,
}

impl VariantCache {
    pub fn new(max_bytes: u64, max_entries: usize) -> VariantCache {
        VariantCache { slots: Lru::new(max_entries, max_bytes) }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn bytes(&self) -> u64 {
        self.slots.weight()
    }

    fn can_hold(&self) -> bool {
        self.slots.max_weight() > 0 && self.slots.can_hold(0)
    }

    fn set_bounds(&mut self, max_bytes: u64, max_entries: usize) {
        self.slots.set_bounds(max_entries, max_bytes);
    }

    /// The slot of `key` for version `source`, marked as just used; a slot of another
    /// version is dropped.
    fn get(&mut self, key: &str, source: &str) -> Option<&Slot> {
        let i = self.find(key, source)?;
        self.slots.touch(i);
        Some(self.slots.get(i))
    }

    /// The slot of `key` for version `source`, not marked as used (for results).
    fn get_mut(&mut self, key: &str, source: &str) -> Option<&mut Slot> {
        let i = self.slots.find(key)?;
        let slot = self.slots.get_mut(i);
        (*slot.source == *source).then_some(slot)
    }

    fn find(&mut self, key: &str, source: &str) -> Option<usize> {
        let i = self.slots.find(key)?;
        if *self.slots.get(i).source == *source {
            return Some(i);
        }
        self.slots.remove(i);
        None
    }

    /// The handle of `key`'s slot for version `source`, created (evicting the least recently
    /// used) if there is none or only one of another version. `None` when nothing can be kept.
    fn slot_index(&mut self, key: &str, source: &str) -> Option<usize> {
        if let Some(i) = self.find(key, source) {
            return Some(i);
        }
        if !self.can_hold() {
            return None;
        }
        let slot = Slot { source: source.into(), states: Default::default(), no_gain: false };
        self.slots.insert(key, slot, 0)
    }

    /// The slot of `key` for version `source`, created as [`VariantCache::slot_index`] does.
    fn slot(&mut self, key: &str, source: &str) -> Option<&mut Slot> {
        let i = self.slot_index(key, source)?;
        Some(self.slots.get_mut(i))
    }

    /// Stores a finished variant, evicting other files' variants to make room. Dropped when
    /// it alone is over the byte budget, or when the file's slot is of another version now.
    fn set_ready(&mut self, key: &str, source: &str, e: usize, v: Rc<FileEntry>) {
        let size = v.size;
        if !self.slots.can_hold(size) {
            self.clear_pending(key, source, e);
            return;
        }
        if self.slots.find(key).is_some_and(|i| *self.slots.get(i).source != *source) {
            return;
        }
        let Some(i) = self.slot_index(key, source) else { return };
        let old = match std::mem::replace(&mut self.slots.get_mut(i).states[e], State::Ready(v)) {
            State::Ready(old) => old.size,
            _ => 0,
        };
        let bytes = self.slots.weight_of(i) - old;
        if !self.slots.set_weight(i, bytes + size) {
            // The file's own other variants leave no room: this one is not kept.
            self.slots.get_mut(i).states[e] = State::Absent;
            self.slots.set_weight(i, bytes);
        }
    }

    /// Notes a job in flight for coding `e` (a state that is not yet a variant: no bytes).
    fn mark_pending(&mut self, key: &str, source: &str, e: usize) {
        if let Some(slot) = self.slot(key, source) {
            if matches!(slot.states[e], State::Absent) {
                slot.states[e] = State::Pending;
            }
        }
    }

    /// A job for coding `e` ended without a variant: it may be asked for again. A variant
    /// made meanwhile (by another job, after an eviction) stays.
    fn clear_pending(&mut self, key: &str, source: &str, e: usize) {
        if let Some(slot) = self.get_mut(key, source) {
            if matches!(slot.states[e], State::Pending) {
                slot.states[e] = State::Absent;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::cache::FileStat;
    use crate::fs::resolve::RealPath;
    use proptest::prelude::*;
    use std::io::Read;

    fn fake(size: usize) -> Rc<FileEntry> {
        let stat =
            FileStat { dev: 1, ino: 2, len: 0, mtime: 3, mtime_nsec: 4, ctime: (5, 6), uid: 0, gid: 0, mode: 0o644 };
        let body = Body::Memory(vec![b'x'; size].into_boxed_slice());
        Rc::new(FileEntry::new(stat, "/x".into(), "text/plain".into(), "\"2-3-4\"".into(), None, RealPath::Same, body))
    }

    /// Every invariant of the cache's bookkeeping: the list's ([`Lru::check`]), and each
    /// file's weight is the bytes of its ready variants.
    fn check(c: &VariantCache) {
        c.slots.check();
        for key in c.slots.keys_by_recency() {
            let i = c.slots.find(key).unwrap();
            let ready: u64 =
                c.slots.get(i).states.iter().map(|st| if let State::Ready(v) = st { v.size } else { 0 }).sum();
            assert_eq!(ready, c.slots.weight_of(i));
        }
    }

    #[test]
    fn bounded_by_entries_and_bytes_least_recently_requested_first() {
        let mut c = VariantCache::new(250, 3);
        for k in ["/a", "/b", "/c"] {
            c.set_ready(k, "v1", 0, fake(100));
            check(&c);
        }
        // 300 bytes do not fit in 250: "/a", the oldest, went.
        assert!(c.get("/a", "v1").is_none());
        assert_eq!((c.len(), c.bytes()), (2, 200));
        // "/b" is requested, so "/c" is now the least recently used.
        assert!(c.get("/b", "v1").is_some());
        c.set_ready("/d", "v1", 1, fake(100));
        check(&c);
        assert!(c.get("/c", "v1").is_none());
        assert!(c.get("/b", "v1").is_some() && c.get("/d", "v1").is_some());
        // By entries: slots without bytes (jobs, verdicts) count too.
        for k in ["/e", "/f", "/g"] {
            c.slot(k, "v1").unwrap().no_gain = true;
            check(&c);
        }
        assert_eq!((c.len(), c.bytes()), (3, 0));
        // Alone over the budget: never kept.
        c.set_ready("/h", "v1", 0, fake(251));
        assert!(c.get("/h", "v1").is_none());
        check(&c);
    }

    #[test]
    fn another_version_drops_the_variants_and_old_results_are_dropped() {
        let mut c = VariantCache::new(1000, 10);
        c.set_ready("/a", "v1", 0, fake(100));
        c.set_ready("/a", "v1", 2, fake(50));
        assert_eq!(c.bytes(), 150);
        // The file changed: the request sees v2, and every variant of v1 goes.
        assert!(c.get("/a", "v2").is_none());
        assert_eq!((c.len(), c.bytes()), (0, 0));
        c.mark_pending("/a", "v2", 0);
        // A late result for v1 is not stored over v2's slot.
        c.set_ready("/a", "v1", 0, fake(100));
        assert_eq!(c.bytes(), 0);
        assert!(matches!(c.get("/a", "v2").unwrap().states[0], State::Pending));
        // Replacing a variant accounts for the old one's bytes.
        c.set_ready("/a", "v2", 0, fake(80));
        c.set_ready("/a", "v2", 0, fake(70));
        assert_eq!(c.bytes(), 70);
        check(&c);
        c.set_bounds(60, 10);
        assert!(c.is_empty());
        check(&c);
        assert!(!VariantCache::new(0, 10).can_hold() && !VariantCache::new(10, 0).can_hold());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Get(u8, u8),
        Pending(u8, u8, usize),
        Ready(u8, u8, usize, u16),
        Bounds(u16, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..12, 0u8..3).prop_map(|(k, v)| Op::Get(k, v)),
            (0u8..12, 0u8..3, 0usize..3).prop_map(|(k, v, e)| Op::Pending(k, v, e)),
            (0u8..12, 0u8..3, 0usize..3, 0u16..600).prop_map(|(k, v, e, n)| Op::Ready(k, v, e, n)),
            (0u16..2000, 0u8..8).prop_map(|(b, n)| Op::Bounds(b, n)),
        ]
    }

    proptest! {
        /// Whatever the order of requests, jobs, results and reloads, the cache stays within
        /// its bounds and its accounting is exact.
        #[test]
        fn the_bounds_always_hold(ops in proptest::collection::vec(op(), 1..200)) {
            let mut c = VariantCache::new(1000, 5);
            for op in ops {
                match op {
                    Op::Get(k, v) => { c.get(&format!("/{k}"), &format!("v{v}")); }
                    Op::Pending(k, v, e) => {
                        if e == 0 { c.clear_pending(&format!("/{k}"), &format!("v{v}"), 1) }
                        c.mark_pending(&format!("/{k}"), &format!("v{v}"), e)
                    }
                    Op::Ready(k, v, e, n) => c.set_ready(&format!("/{k}"), &format!("v{v}"), e, fake(n.into())),
                    Op::Bounds(b, n) => c.set_bounds(b.into(), n.into()),
                }
                check(&c);
            }
        }
    }

    fn text(n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        let mut i = 0u64;
        while v.len() < n {
            v.extend_from_slice(format!("<li class=\"item\">entry {} of the list</li>\n", i % 977).as_bytes());
            i += 1;
        }
        v.truncate(n);
        v
    }

    fn decode(e: Encoding, b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match e {
            Encoding::Gzip => flate2::read::GzDecoder::new(b).read_to_end(&mut out).map(drop),
            Encoding::Br => brotli::Decompressor::new(b, 4096).read_to_end(&mut out).map(drop),
            Encoding::Zstd => zstd::stream::read::Decoder::new(b).and_then(|mut d| d.read_to_end(&mut out)).map(drop),
        }
        .unwrap();
        out
    }

    #[test]
    fn jobs_compress_mappings_and_descriptors_and_refuse_what_does_not_shrink() {
        let data = text(300_000);
        for e in [Encoding::Gzip, Encoding::Br, Encoding::Zstd] {
            let job = Job { source: Source::Mapped { ptr: data.as_ptr(), len: data.len() }, encoding: e, level: 3 };
            let out = run(job).unwrap().expect("text compresses");
            assert!(out.len() < data.len() / 5, "{e:?}: {}", out.len());
            assert_eq!(decode(e, &out), data, "{e:?}");
        }
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        let job = Job { source: Source::Fd { file: f, len: data.len() as u64 }, encoding: Encoding::Zstd, level: 1 };
        assert_eq!(decode(Encoding::Zstd, &run(job).unwrap().unwrap()), data);
        // Noise does not shrink by 5 %: no variant.
        let mut x = 0x1234_5678u32;
        let noise: Vec<u8> = (0..100_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        for e in [Encoding::Gzip, Encoding::Br, Encoding::Zstd] {
            let job = Job { source: Source::Mapped { ptr: noise.as_ptr(), len: noise.len() }, encoding: e, level: 3 };
            assert!(run(job).unwrap().is_none(), "{e:?}");
        }
        // A file shorter than it was (truncated under the server) is an error, not a variant.
        let f = tempfile::tempfile().unwrap();
        let job = Job { source: Source::Fd { file: f, len: 1000 }, encoding: Encoding::Gzip, level: 1 };
        assert!(run(job).is_err());
    }

    #[test]
    fn variants_have_their_own_validators() {
        let src = fake(10);
        let v = variant(&src, Encoding::Br, 5, vec![1, 2, 3]);
        assert_eq!(&*v.etag, "\"2-3-4-br5\"");
        assert_eq!(v.validator_fields.bytes(), b"ETag: \"2-3-4-br5\"\r\n");
        assert_eq!((v.size, &*v.content_type), (3, "text/plain"));
    }
}
