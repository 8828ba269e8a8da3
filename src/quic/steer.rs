//! Every QUIC packet reaches the process and worker that own its connection, by its
//! connection ID: with `workers = N` also after the client's address or port changed (NAT
//! rebinding, migration), when the kernel's hash of address and port would pick another
//! worker; and through a binary upgrade (`SIGUSR2`, `upgrade`), where the old process's
//! connections finish on it while new ones go to the new process (Linux).
//!
//! * **Sockets.** The process that supervises (the parent of the workers, or the single
//!   process) binds `2 × N` UDP sockets per address, in number order: the kernel numbers the
//!   sockets of a reuseport group in the order they joined it. They are two halves, used in
//!   turn by successive processes: the first process's worker i reads socket i, the next
//!   one's (after an upgrade) socket N + i, the one after that socket i again. The sockets
//!   are kept for the life of the process ([`GROUP`]) and handed over by an upgrade
//!   ([`handed`], [`stash`], [`prepare`]): a worker restarted after it died gets the very
//!   same socket, and so the same number, and the numbers never change (a socket leaves its
//!   group, and the last one takes its place, only when every process has closed it).
//!   [`adopt`] hands worker i its sockets in the forked child; `Quic::bind` takes them.
//! * **Connection IDs** ([`Gen`]): 8 bytes. The first four, read as a big-endian `w`, carry
//!   the socket's number (which says the half, so the process, and the worker) in the top
//!   byte of `w × K mod 2³²`, where `K` is an odd secret made at the first start and handed
//!   over with the sockets (so every worker, restarted worker and upgraded process has it,
//!   and the old process's IDs stay readable); the rest of that product and the other four
//!   bytes are random. An observer without `K` sees random bytes and cannot read the number
//!   off a fixed byte, as it could from nginx's (`quic_bpf`), whose IDs begin with the
//!   socket's cookie. It is obfuscation, not encryption (RFC 9000 §5.1 asks that an observer
//!   not link IDs; QUIC-LB's encrypted IDs need AES, which a classic BPF program cannot
//!   run): `K` is 31 bits, which enough IDs known to be of one worker would let one search
//!   for.
//! * **The program** ([`program`]): a classic BPF program attached to each group with
//!   `SO_ATTACH_REUSEPORT_CBPF`; it sees the UDP payload at offset 0 (the kernel pulls the
//!   UDP header off before running it, `run_bpf_filter` in `net/core/sock_reuseport.c`) and
//!   returns the socket number. A short header, or a Handshake packet with an 8-byte ID,
//!   goes by its destination ID (the four bytes after the first one, or after the ID's
//!   length at offset 5) to that socket, in either half: the old process's connections
//!   keep reaching it. An Initial or 0-RTT packet may carry the client's random ID: it goes
//!   to the socket its number names if that is in the live half (a handshake's later
//!   Initials, an Initial after a Retry, carry ours), else to the live half's socket
//!   `number mod N`; either is a function of what every packet of the attempt repeats, so
//!   the attempt stays on one worker, whose IDs the client then uses. A number past both
//!   halves (not one of ours) goes to a live socket the same way: nothing falls to the
//!   kernel's hash, which could pick a socket of the idle half that no one reads.
//! * **The switch** ([`switch`]): a new process (after an upgrade) takes the idle half;
//!   once its workers read their sockets it attaches the program naming its half the live
//!   one, and only then tells the old process it serves. The old process's connections are
//!   sent GOAWAY and finish on the old half (bounded by `shutdown_timeout`). A handshake
//!   under way at the switch may be lost (its next Initials go to the new process, which
//!   cannot read them); the client starts again. The next upgrade needs the old half free again: it is refused while the
//!   process upgraded from still runs ([`handed`]).
//! * **Checked, not assumed** ([`verify`]): the first process sends one short-header
//!   datagram per socket to each address and reads it back from that socket; an upgraded
//!   one does so for its half. If the program cannot be attached or the check fails, or
//!   past 127 workers, steering is off: the program is detached, the idle half closed, the
//!   log says so, and packets are spread by the kernel's hash (a client that changes
//!   address may then reach a worker that does not know it; an upgrade hands no UDP socket
//!   over and may cut HTTP/3 connections).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};
use ring::rand::{SecureRandom, SystemRandom};
use socket2::{Domain, Protocol, Socket, Type};

