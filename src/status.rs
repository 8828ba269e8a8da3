//! Live counters and the optional status endpoint (`[status]`), in plain text, JSON
//! (`?json`) and the Prometheus text format (`?prometheus`).

use std::fmt::Write as _;

/// Counters kept by the event loop. Plain integers: the loop is single-threaded.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub accepted: u64,
    /// Connections closed at accept because of `max_connections` or the per-IP limit.
    pub refused: u64,
    /// Connections of a PROXY protocol listener closed for a bad, truncated or late header.
    pub proxy_errors: u64,
    /// Times `defer_accept = "auto"` turned deferred accept on (silent connections came).
    pub defer_switches: u64,
    pub requests: u64,
    /// Body bytes sent.
    pub bytes: u64,
    /// Responses by status class: index 1 = 1xx … 5 = 5xx.
    pub classes: [u64; 6],
    /// Of `requests`, those that came over HTTP/2.
    pub http2_requests: u64,
    /// Of `requests`, those whose response did not complete: the client closed or reset the
    /// connection (or the HTTP/2 stream), or a deadline or the end of `shutdown_timeout`
    /// cut it. Each is also counted as a response of its status (499 if none had started).
    pub aborted: u64,
    /// TLS handshakes (all zero without TLS listeners).
    pub tls: TlsCounters,
    /// HTTP/3 (all zero unless `[http3] enabled`).
    pub http3: Http3Counters,
}

/// HTTP/3 requests and QUIC connections (see `crate::quic`: the endpoint's defences).
#[derive(Clone, Debug, Default)]
pub struct Http3Counters {
    /// Of `requests`, those that came over HTTP/3.
    pub requests: u64,
    /// Gauges: QUIC connections open now, and of them those whose handshake is in progress.
    pub open: u64,
    pub handshaking: u64,
    /// QUIC connections accepted, of them those whose client address was already validated
    /// (a Retry or NEW_TOKEN token), and those whose handshake completed.
    pub connections: u64,
    pub validated: u64,
    pub handshakes: u64,
    /// New connections that could not be accepted (a bad Initial or token, a handshake error
    /// at once).
    pub handshake_failures: u64,
    /// New connections refused (CONNECTION_REFUSED), by reason: `max_connections`, `[http3]
    /// max_connections_per_ip`, the server stopping.
    pub refused_full: u64,
    pub refused_per_ip: u64,
    pub refused_stopping: u64,
    /// Retry packets sent (`[http3] retry`).
    pub retries: u64,
    /// Stateless resets sent (packets for connections this server does not know, RFC 9000
    /// §10.3) and Version Negotiation packets.
    pub stateless_resets: u64,
    pub version_negotiations: u64,
    /// Of closed connections: QUIC packets sent, those declared lost (their data sent again),
    /// and congestion events (each loss episode that cut a congestion window).
    pub packets_sent: u64,
    pub packets_lost: u64,
    pub congestion_events: u64,
    /// Connections the server closed in their defence (`quic::guard`): past `[http3]
    /// reset_budget` (Rapid Reset) or `flood_budget`, no response bytes taken for `[http]
    /// send_timeout`, and responses taken slower than `[http] min_send_rate`.
    pub closed_reset_budget: u64,
    pub closed_flood_budget: u64,
    pub closed_send_timeout: u64,
    pub closed_min_send_rate: u64,
}

