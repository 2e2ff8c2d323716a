//! Events: their fields, and parsing from exact JSON text.
//!
//! `{"id": "e1", "key": "acct-7", "kind": "login", "time": 1000,
//! "fields": {"ok": false, "amount": 12}}`: `id` non-empty, `key` possibly
//! empty, `kind` non-empty, each at most 256 bytes of UTF-8; `time` a JSON
//! integer in `0..=MAX_EVENT_TIME`; `fields` optional (not `null`), at most
//! 64 entries with unique non-empty names, each an Integer, Double,
//! `{"decimal": "..."}`, String or Bool. Every error names the field.

use serde_json::value::RawValue;

use crate::canonical::UniqueMap;
use crate::patterns::json::{number, Num};
use crate::patterns::value::{Decimal, Value};
use crate::patterns::MAX_EVENT_TIME;

/// Longest `id`, `key` or `kind`, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 256;
/// Most fields of one event.
pub const MAX_FIELDS: usize = 64;

/// One validated pattern event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// Non-empty, at most 256 bytes; metadata only (not a dedup key).
    pub id: String,
    /// At most 256 bytes, may be empty.
    pub key: String,
    /// Non-empty, at most 256 bytes.
    pub kind: String,
    /// `0..=MAX_EVENT_TIME`.
    pub time: i64,
    /// At most 64 fields with unique non-empty names, in the order pushed.
    pub fields: Vec<(String, Value)>,
}

impl Event {
    /// Checks every rule of an event built in code (parsing checks them as
    /// it reads). The error names the field.
    pub fn validate(&self) -> Result<(), String> {
        check_name("id", &self.id, false)?;
        check_name("key", &self.key, true)?;
        check_name("kind", &self.kind, false)?;
        check_time(self.time)?;
        if self.fields.len() > MAX_FIELDS {
            return Err(format!(
                "fields: {} fields, at most {MAX_FIELDS} are allowed",
                self.fields.len()
            ));
        }
        for (i, (name, _)) in self.fields.iter().enumerate() {
            if name.is_empty() {
                return Err("fields: a field name is empty".into());
            }
            if self.fields[..i].iter().any(|(n, _)| n == name) {
                return Err(format!("fields.{name}: duplicate field name"));
            }
        }
        Ok(())
    }
}

fn check_name(field: &str, s: &str, may_be_empty: bool) -> Result<(), String> {
    if s.is_empty() && !may_be_empty {
        return Err(format!("{field}: must not be empty"));
    }
    if s.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{field}: {} bytes, at most {MAX_NAME_BYTES} are allowed",
            s.len()
        ));
    }
    Ok(())
}

fn check_time(time: i64) -> Result<(), String> {
    if !(0..=MAX_EVENT_TIME).contains(&time) {
        return Err(format!("time: {time} is outside 0..={MAX_EVENT_TIME}"));
    }
    Ok(())
}

fn string_of(field: &str, raw: &RawValue) -> Result<String, String> {
    if !raw.get().starts_with('"') {
        return Err(format!("{field}: must be a string"));
    }
    serde_json::from_str(raw.get()).map_err(|e| format!("{field}: {e}"))
}

/// Parses one field value. `what` names it in errors (`fields.amount`).
pub fn parse_value(what: &str, raw: &RawValue) -> Result<Value, String> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => string_of(what, raw).map(Value::String),
        Some(b't') => Ok(Value::Bool(true)),
        Some(b'f') => Ok(Value::Bool(false)),
        Some(b'n') => Err(format!("{what}: null is not a field value")),
        Some(b'[') => Err(format!("{what}: an array is not a field value")),
        Some(b'{') => {
            let map: UniqueMap<&RawValue> =
                serde_json::from_str(text).map_err(|e| format!("{what}: {e}"))?;
            match map.0.as_slice() {
                [(k, v)] if k == "decimal" => {
                    let s = string_of(&format!("{what}.decimal"), v)?;
                    Decimal::parse(&s)
                        .map(Value::Decimal)
                        .map_err(|e| format!("{what}.decimal: {e}"))
                }
                _ => Err(format!(
                    "{what}: an object value must be exactly {{\"decimal\": \"...\"}}"
                )),
            }
        }
        Some(_) => match number(text) {
            Ok(Num::Integer(i)) => Ok(Value::Integer(i)),
            Ok(Num::Double(d)) => Ok(Value::Double(d)),
            Err(e) => Err(format!("{what}: {e}")),
        },
        None => Err(format!("{what}: missing value")),
    }
}

