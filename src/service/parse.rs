//! The one parser of `POST /events` bodies, shared by the api (before the
//! processor lock) and recovery (replaying the stored raw body), so a replay
//! reads exactly what was accepted. Deliveries borrow their strings from the
//! body wherever the JSON has no escapes.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::Deserializer;

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
                let d = serde_json::from_slice::<DeliveryRef<'_>>(line).map_err(|e| {
                    ParseError::Malformed {
                        message: format!("line {}: {e}", n + 1),
                        index: Some(i),
                    }
                })?;
                items.push(d);
            }
            items
        }
        Framing::Json => {
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            if first != Some(&b'[') {
                let d = serde_json::from_slice::<DeliveryRef<'_>>(body).map_err(|e| {
                    ParseError::Malformed {
                        message: format!("invalid delivery: {e}"),
                        index: None,
                    }
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
                    message: format!("delivery {}: {e}", at.get()),
                    index: Some(at.get()),
                })?
        }
    };
    if items.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(Parsed { items, batch: true })
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
            match seq.next_element::<DeliveryRef<'de>>()? {
                Some(d) => out.push(d),
                None => return Ok(out),
            }
        }
    }
}
