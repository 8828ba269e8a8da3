//! Behind a proxy: `[server] trusted_proxies` and the client address in the access log and
//! the status page's allow list.

mod common;

use common::*;

fn config(server: &str, status_allow: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"{{root}}\"\n{server}\n\n[status]\nenabled = true\nallow = {status_allow}\n\n\
         [log]\naccess = \"{{dir}}/access.log\"\nerror = \"-\"\n"
    )
}

fn get(srv: &Server, path: &str, headers: &str) -> Response {
    let mut s = srv.connect();
    raw(&mut s, format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n"));
    read_response(&mut s)
}

/// The client field of each access-log line.
fn clients(srv: &Server, n: usize) -> Vec<String> {
    srv.wait_access_log(n).iter().map(|l| l.split(' ').next().unwrap_or("").to_string()).collect()
}

#[test]
fn a_trusted_proxy_gives_the_client_address_walked_from_the_right() {
    let srv = Server::builder()
        .raw_config(&config("trusted_proxies = [\"127.0.0.0/8\", \"10.0.0.0/8\"]", "[\"203.0.113.7\"]"))
        .start();
    let probes = [
        ("", "127.0.0.1"),
        ("X-Forwarded-For: 203.0.113.7\r\n", "203.0.113.7"),
        // A spoofed first hop, the real client, then another proxy of ours.
        ("X-Forwarded-For: 6.6.6.6, 198.51.100.2, 10.1.2.3\r\n", "198.51.100.2"),
        ("X-Forwarded-For: [2001:db8::7]:443\r\n", "2001:db8::7"),
        (
            "Forwarded: for=192.0.2.60;proto=http, for=\"[2001:db8:cafe::17]:4711\"\r\nX-Forwarded-For: 5.5.5.5\r\n",
            "2001:db8:cafe::17",
        ),
        ("X-Forwarded-For: 10.9.9.9\r\n", "10.9.9.9"),
        ("X-Forwarded-For: 1.2.3.4, garbage\r\n", "127.0.0.1"),
        // Sent twice: ignored, not joined.
        ("X-Forwarded-For: 1.2.3.4\r\nX-Forwarded-For: 4.3.2.1\r\n", "127.0.0.1"),
    ];
    for (headers, _) in &probes {
        assert_eq!(get(&srv, "/file.txt", headers).status, 200);
    }
    let want: Vec<&str> = probes.iter().map(|(_, c)| *c).collect();
    assert_eq!(clients(&srv, probes.len()), want);

    // The status page's allow list sees the same address.
    assert_eq!(get(&srv, "/.status", "").status, 403);
    assert_eq!(get(&srv, "/.status", "X-Forwarded-For: 203.0.113.7\r\n").status, 200);
    assert_eq!(get(&srv, "/.status", "X-Forwarded-For: 203.0.113.8\r\n").status, 403);
    assert_eq!(get(&srv, "/.status", "X-Forwarded-For: 203.0.113.7, 6.6.6.6\r\n").status, 403);
}

#[test]
fn forwarded_headers_from_an_untrusted_peer_are_ignored() {
    let srv = Server::builder().raw_config(&config("trusted_proxies = [\"10.0.0.0/8\"]", "[\"127.0.0.1\"]")).start();
    assert_eq!(get(&srv, "/file.txt", "X-Forwarded-For: 203.0.113.7\r\n").status, 200);
    assert_eq!(get(&srv, "/file.txt", "Forwarded: for=203.0.113.7\r\n").status, 200);
    assert_eq!(clients(&srv, 2), ["127.0.0.1", "127.0.0.1"]);
    // A spoofed address neither opens nor closes the status page.
    assert_eq!(get(&srv, "/.status", "X-Forwarded-For: 203.0.113.7\r\n").status, 200);

    // Without trusted_proxies, the same.
    let plain = Server::builder().raw_config(&config("", "[\"203.0.113.7\"]")).start();
    assert_eq!(get(&plain, "/.status", "X-Forwarded-For: 203.0.113.7\r\n").status, 403);
}

#[test]
fn curl_behind_a_trusted_proxy() {
    let srv = Server::builder().raw_config(&config("trusted_proxies = [\"127.0.0.1\"]", "[\"::1\"]")).start();
    let url = format!("http://127.0.0.1:{}/file.txt", srv.port());
    let o = curl(&["-o", "/dev/null", "-w", "%{http_code}", "-H", "X-Forwarded-For: 192.0.2.44", &url]);
    assert_eq!(o.stdout_text(), "200", "{o:?}");
    assert_eq!(clients(&srv, 1), ["192.0.2.44"]);
}

// ---------------------------------------------------------------------------------------------
// PROXY protocol (`[server] proxy_protocol`)
// ---------------------------------------------------------------------------------------------

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrohttpd::proxy;

/// A server whose first listener (a fixed port) expects PROXY headers and whose second
/// (`srv.listen_addrs()[1]`) is plain, with `extra` in `[server]` and `[http]`.
fn proxy_server(server: &str, http: &str) -> (Server, SocketAddr) {
    let port = free_port();
    let srv = Server::builder()
        .raw_config(&format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\", \"127.0.0.1:0\"]\nroot = \"{{root}}\"\n\
             proxy_protocol = [\"127.0.0.1:{port}\"]\n{server}\n\
             [http]\n{http}\n\
             [status]\nenabled = true\nallow = [\"127.0.0.1\", \"203.0.113.7\"]\n\n\
             [log]\naccess = \"{{dir}}/access.log\"\nerror = \"-\"\n"
        ))
        .start();
    let addr = srv.addr();
    assert_eq!(addr.port(), port);
    // The second `listening on` line may still be on its way from the server's stdout.
    let start = Instant::now();
    while srv.listen_addrs().len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(5), "no second listener:\n{}", srv.stdout_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    (srv, addr)
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const REQUEST: &[u8] = b"GET /file.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// Sends `header` and a request on one connection; the response.
fn through(addr: SocketAddr, header: &[u8]) -> Response {
    let mut s = connect(addr);
    raw(&mut s, [header, REQUEST].concat());
    read_response(&mut s)
}

/// Sends `bytes` and reads until the server closes: everything it sent (nothing, for a
/// connection refused without a response). Panics if it does not close within 5 s.
fn closed_after(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = connect(addr);
    raw_lenient(&mut s, bytes);
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("no close within 5 s ({e}); got {}", show(&out)),
    }
    out
}

