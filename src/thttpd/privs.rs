//! Process privileges, in thttpd's start-up order: look the user up, bind (the caller),
//! daemonise, write the pid file, chroot, then drop root.
//!
//! thttpd's sequence (and the caller's): `lookup_user` while `/etc/passwd` is still
//! reachable → bind → [`daemonize`] unless `-D` → [`write_pidfile`] (the daemon's pid) →
//! [`chroot`] with `-r` → [`switch_user`] when [`is_root`] → serve. Started as root without
//! chroot, the caller logs thttpd's warning ("started as root without requesting chroot(),
//! warning only").
//!
//! All functions are thin wrappers over the system calls with errors that say what failed;
//! they are meant for start-up, when the process has one thread.
//!
//! **Files opened by path while root.** The log files and the pid file often live in a
//! directory that belongs to the service user (logrotate and the user switch need that), so
//! whatever is at their path may have been put there by that user: a symbolic link to
//! `/etc/shadow`, a hard link to it, a FIFO. [`open_for_writing`] is the one way the server
//! opens such a file: never through a symbolic link (`O_NOFOLLOW`), only a regular file with
//! a single link, never blocking (`O_NONBLOCK`, so a FIFO cannot hang the start), and it says
//! whether it created the file — only a file it created may be given to the service user
//! (thttpd `fchown`s whatever it opened, which hands any root-owned file to that user).
//! Configuration files are read, not written, so [`read_config_file`] follows symbolic links
//! (packaged configurations are often links) but refuses a FIFO or a socket and reads a
//! bounded amount.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn context(what: String, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn cstring(what: &str, bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{what} contains a NUL byte")))
}

/// Looks up a user with `getpwnam_r` → `(uid, gid)`. An unknown user is a `NotFound` error
/// naming it (thttpd: "unknown user - 'name'").
pub fn lookup_user(name: &str) -> io::Result<(u32, u32)> {
    let cname = cstring(&format!("user name '{name}'"), name.as_bytes())?;
    let mut buf: Vec<libc::c_char> = vec![0; 1024];
    loop {
        // SAFETY: `passwd` is plain old data, valid when zeroed; getpwnam_r only writes into
        // it, into `buf` (whose length we pass) and into `result`.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: all pointers are valid for the duration of the call; `cname` is
        // NUL-terminated; `buf.len()` is the buffer's true size.
        let rc = unsafe { libc::getpwnam_r(cname.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 {
            return Err(context(format!("looking up user '{name}'"), io::Error::from_raw_os_error(rc)));
        }
        if result.is_null() {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("unknown user - '{name}'")));
        }
        return Ok((pwd.pw_uid, pwd.pw_gid));
    }
}

/// `chroot(dir)` then `chdir("/")`. Needs root. Errors name the directory.
pub fn chroot(dir: &Path) -> io::Result<()> {
    let cdir = cstring(&format!("chroot directory {}", dir.display()), dir.as_os_str().as_bytes())?;
    // SAFETY: `cdir` is a valid NUL-terminated path.
    if unsafe { libc::chroot(cdir.as_ptr()) } != 0 {
        return Err(context(format!("chroot {}", dir.display()), io::Error::last_os_error()));
    }
    std::env::set_current_dir("/").map_err(|e| context(format!("chdir / after chroot {}", dir.display()), e))
}

