//! A producer's payload (and its headers) to events, as its source maps it.
//!
//! A body is one payload, a JSON array of payloads, or (with an NDJSON
//! `Content-Type`) one payload per line: the same mapping applies to each
//! item. Filters decide which items are ingested; every mapping failure
//! names the item, the pointer or header, and what was expected.

use axum::http::HeaderMap;
use serde_json::Value;

use std::borrow::Cow;

use super::config::{Field, Source, Target, Unit};
use super::projection::{Found, Projection};
use crate::canonical::writer::{int, string};
pub use crate::engine::Event;
use crate::engine::WriteJson;
use crate::service::parse::Framing;

/// An event of the pattern engine.
#[derive(Debug, Clone, PartialEq)]
pub struct PatternEvent {
    /// The event id.
    pub id: String,
    /// The key.
    pub key: String,
    /// The kind.
    pub kind: String,
    /// The event time, in milliseconds since the Unix epoch.
    pub time: i64,
    /// The fields found (a missing or null one is left out).
    pub fields: Vec<(String, Value)>,
}

/// The events of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Events {
    /// For the window engine.
    Window(Vec<Event>),
    /// For the pattern engine.
    Patterns(Vec<PatternEvent>),
}

impl Events {
    /// How many.
    pub fn len(&self) -> usize {
        match self {
            Events::Window(v) => v.len(),
            Events::Patterns(v) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A mapped request.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    /// Whether the body was a batch (array or NDJSON).
    pub batch: bool,
    /// Items in the body.
    pub items: usize,
    /// Items the filters left out.
    pub filtered: usize,
    /// The events of the other items, in order.
    pub events: Events,
}

/// Why a request cannot be mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapError {
    /// The failing item of a batch.
    pub index: Option<usize>,
    /// What failed: `body`, a JSON Pointer, or `header NAME`.
    pub at: String,
    /// What is wrong, and what was expected.
    pub detail: String,
    /// True when the body itself is unusable (not JSON, not UTF-8, empty
    /// batch), false when an item does not fit the mapping.
    pub malformed: bool,
}

impl std::fmt::Display for MapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(i) = self.index {
            write!(f, "item {i}: ")?;
        }
        if self.at == "body" {
            f.write_str(&self.detail)
        } else {
            write!(f, "{}: {}", self.at, self.detail)
        }
    }
}

fn body_error(detail: String) -> MapError {
    MapError {
        index: None,
        at: "body".into(),
        detail,
        malformed: true,
    }
}

