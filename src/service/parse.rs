//! The one parser of `POST /events` bodies, shared by the api (before the
//! engines lock) and recovery (replaying the raw bodies of logs written
//! before deliveries were logged in binary), so a replay
//! reads exactly what was accepted. Deliveries borrow their strings from the
//! body wherever the JSON has no escapes.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::Deserializer;

use crate::canonical::strict::{self, ObjectSeed};
use crate::engine::DeliveryRef;

use super::fastparse;

/// How a body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One JSON delivery or a JSON array of them.
    Json,
    /// One delivery per line (`application/x-ndjson`).
    Ndjson,
}

impl Framing {
    /// The command-log kind of a body with this framing.
    pub fn kind(self) -> &'static str {
        match self {
            Framing::Json => "events",
            Framing::Ndjson => "ndjson",
        }
    }
}

/// A parsed body.
#[derive(Debug)]
pub struct Parsed<'a> {
    /// The deliveries, in request order.
    pub items: Vec<DeliveryRef<'a>>,
    /// Whether the body was a batch (array or NDJSON).
    pub batch: bool,
}

/// Why a body is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Malformed; `index` names the failing delivery of a batch.
    Malformed {
        /// What is wrong.
        message: String,
        /// The failing delivery of a batch.
        index: Option<usize>,
    },
    /// A batch without deliveries.
    Empty,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Malformed { message, .. } => f.write_str(message),
            ParseError::Empty => f.write_str("the batch is empty"),
        }
    }
}

/// Parses a `POST /events` body. A `-0` integer (no fraction, no
/// exponent) is 0; the deliveries read integers straight from serde_json,
/// which cannot tell `-0` from `-0.0`, so a body holding one is parsed as a
/// copy with each such token written ` 0` (same length: error positions
/// hold), its deliveries owning their strings.
pub fn deliveries(body: &[u8], framing: Framing) -> Result<Parsed<'_>, ParseError> {
    match without_minus_zero(body) {
        None => parse_deliveries(body, framing),
        Some(copy) => {
            let parsed = parse_deliveries(&copy, framing)?;
            Ok(Parsed {
                items: parsed
                    .items
                    .into_iter()
                    .map(DeliveryRef::into_owned)
                    .collect(),
                batch: parsed.batch,
            })
        }
    }
}

/// A copy of `body` with every `-0` integer token outside strings written
/// ` 0`, or `None` when there is none (`-0.0`, `-0e1`, `-01` and `"-0"`
/// stay as they are).
fn without_minus_zero(body: &[u8]) -> Option<Vec<u8>> {
    memchr::memmem::find(body, b"-0")?;
    let mut copy: Option<Vec<u8>> = None;
    let (mut in_string, mut escaped) = (false, false);
    for (i, &b) in body.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b == b'-'
            && body.get(i + 1) == Some(&b'0')
            && !matches!(body.get(i + 2), Some(b'0'..=b'9' | b'.' | b'e' | b'E'))
        {
            copy.get_or_insert_with(|| body.to_vec())[i] = b' ';
        }
    }
    copy
}

fn parse_deliveries(body: &[u8], framing: Framing) -> Result<Parsed<'_>, ParseError> {
    let items = match framing {
        Framing::Ndjson => {
            // Blank lines (including a final newline) separate nothing and
            // are skipped; `index` counts deliveries, not lines.
            let mut items = Vec::with_capacity(body.len() / 96 + 1);
            for (n, line) in lines(body).enumerate() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let i = items.len();
                let d = one_delivery(line).map_err(|e| ParseError::Malformed {
                    message: format!("line {}{}", n + 1, located(line, &e)),
                    index: Some(i),
                })?;
                items.push(d);
            }
            items
        }
        Framing::Json => {
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            if first != Some(&b'[') {
                let d = one_delivery(body).map_err(|e| ParseError::Malformed {
                    message: json_error(body, &e, || "invalid delivery".into()),
                    index: None,
                })?;
                return Ok(Parsed {
                    items: vec![d],
                    batch: false,
                });
            }
            match fastparse::array(body) {
                Some(items) => items,
                None => {
                    let at = Cell::new(0usize);
                    serde_array_at(body, &at).map_err(|e| ParseError::Malformed {
                        message: json_error(body, &e, || format!("delivery {}", at.get())),
                        index: Some(at.get()),
                    })?
                }
            }
        }
    };
    if items.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(Parsed { items, batch: true })
}

