//! `.htpasswd` Basic authentication, as thttpd does it.
//!
//! - A `.htpasswd` file in a directory protects the files of that directory — not its
//!   subdirectories. With `global_passwd` (`-g`), the top's `.htpasswd` (the root, or the
//!   `-v` host directory) protects everything; where it has none, the per-directory files
//!   apply (thttpd's `auth_check()`).
//! - The file has lines `user:hash` (anything after a second `:` is ignored); blank lines and
//!   lines starting with `#` are skipped; the first line for a user decides.
//! - Hashes are crypt(3) strings as thttpd accepts them through the C library: traditional
//!   DES (13 characters), `$1$` MD5, `$5$` SHA-256 and `$6$` SHA-512, plus bcrypt
//!   (`$2a$`, `$2b$`, `$2y$`). Anything else (plaintext, Apache's `$apr1$` and `{SHA}`, …)
//!   never matches. The computed hash is compared with the stored one in constant time.
//! - Costs are bounded: a bcrypt cost above [`MAX_BCRYPT_COST`] or SHA-crypt `rounds=` above
//!   [`MAX_SHA_ROUNDS`] is refused when the file is loaded (an error-log line names the file
//!   and line, [`AuthCache::take_log`]); that user cannot log in.
//! - Passwords longer than [`MAX_PASSWORD_LEN`] bytes never match: SHA-crypt's cost grows
//!   with the password's length. `Authorization` values longer than
//!   [`MAX_AUTHORIZATION_LEN`] are never verified.
//! - The credentials must be UTF-8 (RFC 7617's default charset); the password is everything
//!   after the first `:` (thttpd cuts it at a second `:`, RFC 7617 does not).
//!
//! **The event loop never computes a hash.** [`AuthCache`] keeps parsed files keyed by their
//! identity and mtime, and remembers the outcome of every verification per file — failures
//! too — so a repeated `Authorization` value costs a comparison. Anything else goes to one
//! helper thread ([`crate::background::Worker`]): the answer is [`AuthResult::Pending`], the
//! connection waits with its request unread, and when [`AuthCache::finish`] reports the job
//! done it asks again and finds the outcome remembered. At most [`VERIFY_QUEUE`]
//! verifications are in flight, at most [`VERIFY_PER_CLIENT`] for one client address; past
//! that the answer is [`AuthResult::Busy`] (503). A user who is not in the file costs the
//! same as one who is: the password is verified against a hash of the file (same scheme and
//! cost), and the result thrown away, so timing does not tell which users exist.
//!
//! Results: [`AuthResult::Allowed`] (no file applies), [`AuthResult::Authenticated`],
//! [`AuthResult::Challenge`] (answer 401 with [`www_authenticate`]), [`AuthResult::Pending`],
//! [`AuthResult::Busy`], or [`AuthResult::Error`] when a `.htpasswd` exists but cannot be
//! read: answer **403**, as thttpd does ("protected by an authentication file, but the
//! authentication file cannot be opened"), and log it. The realm is the URL directory path
//! (thttpd uses the directory's path).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::background::Worker;

/// The password file's name.
pub const HTPASSWD: &str = ".htpasswd";

/// Passwords longer than this (in bytes) never match.
pub const MAX_PASSWORD_LEN: usize = 256;

/// A `.htpasswd` larger than this is refused as an error (403).
pub const MAX_HTPASSWD_SIZE: u64 = 1 << 20;

/// The highest bcrypt cost accepted, the usual recommendation: 2^12 rounds take about 0.3 s
/// per verification on an idle current core (the audit measured 0.28 s; 0.59 s here on a
/// loaded 2-core machine, where cost 13 took 1.08 s); each step doubles it.
pub const MAX_BCRYPT_COST: u32 = 12;

/// The highest SHA-crypt `rounds=` accepted (the default is 5000): 500,000 rounds of `$6$`
/// took 0.25 s in the same run (`$5$`: 0.10 s), no more than bcrypt at [`MAX_BCRYPT_COST`].
pub const MAX_SHA_ROUNDS: u64 = 500_000;

/// `Authorization` values longer than this are never verified nor remembered: with
/// [`MAX_PASSWORD_LEN`] and a sane user name a real one is far shorter, and it bounds what
/// the cache of outcomes holds.
pub const MAX_AUTHORIZATION_LEN: usize = 1024;

/// Verifications in flight at once (queued or running). At bcrypt cost 12 that is about 5 s
/// of work: a request queued behind more would wait longer than a client should, so it gets
/// 503 instead (the loop never waits, and memory stays bounded).
pub const VERIFY_QUEUE: usize = 16;

/// Verifications in flight for one client address: a client guessing passwords on many
/// connections holds at most this many slots of [`VERIFY_QUEUE`], so the others still get
/// theirs verified.
pub const VERIFY_PER_CLIENT: usize = 2;

/// An `[[auth]]` rule: URL paths under `prefix` (on every site, or on the `[[vhost]]` named
/// `host`) need a user of the `htpasswd` file, asked for with `realm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthRule {
    /// A normalized URL path without its trailing slash (`"/private"`), or `"/"`: it covers
    /// the path itself and everything under it, by whole segments (`/private` is not a
    /// prefix of `/privateer`).
    pub prefix: String,
    /// The lowercase host of a `[[vhost]]`, or `None` for every site.
    pub host: Option<String>,
    pub htpasswd: PathBuf,
    pub realm: String,
}

impl AuthRule {
    /// Whether the rule covers `path` on the site named `host` (`None`: the main root).
    pub fn covers(&self, host: Option<&str>, path: &str) -> bool {
        if self.host.is_some() && self.host.as_deref() != host {
            return false;
        }
        self.prefix == "/"
            || path.strip_prefix(self.prefix.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }
}

/// The rule that protects `path` on the site `host`, by index: the one with the longest
/// prefix, a rule for that host before a rule for every site of the same prefix.
pub fn rule_for(rules: &[AuthRule], host: Option<&str>, path: &str) -> Option<usize> {
    (0..rules.len())
        .filter(|&i| rules[i].covers(host, path))
        .max_by_key(|&i| (rules[i].prefix.len(), rules[i].host.is_some()))
}

/// The decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthResult {
    /// No `.htpasswd` applies: serve.
    Allowed,
    /// A `.htpasswd` applies and the credentials match: serve, and log `user`.
    Authenticated {
        /// The user name, for the access log.
        user: String,
    },
    /// Send 401 with `WWW-Authenticate: Basic realm="<realm>"` ([`www_authenticate`]).
    /// `realm` is already safe to put between the quotes.
    Challenge {
        /// The URL directory, escaped for a quoted string.
        realm: String,
    },
    /// The `.htpasswd` exists but cannot be read (or is too large / not UTF-8): send 403 as
    /// thttpd does, and log `message`.
    Error {
        /// What failed, naming the file.
        message: String,
    },
    /// The credentials are being verified on the helper thread: wait until
    /// [`AuthCache::finish`] reports `job`, then ask again.
    Pending {
        /// The verification's id.
        job: u64,
    },
    /// Too many verifications in flight (in all, or for this client): answer 503.
    Busy,
}