/// The items of a body, each as the values its source reads: NDJSON
/// lines, the elements of a JSON array, or the one payload; and whether it
/// was a batch.
pub fn items(
    proj: &Projection,
    body: &[u8],
    framing: Framing,
) -> Result<(Vec<Found>, bool), MapError> {
    if let Err(e) = std::str::from_utf8(body) {
        return Err(body_error(format!(
            "the body is not UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        )));
    }
    let not_json = |e: serde_json::Error| {
        body_error(format!(
            "the body is not JSON: {e} (a payload, a JSON array of payloads, or NDJSON \
             with Content-Type: application/x-ndjson)"
        ))
    };
    let (items, batch) = if framing == Framing::Ndjson {
        let mut out = Vec::new();
        for (n, line) in body.split(|b| *b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let v = proj.read(line).map_err(|e| MapError {
                index: Some(out.len()),
                ..body_error(format!("line {}: not JSON: {e}", n + 1))
            })?;
            out.push(v);
        }
        (out, true)
    } else if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        (proj.read_array(body).map_err(not_json)?, true)
    } else {
        (vec![proj.read(body).map_err(not_json)?], false)
    };
    if items.is_empty() {
        return Err(body_error("the batch is empty".into()));
    }
    Ok((items, batch))
}

/// Maps a request's body with `source`'s mapping.
pub fn map(
    source: &Source,
    headers: &HeaderMap,
    body: &[u8],
    framing: Framing,
) -> Result<Mapped, MapError> {
    let (items, batch) = items(&source.projection, body, framing)?;
    let n = items.len();
    let mut filtered = 0;
    let mut events = match source.target {
        Target::Window { .. } => Events::Window(Vec::with_capacity(n)),
        Target::Patterns { .. } => Events::Patterns(Vec::with_capacity(n)),
    };
    for (i, item) in items.iter().enumerate() {
        let at = Item {
            found: item,
            projection: &source.projection,
            headers,
            index: batch.then_some(i),
        };
        if !source
            .filters
            .iter()
            .all(|f| at.read(&f.from).as_deref() == Some(&f.equals))
        {
            filtered += 1;
            continue;
        }
        let id = at.id(&source.id)?;
        let key = at.text(&source.key, "the key", true)?;
        let time = at.time(&source.timestamp, source.unit)?;
        match (&source.target, &mut events) {
            (Target::Window { value, .. }, Events::Window(out)) => out.push(Event {
                id,
                key,
                timestamp: time,
                value: at.integer(value)?,
            }),
            (Target::Patterns { kind, fields }, Events::Patterns(out)) => {
                let kind = at.text(kind, "the kind", false)?;
                let mut fs = Vec::with_capacity(fields.len());
                for (name, f) in fields {
                    match at.read(f).map(Cow::into_owned) {
                        None | Some(Value::Null) => {}
                        Some(v @ (Value::String(_) | Value::Bool(_) | Value::Number(_))) => {
                            fs.push((name.clone(), v))
                        }
                        Some(other) => {
                            return Err(at.fail(
                                f,
                                format!(
                                    "expected a string, a number or a boolean for the field {name:?}, got {}",
                                    kind_of(&other)
                                ),
                            ))
                        }
                    }
                }
                out.push(PatternEvent {
                    id,
                    key,
                    kind,
                    time,
                    fields: fs,
                })
            }
            _ => unreachable!("events are made for the source's target"),
        }
    }
    Ok(Mapped {
        batch,
        items: n,
        filtered,
        events,
    })
}

/// One item (the values its source reads) and its request's headers.
struct Item<'a> {
    found: &'a Found,
    projection: &'a Projection,
    headers: &'a HeaderMap,
    index: Option<usize>,
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a decimal number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn where_(f: &Field) -> String {
    match f {
        Field::Pointer(p) if p.is_empty() => "the item (pointer \"\")".into(),
        Field::Pointer(p) => p.clone(),
        Field::Header(h) => format!("header {h}"),
        Field::Constant(_) => "constant".into(),
    }
}

impl Item<'_> {
    fn fail(&self, f: &Field, detail: String) -> MapError {
        MapError {
            index: self.index,
            at: where_(f),
            detail,
            malformed: false,
        }
    }

    /// The value at `f`: a header as a JSON string.
    fn read<'s>(&'s self, f: &'s Field) -> Option<Cow<'s, Value>> {
        match f {
            Field::Pointer(p) => self
                .projection
                .slot(p)
                .and_then(|s| self.found[s].as_ref())
                .map(Cow::Borrowed),
            Field::Header(h) => self
                .headers
                .get(h)
                // Svix sends the Standard Webhooks headers as svix-*.
                .or_else(|| {
                    h.strip_prefix("webhook-")
                        .and_then(|rest| self.headers.get(format!("svix-{rest}")))
                })
                .and_then(|v| v.to_str().ok())
                .map(|s| Cow::Owned(Value::String(s.to_string()))),
            Field::Constant(c) => Some(Cow::Borrowed(c)),
        }
    }

    fn missing(&self, f: &Field, what: &str) -> MapError {
        self.fail(
            f,
            match f {
                Field::Header(_) => format!("missing (or not visible ASCII): expected {what}"),
                _ => format!("missing: expected {what}"),
            },
        )
    }

    fn id(&self, f: &Field) -> Result<String, MapError> {
        let v = self.read(f);
        let id = match v.as_deref() {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            None => return Err(self.missing(f, "the event id (a non-empty string)")),
            Some(other) => {
                return Err(self.fail(
                    f,
                    format!(
                        "expected the event id (a non-empty string), got {}",
                        if other.as_str() == Some("") {
                            "an empty string"
                        } else {
                            kind_of(other)
                        }
                    ),
                ))
            }
        };
        // One delivery id for a whole batch: each item is `ID/INDEX`.
        Ok(match (f, self.index) {
            (Field::Header(_), Some(i)) => format!("{id}/{i}"),
            _ => id,
        })
    }

    fn text(&self, f: &Field, what: &str, numbers: bool) -> Result<String, MapError> {
        match self.read(f).as_deref() {
            Some(Value::String(s)) if numbers || !s.is_empty() => Ok(s.clone()),
            Some(Value::Number(n)) if numbers && (n.is_i64() || n.is_u64()) => Ok(n.to_string()),
            None => Err(self.missing(f, &format!("{what} (a string)"))),
            Some(other) => Err(self.fail(
                f,
                format!(
                    "expected {what} ({}), got {}",
                    if numbers {
                        "a string or an integer"
                    } else {
                        "a non-empty string"
                    },
                    kind_of(other)
                ),
            )),
        }
    }

    fn integer(&self, f: &Field) -> Result<i64, MapError> {
        const WHAT: &str =
            "the value (an integer in the signed 64-bit range, or a string holding one)";
        match self.read(f).as_deref() {
            Some(Value::Number(n)) => match n.as_i64() {
                Some(v) => Ok(v),
                None if n.is_u64() => {
                    Err(self.fail(f, format!("{n} is beyond the signed 64-bit range")))
                }
                None => Err(self.fail(
                    f,
                    format!(
                        "expected {WHAT}, got the decimal number {n}: values are exact integers; \
                         send amounts in minor units (cents), as Stripe does"
                    ),
                )),
            },
            Some(Value::String(s)) => s
                .trim()
                .parse::<i64>()
                .map_err(|_| self.fail(f, format!("expected {WHAT}, got the string {s:?}"))),
            None => Err(self.missing(f, WHAT)),
            Some(other) => Err(self.fail(f, format!("expected {WHAT}, got {}", kind_of(other)))),
        }
    }

    fn time(&self, f: &Field, unit: Unit) -> Result<i64, MapError> {
        let what = match unit {
            Unit::S => "a time in Unix seconds (an integer)",
            Unit::Ms => "a time in Unix milliseconds (an integer)",
            Unit::Us => "a time in Unix microseconds (an integer)",
            Unit::Ns => "a time in Unix nanoseconds (an integer)",
            Unit::Rfc3339 => "an RFC 3339 time (2026-12-05T17:28:40Z)",
        };
        let v = self.read(f).ok_or_else(|| self.missing(f, what))?;
        if unit == Unit::Rfc3339 {
            return match &*v {
                Value::String(s) => {
                    rfc3339_ms(s).ok_or_else(|| self.fail(f, format!("expected {what}, got {s:?}")))
                }
                other => Err(self.fail(f, format!("expected {what}, got {}", kind_of(other)))),
            };
        }
        let n = match &*v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        }
        .ok_or_else(|| self.fail(f, format!("expected {what}, got {}", shown(&v))))?;
        match unit {
            Unit::S => n.checked_mul(1000).ok_or_else(|| {
                self.fail(f, format!("{n} s is beyond the range of millisecond times"))
            }),
            Unit::Ms => Ok(n),
            Unit::Us => Ok(n.div_euclid(1000)),
            Unit::Ns => Ok(n.div_euclid(1_000_000)),
            Unit::Rfc3339 => unreachable!("handled above"),
        }
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        other => kind_of(other).to_string(),
    }
}

