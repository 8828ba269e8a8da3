//! thttpd 2.29 compatibility: the pieces that let ferrohttpd replace thttpd unchanged.
//!
//! Each file is one self-contained part of thttpd's interface (see `THTTPD.md`):
//!
//! - [`args`]: the command line (`-p -d -r …`, left to right) and the `-C` config-file format,
//!   parsed into [`args::Settings`]; the caller applies defaults and builds the typed config.
//! - [`privs`]: chroot, user switch, daemonising and the pid file, in thttpd's start-up order.
//! - [`syslog`]: a small syslog client over `/dev/log` (LOG_DAEMON), thttpd's default log.
//!
//! The features thttpd brought that are general now (`.htpasswd` authentication, the
//! referrer check, throttles) are in [`crate::access`]; this module keeps the personality.
//! Nothing here touches sockets of the server or the event loop; everything that can be pure
//! is pure and unit-tested beside its code.

pub mod args;
pub mod privs;
pub mod syslog;
