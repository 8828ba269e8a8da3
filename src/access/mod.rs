//! Access control and pacing, for both personalities: who may fetch a file, and how fast.
//!
//! - [`auth`]: Basic authentication against htpasswd files with crypt(3)-style hashes and
//!   bcrypt: thttpd's per-directory `.htpasswd` files and the `[[auth]]` rules of the TOML
//!   file ([`auth::AuthRule`], path prefixes decided on the path served), with one cache of
//!   outcomes and verification on the helper thread for both.
//! - [`referer`]: the `urlpat` / `localpat` / `noemptyreferrers` referrer check.
//! - [`throttle`]: the throttle file or `[[throttle]]` rules, thttpd's per-pattern accounting
//!   (admission with 503, fair share of each pattern's maximum) and a token-bucket
//!   [`throttle::RateLimiter`] that the event loop drives with timers (no sleeping, no
//!   threads).
//!
//! Nothing here touches sockets or the event loop; what can be pure is pure and unit-tested
//! beside its code.

pub mod auth;
pub mod referer;
pub mod throttle;
