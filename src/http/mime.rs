//! Content-Type by file extension: a built-in table, overridable from `[mime]`, with the
//! configured charset appended to textual types. The full header values are rendered once
//! at start-up; a lookup allocates nothing.

use std::collections::BTreeMap;

/// The fallback for unknown extensions.
pub const DEFAULT_TYPE: &str = "application/octet-stream";

const BUILTIN: &[(&str, &str)] = &[
    ("7z", "application/x-7z-compressed"),
    ("aac", "audio/aac"),
    ("apng", "image/apng"),
    ("atom", "application/atom+xml"),
    ("avif", "image/avif"),
    ("bin", "application/octet-stream"),
    ("bmp", "image/bmp"),
    ("bz2", "application/x-bzip2"),
    ("css", "text/css"),
    ("csv", "text/csv"),
    ("deb", "application/vnd.debian.binary-package"),
    ("epub", "application/epub+zip"),
    ("flac", "audio/flac"),
    ("gif", "image/gif"),
    ("gz", "application/gzip"),
    ("htm", "text/html"),
    ("html", "text/html"),
    ("ico", "image/vnd.microsoft.icon"),
    ("ics", "text/calendar"),
    ("iso", "application/x-iso9660-image"),
    ("jar", "application/java-archive"),
    ("jpeg", "image/jpeg"),
    ("jpg", "image/jpeg"),
    ("js", "text/javascript"),
    ("json", "application/json"),
    ("jsonld", "application/ld+json"),
    ("jxl", "image/jxl"),
    ("m4a", "audio/mp4"),
    ("m4v", "video/mp4"),
    ("manifest", "text/cache-manifest"),
    ("map", "application/json"),
    ("md", "text/markdown"),
    ("mjs", "text/javascript"),
    ("mkv", "video/x-matroska"),
    ("mov", "video/quicktime"),
    ("mp3", "audio/mpeg"),
    ("mp4", "video/mp4"),
    ("mpeg", "video/mpeg"),
    ("mpg", "video/mpeg"),
    ("oga", "audio/ogg"),
    ("ogg", "audio/ogg"),
    ("ogv", "video/ogg"),
    ("opus", "audio/ogg"),
    ("otf", "font/otf"),
    ("pdf", "application/pdf"),
    ("png", "image/png"),
    ("rss", "application/rss+xml"),
    ("rtf", "application/rtf"),
    ("svg", "image/svg+xml"),
    ("svgz", "image/svg+xml"),
    ("tar", "application/x-tar"),
    ("tif", "image/tiff"),
    ("tiff", "image/tiff"),
    ("toml", "application/toml"),
    ("ts", "video/mp2t"),
    ("ttf", "font/ttf"),
    ("txt", "text/plain"),
    ("wasm", "application/wasm"),
    ("wav", "audio/wav"),
    ("weba", "audio/webm"),
    ("webm", "video/webm"),
    ("webmanifest", "application/manifest+json"),
    ("webp", "image/webp"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("xhtml", "application/xhtml+xml"),
    ("xml", "application/xml"),
    ("xz", "application/x-xz"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("zip", "application/zip"),
    ("zst", "application/zstd"),
];

/// True for types whose content is text and so carries a charset parameter.
fn is_textual(ty: &str) -> bool {
    let base = ty.split(';').next().unwrap_or(ty).trim();
    base.starts_with("text/")
        || matches!(
            base,
            "application/json"
                | "application/ld+json"
                | "application/manifest+json"
                | "application/xml"
                | "application/xhtml+xml"
                | "application/atom+xml"
                | "application/rss+xml"
                | "application/toml"
                | "application/yaml"
                | "application/javascript"
        )
}

/// What a file of some Content-Type may be sent as instead of itself: decided once, when its
/// cache entry is built, so a request does no string matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Negotiation {
    /// Nothing: it is sent as it is.
    None,
    /// JPEG, PNG or GIF: an AVIF or WebP sibling ([`super::media`]).
    Image,
    /// A compressible type: a precompressed sibling or an on-demand variant
    /// ([`super::encoding`]).
    Compress,
}

impl Negotiation {
    pub fn of(content_type: &str) -> Negotiation {
        if super::media::negotiable(content_type) {
            Negotiation::Image
        } else if compressible(content_type) {
            Negotiation::Compress
        } else {
            Negotiation::None
        }
    }
}

/// Content types worth looking for precompressed siblings of.
fn compressible(content_type: &str) -> bool {
    content_type.starts_with("text/")
        || content_type.starts_with("application/json")
        || content_type.starts_with("application/javascript")
        || content_type.starts_with("application/xml")
        || content_type.starts_with("application/xhtml+xml")
        || content_type.starts_with("application/manifest+json")
        || content_type.starts_with("application/ld+json")
        || content_type.starts_with("application/wasm")
        || content_type.starts_with("image/svg+xml")
        || content_type.starts_with("image/vnd.microsoft.icon")
        || content_type.starts_with("application/atom+xml")
        || content_type.starts_with("application/rss+xml")
}

/// True if `s` looks like `type/subtype` with optional parameters, all printable.
pub fn is_media_type(s: &str) -> bool {
    let base = s.split(';').next().unwrap_or("");
    let mut parts = base.trim().splitn(2, '/');
    let tok = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b));
    matches!((parts.next(), parts.next()), (Some(a), Some(b)) if tok(a) && tok(b))
        && super::is_field_value(s.as_bytes())
}

