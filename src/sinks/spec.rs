//! A sink's configuration: the `POST /sinks` body, its validation (every
//! failure is a [`SinkError`] whose detail names the field), the form
//! stored in the database, and the filter.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::store::Stream;

use super::error::SinkError;

/// Largest `batch_size`.
pub const MAX_BATCH: u64 = 10_000;
/// `batch_size` when none is given.
pub const DEFAULT_BATCH: u64 = 100;
/// At most this many extra headers.
const MAX_HEADERS: usize = 32;

/// Headers a sink may not set: the ones the service writes itself, and the
/// ones HTTP reserves for the connection.
const RESERVED: &[&str] = &[
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "user-agent",
    "idempotency-key",
];

/// The `POST /sinks` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSink {
    /// Unique name: 1 to 64 of `A-Z a-z 0-9 . _ -`.
    pub name: String,
    /// `http://` or `https://` URL.
    pub url: String,
    /// `changes`, `late` or `patterns`.
    pub stream: String,
    /// Optional filter.
    #[serde(default)]
    pub filter: Option<Filter>,
    /// Records per request (1 ..= 10000, default 100).
    #[serde(default)]
    pub batch_size: Option<i64>,
    /// `"head"` (default), `"start"`, or a sequence.
    #[serde(default)]
    pub start: Option<serde_json::Value>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: Option<Headers>,
    /// HMAC-SHA256 key of the signature header.
    #[serde(default)]
    pub secret: Option<String>,
}

/// What a sink's filter keeps (every field given must match exactly).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// `changes`: the result's window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// `changes`: the result's key; `late`: the event's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `patterns`: the record's pattern.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// `patterns`: `match` or `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

impl Filter {
    fn is_empty(&self) -> bool {
        *self == Filter::default()
    }
}

/// Extra headers in the order given; a name given twice (in any case) is
/// refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for Headers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Headers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of header names and string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Headers, A::Error> {
                let mut out: Vec<(String, String)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    if out.iter().any(|(n, _)| n.eq_ignore_ascii_case(&k)) {
                        return Err(de::Error::custom(format!(
                            "header {k:?} is given twice (names are case-insensitive)"
                        )));
                    }
                    out.push((k, v));
                }
                Ok(Headers(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Where a new sink starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// After the stream's current head: only what comes next.
    Head,
    /// From the stream's first record.
    Start,
    /// After this sequence (of the current epoch).
    After(u64),
}

/// A validated sink configuration, as stored (`sinks.config`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// The receiver's URL.
    pub url: String,
    /// Records per request.
    pub batch_size: u64,
    /// `None`: every record.
    pub filter: Option<Filter>,
    /// Extra headers, in order.
    pub headers: Vec<(String, String)>,
    /// The signature key.
    pub secret: Option<String>,
}

fn invalid(detail: impl Into<String>) -> SinkError {
    SinkError::Invalid(detail.into())
}

/// Checks a sink name (it appears in paths, headers and metric labels).
pub fn check_name(name: &str) -> Result<(), SinkError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "name {name:?} must be 1 to 64 characters, each a letter, a digit, '.', '_' or '-'"
        )))
    }
}

/// The stream a sink names.
pub fn parse_stream(s: &str) -> Result<Stream, SinkError> {
    match s {
        "changes" => Ok(Stream::Changes),
        "late" => Ok(Stream::Late),
        "patterns" => Ok(Stream::Patterns),
        other => Err(invalid(format!(
            "stream {other:?} is not one of \"changes\", \"late\", \"patterns\""
        ))),
    }
}