/// An RFC 3339 date-time (`2026-12-05T17:28:40.123+01:00`; `T` or a space,
/// `Z` or an offset) in milliseconds since the Unix epoch; digits past the
/// millisecond are dropped (toward the past).
pub fn rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let d = b.get(r)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| d.iter().fold(0i64, |a, c| a * 10 + i64::from(c - b'0')))
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut ms = 0i64;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &b[start..i.min(start + 3)];
        ms = frac.iter().fold(0, |a, c| a * 10 + i64::from(c - b'0'))
            * 10i64.pow(3 - frac.len() as u32);
    }
    let offset_min = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = oh * 60 + om;
            if *sign == b'-' {
                -m
            } else {
                m
            }
        }
        _ => return None,
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo)
        || d < 1
        || d > days_in[(mo - 1) as usize]
        || h > 23
        || mi > 59
        || sec > 60
    {
        return None;
    }
    // Days from 1970-01-01 (Howard Hinnant's days_from_civil).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    // A leap second (60) counts as the next second's start.
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    Some(secs * 1000 + ms)
}

/// The `POST /events` body of window events appended to `partition`: a JSON
/// array of deliveries without offsets.
pub fn deliveries_body(partition: &str, events: &[Event]) -> Vec<u8> {
    let mut out = Vec::with_capacity(events.len() * (96 + partition.len()));
    out.push(b'[');
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"partition\":");
        string(&mut out, partition);
        out.extend_from_slice(b",\"event\":");
        e.write_json(&mut out);
        out.push(b'}');
    }
    out.push(b']');
    out
}

