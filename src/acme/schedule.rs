//! The ACME thread: when each name is due, the account, and one order per name.
//!
//! A name is due when `state_dir` has no certificate for it that loads, or when a third of
//! its certificate's lifetime is left, less a jitter of up to a twentieth of the lifetime
//! (drawn once per certificate, so servers that started together do not renew together).
//! A failed attempt retries after a backoff that doubles from [`BACKOFF_FIRST`] to
//! [`BACKOFF_MAX`], or after the CA's `Retry-After` when that is later: a name whose
//! challenge keeps failing costs the CA a few orders a day. The challenge types are tried
//! in the order of `[acme] challenges`: an attempt uses the next type after the one that
//! failed last.
//!
//! With `workers = N` every worker runs this thread, and one of them issues: the one that
//! holds the lock on `state_dir/lock` (`flock`, released when its process ends, when a
//! waiting worker takes over). The others watch the certificate files once a second and
//! install what changed; the challenge answers are files, so any worker can answer the
//! CA's validation. Two servers sharing a `state_dir` (an upgrade in progress) order once.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use instant_acme::{
    Account, AuthorizationStatus, ChallengeType, ExternalAccountKey, Identifier, NewAccount, NewOrder, OrderStatus,
    RetryPolicy,
};
use serde::{Deserialize, Serialize};

use super::client::Client;
use super::{store, Event, NameStatus};
use crate::config::{AcmeChallenge, AcmeSettings};

pub(super) const BACKOFF_FIRST: Duration = Duration::from_secs(30);
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(12 * 3600);
/// How often a worker that does not issue looks for new certificates and for the lock.
const WATCH: Duration = Duration::from_secs(1);
/// The longest sleep: the schedule is looked at again at least this often (a clock that
/// jumped, a certificate file replaced by hand).
const WAKE_MAX: Duration = Duration::from_secs(3600);
/// How long the CA may take to validate, and to issue.
const POLL: RetryPolicy = RetryPolicy::new().initial_delay(Duration::from_millis(250)).timeout(Duration::from_secs(90));

/// The account file: the credentials, and the directory they belong to (another CA, or
/// staging instead of production, needs another account).
#[derive(Serialize, Deserialize)]
struct StoredAccount {
    directory: String,
    credentials: instant_acme::AccountCredentials,
}

/// One name's schedule.
struct Name {
    name: String,
    failures: u32,
    retry_at: Option<SystemTime>,
    /// The challenge type to use next (an index into `[acme] challenges`).
    challenge: usize,
    /// The jitter of the current certificate, and the `notAfter` it was drawn for.
    jitter: Option<(SystemTime, Duration)>,
    status: NameStatus,
}

struct Thread {
    settings: AcmeSettings,
    tx: Sender<Event>,
    waker: Arc<mio::Waker>,
    status: Arc<Mutex<Vec<NameStatus>>>,
    client: Client,
    account: Option<Account>,
    /// The issuer's lock, once this process holds it.
    lock: Option<std::fs::File>,
}

impl Thread {
    fn say(&self, line: String) {
        let _ = self.tx.send(Event::Log(line));
        let _ = self.waker.wake();
    }
}

/// The thread's body: runs until the process ends.
pub(super) fn run(
    settings: AcmeSettings,
    tx: Sender<Event>,
    waker: Arc<mio::Waker>,
    status: Arc<Mutex<Vec<NameStatus>>>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_time().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = tx.send(Event::Log(format!("acme: cannot start: {e}; no certificates will be obtained")));
            let _ = waker.wake();
            return;
        }
    };
    let client = match Client::new(settings.ca_roots.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            let _ = tx.send(Event::Log(format!("{e}; no certificates will be obtained")));
            let _ = waker.wake();
            return;
        }
    };
    let mut t = Thread { settings, tx, waker, status, client, account: None, lock: None };
    rt.block_on(t.schedule());
}