/// The lines of an NDJSON body (split at `\n`, as `split` would, found
/// with a vectorized search).
fn lines(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let ends = memchr::memchr_iter(b'\n', body).chain(std::iter::once(body.len()));
    ends.map(move |end| {
        let line = &body[start..end];
        start = end + 1;
        line
    })
}

/// What a delivery must be, as error messages say it.
const DELIVERY_OBJECT: &str = "a delivery object {\"partition\", \"offset\" (optional), \"event\"}";

/// One delivery: exactly one JSON object (the fast path when it is sure,
/// see [`fastparse`]).
fn one_delivery(text: &[u8]) -> Result<DeliveryRef<'_>, serde_json::Error> {
    match fastparse::one(text) {
        Some(d) => Ok(d),
        None => serde_one(text),
    }
}

/// [`one_delivery`] by serde alone.
pub(super) fn serde_one(text: &[u8]) -> Result<DeliveryRef<'_>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let d = strict::object(&mut de, DELIVERY_OBJECT)?;
    de.end()?;
    Ok(d)
}

/// A JSON array of deliveries by serde alone; `at` is the index of the
/// delivery being read (the one that failed, on an error).
fn serde_array_at<'a>(
    body: &'a [u8],
    at: &Cell<usize>,
) -> Result<Vec<DeliveryRef<'a>>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    BatchSeed(at)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
}

/// [`serde_array_at`] for the fast path's test.
#[cfg(test)]
pub(super) fn serde_array(body: &[u8]) -> Result<Vec<DeliveryRef<'_>>, serde_json::Error> {
    serde_array_at(body, &Cell::new(0))
}

/// The message of a JSON body's error: `what` and where, or (more than one
/// JSON value in the body) which content type NDJSON needs.
fn json_error(text: &[u8], e: &serde_json::Error, what: impl FnOnce() -> String) -> String {
    if is_trailing(e) {
        format!(
            "the body holds more than one JSON value{}; to send one delivery per line \
             (NDJSON), set Content-Type: application/x-ndjson (or application/ndjson, \
             application/jsonl)",
            located(text, e)
        )
    } else {
        format!("{}{}", what(), located(text, e))
    }
}

/// Whether a JSON error is "trailing characters" (more than one value).
fn is_trailing(e: &serde_json::Error) -> bool {
    e.is_syntax() && e.to_string().starts_with("trailing characters")
}

/// `": <what> (column C)"` from serde_json's "<what> at line L column C"
/// (the line is the caller's to name: NDJSON counts lines of the body, a
/// JSON body has its own).
pub fn located(text: &[u8], e: &serde_json::Error) -> String {
    let what = explain(text, e);
    if e.line() == 0 {
        format!(": {what}")
    } else if e.line() == 1 {
        format!(", column {}: {what}", e.column())
    } else {
        format!(", line {} column {}: {what}", e.line(), e.column())
    }
}

/// serde_json's message for an error in `text`, in the service's words: a
/// type error names its field (`` `key` must be a string, got integer `42` ``),
/// and a body that is not JSON says so (single-quoted keys included).
fn explain(text: &[u8], e: &serde_json::Error) -> String {
    let msg = strict::without_position(e);
    if msg == "key must be a string" {
        return "object keys must be strings in double quotes (JSON has no single quotes and \
                no bare names)"
            .into();
    }
    if msg.starts_with("expected ident") || msg.starts_with("expected value") {
        return format!("not JSON ({msg})");
    }
    if let Some((got, expected)) = msg
        .strip_prefix("invalid type: ")
        .and_then(|rest| rest.split_once(", expected "))
    {
        if let Some(field) = field_at(text, e.line(), e.column()) {
            let suffix = format!(" for `{field}`");
            let expected = expected.strip_suffix(&suffix).unwrap_or(expected);
            return format!("`{field}` must be {expected}, got {got}");
        }
    }
    msg
}

