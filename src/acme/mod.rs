//! Automatic HTTPS: certificates from an ACME CA (RFC 8555) for `[acme] domains`, obtained
//! at start for names without a valid one in `state_dir` and renewed when a third of their
//! lifetime is left, all on one thread of its own ([`Acme`]); the event loop never waits
//! for it.
//!
//! - **The thread** ([`schedule`]) runs instant-acme on a current-thread tokio runtime,
//!   over a blocking HTTP client of ours on rustls ([`client`]). One order per name, so one
//!   name's failure holds up no other. Failures back off exponentially (30 s doubling, at
//!   most 12 h, or later when the CA said `Retry-After`).
//! - **What it hands the loops** goes through files in `state_dir` ([`store`]): the
//!   certificates, the HTTP-01 answers, the TLS-ALPN-01 certificates. After writing a
//!   certificate it wakes its loop (the server's `mio::Waker`), which takes the
//!   [`Event`]s: log lines (the error log says each step once) and "installed", on which
//!   the loop rebuilds its TLS configuration by the reload path (`tls::server_config`):
//!   new handshakes get the new certificate, connections in flight keep theirs.
//! - **Challenges**: [`http01`] answers `/.well-known/acme-challenge/TOKEN` (called by the
//!   request pipeline before any rule); `tls::acme` reads what the handshakes need
//!   (the certificates, the TLS-ALPN-01 answers to `acme-tls/1`, RFC 8737).
//! - **Before the first certificate**, a handshake for a name that has none ends in an
//!   alert (`access_denied`: rustls resolved no certificate), unless `[tls] cert`
//!   gives a default. A temporary self-signed certificate was the other choice: browsers
//!   would show an interstitial that users learn to click through, and an HSTS site could
//!   not be reached at all; the alert says the truth (not ready) for the seconds issuance
//!   takes, and plain HTTP is unaffected.

pub mod client;
mod schedule;
pub mod store;

use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};

use crate::config::AcmeSettings;

/// The path prefix of HTTP-01 answers (RFC 8555 §8.3).
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// What the thread tells its loop.
pub enum Event {
    /// A line for the error log.
    Log(String),
    /// A new certificate is in `state_dir`: rebuild the TLS configuration.
    Installed,
}

/// One name's state, for the status page.
pub type NameStatus = crate::status::CertStatus;

/// The loop's side of the ACME thread.
pub struct Acme {
    settings: AcmeSettings,
    waker: Arc<mio::Waker>,
    events: Option<Receiver<Event>>,
    status: Arc<Mutex<Vec<NameStatus>>>,
}

impl Acme {
    /// The handle for `settings`, or None when `[acme]` names no domain. Nothing runs
    /// until [`Acme::start`].
    pub fn new(settings: &AcmeSettings, waker: Arc<mio::Waker>) -> Option<Acme> {
        settings.enabled().then(|| Acme {
            settings: settings.clone(),
            waker,
            events: None,
            status: Arc::new(Mutex::new(Vec::new())),
        })
    }

    /// Starts the thread (once: after daemonising and the user switch, so the process forks
    /// and switches single-threaded, and the thread writes as the service user).
    pub fn start(&mut self) -> Result<(), String> {
        if self.events.is_some() {
            return Ok(());
        }
        let (tx, rx) = mpsc::channel();
        let (settings, waker, status) = (self.settings.clone(), Arc::clone(&self.waker), Arc::clone(&self.status));
        std::thread::Builder::new()
            .name("acme".into())
            .spawn(move || schedule::run(settings, tx, waker, status))
            .map_err(|e| format!("acme: cannot start its thread: {e}"))?;
        self.events = Some(rx);
        Ok(())
    }

    /// The events since the last call: log lines, and whether a certificate was installed.
    pub fn take_events(&mut self) -> (Vec<String>, bool) {
        let (mut logs, mut installed) = (Vec::new(), false);
        if let Some(rx) = &self.events {
            for e in rx.try_iter() {
                match e {
                    Event::Log(l) => logs.push(l),
                    Event::Installed => installed = true,
                }
            }
        }
        (logs, installed)
    }

    /// Each name's state, for the status page.
    pub fn status(&self) -> Vec<NameStatus> {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// The HTTP-01 answer for a request path: None when the path is not under
/// [`HTTP01_PREFIX`] (or ACME is off); `Some(None)` for a token with no pending answer
/// (404); `Some(Some(key_authorization))` otherwise. Reads `state_dir/http-01/TOKEN`, which
/// whichever thread or worker runs the order wrote.
pub fn http01(settings: &AcmeSettings, path: &str) -> Option<Option<Vec<u8>>> {
    // Without `[acme]` every request pays one load and a branch here, not a string compare.
    if !settings.enabled() {
        return None;
    }
    let token = path.strip_prefix(HTTP01_PREFIX)?;
    if !settings.challenges.contains(&crate::config::AcmeChallenge::Http01) {
        return None;
    }
    if !store::valid_token(token) {
        return Some(None);
    }
    Some(std::fs::read(store::http01_file(&settings.state_dir, token)).ok())
}

/// Makes `state_dir` ready for the service user (see [`store::prepare`]).
pub fn prepare_state_dir(settings: &AcmeSettings, owner: Option<(u32, u32)>) -> Result<(), String> {
    if !settings.enabled() {
        return Ok(());
    }
    store::prepare(&settings.state_dir, owner)?;
    // The roots are read now too, so a bad `ca_roots` stops the start, not the thread.
    client::Client::new(settings.ca_roots.as_deref()).map(drop)
}