impl Thread {
    async fn schedule(&mut self) {
        let mut names: Vec<Name> = self
            .settings
            .domains
            .iter()
            .map(|n| Name {
                name: n.clone(),
                failures: 0,
                retry_at: None,
                challenge: 0,
                jitter: None,
                status: NameStatus { name: n.clone(), ..NameStatus::default() },
            })
            .collect();
        // What a watching worker last installed: each certificate file's modification time.
        let mut seen: Vec<Option<SystemTime>> = names.iter().map(|n| self.modified(&n.name)).collect();
        loop {
            if self.lock.is_none() && !self.take_lock() {
                let changed = names.iter().zip(&mut seen).fold(false, |changed, (n, seen)| {
                    let now = self.modified(&n.name);
                    changed | (std::mem::replace(seen, now) != now)
                });
                if changed {
                    let _ = self.tx.send(Event::Installed);
                    let _ = self.waker.wake();
                }
                for n in &mut names {
                    self.due(n, SystemTime::now());
                    n.status.next = None;
                }
                self.publish(&names);
                tokio::time::sleep(WATCH).await;
                continue;
            }
            let now = SystemTime::now();
            for n in &mut names {
                let due = self.due(n, now);
                n.status.next = Some(due);
                if due <= now {
                    self.attempt(n).await;
                    let due = self.due(n, SystemTime::now());
                    n.status.next = Some(due);
                }
            }
            self.publish(&names);
            let now = SystemTime::now();
            let next = names.iter().filter_map(|n| n.status.next).min().unwrap_or(now + WAKE_MAX);
            let sleep = next.duration_since(now).unwrap_or(Duration::ZERO).min(WAKE_MAX);
            tokio::time::sleep(sleep.max(Duration::from_millis(100))).await;
        }
    }

    fn publish(&self, names: &[Name]) {
        if let Ok(mut s) = self.status.lock() {
            *s = names.iter().map(|n| n.status.clone()).collect();
        }
    }

    fn modified(&self, name: &str) -> Option<SystemTime> {
        let files = store::cert_files(&self.settings.state_dir, name);
        std::fs::metadata(files.cert).and_then(|m| m.modified()).ok()
    }

    /// Takes the issuer's lock if no other process holds it.
    fn take_lock(&mut self) -> bool {
        use std::os::fd::AsRawFd;
        let path = self.settings.state_dir.join("lock");
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(f) = std::fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(&path) else {
            return false;
        };
        // SAFETY: flock on a descriptor this function owns; no memory is involved.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return false;
        }
        self.lock = Some(f);
        true
    }

    /// When `n` is next due: now without a certificate, at its renewal time with one, and
    /// never before a retry time.
    fn due(&self, n: &mut Name, now: SystemTime) -> SystemTime {
        let files = store::cert_files(&self.settings.state_dir, &n.name);
        // A certificate that does not load (its key lost or not its own) is as good as none:
        // the loops do not serve it (`tls::acme::certificates` says so), so it is ordered anew.
        let loads = crate::tls::certs::load(&files, &crate::tls::provider(), now).is_ok();
        let validity = std::fs::read(&files.cert).ok().filter(|_| loads).and_then(|pem| leaf_validity(&pem));
        n.status.not_after = validity.map(|(_, after)| after);
        let renew = match validity {
            None => now,
            Some((before, after)) => {
                let jitter = match n.jitter {
                    Some((drawn_for, j)) if drawn_for == after => j,
                    _ => {
                        let life = after.duration_since(before).unwrap_or(Duration::ZERO);
                        let j = random_fraction(life / 20);
                        n.jitter = Some((after, j));
                        j
                    }
                };
                renewal_time(before, after, jitter)
            }
        };
        match n.retry_at {
            Some(r) if r > renew => r,
            _ => renew,
        }
    }

    /// One order for `n`, with the challenge type its turn says.
    async fn attempt(&mut self, n: &mut Name) {
        let kind = self.settings.challenges[n.challenge % self.settings.challenges.len()];
        let started = Instant::now();
        let renewing = n.status.not_after.is_some();
        self.say(format!(
            "acme: {}: {} a certificate ({})",
            n.name,
            if renewing { "renewing" } else { "ordering" },
            kind.name()
        ));
        if let Ok(mut slot) = self.client.retry_after().lock() {
            *slot = None;
        }
        let result = match self.account().await {
            Ok(account) => issue(&account, &n.name, kind, &self.settings.state_dir).await,
            Err(e) => Err(e),
        };
        let result = result.and_then(|(chain, key)| {
            let files = store::cert_files(&self.settings.state_dir, &n.name);
            store::write_atomic(&files.key, key.as_bytes())
                .and_then(|()| store::write_atomic(&files.cert, chain.as_bytes()))
                .map_err(|e| format!("cannot write {}: {e}", files.cert.display()))?;
            Ok(leaf_validity(chain.as_bytes()).map(|(_, a)| a))
        });
        match result {
            Ok(not_after) => {
                n.failures = 0;
                n.retry_at = None;
                n.status.last_error = None;
                let until = not_after.map_or_else(|| "?".into(), httpdate::fmt_http_date);
                self.say(format!(
                    "acme: {}: certificate obtained in {:.2} s, valid until {until}",
                    n.name,
                    started.elapsed().as_secs_f64()
                ));
                let _ = self.tx.send(Event::Installed);
                let _ = self.waker.wake();
            }
            Err(e) => {
                n.failures += 1;
                n.challenge += 1;
                let hinted = self.client.retry_after().lock().ok().and_then(|s| *s);
                let now = SystemTime::now();
                let wait = backoff(n.failures, hinted.and_then(|t| t.duration_since(now).ok()));
                n.retry_at = Some(now + wait);
                n.status.last_error = Some(e.clone());
                self.say(format!("acme: {}: failed: {e}; next attempt in {} s", n.name, wait.as_secs()));
            }
        }
    }

    /// The account: loaded from `state_dir` when it was made for this directory, else
    /// created (and stored) once.
    async fn account(&mut self) -> Result<Account, String> {
        if let Some(a) = &self.account {
            return Ok(a.clone());
        }
        let path = self.settings.state_dir.join("account.json");
        let stored = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<StoredAccount>(&b).ok());
        let builder = || Account::builder_with_http(Box::new(self.client.clone()));
        let account = match stored.filter(|s| s.directory == self.settings.directory) {
            Some(s) => builder().from_credentials(s.credentials).await.map_err(|e| format!("account: {e}"))?,
            None => {
                let contact = self.settings.email.as_ref().map(|e| format!("mailto:{e}"));
                let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
                let eab = self.settings.eab.as_ref().map(|(kid, key)| ExternalAccountKey::new(kid.clone(), key));
                let new = NewAccount { contact: &contacts, terms_of_service_agreed: true, only_return_existing: false };
                let (account, credentials) = builder()
                    .create(&new, self.settings.directory.clone(), eab.as_ref())
                    .await
                    .map_err(|e| format!("account: {e}"))?;
                let stored = StoredAccount { directory: self.settings.directory.clone(), credentials };
                let json = serde_json::to_vec(&stored).map_err(|e| format!("account: {e}"))?;
                store::write_atomic(&path, &json).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                self.say(format!("acme: account created at {} ({})", self.settings.directory, account.id()));
                account
            }
        };
        self.account = Some(account.clone());
        Ok(account)
    }
}