/// The value of the `WWW-Authenticate` header for a [`AuthResult::Challenge`] realm.
pub fn www_authenticate(realm: &str) -> String {
    format!("Basic realm=\"{realm}\"")
}

/// Escapes a realm for a quoted string: `\` and `"` get a backslash, and bytes outside
/// printable ASCII are percent-encoded, so no control character can reach a header.
fn escape_realm(realm: &str) -> String {
    let mut out = String::with_capacity(realm.len());
    for &b in realm.as_bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(b));
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Identity of a file version: a changed file gets re-read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
    ctime: i64,
    ctime_nsec: i64,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
            ctime: m.ctime(),
            ctime_nsec: m.ctime_nsec(),
        }
    }
}

/// `stat` of a possible `.htpasswd`: `Ok(None)` if there is none. A dangling symlink is an
/// error, not an absence: whoever put it there meant to protect the directory.
fn probe(path: &Path) -> io::Result<Option<std::fs::Metadata>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if is_absent(&e) => match std::fs::symlink_metadata(path) {
            Ok(_) => Err(e),
            Err(_) => Ok(None),
        },
        Err(e) => Err(e),
    }
}

fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// Reads the file with the stamp of the very file read: opened non-blocking (a FIFO named
/// `.htpasswd` must not stall the loop), checked to be a regular file of bounded size.
fn read_with_stamp(path: &Path) -> Result<(String, Stamp), String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |e: io::Error| format!("{}: {e}", path.display());
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(err)?;
    let meta = file.metadata().map_err(err)?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if meta.len() > MAX_HTPASSWD_SIZE {
        return Err(format!("{}: larger than {MAX_HTPASSWD_SIZE} bytes", path.display()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_HTPASSWD_SIZE + 1).read_to_end(&mut bytes).map_err(err)?;
    if bytes.len() as u64 > MAX_HTPASSWD_SIZE {
        return Err(format!("{}: larger than {MAX_HTPASSWD_SIZE} bytes", path.display()));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{}: not valid UTF-8", path.display()))?;
    Ok((text, Stamp::of(&meta)))
}

/// Iterates the `(line number, user, hash)` entries of a `.htpasswd` text.
fn entries(htpasswd: &str) -> impl Iterator<Item = (usize, &str, &str)> {
    htpasswd.lines().enumerate().filter_map(|(i, line)| {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() || line.starts_with('#') {
            return None;
        }
        let (user, rest) = line.split_once(':')?;
        let hash = rest.split(':').next().unwrap_or("");
        Some((i + 1, user, hash.trim_end()))
    })
}

/// `--check-config`'s look at a password file a key names: an error if it cannot be read as
/// the server would read it, else one warning per line that lets no one in (`FILE: line N:
/// …`): a line that is not `user:hash`, a hash the server does not compute, or one too
/// costly (which a start refuses with the same words).
pub fn check_file(path: &Path) -> Result<Vec<String>, String> {
    let (text, _) = read_with_stamp(path)?;
    let mut warnings = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        let Some((user, hash)) = entries(line).next().map(|(_, u, h)| (u, h)) else {
            warnings.push(format!("{}: line {n}: not \"user:hash\"; ignored", path.display()));
            continue;
        };
        if !well_formed(hash) {
            warnings.push(format!(
                "{}: line {n}: user {user:?}: not a hash the server checks (DES, $1$, $5$, $6$ or bcrypt); \
                 this user cannot log in",
                path.display()
            ));
        } else if let Some(why) = cost_error(hash) {
            warnings.push(format!("{}: line {n}: {why}; the entry for user {user:?} is refused", path.display()));
        }
    }
    Ok(warnings)
}

/// Verifies `user:password` against `.htpasswd` text. The first line for `user` decides;
/// see the module docs for the accepted hashes. An empty user never matches.
pub fn verify(htpasswd: &str, user: &str, password: &str) -> bool {
    if user.is_empty() {
        return false;
    }
    match entries(htpasswd).find(|(_, u, _)| *u == user) {
        Some((_, _, hash)) => hash_matches(password, hash),
        None => false,
    }
}

/// True if `password` hashes to `stored` under the scheme `stored` names.
fn hash_matches(password: &str, stored: &str) -> bool {
    if password.len() > MAX_PASSWORD_LEN || !usable(stored) {
        return false;
    }
    match crypt(password, stored) {
        Some(computed) => ct_eq(computed.as_bytes(), stored.as_bytes()),
        None => false,
    }
}

/// crypt(3) for the schemes [`well_formed`] accepts, each called by name: the dispatch of
/// `pwhash::unix::crypt` would also link SHA-1 crypt and BSDi crypt (about 8 KiB that a
/// small box would carry and never run). pwhash marks DES, MD5-crypt and SHA-256-crypt
/// deprecated for new passwords; verifying the ones thttpd users already have is the point.
#[allow(deprecated)]
fn crypt(password: &str, stored: &str) -> Option<String> {
    if !stored.starts_with('$') {
        return pwhash::unix_crypt::hash_with(stored, password).ok();
    }
    match stored.split('$').nth(1) {
        Some("1") => pwhash::md5_crypt::hash_with(stored, password).ok(),
        Some("2a" | "2b" | "2y") => pwhash::bcrypt::hash_with(stored, password).ok(),
        Some("5") => pwhash::sha256_crypt::hash_with(stored, password).ok(),
        Some("6") => pwhash::sha512_crypt::hash_with(stored, password).ok(),
        _ => None,
    }
}

const CRYPT64: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

fn all_crypt64(s: &str) -> bool {
    s.bytes().all(|b| CRYPT64.contains(&b))
}

/// A stored hash the server will compute: well formed and not too costly.
fn usable(stored: &str) -> bool {
    well_formed(stored) && cost_error(stored).is_none()
}

/// Why a well-formed hash is too costly to verify, if it is.
fn cost_error(stored: &str) -> Option<String> {
    let mut parts = stored.split('$');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(""), Some("2a" | "2b" | "2y"), Some(cost)) => {
            let cost: u32 = cost.parse().ok()?;
            (cost > MAX_BCRYPT_COST).then(|| format!("bcrypt cost {cost} is above the maximum of {MAX_BCRYPT_COST}"))
        }
        (Some(""), Some("5" | "6"), Some(rounds)) => {
            let n: u64 = rounds.strip_prefix("rounds=")?.parse().ok()?;
            (n > MAX_SHA_ROUNDS).then(|| format!("SHA-crypt rounds={n} is above the maximum of {MAX_SHA_ROUNDS}"))
        }
        _ => None,
    }
}

