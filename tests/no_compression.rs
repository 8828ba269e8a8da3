//! A build without the `compression` feature (`cargo test --no-default-features`): nothing is
//! compressed on demand, even with `on_demand = true` (the shipped file's value, which such a
//! build must still load), and `ferrohttpd compress` says what is missing.
#![cfg(not(feature = "compression"))]

mod common;

use common::*;

#[test]
fn nothing_is_compressed_and_the_precompressor_is_missing() {
    let srv = Server::builder()
        .config("[compression]\non_demand = true")
        .setup(|_, root| std::fs::write(root.join("page.html"), "<p>text</p>\n".repeat(2000)).unwrap())
        .start();
    for _ in 0..3 {
        let r = srv.exchange(
            "GET /page.html HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip, br, zstd\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, 200);
        assert!(r.header("Content-Encoding").is_none(), "{}", r.describe());
        assert!(!r.header_has_token("Vary", "Accept-Encoding"), "{}", r.describe());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let dir = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(BIN).arg("compress").arg(dir.path()).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("without the `compression` feature"), "{err}");
}
