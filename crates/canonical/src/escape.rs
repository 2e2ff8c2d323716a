//! Canonical checkpoints write a `\u` escape only for the control characters
//! below U+0020, always with lower-case hex digits. Parsing forgets how a
//! string was spelled, so `"\u001F"` and `"\u001f"` hash alike; a restore
//! refuses the upper-case spelling so that flipping the case of such a digit
//! (one flipped byte) is caught like any other flipped byte.

/// The byte offset of the first `\u` escape in a JSON text that has an
/// upper-case hex digit, if any. Escapes are found by walking the strings
/// (an escaped backslash followed by `u` is not an escape).
pub fn uppercase_escape(json: &[u8]) -> Option<usize> {
    let mut in_string = false;
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                if json.get(i + 1) == Some(&b'u') {
                    let end = (i + 6).min(json.len());
                    if json[i + 2..end].iter().any(u8::is_ascii_uppercase) {
                        return Some(i);
                    }
                    i = end;
                    continue;
                }
                i += 2;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The restore error for an upper-case escape at `at`.
pub fn uppercase_escape_error(at: usize) -> String {
    format!(
        "a string escape at byte {at} is not canonical: a checkpoint writes \\u escapes with lower-case hex digits"
    )
}

#[cfg(test)]
mod tests {
    use super::uppercase_escape;

    #[test]
    fn only_upper_case_digits_of_real_escapes_are_found() {
        assert_eq!(uppercase_escape(br#"{"a":"\u001f"}"#), None);
        assert_eq!(uppercase_escape(br#"{"a":"\u001F"}"#), Some(6));
        assert_eq!(uppercase_escape(br#"{"a":"\\u001F"}"#), None);
        assert_eq!(uppercase_escape(br#"{"a":"\\\u00AB"}"#), Some(8));
        assert_eq!(uppercase_escape(br#"{"\u00Ab":1}"#), Some(2));
        assert_eq!(uppercase_escape(br#"{"a":"x\"\u000B"}"#), Some(9));
        assert_eq!(uppercase_escape(br#"{"U":"\n"}"#), None);
        assert_eq!(uppercase_escape(br#""\u00"#), None);
    }
}