/// The extension table with full header values.
pub struct MimeTypes {
    /// Sorted by lowercase extension.
    table: Vec<(Box<str>, Box<str>)>,
    default: Box<str>,
}

impl MimeTypes {
    /// Builds the table: built-ins, then `overrides`; `charset` ("" for none) is appended to
    /// textual types that do not already carry one.
    pub fn new(overrides: &BTreeMap<String, String>, charset: &str) -> MimeTypes {
        let mut map: BTreeMap<String, String> = BUILTIN.iter().map(|&(e, t)| (e.to_string(), t.to_string())).collect();
        for (e, t) in overrides {
            map.insert(e.to_ascii_lowercase(), t.clone());
        }
        let render = |t: &str| -> Box<str> {
            if !charset.is_empty() && is_textual(t) && !t.contains(';') {
                format!("{t}; charset={charset}").into()
            } else {
                t.into()
            }
        };
        MimeTypes {
            table: map.iter().map(|(e, t)| (e.as_str().into(), render(t))).collect(),
            default: render(DEFAULT_TYPE),
        }
    }

    /// The Content-Type for a path, by its last extension, case-insensitively.
    pub fn lookup(&self, path: &str) -> &str {
        let name = path.rsplit('/').next().unwrap_or(path);
        let Some(dot) = name.rfind('.') else {
            return &self.default;
        };
        let ext = &name[dot + 1..];
        let mut lower = [0u8; 16];
        if ext.is_empty() || ext.len() > lower.len() {
            return &self.default;
        }
        for (d, s) in lower.iter_mut().zip(ext.bytes()) {
            *d = s.to_ascii_lowercase();
        }
        let key = &lower[..ext.len()];
        match self.table.binary_search_by(|(e, _)| e.as_bytes().cmp(key)) {
            Ok(i) => &self.table[i].1,
            Err(_) => &self.default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_sorted_and_unique() {
        for w in BUILTIN.windows(2) {
            assert!(w[0].0 < w[1].0, "{} >= {}", w[0].0, w[1].0);
        }
    }

    #[test]
    fn negotiation_by_type() {
        for ct in ["text/html; charset=utf-8", "image/svg+xml", "application/json", "application/wasm"] {
            assert_eq!(Negotiation::of(ct), Negotiation::Compress, "{ct}");
        }
        for ct in ["image/jpeg", "image/png", "image/gif"] {
            assert_eq!(Negotiation::of(ct), Negotiation::Image, "{ct}");
        }
        for ct in ["image/webp", "image/avif", "application/octet-stream", "video/mp4", ""] {
            assert_eq!(Negotiation::of(ct), Negotiation::None, "{ct}");
        }
    }

    #[test]
    fn lookups() {
        let m = MimeTypes::new(&BTreeMap::new(), "utf-8");
        assert_eq!(m.lookup("/index.html"), "text/html; charset=utf-8");
        assert_eq!(m.lookup("/a/B.PNG"), "image/png");
        assert_eq!(m.lookup("/x.tar.gz"), "application/gzip");
        assert_eq!(m.lookup("/data.json"), "application/json; charset=utf-8");
        assert_eq!(m.lookup("/noext"), "application/octet-stream");
        assert_eq!(m.lookup("/dir.d/noext"), "application/octet-stream");
        assert_eq!(m.lookup("/trailing."), "application/octet-stream");
        assert_eq!(m.lookup("/x.averyveryverylongextension"), "application/octet-stream");
    }

    #[test]
    fn overrides_and_charset() {
        let mut o = BTreeMap::new();
        o.insert("FOO".to_string(), "text/x-foo".to_string());
        o.insert("html".to_string(), "text/html; charset=latin1".to_string());
        let m = MimeTypes::new(&o, "");
        assert_eq!(m.lookup("/a.foo"), "text/x-foo");
        assert_eq!(m.lookup("/a.css"), "text/css");
        let m = MimeTypes::new(&o, "utf-8");
        assert_eq!(m.lookup("/a.foo"), "text/x-foo; charset=utf-8");
        assert_eq!(m.lookup("/a.html"), "text/html; charset=latin1");
    }

    #[test]
    fn media_types() {
        assert!(is_media_type("text/plain"));
        assert!(is_media_type("application/vnd.x+json; charset=utf-8"));
        assert!(!is_media_type("text"));
        assert!(!is_media_type("not a type"));
        assert!(!is_media_type("text/plain\r\nX: y"));
    }
}
