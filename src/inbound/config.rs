//! The `"sources"` and `"watermarks"` of a pipeline file, validated with the
//! JSON path of every mistake (all of them, not the first).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use super::signature::{Encoding, HmacScheme, Scheme, Verifier};
use crate::engine::Pipeline;
use crate::service::strategy::Strategy;

/// Where a mapped value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    /// A JSON Pointer (RFC 6901) into the payload (or the batch item).
    Pointer(String),
    /// A request header (name lowercased).
    Header(String),
    /// A constant.
    Constant(Value),
}

/// How a timestamp is written by the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Unix seconds (an integer).
    S,
    /// Unix milliseconds.
    Ms,
    /// Unix microseconds.
    Us,
    /// Unix nanoseconds.
    Ns,
    /// RFC 3339 text (`2026-12-05T17:28:40.123Z`).
    Rfc3339,
}

impl Unit {
    fn parse(s: &str) -> Option<Unit> {
        Some(match s {
            "s" => Unit::S,
            "ms" => Unit::Ms,
            "us" => Unit::Us,
            "ns" => Unit::Ns,
            "rfc3339" => Unit::Rfc3339,
            _ => return None,
        })
    }
}

/// Only payloads whose value at `from` equals `equals` are ingested.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// Where the value is read.
    pub from: Field,
    /// The value it must equal.
    pub equals: Value,
}

/// Which engine a source feeds, and the fields only that engine has.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// `POST /events` of the window engine, appended to `partition`.
    Window {
        /// The pipeline partition the events are appended to.
        partition: String,
        /// The event's value (an integer).
        value: Field,
    },
    /// `POST /patterns/events`.
    Patterns {
        /// The event's kind (a string).
        kind: Field,
        /// The event's fields, by name.
        fields: Vec<(String, Field)>,
    },
}

/// A source's signature check.
pub struct Signature {
    /// The check itself, with the secrets loaded (None: not loaded, as in
    /// `pipeline check`).
    pub verifier: Option<Verifier>,
    /// The scheme.
    pub scheme: Scheme,
    /// Where the secrets are read (never the secrets).
    pub secrets_from: SecretsFrom,
}

/// Where a source's secrets are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretsFrom {
    /// An environment variable.
    Env(String),
    /// A file.
    File(PathBuf),
}

impl SecretsFrom {
    /// Whether the variable is set or the file exists here.
    pub fn present(&self) -> bool {
        match self {
            SecretsFrom::Env(v) => std::env::var_os(v).is_some(),
            SecretsFrom::File(f) => f.exists(),
        }
    }
}

impl std::fmt::Display for SecretsFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretsFrom::Env(v) => write!(f, "the environment variable {v}"),
            SecretsFrom::File(p) => write!(f, "the file {}", p.display()),
        }
    }
}

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signature")
            .field("scheme", &self.scheme)
            .field("secrets_from", &self.secrets_from)
            .finish()
    }
}

/// One `POST /ingest/{name}` source.
#[derive(Debug)]
pub struct Source {
    /// Its name (the path segment).
    pub name: String,
    /// The engine it feeds.
    pub target: Target,
    /// The event id (the producer's delivery id: retries are duplicates).
    pub id: Field,
    /// The event key.
    pub key: Field,
    /// The event time.
    pub timestamp: Field,
    /// The unit of `timestamp`.
    pub unit: Unit,
    /// Every filter must hold, or the payload is answered `filtered`.
    pub filters: Vec<Filter>,
    /// The signature check; None: the source needs the bearer token (when
    /// one is set) instead.
    pub signature: Option<Signature>,
    /// The pointers it reads, as one pass over a payload reads them.
    pub projection: super::projection::Projection,
}

/// The inbound configuration of a pipeline file.
#[derive(Debug, Default)]
pub struct Inbound {
    /// The sources, by name.
    pub sources: BTreeMap<String, Source>,
    /// The watermark strategies, by partition.
    pub watermarks: BTreeMap<String, Strategy>,
    /// `"sources"` as declared (for `GET /pipeline`; no secrets can be in it).
    pub declared_sources: Option<Value>,
    /// `"watermarks"` as declared.
    pub declared_watermarks: Option<Value>,
}

