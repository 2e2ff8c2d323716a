//! Events, deliveries and the output records of the engine.
//!
//! docs/semantics.md, "Deliveries": an event is `{id, key, timestamp, value}`; its
//! identity is `(key, timestamp, value)`; a delivery is `(partition, offset,
//! event)`. An omitted offset is append mode: the delivery takes the next
//! offset of its partition.
//!
//! The wire shapes (field names and their order) are those of docs/api.md, so the
//! same types serialize the HTTP responses. Window bounds and sums are `i128`:
//! they are derived exactly and may leave the `i64` range.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};

use streamforge_canonical::strict;

/// One event as producers send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Global identifier (non-empty); equal ids must carry equal identities.
    #[serde(deserialize_with = "non_empty_string")]
    pub id: String,
    /// Grouping key (any string, including the empty one).
    pub key: String,
    /// Event time.
    #[serde(deserialize_with = "timestamp_field")]
    pub timestamp: i64,
    /// The aggregated value.
    #[serde(deserialize_with = "value_field")]
    pub value: i64,
}

/// One event at one offset of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delivery {
    /// Partition name; must be one of the pipeline's.
    pub partition: String,
    /// Offset in the partition; `None` is append mode (next offset). On the
    /// wire the field is omitted for append mode (`null` is rejected).
    #[serde(
        default,
        deserialize_with = "present_i64",
        skip_serializing_if = "Option::is_none"
    )]
    pub offset: Option<i64>,
    /// The event.
    #[serde(deserialize_with = "event_object")]
    pub event: Event,
}

/// A delivery parsed without copying its strings out of the request body
/// (they are borrowed wherever the JSON has no escapes). Same wire shape and
/// validation as [`Delivery`], except that its integers are read
/// directly ([`strict::int_field_direct`]): a `-0` is refused unless the
/// body goes through `service::parse::deliveries`, which reads it as 0.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryRef<'a> {
    /// Partition name.
    #[serde(borrow)]
    pub partition: Cow<'a, str>,
    /// Offset; `None` is append mode.
    #[serde(default, deserialize_with = "present_i64_direct")]
    pub offset: Option<i64>,
    /// The event.
    #[serde(borrow, deserialize_with = "event_ref_object")]
    pub event: EventRef<'a>,
}

impl DeliveryRef<'_> {
    /// The same delivery owning its strings.
    pub fn into_owned(self) -> DeliveryRef<'static> {
        DeliveryRef {
            partition: Cow::Owned(self.partition.into_owned()),
            offset: self.offset,
            event: EventRef {
                id: Cow::Owned(self.event.id.into_owned()),
                key: Cow::Owned(self.event.key.into_owned()),
                timestamp: self.event.timestamp,
                value: self.event.value,
            },
        }
    }
}

/// An event borrowing its strings; see [`DeliveryRef`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventRef<'a> {
    /// Event id (non-empty).
    #[serde(borrow, deserialize_with = "non_empty_cow")]
    pub id: Cow<'a, str>,
    /// Key.
    #[serde(borrow)]
    pub key: Cow<'a, str>,
    /// Event time.
    #[serde(deserialize_with = "timestamp_direct")]
    pub timestamp: i64,
    /// Value.
    #[serde(deserialize_with = "value_direct")]
    pub value: i64,
}

fn timestamp_direct<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    strict::int_field_direct(d, "timestamp")
}

fn value_direct<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    strict::int_field_direct(d, "value")
}

fn timestamp_field<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    strict::int_field(d, "timestamp")
}

fn value_field<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    strict::int_field(d, "value")
}

/// What a delivery's `event` must be.
const EVENT_OBJECT: &str = "an event object {\"id\", \"key\", \"timestamp\", \"value\"}";

fn event_object<'de, D: Deserializer<'de>>(d: D) -> Result<Event, D::Error> {
    strict::object(d, EVENT_OBJECT)
}

fn event_ref_object<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<EventRef<'a>, D::Error> {
    strict::object(d, EVENT_OBJECT)
}

fn non_empty_cow<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Cow<'a, str>, D::Error> {
    let s: Cow<'a, str> = Cow::deserialize(d)?;
    if s.is_empty() {
        return Err(serde::de::Error::custom(
            "event id must be a non-empty string",
        ));
    }
    Ok(s)
}

