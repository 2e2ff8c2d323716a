//! Canonical JSON output: no whitespace, integers in plain decimal, strings
//! escaped exactly as `serde_json` (and JavaScript's `JSON.stringify`) write
//! them: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u00xx` (lowercase hex) for
//! the other code points below U+0020, everything else raw UTF-8. Key order is
//! the caller's job: every object is written with its keys already sorted.

/// Appends a JSON string literal.
pub fn string(buf: &mut Vec<u8>, s: &str) {
    string_bytes(buf, s.as_bytes())
}

/// [`string`] of a `str`'s bytes (the caller's bytes are UTF-8: they came
/// from a `str`).
pub fn string_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.push(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => b"",
            _ => continue,
        };
        buf.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            buf.extend_from_slice(b"\\u00");
            buf.push(HEX[(b >> 4) as usize]);
            buf.push(HEX[(b & 0xf) as usize]);
        } else {
            buf.extend_from_slice(esc);
        }
        start = i + 1;
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.push(b'"');
}

/// Appends an integer in plain decimal.
pub fn int(buf: &mut Vec<u8>, n: impl Into<i128>) {
    let n: i128 = n.into();
    let mut digits = itoa::Buffer::new();
    // Nearly every integer written fits in 64 bits, where the digits come
    // from 64-bit divisions.
    let text = match i64::try_from(n) {
        Ok(n) => digits.format(n),
        Err(_) => digits.format(n),
    };
    buf.extend_from_slice(text.as_bytes());
}

/// Appends an optional integer (`null` for none).
pub fn opt_int(buf: &mut Vec<u8>, n: Option<i64>) {
    match n {
        Some(n) => int(buf, n),
        None => buf.extend_from_slice(b"null"),
    }
}

/// Appends an object key and colon.
pub fn key(buf: &mut Vec<u8>, k: &str) {
    string(buf, k);
    buf.push(b':');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_escape_exactly_like_serde_json() {
        let mut all = String::new();
        for c in (0u32..0x300).filter_map(char::from_u32) {
            all.push(c);
        }
        all.push_str("\u{2028}\u{2029}\u{10ffff}\u{7f}é😀");
        let mut buf = Vec::new();
        string(&mut buf, &all);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            serde_json::to_string(&all).unwrap()
        );
    }

    #[test]
    fn integers_cover_i128() {
        for n in [
            0i128,
            -1,
            7,
            i64::MIN as i128,
            i64::MAX as i128,
            i128::MIN,
            i128::MAX,
            -2 * i64::MAX as i128,
        ] {
            let mut buf = Vec::new();
            int(&mut buf, n);
            assert_eq!(String::from_utf8(buf).unwrap(), n.to_string());
        }
    }
}
