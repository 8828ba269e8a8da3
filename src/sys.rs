//! Thin, safe wrappers over the few system calls that std and mio do not offer:
//! vectored sends with flags, `sendfile`, `pread` into spare capacity, `shutdown`, the send
//! queue's length, the descriptor limit and signalfd, a directory stream and `fstatat`; and
//! giving back memory that start-up touched once.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};

/// One `pread` of up to `n` bytes of `file` at `offset`, appended to `out` straight into its
/// spare capacity; the number read, 0 at the end of the file. `EINTR` is retried. Not zeroed
/// first: a staged copy fills 64 KiB per call, and on the page-load workload (images above
/// `max_file` sent over HTTP/2 in 16 KiB frames) zeroing the room before each read was 80 %
/// of the user-space instructions.
pub fn pread_append(file: &std::fs::File, out: &mut Vec<u8>, n: usize, offset: u64) -> io::Result<usize> {
    let at = libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    out.reserve(n);
    loop {
        let spare = out.spare_capacity_mut();
        // SAFETY: `spare` is the vector's allocated and unused capacity, at least `n` bytes
        // (reserved above; only what `pread` wrote is added to the length below), and `pread`
        // writes at most `n` bytes through the pointer, nothing else.
        let r = unsafe { libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), n, at) };
        match usize::try_from(r) {
            Ok(r) => {
                // SAFETY: `pread` initialised the first `r` bytes of the spare capacity, and
                // `r <= n` fits in it.
                unsafe { out.set_len(out.len() + r) };
                return Ok(r);
            }
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// Sends up to two buffers with one `sendmsg`. `more` sets `MSG_MORE` (more data follows:
/// let the kernel hold a partial segment). `MSG_NOSIGNAL` turns a reset into `EPIPE`.
pub fn send2(fd: RawFd, a: &[u8], b: &[u8], more: bool) -> io::Result<usize> {
    let mut iov = [
        libc::iovec { iov_base: a.as_ptr() as *mut libc::c_void, iov_len: a.len() },
        libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() },
    ];
    let n = if b.is_empty() { 1 } else { 2 };
    // SAFETY: `msghdr` is a plain C struct; all-zero is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n;
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    // SAFETY: `msg` points at `n` iovecs that describe live, readable slices borrowed for
    // the duration of the call; the kernel only reads from them.
    let r = unsafe { libc::sendmsg(fd, &msg, flags) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Sends these buffers, in order, with one `sendmsg` (at most `IOV_MAX` of them);
/// `MSG_NOSIGNAL` turns a reset into `EPIPE`.
pub fn sendv(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: `msghdr` is a plain C struct; all-zero is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is guaranteed ABI-compatible with `iovec` on Unix.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    // SAFETY: `msg` points at `bufs.len()` iovecs describing live, readable slices borrowed
    // for the duration of the call; the kernel only reads from them.
    let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Copies up to `count` bytes of `file` from `*offset` to the socket, advancing `*offset`.
/// Returns 0 only at end of file. Offsets are 64-bit on every target: glibc's `off_t` is
/// 32-bit on 32-bit boxes, so there the call is `sendfile64` (musl's `off_t` is always 64-bit).
pub fn sendfile(sock: RawFd, file: RawFd, offset: &mut u64, count: usize) -> io::Result<usize> {
    #[cfg(target_env = "gnu")]
    use libc::{off64_t as Off, sendfile64 as sendfile_at};
    #[cfg(not(target_env = "gnu"))]
    use libc::{off_t as Off, sendfile as sendfile_at};
    let mut off = Off::try_from(*offset).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: both descriptors are open for the duration of the call and `off` is a valid
    // pointer to a local; the kernel reads the file and writes the socket, touching no
    // user memory but `off`.
    let r = unsafe { sendfile_at(sock, file, &mut off, count) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    *offset = off as u64;
    Ok(r as usize)
}

/// Takes ownership of an inherited descriptor (from systemd's socket activation or an
/// upgrading parent) that must be a listening TCP socket: checked with `SO_ACCEPTCONN`,
/// marked close-on-exec and non-blocking. `Err` names what is wrong with it (the descriptor
/// is then left alone).
pub fn adopt_listener(fd: RawFd) -> io::Result<std::net::TcpListener> {
    let mut accepting: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `accepting` and `len` are valid out-pointers of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut accepting as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 || accepting == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("descriptor {fd} is not a listening socket")));
    }
    // SAFETY: the caller hands over a descriptor it was given for this process and that
    // nothing else here owns; it is a listening socket, checked above.
    let l = unsafe { std::net::TcpListener::from_raw_fd(fd) };
    // SAFETY: fcntl on a descriptor we own; FD_CLOEXEC has no memory effects.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    l.set_nonblocking(true)?;
    Ok(l)
}

/// A UDP socket handed over by an upgrading parent (`upgrade`): checked to be one, made
/// close-on-exec.
pub fn adopt_udp(fd: RawFd) -> io::Result<std::net::UdpSocket> {
    let mut kind: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `kind` and `len` are valid out-pointers of the sizes given.
    let r = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&mut kind as *mut libc::c_int).cast(), &mut len)
    };
    if r != 0 || kind != libc::SOCK_DGRAM {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("descriptor {fd} is not a UDP socket")));
    }
    // SAFETY: the caller hands over a descriptor it was given for this process and that
    // nothing else here owns; it is a datagram socket, checked above.
    let s = unsafe { std::net::UdpSocket::from_raw_fd(fd) };
    // SAFETY: fcntl on a descriptor we own; FD_CLOEXEC has no memory effects.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(s)
}