/// Drops root for good: `setgroups(0)`, `initgroups(name, gid)`, `setgid(gid)`,
/// `setuid(uid)` — in that order — then checks the result (real and effective ids are the
/// target ones, and for a non-root target, root cannot be regained).
///
/// As in thttpd, an `initgroups` failure is not fatal (inside a chroot `/etc/group` is often
/// missing): the process then keeps no supplementary groups at all.
pub fn switch_user(name: &str, uid: u32, gid: u32) -> io::Result<()> {
    let cname = cstring(&format!("user name '{name}'"), name.as_bytes())?;
    // SAFETY: setgroups with a count of 0 does not read the (null) list.
    if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
        return Err(context("setgroups".into(), io::Error::last_os_error()));
    }
    // SAFETY: `cname` is NUL-terminated; initgroups only reads it.
    if unsafe { libc::initgroups(cname.as_ptr(), gid) } != 0 {
        // Not fatal (thttpd: "initgroups - %m" warning): the groups were cleared above.
        // SAFETY: as above.
        unsafe { libc::setgroups(0, std::ptr::null()) };
    }
    // SAFETY: plain system calls on integer ids.
    if unsafe { libc::setgid(gid) } != 0 {
        return Err(context(format!("setgid {gid}"), io::Error::last_os_error()));
    }
    // SAFETY: as above.
    if unsafe { libc::setuid(uid) } != 0 {
        return Err(context(format!("setuid {uid} ({name})"), io::Error::last_os_error()));
    }
    // SAFETY: these getters cannot fail.
    let (ruid, euid, rgid, egid) = unsafe { (libc::getuid(), libc::geteuid(), libc::getgid(), libc::getegid()) };
    if (ruid, euid, rgid, egid) != (uid, uid, gid, gid) {
        return Err(io::Error::other(format!(
            "switching to user '{name}' left uid {ruid}/{euid} gid {rgid}/{egid}, expected {uid}/{gid}"
        )));
    }
    // SAFETY: a plain system call; it must fail now that root is gone.
    if uid != 0 && unsafe { libc::setuid(0) } == 0 {
        return Err(io::Error::other(format!("switched to user '{name}' but root could be regained")));
    }
    Ok(())
}

