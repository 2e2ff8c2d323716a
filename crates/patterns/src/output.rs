//! Output records: matches and timeouts, and their JSON (`Serialize` writes
//! exactly the contract's shape and key order).

use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::branch::{push_decimal, Caps};
use crate::event::Event;
use crate::value::{Value, ValueRef};

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
    /// The stage that captured it (an index into [`Output::stages`]).
    pub stage: u8,
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
    /// The pattern's stage names, in order (shared).
    pub stages: Arc<[Arc<str>]>,
    /// The captured events in stage order, then capture order.
    pub captures: Vec<CapturedEvent>,
}

impl Output {
    /// Every stage in pattern order with its captures.
    pub fn stage_captures(&self) -> impl Iterator<Item = (&str, &[CapturedEvent])> + '_ {
        let mut at = 0;
        self.stages.iter().enumerate().map(move |(i, name)| {
            let rest = self.captures.get(at..).unwrap_or_default();
            let n = rest
                .iter()
                .take_while(|c| usize::from(c.stage) == i)
                .count();
            at += n;
            (&**name, &rest[..n])
        })
    }
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

struct Captures<'a>(&'a Output);

impl Serialize for Captures<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.stages.len()))?;
        for (stage, events) in self.0.stage_captures() {
            m.serialize_entry(stage, events)?;
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
        m.serialize_entry("captures", &Captures(self))?;
        m.end()
    }
}

/// Builds an output record from captures.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build(
    seq: u64,
    kind: OutputKind,
    pattern: &Arc<str>,
    stage_names: &Arc<[Arc<str>]>,
    key: &Arc<str>,
    caps: &Caps,
    end_time: i64,
    within: i64,
) -> Output {
    let mut captures: Vec<CapturedEvent> = Vec::with_capacity(usize::from(caps.len));
    captures.extend(caps.nodes().map(|n| CapturedEvent {
        ordinal: n.ordinal,
        stage: n.stage,
        event: n.event.clone(),
    }));
    captures.reverse();
    Output {
        seq,
        kind,
        id: id_of(pattern, stage_names.len(), &captures),
        pattern: pattern.clone(),
        key: key.clone(),
        start_time: caps.start,
        end_time,
        last_event_time: caps.last.time,
        deadline: caps.start + within,
        stages: stage_names.clone(),
        captures,
    }
}

/// The output id: `pattern:` then each stage's ordinals joined by `.`,
/// stages separated by `/`.
fn id_of(pattern: &str, stages: usize, captures: &[CapturedEvent]) -> String {
    let mut id = String::with_capacity(pattern.len() + 1 + captures.len() * 8 + stages);
    id.push_str(pattern);
    id.push(':');
    let mut at = 0usize;
    for stage in 0..stages {
        if stage > 0 {
            id.push('/');
        }
        let mut first = true;
        while let Some(c) = captures.get(at).filter(|c| usize::from(c.stage) == stage) {
            if !first {
                id.push('.');
            }
            first = false;
            push_decimal(&mut id, c.ordinal);
            at += 1;
        }
    }
    id
}
