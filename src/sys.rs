//! Thin, safe wrappers over the few system calls that std and mio do not offer:
//! vectored sends with flags, `sendfile`, `shutdown`, the send queue's length, the
//! descriptor limit and signalfd; and giving back memory that start-up touched once.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// Sends these buffers, in order, with one `sendmsg` (at most `IOV_MAX` of them). `more`
/// sets `MSG_MORE`; `MSG_NOSIGNAL` turns a reset into `EPIPE`.
pub fn sendv(fd: RawFd, bufs: &[io::IoSlice<'_>], more: bool) -> io::Result<usize> {
    // SAFETY: `msghdr` is a plain C struct; all-zero is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is guaranteed ABI-compatible with `iovec` on Unix.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    // SAFETY: `msg` points at `bufs.len()` iovecs describing live, readable slices borrowed
    // for the duration of the call; the kernel only reads from them.
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    let r = unsafe { libc::sendmsg(fd, &msg, flags) };
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
/// once its first data has arrived, or after about `secs` seconds without any.
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

/// Copies `src` into `dst` (up to the shorter length) through the kernel
/// (`process_vm_readv` on this process), for bytes of a shared file mapping that user space
/// must not touch: a page that a truncation took away is `EFAULT` here, where a plain read
/// would be SIGBUS and kill the server. Used by TLS, which must encrypt the bytes itself.
pub fn copy_mapped(src: &[u8], dst: &mut [u8]) -> io::Result<usize> {
    copy_mapped_in(ThisProcess::now(), src, dst)
}

/// This process's id, for [`copy_mapped_in`]: taken once (a `getpid`, a system call of its own
/// per copy otherwise) by state that never outlives the process that took it, such as a
/// connection's (connections are made after any fork, in the process that serves them).
#[derive(Clone, Copy)]
pub struct ThisProcess(libc::pid_t);

impl ThisProcess {
    pub fn now() -> ThisProcess {
        // SAFETY: getpid has no preconditions.
        ThisProcess(unsafe { libc::getpid() })
    }
}

/// [`copy_mapped`] with the process id already at hand.
pub fn copy_mapped_in(me: ThisProcess, src: &[u8], dst: &mut [u8]) -> io::Result<usize> {
    let n = src.len().min(dst.len());
    let local = libc::iovec { iov_base: dst.as_mut_ptr().cast(), iov_len: n };
    let remote = libc::iovec { iov_base: src.as_ptr() as *mut libc::c_void, iov_len: n };
    // SAFETY: `local` describes `n` writable bytes of `dst`, borrowed mutably for the call;
    // `remote` describes `n` bytes of `src` in this same process, which the kernel only
    // reads (faults there become EFAULT or a short count, not a signal).
    let r = unsafe { libc::process_vm_readv(me.0, &local, 1, &remote, 1, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
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