/// Our connection IDs' length.
pub(crate) const CID_LEN: usize = 8;

/// `SO_ATTACH_REUSEPORT_CBPF` and `SO_DETACH_REUSEPORT_BPF` (asm-generic; not in `libc` for
/// every Linux target).
#[cfg(not(any(target_arch = "sparc", target_arch = "sparc64")))]
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;
#[cfg(not(any(target_arch = "sparc", target_arch = "sparc64")))]
const SO_DETACH_REUSEPORT_BPF: libc::c_int = 68;
#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 0x35;
#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SO_DETACH_REUSEPORT_BPF: libc::c_int = 0x47;

/// In a worker: its number, the key, and its UDP sockets (one per address), put there by
/// [`Sets::adopt`] and taken by `Quic::bind`.
static ADOPTED: Mutex<Option<Adopted>> = Mutex::new(None);

/// A worker's share of the parent's sockets.
pub(crate) struct Adopted {
    pub(crate) index: u8,
    pub(crate) key: u32,
    pub(crate) sockets: Vec<UdpSocket>,
}

/// The worker's sockets, if the parent bound them.
pub(crate) fn take() -> Option<Adopted> {
    ADOPTED.lock().ok()?.take()
}

/// Generates connection IDs whose first four bytes carry the worker's number (see the
/// module docs).
pub(crate) struct Gen {
    index: u8,
    key: u32,
    /// `K⁻¹ mod 2³²`.
    inverse: u32,
    rng: SystemRandom,
}

impl Gen {
    pub(crate) fn new(index: u8, key: u32) -> Gen {
        Gen { index, key, inverse: inverse(key), rng: SystemRandom::new() }
    }
}

/// The inverse of odd `k` modulo 2³² (Newton's iteration: each step doubles the bits that
/// are right; `k` itself is right to 3).
fn inverse(k: u32) -> u32 {
    let mut x = k;
    for _ in 0..4 {
        x = x.wrapping_mul(2u32.wrapping_sub(k.wrapping_mul(x)));
    }
    x
}

/// The worker number an ID's first four bytes carry, as the BPF program computes it.
fn number(w: u32, key: u32) -> u32 {
    w.wrapping_mul(key) >> 24
}

/// Four bytes whose number under `key` is `index`, from 24 random bits.
fn encode(index: u8, random: u32, inverse: u32) -> [u8; 4] {
    ((u32::from(index) << 24) | (random & 0x00ff_ffff)).wrapping_mul(inverse).to_be_bytes()
}

impl ConnectionIdGenerator for Gen {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut b = [0u8; CID_LEN];
        // The system's random source does not fail on Linux once the process runs; were it
        // to, the zeroes left still carry the number.
        let _ = self.rng.fill(&mut b);
        let w = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        b[..4].copy_from_slice(&encode(self.index, w, self.inverse));
        ConnectionId::new(&b)
    }

    /// An ID of another worker's connection (one that reached this worker because steering
    /// is off) is dropped rather than answered with a stateless reset: this worker's reset
    /// tokens are not the owner's, so the client would ignore it.
    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        match cid.get(..4) {
            Some(&[a, b, c, d]) if number(u32::from_be_bytes([a, b, c, d]), self.key) == u32::from(self.index) => {
                Ok(())
            }
            _ => Err(InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt, jf, k }
}

