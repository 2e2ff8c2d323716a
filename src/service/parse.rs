//! The one parser of `POST /events` bodies, shared by the api (before the
//! processor lock) and recovery (replaying the stored raw body), so a replay
//! reads exactly what was accepted. Deliveries borrow their strings from the
//! body wherever the JSON has no escapes.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::Deserializer;

use crate::engine::strict::{self, ObjectSeed};
use crate::engine::DeliveryRef;

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

/// Parses a `POST /events` body.
pub fn deliveries(body: &[u8], framing: Framing) -> Result<Parsed<'_>, ParseError> {
    let items = match framing {
        Framing::Ndjson => {
            // Blank lines (including a final newline) separate nothing and
            // are skipped; `index` counts deliveries, not lines.
            let mut items = Vec::with_capacity(body.len() / 96 + 1);
            for (n, line) in body.split(|b| *b == b'\n').enumerate() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let i = items.len();
                let d = one_delivery(line).map_err(|e| ParseError::Malformed {
                    message: format!("line {}{}", n + 1, located(&e)),
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
                    message: json_error(&e, || "invalid delivery".into()),
                    index: None,
                })?;
                return Ok(Parsed {
                    items: vec![d],
                    batch: false,
                });
            }
            let at = Cell::new(0usize);
            let mut de = serde_json::Deserializer::from_slice(body);
            BatchSeed(&at)
                .deserialize(&mut de)
                .and_then(|v| de.end().map(|()| v))
                .map_err(|e| ParseError::Malformed {
                    message: json_error(&e, || format!("delivery {}", at.get())),
                    index: Some(at.get()),
                })?
        }
    };
    if items.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(Parsed { items, batch: true })
}

/// What a delivery must be, as error messages say it.
const DELIVERY_OBJECT: &str = "a delivery object {\"partition\", \"offset\" (optional), \"event\"}";

/// One delivery: exactly one JSON object.
fn one_delivery(text: &[u8]) -> Result<DeliveryRef<'_>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let d = strict::object(&mut de, DELIVERY_OBJECT)?;
    de.end()?;
    Ok(d)
}

/// The message of a JSON body's error: `what` and where, or (more than one
/// JSON value in the body) which content type NDJSON needs.
fn json_error(e: &serde_json::Error, what: impl FnOnce() -> String) -> String {
    if is_trailing(e) {
        format!(
            "the body holds more than one JSON value{}; to send one delivery per line \
             (NDJSON), set Content-Type: application/x-ndjson (or application/ndjson, \
             application/jsonl)",
            located(e)
        )
    } else {
        format!("{}{}", what(), located(e))
    }
}

/// Whether a JSON error is "trailing characters" (more than one value).
fn is_trailing(e: &serde_json::Error) -> bool {
    e.is_syntax() && e.to_string().starts_with("trailing characters")
}

/// `": <what> (column C)"` from serde_json's "<what> at line L column C"
/// (the line is the caller's to name: NDJSON counts lines of the body, a
/// JSON body has its own).
fn located(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let what = full.strip_suffix(&suffix).unwrap_or(&full);
    if e.line() == 0 {
        format!(": {what}")
    } else if e.line() == 1 {
        format!(", column {}: {what}", e.column())
    } else {
        format!(", line {} column {}: {what}", e.line(), e.column())
    }
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
    use crate::patterns::parse_event;
    let mut events = Vec::new();
    let mut malformed = None;
    match framing {
        Framing::Ndjson => {
            for (n, line) in body.split(|b| *b == b'\n').enumerate() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match parse_event(line) {
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
                return Ok(match parse_event(body) {
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
                match parse_event(raw.get().as_bytes()) {
                    Ok(e) => events.push(e),
                    Err(e) => {
                        malformed = Some((Some(i), format!("event {i}: {e}")));
                        break;
                    }
                }
            }
            if let (None, Some(e)) = (&malformed, cut) {
                let i = items.len();
                malformed = Some((Some(i), format!("event {i}{}", located(&e))));
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
