//! Session tickets (RFC 8446 §4.6.1, RFC 5077) whose keys every worker derives alike, so a
//! client resumes on whichever worker the kernel hands its next connection to.
//!
//! Time is cut into periods of half the ticket lifetime, counted from the Unix epoch on the
//! wall clock, which all workers (and, with a key file, all hosts) share. A ticket is
//! sealed (AES-256-GCM, a random nonce) with the key of the period it was issued in and
//! names that period; it is opened only with the current or the previous period's key, so
//! it is good for at least half the lifetime and never longer than the lifetime, which is
//! what the client is told (`lifetime`). Keys come from one of two sources:
//!
//! * **Generated** (the default): a random secret made once per start, before any worker
//!   is forked (`prepare`), as the first link of a hash chain: each period's chain key is
//!   HMAC-SHA256 of the previous one, and the ticket key is derived from the chain key.
//!   Moving to a new period overwrites the old chain key, so a process's memory never holds
//!   what opens tickets older than the previous period (forward secrecy for resumed
//!   sessions, which plain long-lived ticket keys lose). Workers, and the parent that forks
//!   replacements, each walk the same chain on their own: nothing is communicated.
//! * **A key file** (`[tls] ticket_key_file`): its bytes are the secret and a period's key
//!   is HMAC-SHA256(secret, period). Every host with the same file and a synchronised clock
//!   opens every other's tickets; forward secrecy is then as good as the file's rotation
//!   (as with nginx's `ssl_session_ticket_key`). Read at start and on each reload.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// A ticket: period (8 bytes, big-endian) | nonce | ciphertext | tag.
const HEADER: usize = 8 + NONCE_LEN;
/// Longer tickets are refused unread: rustls's session state is a few hundred bytes.
const MAX_TICKET: usize = 4096;
/// Shortest and longest key file (the secret is its bytes, binary or text).
pub const KEY_FILE_MIN: usize = 32;
pub const KEY_FILE_MAX: usize = 1024;

/// The chain of generated secrets of this process: the chain key of period `at`.
struct Chain {
    step: u64,
    at: u64,
    key: [u8; 32],
}

static CHAIN: Mutex<Option<Chain>> = Mutex::new(None);

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Length of a key period for a ticket lifetime: half of it, at least a second.
fn step_for(lifetime: Duration) -> u64 {
    (lifetime.as_secs() / 2).max(1)
}

fn hmac32(key: &[u8], msg: &[&[u8]]) -> [u8; 32] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut ctx = hmac::Context::with_key(&key);
    for m in msg {
        ctx.update(m);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}

impl Chain {
    /// Walks forward to `period` (never back: a clock set back keeps the latest keys),
    /// overwriting each chain key with the next.
    fn advance(&mut self, period: u64) {
        while self.at < period {
            self.key = hmac32(&self.key, &[b"ferrohttpd ticket chain"]);
            self.at += 1;
        }
    }
}

/// Makes this process's ticket secret if it has none (so workers forked after this call
/// share it), and moves it to the current period. The parent calls it before forking and
/// then regularly; a single process on its first TLS configuration.
pub fn prepare(lifetime: Duration) -> Result<(), String> {
    let mut chain = CHAIN.lock().map_err(|_| "tls: ticket key lock poisoned".to_string())?;
    let step = chain.as_ref().map_or(step_for(lifetime), |c| c.step);
    // The previous period's key must be derivable too: the chain starts one period back.
    let previous = (now_secs() / step).saturating_sub(1);
    match chain.as_mut() {
        Some(c) => c.advance(previous),
        None => {
            let mut key = [0u8; 32];
            SystemRandom::new().fill(&mut key).map_err(|_| "tls: no random bytes for the ticket key".to_string())?;
            *chain = Some(Chain { step, at: previous, key });
        }
    }
    Ok(())
}

/// The generated secret's state (period length, period, chain key: 48 bytes), for the new
/// process of an upgrade (`upgrade`), so tickets issued here resume there.
pub fn export() -> Option<[u8; 48]> {
    let chain = CHAIN.lock().ok()?;
    let c = chain.as_ref()?;
    let mut out = [0u8; 48];
    out[..8].copy_from_slice(&c.step.to_be_bytes());
    out[8..16].copy_from_slice(&c.at.to_be_bytes());
    out[16..].copy_from_slice(&c.key);
    Some(out)
}

