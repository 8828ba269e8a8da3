//! The clock of one loop turn: the `Date` header and the access log's timestamp, each
//! re-rendered at most once a second.

use std::time::{Instant, UNIX_EPOCH};

/// Time as seen by one turn of the event loop.
pub struct Clock {
    /// Monotonic time, for deadlines.
    pub now: Instant,
    /// Wall-clock seconds since the epoch of the cached strings.
    secs: u64,
    http: String,
    log: String,
}

impl Clock {
    pub fn new() -> Clock {
        let mut c = Clock { now: Instant::now(), secs: u64::MAX, http: String::new(), log: String::new() };
        c.tick();
        c
    }

    /// Reads the clocks once; re-renders the strings only when the second changed.
    ///
    /// The wall clock is read with `time(2)`: only its second is used, and the vDSO answers
    /// it from the kernel's last timer tick, a few milliseconds behind at most, for a fraction
    /// of what `SystemTime::now()` and its conversion cost on every loop turn.
    pub fn tick(&mut self) {
        self.now = Instant::now();
        // SAFETY: time(2) with a null pointer only returns the value; it writes nothing.
        let secs = u64::try_from(unsafe { libc::time(std::ptr::null_mut()) }).unwrap_or(0);
        if secs != self.secs {
            self.secs = secs;
            self.http = httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(secs));
            self.log = log_time(secs as i64);
        }
    }

    /// Seconds since the epoch (wall clock).
    pub fn unix_secs(&self) -> u64 {
        self.secs
    }

    /// `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 §5.6.7).
    pub fn http_date(&self) -> &str {
        &self.http
    }

    /// `06/Nov/1994:08:49:37 +0100`, local time, as in the Common Log Format.
    pub fn log_date(&self) -> &str {
        &self.log
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// Formats a timestamp in local time with its UTC offset, using the C library's time zone
/// rules (TZ or /etc/localtime).
fn log_time(secs: i64) -> String {
    let t = secs as libc::time_t;
    // SAFETY: `tm` is a plain C struct for which all-zero bytes are a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the duration of the call; localtime_r is the
    // thread-safe variant and writes only into `tm`.
    let ok = !unsafe { libc::localtime_r(&t, &mut tm) }.is_null();
    if !ok {
        tm.tm_gmtoff = 0;
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        tm.tm_year = (y - 1900) as i32;
        tm.tm_mon = (m - 1) as i32;
        tm.tm_mday = d as i32;
        tm.tm_hour = (rem / 3600) as i32;
        tm.tm_min = (rem / 60 % 60) as i32;
        tm.tm_sec = (rem % 60) as i32;
    }
    let off = tm.tm_gmtoff / 60;
    let sign = if off < 0 { '-' } else { '+' };
    let off = off.abs();
    format!(
        "{:02}/{}/{:04}:{:02}:{:02}:{:02} {}{:02}{:02}",
        tm.tm_mday,
        MONTHS[tm.tm_mon.clamp(0, 11) as usize],
        tm.tm_year as i64 + 1900,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        sign,
        off / 60,
        off % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(784_111_777 / 86_400), (1994, 11, 6));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn log_time_shape() {
        let s = log_time(784_111_777);
        assert_eq!(s.len(), "06/Nov/1994:08:49:37 +0000".len(), "{s}");
        assert!(s.contains("/Nov/1994:"), "{s}");
    }

    #[test]
    fn http_date_shape() {
        let c = Clock::new();
        assert_eq!(c.http_date().len(), 29);
        assert!(c.http_date().ends_with(" GMT"));
        assert!(httpdate::parse_http_date(c.http_date()).is_ok());
    }
}
