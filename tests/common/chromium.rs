//! Headless Chromium for the browser tests (Debian's `chromium`): where it is, and one run
//! of it with a fresh profile and a deadline, killed by PID past it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where chromium is, or None (with the reason printed) when the test cannot run here.
pub fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|c| c.is_file()))
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is not installed, and CI must run the browser test (apt-get install chromium)"
        );
        eprintln!("note: chromium is not installed: the browser test is skipped (apt-get install chromium)");
    }
    found
}

/// Runs chromium headless with `args` and a fresh profile; its stdout. Killed past 60 s.
pub fn run_chromium(bin: &Path, scratch: &Path, args: &[&str]) -> Vec<u8> {
    run_chromium_env(bin, scratch, &[], args)
}

/// [`run_chromium`] with `env` set for the browser (e.g. a `HOME` with its own NSS database).
pub fn run_chromium_env(bin: &Path, scratch: &Path, env: &[(&str, &Path)], args: &[&str]) -> Vec<u8> {
    let profile = tempfile::tempdir_in(scratch).unwrap();
    let mut cmd = Command::new(bin);
    cmd.envs(env.iter().copied());
    cmd.args(["--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars", "--mute-audio"])
        .args(["--disable-extensions", "--disable-background-networking", "--disable-sync"])
        .arg("--force-color-profile=srgb")
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // Chromium's sandbox refuses to run as root.
        cmd.arg("--no-sandbox");
    }
    let mut child = cmd.spawn().expect("start chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium {args:?} exited with {status}");
            break;
        }
        if Instant::now() > deadline {
            // Kills the one process started here, by its PID.
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    reader.join().unwrap()
}