/// Parses one event object from its exact JSON text.
pub fn parse_event(json: &[u8]) -> Result<Event, String> {
    let top: UniqueMap<&RawValue> = serde_json::from_slice(json).map_err(|e| {
        if e.is_data() {
            format!("an event must be a JSON object with unique keys: {e}")
        } else {
            format!("malformed JSON: {e}")
        }
    })?;
    let (mut id, mut key, mut kind, mut time, mut fields) = (None, None, None, None, Vec::new());
    for (name, raw) in top.0 {
        match name.as_str() {
            "id" => id = Some(string_of("id", raw)?),
            "key" => key = Some(string_of("key", raw)?),
            "kind" => kind = Some(string_of("kind", raw)?),
            "time" => {
                let t = match raw.get().as_bytes().first() {
                    Some(b'-' | b'0'..=b'9') => {
                        number(raw.get()).map_err(|e| format!("time: {e}"))?
                    }
                    _ => return Err("time: must be an integer".into()),
                };
                match t {
                    Num::Integer(t) => {
                        check_time(t)?;
                        time = Some(t);
                    }
                    Num::Double(_) => return Err(format!("time: {} is not an integer", raw.get())),
                }
            }
            "fields" => {
                if !raw.get().starts_with('{') {
                    return Err("fields: must be an object".into());
                }
                let map: UniqueMap<&RawValue> =
                    serde_json::from_str(raw.get()).map_err(|e| format!("fields: {e}"))?;
                if map.0.len() > MAX_FIELDS {
                    return Err(format!(
                        "fields: {} fields, at most {MAX_FIELDS} are allowed",
                        map.0.len()
                    ));
                }
                fields = Vec::with_capacity(map.0.len());
                for (fname, fraw) in map.0 {
                    if fname.is_empty() {
                        return Err("fields: a field name is empty".into());
                    }
                    let v = parse_value(&format!("fields.{fname}"), fraw)?;
                    fields.push((fname, v));
                }
            }
            other => return Err(format!("unknown field {other:?}")),
        }
    }
    let missing = |f: &str| format!("{f}: missing");
    let event = Event {
        id: id.ok_or_else(|| missing("id"))?,
        key: key.ok_or_else(|| missing("key"))?,
        kind: kind.ok_or_else(|| missing("kind"))?,
        time: time.ok_or_else(|| missing("time"))?,
        fields,
    };
    check_name("id", &event.id, false)?;
    check_name("key", &event.key, true)?;
    check_name("kind", &event.kind, false)?;
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Event {
        parse_event(s.as_bytes()).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn err(s: &str, names: &str) {
        let e = parse_event(s.as_bytes()).expect_err(s);
        assert!(e.contains(names), "{s}: {e:?} should name {names:?}");
    }

    #[test]
    fn parses_every_type_exactly() {
        let e = ok(
            r#"{"id":"e1","key":"","kind":"k","time":0,"fields":{"i":-0,"d":1E2,"x":15e-1,"z":-0.0,"m":{"decimal":"-12.50"},"s":"t","b":false}}"#,
        );
        assert_eq!(e.key, "");
        let f = |n: &str| e.fields.iter().find(|(k, _)| k == n).unwrap().1.clone();
        assert_eq!(f("i"), Value::Integer(0));
        assert_eq!(f("d"), Value::Double(100.0));
        assert_eq!(f("x"), Value::Double(1.5));
        assert_eq!(f("z"), Value::Double(-0.0));
        assert!(matches!(f("m"), Value::Decimal(d) if d.as_str() == "-12.50"));
        assert_eq!(f("s"), Value::String("t".into()));
        assert_eq!(f("b"), Value::Bool(false));
        let names: Vec<&str> = e.fields.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["i", "d", "x", "z", "m", "s", "b"]);
        assert!(
            ok(r#"{"id":"e","key":"k","kind":"k","time":9007199254740991}"#)
                .fields
                .is_empty()
        );
    }

    #[test]
    fn every_error_names_its_field() {
        let base = |extra: &str| format!(r#"{{"id":"e","key":"k","kind":"k","time":1{extra}}}"#);
        err(&base(r#","fields":{"a":9223372036854775808}"#), "fields.a");
        err(&base(r#","fields":{"a":1e999}"#), "fields.a");
        err(&base(r#","fields":{"a":null}"#), "fields.a");
        err(&base(r#","fields":{"a":[1]}"#), "fields.a");
        err(&base(r#","fields":{"a":{"b":1}}"#), "fields.a");
        err(
            &base(r#","fields":{"a":{"decimal":"1","x":1}}"#),
            "fields.a",
        );
        err(
            &base(r#","fields":{"a":{"decimal":"1."}}"#),
            "fields.a.decimal",
        );
        err(
            &base(r#","fields":{"a":{"decimal":1}}"#),
            "fields.a.decimal",
        );
        err(&base(r#","fields":{"a":1,"a":2}"#), "fields");
        err(&base(r#","fields":{"":1}"#), "fields");
        err(&base(r#","fields":null"#), "fields");
        err(&base(r#","extra":1"#), "extra");
        err(r#"{"id":"","key":"k","kind":"k","time":1}"#, "id");
        err(r#"{"id":"e","key":"k","kind":"","time":1}"#, "kind");
        err(r#"{"id":"e","key":"k","kind":"k","time":-1}"#, "time");
        err(
            r#"{"id":"e","key":"k","kind":"k","time":9007199254740992}"#,
            "time",
        );
        err(r#"{"id":"e","key":"k","kind":"k","time":1.0}"#, "time");
        err(r#"{"id":"e","key":"k","kind":"k","time":"1"}"#, "time");
        err(r#"{"id":"e","key":"k","kind":"k"}"#, "time");
        err(r#"{"id":"e","kind":"k","time":1}"#, "key");
        err(r#"{"id":"e","key":1,"kind":"k","time":1}"#, "key");
        let long = "x".repeat(257);
        err(
            &format!(r#"{{"id":"{long}","key":"k","kind":"k","time":1}}"#),
            "id",
        );
        err(
            &format!(r#"{{"id":"e","key":"{long}","kind":"k","time":1}}"#),
            "key",
        );
        let many: Vec<String> = (0..65).map(|i| format!("\"f{i}\":1")).collect();
        err(
            &base(&format!(r#","fields":{{{}}}"#, many.join(","))),
            "fields",
        );
        let ok64: Vec<String> = (0..64).map(|i| format!("\"f{i}\":1")).collect();
        ok(&base(&format!(r#","fields":{{{}}}"#, ok64.join(","))));
        ok(&format!(
            r#"{{"id":"e","key":"{}","kind":"k","time":1}}"#,
            "é".repeat(128)
        ));
        err(
            &format!(
                r#"{{"id":"e","key":"{}x","kind":"k","time":1}}"#,
                "é".repeat(128)
            ),
            "key",
        );
        assert!(parse_event(b"[1]").is_err());
        assert!(parse_event(b"{").is_err());
        assert!(parse_event(br#"{"id":"e","id":"f","key":"k","kind":"k","time":1}"#).is_err());
    }
}