/// Strict shape check of a stored hash before handing it to the hashing code, so that only
/// the formats we mean to accept are ever computed ([`cost_error`] bounds the cost).
fn well_formed(stored: &str) -> bool {
    if !stored.is_ascii() {
        return false;
    }
    if !stored.starts_with('$') {
        // Traditional DES: 2 salt characters + 11 hash characters.
        return stored.len() == 13 && all_crypt64(stored);
    }
    let parts: Vec<&str> = stored.split('$').collect();
    match parts.as_slice() {
        ["", "1", salt, hash] => {
            (1..=8).contains(&salt.len()) && all_crypt64(salt) && hash.len() == 22 && all_crypt64(hash)
        }
        ["", id @ ("5" | "6"), rest @ ..] => {
            let (salt, hash) = match rest {
                [rounds, salt, hash] => {
                    let Some(n) = rounds.strip_prefix("rounds=") else {
                        return false;
                    };
                    if n.is_empty() || n.len() > 9 || !n.bytes().all(|b| b.is_ascii_digit()) {
                        return false;
                    }
                    (*salt, *hash)
                }
                [salt, hash] => (*salt, *hash),
                _ => return false,
            };
            let hash_len = if *id == "5" { 43 } else { 86 };
            salt.len() <= 16
                && salt.bytes().all(|b| b.is_ascii_graphic())
                && hash.len() == hash_len
                && all_crypt64(hash)
        }
        ["", "2a" | "2b" | "2y", cost, rest] => {
            cost.len() == 2
                && cost.parse::<u32>().is_ok_and(|c| (4..=31).contains(&c))
                && rest.len() == 53
                && all_crypt64(rest)
        }
        _ => false,
    }
}

