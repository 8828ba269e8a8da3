//! thttpd 2.29 compatibility: the pieces that let ferrohttpd replace thttpd unchanged.
//!
//! Each file is one self-contained part of thttpd's interface (see `THTTPD.md`):
//!
//! - [`args`]: the command line (`-p -d -r …`, left to right) and the `-C` config-file format,
//!   parsed into [`args::Settings`]; the caller applies defaults and builds the typed config.
//! - [`throttle`]: the throttle file, thttpd's per-pattern accounting (admission with 503,
//!   fair share of each pattern's maximum) and a token-bucket [`throttle::RateLimiter`] that
//!   the event loop drives with timers (no sleeping, no threads).
//! - [`auth`]: `.htpasswd` Basic authentication with crypt(3)-style hashes and bcrypt.
//! - [`referer`]: the `urlpat` / `localpat` / `noemptyreferrers` referrer check.
//! - [`privs`]: chroot, user switch, daemonising and the pid file, in thttpd's start-up order.
//! - [`syslog`]: a small syslog client over `/dev/log` (LOG_DAEMON), thttpd's default log.
//!
//! Nothing here touches sockets of the server or the event loop; everything that can be pure
//! is pure and unit-tested beside its code.

pub mod args;
pub mod auth;
pub mod privs;
pub mod referer;
pub mod syslog;
pub mod throttle;
