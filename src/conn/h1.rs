//! HTTP/1.1 on a connection: parsing the buffered bytes into requests (pipelined ones one
//! after the other), throwing request bodies away, handing each request to the semantics
//! (`serve::answer`) and writing what it queued — the head and a memory or mapped body in
//! one `sendmsg`, a file body by `sendfile` after a head flagged `MSG_MORE`, or by a staged
//! copy — within the connection's byte budget and the transfer's rate limits. A bad request
//! gets its error response and the connection closes. The phases, the read buffer, the
//! deadlines and the close are the connection's (`mod.rs`).

use std::io;
use std::os::fd::AsRawFd;

#[cfg(feature = "http2")]
use super::h2;
#[cfg(feature = "tls")]
use super::Transport;
use super::{is_peer_gone, Conn, Phase, WriteResult};
use crate::ctx::Ctx;
use crate::fs::cache;
use crate::http::request::{self, ChunkedSkipper, Framing, Reject, Request};
use crate::log::RequestLine;
use crate::serve::{self, Body, CLIENT_CLOSED};
use crate::sys;

/// The largest single `sendfile` call.
const SENDFILE_CHUNK: usize = 512 * 1024;
/// Staging buffer size when sendfile is off: each send of the staged copy is this many bytes
/// (the first counting the head, see [`stage_len`]), as h2o's.
const COPY_CHUNK: usize = 64 * 1024;
/// Where the staged bytes start in the staging buffer: on a page boundary. The kernel copies
/// into it (`pread`) and out of it (`send`) with `rep movsb`, which is slower when the user
/// address is not cache-line aligned; where a heap allocation lands is up to the allocator and
/// differed between two builds of the same code (page offsets 0x850 and 0x800). `pread` of
/// 2 MiB from the page cache in 64 KiB calls into a buffer at page offset 0x010 / 0x030 /
/// 0x830 / 0x840 / 0x000: median 160 / 164 / 152 / 145 / 142 µs (400 runs each, interleaved).
const STAGE_ALIGN: usize = 4096;
/// `[server] loopback_copy`: bodies from this size on, to a loopback peer, take the staged
/// copy instead of `sendfile`. On loopback the receiver's reads of spliced page-cache pages
/// cost it more than reads of pages just copied in (wrk: 7 against 4 µs per 8 KiB read), and
/// with one connection the slower side sets the pace: copying measured 1.15–1.27× the
/// throughput at 2–32 MiB, level at 1 MiB, 0.76× at 256 KiB (BENCHMARKS.md, issue 17).
pub const LOOPBACK_COPY_MIN: u64 = 2 * 1024 * 1024;

/// How many body bytes a refill of the staging buffer reads: [`COPY_CHUNK`], less the head
/// still to be sent with them, so that the first send (head and body) is `COPY_CHUNK` bytes
/// like every other but the last, and each send after it starts on a `COPY_CHUNK` boundary of
/// the stream. The kernel copies a send into its page fragments end to end, so a head of
/// 268 bytes in front of a whole chunk leaves every later copy 12 bytes off a cache line.
/// h2o 2.2 writes the same way (its first `writev` is its head and 65,284 body bytes). A
/// head of half a chunk or more is sent with a whole chunk.
fn stage_len(head_len: usize) -> usize {
    if head_len < COPY_CHUNK / 2 {
        COPY_CHUNK - head_len
    } else {
        COPY_CHUNK
    }
}

/// Refills the staging buffer `buf` with up to `want` bytes of `file` from `offset`, in one
/// read, placed at a [`STAGE_ALIGN`] boundary: returns where they start in `buf` and how
/// many were read (short when the file shrank; 0 at its end). The bytes before the start
/// are padding, never sent: the previous refill's bytes when the buffer is reused (zeroed
/// only once per buffer, not per chunk). The buffer is reserved before the start is chosen,
/// so the read does not move it.
fn refill(buf: &mut Vec<u8>, file: &std::fs::File, want: usize, offset: u64) -> io::Result<(usize, usize)> {
    let need = want + STAGE_ALIGN - 1;
    if buf.capacity() < need {
        buf.clear();
        buf.reserve_exact(need);
    }
    let start = buf.as_ptr().addr().wrapping_neg() % STAGE_ALIGN;
    if buf.len() >= start {
        buf.truncate(start);
    } else {
        buf.resize(start, 0);
    }
    let n = sys::pread_append(file, buf, want, offset)?;
    Ok((start, n))
}

