//! Output records: matches and timeouts, and their JSON (`Serialize` writes
//! exactly the contract's shape and key order).

use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::patterns::branch::Caps;
use crate::patterns::event::Event;
use crate::patterns::value::{Value, ValueRef};

/// `match` or `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// A selected candidate.
    Match,
    /// An incomplete branch that reached its deadline.
    Timeout,
}

/// A captured event as output echoes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedEvent {
    /// Its ordinal.
    pub ordinal: u64,
    /// The event (shared with the engine, never copied).
    pub event: Event,
}

/// One output record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Position in the output stream (from 1).
    pub seq: u64,
    /// Match or timeout.
    pub kind: OutputKind,
    /// `pattern:` then each stage's ordinals joined by `.`, stages by `/`.
    pub id: String,
    /// The pattern's name.
    pub pattern: Arc<str>,
    /// The key.
    pub key: Arc<str>,
    /// Time of the first capture.
    pub start_time: i64,
    /// The completing event's time, or the deadline (absence, timeout).
    pub end_time: i64,
    /// Time of the last capture.
    pub last_event_time: i64,
    /// `start_time + within`.
    pub deadline: i64,
    /// Every stage in pattern order with its captures.
    pub captures: Vec<(Arc<str>, Vec<CapturedEvent>)>,
}

impl OutputKind {
    /// `match` or `timeout`.
    pub fn name(self) -> &'static str {
        match self {
            OutputKind::Match => "match",
            OutputKind::Timeout => "timeout",
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Integer(i) => s.serialize_i64(*i),
            // serde_json writes the shortest round trip with a fraction or an
            // exponent: 2.0, -0.0, 1e300
            Value::Double(d) => s.serialize_f64(*d),
            Value::Decimal(d) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("decimal", d.as_str())?;
                m.end()
            }
            Value::String(t) => s.serialize_str(t),
            Value::Bool(b) => s.serialize_bool(*b),
        }
    }
}

/// A borrowed field value, written as [`Value`] is.
struct FieldValue<'a>(ValueRef<'a>);

impl Serialize for FieldValue<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ValueRef::Integer(i) => s.serialize_i64(i),
            ValueRef::Double(d) => s.serialize_f64(d),
            ValueRef::Decimal(_, text) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("decimal", &*String::from_utf8_lossy(text))?;
                m.end()
            }
            ValueRef::String(t) => s.serialize_str(&String::from_utf8_lossy(t)),
            ValueRef::Bool(b) => s.serialize_bool(b),
        }
    }
}

struct Fields<'a>(&'a Event);

impl Serialize for Fields<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.field_count()))?;
        for (name, value) in self.0.fields_ref() {
            m.serialize_entry(&*String::from_utf8_lossy(name), &FieldValue(value))?;
        }
        m.end()
    }
}

impl Serialize for CapturedEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = &self.event;
        let mut m = s.serialize_map(Some(6))?;
        m.serialize_entry("ordinal", &self.ordinal)?;
        m.serialize_entry("id", e.id())?;
        m.serialize_entry("key", e.key())?;
        m.serialize_entry("kind", e.kind())?;
        m.serialize_entry("time", &e.time)?;
        m.serialize_entry("fields", &Fields(e))?;
        m.end()
    }
}

struct Captures<'a>(&'a [(Arc<str>, Vec<CapturedEvent>)]);

impl Serialize for Captures<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (stage, events) in self.0 {
            m.serialize_entry(&**stage, events)?;
        }
        m.end()
    }
}

impl Serialize for Output {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(10))?;
        m.serialize_entry("seq", &self.seq)?;
        m.serialize_entry("type", self.kind.name())?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("pattern", &*self.pattern)?;
        m.serialize_entry("key", &*self.key)?;
        m.serialize_entry("start_time", &self.start_time)?;
        m.serialize_entry("end_time", &self.end_time)?;
        m.serialize_entry("last_event_time", &self.last_event_time)?;
        m.serialize_entry("deadline", &self.deadline)?;
        m.serialize_entry("captures", &Captures(&self.captures))?;
        m.end()
    }
}

/// Builds an output record from captures.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build(
    seq: u64,
    kind: OutputKind,
    pattern: &Arc<str>,
    stage_names: &[Arc<str>],
    key: &Arc<str>,
    caps: &Caps,
    end_time: i64,
    within: i64,
) -> Output {
    let nodes = caps.in_order();
    let mut captures: Vec<(Arc<str>, Vec<CapturedEvent>)> = Vec::with_capacity(stage_names.len());
    let mut at = 0;
    for (stage, name) in stage_names.iter().enumerate() {
        let n = nodes[at..]
            .iter()
            .take_while(|n| usize::from(n.stage) == stage)
            .count();
        let list = nodes[at..at + n]
            .iter()
            .map(|n| CapturedEvent {
                ordinal: n.ordinal,
                event: n.event.clone(),
            })
            .collect();
        at += n;
        captures.push((name.clone(), list));
    }
    Output {
        seq,
        kind,
        id: caps.id(pattern, stage_names.len()),
        pattern: pattern.clone(),
        key: key.clone(),
        start_time: caps.start,
        end_time,
        last_event_time: caps.last.time,
        deadline: caps.start + within,
        captures,
    }
}
