//! A JSON tree read from exact text, for documents, events and checkpoints.
//!
//! serde_json reads an integer token beyond i64 as a Double and `-0` as
//! `-0.0`; the contract tells them apart, so numbers are kept here as their
//! raw token text (through serde_json's `raw_value`) and classified by
//! [`number`]. Objects reject duplicate keys. Nesting is bounded by
//! [`MAX_NESTING`], so conversion recursion is bounded whatever the input.

use serde_json::value::RawValue;

use super::UniqueMap;

/// Deepest JSON nesting accepted (a valid document needs about 70).
pub const MAX_NESTING: usize = 128;

/// A parsed JSON value with numbers as their token text.
#[derive(Debug, Clone, PartialEq)]
pub enum Json<'a> {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A number token, exactly as written.
    Number(&'a str),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json<'a>>),
    /// An object in document order, without duplicate keys.
    Object(Vec<(String, Json<'a>)>),
    /// An array or object nested deeper than [`MAX_NESTING`], not read:
    /// whoever meets it reports the rule at its own path.
    TooDeep,
}

/// A classified number token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    /// No fraction, no exponent, within i64.
    Integer(i64),
    /// A fraction or an exponent, finite.
    Double(f64),
}

/// Classifies a JSON number token: an integer token must fit an i64 (it is
/// never read as a Double); a token with a fraction or an exponent is a
/// correctly rounded finite Double.
pub fn number(token: &str) -> Result<Num, String> {
    if token.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        match token.parse::<f64>() {
            Ok(d) if d.is_finite() => Ok(Num::Double(d)),
            _ => Err(format!("number {token} is not a finite double")),
        }
    } else {
        token
            .parse::<i64>()
            .map(Num::Integer)
            .map_err(|_| format!("integer {token} is outside the 64-bit signed range"))
    }
}

/// The kind of a value, for messages.
pub fn kind_name(j: &Json<'_>) -> &'static str {
    match j {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
        Json::TooDeep => "a value nested deeper than 128 levels",
    }
}

/// Parses a complete JSON text.
pub fn parse(text: &[u8]) -> Result<Json<'_>, String> {
    let raw: &RawValue =
        serde_json::from_slice(text).map_err(|e| format!("malformed JSON: {e}"))?;
    convert(raw, 1)
}

/// Parses one raw value (already known to be well-formed JSON).
pub fn convert(raw: &RawValue, depth: usize) -> Result<Json<'_>, String> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'{') | Some(b'[') if depth > MAX_NESTING => Ok(Json::TooDeep),
        Some(b'{') => {
            let map: UniqueMap<&RawValue> =
                serde_json::from_str(text).map_err(|e| format!("malformed JSON: {e}"))?;
            let mut out = Vec::with_capacity(map.0.len());
            for (k, v) in map.0 {
                out.push((k, convert(v, depth + 1)?));
            }
            Ok(Json::Object(out))
        }
        Some(b'[') => {
            let items: Vec<&RawValue> =
                serde_json::from_str(text).map_err(|e| format!("malformed JSON: {e}"))?;
            let mut out = Vec::with_capacity(items.len());
            for v in items {
                out.push(convert(v, depth + 1)?);
            }
            Ok(Json::Array(out))
        }
        Some(b'"') => serde_json::from_str::<String>(text)
            .map(Json::String)
            .map_err(|e| format!("malformed JSON: {e}")),
        Some(b't') => Ok(Json::Bool(true)),
        Some(b'f') => Ok(Json::Bool(false)),
        Some(b'n') => Ok(Json::Null),
        Some(_) => Ok(Json::Number(text)),
        None => Err("malformed JSON: empty value".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_token() {
        assert_eq!(number("-0"), Ok(Num::Integer(0)));
        assert_eq!(number("1E2"), Ok(Num::Double(100.0)));
        assert_eq!(number("15e-1"), Ok(Num::Double(1.5)));
        assert!(matches!(number("-0.0"), Ok(Num::Double(d)) if d.to_bits() == (-0.0f64).to_bits()));
        assert!(number("9223372036854775808").is_err());
        assert_eq!(number("-9223372036854775808"), Ok(Num::Integer(i64::MIN)));
        assert!(number("100000000000000000000000000000").is_err());
        assert!(number("1e400").is_err());
    }

    #[test]
    fn trees_reject_duplicates_and_deep_nesting() {
        assert!(parse(br#"{"a":1,"a":2}"#).is_err());
        assert!(parse(br#"{"a":{"b":1,"b":1}}"#).is_err());
        let j = parse(br#" {"a" : [1, -0, 2.5e0, "x", true, null]} "#).unwrap();
        assert_eq!(
            j,
            Json::Object(vec![(
                "a".into(),
                Json::Array(vec![
                    Json::Number("1"),
                    Json::Number("-0"),
                    Json::Number("2.5e0"),
                    Json::String("x".into()),
                    Json::Bool(true),
                    Json::Null
                ])
            )])
        );
        // what lies deeper than MAX_NESTING is left unread (no recursion
        // beyond it, however deep the text)
        for n in [MAX_NESTING + 1, 100_000] {
            let text = "[".repeat(n) + &"]".repeat(n);
            let mut j = parse(text.as_bytes()).unwrap();
            let mut depth = 1;
            while let Json::Array(mut items) = j {
                j = items.pop().unwrap();
                depth += 1;
            }
            assert_eq!((depth, j), (MAX_NESTING + 1, Json::TooDeep));
        }
    }
}