/// The `proxy_header_errors` count on the status page, asked on the plain listener.
fn proxy_errors(srv: &Server) -> u64 {
    let plain = srv.listen_addrs()[1];
    let mut s = connect(plain);
    raw(&mut s, "GET /.status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{}", r.describe());
    let text = r.body_text();
    let line = text.lines().find_map(|l| l.strip_prefix("proxy_header_errors: ")).unwrap_or_else(|| panic!("{text}"));
    line.parse().unwrap()
}

#[test]
fn proxy_protocol_v1_and_v2_give_the_client_address() {
    let (srv, addr) = proxy_server("", "");
    let dst4 = sa("198.51.100.1:80");
    let tlvs = [0x01, 0x00, 0x02, b'h', b'2', 0x20, 0x00, 0x01, 0x00];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (proxy::v1(Some(sa("192.0.2.10:4242")), dst4), "192.0.2.10"),
        (proxy::v1(Some(sa("[2001:db8::10]:4242")), sa("[2001:db8::1]:80")), "2001:db8::10"),
        (proxy::v1(None, dst4), "127.0.0.1"),
        (proxy::v2(Some(sa("192.0.2.20:1")), dst4, &[]), "192.0.2.20"),
        (proxy::v2(Some(sa("192.0.2.21:1")), dst4, &tlvs), "192.0.2.21"),
        (proxy::v2(Some(sa("[2001:db8::20]:1")), sa("[2001:db8::1]:443"), &tlvs), "2001:db8::20"),
        // An IPv4 client behind an IPv6 proxy hop is logged as IPv4.
        (proxy::v2(Some(sa("[::ffff:192.0.2.22]:1")), sa("[2001:db8::1]:443"), &[]), "192.0.2.22"),
        // LOCAL (the proxy's own health check): the connection's address.
        (proxy::v2(None, dst4, &[]), "127.0.0.1"),
    ];
    for (header, _) in &cases {
        let r = through(addr, header);
        assert_eq!(r.status, 200, "{}: {}", show(header), r.describe());
        assert_eq!(r.body, b"hello, world\n", "{}", show(header));
    }
    let want: Vec<&str> = cases.iter().map(|(_, c)| *c).collect();
    assert_eq!(clients(&srv, want.len()), want);
    assert_eq!(proxy_errors(&srv), 0);

    // Keep-alive: one header, then several requests on the connection.
    let mut s = connect(addr);
    raw(&mut s, proxy::v1(Some(sa("192.0.2.30:1")), dst4));
    for _ in 0..3 {
        raw(&mut s, "GET /file.txt HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(read_response(&mut s).status, 200);
    }
    // (The status request of proxy_errors came in between, on the plain listener.)
    assert_eq!(clients(&srv, want.len() + 4)[want.len()..], ["127.0.0.1", "192.0.2.30", "192.0.2.30", "192.0.2.30"]);

    // The plain listener beside it takes no header.
    let mut s = connect(srv.listen_addrs()[1]);
    raw(&mut s, REQUEST);
    assert_eq!(read_response(&mut s).status, 200);
}

