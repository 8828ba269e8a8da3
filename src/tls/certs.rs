//! Certificate chains and private keys from PEM files, checked the way a start-up must:
//! every failure names the file; a key that does not belong to the leaf certificate is an
//! error; an expired leaf is a warning with its date (the server still starts, so a renewal
//! that is late does not turn into an outage of the plain listeners too).
//!
//! PEM is decoded by `rustls-pki-types` (`PemObject`); the only DER read here is the leaf's
//! validity period, by a small reader of the few fields in front of it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::config::CertFiles;

/// A loaded certificate, and a warning to give about it (expired).
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    pub warning: Option<String>,
}

/// Reads `files`, checks that the key matches the leaf, and reports an expired leaf.
pub fn load(files: &CertFiles, provider: &CryptoProvider, now: SystemTime) -> Result<Loaded, String> {
    let cert_path = files.cert.display();
    let key_path = files.key.display();
    let cert_pem = std::fs::read(&files.cert).map_err(|e| format!("certificate {cert_path}: {e}"))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("certificate {cert_path}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("certificate {cert_path}: no PEM certificate (\"BEGIN CERTIFICATE\") in the file"));
    }
    let key_pem = std::fs::read(&files.key).map_err(|e| format!("key {key_path}: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            format!("key {key_path}: no PEM private key (PKCS#8, SEC1 or RSA) in the file")
        }
        e => format!("key {key_path}: {e}"),
    })?;
    let signer = provider.key_provider.load_private_key(key).map_err(|e| format!("key {key_path}: {e}"))?;
    let not_after = not_after(&chain[0]);
    let key = CertifiedKey::new(chain, signer);
    key.keys_match().map_err(|e| format!("key {key_path} does not match the certificate {cert_path}: {e}"))?;
    let warning = match not_after {
        None => return Err(format!("certificate {cert_path}: the first certificate cannot be read (not X.509 DER)")),
        Some(t) if t < now => Some(format!("certificate {cert_path} expired on {}", httpdate::fmt_http_date(t))),
        Some(_) => None,
    };
    Ok(Loaded { key: Arc::new(key), warning })
}

/// One DER element: its tag, its contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The leaf's `notAfter` (RFC 5280 §4.1.2.5).
fn not_after(cert: &[u8]) -> Option<SystemTime> {
    validity(cert).map(|(_, after)| after)
}

/// A certificate's `notBefore` and `notAfter` (RFC 5280 §4.1.2.5), from
/// `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serial,
/// signature, issuer, validity SEQUENCE { notBefore, notAfter }, ... } ... }`.
pub fn validity(cert: &[u8]) -> Option<(SystemTime, SystemTime)> {
    const SEQUENCE: u8 = 0x30;
    let (SEQUENCE, cert, _) = element(cert)? else { return None };
    let (SEQUENCE, mut tbs, _) = element(cert)? else { return None };
    if tbs.first() == Some(&0xa0) {
        tbs = element(tbs)?.2;
    }
    let (_serial, _, tbs) = element(tbs)?;
    let (_signature, _, tbs) = element(tbs)?;
    let (_issuer, _, tbs) = element(tbs)?;
    let (SEQUENCE, validity, _) = element(tbs)? else { return None };
    let (tag, time, validity) = element(validity)?;
    let before = parse_time(tag, time)?;
    let (tag, time, _) = element(validity)?;
    Some((before, parse_time(tag, time)?))
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn parse_time(tag: u8, t: &[u8]) -> Option<SystemTime> {
    let digits = |s: &[u8]| -> Option<u64> {
        s.iter().try_fold(0u64, |acc, &b| b.is_ascii_digit().then(|| acc * 10 + u64::from(b - b'0')))
    };
    let (year, rest) = match (tag, t.len()) {
        (0x17, 13) => {
            let yy = digits(&t[..2])?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &t[2..])
        }
        (0x18, 15) => (digits(&t[..4])?, &t[4..]),
        _ => return None,
    };
    if rest[10] != b'Z' {
        return None;
    }
    let [month, day, hour, min, sec] = [0, 2, 4, 6, 8].map(|i| digits(&rest[i..i + 2]).unwrap_or(u64::MAX));
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(UNIX_EPOCH + Duration::from_secs(days * 86_400 + hour * 3600 + min * 60 + sec))
}