/// The name of the object member whose value ends at `line`:`column`
/// (serde_json's position of an error, 1-based), if any.
fn field_at(text: &[u8], line: usize, column: usize) -> Option<String> {
    let start = if line <= 1 {
        0
    } else {
        text.iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line - 2)?
            .0
            + 1
    };
    let prefix = text.get(..(start + column).min(text.len()))?;
    let (mut in_str, mut esc, mut from) = (false, false, 0);
    let (mut last_str, mut key) = (None, None);
    for (i, &b) in prefix.iter().enumerate() {
        if in_str {
            match b {
                _ if esc => esc = false,
                b'\\' => esc = true,
                b'"' => {
                    in_str = false;
                    last_str = Some(from..i);
                }
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_str = true;
                from = i + 1;
            }
            b':' => key = last_str.clone(),
            _ => {}
        }
    }
    key.and_then(|r| std::str::from_utf8(&prefix[r]).ok().map(str::to_string))
}

/// Deserializes a JSON array of deliveries, recording the index being read
/// so that an error can name the failing element.
struct BatchSeed<'c>(&'c Cell<usize>);

impl<'de> DeserializeSeed<'de> for BatchSeed<'_> {
    type Value = Vec<DeliveryRef<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for BatchSeed<'_> {
    type Value = Vec<DeliveryRef<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of deliveries")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
        loop {
            self.0.set(out.len());
            match seq.next_element_seed(ObjectSeed::<DeliveryRef<'de>>::new(DELIVERY_OBJECT))? {
                Some(d) => out.push(d),
                None => return Ok(out),
            }
        }
    }
}

/// A parsed `POST /patterns/events` body: the events before the first
/// malformed one, and that one's error. The order of the contract's checks
/// (the first failing item decides, a late one before a malformed one
/// included) needs the engine's watermark, so the service decides under
/// its lock ([`crate::patterns::Engine::first_late`]).
#[derive(Debug)]
pub struct PatternBatch {
    /// The events, in request order, up to the first malformed one.
    pub events: Vec<crate::patterns::Event>,
    /// The first malformed item: its index (batches only) and what is wrong.
    pub malformed: Option<(Option<usize>, String)>,
    /// Whether the body was a batch (array or NDJSON).
    pub batch: bool,
}

/// Parses a `POST /patterns/events` body (one event, a JSON array, or
/// NDJSON). An empty batch is [`ParseError::Empty`]; a malformed item is
/// reported in [`PatternBatch::malformed`].
pub fn pattern_events(body: &[u8], framing: Framing) -> Result<PatternBatch, ParseError> {
    // one parser for the batch: each event is one allocation, its own
    let mut parser = crate::patterns::EventParser::default();
    let mut events = Vec::new();
    let mut malformed = None;
    match framing {
        Framing::Ndjson => {
            events.reserve(body.len() / 96 + 1);
            for (n, line) in body.split(|b| *b == b'\n').enumerate() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match parser.parse(line) {
                    Ok(e) => events.push(e),
                    Err(e) => {
                        malformed = Some((Some(events.len()), format!("line {}: {e}", n + 1)));
                        break;
                    }
                }
            }
        }
        Framing::Json => {
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            if first != Some(&b'[') {
                return Ok(match parser.parse(body) {
                    Ok(e) => PatternBatch {
                        events: vec![e],
                        malformed: None,
                        batch: false,
                    },
                    Err(e) => PatternBatch {
                        events: Vec::new(),
                        malformed: Some((None, format!("invalid pattern event: {e}"))),
                        batch: false,
                    },
                });
            }
            // The items' exact text first (kept up to a syntax error, which
            // is the item being read), then each item as an event.
            let read = std::cell::RefCell::new(Vec::new());
            let mut de = serde_json::Deserializer::from_slice(body);
            let cut = RawSeed(&read)
                .deserialize(&mut de)
                .and_then(|()| de.end())
                .err();
            let items = read.into_inner();
            for (i, raw) in items.iter().enumerate() {
                match parser.parse(raw.get().as_bytes()) {
                    Ok(e) => events.push(e),
                    Err(e) => {
                        malformed = Some((Some(i), format!("event {i}: {e}")));
                        break;
                    }
                }
            }
            if let (None, Some(e)) = (&malformed, cut) {
                let i = items.len();
                malformed = Some((Some(i), format!("event {i}{}", located(body, &e))));
            }
        }
    }
    if events.is_empty() && malformed.is_none() {
        return Err(ParseError::Empty);
    }
    Ok(PatternBatch {
        events,
        malformed,
        batch: true,
    })
}