#[test]
fn a_bad_or_missing_proxy_header_closes_without_a_response_and_counts() {
    let (srv, addr) = proxy_server("", "");
    let mut v2_udp = proxy::v2(Some(sa("192.0.2.1:1")), sa("192.0.2.2:2"), &[]);
    v2_udp[13] = 0x12;
    let mut v2_long = proxy::v2(Some(sa("192.0.2.1:1")), sa("192.0.2.2:2"), &[]);
    v2_long[14] = 0xff;
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("no header", REQUEST.to_vec()),
        ("TLS instead", b"\x16\x03\x01\x00\x05hello".to_vec()),
        ("bad v1", [&b"PROXY TCP4 192.0.2.1 198.51.100.1 99999 80\r\n"[..], REQUEST].concat()),
        ("v1 with LF", [&b"PROXY TCP4 192.0.2.1 198.51.100.1 1 80\n"[..], REQUEST].concat()),
        ("v1 too long", [&b"PROXY UNKNOWN "[..], &[b'x'; 120]].concat()),
        ("v2 UDP", [&v2_udp[..], REQUEST].concat()),
        ("v2 too long", [&v2_long[..], &[0u8; 64], REQUEST].concat()),
    ];
    for (what, bytes) in &bad {
        let out = closed_after(addr, bytes);
        assert!(out.is_empty(), "{what}: got {}", show(&out));
    }
    // A header cut short by the client's end.
    let mut s = connect(addr);
    raw(&mut s, b"PROXY TCP4 192.0.2.1");
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(out.is_empty(), "{}", show(&out));

    assert_eq!(proxy_errors(&srv), bad.len() as u64 + 1);
    // None of them got into the access log; the server still serves.
    assert_eq!(through(addr, &proxy::v1(Some(sa("192.0.2.9:1")), sa("192.0.2.2:2"))).status, 200);
    assert_eq!(clients(&srv, 2), ["127.0.0.1", "192.0.2.9"]);
}