/// A request body still to be read and thrown away before the next request.
pub(super) enum Discard {
    None,
    Length(u64),
    Chunked(ChunkedSkipper),
}

impl Conn {
    /// Uses buffered bytes: skips body bytes being discarded, then parses and answers one
    /// request. `Ok(true)`: a response was queued; `Ok(false)`: more bytes are needed;
    /// `Err`: close now.
    pub(super) fn consume(&mut self, cx: &mut Ctx) -> Result<bool, ()> {
        if !self.skip_body(cx)? {
            return Ok(false);
        }
        if self.rstart == self.rend {
            return Ok(false);
        }
        let Some(mut rbuf) = self.rbuf.take() else {
            return Ok(false);
        };
        let limits = cx.limits;
        let region = &rbuf[self.rstart..self.rend];
        // Built in place and matched by reference: moving the parsed request would copy it.
        let mut parsed = None;
        let queued = match request::parse_head_into(region, &limits, &mut parsed).map(|()| parsed.as_ref()) {
            Ok(Some(req)) => match held_body_error(req, &region[req.head_len..], cx.cfg.max_body_discard) {
                Some(rej) => {
                    self.reject(cx, rej, req_line(req));
                    self.rstart = self.rend;
                    true
                }
                None => {
                    let head_len = req.head_len;
                    let queued = self.respond(cx, req);
                    if queued {
                        self.rstart += head_len;
                    }
                    queued
                }
            },
            Ok(None) => {
                if self.phase == Phase::Idle {
                    self.phase = Phase::Head;
                    self.deadline = cx.clock.now + cx.cfg.header_timeout;
                }
                false
            }
            #[cfg(feature = "http2")]
            Err(_) if self.plain() && self.served == 0 && h2::preface(cx, region).is_some() => {
                // The HTTP/2 preface (its `HTTP/2.0` is what failed): switch, or wait for
                // the rest of it.
                let complete = h2::preface(cx, region) == Some(true);
                self.rbuf = Some(rbuf);
                if complete {
                    self.start_h2(cx);
                }
                return Ok(complete);
            }
            Err(rej) if rej == request::NEWER_MINOR => {
                // HTTP/1.2 to 1.9: read as 1.1 (RFC 9110 §2.5), so patched, and parsed again.
                request::patch_version(&mut rbuf[self.rstart..self.rend]);
                self.rbuf = Some(rbuf);
                return self.consume(cx);
            }
            Err(rej) => {
                let line = first_line(&rbuf[self.rstart..self.rend]);
                self.reject(cx, rej, line);
                self.rstart = self.rend;
                true
            }
        };
        self.rbuf = Some(rbuf);
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        Ok(queued)
    }

