//! Request and response bodies, in the field order of docs/api.md. Responses are
//! serialized straight from these typed structs (never through
//! `serde_json::Value`), so i128 bounds and sums are written exactly.

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use crate::engine::{Address, Change, LateRecord, PartitionStatus, WindowResult};
use crate::service::Status;
use crate::store::{CheckpointMeta, Page};

/// `POST /watermarks` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkBody {
    /// Partition name.
    pub partition: String,
    /// Reported progress.
    #[serde(deserialize_with = "watermark_field")]
    pub watermark: i64,
}

fn watermark_field<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    crate::canonical::strict::int_field(d, "watermark")
}

/// `POST /events` answer.
#[derive(Serialize)]
pub struct IngestResponse<'a> {
    /// Changes produced, in order.
    pub changes: &'a [Change],
    /// Late records produced, in order.
    pub late: &'a [LateRecord],
    /// Global watermark.
    pub watermark: Option<i64>,
    /// Consumed offset of each touched partition.
    #[serde(serialize_with = "pairs_as_map")]
    pub offsets: &'a [(String, i64)],
}

fn pairs_as_map<S: Serializer>(pairs: &&[(String, i64)], s: S) -> Result<S::Ok, S::Error> {
    let mut m = s.serialize_map(Some(pairs.len()))?;
    for (k, v) in pairs.iter() {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

/// `POST /watermarks` and `/partitions/{p}/idle` answer.
#[derive(Serialize)]
pub struct TickResponse<'a> {
    /// Changes produced, in order.
    pub changes: &'a [Change],
    /// Global watermark after the call.
    pub watermark: Option<i64>,
    /// Finalized addresses, in address order.
    pub finalized: &'a [Address],
}

/// `GET /results` answer.
#[derive(Serialize)]
pub struct ResultsResponse<'a> {
    /// Visible rows in address order.
    pub results: &'a [WindowResult],
    /// Global watermark.
    pub watermark: Option<i64>,
    /// The change sequence of the state shown.
    pub sequence: u64,
    /// Its epoch.
    pub epoch: u64,
}

/// `GET /status` answer.
#[derive(Serialize)]
pub struct StatusResponse<'a> {
    /// Global watermark.
    pub watermark: Option<i64>,
    /// Latest change sequence.
    pub sequence: u64,
    /// Late records.
    pub late: u64,
    /// Live buckets.
    pub live_buckets: usize,
    /// Restores so far.
    pub epoch: u64,
    /// Partitions by name.
    #[serde(serialize_with = "partitions_map")]
    pub partitions: &'a [PartitionStatus],
}

#[derive(Serialize)]
struct PartitionDto {
    offset: i64,
    progress: Option<i64>,
    idle: bool,
}

fn partitions_map<S: Serializer>(ps: &&[PartitionStatus], s: S) -> Result<S::Ok, S::Error> {
    let mut m = s.serialize_map(Some(ps.len()))?;
    for p in ps.iter() {
        m.serialize_entry(
            &p.name,
            &PartitionDto {
                offset: p.offset,
                progress: p.progress,
                idle: p.idle,
            },
        )?;
    }
    m.end()
}

impl<'a> StatusResponse<'a> {
    /// From the service's status.
    pub fn new(s: &'a Status) -> Self {
        StatusResponse {
            watermark: s.watermark,
            sequence: s.sequence,
            late: s.late,
            live_buckets: s.live_buckets,
            epoch: s.epoch,
            partitions: &s.partitions,
        }
    }
}

/// `POST /checkpoints` answer.
#[derive(Serialize)]
pub struct CheckpointCreated<'a> {
    /// Id.
    pub id: i64,
    /// Change sequence.
    pub sequence: u64,
    /// The envelope's digest (its own `digest` field; a pattern
    /// envelope's `sha256`).
    pub digest: &'a str,
    /// Envelope length.
    pub bytes: u64,
}

/// One `GET /checkpoints` row.
#[derive(Serialize)]
pub struct CheckpointListed<'a> {
    /// Id.
    pub id: i64,
    /// Change sequence.
    pub sequence: u64,
    /// The envelope's digest (its own `digest` field; a pattern
    /// envelope's `sha256`).
    pub digest: &'a str,
    /// Envelope length.
    pub bytes: u64,
    /// Storage time (service metadata).
    pub created_at: &'a str,
}

impl<'a> From<&'a CheckpointMeta> for CheckpointListed<'a> {
    fn from(m: &'a CheckpointMeta) -> Self {
        CheckpointListed {
            id: m.id,
            sequence: m.sequence,
            digest: &m.digest,
            bytes: m.bytes,
            created_at: &m.created_at,
        }
    }
}

/// `GET /checkpoints` answer.
#[derive(Serialize)]
pub struct CheckpointList<'a> {
    /// Newest first.
    pub checkpoints: Vec<CheckpointListed<'a>>,
}

/// `POST /restore` answer.
#[derive(Serialize)]
pub struct RestoreResponse {
    /// Change sequence.
    pub sequence: u64,
    /// Late records.
    pub late: u64,
    /// Global watermark.
    pub watermark: Option<i64>,
}

/// `GET /healthz` / `GET /readyz` answer.
#[derive(Serialize)]
pub struct Health {
    /// `ok`.
    pub status: &'static str,
}

/// Renders a page of an output stream from its stored compact JSON rows:
/// `{"<field>":[rows],"next":N,"head":H,"epoch":E}`, plus `"rewound_to":R`
/// when the page was asked for in an older epoch.
pub fn page_body(field: &str, page: &Page) -> Vec<u8> {
    let next = page.rows.last().map_or(page.after, |(s, _)| *s);
    page_body_next(field, page, next)
}

/// [`page_body`] with `next` given: a filtered page's `next` is the last
/// sequence it scanned, which may be beyond its last row.
pub fn page_body_next(field: &str, page: &Page, next: u64) -> Vec<u8> {
    let rows = &page.rows;
    let size: usize = rows.iter().map(|(_, r)| r.len() + 1).sum();
    let mut out = Vec::with_capacity(size + 64);
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(b"\":[");
    for (i, (_, r)) in rows.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(r.as_bytes());
    }
    out.extend_from_slice(
        format!(
            "],\"next\":{next},\"head\":{},\"epoch\":{}",
            page.head, page.epoch
        )
        .as_bytes(),
    );
    if let Some(r) = page.rewound_to {
        out.extend_from_slice(format!(",\"rewound_to\":{r}").as_bytes());
    }
    out.push(b'}');
    out
}