/// The classic BPF program that returns a datagram's socket number (module docs): `workers`
/// sockets a half, `base` the first of the live half.
fn program(key: u32, workers: u32, base: u32) -> Vec<libc::sock_filter> {
    use libc::{
        BPF_A, BPF_ABS, BPF_ADD, BPF_ALU, BPF_AND, BPF_B, BPF_JA, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_JSET, BPF_K, BPF_LD,
        BPF_MOD, BPF_MUL, BPF_RET, BPF_RSH, BPF_W,
    };
    vec![
        // 0: the first byte; the long-header bit (0x80) set: 2, else 8.
        stmt(BPF_LD | BPF_B | BPF_ABS, 0),
        jump(BPF_JMP | BPF_JSET | BPF_K, 0x80, 0, 6),
        // 2: long header. Initial or 0-RTT (type 0 or 1, bits 0x30): their ID may be the
        // client's: 12. A Handshake packet with an ID of our length: by the ID.
        stmt(BPF_ALU | BPF_AND | BPF_K, 0x30),
        jump(BPF_JMP | BPF_JGE | BPF_K, 0x20, 0, 8),
        stmt(BPF_LD | BPF_B | BPF_ABS, 5),
        jump(BPF_JMP | BPF_JEQ | BPF_K, CID_LEN as u32, 0, 6),
        stmt(BPF_LD | BPF_W | BPF_ABS, 6),
        jump(BPF_JMP | BPF_JA, 1, 0, 0),
        // 8: short header: the destination ID follows the first byte.
        stmt(BPF_LD | BPF_W | BPF_ABS, 1),
        // 9: the number (the top byte of w × K), whichever half it names; one past both
        // halves: a live socket (17).
        stmt(BPF_ALU | BPF_MUL | BPF_K, key),
        stmt(BPF_ALU | BPF_RSH | BPF_K, 24),
        jump(BPF_JMP | BPF_JGE | BPF_K, 2 * workers, 5, 7),
        // 12: a new connection's packets (or a handshake's Initials): the number if it is
        // of the live half, else a live socket by the number (the ID, or for an ID under
        // four bytes what follows it, is the same in every packet of the attempt).
        stmt(BPF_LD | BPF_W | BPF_ABS, 6),
        stmt(BPF_ALU | BPF_MUL | BPF_K, key),
        stmt(BPF_ALU | BPF_RSH | BPF_K, 24),
        jump(BPF_JMP | BPF_JGE | BPF_K, base, 0, 1),
        jump(BPF_JMP | BPF_JGE | BPF_K, base + workers, 0, 2),
        // 17: a live socket: base + number mod workers.
        stmt(BPF_ALU | BPF_MOD | BPF_K, workers),
        stmt(BPF_ALU | BPF_ADD | BPF_K, base),
        // 19.
        stmt(BPF_RET | BPF_A, 0),
    ]
}

/// Attaches the program to `sock`'s reuseport group.
fn attach(sock: &UdpSocket, key: u32, workers: usize, live: usize) -> io::Result<()> {
    let mut prog = program(key, workers as u32, (live * workers) as u32);
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_mut_ptr() };
    // SAFETY: `fprog` points at `prog`, alive for the call; the kernel copies the program.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Detaches whatever program `sock`'s group has (ENOENT: none).