/// Days since 1970-01-01 of a date in the proleptic Gregorian calendar (year ≥ 1970).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    /// Makes a self-signed certificate with the openssl CLI: `(dir, cert, key)`.
    fn openssl_cert(dir: &Path, name: &str, args: &[&str]) -> CertFiles {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        let out = Command::new("openssl")
            .args(["req", "-x509", "-nodes", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"])
            .args(args)
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl runs");
        assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
        CertFiles { cert, key }
    }

    fn provider() -> CryptoProvider {
        super::super::provider()
    }

    #[test]
    fn loads_ec_and_rsa_keys_in_every_pem_form() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let ec =
            openssl_cert(dir.path(), "ec", &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-days", "30"]);
        let l = load(&ec, &provider(), now).unwrap();
        assert!(l.warning.is_none());
        let rsa = openssl_cert(dir.path(), "rsa", &["-newkey", "rsa:2048", "-days", "30"]);
        load(&rsa, &provider(), now).unwrap();
        // The same keys as SEC1 ("BEGIN EC PRIVATE KEY") and PKCS#1 ("BEGIN RSA PRIVATE KEY").
        for (files, kind) in [(&ec, "ec"), (&rsa, "rsa")] {
            let legacy = dir.path().join(format!("{kind}.legacy.key"));
            // `openssl ec` writes SEC1 by default; `openssl rsa` needs -traditional for PKCS#1.
            let form: &[&str] = if kind == "ec" { &[] } else { &["-traditional"] };
            let out = Command::new("openssl")
                .arg(kind)
                .args(form)
                .arg("-in")
                .arg(&files.key)
                .arg("-out")
                .arg(&legacy)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let text = std::fs::read_to_string(&legacy).unwrap();
            let want = if kind == "ec" { "BEGIN EC PRIVATE KEY" } else { "BEGIN RSA PRIVATE KEY" };
            assert!(text.contains(want), "{text}");
            load(&CertFiles { cert: files.cert.clone(), key: legacy }, &provider(), now).unwrap();
        }
    }

    #[test]
    fn start_up_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let a = openssl_cert(dir.path(), "a", &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-days", "30"]);
        let b = openssl_cert(dir.path(), "b", &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-days", "30"]);
        let err = |files: CertFiles| load(&files, &provider(), now).err().unwrap();

        let missing = dir.path().join("missing.crt");
        let e = err(CertFiles { cert: missing.clone(), key: a.key.clone() });
        assert!(e.contains(&missing.display().to_string()) && e.contains("No such file"), "{e}");

        let e = err(CertFiles { cert: a.key.clone(), key: a.key.clone() });
        assert!(e.contains(&a.key.display().to_string()) && e.contains("no PEM certificate"), "{e}");

        let e = err(CertFiles { cert: a.cert.clone(), key: a.cert.clone() });
        assert!(e.contains(&a.cert.display().to_string()) && e.contains("no PEM private key"), "{e}");

        let e = err(CertFiles { cert: a.cert.clone(), key: b.key.clone() });
        assert!(e.contains("does not match") && e.contains(&b.key.display().to_string()), "{e}");
    }

    #[test]
    fn an_expired_certificate_is_a_warning_with_its_date() {
        let dir = tempfile::tempdir().unwrap();
        let c = openssl_cert(dir.path(), "c", &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-days", "1"]);
        let in_two_days = SystemTime::now() + Duration::from_secs(2 * 86_400);
        let l = load(&c, &provider(), in_two_days).unwrap();
        let w = l.warning.unwrap();
        let tomorrow = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(86_400));
        // "Wed, 02 Dec 2026": the day, whatever the second.
        assert!(w.contains("expired on") && w.contains(&tomorrow[..16]), "{w} / {tomorrow}");
        assert!(load(&c, &provider(), SystemTime::now()).unwrap().warning.is_none());
    }

    #[test]
    fn der_times() {
        let t = |tag, s: &str| parse_time(tag, s.as_bytes()).map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs());
        assert_eq!(t(0x17, "700101000000Z"), Some(0));
        assert_eq!(t(0x17, "491231235959Z"), Some(2_524_607_999));
        assert_eq!(t(0x18, "20000229120000Z"), Some(951_825_600));
        assert_eq!(t(0x18, "99991231235959Z"), Some(253_402_300_799));
        for bad in ["7001010000Z", "701301000000Z", "700100000000Z", "70010100000aZ", "700101000000+"] {
            assert_eq!(t(0x17, bad), None, "{bad}");
        }
        assert_eq!(not_after(b"\x30\x03\x02\x01\x00"), None);
        assert_eq!(not_after(b""), None);
        assert_eq!(element(b"\x30\x84\xff\xff\xff\xff"), None);
    }
}