/// Half-closes the sending side: the peer reads EOF after what was sent.
pub fn shutdown_write(fd: RawFd) {
    // SAFETY: `fd` is an open socket owned by the caller; shutdown has no memory effects.
    // An error (the peer already gone) changes nothing for the caller.
    unsafe {
        libc::shutdown(fd, libc::SHUT_WR);
    }
}

/// Makes the coming close reset the connection (SO_LINGER with a zero timeout), so the
/// peer sees an error instead of an orderly end of data.
pub fn abort_on_close(fd: RawFd) {
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: `l` is a valid linger struct of the size given; setsockopt only reads it.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Bytes written to a TCP socket that the peer has not acknowledged yet (`SIOCOUTQ`), or
/// `None` if the kernel will not say. Written minus this is what the client has received.
pub fn unacked_bytes(fd: RawFd) -> Option<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one c_int through the pointer, which is valid.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if r == 0 {
        u64::try_from(n).ok()
    } else {
        None
    }
}

/// Sets TCP_DEFER_ACCEPT on a listening socket: a connection is only handed to `accept`
/// once its first data has arrived, or after about `secs` seconds without any. 0 turns it
/// off. It applies to connections whose handshake completes afterwards, so it can be changed
/// on a socket that is listening.
pub fn set_defer_accept(fd: RawFd, secs: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
    // SAFETY: `v` is a valid c_int of the size given; setsockopt only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The TCP_DEFER_ACCEPT time of a listening socket (0: off), as the kernel rounds it.
pub fn defer_accept(fd: RawFd) -> io::Result<u32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid and writable, and `len` is the size of `v`.
    let r = unsafe {
        libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, (&mut v as *mut libc::c_int).cast(), &mut len)
    };
    if r == 0 {
        Ok(u32::try_from(v).unwrap_or(0))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Raises the soft limit on open descriptors to the hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `rl` is a valid, writable rlimit struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if rl.rlim_cur < rl.rlim_max {
        rl.rlim_cur = rl.rlim_max;
        // SAFETY: `rl` is a valid rlimit struct with cur <= max.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(rl.rlim_cur)
}

/// A signalfd for the signals the server handles, which are blocked for normal delivery.
pub struct SignalFd {
    fd: OwnedFd,
}

impl SignalFd {
    pub fn new(signals: &[libc::c_int]) -> io::Result<SignalFd> {
        // SAFETY: `sigset_t` is plain data; sigemptyset initialises it before use.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t; the signal numbers are valid constants.
        unsafe {
            libc::sigemptyset(&mut set);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
        }
        // SAFETY: `set` is initialised; blocking these signals in this (the only) thread
        // routes them to the signalfd instead of default handlers.
        let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        // SAFETY: `set` is initialised; -1 asks for a new descriptor.
        let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by signalfd and is owned by nobody else.
        Ok(SignalFd { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// The next pending signal, if any.
    pub fn read(&self) -> Option<libc::c_int> {
        // SAFETY: signalfd_siginfo is plain data; all-zero is a valid value.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: `info` is a writable buffer of exactly `size` bytes.
        let r = unsafe { libc::read(self.fd.as_raw_fd(), (&mut info as *mut libc::signalfd_siginfo).cast(), size) };
        (r == size as isize).then_some(info.ssi_signo as libc::c_int)
    }
}

impl AsRawFd for SignalFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Makes writes to a closed socket return `EPIPE` instead of killing the process
/// (sendfile has no MSG_NOSIGNAL).
pub fn ignore_sigpipe() {
    // SAFETY: setting SIGPIPE's disposition to SIG_IGN is async-signal-safe and affects
    // only how the process reacts to broken pipes.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// An open `DIR*` stream, closed on drop (the directory listings' `readdir` loop).
pub struct DirStream {
    dir: std::ptr::NonNull<libc::DIR>,
}

impl DirStream {
    /// Opens a fresh stream on the directory `dir` refers to. A new open file description
    /// (`openat(dir, ".")`) rather than `dup`, so the caller's offset is never shared.
    pub fn open(dir: BorrowedFd<'_>) -> io::Result<DirStream> {
        // SAFETY: `dir` is a valid descriptor for the duration of the call and the path is a
        // NUL-terminated string literal.
        let fd = unsafe {
            libc::openat(dir.as_raw_fd(), c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by openat and is owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `owned` is a valid directory descriptor; on success the stream takes it over.
        let dir = unsafe { libc::fdopendir(owned.as_raw_fd()) };
        match std::ptr::NonNull::new(dir) {
            Some(dir) => {
                // The stream owns the descriptor now; closedir closes it.
                std::mem::forget(owned);
                Ok(DirStream { dir })
            }
            None => Err(io::Error::last_os_error()),
        }
    }

    /// The next name, `None` at the end of the directory.
    pub fn next_name(&mut self) -> io::Result<Option<&CStr>> {
        // readdir signals errors only through errno, so clear it first.
        // SAFETY: __errno_location returns a valid pointer to this thread's errno.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `self.dir` is an open stream used by this thread only (&mut self).
        let ent = unsafe { libc::readdir(self.dir.as_ptr()) };
        if ent.is_null() {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(0) | None => Ok(None),
                Some(_) => Err(err),
            };
        }
        // SAFETY: a non-null dirent stays valid until the next readdir or closedir on this
        // stream, both of which need `&mut self`, which the returned borrow prevents; d_name
        // is NUL-terminated.
        Ok(Some(unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }))
    }

    /// The stream's descriptor, valid as long as the stream is open.
    pub fn fd(&self) -> RawFd {
        // SAFETY: the stream is open.
        unsafe { libc::dirfd(self.dir.as_ptr()) }
    }
}

/// `fstatat` of `name` in the directory `dir`, following symlinks; `None` on any error.
pub fn stat_at(dir: RawFd, name: &CStr) -> Option<libc::stat> {
    // SAFETY: all-zero bytes are a valid `libc::stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated and `st` is writable for the duration of the call; an
    // invalid `dir` would only make the call fail.
    let r = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, 0) };
    (r == 0).then_some(st)
}

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: the stream is open and is closed exactly once, here.
        unsafe { libc::closedir(self.dir.as_ptr()) };
    }
}

/// Copies `src` into `dst` (up to the shorter length), for bytes of a shared file mapping
/// that a truncation can take away under the server. A plain read of such a page is SIGBUS;
/// here it ends the copy with `EFAULT` instead, the server lives, and the pages from the
/// first one found gone to the end of `src` are left unreadable (so every later use of them,
/// by the kernel or by this function, is `EFAULT` too; the caller drops the entry). Used by
/// TLS, HTTP/2 and the on-demand compressor, which must have the bytes in their own buffers.
///
/// How: a `memcpy` under a SIGBUS/SIGSEGV handler (see [`mapped`]) that knows the source
/// range this thread is copying. It costs what a `memcpy` costs; the kernel copy it replaces
/// (`process_vm_readv` on this process, which pins every page) was 20 times that.
pub fn copy_mapped(src: &[u8], dst: &mut [u8]) -> io::Result<usize> {
    let n = src.len().min(dst.len());
    if n == 0 {
        return Ok(0);
    }
    mapped::install()?;
    // SAFETY: `dst` is a live, exclusive borrow of at least `n` bytes, distinct from `src`.
    unsafe { mapped::copy(&src[..n], dst.as_mut_ptr()) }?;
    Ok(n)
}

/// [`copy_mapped`] onto the end of `out`, without zeroing the room first: `src` is copied
/// into `out`'s spare capacity, whose length then grows by `src.len()`. On an error `out`
/// keeps its length.
pub fn copy_mapped_append(src: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    mapped::install()?;
    out.reserve(src.len());
    let spare = out.spare_capacity_mut();
    // SAFETY: `spare` is the vector's allocated, unused capacity, at least `src.len()` bytes
    // (reserved above), which `src` (a shared borrow) cannot overlap; `copy` writes exactly
    // `src.len()` bytes through the pointer.
    unsafe { mapped::copy(src, spare.as_mut_ptr().cast()) }?;
    // SAFETY: `copy` succeeded: it initialised the first `src.len()` bytes of the spare
    // capacity, which holds them.
    unsafe { out.set_len(out.len() + src.len()) };
    Ok(())
}

/// The fault recovery behind [`copy_mapped`].
///
/// Each thread records the source range it is copying in [`GUARD`] (a `thread_local!` with a
/// `const` initializer and no destructor: on Linux that is a plain `#[thread_local]` access,
/// never lazily initialised, never registered for destruction, so it can neither allocate nor
/// fail, and it can be read from a signal handler running on that thread). Threads matter:
/// workers are processes (`fork`), but within one the event loop and the on-demand
/// compressor's thread may copy at the same time, each its own range.
///
/// The handler (SIGBUS for a page the file no longer has, SIGSEGV for one this module made
/// unreadable after an earlier fault) checks that `si_addr` lies in this thread's range; if
/// so, it maps an anonymous page of zeros over the faulting page (`MAP_FIXED`: the address
/// range stays reserved, inside the entry's own mapping, which `munmap`s all of it when
/// dropped), notes the fault and returns: the faulting load runs again and reads zeros, the
/// copy finishes, and [`copy`] turns the noted fault into `EFAULT` and makes those pages
/// `PROT_NONE`, so no later reader (a `sendmsg` of the same entry for a plain-HTTP response
/// in flight, another TLS response) takes the zeros for file content. Any other fault puts
/// back the handler found at installation (Rust's stack-overflow handler, or `SIG_DFL`) and
/// returns, so the fault happens again and is handled, or kills, as it would have been:
/// a real bug still crashes.
///
/// What the handler calls is safe there: `sigaction` and `raise` are async-signal-safe by
/// POSIX; `mmap` is not in POSIX's list, but in glibc and musl it is the bare system call
/// (no lock, no allocation; it only sets `errno`, which the handler saves and restores).
///
/// One window remains: between the handler's zero page and the copy's `PROT_NONE`, another
/// thread of the same process copying the same pages reads zeros without a fault. Only the
/// on-demand compressor runs beside the loop, and a compression of a file truncated meanwhile
/// is already a stale result (the loop checks the entry when the result comes back).
mod mapped {
    use std::io;
    use std::sync::atomic::{compiler_fence, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
    use std::sync::OnceLock;

    /// This thread's copy in progress: the source bytes `[start, end)`, and the lowest page
    /// found gone (`NONE` if none yet). Atomics because a signal handler writes them on the
    /// same thread (relaxed, with compiler fences around the copy, is what signal-safety
    /// needs; no other thread ever reads them).
    struct Guard {
        start: AtomicUsize,
        end: AtomicUsize,
        fault: AtomicUsize,
    }

    const NONE: usize = usize::MAX;

    thread_local! {
        static GUARD: Guard = const {
            Guard { start: AtomicUsize::new(0), end: AtomicUsize::new(0), fault: AtomicUsize::new(NONE) }
        };
    }

    /// What `install` found and the page size; read by the handler (a `OnceLock` read is one
    /// acquire load once set, and it is set before the handler is installed).
    struct Installed {
        page: usize,
        old_bus: libc::sigaction,
        old_segv: libc::sigaction,
    }

    static INSTALLED: OnceLock<io::Result<Installed>> = OnceLock::new();

    /// Installs the handler, once per process (a forked worker inherits it).
    pub(super) fn install() -> io::Result<()> {
        match INSTALLED.get_or_init(install_now) {
            Ok(_) => Ok(()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        }
    }

    fn install_now() -> io::Result<Installed> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = usize::try_from(page).ok().filter(|p| p.is_power_of_two()).ok_or_else(io::Error::last_os_error)?;
        let old = |sig| {
            // SAFETY: `sigaction` is plain data, for which all zeroes is a valid value.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a null new action only reads the current one into `old`, which is valid
            // and writable.
            match unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } {
                0 => Ok(old),
                _ => Err(io::Error::last_os_error()),
            }
        };
        let installed = Installed { page, old_bus: old(libc::SIGBUS)?, old_segv: old(libc::SIGSEGV)? };
        // The handler is live before `INSTALLED` is set (when this returns); a fault in between
        // finds it empty and is treated as not ours. No fault of a copy can be: copies start
        // after `install` has returned.
        // SAFETY: `sigaction` is plain data; the mask is emptied before use.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = on_fault as *const () as libc::sighandler_t;
        // SA_ONSTACK: a stack overflow (not ours) must still reach Rust's handler, which needs
        // the alternate stack Rust gives every thread.
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `act.sa_mask` is a valid sigset_t.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        for sig in [libc::SIGBUS, libc::SIGSEGV] {
            // SAFETY: `act` is a fully initialised sigaction naming a handler of the SA_SIGINFO
            // signature; the old action is not wanted (it was read above).
            if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(installed)
    }

    extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
        // SAFETY: errno is this thread's; the handler must leave it as it found it.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler; for SIGBUS and
        // SIGSEGV `si_addr` is the faulting address (for a signal sent by kill, meaningless,
        // and such a signal has `si_code <= 0`).
        let (addr, from_kernel) = unsafe { ((*info).si_addr() as usize, (*info).si_code > 0) };
        let installed = INSTALLED.get().and_then(|r| r.as_ref().ok());
        let ours = from_kernel
            && installed.is_some_and(|inst| {
                GUARD.with(|g| {
                    if addr < g.start.load(Relaxed) || addr >= g.end.load(Relaxed) {
                        return false;
                    }
                    let page = addr & !(inst.page - 1);
                    // SAFETY: `page` is a page of the mapping this thread is copying from (it
                    // is in the recorded source range, which lies inside one live mapping
                    // borrowed by `copy`); replacing it by an anonymous page keeps the range
                    // reserved and changes no other memory. Nothing in this process holds a
                    // `&mut` to mapped bytes, and the mapping is dropped as a whole.
                    let p = unsafe {
                        libc::mmap(
                            page as *mut libc::c_void,
                            inst.page,
                            libc::PROT_READ,
                            libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                            -1,
                            0,
                        )
                    };
                    if p == libc::MAP_FAILED {
                        return false;
                    }
                    if page < g.fault.load(Relaxed) {
                        g.fault.store(page, Relaxed);
                    }
                    true
                })
            });
        if !ours {
            let old = installed.map(|inst| if sig == libc::SIGBUS { inst.old_bus } else { inst.old_segv });
            // SAFETY: `sigaction` and `raise` are async-signal-safe; the action put back is
            // the one found at installation (or SIG_DFL), so the fault, which happens again
            // when this returns, or the re-raised signal, is handled as it would have been.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &old.unwrap_or(dfl), std::ptr::null_mut());
                if !from_kernel {
                    libc::raise(sig);
                }
            }
        }
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }

    /// Copies `src` to `dst` (`src.len()` bytes) under the handler. `Err(EFAULT)`: a page
    /// of `src` was gone; `dst` then holds zeros in its place, and those pages, to the end of
    /// `src`, are made unreadable.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `src.len()` bytes (initialised or not), and the
    /// range must not overlap `src`.
    pub(super) unsafe fn copy(src: &[u8], dst: *mut u8) -> io::Result<()> {
        let page = match INSTALLED.get() {
            Some(Ok(inst)) => inst.page,
            _ => return Err(io::Error::from_raw_os_error(libc::EFAULT)),
        };
        let start = src.as_ptr() as usize;
        let end = start + src.len();
        let fault = GUARD.with(|g| {
            g.fault.store(NONE, Relaxed);
            g.start.store(start, Relaxed);
            g.end.store(end, Relaxed);
            // The range is recorded before the first load of `src`, and cleared after the
            // last: signal fences, since only this thread's handler reads it.
            compiler_fence(SeqCst);
            // SAFETY: `src` is a live borrow of `src.len()` bytes, and `dst` is valid for
            // that many writes and does not overlap it (the caller's contract). A load of
            // `src` that faults is made to succeed by the handler (zeros), so the copy always
            // completes.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
            compiler_fence(SeqCst);
            g.start.store(0, Relaxed);
            g.end.store(0, Relaxed);
            g.fault.load(Relaxed)
        });
        if fault == NONE {
            return Ok(());
        }
        let to = end.div_ceil(page) * page;
        // SAFETY: `[fault, to)` is whole pages of the mapping `src` borrows: `fault` is a page
        // boundary at or after the mapping's start (mappings are page-aligned) and `to` the end
        // of the page holding `src`'s last byte, which the mapping covers. An anonymous
        // PROT_NONE mapping over them keeps the range reserved until the mapping is dropped,
        // and makes any later access EFAULT (the kernel) or a fault this handler turns into
        // EFAULT (a copy).
        unsafe {
            libc::mmap(
                fault as *mut libc::c_void,
                to - fault,
                libc::PROT_NONE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
        }
        Err(io::Error::from_raw_os_error(libc::EFAULT))
    }
}

#[cfg(test)]
mod copy_mapped_tests {
    use super::*;
    use std::io::Write;

    fn page() -> usize {
        // SAFETY: sysconf has no preconditions.
        usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap()
    }

    /// A temporary file of `bytes`, and a shared read-only mapping of it (as the cache makes).
    fn mapped(bytes: &[u8]) -> (tempfile::NamedTempFile, memmap2::Mmap) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        // SAFETY: the file is this test's own; it is only read through `copy_mapped` once it
        // may shrink.
        let map = unsafe { memmap2::Mmap::map(f.as_file()).unwrap() };
        (f, map)
    }

    #[test]
    fn copy_mapped_copies_the_bytes() {
        let bytes: Vec<u8> = (0..3 * page() + 5).map(|i| (i * 7 % 251) as u8).collect();
        let (_f, map) = mapped(&bytes);
        let mut dst = vec![0u8; bytes.len() + 10];
        assert_eq!(copy_mapped(&map, &mut dst).unwrap(), bytes.len());
        assert!(dst[..bytes.len()] == bytes[..]);
        let mut short = vec![0u8; 100];
        assert_eq!(copy_mapped(&map[page() - 50..], &mut short).unwrap(), 100);
        assert!(short[..] == bytes[page() - 50..page() + 50]);
        assert_eq!(copy_mapped(&map[..0], &mut short).unwrap(), 0);
    }

    #[test]
    fn copy_mapped_past_a_truncation_is_efault_and_the_process_lives() {
        let p = page();
        let (f, map) = mapped(&vec![0xab; 4 * p]);
        f.as_file().set_len(p as u64 + 100).unwrap();
        let mut dst = vec![0u8; 4 * p];
        let e = copy_mapped(&map, &mut dst).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
        // What the file still has copies as before, the page holding the new end included.
        assert_eq!(copy_mapped(&map[..p + 100], &mut dst).unwrap(), p + 100);
        assert!(dst[..p + 100].iter().all(|&b| b == 0xab));
        // The pages found gone stay unreadable: a copy again (now a SIGSEGV, not a SIGBUS),
        // and the kernel's own reads (a plain-HTTP `sendmsg` of the same entry).
        let e = copy_mapped(&map[3 * p..], &mut dst).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = send2(a.as_raw_fd(), &map[2 * p..2 * p + 10], &[], false).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
    }

    #[test]
    fn copy_mapped_append_adds_the_bytes_or_nothing() {
        let p = page();
        let bytes: Vec<u8> = (0..3 * p).map(|i| (i * 7 % 251) as u8).collect();
        let (f, map) = mapped(&bytes);
        let mut out = b"head".to_vec();
        copy_mapped_append(&map[10..2 * p], &mut out).unwrap();
        assert_eq!(out.len(), 4 + 2 * p - 10);
        assert!(out[..4] == *b"head" && out[4..] == bytes[10..2 * p]);
        copy_mapped_append(&map[..0], &mut out).unwrap();
        assert_eq!(out.len(), 4 + 2 * p - 10);
        // Past a truncation: EFAULT, and `out` keeps its length.
        f.as_file().set_len(p as u64).unwrap();
        let e = copy_mapped_append(&map[p / 2..], &mut out).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
        assert_eq!(out.len(), 4 + 2 * p - 10);
    }

    #[test]
    fn a_fault_outside_a_copy_still_kills() {
        let p = page();
        let (f, map) = mapped(&vec![1; 2 * p]);
        let mut dst = vec![0u8; 2 * p];
        copy_mapped(&map, &mut dst).unwrap(); // the handler is installed
        f.as_file().set_len(0).unwrap();
        // SAFETY: the child only reads the mapping and exits, touching no lock or allocator.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: deliberately not: a read of a page the file no longer has, outside any
            // copy, which must kill this child with SIGBUS.
            unsafe {
                std::ptr::read_volatile(map.as_ptr().add(p));
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid c_int.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGBUS, "child status {status:#x}");
    }
}

