//! Standard base64 (RFC 4648 §4, padded), the spelling of etcd's JSON gateway
//! and of Upstash's `Upstash-Encoding: base64` replies.
//!
//! Why not the `base64` crate: its general-purpose engine is about 6 KiB of
//! the npm package's wasm for two functions this small. Decoding is strict
//! like its `STANDARD` engine: canonical padding, no whitespace, and the
//! unused bits of the last symbol must be zero.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Padded standard base64 of `input`.
pub fn encode(input: &[u8]) -> String {
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn value(c: u8) -> Option<u32> {
    Some(u32::from(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    }))
}

/// `None` for anything that is not canonical padded base64.
pub fn decode(input: &[u8]) -> Option<Vec<u8>> {
    if input.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    let groups = input.len() / 4;
    for (g, quad) in input.chunks(4).enumerate() {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && g + 1 != groups) {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let keep = 3 - pad;
        // The bits a padded group does not carry must be zero (canonical form).
        if bytes[keep..].iter().any(|&b| b != 0) {
            return None;
        }
        out.extend_from_slice(&bytes[..keep]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use proptest::prelude::*;

    #[test]
    fn rfc4648_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), enc);
            assert_eq!(decode(enc.as_bytes()).unwrap(), plain.as_bytes());
        }
        for bad in ["Zg=", "Zh==", "Z===", "Zg==Zg==", "Zm9v\n", "Zm9-", "=Zm9"] {
            assert_eq!(decode(bad.as_bytes()), None, "{bad}");
        }
    }

    proptest! {
        /// Agrees with the `base64` crate's STANDARD engine both ways, on
        /// valid input and on arbitrary bytes.
        #[test]
        fn agrees_with_the_base64_crate(bytes in prop::collection::vec(any::<u8>(), 0..64), junk in "[A-Za-z0-9+/=]{0,12}") {
            prop_assert_eq!(encode(&bytes), STANDARD.encode(&bytes));
            prop_assert_eq!(decode(STANDARD.encode(&bytes).as_bytes()), Some(bytes));
            prop_assert_eq!(decode(junk.as_bytes()), STANDARD.decode(junk.as_bytes()).ok());
        }
    }
}