impl Inbound {
    /// Whether the file declared neither.
    pub fn is_empty(&self) -> bool {
        self.declared_sources.is_none() && self.declared_watermarks.is_none()
    }

    /// `GET /pipeline`: the engine's pipeline JSON with `"sources"` and
    /// `"watermarks"` added after its fields when declared (unchanged
    /// otherwise).
    pub fn pipeline_json(&self, engine_json: String) -> String {
        if self.is_empty() {
            return engine_json;
        }
        let mut out = engine_json;
        out.pop(); // the closing brace
        for (name, v) in [
            ("sources", &self.declared_sources),
            ("watermarks", &self.declared_watermarks),
        ] {
            if let Some(v) = v {
                out.push_str(&format!(",\"{name}\":{v}"));
            }
        }
        out.push('}');
        out
    }
}

/// A pipeline file's engine part and its inbound part.
type Split = (Vec<u8>, Option<Value>, Option<Value>);

/// Splits a pipeline file into the engine's part (the bytes
/// `Pipeline::from_json` reads: the file itself when it declares no
/// sources or watermarks) and its inbound part, still unvalidated.
pub fn split_pipeline(bytes: &[u8]) -> Result<Split, String> {
    // A file that is not a JSON object is the engine's to refuse.
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(bytes) else {
        return Ok((bytes.to_vec(), None, None));
    };
    let sources = map.remove("sources");
    let watermarks = map.remove("watermarks");
    if sources.is_none() && watermarks.is_none() {
        return Ok((bytes.to_vec(), None, None));
    }
    // serde_json keeps the last of duplicate keys: the file is refused for
    // them as the engine refuses them in a file without sources.
    crate::canonical::strict::parse(bytes)?;
    let rest = serde_json::to_vec(&Value::Object(map)).map_err(|e| e.to_string())?;
    Ok((rest, sources, watermarks))
}

/// A pipeline file: the engine's pipeline and the inbound sources and
/// watermark strategies declared beside it (docs/webhooks.md), every
/// mistake of the latter named by its JSON path.
pub fn pipeline_file(bytes: &[u8], secrets: Secrets) -> Result<(Pipeline, Inbound), String> {
    let (engine, sources, watermarks) = split_pipeline(bytes)?;
    let pipeline = Pipeline::from_json(&engine).map_err(|e| e.to_string())?;
    let inbound = validate(sources, watermarks, pipeline.partitions(), secrets)
        .map_err(|errs| errs.join("\n"))?;
    Ok((pipeline, inbound))
}

/// How secrets are loaded while validating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// Read them (serve): a missing variable or file is a mistake.
    Load,
    /// Do not (pipeline check): only the declarations are checked.
    Skip,
}

/// Validates `"sources"` and `"watermarks"` against the pipeline's
/// `partitions`. Every mistake is one line `PATH: what is wrong`.
pub fn validate(
    sources: Option<Value>,
    watermarks: Option<Value>,
    partitions: &[String],
    secrets: Secrets,
) -> Result<Inbound, Vec<String>> {
    let mut errs = Vec::new();
    let mut inbound = Inbound::default();
    if let Some(v) = &sources {
        match v {
            Value::Object(m) => {
                if m.is_empty() {
                    errs.push("sources: declares no source (remove it, or add one)".into());
                }
                for (name, decl) in m {
                    let path = format!("sources.{name}");
                    if name.is_empty()
                        || !name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                    {
                        errs.push(format!(
                            "{path}: a source name is 1 or more of A-Z a-z 0-9 _ - (it is a path segment of /ingest/{{source}})"
                        ));
                        continue;
                    }
                    if let Some(s) = source(name, decl, &path, partitions, secrets, &mut errs) {
                        inbound.sources.insert(name.clone(), s);
                    }
                }
            }
            _ => errs.push("sources: expected an object of sources by name".into()),
        }
    }
    if let Some(v) = &watermarks {
        match v {
            Value::Object(m) => {
                for (p, decl) in m {
                    let path = format!("watermarks.{p}");
                    if !partitions.contains(p) {
                        errs.push(format!(
                            "{path}: {p:?} is not a partition of the pipeline (its partitions: {})",
                            list(partitions)
                        ));
                        continue;
                    }
                    if let Some(s) = strategy(decl, &path, &mut errs) {
                        inbound.watermarks.insert(p.clone(), s);
                    }
                }
            }
            _ => errs.push("watermarks: expected an object of strategies by partition".into()),
        }
    }
    inbound.declared_sources = sources;
    inbound.declared_watermarks = watermarks;
    if errs.is_empty() {
        Ok(inbound)
    } else {
        Err(errs)
    }
}