/// What the engine reads from a delivery, owned or borrowed.
pub trait DeliveryInput {
    /// Partition name.
    fn partition(&self) -> &str;
    /// Offset, `None` for append mode.
    fn offset(&self) -> Option<i64>;
    /// Event id.
    fn id(&self) -> &str;
    /// Key.
    fn key(&self) -> &str;
    /// Timestamp.
    fn timestamp(&self) -> i64;
    /// Value.
    fn value(&self) -> i64;
    /// Moves the id out (it becomes the stored id of a unique event).
    fn take_id(&mut self) -> Cow<'_, str>;
}

/// The accessors both delivery forms share (same field names).
macro_rules! delivery_accessors {
    () => {
        fn partition(&self) -> &str {
            &self.partition
        }
        fn offset(&self) -> Option<i64> {
            self.offset
        }
        fn id(&self) -> &str {
            &self.event.id
        }
        fn key(&self) -> &str {
            &self.event.key
        }
        fn timestamp(&self) -> i64 {
            self.event.timestamp
        }
        fn value(&self) -> i64 {
            self.event.value
        }
    };
}

impl DeliveryInput for Delivery {
    delivery_accessors!();
    fn take_id(&mut self) -> Cow<'_, str> {
        Cow::Owned(std::mem::take(&mut self.event.id))
    }
}

impl DeliveryInput for DeliveryRef<'_> {
    delivery_accessors!();
    fn take_id(&mut self) -> Cow<'_, str> {
        std::mem::take(&mut self.event.id)
    }
}

fn non_empty_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        return Err(serde::de::Error::custom(
            "event id must be a non-empty string",
        ));
    }
    Ok(s)
}

fn present_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    strict::int_field(d, "offset").map(Some)
}

fn present_i64_direct<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    strict::int_field_direct(d, "offset").map(Some)
}

/// Writes an `i128` as an `i64` when it fits: the same digits, without the
/// slow 128-bit formatting path (window bounds and sums almost always fit).
fn compact_i128<S: serde::Serializer>(v: &i128, s: S) -> Result<S::Ok, S::Error> {
    match i64::try_from(*v) {
        Ok(small) => s.serialize_i64(small),
        Err(_) => s.serialize_i128(*v),
    }
}

/// The address of a bucket: `(window, key, start, end)`. Addresses are ordered
/// by window name, then key (byte order), then start, then end.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Address {
    /// Window name.
    pub window: Arc<str>,
    /// Key.
    pub key: Arc<str>,
    /// Inclusive start.
    #[serde(serialize_with = "compact_i128")]
    pub start: i128,
    /// Exclusive end.
    #[serde(serialize_with = "compact_i128")]
    pub end: i128,
}

/// A bucket's aggregate as a result row (`Result` in docs/semantics.md and docs/api.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowResult {
    /// Window name.
    pub window: Arc<str>,
    /// Key.
    pub key: Arc<str>,
    /// Inclusive start.
    #[serde(serialize_with = "compact_i128")]
    pub start: i128,
    /// Exclusive end.
    #[serde(serialize_with = "compact_i128")]
    pub end: i128,
    /// Number of unique events in the bucket (>= 1).
    pub count: u64,
    /// Exact sum of their values.
    #[serde(serialize_with = "compact_i128")]
    pub sum: i128,
    /// Smallest value.
    pub min: i64,
    /// Largest value.
    pub max: i64,
}

impl WindowResult {
    /// The address of this row.
    pub fn address(&self) -> Address {
        Address {
            window: self.window.clone(),
            key: self.key.clone(),
            start: self.start,
            end: self.end,
        }
    }
}

/// The operation of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeOp {
    /// A previously emitted row is withdrawn (carries that exact row).
    Retract,
    /// A row is emitted (new or corrected).
    Upsert,
}

/// One entry of the changelog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Global sequence, from 1, one per change, for the life of the processor.
    pub seq: u64,
    /// Retract or upsert.
    pub op: ChangeOp,
    /// The row.
    pub result: WindowResult,
}

/// One record of the late side output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateRecord {
    /// Position in the late output, from 1.
    pub seq: u64,
    /// The late event.
    pub event: Event,
    /// The global watermark it was late against.
    pub watermark: i64,
}

/// Records written as JSON by hand, in their `Serialize` field order and
/// bytes, so that writing them cannot fail (strings and integers through
/// the canonical writer; there is no error path at all).
pub trait WriteJson {
    /// Appends the JSON of `self` (exactly what `serde_json` writes).
    fn write_json(&self, out: &mut Vec<u8>);
}

impl WriteJson for Event {
    fn write_json(&self, out: &mut Vec<u8>) {
        use streamforge_canonical::writer::{int, string};
        out.extend_from_slice(b"{\"id\":");
        string(out, &self.id);
        out.extend_from_slice(b",\"key\":");
        string(out, &self.key);
        out.extend_from_slice(b",\"timestamp\":");
        int(out, self.timestamp);
        out.extend_from_slice(b",\"value\":");
        int(out, self.value);
        out.push(b'}');
    }
}

