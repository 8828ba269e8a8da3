//! `[acme] state_dir`: what the ACME thread writes and the event loops read.
//!
//! ```text
//! state_dir/                 0700, owned by the service user
//!   account.json             the account key and URL (and the directory it belongs to)
//!   NAME.crt  NAME.key       each name's chain (leaf first) and key, as certbot's
//!                            fullchain.pem and privkey.pem
//!   http-01/TOKEN            an HTTP-01 answer, while its challenge is pending
//!   tls-alpn-01/NAME.pem     a TLS-ALPN-01 certificate and key, while pending
//! ```
//!
//! Every file is 0600 and written atomically (a temporary file in the same directory,
//! fsync, rename), so a reader sees the old file or the new one, never a mix. Names are
//! the DNS names `config` validated (letters, digits, hyphens, dots) and tokens are checked
//! here ([`valid_token`]): nothing else reaches a path.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub use crate::tls::acme::{alpn_file, cert_files, ALPN_DIR};

pub const HTTP01_DIR: &str = "http-01";

/// An HTTP-01 token as RFC 8555 §8.1 makes them: base64url, at least 128 bits. A longer
/// bound keeps a request from naming an arbitrary file.
pub fn valid_token(t: &str) -> bool {
    (16..=256).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub fn http01_file(dir: &Path, token: &str) -> PathBuf {
    dir.join(HTTP01_DIR).join(token)
}

/// Writes `data` to `path` atomically, mode 0600.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = (|| {
        let mut f = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    // The rename itself is durable once the directory is.
    if let Some(parent) = path.parent() {
        if let Ok(d) = fs::File::open(parent) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Makes `dir` (mode 0700) if it is missing, and its two challenge subdirectories; with
/// `owner` (the user the server will switch to), gives them to that user; then checks that
/// a file can be made there. Errors name the directory. Used at start and by
/// `--check-config`, as the user the server starts as.
pub fn prepare(dir: &Path, owner: Option<(u32, u32)>) -> Result<(), String> {
    let shown = dir.display();
    let fail = |what: &str, e: std::io::Error| format!("acme.state_dir {shown}: {what}: {e}");
    if !dir.is_dir() {
        DirBuilder::new().mode(0o700).create(dir).map_err(|e| fail("cannot create it", e))?;
    }
    for sub in [dir.to_path_buf(), dir.join(HTTP01_DIR), dir.join(ALPN_DIR)] {
        if !sub.is_dir() {
            DirBuilder::new().mode(0o700).create(&sub).map_err(|e| fail("cannot create a subdirectory", e))?;
        }
        if let Some((uid, gid)) = owner {
            // The directory and what an earlier run as another user left in it.
            let files = fs::read_dir(&sub).map_err(|e| fail("cannot read it", e))?.flatten().map(|e| e.path());
            for p in std::iter::once(sub.clone()).chain(files) {
                std::os::unix::fs::chown(&p, Some(uid), Some(gid))
                    .map_err(|e| fail(&format!("cannot give {} to the user", p.display()), e))?;
            }
        }
    }
    let mode = fs::metadata(dir).map_err(|e| fail("cannot read it", e))?.permissions().mode();
    if mode & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(|e| fail("cannot make it 0700", e))?;
    }
    let probe = dir.join(format!(".probe{}", std::process::id()));
    write_atomic(&probe, b"").map_err(|e| fail("not writable", e))?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_no_other_file() {
        assert!(valid_token("LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"));
        for bad in
            ["", "short", "../../etc/passwd_padding", "a/bcdefghijklmnopq", "abcdefghijklmnop.", "abcdefghijklmnop%2f"]
        {
            assert!(!valid_token(bad), "{bad}");
        }
        assert!(!valid_token(&"a".repeat(257)));
    }

    #[test]
    fn prepare_makes_a_private_writable_directory_and_names_it_when_it_cannot() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("acme");
        prepare(&dir, None).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(dir.join(HTTP01_DIR).is_dir() && dir.join(ALPN_DIR).is_dir());
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        prepare(&dir, None).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let f = dir.join("x.crt");
        write_atomic(&f, b"one").unwrap();
        write_atomic(&f, b"two").unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"two");
        assert_eq!(fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 3, "no temporary file left");
        let e = prepare(&t.path().join("no/such/dir"), None).unwrap_err();
        assert!(e.contains("no/such/dir") && e.contains("cannot create"), "{e}");
    }
}
