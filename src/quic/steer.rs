//! `workers = N` (Linux): every QUIC packet reaches the worker that owns its connection, by
//! its connection ID, also after the client's address or port changed (NAT rebinding,
//! migration), when the kernel's hash of address and port would pick another worker.
//!
//! * **Sockets.** The parent binds the UDP sockets, address by address, worker 0's first:
//!   the kernel numbers the sockets of a reuseport group in the order they joined it, so
//!   worker i's socket is number i. The parent keeps them for the life of the process: a
//!   worker restarted after it died gets the very same socket, and so the same number (a
//!   socket leaves its group, and the last one takes its place, only when it is closed).
//!   [`Sets::adopt`] hands worker i its sockets in the forked child; `Quic::bind` takes them.
//! * **Connection IDs** ([`Gen`]): 8 bytes. The first four, read as a big-endian `w`, carry
//!   the worker's number in the top byte of `w × K mod 2³²`, where `K` is an odd secret made
//!   by the parent at start-up (so every worker and every restarted one has it); the rest of
//!   that product and the other four bytes are random. An observer without `K` sees random
//!   bytes and cannot read the number off a fixed byte, as it could from nginx's
//!   (`quic_bpf`), whose IDs begin with the socket's cookie. It is obfuscation, not
//!   encryption (RFC 9000 §5.1 asks that an observer not link IDs; QUIC-LB's encrypted IDs
//!   need AES, which a classic BPF program cannot run): `K` is 31 bits, which enough IDs
//!   known to be of one worker would let one search for.
//! * **The program** ([`program`]): a classic BPF program attached to each group with
//!   `SO_ATTACH_REUSEPORT_CBPF`; it sees the UDP payload at offset 0 (the kernel pulls the
//!   UDP header off before running it, `run_bpf_filter` in `net/core/sock_reuseport.c`) and
//!   returns the socket number: for a short header, from the four bytes after the first one
//!   (the destination ID); for a long one (Initial, 0-RTT, Handshake, Retry'd Initial), from
//!   the four after the ID's length byte at offset 5. A number the group does not have (an
//!   Initial's ID is the client's random choice: its number is random, from 0 to 255)
//!   makes the kernel fall back to its hash, as does a long header with an ID shorter than
//!   four bytes. Both are functions of what every packet of the attempt repeats (the ID,
//!   the addresses), so the attempt stays on one worker, whose IDs the client then uses.
//! * **Checked, not assumed** ([`verify`]): once the program is attached, the parent sends
//!   one short-header datagram per worker to each address and reads it back from that
//!   worker's socket. Where a group holds sockets this parent did not bind (a binary
//!   upgrade: the old process's sockets stay in the group until it exits, and the swaps
//!   when they leave reorder the new ones) the check fails, the program is detached, and
//!   packets are spread by the kernel's hash as without steering: a client that changes
//!   address may then reach a worker that does not know it (it gets a stateless reset and
//!   reconnects). The log says so; a restart brings steering back.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
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

/// The classic BPF program that returns a datagram's socket number (module docs).
fn program(key: u32) -> Vec<libc::sock_filter> {
    use libc::{
        BPF_A, BPF_ABS, BPF_ALU, BPF_B, BPF_JA, BPF_JGE, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_MUL, BPF_RET, BPF_RSH,
        BPF_W,
    };
    vec![
        // 0: the first byte; the long-header bit (0x80) set: 2, else 6.
        stmt(BPF_LD | BPF_B | BPF_ABS, 0),
        jump(BPF_JMP | BPF_JSET | BPF_K, 0x80, 0, 4),
        // 2: long header: the destination ID's length; under 4 bytes: the kernel's hash.
        stmt(BPF_LD | BPF_B | BPF_ABS, 5),
        jump(BPF_JMP | BPF_JGE | BPF_K, 4, 0, 6),
        stmt(BPF_LD | BPF_W | BPF_ABS, 6),
        jump(BPF_JMP | BPF_JA, 1, 0, 0),
        // 6: short header: the destination ID follows the first byte.
        stmt(BPF_LD | BPF_W | BPF_ABS, 1),
        // 7: the number: the top byte of w × K.
        stmt(BPF_ALU | BPF_MUL | BPF_K, key),
        stmt(BPF_ALU | BPF_RSH | BPF_K, 24),
        stmt(BPF_RET | BPF_A, 0),
        // 10: out of range: the kernel falls back to its hash.
        stmt(BPF_RET | BPF_K, u32::MAX),
    ]
}