/// One order for `name` by `kind`: the chain (PEM) and its new key (PEM). The challenge
/// files written for it are removed whatever the outcome.
async fn issue(account: &Account, name: &str, kind: AcmeChallenge, dir: &Path) -> Result<(String, String), String> {
    let mut written = Vec::new();
    let result = order(account, name, kind, dir, &mut written).await;
    for f in written {
        let _ = std::fs::remove_file(f);
    }
    result
}

async fn order(
    account: &Account,
    name: &str,
    kind: AcmeChallenge,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(String, String), String> {
    let ids = [Identifier::Dns(name.to_string())];
    let mut order = account.new_order(&NewOrder::new(&ids)).await.map_err(|e| format!("new order: {e}"))?;
    let mut authorizations = order.authorizations();
    while let Some(a) = authorizations.next().await {
        let mut a = a.map_err(|e| format!("authorization: {e}"))?;
        match a.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            s => return Err(format!("authorization is {s:?}")),
        }
        let ty = match kind {
            AcmeChallenge::Http01 => ChallengeType::Http01,
            AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
        };
        let mut ch = a.challenge(ty).ok_or_else(|| format!("the CA offers no {} challenge", kind.name()))?;
        let key_auth = ch.key_authorization();
        let file = match kind {
            AcmeChallenge::Http01 => {
                if !store::valid_token(&ch.token) {
                    return Err("the CA sent a token that is not base64url".into());
                }
                let f = store::http01_file(dir, &ch.token);
                store::write_atomic(&f, key_auth.as_str().as_bytes()).map(|()| f)
            }
            AcmeChallenge::TlsAlpn01 => {
                let pem = alpn_certificate(name, key_auth.digest().as_ref())?;
                let f = store::alpn_file(dir, name);
                store::write_atomic(&f, pem.as_bytes()).map(|()| f)
            }
        };
        written.push(file.map_err(|e| format!("cannot write the challenge answer: {e}"))?);
        ch.set_ready().await.map_err(|e| format!("challenge: {e}"))?;
    }
    let status = order.poll_ready(&POLL).await.map_err(|e| format!("validation by {}: {e}", kind.name()))?;
    if status != OrderStatus::Ready {
        return Err(format!("validation by {} failed: {}", kind.name(), why_invalid(&mut order).await));
    }
    let key = rcgen::KeyPair::generate().map_err(|e| format!("key: {e}"))?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| format!("CSR: {e}"))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).map_err(|e| format!("CSR: {e}"))?;
    order.finalize_csr(csr.der()).await.map_err(|e| format!("finalize: {e}"))?;
    let chain = order.poll_certificate(&POLL).await.map_err(|e| format!("certificate: {e}"))?;
    Ok((chain, key.serialize_pem()))
}

