//! What every declaration check shares: an object expected, unknown
//! fields named, names listed.

use serde_json::{Map, Value};

/// `"a", "b"`.
pub fn list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn object<'a>(
    v: &'a Value,
    path: &str,
    errs: &mut Vec<String>,
) -> Option<&'a Map<String, Value>> {
    match v {
        Value::Object(m) => Some(m),
        other => {
            errs.push(format!("{path}: expected an object, got {other}"));
            None
        }
    }
}

pub(super) fn unknown(m: &Map<String, Value>, known: &[&str], path: &str, errs: &mut Vec<String>) {
    for k in m.keys() {
        if !known.contains(&k.as_str()) {
            errs.push(format!(
                "{path}.{k}: unknown field (expected one of {})",
                known.join(", ")
            ));
        }
    }
}