    /// Drops buffered bytes of a request body. `Ok(true)` when no body is pending any more.
    fn skip_body(&mut self, cx: &Ctx) -> Result<bool, ()> {
        let avail = self.rend - self.rstart;
        match &mut self.discard {
            Discard::None => return Ok(true),
            Discard::Length(left) => {
                let take = avail.min(usize::try_from(*left).unwrap_or(usize::MAX));
                self.rstart += take;
                *left -= take as u64;
                if *left == 0 {
                    self.discard = Discard::None;
                }
            }
            Discard::Chunked(skip) => {
                let Some(rbuf) = self.rbuf.as_deref() else {
                    return Ok(false);
                };
                let used = skip.feed(&rbuf[self.rstart..self.rend]).map_err(|_| ())?;
                self.rstart += used;
                if skip.consumed > cx.cfg.max_body_discard {
                    return Err(());
                }
                if skip.done() {
                    self.discard = Discard::None;
                }
            }
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        Ok(matches!(self.discard, Discard::None))
    }

    /// Answers a parsed request: queues head and body and enters `Send`; or, when the
    /// answer waits for a verification, leaves the request unconsumed, enters `Paused` and
    /// returns false.
    fn respond(&mut self, cx: &mut Ctx, req: &Request<'_>) -> bool {
        let close_before = self.close_after;
        let mut keep = req.keep_alive && !self.close_after && self.served + 1 < cx.cfg.keepalive_requests;
        match req.framing {
            Framing::None => {}
            Framing::Length(n) if n > cx.cfg.max_body_discard => {
                self.reject(cx, Reject { status: 413, why: "request body too large" }, req_line(req));
                return true;
            }
            _ if req.expect_continue => {
                // The client may be waiting for 100 Continue before it sends the body; we
                // don't want the body, so answer now and close instead of reading it.
                keep = false;
            }
            Framing::Length(n) => self.discard = Discard::Length(n),
            Framing::Chunked => self.discard = Discard::Chunked(ChunkedSkipper::default()),
        }
        self.close_after = !keep;
        self.ex.keep = keep;
        self.ex.take_head(cx);
        self.ex.client = if cx.cfg.trusted_proxies.is_empty() {
            self.peer
        } else {
            crate::http::forwarded::client(self.peer, &cx.cfg.trusted_proxies, req.forwarded, req.x_forwarded_for)
        };

        #[cfg(feature = "tls")]
        let early = serve::early(cx, req, self.is_plain(), self.sni());
        #[cfg(not(feature = "tls"))]
        let early = serve::Early::Pipeline;
        let status = serve::answer(&mut self.ex, cx, req, early);
        if self.ex.waiting.is_some() {
            // Undo what answering began; the request is parsed again on resume.
            debug_assert_eq!(status, serve::PAUSED);
            self.discard = Discard::None;
            self.close_after = close_before;
            // If the client goes before the verification ends, the request is logged 499
            // (`Conn::release`); the record is begun again on resume.
            self.ex.user = None;
            #[cfg(feature = "tls")]
            {
                self.ex.tls = self.tls_names();
            }
            self.ex.log_request(cx, req, CLIENT_CLOSED, req.minor);
            self.ex.start(CLIENT_CLOSED, cx.clock.now);
            self.ex.vhost = None;
            self.phase = Phase::Paused;
            return false;
        }
        #[cfg(feature = "tls")]
        {
            self.ex.tls = self.tls_names();
        }
        self.ex.log_request(cx, req, status, req.minor);
        self.start_send(cx, status);
        true
    }

    /// Answers a request that cannot be trusted, and closes after the response.
    fn reject(&mut self, cx: &mut Ctx, rej: Reject, line: RequestLine<'_>) {
        self.close_after = true;
        self.ex.keep = false;
        self.ex.client = self.peer;
        self.discard = Discard::None;
        self.ex.take_head(cx);
        self.ex.simple_response_raw(cx, rej.status, 1, false, None);
        #[cfg(feature = "tls")]
        {
            self.ex.tls = self.tls_names();
        }
        self.ex.begin_log(cx, rej.status, line, None, None);
        self.start_send(cx, rej.status);
    }

    fn start_send(&mut self, cx: &Ctx, status: u16) {
        self.ex.start(status, cx.clock.now);
        self.ex.head_pos = 0;
        self.phase = Phase::Send;
        self.deadline = cx.clock.now + cx.cfg.send_timeout;
    }

    pub(super) fn finish_response(&mut self, cx: &mut Ctx) {
        self.ex.account(cx);
        self.ex.end_transfer(cx);
        self.served += 1;
        self.phase = Phase::Idle;
        self.deadline = cx.clock.now + cx.cfg.keepalive_timeout;
    }

    /// Writes as much of the queued response as the socket and the budget allow.
    pub(super) fn write(&mut self, cx: &mut Ctx, budget: &mut usize) -> WriteResult {
        #[cfg(feature = "tls")]
        if let Transport::Tls(_) = self.transport {
            return self.write_tls(cx, budget);
        }
        let fd = self.sock.as_raw_fd();
        loop {
            if !self.writable {
                return WriteResult::Blocked;
            }
            if *budget == 0 {
                return WriteResult::Budget;
            }
            let (cap, wake) = self.ex.rate_cap(cx);
            let head = &self.ex.head[self.ex.head_pos..];
            // The connection closes once the bytes of this send are out: flag them MSG_MORE,
            // and the close (or the shutdown of Linger) that follows at once sends them with
            // the FIN in one segment, a packet and a wake-up fewer for the client.
            let last = self.close_after && self.ex.parts.is_empty();
            let (result, body_part) = match &mut self.ex.body {
                Body::None if head.is_empty() => return WriteResult::Done,
                Body::None => (sys::send2(fd, head, &[], last), false),
                Body::Mem { buf, pos } => {
                    if head.is_empty() && *pos == buf.len() {
                        return WriteResult::Done;
                    }
                    (sys::send2(fd, head, &buf[*pos..], last), true)
                }
                Body::Mapped { entry, pos, end } => {
                    if head.is_empty() && *pos == *end {
                        return WriteResult::Done;
                    }
                    let stop = (*end).min(pos.saturating_add(cap));
                    if head.is_empty() && stop == *pos {
                        if let Some(t) = wake {
                            return WriteResult::Sleep(t);
                        }
                    }
                    // Only a pointer into the mapping is taken here; the kernel does the reading.
                    // The entry's size is the mapping's, so the range is inside it; if it ever
                    // were not, the response cannot be completed: close, as for a truncation.
                    let Some(bytes) = entry.body.bytes().and_then(|b| b.get(*pos..stop)) else {
                        return self.truncated(cx);
                    };
                    (sys::send2(fd, head, bytes, last && stop == *end), true)
                }
                Body::File { entry, pos, end, stage } => {
                    let cache::Body::Fd(file) = &entry.body else { return WriteResult::Closed };
                    // Copied (read into a staging buffer and sent) with sendfile off, and to a
                    // loopback peer from `LOOPBACK_COPY_MIN` on; else sent by sendfile.
                    if stage.is_none()
                        && (!cx.cfg.sendfile || self.loopback_copy && end.saturating_sub(*pos) >= LOOPBACK_COPY_MIN)
                    {
                        *stage = Some(serve::Staged { buf: cx.take_body(), pos: 0 });
                    }
                    if *pos == *end && stage.as_ref().is_none_or(|s| s.pos == s.buf.len()) {
                        if head.is_empty() {
                            // A file that shrank before the last bytes were handed over made
                            // sendfile come up short (0, below: the connection closes with
                            // bytes owed). Once they are handed over nothing can be checked:
                            // sendfile queues page-cache pages by reference, and a truncation
                            // in place zeroes them while they wait in the socket, for as long
                            // as the client takes to read them. An fstat here would cover only
                            // the microseconds since the last call, for a system call per
                            // response. Files should be replaced by rename (docs/operations.md).
                            return WriteResult::Done;
                        }
                        (sys::send2(fd, head, &[], false), false)
                    } else if let Some(st) = stage {
                        if st.pos == st.buf.len() {
                            // Refill the staging buffer from the file, in one read: a short
                            // one (the file shrank) is sent, the next, empty, closes the
                            // connection as truncated.
                            let want = (*end - *pos).min(stage_len(head.len()) as u64) as usize;
                            match refill(&mut st.buf, file, want, *pos) {
                                Ok((_, 0)) => return self.truncated(cx),
                                Ok((start, n)) => {
                                    st.pos = start;
                                    *pos += n as u64;
                                }
                                Err(e) => {
                                    cx.error(format_args!("read error while sending a file: {e}"));
                                    return WriteResult::Closed;
                                }
                            }
                        }
                        let stop = st.buf.len().min(st.pos.saturating_add(cap));
                        if head.is_empty() && stop == st.pos {
                            if let Some(t) = wake {
                                return WriteResult::Sleep(t);
                            }
                        }
                        // MSG_MORE only on the last bytes before a close, as above. Not
                        // between chunks: it corks the socket, and each send then ends in a
                        // push that holds back a partial segment, which cost the server about
                        // 1.9 times the kernel time of an uncorked send once the client reads
                        // as fast as it sends (perf, one client fetching 32 MiB over loopback:
                        // 35.7 % of the samples in tcp_write_xmit's interrupt-off sections
                        // against 18.9 % in the copy, 9.3 % against 8.8 % uncorked; h2o, which
                        // writes the same 64 KiB chunks uncorked, 16.8 % against 19.8 %).
                        let more = last && stop == st.buf.len() && *pos == *end;
                        (sys::send2(fd, head, &st.buf[st.pos..stop], more), true)
                    } else if !head.is_empty() {
                        // The head first, flagged so it leaves together with the file data.
                        (sys::send2(fd, head, &[], true), false)
                    } else {
                        let count = ((*end - *pos).min(SENDFILE_CHUNK as u64) as usize).min(*budget).min(cap);
                        if count == 0 {
                            if let Some(t) = wake {
                                return WriteResult::Sleep(t);
                            }
                        }
                        match sys::sendfile(fd, file.as_raw_fd(), pos, count) {
                            Ok(0) => return self.truncated(cx),
                            other => (other, true),
                        }
                    }
                }
            };
            match result {
                Ok(n) => {
                    *budget = budget.saturating_sub(n);
                    self.deadline = cx.clock.now + cx.cfg.send_timeout;
                    let body = self.ex.advance(n, body_part);
                    self.ex.charge(cx, body);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return WriteResult::Blocked;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EFAULT) => return self.truncated(cx),
                Err(e) => {
                    if !is_peer_gone(&e) {
                        cx.error(format_args!("write to {}: {e}", self.peer));
                    }
                    return WriteResult::Closed;
                }
            }
        }
    }

    /// The file shrank while being sent: the connection closes (`Exchange::truncated`).
    pub(super) fn truncated(&mut self, cx: &mut Ctx) -> WriteResult {
        self.ex.truncated(cx);
        WriteResult::Closed
    }
}

/// Whether the body bytes already received with a head make the request invalid: a chunked
/// body whose framing is broken (or over `max_body_discard`) in bytes the server holds is
/// answered 400 (413) and the connection closed, never served first. Bytes that arrive after
/// the response has started can only close the connection (`skip_body`).
fn held_body_error(req: &Request<'_>, held: &[u8], max_discard: u64) -> Option<Reject> {
    if req.framing != Framing::Chunked || held.is_empty() {
        return None;
    }
    let mut skip = ChunkedSkipper::default();
    match skip.feed(held) {
        Err(rej) => Some(rej),
        Ok(_) if skip.consumed > max_discard => Some(Reject { status: 413, why: "request body too large" }),
        Ok(_) => None,
    }
}

fn req_line<'a>(req: &Request<'a>) -> RequestLine<'a> {
    RequestLine::Parsed { method: req.method_str, target: req.target, minor: req.minor }
}

