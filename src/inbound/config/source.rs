//! A source's declaration: what it feeds, where each field is read, its
//! filters and signature.

use serde_json::{Map, Value};

use super::checks::{list, object, unknown};
use super::signature::signature;
use super::types::{Field, Filter, Secrets, Source, Target, Unit};

/// One source's declaration at `path` (`sources.NAME`), every mistake in
/// `errs`.
pub(super) fn source(
    name: &str,
    decl: &Value,
    path: &str,
    partitions: &[String],
    secrets: Secrets,
    errs: &mut Vec<String>,
) -> Option<Source> {
    let m = object(decl, path, errs)?;
    let before = errs.len();
    let target_name = match m.get("engine") {
        None => "window",
        Some(Value::String(s)) if s == "window" || s == "patterns" => s.as_str(),
        Some(other) => {
            errs.push(format!(
                "{path}.engine: expected \"window\" or \"patterns\", got {other}"
            ));
            return None;
        }
    };
    let (known, target) = if target_name == "window" {
        window_target(m, path, partitions, errs)
    } else {
        patterns_target(m, path, errs)
    };
    unknown(m, known, path, errs);
    let id = field(m.get("id"), &format!("{path}.id"), FieldUse::Id, errs);
    let key = field(m.get("key"), &format!("{path}.key"), FieldUse::Key, errs);
    let time = time(m.get("timestamp"), &format!("{path}.timestamp"), errs);
    let filters = filters(m, path, errs);
    let signature = match m.get("signature") {
        None => None,
        Some(s) => signature(s, &format!("{path}.signature"), secrets, errs),
    };
    if errs.len() != before {
        return None;
    }
    let (timestamp, unit) = time?;
    let (target, id, key) = (target?, id?, key?);
    let mut fields: Vec<&Field> = vec![&id, &key, &timestamp];
    match &target {
        Target::Window { value, .. } => fields.push(value),
        Target::Patterns { kind, fields: fs } => {
            fields.push(kind);
            fields.extend(fs.iter().map(|(_, f)| f));
        }
    }
    fields.extend(filters.iter().map(|f| &f.from));
    let projection =
        crate::inbound::projection::Projection::new(fields.into_iter().filter_map(|f| match f {
            Field::Pointer(p) => Some(p.as_str()),
            _ => None,
        }));
    Some(Source {
        projection,
        name: name.to_string(),
        target,
        id,
        key,
        timestamp,
        unit,
        filters,
        signature,
    })
}

/// The fields of a source feeding the window engine (its partition and
/// value), with the keys its declaration may have.
fn window_target(
    m: &Map<String, Value>,
    path: &str,
    partitions: &[String],
    errs: &mut Vec<String>,
) -> (&'static [&'static str], Option<Target>) {
    let partition = match m.get("partition") {
        Some(Value::String(p)) if partitions.contains(p) => Some(p.clone()),
        Some(Value::String(p)) => {
            errs.push(format!(
                "{path}.partition: {p:?} is not a partition of the pipeline (its partitions: {})",
                list(partitions)
            ));
            None
        }
        Some(other) => {
            errs.push(format!(
                "{path}.partition: expected a partition name, got {other}"
            ));
            None
        }
        None => {
            errs.push(format!(
                "{path}.partition: missing (the partition the events are appended to; one of {})",
                list(partitions)
            ));
            None
        }
    };
    let value = field(
        m.get("value"),
        &format!("{path}.value"),
        FieldUse::Value,
        errs,
    );
    (
        &[
            "engine",
            "partition",
            "signature",
            "id",
            "key",
            "value",
            "timestamp",
            "filter",
        ],
        partition
            .zip(value)
            .map(|(partition, value)| Target::Window { partition, value }),
    )
}

/// The fields of a source feeding the pattern engine (its kind and
/// fields), with the keys its declaration may have.
fn patterns_target(
    m: &Map<String, Value>,
    path: &str,
    errs: &mut Vec<String>,
) -> (&'static [&'static str], Option<Target>) {
    let kind = field(m.get("kind"), &format!("{path}.kind"), FieldUse::Kind, errs);
    let mut fields = Vec::new();
    match m.get("fields") {
        None => {}
        Some(Value::Object(fm)) => {
            for (fname, fdecl) in fm {
                let fpath = format!("{path}.fields.{fname}");
                if fname.is_empty() {
                    errs.push(format!("{fpath}: a field name is not empty"));
                } else if let Some(f) = field(Some(fdecl), &fpath, FieldUse::Scalar, errs) {
                    fields.push((fname.clone(), f));
                }
            }
            if fm.len() > 64 {
                errs.push(format!(
                    "{path}.fields: at most 64 fields (a pattern event's limit)"
                ));
            }
        }
        Some(other) => errs.push(format!(
            "{path}.fields: expected an object of fields by name, got {other}"
        )),
    }
    (
        &[
            "engine",
            "signature",
            "id",
            "key",
            "kind",
            "fields",
            "timestamp",
            "filter",
        ],
        kind.map(|kind| Target::Patterns { kind, fields }),
    )
}

/// A source's `filter`: one, or an array of them.
fn filters(m: &Map<String, Value>, path: &str, errs: &mut Vec<String>) -> Vec<Filter> {
    let mut filters = Vec::new();
    match m.get("filter") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, f) in items.iter().enumerate() {
                if let Some(f) = filter(f, &format!("{path}.filter[{i}]"), errs) {
                    filters.push(f);
                }
            }
        }
        Some(f) => {
            if let Some(f) = filter(f, &format!("{path}.filter"), errs) {
                filters.push(f);
            }
        }
    }
    filters
}