/// The reason the CA gave for an invalid authorization, as far as it says.
async fn why_invalid(order: &mut instant_acme::Order) -> String {
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut a)) = authorizations.next().await {
        if let Ok(state) = a.refresh().await {
            if let Some(p) = state.challenges.iter().find_map(|c| c.error.as_ref()) {
                return p.to_string();
            }
        }
    }
    "the CA gave no reason".into()
}

/// A self-signed certificate for `name` with the `acmeIdentifier` extension holding
/// `digest` (RFC 8737 §3), and its key: one PEM text.
fn alpn_certificate(name: &str, digest: &[u8]) -> Result<String, String> {
    let key = rcgen::KeyPair::generate().map_err(|e| format!("key: {e}"))?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| format!("certificate: {e}"))?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(|e| format!("certificate: {e}"))?;
    Ok(cert.pem() + &key.serialize_pem())
}

/// The leaf's validity, from a PEM chain.
fn leaf_validity(pem: &[u8]) -> Option<(SystemTime, SystemTime)> {
    use rustls::pki_types::pem::PemObject;
    let leaf = rustls::pki_types::CertificateDer::pem_slice_iter(pem).next()?.ok()?;
    crate::tls::certs::validity(&leaf)
}

/// When a certificate valid from `before` to `after` is renewed: with a third of its
/// lifetime left, `jitter` earlier.
pub(super) fn renewal_time(before: SystemTime, after: SystemTime, jitter: Duration) -> SystemTime {
    let life = after.duration_since(before).unwrap_or(Duration::ZERO);
    let at = after.checked_sub(life / 3).unwrap_or(before);
    at.checked_sub(jitter).unwrap_or(at).max(before)
}

/// The wait after the `failures`-th failure in a row, or the CA's `Retry-After` if later.
pub(super) fn backoff(failures: u32, retry_after: Option<Duration>) -> Duration {
    let doubled = BACKOFF_FIRST.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    doubled.min(BACKOFF_MAX).max(retry_after.unwrap_or(Duration::ZERO))
}

/// A random duration in `[0, max)`.
fn random_fraction(max: Duration) -> Duration {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    let r = h.finish();
    Duration::from_nanos(((max.as_nanos() as u64 as u128 * u128::from(r)) >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_with_a_third_of_the_lifetime_left() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let day = Duration::from_secs(86_400);
        assert_eq!(renewal_time(t0, t0 + 90 * day, Duration::ZERO), t0 + 60 * day);
        assert_eq!(renewal_time(t0, t0 + 90 * day, day), t0 + 59 * day);
        assert_eq!(renewal_time(t0, t0 + Duration::from_secs(60), Duration::ZERO), t0 + Duration::from_secs(40));
        // Nonsense validity: due at once, never before notBefore.
        assert_eq!(renewal_time(t0, t0, day), t0);
        assert_eq!(renewal_time(t0 + day, t0, Duration::ZERO), t0 + day);
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_yields_to_retry_after() {
        let s = Duration::from_secs;
        assert_eq!(backoff(1, None), s(30));
        assert_eq!(backoff(2, None), s(60));
        assert_eq!(backoff(5, None), s(480));
        assert_eq!(backoff(40, None), BACKOFF_MAX);
        assert_eq!(backoff(1, Some(s(3600))), s(3600));
        assert_eq!(backoff(3, Some(s(10))), s(120));
    }

    #[test]
    fn jitter_stays_within_its_bound() {
        for _ in 0..100 {
            assert!(random_fraction(Duration::from_secs(3)) < Duration::from_secs(3));
        }
        assert_eq!(random_fraction(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn the_alpn_certificate_carries_the_digest() {
        let pem = alpn_certificate("example.org", &[7u8; 32]).unwrap();
        let key = crate::tls::acme::certified_key(pem.as_bytes()).unwrap();
        let der = key.cert[0].as_ref();
        // id-pe-acmeIdentifier (1.3.6.1.5.5.7.1.31), critical, OCTET STRING of the digest.
        let oid = [0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f];
        assert!(der.windows(oid.len()).any(|w| w == oid));
        let mut digest = vec![0x04, 0x20];
        digest.extend_from_slice(&[7u8; 32]);
        assert!(der.windows(digest.len()).any(|w| w == digest.as_slice()));
        assert!(leaf_validity(pem.as_bytes()).is_some());
    }
}