/// Constant-time equality of two byte strings of equal length (the length itself is not
/// secret: it is fixed by the hash scheme). Unequal lengths are unequal.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Decodes a `Basic` credentials header value into `(user, password)`. The scheme is
/// case-insensitive; the base64 must be canonical standard-alphabet base64 (padding
/// optional), the decoded bytes UTF-8 with a `:`. `None` otherwise.
pub fn decode_basic(authorization: &[u8]) -> Option<(String, String)> {
    let value = trim_ascii(authorization);
    let scheme_end = value.iter().position(|&b| b == b' ' || b == b'\t')?;
    let (scheme, rest) = value.split_at(scheme_end);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let decoded = base64_decode(trim_ascii(rest))?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

/// Standard base64 (RFC 4648 §4) decoder; padding optional, no whitespace inside, and the
/// unused bits of the last character must be zero.
fn base64_decode(input: &[u8]) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let data = match input.iter().position(|&c| c == b'=') {
        Some(p) => {
            let pad = &input[p..];
            if !pad.iter().all(|&c| c == b'=') || pad.len() > 2 || !input.len().is_multiple_of(4) {
                return None;
            }
            &input[..p]
        }
        None => input,
    };
    if data.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(data.len() * 3 / 4);
    for chunk in data.chunks(4) {
        let mut acc = 0u32;
        for &c in chunk {
            acc = (acc << 6) | value(c)?;
        }
        match chunk.len() {
            4 => out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]),
            3 => {
                if acc & 0b11 != 0 {
                    return None;
                }
                out.extend_from_slice(&[(acc >> 10) as u8, (acc >> 2) as u8]);
            }
            2 => {
                if acc & 0b1111 != 0 {
                    return None;
                }
                out.push((acc >> 4) as u8);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// Most files kept by an [`AuthCache`]; when full, it starts over.
const CACHE_FILES: usize = 256;
/// Most verified `Authorization` values remembered per file (the site's active users).
const CACHE_VERIFIED: usize = 16;
/// Most failed `Authorization` values remembered per file, oldest forgotten first. They
/// only need to absorb repeats (a browser re-sending stale credentials, a client replaying
/// one guess): distinct guesses cost a verification each anyway, throttled by the single
/// helper thread. With [`MAX_AUTHORIZATION_LEN`], a file's outcomes hold at most 80 KiB.
const CACHE_FAILED: usize = 64;

#[derive(Debug)]
struct CachedFile {
    stamp: Stamp,
    text: String,
    /// The first usable hash of the file: unknown users are verified against it.
    dummy: Option<String>,
    /// Raw `Authorization` values that verified, and their user. Cleared when the file changes.
    verified: Vec<(Vec<u8>, String)>,
    /// Raw `Authorization` values that did not.
    failed: VecDeque<Vec<u8>>,
}

/// One verification for the helper thread.
struct Verify {
    password: String,
    hash: String,
    /// False for an unknown user (a dummy hash): never a match, whatever the hash says.
    known: bool,
}

fn run_verify(v: Verify) -> bool {
    hash_matches(&v.password, &v.hash) && v.known
}

/// A verification in flight: what its outcome is remembered under.
struct InFlight {
    path: PathBuf,
    stamp: Stamp,
    authorization: Vec<u8>,
    user: String,
    client: IpAddr,
}

/// The `.htpasswd` decisions of the event loop: parsed files cached by identity and mtime
/// (one `stat` per file per request, as thttpd), the outcomes of verifications remembered per
/// file, and the helper thread that verifies (see the module docs). Memory is bounded:
/// [`MAX_HTPASSWD_SIZE`] per file, 256 files, per file [`CACHE_VERIFIED`] successes and
/// [`CACHE_FAILED`] failures of at most [`MAX_AUTHORIZATION_LEN`] bytes each.
pub struct AuthCache {
    files: HashMap<PathBuf, CachedFile>,
    worker: Worker<Verify, bool>,
    in_flight: HashMap<u64, InFlight>,
    /// Error-log lines from loading files, for the caller to write.
    log: Vec<String>,
    /// Verifications started, for the status page.
    pub verifications: u64,
}

impl AuthCache {
    /// An empty cache whose helper thread wakes the loop through `waker`.
    pub fn new(waker: Arc<mio::Waker>) -> AuthCache {
        AuthCache {
            files: HashMap::new(),
            worker: Worker::new("ferrohttpd-auth", VERIFY_QUEUE, waker, run_verify),
            in_flight: HashMap::new(),
            log: Vec::new(),
            verifications: 0,
        }
    }

    /// For a request of a file in `fs_dir` (the filesystem directory containing the requested
    /// file, already resolved; for a directory listing, the directory itself), decides
    /// whether it may be served. Normally `fs_dir/.htpasswd` protects that directory only;
    /// with `global_passwd`, `top/.htpasswd` protects everything if it exists (`top` is the
    /// root, or thttpd's `-v` host directory). `authorization` is the raw `Authorization`
    /// header value; `url_dir` is the URL path of the directory (the realm); `client` is
    /// whose verifications are counted against [`VERIFY_PER_CLIENT`].
    pub fn check(
        &mut self,
        top: &Path,
        fs_dir: &Path,
        url_dir: &str,
        global_passwd: bool,
        authorization: Option<&[u8]>,
        client: IpAddr,
    ) -> AuthResult {
        if global_passwd {
            if let Some(r) = self.decide(&top.join(HTPASSWD), "/", authorization, client) {
                return r;
            }
        }
        self.decide(&fs_dir.join(HTPASSWD), url_dir, authorization, client).unwrap_or(AuthResult::Allowed)
    }

    /// For a request that an `[[auth]]` rule covers: the rule's password file decides. A file
    /// that does not exist is an error (403, logged): a protection never fails open.
    pub fn check_rule(&mut self, rule: &AuthRule, authorization: Option<&[u8]>, client: IpAddr) -> AuthResult {
        self.decide(&rule.htpasswd, &rule.realm, authorization, client).unwrap_or_else(|| AuthResult::Error {
            message: format!(
                "{}: the password file of [[auth]] {} does not exist",
                rule.htpasswd.display(),
                rule.prefix
            ),
        })
    }

    /// Takes one finished verification from the helper thread and remembers its outcome
    /// (a job that panicked counts as a failure). Returns its id, so the connections waiting
    /// for it can ask again; `None` when no result is waiting.
    pub fn finish(&mut self) -> Option<u64> {
        let (job, result) = self.worker.try_recv()?;
        let Some(done) = self.in_flight.remove(&job) else { return Some(job) };
        // A file changed or forgotten meanwhile: the outcome is stale, not remembered.
        if let Some(file) = self.files.get_mut(&done.path).filter(|f| f.stamp == done.stamp) {
            if result == Some(true) {
                if file.verified.len() >= CACHE_VERIFIED {
                    file.verified.remove(0);
                }
                file.verified.push((done.authorization, done.user));
            } else {
                if file.failed.len() >= CACHE_FAILED {
                    file.failed.pop_front();
                }
                file.failed.push_back(done.authorization);
            }
        }
        Some(job)
    }

    /// Error-log lines produced since the last call (hashes refused at load).
    pub fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }

    /// Forgets every file and outcome (e.g. on SIGHUP). Verifications in flight finish;
    /// their outcomes are not remembered.
    pub fn clear(&mut self) {
        self.files.clear();
    }

    fn decide(&mut self, path: &Path, realm: &str, authorization: Option<&[u8]>, client: IpAddr) -> Option<AuthResult> {
        let meta = match probe(path) {
            Ok(Some(m)) => m,
            Ok(None) => {
                self.files.remove(path);
                return None;
            }
            Err(e) => {
                self.files.remove(path);
                return Some(AuthResult::Error { message: format!("{}: {e}", path.display()) });
            }
        };
        let stamp = Stamp::of(&meta);
        let fresh = self.files.get(path).is_some_and(|f| f.stamp == stamp);
        if !fresh {
            match read_with_stamp(path) {
                Ok((text, stamp)) => {
                    if self.files.len() >= CACHE_FILES {
                        self.files.clear();
                    }
                    let file = self.load(path, text, stamp);
                    self.files.insert(path.to_path_buf(), file);
                }
                Err(message) => {
                    self.files.remove(path);
                    return Some(AuthResult::Error { message });
                }
            }
        }
        let file = self.files.get(path)?;
        let challenge = || Some(AuthResult::Challenge { realm: escape_realm(realm) });
        let Some(auth) = authorization.filter(|a| a.len() <= MAX_AUTHORIZATION_LEN) else {
            return challenge();
        };
        // Remembered outcomes: every value compared, without stopping early.
        let mut hit = None;
        for (value, user) in &file.verified {
            if ct_eq(value, auth) {
                hit = Some(user.clone());
            }
        }
        let mut failed = false;
        for value in &file.failed {
            failed |= ct_eq(value, auth);
        }
        if let Some(user) = hit {
            return Some(AuthResult::Authenticated { user });
        }
        if failed {
            return challenge();
        }
        // Not decodable, or no user: no verification could succeed, and none tells anything.
        let Some((user, password)) = decode_basic(auth) else { return challenge() };
        if user.is_empty() || password.len() > MAX_PASSWORD_LEN {
            return challenge();
        }
        // Already being verified, for this connection or another one.
        let same = |f: &InFlight| f.stamp == file.stamp && f.path == path && ct_eq(&f.authorization, auth);
        if let Some((&job, _)) = self.in_flight.iter().find(|(_, f)| same(f)) {
            return Some(AuthResult::Pending { job });
        }
        let stored = entries(&file.text).find(|(_, u, _)| *u == user).map(|(_, _, h)| h);
        let (hash, known) = match (stored, &file.dummy) {
            (Some(h), _) if usable(h) => (h.to_string(), true),
            // An unknown user (or one whose entry is unusable) costs what a known one does.
            (_, Some(dummy)) => (dummy.clone(), false),
            (_, None) => return challenge(),
        };
        if self.in_flight.values().filter(|f| f.client == client).count() >= VERIFY_PER_CLIENT {
            return Some(AuthResult::Busy);
        }
        let stamp = file.stamp;
        match self.worker.submit(Verify { password, hash, known }) {
            Ok(job) => {
                self.verifications += 1;
                let authorization = auth.to_vec();
                self.in_flight.insert(job, InFlight { path: path.to_path_buf(), stamp, authorization, user, client });
                Some(AuthResult::Pending { job })
            }
            Err(_) => Some(AuthResult::Busy),
        }
    }

    /// Parses a file just read: refuses (and logs) hashes above the cost maxima, and picks the
    /// hash unknown users are verified against.
    fn load(&mut self, path: &Path, text: String, stamp: Stamp) -> CachedFile {
        let mut dummy = None;
        for (line, user, hash) in entries(&text) {
            if !well_formed(hash) {
                continue;
            }
            match cost_error(hash) {
                Some(why) => self
                    .log
                    .push(format!("{}: line {line}: {why}; the entry for user {user:?} is refused", path.display())),
                None => {
                    if dummy.is_none() {
                        dummy = Some(hash.to_string());
                    }
                }
            }
        }
        CachedFile { stamp, text, dummy, verified: Vec::new(), failed: VecDeque::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    /// crypt(3): the scheme and salt come from `setting`.
    fn crypt(pw: &str, setting: &str) -> String {
        pwhash::unix::crypt(pw, setting).unwrap()
    }

    fn des(salt: &str, pw: &str) -> String {
        crypt(pw, salt)
    }

    /// bcrypt at cost 4 with a fixed salt, in the given variant ($2y$, $2b$, $2a$).
    fn bcrypt(pw: &str, variant: pwhash::bcrypt::BcryptVariant) -> String {
        let setup =
            pwhash::bcrypt::BcryptSetup { salt: Some("bvIG6Nmid91Mu9RcmmWZfO"), cost: Some(4), variant: Some(variant) };
        pwhash::bcrypt::hash_with(setup, pw).unwrap()
    }

    fn all_schemes(pw: &str) -> Vec<String> {
        vec![
            des("ab", pw),
            crypt(pw, "$1$saltsalt$"),
            crypt(pw, "$5$rounds=1000$salty$"),
            crypt(pw, "$5$salty$"),
            crypt(pw, "$6$rounds=1000$salty$"),
            bcrypt(pw, pwhash::bcrypt::BcryptVariant::V2y),
            bcrypt(pw, pwhash::bcrypt::BcryptVariant::V2b),
            bcrypt(pw, pwhash::bcrypt::BcryptVariant::V2a),
        ]
    }

    fn basic(user: &str, pw: &str) -> Vec<u8> {
        format!("Basic {}", b64(format!("{user}:{pw}").as_bytes())).into_bytes()
    }

    /// Test-only base64 encoder.
    fn b64(input: &[u8]) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in input.chunks(3) {
            let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[test]
    fn auth_rules_cover_whole_segments() {
        let rule = |prefix: &str, host: Option<&str>| AuthRule {
            prefix: prefix.into(),
            host: host.map(Into::into),
            htpasswd: PathBuf::from(prefix),
            realm: String::new(),
        };
        let rules = [
            rule("/private", None),
            rule("/private/deep", None),
            rule("/", Some("a.example")),
            rule("/private", Some("a.example")),
        ];
        let pick =
            |host, path| rule_for(&rules, host, path).map(|i| (rules[i].prefix.as_str(), rules[i].host.as_deref()));
        assert_eq!(pick(None, "/private"), Some(("/private", None)));
        assert_eq!(pick(None, "/private/x.html"), Some(("/private", None)));
        assert_eq!(pick(None, "/private/deep/x"), Some(("/private/deep", None)));
        assert_eq!(pick(None, "/privateer"), None);
        assert_eq!(pick(None, "/"), None);
        assert_eq!(pick(Some("b.example"), "/index.html"), None);
        assert_eq!(pick(Some("a.example"), "/index.html"), Some(("/", Some("a.example"))));
        assert_eq!(pick(Some("a.example"), "/private/x"), Some(("/private", Some("a.example"))));
        assert_eq!(pick(Some("a.example"), "/private/deep/x"), Some(("/private/deep", None)));
    }

    /// The scheme-by-scheme dispatch computes what crypt(3) does for every accepted scheme,
    /// and nothing for the ones refused (SHA-1 crypt, BSDi, Apache's MD5).
    #[test]
    fn dispatch_matches_crypt() {
        for pw in ["", "secret", "pässwörd"] {
            for h in all_schemes(pw) {
                assert_eq!(super::crypt(pw, &h).as_deref(), Some(h.as_str()), "{h}");
            }
        }
        let sha1 = crypt("x", "$sha1$19703$iVdJqfSE$");
        assert!(sha1.starts_with("$sha1$"), "pwhash computes it: {sha1}");
        assert_eq!(super::crypt("x", &sha1), None);
        assert_eq!(super::crypt("x", "$apr1$b..19uzw$6v4a6u5EpFENxX7EkKRO.0"), None);
        assert_eq!(super::crypt("x", "$7$whatever"), None);
    }

    #[test]
    fn known_des_vector() {
        // From pwhash's and glibc's test vectors.
        assert_eq!(des("aZ", "test"), "aZGJuE6EXrjEE");
        assert!(verify("joe:aZGJuE6EXrjEE\n", "joe", "test"));
        assert!(!verify("joe:aZGJuE6EXrjEE\n", "joe", "tesT"));
        // `openssl passwd -crypt -salt xx password`
        assert!(verify("u:xxj31ZMTZzkVA", "u", "password"));
    }

    #[test]
    fn known_md5_and_sha_vectors() {
        // glibc / Ulrich Drepper's SHA-crypt specification examples.
        assert!(verify("u:$5$saltstring$5B8vYYiY.CVt1RlTTf8KbXBH3hsxY/GNooZaBBGWEc5", "u", "Hello world!"));
        assert!(verify(
            "u:$6$saltstring$svn8UoSVapNtMuq1ukKS4tPQd8iKwSMHWjl/O817G3uBnIFNjnQJuesI68u4OTLiBFdcbYEdFCoEOfaS35inz1",
            "u",
            "Hello world!"
        ));
        assert!(verify(
            "u:$5$rounds=10000$saltstringsaltst$3xv.VbSHBb41AL9AvLeujZkZRBAwqFMz2.opqey6IcA",
            "u",
            "Hello world!"
        ));
        // `openssl passwd -1 -salt saltsalt password`
        assert!(verify("u:$1$saltsalt$qjXMvbEw8oaL.CzflDtaK/", "u", "password"));
    }

    #[test]
    fn vectors_from_real_tools() {
        // Apache `htpasswd -nb{d,B -C 4,2,5} joe secret` and `openssl passwd -{5,6} -salt saltsalt secret`.
        let file = "\
joe:7rw6tPeKns97A
bee:$2y$04$d93DNV0217Pd3sN8Kcs6dOUByjOdaB1gEl9j79wsPYcsEhIcMFGgy
two:$5$Az0Ei/d7GaQUn4v3$fzqFCKMncWrOOgoQdC56W9OzR8vp1rCpxir2j2AqC./
six:$6$smK9/LXxN76tUQNX$QLZW0SHruWQrD66BG42BjLN5CSbX8BZbIrjrwdyeDJyZmBUcrSvv4GacXbpb79e60qTieyQaPw7vzUvio626e0
os5:$5$saltsalt$0IyaXrmV7.sGNS6tirgqHLqX/G.FBvgkYA.lpPdS5sA
os6:$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1
apr:$apr1$b..19uzw$6v4a6u5EpFENxX7EkKRO.0
";
        for user in ["joe", "bee", "two", "six", "os5", "os6"] {
            assert!(verify(file, user, "secret"), "{user}");
            assert!(!verify(file, user, "Secret"), "{user}");
        }
        // Apache's own MD5 variant is not a crypt(3) hash: thttpd cannot use it either.
        assert!(!verify(file, "apr", "secret"));
    }

    #[test]
    fn every_scheme_round_trips() {
        for hash in all_schemes("s3cret pass") {
            let file = format!("# users\n\nother:{}\nalice:{hash}\n", des("zz", "x"));
            assert!(verify(&file, "alice", "s3cret pass"), "{hash}");
            assert!(!verify(&file, "alice", "S3cret pass"), "{hash}");
            assert!(!verify(&file, "alice", ""), "{hash}");
            assert!(!verify(&file, "bob", "s3cret pass"), "{hash}");
            assert!(well_formed(&hash), "{hash}");
        }
    }

    #[test]
    fn des_uses_eight_characters_like_crypt3() {
        let h = des("ab", "12345678");
        assert!(verify(&format!("u:{h}"), "u", "12345678"));
        assert!(verify(&format!("u:{h}"), "u", "12345678 and more"));
        assert!(!verify(&format!("u:{h}"), "u", "1234567"));
    }

    #[test]
    fn plaintext_and_unknown_formats_never_match() {
        assert!(!verify("u:secret", "u", "secret"));
        assert!(!verify("u:", "u", ""));
        assert!(!verify("u:$apr1$abc$xyz", "u", "x"));
        assert!(!verify("u:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=", "u", "test"));
        assert!(!verify("u:$7$whatever", "u", "x"));
        // A DES-looking 13-character plaintext password does not match itself.
        assert!(!verify("u:abcdefghijklm", "u", "abcdefghijklm"));
        // Non-ASCII or malformed hashes are rejected before any hashing.
        for bad in [
            "$1$salt$short",
            "$2y$99$aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "ä€",
            "$5$rounds=x$s$h",
            "$6$",
        ] {
            assert!(!well_formed(bad), "{bad}");
            assert!(!verify(&format!("u:{bad}"), "u", "x"));
        }
    }

    #[test]
    fn file_format_details() {
        let h = des("ab", "pw");
        // CRLF, extra fields, and the first line for a user wins.
        let text = format!("a:{h}\r\nb:{h}:extra:fields\n#c:{h}\na:{}\n", des("ab", "other"));
        assert!(verify(&text, "a", "pw"));
        assert!(!verify(&text, "a", "other"));
        assert!(verify(&text, "b", "pw"));
        assert!(!verify(&text, "#c", "pw"));
        assert!(!verify(&text, "", "pw"));
        assert!(!verify(&format!(":{h}"), "", "pw"));
    }

    #[test]
    fn long_passwords_never_match() {
        let long = "x".repeat(MAX_PASSWORD_LEN + 1);
        let h = crypt(&long, "$5$rounds=1000$salt$");
        assert!(!verify(&format!("u:{h}"), "u", &long));
        let ok = "x".repeat(MAX_PASSWORD_LEN);
        let h = crypt(&ok, "$5$rounds=1000$salt$");
        assert!(verify(&format!("u:{h}"), "u", &ok));
    }

    #[test]
    fn constant_time_compare() {
        assert!(ct_eq(b"", b""));
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"bbc"));
        assert!(!ct_eq(b"abc", b"abcd"));
        assert!(!ct_eq(b"abcd", b"abc"));
        assert!(!ct_eq(b"\x00", b"\x80"));
    }

    #[test]
    fn basic_header_decoding() {
        assert_eq!(decode_basic(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="), Some(("Aladdin".into(), "open sesame".into())));
        assert_eq!(
            decode_basic(b"  basic   QWxhZGRpbjpvcGVuIHNlc2FtZQ  "),
            Some(("Aladdin".into(), "open sesame".into()))
        );
        assert_eq!(decode_basic(b"BASIC\tdTo="), Some(("u".into(), "".into())));
        // Password keeps further colons (RFC 7617).
        assert_eq!(decode_basic(&basic("u", "a:b")), Some(("u".into(), "a:b".into())));
        assert_eq!(decode_basic(&basic("", "p")), Some(("".into(), "p".into())));
        assert_eq!(decode_basic(&basic("ü", "ß")), Some(("ü".into(), "ß".into())));
        for bad in [
            &b""[..],
            b"Basic",
            b"Basic ",
            b"Bearer QWxhZGRpbjpvcGVuIHNlc2FtZQ==",
            b"BasicQWxhZGRpbjpvcGVuIHNlc2FtZQ==",
            b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=",
            b"Basic QWxhZGRp bjpvcGVuIHNlc2FtZQ==",
            b"Basic QWxhZGRpbg==",
            b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ===",
            b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZR==",
            b"Basic Q",
            b"Basic =",
            b"Basic ****",
            b"Basic /w==",
            b"Basic \xff\xfe",
        ] {
            assert_eq!(decode_basic(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn base64_round_trips() {
        for len in 0..40 {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let enc = b64(&data);
            assert_eq!(base64_decode(enc.as_bytes()), Some(data.clone()));
            assert_eq!(base64_decode(enc.trim_end_matches('=').as_bytes()), Some(data));
        }
    }

    #[test]
    fn realm_escaping() {
        assert_eq!(escape_realm("/private/"), "/private/");
        assert_eq!(escape_realm("/a\"b\\c/"), "/a\\\"b\\\\c/");
        assert_eq!(escape_realm("/x\r\ny/ü/"), "/x%0D%0Ay/%C3%BC/");
        assert_eq!(www_authenticate("/d/"), "Basic realm=\"/d/\"");
    }

    struct Site {
        dir: tempfile::TempDir,
    }

    impl Site {
        fn new() -> Site {
            let dir = tempfile::tempdir().unwrap();
            fs::create_dir_all(dir.path().join("private/sub")).unwrap();
            fs::create_dir_all(dir.path().join("public")).unwrap();
            Site { dir }
        }
        fn root(&self) -> &Path {
            self.dir.path()
        }
        fn p(&self, rel: &str) -> PathBuf {
            self.dir.path().join(rel)
        }
    }

    /// An [`AuthCache`] with the poller its helper thread wakes, answering as the event loop
    /// does: a pending verification is waited for, then the question asked again.
    struct Checker {
        cache: AuthCache,
        poll: mio::Poll,
    }

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    impl Checker {
        fn new() -> Checker {
            let poll = mio::Poll::new().unwrap();
            let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(0)).unwrap());
            Checker { cache: AuthCache::new(waker), poll }
        }

        fn wait(&mut self, job: u64) {
            let mut events = mio::Events::with_capacity(4);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                while let Some(done) = self.cache.finish() {
                    if done == job {
                        return;
                    }
                }
                assert!(std::time::Instant::now() < deadline, "job {job} never finished");
                self.poll.poll(&mut events, Some(std::time::Duration::from_secs(1))).unwrap();
            }
        }
    }

    fn ask(site: &Site, c: &mut Checker, dir: &str, url: &str, global: bool, auth: Option<&[u8]>) -> AuthResult {
        for _ in 0..3 {
            match c.cache.check(site.root(), &site.p(dir), url, global, auth, CLIENT) {
                AuthResult::Pending { job } => c.wait(job),
                other => return other,
            }
        }
        panic!("still pending after its verification finished");
    }

    #[test]
    fn per_directory_protection() {
        let site = Site::new();
        let mut cache = Checker::new();
        fs::write(site.p("private/.htpasswd"), format!("alice:{}\n", des("al", "wonderland"))).unwrap();
        let good = basic("alice", "wonderland");
        let bad = basic("alice", "looking-glass");
        let challenge = AuthResult::Challenge { realm: "/private/".into() };
        let alice = AuthResult::Authenticated { user: "alice".into() };
        for _ in 0..2 {
            assert_eq!(ask(&site, &mut cache, "private", "/private/", false, None), challenge);
            assert_eq!(ask(&site, &mut cache, "private", "/private/", false, Some(&good)), alice);
            assert_eq!(ask(&site, &mut cache, "private", "/private/", false, Some(&bad)), challenge);
            assert_eq!(
                ask(&site, &mut cache, "private", "/private/", false, Some(&basic("bob", "wonderland"))),
                challenge
            );
            assert_eq!(ask(&site, &mut cache, "private", "/private/", false, Some(b"Basic !!!")), challenge);
            // Not inherited by subdirectories, and no effect elsewhere.
            assert_eq!(ask(&site, &mut cache, "private/sub", "/private/sub/", false, None), AuthResult::Allowed);
            assert_eq!(ask(&site, &mut cache, "public", "/public/", false, None), AuthResult::Allowed);
            assert_eq!(ask(&site, &mut cache, "", "/", false, None), AuthResult::Allowed);
        }
    }

    #[test]
    fn global_password_file() {
        let site = Site::new();
        let mut cache = Checker::new();
        // Without a root file, -g falls back to the per-directory files (thttpd).
        fs::write(site.p("private/.htpasswd"), format!("alice:{}\n", des("al", "a"))).unwrap();
        assert_eq!(ask(&site, &mut cache, "public", "/public/", true, None), AuthResult::Allowed);
        assert!(matches!(ask(&site, &mut cache, "private", "/private/", true, None), AuthResult::Challenge { .. }));
        fs::write(site.p(".htpasswd"), format!("root:{}\n", des("ro", "r"))).unwrap();
        let root_user = AuthResult::Authenticated { user: "root".into() };
        let challenge = AuthResult::Challenge { realm: "/".into() };
        for dir in ["", "public", "private", "private/sub"] {
            assert_eq!(ask(&site, &mut cache, dir, "/x/", true, None), challenge, "{dir}");
            assert_eq!(ask(&site, &mut cache, dir, "/x/", true, Some(&basic("root", "r"))), root_user, "{dir}");
            // The root file decides: the directory's own users do not get in.
            assert_eq!(ask(&site, &mut cache, dir, "/x/", true, Some(&basic("alice", "a"))), challenge, "{dir}");
        }
        // Without -g the root file protects only the root directory.
        assert_eq!(ask(&site, &mut cache, "public", "/public/", false, None), AuthResult::Allowed);
        assert_eq!(
            ask(&site, &mut cache, "", "/", false, Some(&basic("root", "r"))),
            AuthResult::Authenticated { user: "root".into() }
        );
    }

    #[test]
    fn unreadable_file_is_an_error() {
        let site = Site::new();
        let mut cache = Checker::new();
        // A directory named .htpasswd cannot be read as a file.
        fs::create_dir(site.p("private/.htpasswd")).unwrap();
        assert!(matches!(ask(&site, &mut cache, "private", "/private/", false, None), AuthResult::Error { .. }));
        fs::remove_dir(site.p("private/.htpasswd")).unwrap();
        fs::write(site.p("private/.htpasswd"), b"u:\xff\xfe\n").unwrap();
        assert!(matches!(ask(&site, &mut cache, "private", "/private/", false, None), AuthResult::Error { .. }));
        fs::remove_file(site.p("private/.htpasswd")).unwrap();
        // A dangling symlink fails closed.
        std::os::unix::fs::symlink("/nonexistent/htpasswd", site.p("private/.htpasswd")).unwrap();
        assert!(matches!(ask(&site, &mut cache, "private", "/private/", false, None), AuthResult::Error { .. }));
        fs::remove_file(site.p("private/.htpasswd")).unwrap();
        // A FIFO is refused without blocking.
        let fifo = std::ffi::CString::new(site.p("private/.htpasswd").to_str().unwrap()).unwrap();
        // SAFETY: `fifo` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        assert!(matches!(ask(&site, &mut cache, "private", "/private/", false, None), AuthResult::Error { .. }));
        fs::remove_file(site.p("private/.htpasswd")).unwrap();
        // A file too large.
        fs::write(site.p("private/.htpasswd"), vec![b'#'; MAX_HTPASSWD_SIZE as usize + 1]).unwrap();
        assert!(matches!(ask(&site, &mut cache, "private", "/private/", false, None), AuthResult::Error { .. }));
        // Permissions only bite when not root.
        if !crate::thttpd::privs::is_root() {
            fs::write(site.p("private/.htpasswd"), "u:aZGJuE6EXrjEE\n").unwrap();
            fs::set_permissions(site.p("private/.htpasswd"), fs::Permissions::from_mode(0o000)).unwrap();
            assert!(matches!(ask(&site, &mut cache, "private", "/private/", false, None), AuthResult::Error { .. }));
        }
    }

    #[test]
    fn failures_are_remembered_and_unknown_users_are_verified_too() {
        let site = Site::new();
        let mut c = Checker::new();
        fs::write(site.p("private/.htpasswd"), format!("alice:{}\n", crypt("pw", "$5$rounds=1000$salt$"))).unwrap();
        let challenge = AuthResult::Challenge { realm: "/private/".into() };
        let wrong = basic("alice", "wrong");
        assert_eq!(ask(&site, &mut c, "private", "/private/", false, Some(&wrong)), challenge);
        assert_eq!(c.cache.verifications, 1);
        // The same wrong value again: answered from memory, at once.
        let r = c.cache.check(site.root(), &site.p("private"), "/private/", false, Some(&wrong), CLIENT);
        assert_eq!(r, challenge);
        assert_eq!(c.cache.verifications, 1, "a remembered failure costs no verification");
        // An unknown user goes through the helper thread like a known one (a dummy hash).
        let r = c.cache.check(site.root(), &site.p("private"), "/private/", false, Some(&basic("bob", "pw")), CLIENT);
        assert!(matches!(r, AuthResult::Pending { .. }), "{r:?}");
        assert_eq!(ask(&site, &mut c, "private", "/private/", false, Some(&basic("bob", "pw"))), challenge);
        assert_eq!(c.cache.verifications, 2);
        // ... and that user does not get in with the dummy's password.
        assert_eq!(
            ask(&site, &mut c, "private", "/private/", false, Some(&basic("alice", "pw"))),
            AuthResult::Authenticated { user: "alice".into() }
        );
        // Undecodable or user-less credentials tell nothing: no verification.
        for bad in [&b"Basic !!!"[..], &basic("", "pw"), &b"Bearer x"[..]] {
            let r = c.cache.check(site.root(), &site.p("private"), "/private/", false, Some(bad), CLIENT);
            assert_eq!(r, challenge);
        }
        assert_eq!(c.cache.verifications, 3);
    }

    #[test]
    fn verifications_in_flight_are_shared_and_bounded_per_client() {
        let site = Site::new();
        let mut c = Checker::new();
        fs::write(site.p("private/.htpasswd"), format!("alice:{}\n", des("al", "pw"))).unwrap();
        let check = |c: &mut Checker, auth: &[u8], client: IpAddr| {
            c.cache.check(site.root(), &site.p("private"), "/private/", false, Some(auth), client)
        };
        let AuthResult::Pending { job } = check(&mut c, &basic("alice", "a"), CLIENT) else { panic!() };
        // The same value from another connection waits for the same job.
        assert_eq!(check(&mut c, &basic("alice", "a"), CLIENT), AuthResult::Pending { job });
        assert!(matches!(check(&mut c, &basic("alice", "b"), CLIENT), AuthResult::Pending { .. }));
        assert_eq!(check(&mut c, &basic("alice", "c"), CLIENT), AuthResult::Busy, "a third for one client");
        let other = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
        assert!(matches!(check(&mut c, &basic("alice", "c"), other), AuthResult::Pending { .. }));
        c.wait(job);
        assert!(matches!(check(&mut c, &basic("alice", "a"), CLIENT), AuthResult::Challenge { .. }));
    }

    #[test]
    fn too_costly_hashes_are_refused_at_load_with_file_and_line() {
        let site = Site::new();
        let mut c = Checker::new();
        let path = site.p("private/.htpasswd");
        let cost13 = "$2y$13$d93DNV0217Pd3sN8Kcs6dOUByjOdaB1gEl9j79wsPYcsEhIcMFGgy";
        let rounds = "$6$rounds=600000$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1";
        let ok = "$2y$12$d93DNV0217Pd3sN8Kcs6dOUByjOdaB1gEl9j79wsPYcsEhIcMFGgy";
        assert!(well_formed(cost13) && well_formed(rounds) && usable(ok));
        fs::write(&path, format!("# users\nslow:{cost13}\nslower:{rounds}\nfine:{ok}\n")).unwrap();
        let r = c.cache.check(site.root(), &site.p("private"), "/private/", false, None, CLIENT);
        assert!(matches!(r, AuthResult::Challenge { .. }));
        let log = c.cache.take_log();
        let p = path.display();
        assert_eq!(
            log,
            [
                format!("{p}: line 2: bcrypt cost 13 is above the maximum of 12; the entry for user \"slow\" is refused"),
                format!("{p}: line 3: SHA-crypt rounds=600000 is above the maximum of 500000; the entry for user \"slower\" is refused"),
            ]
        );
        assert!(c.cache.take_log().is_empty(), "said once per load");
        assert!(!usable(cost13) && !usable(rounds));
        assert!(!verify(&format!("u:{cost13}"), "u", "x"));
    }

    #[test]
    fn cache_follows_file_changes() {
        let site = Site::new();
        let mut cache = Checker::new();
        let path = site.p("private/.htpasswd");
        fs::write(&path, format!("alice:{}\n", des("al", "one"))).unwrap();
        let one = basic("alice", "one");
        let two = basic("alice", "two");
        let alice = AuthResult::Authenticated { user: "alice".into() };
        assert_eq!(ask(&site, &mut cache, "private", "/private/", false, Some(&one)), alice);
        // Remembered: same answer again.
        assert_eq!(ask(&site, &mut cache, "private", "/private/", false, Some(&one)), alice);
        // A changed file (different size, so the stamp differs even within one mtime tick).
        fs::write(&path, format!("alice:{}\n#\n", des("al", "two"))).unwrap();
        assert!(matches!(
            ask(&site, &mut cache, "private", "/private/", false, Some(&one)),
            AuthResult::Challenge { .. }
        ));
        assert_eq!(ask(&site, &mut cache, "private", "/private/", false, Some(&two)), alice);
        // Removed: open again.
        fs::remove_file(&path).unwrap();
        assert_eq!(ask(&site, &mut cache, "private", "/private/", false, Some(&two)), AuthResult::Allowed);
        // The verified list is bounded.
        fs::write(&path, format!("alice:{}\n", des("al", "one"))).unwrap();
        for i in 0..(CACHE_VERIFIED + 5) {
            let auth = format!("Basic  {}", b64(b"alice:one"));
            let auth = format!("{auth}{}", " ".repeat(i));
            assert_eq!(ask(&site, &mut cache, "private", "/p/", false, Some(auth.as_bytes())), alice);
        }
        assert!(cache.cache.files.values().all(|f| f.verified.len() <= CACHE_VERIFIED));
        cache.cache.clear();
        assert!(cache.cache.files.is_empty());
    }
}