/// `"a", "b"`.
pub fn list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn strategy(decl: &Value, path: &str, errs: &mut Vec<String>) -> Option<Strategy> {
    let m = object(decl, path, errs)?;
    let before = errs.len();
    unknown(m, &["max_out_of_orderness", "idle_after"], path, errs);
    let bound = m.get("max_out_of_orderness").and_then(|v| match v.as_i64() {
        Some(b) if b >= 0 => Some(b),
        _ => {
            errs.push(format!(
                "{path}.max_out_of_orderness: expected an integer >= 0 (milliseconds, in the events' time unit), got {v}"
            ));
            None
        }
    });
    let idle = m.get("idle_after").and_then(|v| match v.as_u64() {
        Some(ms) if ms > 0 => Some(ms),
        _ => {
            errs.push(format!(
                "{path}.idle_after: expected an integer > 0 (milliseconds of wall clock), got {v}"
            ));
            None
        }
    });
    if !m.contains_key("max_out_of_orderness") && !m.contains_key("idle_after") {
        errs.push(format!(
            "{path}: declares neither max_out_of_orderness nor idle_after"
        ));
    }
    (errs.len() == before).then_some(Strategy {
        max_out_of_orderness: bound,
        idle_after_ms: idle,
    })
}

fn object<'a>(v: &'a Value, path: &str, errs: &mut Vec<String>) -> Option<&'a Map<String, Value>> {
    match v {
        Value::Object(m) => Some(m),
        other => {
            errs.push(format!("{path}: expected an object, got {other}"));
            None
        }
    }
}

fn unknown(m: &Map<String, Value>, known: &[&str], path: &str, errs: &mut Vec<String>) {
    for k in m.keys() {
        if !known.contains(&k.as_str()) {
            errs.push(format!(
                "{path}.{k}: unknown field (expected one of {})",
                known.join(", ")
            ));
        }
    }
}

