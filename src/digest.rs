//! `Sha256Digest`: a sha256 as 64 lowercase hex digits. Every digest the tool
//! reads (a Helm index's `digest`, an OCI manifest layer's, the lock's, the
//! addon plan's `sha256`, a chart tarball's) is parsed and normalised here,
//! and every one it computes comes from [`sha256_hex`] (bytes in memory) or
//! [`Sha256Stream`] (bytes as they stream past, e.g. a download).

use sha2::{Digest, Sha256};

/// A sha256, lowercase hex. Built only by [`Sha256Digest::parse`] or [`Sha256Digest::of`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sha256Digest(String);

impl Sha256Digest {
    /// `sha256:<hex>` (the prefix in any case) or bare hex, in any case and
    /// with surrounding whitespace; None unless it is 64 hex digits.
    pub fn parse(s: &str) -> Option<Sha256Digest> {
        let s = s.trim();
        let hex = match s.get(..7) {
            Some(p) if p.eq_ignore_ascii_case("sha256:") => &s[7..],
            _ => s,
        };
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| Sha256Digest(hex.to_ascii_lowercase()))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Sha256Digest {
        let mut s = Sha256Stream::default();
        s.update(bytes);
        s.finish()
    }

    /// The 64 lowercase hex digits.
    pub fn hex(&self) -> &str {
        &self.0
    }

    pub fn into_hex(self) -> String {
        self.0
    }

    /// `sha256:<hex>`, as OCI and the lock spell it.
    pub fn prefixed(&self) -> String {
        format!("sha256:{}", self.0)
    }
}

impl std::fmt::Display for Sha256Digest {
    /// `sha256:<hex>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

/// A sha256 computed piece by piece.
#[derive(Debug, Clone, Default)]
pub struct Sha256Stream(Sha256);

impl Sha256Stream {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> Sha256Digest {
        Sha256Digest(hex::encode(self.0.finalize()))
    }
}

/// The sha256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256Digest::of(bytes).into_hex()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prefixed_or_bare_and_normalises() {
        let hex = "ab".repeat(32);
        let want = Some(hex.as_str());
        assert_eq!(Sha256Digest::parse(&hex).as_ref().map(Sha256Digest::hex), want);
        let upper = format!(" SHA256:{} ", hex.to_uppercase());
        assert_eq!(Sha256Digest::parse(&upper).as_ref().map(Sha256Digest::hex), want);
        for bad in [
            "sha256:abc",
            "",
            "sha512:00",
            &"g".repeat(64),
            &format!("sha256:{hex}0"),
        ] {
            assert_eq!(Sha256Digest::parse(bad), None, "{bad:?}");
        }
        let d = Sha256Digest::of(b"");
        assert_eq!(
            d.prefixed(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(d.to_string(), d.prefixed());
        assert_eq!(sha256_hex(b""), d.hex());
    }

    #[test]
    fn a_stream_in_pieces_hashes_as_the_whole() {
        let bytes = b"chart bytes, streamed in uneven pieces";
        let mut s = Sha256Stream::default();
        for piece in bytes.chunks(7) {
            s.update(piece);
        }
        assert_eq!(s.finish().hex(), sha256_hex(bytes));
        assert_ne!(sha256_hex(bytes), sha256_hex(&bytes[1..]));
    }
}
