//! Image format negotiation (RFC 9110 §12.5.1, `Accept`): given the request's `Accept` and
//! the type of a JPEG, PNG or GIF file, which modern formats (`photo.jpg.avif`,
//! `photo.jpg.webp`) the client would rather have.
//!
//! Rules of [`acceptable_images`]:
//! - A format counts only if the field names it exactly (`image/avif`, `image/webp`, matched
//!   case-insensitively): `image/*` and `*/*` do not mean a client decodes AVIF. Browsers that
//!   do name it in what they send for `<img>` (Chrome `image/avif,image/webp,image/apng,...`,
//!   Firefox `image/avif,image/webp,image/png,...`, Safari `image/webp,image/avif,...`); every
//!   client sends `*/*`, including ones that decode neither. Cloudflare's Polish decides the
//!   same way.
//! - Weights are honoured (`;q=`, read by [`super::weighted::items`]: a valid qvalue, else
//!   the element is ignored whole; other parameters are ignored). `q=0` refuses. A format named more than once gets its lowest
//!   weight, as in [`super::encoding`].
//! - A format is acceptable when its weight is above zero and at least the original's (the
//!   weight of its exact type, else of `image/*`, else of `*/*`, else 0): a client that says
//!   `image/jpeg, image/avif;q=0.5` gets the JPEG. A tie goes to the variant, which is the
//!   reason it exists (smaller).
//! - Best first; a tie between the two formats goes to AVIF (smaller still), so Safari, which
//!   lists WebP first at the same weight, gets AVIF.
//! - No field: nothing (the original).
//!
//! Invariants: never panics on input; each format appears at most once in the result.

/// A format an image may have a sibling variant in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    Avif,
    Webp,
}

impl ImageFormat {
    /// The suffix of the sibling file, appended to the original's name: `.avif`, `.webp`.
    pub fn suffix(self) -> &'static str {
        match self {
            ImageFormat::Avif => ".avif",
            ImageFormat::Webp => ".webp",
        }
    }

    fn media_type(self) -> &'static [u8] {
        match self {
            ImageFormat::Avif => b"image/avif",
            ImageFormat::Webp => b"image/webp",
        }
    }
}

/// Whether files of this Content-Type (as the MIME table gives it) are negotiated: JPEG, PNG
/// and GIF, the formats AVIF and WebP replace.
pub fn negotiable(content_type: &str) -> bool {
    matches!(content_type, "image/jpeg" | "image/png" | "image/gif")
}