/// Attaches the program to `sock`'s reuseport group.
fn attach(sock: &UdpSocket, key: u32) -> io::Result<()> {
    let mut prog = program(key);
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

/// The UDP sockets of every worker, bound by the parent: `sets[i]` is worker i's, one per
/// address.
pub struct Sets {
    sets: Vec<Vec<UdpSocket>>,
    key: u32,
}

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

impl Sets {
    /// Binds `workers` sockets on each of `addrs`, in worker order, attaches the program
    /// and checks it ([`verify`]). The second value, if any, says why steering is off (the
    /// program detached; the sockets serve all the same, spread by the kernel's hash).
    pub fn bind(addrs: &[SocketAddr], workers: usize) -> Result<(Sets, Option<String>), String> {
        let key = new_key()?;
        let mut sets: Vec<Vec<UdpSocket>> = (0..workers).map(|_| Vec::new()).collect();
        for &a in addrs {
            for set in sets.iter_mut() {
                set.push(bind_udp(a).map_err(|e| format!("http3: bind udp {a}: {e}"))?);
            }
        }
        let s = Sets { sets, key };
        if workers > 255 {
            return Ok((s, Some(format!("{workers} workers: a connection ID carries at most 255"))));
        }
        let why = s.steer();
        Ok((s, why))
    }

    /// Attaches and checks the program on each address's group; `Some(why)` if it is off.
    fn steer(&self) -> Option<String> {
        let first = self.sets.first()?;
        for (j, sock) in first.iter().enumerate() {
            let why = match attach(sock, self.key) {
                Err(e) => format!("SO_ATTACH_REUSEPORT_CBPF: {e}"),
                Ok(()) => match verify(&self.sets, j, self.key) {
                    Ok(()) => continue,
                    Err(e) => e,
                },
            };
            // Each address has its group; the first worker's set has a socket in each.
            for s in first {
                detach(s);
            }
            return Some(why);
        }
        None
    }

    /// In worker i's forked process: its sockets and number for `Quic::bind`.
    pub fn adopt(&self, i: usize) -> io::Result<()> {
        let sockets = match self.sets.get(i) {
            Some(set) => set.iter().map(UdpSocket::try_clone).collect::<io::Result<Vec<_>>>()?,
            None => return Ok(()),
        };
        let index = u8::try_from(i).unwrap_or(u8::MAX);
        if let Ok(mut a) = ADOPTED.lock() {
            *a = Some(Adopted { index, key: self.key, sockets });
        }
        Ok(())
    }
}

/// Sends, for each worker i, a short-header datagram whose ID carries i to address `j` of
/// the sets, and reads it back from worker i's socket there (the sockets are not yet read by
/// anyone). `Err`: which one went astray.
fn verify(sets: &[Vec<UdpSocket>], j: usize, key: u32) -> Result<(), String> {
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
    for (i, set) in sets.iter().enumerate() {
        let Some(sock) = set.get(j) else { continue };
        let mut probe = [0u8; 1 + CID_LEN + 4];
        let _ = rng.fill(&mut probe);
        probe[0] = 0x40;
        let r = u32::from_be_bytes([probe[1], probe[2], probe[3], probe[4]]);
        probe[1..5].copy_from_slice(&encode(i as u8, r, inv));
        from.send_to(&probe, to).map_err(|e| format!("check: send to {to}: {e}"))?;
        if !received(sock, &probe)? {
            return Err(format!("a datagram for worker {i} did not reach its socket on {to}"));
        }
    }
    Ok(())
}

/// Reads `sock` for up to 200 ms until `probe` arrives (other datagrams are dropped: none
/// are expected before the workers start). `false`: it did not.
fn received(sock: &UdpSocket, probe: &[u8]) -> Result<bool, String> {
    let end = Instant::now() + Duration::from_millis(200);
    let mut buf = [0u8; 64];
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

    /// The kernel runs the program: 4 sockets on one loopback port, each datagram lands on
    /// the socket its ID names, and a long header with a short ID is still delivered.
    #[test]
    fn kernel_steers_by_id() {
        let first = bind_udp(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
        let addr = first.local_addr().unwrap();
        let mut set = vec![first];
        for _ in 1..4 {
            set.push(bind_udp(addr).unwrap());
        }
        let sets: Vec<Vec<UdpSocket>> = set.into_iter().map(|s| vec![s]).collect();
        let key = new_key().unwrap();
        attach(&sets[0][0], key).unwrap();
        verify(&sets, 0, key).unwrap();
        // Without the program, the hash sends one source's datagrams to one socket: the
        // check fails for at least 3 of the 4 workers.
        detach(&sets[0][0]);
        assert!(verify(&sets, 0, key).is_err());
    }
}