impl WriteJson for Address {
    fn write_json(&self, out: &mut Vec<u8>) {
        use streamforge_canonical::writer::{int, string};
        out.extend_from_slice(b"{\"window\":");
        string(out, &self.window);
        out.extend_from_slice(b",\"key\":");
        string(out, &self.key);
        out.extend_from_slice(b",\"start\":");
        int(out, self.start);
        out.extend_from_slice(b",\"end\":");
        int(out, self.end);
        out.push(b'}');
    }
}

impl WriteJson for WindowResult {
    fn write_json(&self, out: &mut Vec<u8>) {
        use streamforge_canonical::writer::{int, string};
        out.extend_from_slice(b"{\"window\":");
        string(out, &self.window);
        out.extend_from_slice(b",\"key\":");
        string(out, &self.key);
        out.extend_from_slice(b",\"start\":");
        int(out, self.start);
        out.extend_from_slice(b",\"end\":");
        int(out, self.end);
        out.extend_from_slice(b",\"count\":");
        int(out, self.count);
        out.extend_from_slice(b",\"sum\":");
        int(out, self.sum);
        out.extend_from_slice(b",\"min\":");
        int(out, self.min);
        out.extend_from_slice(b",\"max\":");
        int(out, self.max);
        out.push(b'}');
    }
}

impl WriteJson for Change {
    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"seq\":");
        streamforge_canonical::writer::int(out, self.seq);
        out.extend_from_slice(match self.op {
            ChangeOp::Retract => b",\"op\":\"retract\",\"result\":",
            ChangeOp::Upsert => b",\"op\":\"upsert\",\"result\":",
        });
        self.result.write_json(out);
        out.push(b'}');
    }
}

impl WriteJson for LateRecord {
    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"seq\":");
        streamforge_canonical::writer::int(out, self.seq);
        out.extend_from_slice(b",\"event\":");
        self.event.write_json(out);
        out.extend_from_slice(b",\"watermark\":");
        streamforge_canonical::writer::int(out, self.watermark);
        out.push(b'}');
    }
}

/// The JSON array of `items`, each as [`WriteJson`] writes it.
pub fn json_array<T: WriteJson>(items: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + items.len() * 160);
    write_json_array(&mut out, items);
    out
}

/// Appends the JSON array of `items`.
pub fn write_json_array<T: WriteJson>(out: &mut Vec<u8>, items: &[T]) {
    out.push(b'[');
    for (i, c) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        c.write_json(out);
    }
    out.push(b']');
}

#[cfg(test)]
mod write_json_tests {
    use super::*;

    #[test]
    fn hand_written_json_is_serde_json_byte_for_byte() {
        let odd = "q\"\\\u{0}\u{1f}\n\té😀\u{7f}\u{2028}";
        let bounds = [
            0i128,
            -1,
            7,
            i64::MIN as i128,
            i64::MAX as i128,
            -(1i128 << 100),
            1 << 100,
        ];
        let mut changes = Vec::new();
        let mut late = Vec::new();
        let mut addresses = Vec::new();
        for (i, &b) in bounds.iter().enumerate() {
            let result = WindowResult {
                window: Arc::from(if i % 2 == 0 { "w" } else { odd }),
                key: Arc::from(if i % 3 == 0 { odd } else { "" }),
                start: b,
                end: -b,
                count: u64::MAX - i as u64,
                sum: b.wrapping_mul(3),
                min: i64::MIN + i as i64,
                max: i64::MAX - i as i64,
            };
            addresses.push(result.address());
            changes.push(Change {
                seq: i as u64,
                op: if i % 2 == 0 {
                    ChangeOp::Upsert
                } else {
                    ChangeOp::Retract
                },
                result,
            });
            late.push(LateRecord {
                seq: u64::MAX - i as u64,
                event: Event {
                    id: odd.repeat(i),
                    key: "k".into(),
                    timestamp: i64::MIN + i as i64,
                    value: i64::MAX - i as i64,
                },
                watermark: -(i as i64),
            });
        }
        assert_eq!(json_array(&changes), serde_json::to_vec(&changes).unwrap());
        assert_eq!(json_array(&late), serde_json::to_vec(&late).unwrap());
        assert_eq!(
            json_array(&addresses),
            serde_json::to_vec(&addresses).unwrap()
        );
        assert_eq!(json_array::<Change>(&[]), b"[]");
    }
}