/// The formats of the client's `Accept` worth sending instead of a file of type `original`,
/// best first (see the module documentation). `None` slots come last.
pub fn acceptable_images(accept: Option<&[u8]>, original: &str) -> [Option<ImageFormat>; 2] {
    let Some(field) = accept else {
        return [None, None];
    };
    // Weights in thousandths: AVIF, WebP, the original's type, image/*, */*.
    let mut weight: [Option<u16>; 5] = [None; 5];
    for (range, q) in super::weighted::items(field) {
        let slot = if range.eq_ignore_ascii_case(ImageFormat::Avif.media_type()) {
            0
        } else if range.eq_ignore_ascii_case(ImageFormat::Webp.media_type()) {
            1
        } else if range.eq_ignore_ascii_case(original.as_bytes()) {
            2
        } else if range.eq_ignore_ascii_case(b"image/*") {
            3
        } else if range == b"*/*" {
            4
        } else {
            continue;
        };
        weight[slot] = Some(weight[slot].map_or(q, |old| old.min(q)));
    }
    let base = weight[2].or(weight[3]).or(weight[4]).unwrap_or(0);
    let ok = |w: Option<u16>| w.filter(|&w| w > 0 && w >= base);
    match (ok(weight[0]), ok(weight[1])) {
        (Some(a), Some(w)) if w > a => [Some(ImageFormat::Webp), Some(ImageFormat::Avif)],
        (Some(_), Some(_)) => [Some(ImageFormat::Avif), Some(ImageFormat::Webp)],
        (Some(_), None) => [Some(ImageFormat::Avif), None],
        (None, Some(_)) => [Some(ImageFormat::Webp), None],
        (None, None) => [None, None],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ImageFormat::{Avif, Webp};

    /// What current browsers send for `<img>`.
    const CHROME: &str = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8";
    const FIREFOX: &str = "image/avif,image/webp,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5";
    const SAFARI: &str = "image/webp,image/avif,image/jxl,image/heic,image/heic-sequence,video/*;q=0.8,\
                                     image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5";

    fn f(accept: &str, original: &str) -> [Option<ImageFormat>; 2] {
        acceptable_images(Some(accept.as_bytes()), original)
    }

    #[test]
    fn browsers() {
        for ty in ["image/jpeg", "image/png", "image/gif"] {
            assert_eq!(f(CHROME, ty), [Some(Avif), Some(Webp)], "{ty}");
            assert_eq!(f(FIREFOX, ty), [Some(Avif), Some(Webp)], "{ty}");
            // Safari lists WebP first, at the same weight: AVIF still wins the tie.
            assert_eq!(f(SAFARI, ty), [Some(Avif), Some(Webp)], "{ty}");
        }
        // An older Safari (WebP only) and an older Firefox.
        assert_eq!(f("image/webp,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5", "image/jpeg"), [Some(Webp), None]);
        assert_eq!(f("image/webp,*/*", "image/jpeg"), [Some(Webp), None]);
    }

    #[test]
    fn wildcards_are_not_enough() {
        for accept in ["*/*", "image/*", "image/*,*/*;q=0.8", "text/html", ""] {
            assert_eq!(f(accept, "image/jpeg"), [None, None], "{accept:?}");
        }
        assert_eq!(acceptable_images(None, "image/jpeg"), [None, None]);
    }

    #[test]
    fn weights() {
        assert_eq!(f("image/avif;q=0, image/webp", "image/jpeg"), [Some(Webp), None]);
        assert_eq!(f("image/avif;q=0,image/webp;q=0", "image/jpeg"), [None, None]);
        assert_eq!(f("image/avif;q=0.5, image/webp;q=0.9", "image/jpeg"), [Some(Webp), Some(Avif)]);
        assert_eq!(f("IMAGE/AVIF ; Q=0.9 , image/webp;q=0.9", "image/png"), [Some(Avif), Some(Webp)]);
        // The original preferred: kept.
        assert_eq!(f("image/jpeg, image/avif;q=0.5", "image/jpeg"), [None, None]);
        assert_eq!(f("image/*;q=0.9, image/avif;q=0.5, image/webp", "image/jpeg"), [Some(Webp), None]);
        // The original's own type is more specific than image/*.
        assert_eq!(f("image/png;q=0.1, image/*, image/avif;q=0.5", "image/png"), [Some(Avif), None]);
        // Named twice: the lower weight.
        assert_eq!(f("image/avif, image/avif;q=0", "image/jpeg"), [None, None]);
        // Malformed weights: the element is ignored.
        for bad in ["image/avif;q=2", "image/avif;q=1.5", "image/avif;q=0.1234", "image/avif;q=x", "image/avif;q="] {
            assert_eq!(f(bad, "image/jpeg"), [None, None], "{bad}");
        }
        // Other parameters do not matter; junk does not panic.
        assert_eq!(f("image/avif;level=1", "image/jpeg"), [Some(Avif), None]);
        for junk in [",,,", ";;;", "image/avif;;q", "=;=", "\u{0}", "image/avif;q=0.;"] {
            let _ = f(junk, "image/jpeg");
        }
    }

    #[test]
    fn negotiable_types() {
        assert!(negotiable("image/jpeg") && negotiable("image/png") && negotiable("image/gif"));
        assert!(!negotiable("image/svg+xml") && !negotiable("image/webp") && !negotiable("text/html; charset=utf-8"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics_never_repeats(s in "[ -~]{0,80}") {
            let r = acceptable_images(Some(s.as_bytes()), "image/jpeg");
            proptest::prop_assert!(r[0].is_some() || r[1].is_none());
            proptest::prop_assert!(r[0].is_none() || r[0] != r[1]);
        }
    }
}