/// Classic daemonising, as thttpd does it: `fork()`, the parent exits 0 at once, the child
/// becomes a session leader (`setsid`), keeps its working directory, and gets stdin, stderr
/// and — unless `keep_stdout` (logging to `-`) — stdout pointed at `/dev/null`.
///
/// Call it before any thread is started: only the calling thread survives `fork`. Write the
/// pid file afterwards, so it holds the daemon's pid.
pub fn daemonize(keep_stdout: bool) -> io::Result<()> {
    // Open first so an error is reported by the foreground process.
    let devnull = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| context("opening /dev/null".into(), e))?;
    // SAFETY: the process is single-threaded at start-up (documented requirement), so the
    // child is a complete copy; the parent only calls `_exit`.
    match unsafe { libc::fork() } {
        -1 => return Err(context("fork".into(), io::Error::last_os_error())),
        0 => {}
        // SAFETY: `_exit` ends the parent at once without running destructors or flushing
        // stdio buffers that the child also owns.
        _ => unsafe { libc::_exit(0) },
    }
    // SAFETY: a plain system call in the child, which is not a process-group leader.
    if unsafe { libc::setsid() } == -1 {
        return Err(context("setsid".into(), io::Error::last_os_error()));
    }
    use std::os::fd::AsRawFd;
    let fd = devnull.as_raw_fd();
    let mut targets = vec![libc::STDIN_FILENO, libc::STDERR_FILENO];
    if !keep_stdout {
        targets.push(libc::STDOUT_FILENO);
    }
    for target in targets {
        // SAFETY: `fd` is an open descriptor we own; dup2 atomically replaces `target`.
        if unsafe { libc::dup2(fd, target) } == -1 {
            return Err(context(format!("redirecting fd {target} to /dev/null"), io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// A file opened by [`open_for_writing`].
pub struct Opened {
    pub file: File,
    /// This call created the file (so it may be given to the service user).
    pub created: bool,
}

/// Opens `path` for writing (appending if `append`), creating it with `mode` if it does not
/// exist, safely when the directory may belong to someone else (see the module docs): a
/// symbolic link, a FIFO, a device, a directory, or a file with more than one hard link is
/// refused with an error that says so. Errors do not name the path; callers add it.
pub fn open_for_writing(path: &Path, append: bool, mode: u32) -> io::Result<Opened> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK;
    // Create it, or else open what is there; if it vanished in between, try again.
    for _ in 0..3 {
        let created = std::fs::OpenOptions::new()
            .write(true)
            .append(append)
            .create_new(true)
            .mode(mode)
            .custom_flags(flags)
            .open(path);
        match created {
            Ok(file) => return Ok(Opened { file, created: true }),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        match open_existing(path, append) {
            Ok(file) => return Ok(Opened { file, created: false }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("it keeps appearing and disappearing; refusing to open it"))
}

/// Opens an existing file for writing under the rules of [`open_for_writing`], without
/// creating it (`NotFound` if it is not there).
pub fn open_existing(path: &Path, append: bool) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .append(append)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(refusal)?;
    check_regular(&file)?;
    Ok(file)
}

/// Turns the errors `O_NOFOLLOW` and `O_NONBLOCK` give for what we refuse into messages.
fn refusal(e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) => io::Error::other("it is a symbolic link; refusing to follow it"),
        // A FIFO nobody reads.
        Some(libc::ENXIO) => io::Error::other("it is not a regular file (a FIFO or a socket); refusing to use it"),
        Some(libc::EISDIR) => io::Error::other("it is a directory"),
        _ => e,
    }
}

/// Refuses anything but a regular file with one link (a hard link planted beside a file of
/// root's would otherwise be written to as root).
fn check_regular(file: &File) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    if !m.file_type().is_file() {
        return Err(io::Error::other("it is not a regular file; refusing to use it"));
    }
    if m.nlink() > 1 {
        return Err(io::Error::other(format!(
            "it has {} hard links; refusing to write to a file that is also elsewhere",
            m.nlink()
        )));
    }
    Ok(())
}

/// The largest configuration file read.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Reads a configuration file (TOML, thttpd `-C`, throttles): through symbolic links, but
/// never a FIFO or a socket (either would hang the start), and at most
/// [`MAX_CONFIG_BYTES`] (a device such as `/dev/zero` never ends). `/dev/null`, which init
/// scripts pass as an empty `-C` file, reads as empty.
pub fn read_config_file(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let t = f.metadata()?.file_type();
    if t.is_fifo() || t.is_socket() {
        return Err(io::Error::other("not a regular file (a FIFO or a socket)"));
    }
    let mut out = Vec::new();
    f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut out)?;
    if out.len() as u64 > MAX_CONFIG_BYTES {
        return Err(io::Error::other(format!("larger than {} MiB", MAX_CONFIG_BYTES >> 20)));
    }
    Ok(out)
}

/// Writes `"<pid>\n"` to `path` (created with mode 0644, or emptied), as thttpd's `-i`;
/// opened with [`open_for_writing`], so a link planted at the path is refused, not followed.
pub fn write_pidfile(path: &Path) -> io::Result<()> {
    use std::io::Write;
    let what = || format!("pid file {}", path.display());
    let Opened { mut file, .. } = open_for_writing(path, false, 0o644).map_err(|e| context(what(), e))?;
    // Emptied only now that it is known to be ours to write.
    file.set_len(0).map_err(|e| context(what(), e))?;
    writeln!(file, "{}", std::process::id()).map_err(|e| context(what(), e))
}

/// True if the effective user is root (the privilege that matters for binding low ports,
/// chroot and switching users).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    /// Environment variable that makes a `child_*` test do its privileged work; without it the
    /// child tests do nothing, so they pass when run normally.
    const CHILD: &str = "FERROHTTPD_PRIVS_TEST_CHILD";

    /// Runs one `child_*` test of this module in a fresh process (the test binary itself),
    /// with `CHILD` set to `arg`; returns whether it exited successfully and its stdout.
    fn run_child(test: &str, arg: &str) -> (bool, String) {
        let exe = std::env::current_exe().unwrap();
        let name = format!("{}::{test}", module_path!().split_once("::").map_or(module_path!(), |(_, rest)| rest));
        let out = Command::new(exe)
            .args([name.as_str(), "--exact", "--test-threads=1", "--nocapture"])
            .env(CHILD, arg)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    }

    #[test]
    fn pidfile_holds_our_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("thttpd.pid");
        std::fs::write(&path, "999999999 stale and longer\n").unwrap();
        write_pidfile(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{}\n", std::process::id()));
        let e = write_pidfile(&dir.path().join("missing/x.pid")).unwrap_err();
        assert!(e.to_string().contains("missing/x.pid"), "{e}");
    }

    #[test]
    fn users() {
        assert_eq!(lookup_user("root").unwrap(), (0, 0));
        let (uid, _) = lookup_user("nobody").unwrap();
        assert_ne!(uid, 0);
        let e = lookup_user("no-such-user-ferrohttpd").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("no-such-user-ferrohttpd"));
        assert_eq!(lookup_user("a\0b").unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn root_check() {
        // SAFETY: geteuid cannot fail.
        assert_eq!(is_root(), unsafe { libc::geteuid() } == 0);
    }

    #[test]
    fn chroot_and_switch_user_in_a_child() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("marker"), "inside").unwrap();
        let (ok, stdout) = run_child("child_chroot_then_drop", dir.path().to_str().unwrap());
        assert!(ok && stdout.contains("1 passed"), "child failed or ran no test: {stdout}");
        // The parent keeps its root and its filesystem view.
        assert!(is_root());
        assert!(Path::new("/proc/self").exists());
    }

    #[test]
    fn child_chroot_then_drop() {
        let Ok(dir) = std::env::var(CHILD) else { return };
        let (uid, gid) = lookup_user("nobody").unwrap();
        chroot(Path::new(&dir)).unwrap();
        assert_eq!(std::env::current_dir().unwrap(), Path::new("/"));
        assert_eq!(std::fs::read_to_string("/marker").unwrap(), "inside");
        switch_user("nobody", uid, gid).unwrap();
        assert!(!is_root());
        // SAFETY: plain getters and a system call that must now fail.
        unsafe {
            assert_eq!((libc::getuid(), libc::getgid()), (uid, gid));
            assert_eq!(libc::setuid(0), -1);
        }
        assert!(chroot(Path::new("/")).is_err(), "chroot needs root");
    }

    #[test]
    fn chroot_errors_name_the_directory() {
        let e = chroot(Path::new("/nonexistent/ferrohttpd-root")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ferrohttpd-root"), "{e}");
    }

    #[test]
    fn daemonize_in_a_child() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("d.pid");
        let started = Instant::now();
        // The intermediate process exits 0 inside daemonize(), before the harness reports.
        let (ok, stdout) = run_child("child_daemonize", pidfile.to_str().unwrap());
        assert!(ok, "{stdout}");
        // The daemon (the grandchild) writes its pid and session id.
        let text = loop {
            if let Ok(t) = std::fs::read_to_string(&pidfile) {
                if t.ends_with('\n') && t.contains(' ') {
                    break t;
                }
            }
            assert!(started.elapsed() < Duration::from_secs(20), "daemon never wrote its pid file");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut parts = text.split_whitespace();
        let pid: i32 = parts.next().unwrap().parse().unwrap();
        let sid: i32 = parts.next().unwrap().parse().unwrap();
        assert_eq!(pid, sid, "the daemon leads its own session");
        assert_ne!(pid as u32, std::process::id());
    }

    #[test]
    fn child_daemonize() {
        let Ok(pidfile) = std::env::var(CHILD) else { return };
        daemonize(false).unwrap();
        // Now in the daemon: stdout/stderr are /dev/null; report through the file.
        // SAFETY: getsid(0) queries the calling process.
        let sid = unsafe { libc::getsid(0) };
        let tmp = format!("{pidfile}.tmp");
        std::fs::write(&tmp, format!("{} {sid}\n", std::process::id())).unwrap();
        std::fs::rename(&tmp, &pidfile).unwrap();
    }
}