impl Http3Counters {
    /// The connection counters as the status page names them.
    fn rows(&self) -> [(&'static str, u64); 8] {
        [
            ("accepted", self.connections),
            ("validated", self.validated),
            ("handshakes", self.handshakes),
            ("handshake_failures", self.handshake_failures),
            ("refused", self.refused_full + self.refused_per_ip + self.refused_stopping),
            ("retries", self.retries),
            ("stateless_resets", self.stateless_resets),
            ("version_negotiations", self.version_negotiations),
        ]
    }

    /// The refusals by reason.
    fn refusals(&self) -> [(&'static str, u64); 3] {
        [("max_connections", self.refused_full), ("per_ip", self.refused_per_ip), ("stopping", self.refused_stopping)]
    }

    /// The gauges.
    fn gauges(&self) -> [(&'static str, u64); 2] {
        [("open", self.open), ("handshaking", self.handshaking)]
    }

    /// The connections closed in their defence, by reason (the key that closed them).
    fn closes(&self) -> [(&'static str, u64); 4] {
        [
            ("reset_budget", self.closed_reset_budget),
            ("flood_budget", self.closed_flood_budget),
            ("send_timeout", self.closed_send_timeout),
            ("min_send_rate", self.closed_min_send_rate),
        ]
    }

    /// The transport's packets and losses.
    fn packets(&self) -> [(&'static str, u64); 3] {
        [("sent", self.packets_sent), ("lost", self.packets_lost), ("congestion_events", self.congestion_events)]
    }
}

/// How TLS handshakes ended.
#[derive(Clone, Debug, Default)]
pub struct TlsCounters {
    /// Handshakes completed, by version, and how many of them resumed a session.
    pub tls13: u64,
    pub tls12: u64,
    pub resumed: u64,
    /// Handshakes that failed: not TLS or malformed (garbage, plain HTTP, bad records).
    pub bad_input: u64,
    /// No protocol version, cipher suite, group or ALPN protocol in common.
    pub incompatible: u64,
    /// The client gave up with an alert (often: it does not trust the certificate).
    pub alert: u64,
    /// Past `handshake_timeout`.
    pub timeout: u64,
    /// The client closed or reset the connection during the handshake.
    pub closed: u64,
    /// Any other error.
    pub other: u64,
}

impl TlsCounters {
    /// Failed handshakes by kind, as the status page names them.
    fn failures(&self) -> [(&'static str, u64); 6] {
        [
            ("bad_input", self.bad_input),
            ("incompatible", self.incompatible),
            ("alert", self.alert),
            ("timeout", self.timeout),
            ("closed", self.closed),
            ("other", self.other),
        ]
    }
}

impl Counters {
    pub fn response(&mut self, status: u16, body_bytes: u64) {
        self.requests += 1;
        self.bytes += body_bytes;
        if let Some(c) = self.classes.get_mut(usize::from(status / 100)) {
            *c += 1;
        }
    }
}

/// Connections by state at the moment of the snapshot.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnStates {
    pub idle: u64,
    pub reading: u64,
    pub writing: u64,
    pub closing: u64,
}

/// Everything the status page shows.
pub struct Snapshot<'a> {
    pub version: &'a str,
    pub pid: u32,
    pub uptime_secs: u64,
    /// When the process started (Unix seconds): after an upgrade, the new binary's start.
    pub started_unix: u64,
    pub conns: ConnStates,
    pub counters: &'a Counters,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_entries: u64,
    pub cache_bytes: u64,
    /// Password verifications started (`.htpasswd`; remembered outcomes are not counted).
    pub auth_verifications: u64,
    /// On-demand compression (zeros when it is not built or not used).
    pub compression: Compression,
    pub config_file: &'a str,
    pub config_loaded: &'a str,
    /// Whether there are TLS listeners (the TLS counters are shown then).
    pub tls: bool,
    /// Whether HTTP/3 is on (its connection counters are shown then).
    pub http3: bool,
    /// Whether the listeners defer accepts now (TCP_DEFER_ACCEPT).
    pub deferring: bool,
    /// Certificates obtained by ACME (`[acme]`), by name.
    pub certificates: Vec<CertStatus>,
}

/// One `[acme]` name's certificate: when it expires, the next attempt (renewal, or retry
/// after a failure), the last error.
#[derive(Clone, Debug, Default)]
pub struct CertStatus {
    pub name: String,
    pub not_after: Option<std::time::SystemTime>,
    pub next: Option<std::time::SystemTime>,
    pub last_error: Option<String>,
}

/// Seconds since the epoch, 0 for none.
fn epoch(t: Option<std::time::SystemTime>) -> u64 {
    t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs())
}

/// On-demand compression's counters (`crate::ondemand`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Compression {
    /// Variants made.
    pub compressed: u64,
    /// Bytes saved by the variants made (file size minus variant size, once per variant).
    pub bytes_saved: u64,
    /// Jobs dropped because the queue was full (identity was served).
    pub queue_drops: u64,
    /// Files in the variants cache, and the compressed bytes it holds.
    pub entries: u64,
    pub bytes: u64,
}

/// The output format asked for by the query string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Prometheus,
}

impl Format {
    pub fn from_query(q: Option<&str>) -> Format {
        match q {
            Some(q) if q.split('&').any(|p| p == "json" || p == "format=json") => Format::Json,
            Some(q) if q.split('&').any(|p| p == "prometheus" || p == "format=prometheus") => Format::Prometheus,
            _ => Format::Text,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; charset=utf-8",
            Format::Json => "application/json",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// Renders the snapshot.
pub fn render(s: &Snapshot<'_>, format: Format, out: &mut Vec<u8>) {
    let mut t = String::new();
    let c = s.counters;
    let classes = ["1xx", "2xx", "3xx", "4xx", "5xx"];
    match format {
        Format::Text => {
            let _ = writeln!(t, "ferrohttpd {} (pid {})", s.version, s.pid);
            let _ = writeln!(t, "uptime_seconds: {}", s.uptime_secs);
            let started = std::time::UNIX_EPOCH + std::time::Duration::from_secs(s.started_unix);
            let _ = writeln!(t, "started: {}", httpdate::fmt_http_date(started));
            let _ = writeln!(
                t,
                "connections: idle {} reading {} writing {} closing {}",
                s.conns.idle, s.conns.reading, s.conns.writing, s.conns.closing
            );
            let _ = writeln!(t, "connections_accepted: {}", c.accepted);
            let _ = writeln!(t, "connections_refused: {}", c.refused);
            let _ = writeln!(t, "proxy_header_errors: {}", c.proxy_errors);
            let on = if s.deferring { "on" } else { "off" };
            let _ = writeln!(t, "defer_accept: {on} switched_on {}", c.defer_switches);
            let _ = writeln!(t, "requests: {}", c.requests);
            let _ = writeln!(t, "requests_http2: {}", c.http2_requests);
            let _ = writeln!(t, "requests_http3: {}", c.http3.requests);
            let _ = writeln!(t, "requests_aborted: {}", c.aborted);
            let _ = writeln!(t, "bytes_sent: {}", c.bytes);
            for (i, name) in classes.iter().enumerate() {
                let _ = writeln!(t, "responses_{name}: {}", c.classes[i + 1]);
            }
            let _ = writeln!(
                t,
                "cache: hits {} misses {} entries {} bytes {}",
                s.cache_hits, s.cache_misses, s.cache_entries, s.cache_bytes
            );
            let _ = writeln!(t, "auth_verifications: {}", s.auth_verifications);
            if s.tls {
                let l = &c.tls;
                let _ = writeln!(t, "tls_handshakes: tls1.3 {} tls1.2 {} resumed {}", l.tls13, l.tls12, l.resumed);
                let _ = write!(t, "tls_handshake_failures:");
                for (k, v) in l.failures() {
                    let _ = write!(t, " {k} {v}");
                }
                t.push('\n');
            }
            if s.http3 {
                let h = &c.http3;
                let _ = write!(t, "http3_connections:");
                for (k, v) in h.gauges().into_iter().chain(h.rows()) {
                    let _ = write!(t, " {k} {v}");
                }
                let _ = write!(t, "\nhttp3_refused:");
                for (k, v) in h.refusals() {
                    let _ = write!(t, " {k} {v}");
                }
                let _ = write!(t, "\nhttp3_packets:");
                for (k, v) in h.packets() {
                    let _ = write!(t, " {k} {v}");
                }
                let _ = write!(t, "\nhttp3_closed:");
                for (k, v) in h.closes() {
                    let _ = write!(t, " {k} {v}");
                }
                t.push('\n');
            }
            let z = &s.compression;
            let _ = writeln!(
                t,
                "compression: compressed {} bytes_saved {} queue_drops {} entries {} bytes {}",
                z.compressed, z.bytes_saved, z.queue_drops, z.entries, z.bytes
            );
            for a in &s.certificates {
                let date = |t: Option<std::time::SystemTime>| t.map_or_else(|| "-".into(), httpdate::fmt_http_date);
                let _ = write!(t, "acme: {} expires {} next {}", a.name, date(a.not_after), date(a.next));
                let _ = writeln!(t, " last_error {}", a.last_error.as_deref().unwrap_or("-"));
            }
            let _ = writeln!(t, "config: {} (loaded {})", s.config_file, s.config_loaded);
        }
        Format::Json => {
            let _ = write!(
                t,
                "{{\"version\":\"{}\",\"pid\":{},\"uptime_seconds\":{},\"started_unix\":{},\
                 \"connections\":{{\"idle\":{},\"reading\":{},\"writing\":{},\"closing\":{},\"accepted\":{},\"refused\":{},\"proxy_header_errors\":{}}},\
                 \"defer_accept\":{{\"on\":{},\"switched_on\":{}}},\
                 \"requests\":{},\"requests_http2\":{},\"requests_http3\":{},\"requests_aborted\":{},\"bytes_sent\":{},\"responses\":{{",
                s.version,
                s.pid,
                s.uptime_secs,
                s.started_unix,
                s.conns.idle,
                s.conns.reading,
                s.conns.writing,
                s.conns.closing,
                c.accepted,
                c.refused,
                c.proxy_errors,
                s.deferring,
                c.defer_switches,
                c.requests,
                c.http2_requests,
                c.http3.requests,
                c.aborted,
                c.bytes
            );
            for (i, name) in classes.iter().enumerate() {
                let _ = write!(t, "{}\"{name}\":{}", if i > 0 { "," } else { "" }, c.classes[i + 1]);
            }
            let _ = write!(
                t,
                "}},\"cache\":{{\"hits\":{},\"misses\":{},\"entries\":{},\"bytes\":{}}},\
                 \"auth_verifications\":{},\"compression\":{{\"compressed\":{},\"bytes_saved\":{},\
                 \"queue_drops\":{},\"entries\":{},\"bytes\":{}}},",
                s.cache_hits,
                s.cache_misses,
                s.cache_entries,
                s.cache_bytes,
                s.auth_verifications,
                s.compression.compressed,
                s.compression.bytes_saved,
                s.compression.queue_drops,
                s.compression.entries,
                s.compression.bytes
            );
            if s.tls {
                let l = &c.tls;
                let _ = write!(
                    t,
                    "\"tls\":{{\"handshakes\":{{\"tls1.3\":{},\"tls1.2\":{},\"resumed\":{}}},\"failures\":{{",
                    l.tls13, l.tls12, l.resumed
                );
                for (i, (k, v)) in l.failures().into_iter().enumerate() {
                    let _ = write!(t, "{}\"{k}\":{v}", if i > 0 { "," } else { "" });
                }
                t.push_str("}},");
            }
            if s.http3 {
                let h = &c.http3;
                t.push_str("\"http3_connections\":{");
                for (i, (k, v)) in h.gauges().into_iter().chain(h.rows()).enumerate() {
                    let _ = write!(t, "{}\"{k}\":{v}", if i > 0 { "," } else { "" });
                }
                t.push_str("},\"http3_refused\":{");
                for (i, (k, v)) in h.refusals().into_iter().enumerate() {
                    let _ = write!(t, "{}\"{k}\":{v}", if i > 0 { "," } else { "" });
                }
                t.push_str("},\"http3_packets\":{");
                for (i, (k, v)) in h.packets().into_iter().enumerate() {
                    let _ = write!(t, "{}\"{k}\":{v}", if i > 0 { "," } else { "" });
                }
                t.push_str("},\"http3_closed\":{");
                for (i, (k, v)) in h.closes().into_iter().enumerate() {
                    let _ = write!(t, "{}\"{k}\":{v}", if i > 0 { "," } else { "" });
                }
                t.push_str("},");
            }
            if !s.certificates.is_empty() {
                t.push_str("\"acme\":[");
                for (i, a) in s.certificates.iter().enumerate() {
                    let mut err = Vec::new();
                    if let Some(e) = &a.last_error {
                        err.push(b'"');
                        crate::log::escape_json(&mut err, e.as_bytes());
                        err.push(b'"');
                    } else {
                        err.extend_from_slice(b"null");
                    }
                    let _ = write!(
                        t,
                        "{}{{\"name\":\"{}\",\"expires\":{},\"next\":{},\"last_error\":{}}}",
                        if i > 0 { "," } else { "" },
                        a.name,
                        epoch(a.not_after),
                        epoch(a.next),
                        String::from_utf8_lossy(&err)
                    );
                }
                t.push_str("],");
            }
            t.push_str("\"config\":{\"file\":\"");
            let mut esc = Vec::new();
            crate::log::escape_json(&mut esc, s.config_file.as_bytes());
            t.push_str(&String::from_utf8_lossy(&esc));
            let _ = writeln!(t, "\",\"loaded\":\"{}\"}}}}", s.config_loaded);
        }
        Format::Prometheus => {
            let mut metric = |name: &str, kind: &str, help: &str, rows: &[(&str, u64)]| {
                let _ = writeln!(t, "# HELP ferrohttpd_{name} {help}");
                let _ = writeln!(t, "# TYPE ferrohttpd_{name} {kind}");
                for (labels, v) in rows {
                    let _ = writeln!(t, "ferrohttpd_{name}{labels} {v}");
                }
            };
            metric("uptime_seconds", "gauge", "Seconds since start.", &[("", s.uptime_secs)]);
            metric("start_time_seconds", "gauge", "Start of the process, Unix seconds.", &[("", s.started_unix)]);
            if !s.certificates.is_empty() {
                let rows: Vec<(String, u64)> =
                    s.certificates.iter().map(|a| (format!("{{name=\"{}\"}}", a.name), epoch(a.not_after))).collect();
                let rows: Vec<(&str, u64)> = rows.iter().map(|(l, v)| (l.as_str(), *v)).collect();
                metric(
                    "acme_certificate_expiry_seconds",
                    "gauge",
                    "When each ACME certificate expires (0: none yet).",
                    &rows,
                );
            }
            metric(
                "connections",
                "gauge",
                "Open connections by state.",
                &[
                    ("{state=\"idle\"}", s.conns.idle),
                    ("{state=\"reading\"}", s.conns.reading),
                    ("{state=\"writing\"}", s.conns.writing),
                    ("{state=\"closing\"}", s.conns.closing),
                ],
            );
            metric("connections_accepted_total", "counter", "Connections accepted.", &[("", c.accepted)]);
            metric("connections_refused_total", "counter", "Connections refused at a limit.", &[("", c.refused)]);
            metric(
                "proxy_header_errors_total",
                "counter",
                "Connections closed for a bad, truncated or late PROXY protocol header.",
                &[("", c.proxy_errors)],
            );
            metric(
                "defer_accept",
                "gauge",
                "1 while the listeners defer accepts (TCP_DEFER_ACCEPT).",
                &[("", u64::from(s.deferring))],
            );
            metric(
                "defer_accept_switched_on_total",
                "counter",
                "Times defer_accept = \"auto\" turned deferral on.",
                &[("", c.defer_switches)],
            );
            metric("requests_total", "counter", "Requests answered.", &[("", c.requests)]);
            metric("http2_requests_total", "counter", "Of them, over HTTP/2.", &[("", c.http2_requests)]);
            metric("http3_requests_total", "counter", "Of them, over HTTP/3.", &[("", c.http3.requests)]);
            metric(
                "aborted_requests_total",
                "counter",
                "Of them, responses that did not complete (client gone, deadline, shutdown).",
                &[("", c.aborted)],
            );
            metric("sent_bytes_total", "counter", "Body bytes sent.", &[("", c.bytes)]);
            let rows: Vec<(String, u64)> =
                classes.iter().enumerate().map(|(i, n)| (format!("{{class=\"{n}\"}}"), c.classes[i + 1])).collect();
            let rows: Vec<(&str, u64)> = rows.iter().map(|(l, v)| (l.as_str(), *v)).collect();
            metric("responses_total", "counter", "Responses by status class.", &rows);
            metric("cache_hits_total", "counter", "File cache hits.", &[("", s.cache_hits)]);
            metric("cache_misses_total", "counter", "File cache misses.", &[("", s.cache_misses)]);
            metric("cache_entries", "gauge", "File cache entries.", &[("", s.cache_entries)]);
            metric("cache_mapped_bytes", "gauge", "Bytes mapped by the file cache.", &[("", s.cache_bytes)]);
            metric(
                "auth_verifications_total",
                "counter",
                "Password verifications started.",
                &[("", s.auth_verifications)],
            );
            if s.tls {
                let l = &c.tls;
                metric(
                    "tls_handshakes_total",
                    "counter",
                    "TLS handshakes completed, by version.",
                    &[("{version=\"tls1.3\"}", l.tls13), ("{version=\"tls1.2\"}", l.tls12)],
                );
                metric("tls_resumed_total", "counter", "TLS handshakes that resumed a session.", &[("", l.resumed)]);
                let rows: Vec<(String, u64)> =
                    l.failures().iter().map(|(k, v)| (format!("{{kind=\"{k}\"}}"), *v)).collect();
                let rows: Vec<(&str, u64)> = rows.iter().map(|(l, v)| (l.as_str(), *v)).collect();
                metric("tls_handshake_failures_total", "counter", "TLS handshakes that failed, by kind.", &rows);
            }
            if s.http3 {
                let h = &c.http3;
                let labelled = |label: &str, rows: &[(&str, u64)]| -> Vec<(String, u64)> {
                    rows.iter().map(|(k, v)| (format!("{{{label}=\"{k}\"}}"), *v)).collect()
                };
                for (name, kind, help, label, rows) in [
                    ("http3_connections", "gauge", "QUIC connections now, by state.", "state", &h.gauges()[..]),
                    ("http3_connections_total", "counter", "QUIC connections, by event.", "event", &h.rows()[..]),
                    (
                        "http3_refused_total",
                        "counter",
                        "New QUIC connections refused, by reason.",
                        "reason",
                        &h.refusals()[..],
                    ),
                    (
                        "http3_packets_total",
                        "counter",
                        "QUIC packets of closed connections: sent, lost, and congestion events.",
                        "event",
                        &h.packets()[..],
                    ),
                    (
                        "http3_closed_total",
                        "counter",
                        "QUIC connections the server closed in its defence, by the limit that closed them.",
                        "reason",
                        &h.closes()[..],
                    ),
                ] {
                    let rows = labelled(label, rows);
                    let rows: Vec<(&str, u64)> = rows.iter().map(|(l, v)| (l.as_str(), *v)).collect();
                    metric(name, kind, help, &rows);
                }
            }
            let z = &s.compression;
            metric("compressed_total", "counter", "Variants compressed on demand.", &[("", z.compressed)]);
            metric(
                "compression_saved_bytes_total",
                "counter",
                "Bytes saved by the variants made.",
                &[("", z.bytes_saved)],
            );
            metric(
                "compression_queue_drops_total",
                "counter",
                "Compressions dropped, queue full.",
                &[("", z.queue_drops)],
            );
            metric("compression_cache_entries", "gauge", "Files in the variants cache.", &[("", z.entries)]);
            metric("compression_cache_bytes", "gauge", "Compressed bytes in the variants cache.", &[("", z.bytes)]);
        }
    }
    out.extend_from_slice(t.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let mut c = Counters::default();
        c.tls.tls13 = 7;
        c.tls.timeout = 2;
        c.response(200, 10);
        c.response(404, 5);
        let s = Snapshot {
            version: "0",
            pid: 1,
            uptime_secs: 3,
            started_unix: 1_764_892_800,
            conns: ConnStates::default(),
            counters: &c,
            cache_hits: 1,
            cache_misses: 2,
            cache_entries: 3,
            cache_bytes: 4,
            auth_verifications: 0,
            compression: Compression::default(),
            config_file: "a\"b",
            config_loaded: "now",
            tls: true,
            http3: false,
            deferring: true,
            certificates: vec![CertStatus {
                name: "a.example".into(),
                not_after: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(86_400)),
                next: None,
                last_error: Some("CA \"down\"".into()),
            }],
        };
        let mut out = Vec::new();
        render(&s, Format::Json, &mut out);
        let j = String::from_utf8(out).unwrap();
        assert!(j.contains("\"requests\":2") && j.contains("\"2xx\":1") && j.contains("\"4xx\":1"), "{j}");
        assert!(j.contains("a\\\"b"));
        assert!(j.contains("\"uptime_seconds\":3,\"started_unix\":1764892800,"), "{j}");
        let acme =
            "\"acme\":[{\"name\":\"a.example\",\"expires\":86400,\"next\":0,\"last_error\":\"CA \\\"down\\\"\"}]";
        assert!(j.contains(acme), "{j}");
        assert!(j.contains("\"defer_accept\":{\"on\":true,\"switched_on\":0}"), "{j}");
        assert!(j.contains("\"tls\":{\"handshakes\":{\"tls1.3\":7,") && j.contains("\"timeout\":2,"), "{j}");
        let mut out = Vec::new();
        render(&s, Format::Prometheus, &mut out);
        let p = String::from_utf8(out).unwrap();
        assert!(p.contains("ferrohttpd_responses_total{class=\"4xx\"} 1"), "{p}");
        assert!(p.contains("ferrohttpd_defer_accept 1\n"), "{p}");
        assert!(p.contains("ferrohttpd_start_time_seconds 1764892800\n"), "{p}");
        assert!(p.contains("ferrohttpd_tls_handshake_failures_total{kind=\"timeout\"} 2"), "{p}");
        let mut out = Vec::new();
        render(&s, Format::Text, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("bytes_sent: 15")
                && text.contains("defer_accept: on switched_on 0\n")
                && text.contains("started: Fri, 05 Dec 2025 00:00:00 GMT\n")
                && text.contains("tls_handshakes: tls1.3 7 tls1.2 0 resumed 0"),
            "{text}"
        );
        assert!(!text.contains("http3_connections"), "{text}");
        assert_eq!(Format::from_query(Some("json")), Format::Json);
        assert_eq!(Format::from_query(Some("a=1&format=prometheus")), Format::Prometheus);
        assert_eq!(Format::from_query(None), Format::Text);
    }

    /// The QUIC counters in the three formats, gauges apart from counters, refusals by reason.
    #[test]
    fn http3_counters() {
        let mut c = Counters::default();
        let h = &mut c.http3;
        (h.open, h.handshaking, h.connections, h.validated, h.retries) = (5, 2, 9, 3, 40);
        (h.refused_full, h.refused_per_ip, h.refused_stopping, h.stateless_resets) = (1, 2, 4, 6);
        (h.packets_sent, h.packets_lost, h.congestion_events) = (1000, 12, 3);
        let s = Snapshot {
            version: "0",
            pid: 1,
            uptime_secs: 3,
            started_unix: 0,
            conns: ConnStates::default(),
            counters: &c,
            cache_hits: 0,
            cache_misses: 0,
            cache_entries: 0,
            cache_bytes: 0,
            auth_verifications: 0,
            compression: Compression::default(),
            config_file: "",
            config_loaded: "",
            tls: true,
            http3: true,
            deferring: false,
            certificates: Vec::new(),
        };
        let out = |f| {
            let mut out = Vec::new();
            render(&s, f, &mut out);
            String::from_utf8(out).unwrap()
        };
        let text = out(Format::Text);
        assert!(
            text.contains(
                "http3_connections: open 5 handshaking 2 accepted 9 validated 3 handshakes 0 handshake_failures 0 \
                 refused 7 retries 40 stateless_resets 6 version_negotiations 0\n\
                 http3_refused: max_connections 1 per_ip 2 stopping 4\n\
                 http3_packets: sent 1000 lost 12 congestion_events 3\n"
            ),
            "{text}"
        );
        let j = out(Format::Json);
        assert!(j.contains("\"http3_connections\":{\"open\":5,\"handshaking\":2,\"accepted\":9,"), "{j}");
        assert!(j.contains("\"http3_refused\":{\"max_connections\":1,\"per_ip\":2,\"stopping\":4},"), "{j}");
        assert!(j.contains("\"http3_packets\":{\"sent\":1000,\"lost\":12,\"congestion_events\":3},"), "{j}");
        let p = out(Format::Prometheus);
        for line in [
            "# TYPE ferrohttpd_http3_connections gauge\n",
            "ferrohttpd_http3_connections{state=\"handshaking\"} 2\n",
            "ferrohttpd_http3_connections_total{event=\"retries\"} 40\n",
            "ferrohttpd_http3_refused_total{reason=\"per_ip\"} 2\n",
            "ferrohttpd_http3_packets_total{event=\"lost\"} 12\n",
        ] {
            assert!(p.contains(line), "{line}: {p}");
        }
    }
}