/// The `POST /patterns/events` body of pattern events: a JSON array.
pub fn pattern_events_body(events: &[PatternEvent]) -> Vec<u8> {
    let mut out = Vec::with_capacity(events.len() * 160);
    out.push(b'[');
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"id\":");
        string(&mut out, &e.id);
        out.extend_from_slice(b",\"key\":");
        string(&mut out, &e.key);
        out.extend_from_slice(b",\"kind\":");
        string(&mut out, &e.kind);
        out.extend_from_slice(b",\"time\":");
        int(&mut out, e.time);
        out.extend_from_slice(b",\"fields\":{");
        for (j, (name, v)) in e.fields.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            string(&mut out, name);
            out.push(b':');
            // Scalars only (checked when mapped): serde_json writes a
            // float with its fraction (2.0), as the pattern engine reads a
            // Double.
            out.extend_from_slice(v.to_string().as_bytes());
        }
        out.extend_from_slice(b"}}");
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbound::config::{validate, Secrets};

    fn source(decl: Value) -> Source {
        let mut ib = validate(
            Some(serde_json::json!({ "s": decl })),
            None,
            &["p0".to_string()],
            Secrets::Skip,
        )
        .unwrap();
        ib.sources.remove("s").unwrap()
    }

    fn stripe() -> Source {
        source(serde_json::json!({
            "partition": "p0",
            "id": {"pointer": "/id"},
            "key": {"pointer": "/data/object/customer"},
            "value": {"pointer": "/data/object/amount"},
            "timestamp": {"pointer": "/created", "unit": "s"},
            "filter": {"pointer": "/type", "equals": "charge.succeeded"}
        }))
    }

    fn charge(id: &str, ty: &str, amount: Value) -> Value {
        serde_json::json!({"id": id, "object": "event", "type": ty, "created": 1_700_000_000,
            "data": {"object": {"id": "ch_1", "amount": amount, "customer": "cus_9"}}})
    }

    #[test]
    fn a_stripe_event_maps_and_others_are_filtered() {
        let s = stripe();
        let body = serde_json::to_vec(&charge("evt_1", "charge.succeeded", 1250.into())).unwrap();
        let m = map(&s, &HeaderMap::new(), &body, Framing::Json).unwrap();
        assert_eq!(
            m.events,
            Events::Window(vec![Event {
                id: "evt_1".into(),
                key: "cus_9".into(),
                timestamp: 1_700_000_000_000,
                value: 1250
            }])
        );
        assert!(!m.batch);
        let body = serde_json::to_vec(&charge("evt_2", "charge.failed", 1.into())).unwrap();
        let m = map(&s, &HeaderMap::new(), &body, Framing::Json).unwrap();
        assert_eq!((m.filtered, m.events.len()), (1, 0));
        // a batch, with one item filtered
        let body = serde_json::to_vec(&vec![
            charge("a", "charge.succeeded", 1.into()),
            charge("b", "charge.refunded", 2.into()),
        ])
        .unwrap();
        let m = map(&s, &HeaderMap::new(), &body, Framing::Json).unwrap();
        assert!(m.batch);
        assert_eq!((m.items, m.filtered, m.events.len()), (2, 1, 1));
    }

    #[test]
    fn mapping_failures_name_the_pointer_and_what_was_expected() {
        let s = stripe();
        let body = serde_json::to_vec(&charge(
            "evt_1",
            "charge.succeeded",
            serde_json::json!(12.5),
        ))
        .unwrap();
        let e = map(&s, &HeaderMap::new(), &body, Framing::Json).unwrap_err();
        assert_eq!(e.at, "/data/object/amount");
        assert!(e.detail.contains("decimal number 12.5"), "{e}");
        let mut v = charge("evt_1", "charge.succeeded", 1.into());
        v["data"]["object"]
            .as_object_mut()
            .unwrap()
            .remove("customer");
        let e = map(
            &s,
            &HeaderMap::new(),
            v.to_string().as_bytes(),
            Framing::Json,
        )
        .unwrap_err();
        assert_eq!(e.at, "/data/object/customer");
        assert!(e.detail.starts_with("missing"), "{e}");
        let nd = format!(
            "{}\n{}\n",
            charge("a", "charge.succeeded", 1.into()),
            serde_json::json!({"type": "charge.succeeded", "id": "b", "created": "yesterday",
                "data": {"object": {"amount": 1, "customer": "c"}}})
        );
        let e = map(&s, &HeaderMap::new(), nd.as_bytes(), Framing::Ndjson).unwrap_err();
        assert_eq!((e.index, e.at.as_str()), (Some(1), "/created"));
        assert!(e.detail.contains("the string \"yesterday\""), "{e}");
        let e = map(&s, &HeaderMap::new(), b"{'id': 1}", Framing::Json).unwrap_err();
        assert!(
            e.malformed && e.detail.starts_with("the body is not JSON"),
            "{e}"
        );
        let e = map(&s, &HeaderMap::new(), b"[]", Framing::Json).unwrap_err();
        assert!(e.malformed, "{e}");
        let e = map(&s, &HeaderMap::new(), b"{\"a\":\"\xff\"}", Framing::Json).unwrap_err();
        assert!(e.detail.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn header_ids_and_units() {
        let s = source(serde_json::json!({
            "partition": "p0",
            "id": {"header": "X-GitHub-Delivery"},
            "key": {"pointer": "/repository/id"},
            "value": {"constant": 1},
            "timestamp": {"pointer": "/t", "unit": "ns"},
        }));
        let mut h = HeaderMap::new();
        h.insert("x-github-delivery", "d-1".parse().unwrap());
        let m = map(&s, &h, br#"{"repository":{"id":42},"t":-1}"#, Framing::Json).unwrap();
        assert_eq!(
            m.events,
            Events::Window(vec![Event {
                id: "d-1".into(),
                key: "42".into(),
                timestamp: -1,
                value: 1
            }])
        );
        let m = map(
            &s,
            &h,
            br#"[{"repository":{"id":"a"},"t":5000000},{"repository":{"id":"b"},"t":0}]"#,
            Framing::Json,
        )
        .unwrap();
        let Events::Window(ev) = m.events else {
            panic!()
        };
        assert_eq!(
            (ev[0].id.as_str(), ev[1].id.as_str(), ev[0].timestamp),
            ("d-1/0", "d-1/1", 5)
        );
        let e = map(
            &s,
            &HeaderMap::new(),
            br#"{"repository":{"id":1},"t":1}"#,
            Framing::Json,
        )
        .unwrap_err();
        assert_eq!(e.at, "header x-github-delivery");
    }

    #[test]
    fn rfc3339() {
        assert_eq!(rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            rfc3339_ms("2026-12-05T17:28:40.123Z"),
            Some(1_796_491_720_123)
        );
        assert_eq!(
            rfc3339_ms("2026-12-05T18:28:40.1239+01:00"),
            Some(1_796_491_720_123)
        );
        assert_eq!(rfc3339_ms("1969-12-31T23:59:59.5Z"), Some(-500));
        assert_eq!(rfc3339_ms("2024-02-29 00:00:00z"), Some(1_709_164_800_000));
        for bad in [
            "2023-02-29T00:00:00Z",
            "2026-12-05T17:28:40",
            "2026-12-05",
            "2026-13-01T00:00:00Z",
            "2026-12-05T17:28:40.Z",
            "x026-12-05T17:28:40Z",
            "2026-12-05T17:28:40+0100",
        ] {
            assert_eq!(rfc3339_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn bodies_parse_as_the_engines_read_them() {
        let ev = vec![Event {
            id: "i\"d".into(),
            key: "k".into(),
            timestamp: -3,
            value: i64::MIN,
        }];
        let b = deliveries_body("p0", &ev);
        let p =
            crate::service::parse::deliveries(&b, crate::service::parse::Framing::Json).unwrap();
        assert_eq!(
            (
                p.items[0].event.id.as_ref(),
                p.items[0].event.value,
                p.items[0].offset
            ),
            ("i\"d", i64::MIN, None)
        );
        let pe = vec![PatternEvent {
            id: "e".into(),
            key: "k".into(),
            kind: "charge".into(),
            time: 5,
            fields: vec![
                ("amount".into(), serde_json::json!(2.0)),
                ("ok".into(), Value::Bool(true)),
            ],
        }];
        let b = pattern_events_body(&pe);
        assert_eq!(
            String::from_utf8(b.clone()).unwrap(),
            r#"[{"id":"e","key":"k","kind":"charge","time":5,"fields":{"amount":2.0,"ok":true}}]"#
        );
        crate::service::parse::pattern_events(&b, crate::service::parse::Framing::Json).unwrap();
    }
}
