//! The static table (RFC 7541 Appendix A) and the bounded dynamic table (§2.3.2, §4).

use std::collections::VecDeque;

/// The static table; HPACK index `i` (1..=61) is `STATIC[i - 1]`.
pub(crate) const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The first static index whose name is `name`: one `match` (the compiler dispatches on the
/// length, then compares), not a scan of 61 strings. A unit test keeps it in step with
/// [`STATIC`].
pub(crate) fn static_name_index(name: &[u8]) -> Option<usize> {
    Some(match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// The overhead the RFC counts per entry (§4.1).
pub(crate) const ENTRY_OVERHEAD: usize = 32;

/// The dynamic table: a FIFO of entries whose RFC size (name + value + 32 each) never
/// exceeds `max`.
///
/// The bytes of all entries live in one buffer, oldest first, appended at the end; the
/// entry records are offsets into it. Eviction only moves the oldest record out; when an
/// append would run past twice the table size, the live bytes (at most `max`) move to the
/// front. So an insertion allocates nothing once the buffer has grown to its working size,
/// and the buffer never holds more than `2 * max` bytes, plus one record per 32 bytes of
/// table.
pub(crate) struct DynTable {
    buf: Vec<u8>,
    /// Newest first: HPACK index 62 is `entries[0]`.
    entries: VecDeque<Entry>,
    /// The RFC size of the entries.
    size: usize,
    /// The current maximum size (set by size updates, at most the protocol's limit).
    max: usize,
}

#[derive(Clone, Copy)]
struct Entry {
    start: usize,
    name_len: usize,
    value_len: usize,
}

impl DynTable {
    pub(crate) fn new(max: usize) -> DynTable {
        DynTable { buf: Vec::new(), entries: VecDeque::new(), size: 0, max }
    }

    pub(crate) fn size(&self) -> usize {
        self.size
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Sets the maximum size, evicting the oldest entries until the table fits.
    pub(crate) fn set_max(&mut self, max: usize) {
        self.max = max;
        while self.size > max {
            self.evict();
        }
    }

    /// Entry `i` (0 = newest, HPACK index 62).
    pub(crate) fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let e = self.entries.get(i)?;
        let name_end = e.start + e.name_len;
        Some((&self.buf[e.start..name_end], &self.buf[name_end..name_end + e.value_len]))
    }

    /// Adds a new entry, evicting as §4.4 says: the oldest go until the new one fits, and an
    /// entry larger than the table empties it and is not added (that is not an error).
    pub(crate) fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max {
            self.entries.clear();
            self.buf.clear();
            self.size = 0;
            return;
        }
        while self.size + size > self.max {
            self.evict();
        }
        let need = name.len() + value.len();
        if self.buf.len() + need > self.max.saturating_mul(2) {
            self.compact();
        }
        let start = self.buf.len();
        self.buf.extend_from_slice(name);
        self.buf.extend_from_slice(value);
        self.entries.push_front(Entry { start, name_len: name.len(), value_len: value.len() });
        self.size += size;
    }

    /// The index (0 = newest) of an entry equal to `name: value`, looking at the `window`
    /// newest entries only.
    pub(crate) fn find(&self, name: &[u8], value: &[u8], window: usize) -> Option<usize> {
        self.entries.iter().take(window).position(|e| {
            e.name_len == name.len()
                && e.value_len == value.len()
                && &self.buf[e.start..e.start + e.name_len] == name
                && &self.buf[e.start + e.name_len..e.start + e.name_len + e.value_len] == value
        })
    }

    fn evict(&mut self) {
        if let Some(e) = self.entries.pop_back() {
            self.size -= e.name_len + e.value_len + ENTRY_OVERHEAD;
        }
        if self.entries.is_empty() {
            self.buf.clear();
        }
    }

    /// Moves the live bytes (those of the oldest entry onward) to the front of the buffer.
    fn compact(&mut self) {
        let Some(lo) = self.entries.back().map(|e| e.start) else {
            self.buf.clear();
            return;
        };
        self.buf.copy_within(lo.., 0);
        self.buf.truncate(self.buf.len() - lo);
        for e in &mut self.entries {
            e.start -= lo;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_name_index_agrees_with_the_table() {
        for (i, (name, _)) in STATIC.iter().enumerate() {
            let first = STATIC.iter().position(|(n, _)| n == name).unwrap() + 1;
            assert_eq!(static_name_index(name), Some(first), "{}", String::from_utf8_lossy(name));
            assert!(first <= i + 1);
        }
        assert_eq!(static_name_index(b"x-unknown"), None);
        assert_eq!(static_name_index(b"Date"), None);
    }

    #[test]
    fn eviction_compaction_and_oversized_entries() {
        let mut t = DynTable::new(100);
        t.insert(b"a", b"1"); // 34
        t.insert(b"b", b"2"); // 68
        assert_eq!((t.len(), t.size()), (2, 68));
        t.insert(b"c", b"3"); // evicts a
        assert_eq!((t.len(), t.size()), (2, 68));
        assert_eq!(t.get(0), Some((&b"c"[..], &b"3"[..])));
        assert_eq!(t.get(1), Some((&b"b"[..], &b"2"[..])));
        assert_eq!(t.get(2), None);
        // Many more insertions: the buffer compacts and stays within 2 * max.
        for i in 0..1000u32 {
            let v = i.to_string();
            t.insert(b"name", v.as_bytes());
            assert!(t.size() <= 100);
            assert!(t.buf.len() <= 200);
            assert_eq!(t.get(0), Some((&b"name"[..], v.as_bytes())));
        }
        assert_eq!(t.find(b"name", b"999", 16), Some(0));
        assert_eq!(t.find(b"name", b"998", 16), Some(1));
        assert_eq!(t.find(b"name", b"998", 1), None);
        // Larger than the table: empties it.
        t.insert(b"big", &[b'x'; 80]);
        assert_eq!((t.len(), t.size()), (0, 0));
        // Shrinking evicts.
        t.insert(b"a", b"1");
        t.insert(b"b", b"2");
        t.set_max(40);
        assert_eq!((t.len(), t.size()), (1, 34));
        assert_eq!(t.get(0), Some((&b"b"[..], &b"2"[..])));
        t.set_max(0);
        assert_eq!((t.len(), t.size()), (0, 0));
    }
}