#[test]
fn a_slow_proxy_header_meets_the_header_deadline() {
    let (srv, addr) = proxy_server("", "header_timeout = \"1s\"");
    let header = proxy::v2(Some(sa("192.0.2.1:1")), sa("192.0.2.2:2"), &[]);
    let start = Instant::now();
    let out = closed_after(addr, &header[..10]);
    assert!(out.is_empty(), "{}", show(&out));
    // Generous bounds: the deadline is 1 s, swept once a second.
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(4), "{took:?}");
    assert_eq!(proxy_errors(&srv), 1);
}

#[test]
fn a_proxy_header_split_across_segments_is_put_together() {
    let (srv, addr) = proxy_server("", "");
    let dst = sa("198.51.100.1:80");
    for header in [
        proxy::v1(Some(sa("192.0.2.41:1")), dst),
        proxy::v2(Some(sa("[2001:db8::41]:1")), sa("[2001:db8::1]:80"), &[3, 0, 4, 1, 2, 3, 4]),
    ] {
        let mut s = connect(addr);
        // One byte per segment for the first part, then the rest with the request.
        for b in &header[..header.len() - 3] {
            s.write_all(&[*b]).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        raw(&mut s, [&header[header.len() - 3..], REQUEST].concat());
        assert_eq!(read_response(&mut s).status, 200);
    }
    assert_eq!(clients(&srv, 2), ["192.0.2.41", "2001:db8::41"]);
    assert_eq!(proxy_errors(&srv), 0);
}

#[test]
fn the_proxy_address_is_what_limits_acls_and_trusted_proxies_see() {
    let (srv, addr) =
        proxy_server("max_connections_per_ip = 1\ntrusted_proxies = [\"10.0.0.0/8\"]", "keepalive_timeout = \"10s\"");
    let dst = sa("198.51.100.1:80");
    // Per-IP limit: two clients behind one proxy each get their connection; a second one
    // for the same client is closed.
    let mut a = connect(addr);
    raw(&mut a, proxy::v1(Some(sa("192.0.2.51:1")), dst));
    raw(&mut a, "GET /file.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(read_response(&mut a).status, 200);
    let r = through(addr, &proxy::v1(Some(sa("192.0.2.52:1")), dst));
    assert_eq!(r.status, 200);
    let out = closed_after(addr, &[proxy::v1(Some(sa("192.0.2.51:2")), dst), REQUEST.to_vec()].concat());
    assert!(out.is_empty(), "{}", show(&out));
    drop(a);

    // The status page's allow list: the address from the header.
    let status = |src: &str| {
        let mut s = connect(addr);
        raw(&mut s, proxy::v1(Some(sa(src)), dst));
        raw(&mut s, "GET /.status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        read_response(&mut s).status
    };
    assert_eq!(status("203.0.113.7:1"), 200);
    assert_eq!(status("203.0.113.8:1"), 403);

    // trusted_proxies applies on top: a header naming a trusted proxy lets its
    // X-Forwarded-For be believed; from anyone else it is ignored.
    let xff = |src: &str| {
        let mut s = connect(addr);
        raw(&mut s, proxy::v1(Some(sa(src)), dst));
        raw(&mut s, "GET /file.txt HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 192.0.2.99\r\nConnection: close\r\n\r\n");
        read_response(&mut s).status
    };
    assert_eq!(xff("10.1.1.1:1"), 200);
    assert_eq!(xff("192.0.2.60:1"), 200);
    let log = clients(&srv, 6);
    assert_eq!(log[..2], ["192.0.2.51", "192.0.2.52"]);
    assert_eq!(log[4..], ["192.0.2.99", "192.0.2.60"]);
}

#[test]
fn proxy_protocol_must_name_a_listen_address() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = d.path().join("f.toml");
    std::fs::write(
        &cfg,
        format!("[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \".\"\nproxy_protocol = [\"127.0.0.1:{port}\"]\n"),
    )
    .unwrap();
    let o = run_cli(&["--config", cfg.to_str().unwrap()], None);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("server.proxy_protocol: 127.0.0.1:") && o.stderr.contains("not an address"), "{o:?}");
}
