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