/// Deserializes a JSON array of raw values into the vector it holds (what
/// was read before an error stays there).
struct RawSeed<'c, 'de>(&'c std::cell::RefCell<Vec<&'de serde_json::value::RawValue>>);

impl<'de> DeserializeSeed<'de> for RawSeed<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RawSeed<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of pattern events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(v) = seq.next_element()? {
            self.0.borrow_mut().push(v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod explain_tests {
    use super::*;

    fn message(body: &str, framing: Framing) -> String {
        match deliveries(body.as_bytes(), framing) {
            Err(ParseError::Malformed { message, .. }) => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn type_errors_name_their_field_and_non_json_says_so() {
        let m = message(
            r#"{"partition":"p0","event":{"id":"a","key":42,"timestamp":1,"value":1}}"#,
            Framing::Json,
        );
        assert_eq!(
            m,
            "invalid delivery, column 44: `key` must be a string, got integer `42`"
        );
        let m = message(
            "\n{\"partition\":\"p0\",\"event\":{\"id\":\"a:b\",\"key\":7,\"timestamp\":1,\"value\":1}}\n",
            Framing::Ndjson,
        );
        assert!(
            m.starts_with("line 2, column ")
                && m.ends_with("`key` must be a string, got integer `7`"),
            "{m}"
        );
        let m = message("{'partition':'p0'}", Framing::Json);
        assert!(
            m.contains("object keys must be strings in double quotes"),
            "{m}"
        );
        let m = message("nope", Framing::Json);
        assert!(m.contains("not JSON"), "{m}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(body: &str, framing: Framing) -> Result<Vec<(Option<i64>, i64, i64)>, ParseError> {
        deliveries(body.as_bytes(), framing).map(|p| {
            p.items
                .iter()
                .map(|d| (d.offset, d.event.timestamp, d.event.value))
                .collect()
        })
    }

    fn one(offset: &str, ts: &str, value: &str, key: &str) -> String {
        format!(
            r#"{{"partition":"p0","offset":{offset},"event":{{"id":"e","key":"{key}","timestamp":{ts},"value":{value}}}}}"#
        )
    }

    #[test]
    fn minus_zero_is_zero_and_minus_zero_point_zero_a_fraction() {
        let body = one("-0", "-0", "-0", "k-0");
        assert_eq!(ints(&body, Framing::Json).unwrap(), [(Some(0), 0, 0)]);
        let d = deliveries(body.as_bytes(), Framing::Json).unwrap();
        // strings are the body's, untouched (owned: the body was copied)
        assert_eq!(d.items[0].event.key, "k-0");
        let batch = format!(
            "[{},{}]",
            one("0", "5", "1", r#"a\"-0"#),
            one("1", "-0", "-07", "b")
        );
        let e = ints(&batch, Framing::Json).unwrap_err();
        assert!(
            matches!(&e, ParseError::Malformed { index: Some(1), .. }),
            "{e:?}"
        );
        let batch = format!(
            "[{},{}]",
            one("0", "5", "1", r#"a\"-0"#),
            one("1", "-0", "-7", "b")
        );
        assert_eq!(
            ints(&batch, Framing::Json).unwrap(),
            [(Some(0), 5, 1), (Some(1), 0, -7)]
        );
        let nd = format!(
            "{}\n{}\n",
            one("0", "1", "-0", "x"),
            one("1", "-0", "2", "y")
        );
        assert_eq!(
            ints(&nd, Framing::Ndjson).unwrap(),
            [(Some(0), 1, 0), (Some(1), 0, 2)]
        );
        for bad in ["-0.0", "-0e0", "-0E+1", "-00", "-", "--0"] {
            let e = ints(&one("0", bad, "1", "k"), Framing::Json).unwrap_err();
            assert!(
                matches!(e, ParseError::Malformed { index: None, .. }),
                "{bad}"
            );
        }
        // the same message and position as before the copy
        let e = ints(&one("-0", "1.5", "1", "k"), Framing::Json).unwrap_err();
        let plain = ints(&one(" 0", "1.5", "1", "k"), Framing::Json).unwrap_err();
        assert_eq!(e.to_string(), plain.to_string());
        assert!(e.to_string().contains("got 1.5"), "{e}");
    }
}