/// What a mapped field is for (what a constant may be).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldUse {
    Id,
    Key,
    Value,
    Kind,
    Scalar,
}

fn field(v: Option<&Value>, path: &str, usage: FieldUse, errs: &mut Vec<String>) -> Option<Field> {
    let Some(v) = v else {
        errs.push(format!(
            "{path}: missing (one of {{\"pointer\": \"/a/b\"}}, {{\"header\": \"Name\"}}{})",
            if usage == FieldUse::Id {
                ""
            } else {
                ", {\"constant\": ...}"
            }
        ));
        return None;
    };
    let m = object(v, path, errs)?;
    if m.len() != 1 {
        errs.push(format!(
            "{path}: exactly one of \"pointer\", \"header\"{}",
            if usage == FieldUse::Id {
                ""
            } else {
                ", \"constant\""
            }
        ));
        return None;
    }
    let (k, v) = m.iter().next()?;
    match (k.as_str(), v) {
        ("pointer", Value::String(p)) => {
            if p.is_empty() || p.starts_with('/') {
                if let Some(bad) = bad_escape(p) {
                    errs.push(format!(
                        "{path}.pointer: {p:?} has {bad:?}: in a JSON Pointer `~` is written ~0 and `/` ~1 (RFC 6901)"
                    ));
                    return None;
                }
                Some(Field::Pointer(p.clone()))
            } else {
                errs.push(format!(
                    "{path}.pointer: {p:?} is not a JSON Pointer (RFC 6901): it starts with / (\"/data/object/amount\"), or is \"\" for the whole item"
                ));
                None
            }
        }
        ("header", Value::String(h)) => match axum::http::HeaderName::from_bytes(h.as_bytes()) {
            Ok(n) => Some(Field::Header(n.as_str().to_string())),
            Err(_) => {
                errs.push(format!("{path}.header: {h:?} is not an HTTP header name"));
                None
            }
        },
        ("constant", c) => {
            let ok = match usage {
                FieldUse::Id => false,
                FieldUse::Key | FieldUse::Kind => c.is_string(),
                FieldUse::Value => c.is_i64(),
                FieldUse::Scalar => c.is_string() || c.is_boolean() || c.is_number(),
            };
            if ok {
                Some(Field::Constant(c.clone()))
            } else {
                errs.push(format!(
                    "{path}.constant: {}, got {c}",
                    match usage {
                        FieldUse::Id => "an id is never a constant (every event would be a duplicate of the first): read it from a header or a pointer",
                        FieldUse::Key | FieldUse::Kind => "expected a string",
                        FieldUse::Value => "expected an integer in the signed 64-bit range",
                        FieldUse::Scalar => "expected a string, a number or a boolean",
                    }
                ));
                None
            }
        }
        ("pointer" | "header", other) => {
            errs.push(format!("{path}.{k}: expected a string, got {other}"));
            None
        }
        (other, _) => {
            errs.push(format!(
                "{path}.{other}: unknown field (expected one of pointer, header{})",
                if usage == FieldUse::Id {
                    ""
                } else {
                    ", constant"
                }
            ));
            None
        }
    }
}

/// A `~` not followed by 0 or 1 in a pointer.
fn bad_escape(p: &str) -> Option<String> {
    let b = p.as_bytes();
    (0..b.len())
        .find(|&i| b[i] == b'~' && !matches!(b.get(i + 1), Some(b'0' | b'1')))
        .map(|i| p[i..].chars().take(2).collect())
}

fn time(v: Option<&Value>, path: &str, errs: &mut Vec<String>) -> Option<(Field, Unit)> {
    let Some(v) = v else {
        errs.push(format!(
            "{path}: missing (e.g. {{\"pointer\": \"/created\", \"unit\": \"s\"}})"
        ));
        return None;
    };
    let m = object(v, path, errs)?;
    let before = errs.len();
    unknown(m, &["pointer", "header", "unit"], path, errs);
    let unit = match m.get("unit") {
        Some(Value::String(u)) => Unit::parse(u).or_else(|| {
            errs.push(format!(
                "{path}.unit: expected one of s, ms, us, ns, rfc3339, got {u:?}"
            ));
            None
        }),
        Some(other) => {
            errs.push(format!(
                "{path}.unit: expected one of s, ms, us, ns, rfc3339, got {other}"
            ));
            None
        }
        None => {
            errs.push(format!(
                "{path}.unit: missing (s, ms, us, ns or rfc3339: how the producer writes its time)"
            ));
            None
        }
    };
    let mut from = m.clone();
    from.remove("unit");
    if from.is_empty() {
        errs.push(format!("{path}: missing \"pointer\" or \"header\""));
        return None;
    }
    from.retain(|k, _| k == "pointer" || k == "header");
    let f = field(Some(&Value::Object(from)), path, FieldUse::Id, errs);
    if errs.len() != before {
        return None;
    }
    Some((f?, unit?))
}

fn filter(v: &Value, path: &str, errs: &mut Vec<String>) -> Option<Filter> {
    let m = object(v, path, errs)?;
    let before = errs.len();
    unknown(m, &["pointer", "header", "equals"], path, errs);
    let Some(equals) = m.get("equals") else {
        errs.push(format!(
            "{path}.equals: missing (the value the payload must have)"
        ));
        return None;
    };
    let mut from = m.clone();
    from.remove("equals");
    from.retain(|k, _| k == "pointer" || k == "header");
    let f = field(Some(&Value::Object(from)), path, FieldUse::Id, errs);
    if errs.len() != before {
        return None;
    }
    Some(Filter {
        from: f?,
        equals: equals.clone(),
    })
}