fn detach(sock: &UdpSocket) {
    let zero: libc::c_int = 0;
    // SAFETY: `zero` is a valid int for the call; no other memory is touched.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_DETACH_REUSEPORT_BPF,
            (&zero as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// The UDP sockets of both halves, kept by the process that bound or inherited them (the
/// parent of the workers, or the single process) in [`GROUP`].
pub struct Sets {
    /// By number in the reuseport groups (`2 × workers` of them; the live half's first is
    /// `live × workers`), one socket per address each.
    sets: Vec<Vec<UdpSocket>>,
    /// The addresses as asked for (handed over with the sockets, to be matched by them).
    addrs: Vec<SocketAddr>,
    key: u32,
    workers: usize,
    /// Which half this process's workers read: 0 or 1.
    live: usize,
    /// Steering is on (the program attached, or to be attached by [`switch`]).
    steered: bool,
    /// The process that handed the sockets over, while it may still drain on the other half.
    previous: Option<libc::pid_t>,
}

/// This process's sockets (see [`Sets`]).
static GROUP: Mutex<Option<Sets>> = Mutex::new(None);

/// What an upgrading process handed over, until [`prepare`] takes it: the sockets by number
/// and address, and its state (`KEY LIVE WORKERS`, [`handed`]).
static INHERITED: Mutex<Option<(Numbered, String)>> = Mutex::new(None);

/// Handed-over sockets, each with its number in the groups and its address.
pub type Numbered = Vec<(usize, SocketAddr, UdpSocket)>;

/// The descriptors to hand over (each with its number and address), and the state with them.
pub type Handing = (Vec<(RawFd, usize, SocketAddr)>, Option<String>);

/// A UDP socket bound for QUIC in a reuseport group, blocking (the worker makes its copy
/// non-blocking: the flag is the socket's, shared by every copy).
fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_reuse_port(true)?;
    sock.bind(&addr.into())?;
    Ok(sock.into())
}

/// A random odd key.
fn new_key() -> Result<u32, String> {
    let mut b = [0u8; 4];
    SystemRandom::new().fill(&mut b).map_err(|_| "http3: no random source".to_string())?;
    Ok(u32::from_be_bytes(b) | 1)
}

/// The most workers whose two halves a connection ID's number can name.
const MAX_WORKERS: usize = 127;

/// Keeps what an upgrading process handed over for [`prepare`] (`upgrade::inherited`).
pub fn stash(sockets: Numbered, state: String) {
    if let Ok(mut g) = INHERITED.lock() {
        *g = Some((sockets, state));
    }
}

/// Makes this process's sockets for `workers` workers on `addrs`: the ones an upgrading
/// process handed over, or new ones. `Ok(Some(line))`: a line to log (steering is off, and
/// why). An upgrade that cannot take the handed-over
/// sockets (other addresses or another number of workers) fails: the old process serves on.
pub fn prepare(addrs: &[SocketAddr], workers: usize) -> Result<Option<String>, String> {
    let handed = INHERITED.lock().ok().and_then(|mut g| g.take());
    let (sets, line) = match handed {
        Some((sockets, state)) => (Sets::inherit(addrs, workers, sockets, &state)?, None),
        None => {
            let (sets, why) = Sets::bind(addrs, workers)?;
            let line = why.map(|why| {
                format!(
                    "http3: packets are not steered by connection ID ({why}): a client whose address or port \
                     changes may lose its connection, and a binary upgrade may cut HTTP/3 connections"
                )
            });
            (sets, line)
        }
    };
    if let Ok(mut g) = GROUP.lock() {
        *g = Some(sets);
    }
    Ok(line)
}

/// In worker i's process (forked after [`prepare`]), or in the single process: its sockets
/// and number for `Quic::bind`.
pub fn adopt(i: usize) -> io::Result<()> {
    let Ok(g) = GROUP.lock() else { return Ok(()) };
    let Some(s) = g.as_ref() else { return Ok(()) };
    let n = s.live * s.workers + i;
    let Some(set) = s.sets.get(n) else { return Ok(()) };
    let sockets = set.iter().map(UdpSocket::try_clone).collect::<io::Result<Vec<_>>>()?;
    let index = u8::try_from(n).unwrap_or(u8::MAX);
    if let Ok(mut a) = ADOPTED.lock() {
        *a = Some(Adopted { index, key: s.key, sockets });
    }
    Ok(())
}

/// After an upgrade, once this process's workers read their sockets: new connections come
/// here from now on (the program names the live half). `Some(line)` to log.
pub fn switch() -> Option<String> {
    let g = GROUP.lock().ok()?;
    let s = g.as_ref().filter(|s| s.previous.is_some() && s.steered)?;
    let first = s.sets.first()?;
    for sock in first {
        if let Err(e) = attach(sock, s.key, s.workers, s.live) {
            return Some(format!(
                "http3: SO_ATTACH_REUSEPORT_CBPF: {e}: new connections still go to the previous process"
            ));
        }
    }
    Some(
        "http3: new connections come to this process; the previous one's go on reaching it, steered by connection ID"
            .into(),
    )
}

/// The sockets to hand to a new binary (descriptor, number, address) and the state that goes
/// with them, or why not: the process this one took them from still drains the other half.
pub fn handed() -> Result<Handing, String> {
    let Ok(g) = GROUP.lock() else { return Ok((Vec::new(), None)) };
    let Some(s) = g.as_ref().filter(|s| s.steered) else { return Ok((Vec::new(), None)) };
    // SAFETY: getppid has no preconditions.
    if let Some(pid) = s.previous.filter(|&p| p == unsafe { libc::getppid() }) {
        return Err(format!(
            "process {pid}, upgraded from, still finishes its HTTP/3 connections on the sockets the new \
             binary would take: try again once it has exited"
        ));
    }
    let mut out = Vec::new();
    for (n, set) in s.sets.iter().enumerate() {
        for (sock, &a) in set.iter().zip(&s.addrs) {
            out.push((sock.as_raw_fd(), n, a));
        }
    }
    Ok((out, Some(format!("{:08x} {} {}", s.key, s.live, s.workers))))
}

impl Sets {
    /// Binds `2 × workers` sockets on each of `addrs`, in number order, attaches the
    /// program (the first half live) and checks it ([`verify`]). The second value, if any,
    /// says why steering is off: the second half is closed then, the program detached, and
    /// the first half serves all the same, spread by the kernel's hash.
    fn bind(addrs: &[SocketAddr], workers: usize) -> Result<(Sets, Option<String>), String> {
        let key = new_key()?;
        let mut sets: Vec<Vec<UdpSocket>> = (0..2 * workers).map(|_| Vec::new()).collect();
        for &a in addrs {
            let mut at = a;
            for set in sets.iter_mut() {
                let sock = bind_udp(at).map_err(|e| format!("http3: bind udp {a}: {e}"))?;
                // Port 0: the others join the first one's port.
                at = sock.local_addr().map_err(|e| format!("http3: udp {a}: {e}"))?;
                set.push(sock);
            }
        }
        let mut s = Sets { sets, addrs: addrs.to_vec(), key, workers, live: 0, steered: false, previous: None };
        let why = if workers > MAX_WORKERS {
            Some(format!("{workers} workers: a connection ID carries at most {MAX_WORKERS}"))
        } else {
            s.steer()
        };
        match why {
            None => s.steered = true,
            Some(_) => s.sets.truncate(workers),
        }
        Ok((s, why))
    }

    /// Attaches and checks the program on each address's group; `Some(why)` if it is off.
    fn steer(&self) -> Option<String> {
        let first = self.sets.first()?;
        let every: Vec<usize> = (0..self.sets.len()).collect();
        for (j, sock) in first.iter().enumerate() {
            let why = match attach(sock, self.key, self.workers, self.live) {
                Err(e) => format!("SO_ATTACH_REUSEPORT_CBPF: {e}"),
                Ok(()) => match verify(&self.sets, &every, j, self.key) {
                    Ok(()) => continue,
                    Err(e) => e,
                },
            };
            // Each address has its group; the first set has a socket in each.
            for s in first {
                detach(s);
            }
            return Some(why);
        }
        None
    }

    /// The sockets an upgrading process handed over, for the same addresses and number of
    /// workers: this process takes the other half, and checks that datagrams reach it.
    fn inherit(addrs: &[SocketAddr], workers: usize, mut handed: Numbered, state: &str) -> Result<Sets, String> {
        let bad = || format!("http3: the handed-over state {state:?} is not understood");
        let mut it = state.split(' ');
        let key = it.next().and_then(|k| u32::from_str_radix(k, 16).ok()).filter(|k| k & 1 == 1).ok_or_else(bad)?;
        let live: usize = it.next().and_then(|l| l.parse().ok()).filter(|&l| l < 2).ok_or_else(bad)?;
        let was: usize = it.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
        if was != workers || handed.len() != 2 * workers * addrs.len() {
            return Err(format!(
                "http3: a binary upgrade keeps the number of workers ({was}) and the HTTP/3 addresses; \
                 restart to change them"
            ));
        }
        let mut sets: Vec<Vec<UdpSocket>> = (0..2 * workers).map(|_| Vec::new()).collect();
        for (n, set) in sets.iter_mut().enumerate() {
            for &a in addrs {
                let i = handed
                    .iter()
                    .position(|(m, b, s)| *m == n && (*b == a || s.local_addr().is_ok_and(|l| l == a)))
                    .ok_or_else(|| {
                        format!(
                            "http3: a binary upgrade keeps the HTTP/3 addresses ({a} was not handed over); \
                             restart to change them"
                        )
                    })?;
                set.push(handed.swap_remove(i).2);
            }
        }
        let live = 1 - live;
        // SAFETY: getppid has no preconditions.
        let previous = Some(unsafe { libc::getppid() });
        let s = Sets { sets, addrs: addrs.to_vec(), key, workers, live, steered: true, previous };
        let ours: Vec<usize> = (live * workers..(live + 1) * workers).collect();
        for j in 0..addrs.len() {
            verify(&s.sets, &ours, j, key)?;
        }
        Ok(s)
    }
}

/// Sends, for each of `numbers`, a short-header datagram whose ID carries it to address `j`
/// of the sets, and reads it back from that socket there (the sockets are not yet read by
/// anyone). `Err`: which one went astray.
fn verify(sets: &[Vec<UdpSocket>], numbers: &[usize], j: usize, key: u32) -> Result<(), String> {
    let inv = inverse(key);
    let Some(to) = sets.first().and_then(|s| s.get(j)).and_then(|s| s.local_addr().ok()) else {
        return Err("no address".into());
    };
    // A wildcard address is reached on loopback.
    let to = match to {
        SocketAddr::V4(a) if a.ip().is_unspecified() => SocketAddr::from((Ipv4Addr::LOCALHOST, a.port())),
        SocketAddr::V6(a) if a.ip().is_unspecified() => SocketAddr::from((Ipv6Addr::LOCALHOST, a.port())),
        a => a,
    };
    let from = UdpSocket::bind(if to.is_ipv4() {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
    })
    .map_err(|e| format!("check: {e}"))?;
    let rng = SystemRandom::new();
    for &i in numbers {
        let Some(sock) = sets.get(i).and_then(|s| s.get(j)) else { continue };
        let mut probe = [0u8; 1 + CID_LEN + 4];
        let _ = rng.fill(&mut probe);
        probe[0] = 0x40;
        let r = u32::from_be_bytes([probe[1], probe[2], probe[3], probe[4]]);
        probe[1..5].copy_from_slice(&encode(i as u8, r, inv));
        from.send_to(&probe, to).map_err(|e| format!("check: send to {to}: {e}"))?;
        if !received(sock, &probe)? {
            return Err(format!("http3: a datagram for socket {i} did not reach it on {to}"));
        }
    }
    Ok(())
}

/// Reads `sock` for up to 200 ms until `probe` arrives (other datagrams are dropped: none
/// are expected before the workers start). `false`: it did not.
fn received(sock: &UdpSocket, probe: &[u8]) -> Result<bool, String> {
    let end = Instant::now() + Duration::from_millis(200);
    let mut buf = [0u8; 64];
    // A socket a worker of an earlier process read is non-blocking (the flag is shared by
    // every copy; no one else reads it now, and the next worker sets it again).
    sock.set_nonblocking(false).map_err(|e| format!("check: {e}"))?;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        sock.set_read_timeout(Some(left)).map_err(|e| format!("check: {e}"))?;
        match sock.recv(&mut buf) {
            Ok(n) if buf.get(..n) == Some(probe) => {
                sock.set_read_timeout(None).map_err(|e| format!("check: {e}"))?;
                return Ok(true);
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("check: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every ID the generator makes carries its worker's number under the key, as the
        /// BPF program reads it.
        #[test]
        fn ids_carry_the_number(key in any::<u32>(), index in any::<u8>()) {
            let key = key | 1;
            prop_assert_eq!(inverse(key).wrapping_mul(key), 1);
            let mut g = Gen::new(index, key);
            for _ in 0..4 {
                let id = g.generate_cid();
                prop_assert_eq!(id.len(), CID_LEN);
                let w = u32::from_be_bytes([id[0], id[1], id[2], id[3]]);
                prop_assert_eq!(number(w, key), u32::from(index));
                prop_assert!(g.validate(&id).is_ok());
                prop_assert!(Gen::new(index.wrapping_add(1), key).validate(&id).is_err());
            }
        }
    }

    #[test]
    fn ids_differ() {
        let mut g = Gen::new(3, 0x9e37_79b9);
        let a = g.generate_cid();
        let b = g.generate_cid();
        assert_ne!(a, b);
        // The number is not a byte of the ID: for another key the same bytes carry another.
        let w = u32::from_be_bytes([a[0], a[1], a[2], a[3]]);
        assert_eq!(number(w, 0x9e37_79b9), 3);
    }

    /// Two halves of `workers` sockets on one loopback port, the program attached with
    /// `live` the live half.
    fn group(workers: usize, live: usize) -> (Vec<Vec<UdpSocket>>, u32) {
        let first = bind_udp(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
        let addr = first.local_addr().unwrap();
        let mut set = vec![first];
        for _ in 1..2 * workers {
            set.push(bind_udp(addr).unwrap());
        }
        let sets: Vec<Vec<UdpSocket>> = set.into_iter().map(|s| vec![s]).collect();
        let key = new_key().unwrap();
        attach(&sets[0][0], key, workers, live).unwrap();
        (sets, key)
    }

    /// A long-header datagram of `kind` (0x00 Initial, 0x20 Handshake) with `dcid`.
    fn long(kind: u8, dcid: &[u8]) -> Vec<u8> {
        let mut p = vec![0xc0 | kind, 0, 0, 0, 1, dcid.len() as u8];
        p.extend_from_slice(dcid);
        p.push(0);
        p.resize(1200, 0);
        p
    }

    /// Which socket of `sets` `datagram` lands on (each is read once, briefly).
    fn lands(sets: &[Vec<UdpSocket>], datagram: &[u8]) -> Option<usize> {
        let to = sets[0][0].local_addr().unwrap();
        let from = UdpSocket::bind("127.0.0.1:0").unwrap();
        from.send_to(datagram, to).unwrap();
        let mut buf = vec![0u8; 1500];
        let end = Instant::now() + Duration::from_millis(500);
        while Instant::now() < end {
            for (i, s) in sets.iter().enumerate() {
                s[0].set_nonblocking(true).unwrap();
                let got = s[0].recv(&mut buf);
                s[0].set_nonblocking(false).unwrap();
                if got.is_ok_and(|n| buf[..n] == *datagram) {
                    return Some(i);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }

    /// The kernel runs the program: each datagram lands on the socket its ID names, in
    /// either half; without the program, the check fails.
    #[test]
    fn kernel_steers_by_id() {
        let (sets, key) = group(2, 0);
        verify(&sets, &[0, 1, 2, 3], 0, key).unwrap();
        // Without the program, the hash sends one source's datagrams to one socket: the
        // check fails for at least 3 of the 4.
        detach(&sets[0][0]);
        assert!(verify(&sets, &[0, 1, 2, 3], 0, key).is_err());
    }

    /// New connections' Initials land on the live half only, whatever their ID, and stay
    /// on one socket per ID; a Handshake packet or a short header follows its ID into either
    /// half; switching the live half moves the Initials, not the others.
    #[test]
    fn initials_go_to_the_live_half() {
        for live in [0, 1] {
            let (sets, key) = group(3, live);
            let inv = inverse(key);
            let rng = SystemRandom::new();
            let mut seen = std::collections::BTreeSet::new();
            for k in 0..64u32 {
                let mut dcid = [0u8; 8];
                rng.fill(&mut dcid).unwrap();
                if k % 2 == 0 {
                    // An ID of ours naming the other half (a handshake caught by a switch).
                    dcid[..4].copy_from_slice(&encode((3 * (1 - live) + (k as usize % 3)) as u8, k, inv));
                }
                let len = [8usize, 8, 3, 0, 1][k as usize % 5];
                let p = long(0, &dcid[..len]);
                let at = lands(&sets, &p).expect("delivered");
                assert!((3 * live..3 * live + 3).contains(&at), "Initial on {at}, live half {live}");
                assert_eq!(lands(&sets, &p), Some(at), "the same Initial lands on one socket");
                seen.insert(at);
            }
            assert_eq!(seen.len(), 3, "Initials spread over the live half: {seen:?}");
            for n in 0..6usize {
                let id = encode(n as u8, 7, inv);
                let mut short = vec![0x40];
                short.extend_from_slice(&id);
                short.extend_from_slice(&[1, 2, 3, 4, 5]);
                assert_eq!(lands(&sets, &short), Some(n), "short header for {n}");
                let mut cid = id.to_vec();
                cid.extend_from_slice(&[9, 9, 9, 9]);
                assert_eq!(lands(&sets, &long(0x20, &cid)), Some(n), "Handshake for {n}");
            }
            // A short header naming no socket: a live one.
            let mut junk = vec![0x40];
            junk.extend_from_slice(&encode(200, 1, inv));
            junk.extend_from_slice(&[0; 8]);
            assert!(lands(&sets, &junk).is_some_and(|at| (3 * live..3 * live + 3).contains(&at)));
        }
    }
}
