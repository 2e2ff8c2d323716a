//! Events: their fields, and parsing from exact JSON text.

use crate::patterns::value::Value;

/// One validated pattern event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Non-empty, at most 256 bytes; metadata only (not a dedup key).
    pub id: String,
    /// At most 256 bytes, may be empty.
    pub key: String,
    /// Non-empty, at most 256 bytes.
    pub kind: String,
    /// `0..=MAX_EVENT_TIME`.
    pub time: i64,
    /// At most 64 fields with unique non-empty names, in the order pushed.
    pub fields: Vec<(String, Value)>,
}

/// Parses one event object from its exact JSON text.
pub fn parse_event(json: &[u8]) -> Result<Event, String> {
    let _ = json;
    unimplemented!()
}
