//! `POST /events` (and `POST /ingest/{source}` of the window engine):
//! deliveries to the window engine, logged as the request body (kind
//! `events` for JSON, `ndjson` for NDJSON).
//!
//! When a touched partition derives its watermark from its events (a
//! pipeline's `"watermarks"`, docs/webhooks.md), the command also carries
//! each such partition's strategy, and applying it advances the partition
//! to what [`derive`] gives for the deliveries' largest timestamp, in the
//! same atomic call. It is then logged as kind `events_derived` /
//! `ndjson_derived`: a first line `{"derive":[[P,BOUND|null],...]}`, then
//! the body. A replay applies the logged strategy to the replayed state, so
//! the derived advances are the same whatever the service's configuration
//! is when it replays.

use std::borrow::Cow;

use crate::engine::{DeliveryRef, EventRef, IngestOutcome, Rejection};
use crate::service::parse::{self, Framing};
use crate::service::strategy::derive;
use crate::service::ServiceError;
use crate::store::EngineId;

use super::{unreadable, Cmd, Engines, Logged, Output};

/// Deliveries, borrowed from their request (live) or owned (replay).
#[derive(Debug)]
pub(in crate::service) struct Ingest<'a> {
    pub framing: Framing,
    pub deliveries: Vec<DeliveryRef<'a>>,
    /// The touched partitions that derive their watermark, with their
    /// bound (None: idleness only), in pipeline order.
    pub derive: Vec<(String, Option<i64>)>,
}

/// The first line of a derived command's body.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Derive {
    derive: Vec<(String, Option<i64>)>,
}

impl Ingest<'_> {
    /// What the command log stores: `raw` itself, or the strategy line and
    /// `raw` when the command derives watermarks.
    pub fn body(&self, raw: &[u8]) -> Result<Option<Vec<u8>>, ServiceError> {
        if self.derive.is_empty() {
            return Ok(None);
        }
        let mut out = serde_json::to_vec(&Derive {
            derive: self.derive.clone(),
        })
        .map_err(|e| ServiceError::Unavailable(format!("cannot encode the command: {e}")))?;
        out.push(b'\n');
        out.extend_from_slice(raw);
        Ok(Some(out))
    }
}

impl Cmd for Ingest<'_> {
    const ENGINE: EngineId = EngineId::Window;
    type Outcome = IngestOutcome;

    fn kind(&self) -> &'static str {
        match (self.framing, self.derive.is_empty()) {
            (f, true) => f.kind(),
            (Framing::Json, false) => "events_derived",
            (Framing::Ndjson, false) => "ndjson_derived",
        }
    }

    fn apply(self, engines: &mut Engines) -> Result<IngestOutcome, ServiceError> {
        let largest: Vec<Option<i64>> = self
            .derive
            .iter()
            .map(|(p, _)| {
                self.deliveries
                    .iter()
                    .filter(|d| d.partition == p.as_str())
                    .map(|d| d.event.timestamp)
                    .max()
            })
            .collect();
        let w = &mut engines.window;
        let mut out = w.ingest(self.deliveries).map_err(|b| match b.rejection {
            // The history could not be read: nothing applied.
            Rejection::Unavailable(d) => ServiceError::Unavailable(d),
            _ => ServiceError::BatchRejected(b),
        })?;
        for ((p, bound), largest) in self.derive.iter().zip(largest) {
            let (Some(largest), Some((progress, idle))) = (largest, w.partition_clock(p)) else {
                continue;
            };
            if let Some(to) = derive(*bound, progress, idle, largest) {
                // A partition of the pipeline (its deliveries were just
                // consumed): an advance cannot be refused.
                let t = w
                    .advance(p, to)
                    .map_err(|r| ServiceError::Unavailable(r.to_string()))?;
                out.changes.extend(t.changes);
                out.watermark = t.watermark;
            }
        }
        Ok(out)
    }

    fn stored(out: &IngestOutcome) -> Output<'_> {
        Output {
            changes: &out.changes,
            late: &out.late,
            ..Output::default()
        }
    }
}

impl Logged for Ingest<'static> {
    const KINDS: &'static [&'static str] =
        &["events", "ndjson", "events_derived", "ndjson_derived"];

    fn decode(kind: &str, body: &[u8]) -> Result<Self, String> {
        let framing = if kind.starts_with("events") {
            Framing::Json
        } else {
            Framing::Ndjson
        };
        let (derive, body) = if kind.ends_with("_derived") {
            let nl = body
                .iter()
                .position(|b| *b == b'\n')
                .ok_or_else(|| unreadable("no strategy line"))?;
            let d: Derive = serde_json::from_slice(&body[..nl]).map_err(unreadable)?;
            (d.derive, &body[nl + 1..])
        } else {
            (Vec::new(), body)
        };
        let parsed = parse::deliveries(body, framing).map_err(unreadable)?;
        Ok(Ingest {
            framing,
            deliveries: parsed.items.into_iter().map(owned).collect(),
            derive,
        })
    }
}

/// A delivery owning its strings.
fn owned(d: DeliveryRef<'_>) -> DeliveryRef<'static> {
    fn own(s: Cow<'_, str>) -> Cow<'static, str> {
        Cow::Owned(s.into_owned())
    }
    DeliveryRef {
        partition: own(d.partition),
        offset: d.offset,
        event: EventRef {
            id: own(d.event.id),
            key: own(d.event.key),
            timestamp: d.event.timestamp,
            value: d.event.value,
        },
    }
}