fn check_url(raw: &str) -> Result<(), SinkError> {
    if raw.len() > 2048 {
        return Err(invalid("url is longer than 2048 bytes"));
    }
    let url = reqwest::Url::parse(raw).map_err(|e| invalid(format!("url {raw:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "url {raw:?}: the scheme must be http or https, not {:?}",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid(format!("url {raw:?} has no host")));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "url must not carry credentials (user:password@); give them as a header \
             (\"headers\": {\"Authorization\": \"...\"})",
        ));
    }
    Ok(())
}

fn check_filter(stream: Stream, f: &Filter) -> Result<(), SinkError> {
    let allowed: &[&str] = match stream {
        Stream::Changes => &["window", "key"],
        Stream::Late => &["key"],
        Stream::Patterns => &["pattern", "type"],
    };
    let given = [
        ("window", f.window.is_some()),
        ("key", f.key.is_some()),
        ("pattern", f.pattern.is_some()),
        ("type", f.kind.is_some()),
    ];
    for (name, set) in given {
        if set && !allowed.contains(&name) {
            return Err(invalid(format!(
                "filter.{name} does not apply to the {} stream (it takes {})",
                stream.name(),
                allowed
                    .iter()
                    .map(|a| format!("{a:?}"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            )));
        }
    }
    if let Some(k) = &f.kind {
        if !matches!(k.as_str(), "match" | "timeout") {
            return Err(invalid(format!(
                "filter.type {k:?} is not \"match\" or \"timeout\""
            )));
        }
    }
    Ok(())
}

fn check_headers(h: &[(String, String)]) -> Result<(), SinkError> {
    if h.len() > MAX_HEADERS {
        return Err(invalid(format!("at most {MAX_HEADERS} headers")));
    }
    for (name, value) in h {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(invalid(format!("header name {name:?} is not a valid name")));
        }
        let lower = name.to_ascii_lowercase();
        if RESERVED.contains(&lower.as_str()) || lower.starts_with("x-streamforge-") {
            return Err(invalid(format!(
                "header {name:?} is set by the service itself (or by HTTP) and cannot be given"
            )));
        }
        // Visible ASCII, spaces and tabs; the value is not echoed (it may
        // be a credential).
        let ok = value.len() <= 4096
            && value
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
            && reqwest::header::HeaderValue::from_str(value).is_ok();
        if !ok {
            return Err(invalid(format!(
                "the value of header {name:?} must be at most 4096 characters of visible \
                 ASCII, spaces and tabs"
            )));
        }
    }
    Ok(())
}

/// Reads `start`.
fn parse_start(v: Option<&serde_json::Value>) -> Result<Start, SinkError> {
    use serde_json::Value;
    match v {
        None | Some(Value::Null) => Ok(Start::Head),
        Some(Value::String(s)) if s == "head" => Ok(Start::Head),
        Some(Value::String(s)) if s == "start" => Ok(Start::Start),
        Some(Value::String(s)) => Err(invalid(format!(
            "start {s:?} is not \"head\", \"start\" or a sequence number"
        ))),
        Some(Value::Number(n)) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) if u <= i64::MAX as u64 => Ok(Start::After(u)),
            (_, Some(neg)) if neg < 0 => Err(invalid(format!(
                "start must be a sequence in 0..=9223372036854775807, got {neg}"
            ))),
            _ => Err(SinkError::BadRequest(format!(
                "start must be \"head\", \"start\" or an integer sequence, got {n}"
            ))),
        },
        Some(other) => Err(SinkError::BadRequest(format!(
            "start must be \"head\", \"start\" or an integer sequence, got {other}"
        ))),
    }
}

impl NewSink {
    /// Validates everything but the start position against the stream's
    /// head: the name, stream, start and the stored configuration.
    pub fn validate(&self) -> Result<(Stream, Start, Spec), SinkError> {
        check_name(&self.name)?;
        let stream = parse_stream(&self.stream)?;
        check_url(&self.url)?;
        let filter = match &self.filter {
            Some(f) if !f.is_empty() => {
                check_filter(stream, f)?;
                Some(f.clone())
            }
            _ => None,
        };
        let batch_size = match self.batch_size {
            None => DEFAULT_BATCH,
            Some(b) if (1..=MAX_BATCH as i64).contains(&b) => b as u64,
            Some(b) => {
                return Err(invalid(format!(
                    "batch_size must be in 1..={MAX_BATCH}, got {b}"
                )))
            }
        };
        let headers = self.headers.clone().unwrap_or_default().0;
        check_headers(&headers)?;
        if let Some(s) = &self.secret {
            if s.is_empty() || s.len() > 1024 {
                return Err(invalid("secret must be 1 to 1024 bytes"));
            }
        }
        let start = parse_start(self.start.as_ref())?;
        Ok((
            stream,
            start,
            Spec {
                url: self.url.clone(),
                batch_size,
                filter,
                headers,
                secret: self.secret.clone(),
            },
        ))
    }
}

#[derive(Deserialize)]
struct ChangeKeys<'a> {
    #[serde(borrow)]
    result: ResultKeys<'a>,
}

#[derive(Deserialize)]
struct ResultKeys<'a> {
    #[serde(borrow)]
    window: Cow<'a, str>,
    #[serde(borrow)]
    key: Cow<'a, str>,
}

#[derive(Deserialize)]
struct LateKeys<'a> {
    #[serde(borrow)]
    event: EventKeys<'a>,
}

#[derive(Deserialize)]
struct EventKeys<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
}

#[derive(Deserialize)]
struct OutputKeys<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    pattern: Cow<'a, str>,
}

impl Filter {
    /// Whether the record (its stored JSON) passes. A record the filter
    /// cannot read is kept (it never happens: the records are ours).
    pub fn keeps(&self, stream: Stream, json: &str) -> bool {
        let eq = |want: &Option<String>, got: &str| want.as_deref().is_none_or(|w| w == got);
        match stream {
            Stream::Changes => serde_json::from_str::<ChangeKeys<'_>>(json).map_or(true, |c| {
                eq(&self.window, &c.result.window) && eq(&self.key, &c.result.key)
            }),
            Stream::Late => serde_json::from_str::<LateKeys<'_>>(json)
                .map_or(true, |l| eq(&self.key, &l.event.key)),
            Stream::Patterns => serde_json::from_str::<OutputKeys<'_>>(json).map_or(true, |o| {
                eq(&self.pattern, &o.pattern) && eq(&self.kind, &o.kind)
            }),
        }
    }
}