/// Takes the secret [`export`] gave, before any is made here.
pub fn import(bytes: &[u8]) -> Result<(), String> {
    let bad = || "tls: the handed-over ticket secret is malformed".to_string();
    let b: &[u8; 48] = bytes.try_into().map_err(|_| bad())?;
    let step = u64::from_be_bytes(b[..8].try_into().map_err(|_| bad())?);
    let at = u64::from_be_bytes(b[8..16].try_into().map_err(|_| bad())?);
    let key: [u8; 32] = b[16..].try_into().map_err(|_| bad())?;
    if step == 0 {
        return Err(bad());
    }
    let mut chain = CHAIN.lock().map_err(|_| "tls: ticket key lock poisoned".to_string())?;
    *chain = Some(Chain { step, at, key });
    Ok(())
}

/// The period length of the generated secret, once made (it cannot change without a
/// restart: the workers would no longer agree on periods).
pub fn generated_step() -> Option<u64> {
    CHAIN.lock().ok()?.as_ref().map(|c| c.step)
}

/// Where the ticket keys come from.
enum Source {
    Generated,
    File([u8; 32]),
}

/// The keys of the current period and of the one before it.
struct Keys {
    period: u64,
    current: LessSafeKey,
    previous: LessSafeKey,
}

/// Seals and opens session tickets (rustls's `ProducesTickets`).
pub struct Ticketer {
    source: Source,
    step: u64,
    lifetime: u32,
    keys: Mutex<Option<Keys>>,
    rng: SystemRandom,
}

impl std::fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticketer").field("step", &self.step).field("lifetime", &self.lifetime).finish()
    }
}

fn aead_key(bytes: &[u8; 32]) -> Option<LessSafeKey> {
    UnboundKey::new(&AES_256_GCM, bytes).ok().map(LessSafeKey::new)
}

impl Ticketer {
    /// Tickets keyed by the generated secret (made here if `prepare` was not called).
    pub fn generated(lifetime: Duration) -> Result<Ticketer, String> {
        prepare(lifetime)?;
        let step = generated_step().unwrap_or_else(|| step_for(lifetime));
        Ok(Ticketer::new(Source::Generated, step, lifetime))
    }

    /// Tickets keyed by a secret shared by several hosts.
    pub fn from_secret(secret: &[u8], lifetime: Duration) -> Ticketer {
        let key = hmac32(secret, &[b"ferrohttpd ticket file"]);
        Ticketer::new(Source::File(key), step_for(lifetime), lifetime)
    }

    fn new(source: Source, step: u64, lifetime: Duration) -> Ticketer {
        // The hint is the longest a ticket is accepted: two periods.
        let lifetime =
            u32::try_from(step * 2).unwrap_or(u32::MAX).min(u32::try_from(lifetime.as_secs()).unwrap_or(u32::MAX));
        Ticketer { source, step, lifetime: lifetime.max(1), keys: Mutex::new(None), rng: SystemRandom::new() }
    }

    /// The ticket keys of `period` and the one before.
    fn derive(&self, period: u64) -> Option<Keys> {
        let (previous, current) = match &self.source {
            Source::File(secret) => {
                let k = |p: u64| hmac32(secret, &[b"ferrohttpd ticket key", &p.to_be_bytes()]);
                (k(period.saturating_sub(1)), k(period))
            }
            Source::Generated => {
                let mut chain = CHAIN.lock().ok()?;
                let c = chain.as_mut()?;
                c.advance(period.saturating_sub(1));
                // A clock set back: the chain is ahead; keep its keys.
                let period = c.at + 1;
                let previous = hmac32(&c.key, &[b"ferrohttpd ticket key"]);
                let next = hmac32(&c.key, &[b"ferrohttpd ticket chain"]);
                let current = hmac32(&next, &[b"ferrohttpd ticket key"]);
                return Some(Keys { period, current: aead_key(&current)?, previous: aead_key(&previous)? });
            }
        };
        Some(Keys { period, current: aead_key(&current)?, previous: aead_key(&previous)? })
    }

    /// Runs `f` with the keys of the period `at` (seconds since the epoch) falls in.
    fn with_keys<T>(&self, at: u64, f: impl FnOnce(&Keys) -> Option<T>) -> Option<T> {
        let period = at / self.step;
        let mut keys = self.keys.lock().ok()?;
        if keys.as_ref().is_none_or(|k| k.period < period) {
            *keys = Some(self.derive(period)?);
        }
        f(keys.as_ref()?)
    }