/// The main thread's stack mapping `[start, end)`, as [`note_main_stack`] found it.
static MAIN_STACK: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Notes where the main thread's stack is mapped, for [`release_startup_memory`]. Called
/// first thing in `main`, while `/proc` is in reach (before any chroot). The mapping only
/// grows downwards from there, so the range noted stays inside it.
pub fn note_main_stack() {
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return };
    for line in maps.lines() {
        let range = line.split(' ').next().unwrap_or("");
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
        if a <= here && here < b {
            MAIN_STACK[0].store(a, Ordering::Relaxed);
            MAIN_STACK[1].store(b, Ordering::Relaxed);
            return;
        }
    }
}

/// Gives back to the kernel what start-up touched once and the event loop does not use:
/// the main thread's stack below the caller's frame (the configuration's deserializers run
/// about 45 kB deep, the loop a few kB), and with glibc the free pages of the heap
/// (`malloc_trim`). The pages are freed, not hidden: a deeper call later gets fresh zeroed
/// pages, as a new thread's stack would. Called before the event loop starts and after a
/// reload; on any thread but the main one (whose stack was noted) the stack is left alone.
#[inline(never)]
pub fn release_startup_memory() {
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize;
    let (start, end) = (MAIN_STACK[0].load(Ordering::Relaxed), MAIN_STACK[1].load(Ordering::Relaxed));
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(4096);
    if start <= here && here < end {
        // Two pages below this frame: clear of its red zone and of anything it spills.
        let top = here.saturating_sub(2 * page) & !(page - 1);
        if top > start {
            // SAFETY: [start, top) lies in the main thread's stack mapping (noted at start; a
            // stack mapping never shrinks) and strictly below the frame of this function,
            // which runs on that thread: no live data is there. MADV_DONTNEED on private
            // anonymous memory only makes the next touch read zeros.
            unsafe {
                libc::madvise(start as *mut libc::c_void, top - start, libc::MADV_DONTNEED);
            }
        }
    }
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free heap memory to the kernel; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::unix::net::UnixStream;

    /// Offsets past 4 GiB go through unchanged (a 32-bit box with glibc's 32-bit `off_t` would
    /// wrap them without `sendfile64`): a sparse file of 5 GiB with a marker after 4 GiB.
    #[test]
    fn sendfile_past_4_gib() {
        let mut file = tempfile::tempfile().unwrap();
        let at = (1u64 << 32) + 4097;
        file.set_len(5 << 30).unwrap();
        file.seek(SeekFrom::Start(at)).unwrap();
        file.write_all(b"past 4 GiB").unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut offset = at;
        let n = sendfile(a.as_raw_fd(), file.as_raw_fd(), &mut offset, 10).unwrap();
        assert_eq!(n, 10);
        assert_eq!(offset, at + 10, "the offset advances by what was sent, in 64 bits");
        let mut got = [0u8; 10];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"past 4 GiB");
        let mut end = (5u64 << 30) - 3;
        assert_eq!(sendfile(a.as_raw_fd(), file.as_raw_fd(), &mut end, 100).unwrap(), 3, "to the end only");
        assert_eq!(sendfile(a.as_raw_fd(), file.as_raw_fd(), &mut end, 100).unwrap(), 0, "0 at end of file");
    }
}