fn source(
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
    let (known, target): (&[&str], Option<Target>) = if target_name == "window" {
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
    } else {
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
    };
    unknown(m, known, path, errs);
    let id = field(m.get("id"), &format!("{path}.id"), FieldUse::Id, errs);
    let key = field(m.get("key"), &format!("{path}.key"), FieldUse::Key, errs);
    let time = time(m.get("timestamp"), &format!("{path}.timestamp"), errs);
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
        super::projection::Projection::new(fields.into_iter().filter_map(|f| match f {
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

fn signature(v: &Value, path: &str, secrets: Secrets, errs: &mut Vec<String>) -> Option<Signature> {
    let m = object(v, path, errs)?;
    let before = errs.len();
    let scheme_name = m.get("scheme").and_then(Value::as_str).unwrap_or("");
    // Only the schemes that sign a timestamp have a tolerance.
    let known: &[&str] = match scheme_name {
        "hmac" => &[
            "scheme",
            "secret_env",
            "secret_file",
            "header",
            "encoding",
            "prefix",
        ],
        "github" => &["scheme", "secret_env", "secret_file"],
        _ => &["scheme", "secret_env", "secret_file", "tolerance_s"],
    };
    for k in m.keys() {
        if k == "secret" || k == "secrets" {
            errs.push(format!(
                "{path}.{k}: secrets never go in the pipeline file (it is shown by GET /pipeline): name an environment variable (secret_env) or a file (secret_file)"
            ));
        }
    }
    unknown(m, known, path, errs);
    let scheme = match scheme_name {
        "standard_webhooks" => Some(Scheme::StandardWebhooks),
        "stripe" => Some(Scheme::Stripe),
        "github" => Some(Scheme::GitHub),
        "hmac" => {
            let header = match m.get("header") {
                Some(Value::String(h))
                    if axum::http::HeaderName::from_bytes(h.as_bytes()).is_ok() =>
                {
                    Some(h.to_ascii_lowercase())
                }
                other => {
                    errs.push(format!(
                        "{path}.header: expected the name of the header holding the signature, got {}",
                        other.map_or("nothing".to_string(), Value::to_string)
                    ));
                    None
                }
            };
            let encoding = match m.get("encoding").and_then(Value::as_str) {
                Some("hex") | None => Some(Encoding::Hex),
                Some("base64") => Some(Encoding::Base64),
                Some(other) => {
                    errs.push(format!(
                        "{path}.encoding: expected \"hex\" or \"base64\", got {other:?}"
                    ));
                    None
                }
            };
            let prefix = match m.get("prefix") {
                None => Some(String::new()),
                Some(Value::String(p)) => Some(p.clone()),
                Some(other) => {
                    errs.push(format!("{path}.prefix: expected a string, got {other}"));
                    None
                }
            };
            match (header, encoding, prefix) {
                (Some(header), Some(encoding), Some(prefix)) => Some(Scheme::Hmac(HmacScheme {
                    header,
                    encoding,
                    prefix,
                })),
                _ => None,
            }
        }
        _ => {
            errs.push(format!(
                "{path}.scheme: expected one of standard_webhooks, stripe, github, hmac, got {}",
                m.get("scheme")
                    .map_or("nothing".to_string(), Value::to_string)
            ));
            None
        }
    };
    let tolerance_s = match m.get("tolerance_s") {
        None => 300,
        Some(v) => match v.as_u64() {
            Some(t) if t > 0 => t,
            _ => {
                errs.push(format!(
                    "{path}.tolerance_s: expected an integer > 0 (seconds), got {v}"
                ));
                0
            }
        },
    };
    let env = m.get("secret_env");
    let file = m.get("secret_file");
    let origin = match (env, file) {
        (Some(Value::String(e)), None) if !e.is_empty() => Some((Some(e.clone()), None)),
        (None, Some(Value::String(f))) if !f.is_empty() => Some((None, Some(PathBuf::from(f)))),
        _ => {
            errs.push(format!(
                "{path}: exactly one of secret_env (an environment variable holding the secret) and secret_file (a file holding it), each a non-empty string"
            ));
            None
        }
    };
    if errs.len() != before {
        return None;
    }
    let (scheme, (env, file)) = (scheme?, origin?);
    let secrets_from = match (&env, &file) {
        (Some(e), _) => SecretsFrom::Env(e.clone()),
        (_, Some(f)) => SecretsFrom::File(f.clone()),
        _ => return None,
    };
    let verifier = match secrets {
        Secrets::Skip => None,
        Secrets::Load => {
            match super::signature::load_secrets(&scheme, env.as_deref(), file.as_deref()) {
                Ok(keys) => Some(Verifier {
                    scheme: scheme.clone(),
                    secrets: keys,
                    tolerance_s,
                }),
                Err(e) => {
                    errs.push(format!("{path}: {e}"));
                    return None;
                }
            }
        }
    };
    Some(Signature {
        verifier,
        scheme,
        secrets_from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> Vec<String> {
        vec!["p0".into(), "stripe".into()]
    }

    #[test]
    fn every_mistake_is_named_by_its_path() {
        let sources = serde_json::json!({
            "stripe": {
                "partition": "Stripe",
                "id": {"constant": "x"},
                "key": {"pointer": "data/object/customer"},
                "value": {"pointer": "/a~2"},
                "timestamp": {"pointer": "/created", "unit": "sec"},
                "signature": {"scheme": "stripe", "secret": "whsec_x"},
                "extra": 1
            },
            "bad name": {}
        });
        let watermarks = serde_json::json!({"nope": {"idle_after": 1}, "p0": {"idle_after": 0}});
        let errs = validate(Some(sources), Some(watermarks), &parts(), Secrets::Skip).unwrap_err();
        let all = errs.join("\n");
        for want in [
            "sources.stripe.partition: \"Stripe\" is not a partition of the pipeline (its partitions: \"p0\", \"stripe\")",
            "sources.stripe.id.constant: an id is never a constant",
            "sources.stripe.key.pointer: \"data/object/customer\" is not a JSON Pointer",
            "sources.stripe.value.pointer: \"/a~2\" has \"~2\"",
            "sources.stripe.timestamp.unit: expected one of s, ms, us, ns, rfc3339, got \"sec\"",
            "sources.stripe.signature.secret: secrets never go in the pipeline file",
            "sources.stripe.extra: unknown field",
            "sources.bad name: a source name",
            "watermarks.nope: \"nope\" is not a partition",
            "watermarks.p0.idle_after: expected an integer > 0",
        ] {
            assert!(all.contains(want), "missing {want:?} in:\n{all}");
        }
    }

    #[test]
    fn a_valid_declaration_and_the_pipeline_json() {
        let sources = serde_json::json!({
            "gh": {
                "partition": "p0",
                "signature": {"scheme": "github", "secret_env": "GH_SECRET"},
                "id": {"header": "X-GitHub-Delivery"},
                "key": {"pointer": "/repository/full_name"},
                "value": {"constant": 1},
                "timestamp": {"pointer": "/repository/pushed_at", "unit": "s"},
                "filter": {"header": "X-GitHub-Event", "equals": "push"}
            }
        });
        let wm = serde_json::json!({"p0": {"max_out_of_orderness": 5000, "idle_after": 60000}});
        let ib = validate(Some(sources), Some(wm), &parts(), Secrets::Skip).unwrap();
        let s = &ib.sources["gh"];
        assert_eq!(s.id, Field::Header("x-github-delivery".into()));
        assert_eq!(s.unit, Unit::S);
        assert_eq!(s.filters.len(), 1);
        assert_eq!(
            ib.watermarks["p0"],
            Strategy {
                max_out_of_orderness: Some(5000),
                idle_after_ms: Some(60000)
            }
        );
        let j = ib.pipeline_json("{\"partitions\":[\"p0\"]}".into());
        assert!(
            j.starts_with("{\"partitions\":[\"p0\"],\"sources\":{\"gh\":"),
            "{j}"
        );
        assert!(
            j.ends_with(
                ",\"watermarks\":{\"p0\":{\"idle_after\":60000,\"max_out_of_orderness\":5000}}}"
            ),
            "{j}"
        );
        // without them the engine's JSON is untouched
        let none = Inbound::default();
        assert_eq!(none.pipeline_json("{\"a\":1}".into()), "{\"a\":1}");
    }

    #[test]
    fn split_leaves_a_plain_pipeline_byte_for_byte() {
        let plain = br#"{ "partitions": ["p0"], "windows": {"w": {"kind":"fixed","size":10}}, "lateness": 0 }"#;
        let (rest, s, w) = split_pipeline(plain).unwrap();
        assert_eq!((rest.as_slice(), s, w), (&plain[..], None, None));
        let with = br#"{"partitions":["p0"],"windows":{},"lateness":0,"watermarks":{"p0":{"idle_after":5}}}"#;
        let (rest, s, w) = split_pipeline(with).unwrap();
        assert!(s.is_none() && w.is_some());
        assert!(!String::from_utf8(rest).unwrap().contains("watermarks"));
    }
}