    fn seal(&self, at: u64, plain: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        self.with_keys(at, |k| {
            let period = k.period.to_be_bytes();
            let mut out = Vec::with_capacity(HEADER + plain.len() + AES_256_GCM.tag_len());
            out.extend_from_slice(&period);
            out.extend_from_slice(&nonce);
            out.extend_from_slice(plain);
            let tag = k
                .current
                .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(period), &mut out[HEADER..])
                .ok()?;
            out.extend_from_slice(tag.as_ref());
            Some(out)
        })
    }

    fn open(&self, at: u64, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < HEADER + AES_256_GCM.tag_len() || ticket.len() > MAX_TICKET {
            return None;
        }
        let period: [u8; 8] = ticket[..8].try_into().ok()?;
        let nonce = Nonce::try_assume_unique_for_key(&ticket[8..HEADER]).ok()?;
        let p = u64::from_be_bytes(period);
        self.with_keys(at, |k| {
            let key = if p == k.period {
                &k.current
            } else if p.checked_add(1) == Some(k.period) {
                &k.previous
            } else {
                return None;
            };
            let mut buf = ticket[HEADER..].to_vec();
            let plain = key.open_in_place(nonce, Aad::from(period), &mut buf).ok()?.len();
            buf.truncate(plain);
            Some(buf)
        })
    }
}

impl rustls::server::ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.lifetime
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.seal(now_secs(), plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.open(now_secs(), cipher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_opens_in_its_period_and_the_next_only() {
        let t = Ticketer::from_secret(&[7u8; 32], Duration::from_secs(20));
        assert_eq!(t.lifetime, 20);
        // Periods of 10 s: issued at 1005 (period 100).
        let ticket = t.seal(1005, b"session state").unwrap();
        assert_eq!(t.open(1005, &ticket).as_deref(), Some(&b"session state"[..]));
        assert_eq!(t.open(1019, &ticket).as_deref(), Some(&b"session state"[..]));
        // Period 102: the key of period 100 is gone.
        assert_eq!(t.open(1020, &ticket), None);
        // Once the keys moved on, an old period is refused even if asked about again.
        assert_eq!(t.open(1005, &ticket), None);
    }

    #[test]
    fn tampered_foreign_and_malformed_tickets_are_refused() {
        let t = Ticketer::from_secret(&[7u8; 32], Duration::from_secs(20));
        let ticket = t.seal(1005, b"state").unwrap();
        for i in 0..ticket.len() {
            let mut bad = ticket.clone();
            bad[i] ^= 1;
            assert_eq!(t.open(1005, &bad), None, "byte {i}");
        }
        let other = Ticketer::from_secret(&[8u8; 32], Duration::from_secs(20));
        assert_eq!(other.open(1005, &ticket), None);
        for len in [0, 8, HEADER, HEADER + 15, MAX_TICKET + 1] {
            assert_eq!(t.open(1005, &vec![0u8; len]), None, "{len}");
        }
        // Another host with the same secret opens it.
        let same = Ticketer::from_secret(&[7u8; 32], Duration::from_secs(20));
        assert_eq!(same.open(1010, &ticket).as_deref(), Some(&b"state"[..]));
    }

    #[test]
    fn the_chain_is_one_way_and_the_same_for_everyone_who_starts_from_it() {
        let mut a = Chain { step: 10, at: 5, key: [1u8; 32] };
        let mut b = Chain { step: 10, at: 5, key: [1u8; 32] };
        a.advance(9);
        b.advance(7);
        assert_ne!(a.key, b.key);
        b.advance(9);
        assert_eq!(a.key, b.key);
        // Never backwards.
        a.advance(3);
        assert_eq!(a.at, 9);
    }

    #[test]
    fn generated_keys_are_shared_by_every_ticketer_of_the_process() {
        let a = Ticketer::generated(Duration::from_secs(3600)).unwrap();
        let b = Ticketer::generated(Duration::from_secs(3600)).unwrap();
        let now = now_secs();
        let ticket = a.seal(now, b"x").unwrap();
        assert_eq!(b.open(now, &ticket).as_deref(), Some(&b"x"[..]));
    }
}
