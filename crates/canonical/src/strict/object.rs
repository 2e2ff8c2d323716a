//! Strict request shapes on top of serde's derives, with messages in the
//! user's terms.
//!
//! - [`object`]: a derived struct accepts a JSON array as well as an
//!   object (`["p0", 100]` would fill the fields in order); request objects
//!   must be JSON objects, so this adapter lets the derive see only maps and
//!   names what was expected ("a delivery object") instead of a Rust type.
//! - [`int_field`]: an `i64` field whose errors name the field and say
//!   whether the number has a fraction or is outside the 64-bit range
//!   (serde reads an integer beyond `u64` as a float and would report
//!   "invalid type: floating point").

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, Visitor};

/// Deserializes `T` from a JSON object only; anything else is an error
/// that says "expected {what}".
pub fn object<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
    what: &'static str,
) -> Result<T, D::Error> {
    T::deserialize(ObjectOnly { inner: d, what })
}

/// A deserializer that hands the derive's visitor only maps.
struct ObjectOnly<D> {
    inner: D,
    what: &'static str,
}

/// Forwards `visit_map` only; every other input is an invalid type.
struct MapVisitor<V> {
    inner: V,
    what: &'static str,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for MapVisitor<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(map)
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(MapVisitor {
            inner: visitor,
            what: self.what,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.deserialize_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// A seed form of [`object`], for elements of a sequence.
pub struct ObjectSeed<T> {
    what: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<T> ObjectSeed<T> {
    /// Expects objects described as `what` ("a delivery object").
    pub fn new(what: &'static str) -> Self {
        ObjectSeed {
            what,
            _t: std::marker::PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for ObjectSeed<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        object(d, self.what)
    }
}

/// Deserializes an `i64` field named `field` with errors in the user's
/// terms. `-0` is an integer token (no fraction, no exponent) and reads as
/// 0; serde_json reads it as the float `-0.0`, indistinguishable from the
/// token `-0.0` by then, so the field is taken as its raw token first.
/// Works on deserializers that borrow from their input (`from_slice`,
/// `from_str`), which every caller uses.
pub fn int_field<'de, D: Deserializer<'de>>(d: D, field: &'static str) -> Result<i64, D::Error> {
    let raw = <&'de serde_json::value::RawValue>::deserialize(d)?;
    int_token(raw.get(), field).map_err(de::Error::custom)
}

/// [`int_field`] read straight from serde_json's number, without taking the
/// raw token first: faster, but serde_json reads `-0` as the float `-0.0`,
/// so `-0` is refused here. For input known to hold no `-0` token: the
/// request bodies of `POST /events`, whose parser writes a `-0` integer as
/// ` 0` before parsing (`service::parse`).
pub fn int_field_direct<'de, D: Deserializer<'de>>(
    d: D,
    field: &'static str,
) -> Result<i64, D::Error> {
    d.deserialize_i64(IntVisitor(field))
}

/// Reads one JSON value's text (`-3`, `-0`, `1.5`, `"x"`) as the `i64`
/// field `field`, with [`int_field`]'s rules and messages (no position).
pub fn int_token(token: &str, field: &'static str) -> Result<i64, String> {
    if token == "-0" {
        return Ok(0);
    }
    let mut inner = serde_json::Deserializer::from_str(token);
    inner
        .deserialize_i64(IntVisitor(field))
        .and_then(|v| inner.end().map(|()| v))
        .map_err(|e| without_position(&e))
}

/// A serde_json error's message without the " at line L column C" it adds
/// (an outer deserializer, or the caller, says where).
pub fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&suffix) {
        Some(message) => message.to_owned(),
        None => text,
    }
}

struct IntVisitor(&'static str);

/// The bounds of an `i64`, as an error message writes them.
const RANGE: &str = "-9223372036854775808..=9223372036854775807";

impl Visitor<'_> for IntVisitor {
    type Value = i64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an integer for `{}`", self.0)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| {
            E::custom(format_args!(
                "`{}` is {v}, outside the signed 64-bit integer range {RANGE}",
                self.0
            ))
        })
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<i64, E> {
        // serde_json reads an integer token beyond u64 as a float too.
        if v.is_finite() && v.fract() == 0.0 && v.abs() >= 9.223_372_036_854_775e18 {
            Err(E::custom(format_args!(
                "`{}` is about {v:e}, outside the signed 64-bit integer range {RANGE}",
                self.0
            )))
        } else {
            Err(E::custom(format_args!(
                "`{}` must be an integer (no fraction or exponent), got {v}",
                self.0
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Pair {
        a: String,
        #[serde(deserialize_with = "b_field")]
        b: i64,
    }

    fn b_field<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        int_field(d, "b")
    }

    fn parse(s: &str) -> Result<Pair, String> {
        let mut de = serde_json::Deserializer::from_str(s);
        object::<Pair, _>(&mut de, "a pair object").map_err(|e| e.to_string())
    }

    #[test]
    fn only_objects_with_messages_in_the_users_terms() {
        assert_eq!(parse(r#"{"a":"x","b":-3}"#).unwrap().b, -3);
        for (body, want) in [
            (r#"["x",1]"#, "expected a pair object"),
            ("null", "expected a pair object"),
            ("7", "expected a pair object"),
            (
                r#"{"a":"x","b":1.5}"#,
                "`b` must be an integer (no fraction or exponent), got 1.5",
            ),
            (r#"{"a":"x","b":1e3}"#, "`b` must be an integer"),
            (
                r#"{"a":"x","b":123000000000000000000000000000}"#,
                "`b` is about 1.23e29, outside the signed 64-bit integer range",
            ),
            (
                r#"{"a":"x","b":9223372036854775808}"#,
                "`b` is 9223372036854775808, outside",
            ),
            (r#"{"a":"x","b":"1"}"#, "expected an integer for `b`"),
        ] {
            let e = parse(body).unwrap_err();
            assert!(e.contains(want), "{body}: {e}");
            assert!(!e.contains("Pair"), "{body}: {e}");
        }
        assert_eq!(
            parse(r#"{"a":"x","b":-9223372036854775808}"#).unwrap().b,
            i64::MIN
        );
    }

    #[test]
    fn minus_zero_is_the_integer_zero_and_minus_zero_point_zero_a_fraction() {
        assert_eq!(parse(r#"{"a":"x","b":-0}"#).unwrap().b, 0);
        assert_eq!(parse(r#"{"a":"x", "b" : -0 }"#).unwrap().b, 0);
        for (body, want) in [
            (r#"{"a":"x","b":-0.0}"#, "got -0"),
            (r#"{"a":"x","b":-0e0}"#, "got -0"),
            (r#"{"a":"x","b":-00}"#, "invalid number"),
            (r#"{"a":"x","b":-}"#, "invalid number"),
        ] {
            let e = parse(body).unwrap_err();
            assert!(e.contains(want), "{body}: {e}");
        }
        // the position is the body's (just after the number), once
        let e = parse(r#"{"a":"x","b":1.5}"#).unwrap_err();
        assert!(e.ends_with(" at line 1 column 17"), "{e}");
        assert_eq!(e.matches(" at line ").count(), 1, "{e}");
    }
}