/// The first line of what the client sent, for logging a request that did not parse.
fn first_line(b: &[u8]) -> RequestLine<'_> {
    let start = b.iter().position(|&c| c != b'\r' && c != b'\n').unwrap_or(b.len());
    let b = &b[start..];
    let end = b.iter().position(|&c| c == b'\r' || c == b'\n').unwrap_or(b.len());
    RequestLine::Raw(&b[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_first_staged_send_is_one_chunk_with_the_head() {
        for head in [0, 1, 268, 4096, COPY_CHUNK / 2 - 1] {
            assert_eq!(head + stage_len(head), COPY_CHUNK, "head {head}");
        }
        assert_eq!(stage_len(COPY_CHUNK / 2), COPY_CHUNK);
        assert_eq!(stage_len(COPY_CHUNK), COPY_CHUNK);
    }

    #[test]
    fn refill_reads_the_range_onto_a_page_boundary() {
        let data: Vec<u8> = (0..3 * COPY_CHUNK + 5).map(|i| (i * 7 % 251) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        // A buffer whose own start is off a page boundary, and one grown on the way.
        let mut buf = Vec::with_capacity(100);
        for (want, offset) in [(COPY_CHUNK, 0), (COPY_CHUNK - 268, 1), (COPY_CHUNK, 3 * COPY_CHUNK as u64), (10, 17)] {
            let (start, n) = refill(&mut buf, &f, want, offset).unwrap();
            let off = offset as usize;
            assert_eq!(n, want.min(data.len() - off));
            assert_eq!(buf[start..].as_ptr().addr() % STAGE_ALIGN, 0);
            assert_eq!(&buf[start..], &data[off..off + n]);
        }
        assert_eq!(refill(&mut buf, &f, COPY_CHUNK, data.len() as u64).unwrap().1, 0);
    }
}
