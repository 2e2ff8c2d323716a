//! `POST /events` (and `POST /ingest/{source}` of the window engine):
//! deliveries to the window engine, logged as kind `deliveries`: the parsed
//! deliveries in the binary form of [`deliveries_body`](super::deliveries_body),
//! which also carries the watermark strategies the call applied.
//!
//! When a touched partition derives its watermark from its events (a
//! pipeline's `"watermarks"`, docs/webhooks.md), the command carries each
//! such partition's strategy, and applying it advances the partition to
//! what [`derive`] gives for the deliveries' largest timestamp, in the same
//! atomic call. A replay applies the logged strategy to the replayed state,
//! so the derived advances are the same whatever the service's
//! configuration is when it replays.
//!
//! Logs written before the binary form hold kinds `events` / `ndjson` (the
//! request body as received) and `events_derived` / `ndjson_derived` (a
//! first line `{"derive":[[P,BOUND|null],...]}`, then the body); they are
//! still read back.

use std::borrow::Cow;

use crate::engine::{DeliveryRef, EventRef, IngestOutcome, Rejection};
use crate::service::parse::{self, Framing};
use crate::service::strategy::derive;
use crate::service::ServiceError;
use crate::store::EngineId;

use super::deliveries_body;
use super::{unreadable, Cmd, Engines, Logged, Output};

/// Deliveries, borrowed from their request (live) or owned (replay).
#[derive(Debug)]
pub(in crate::service) struct Ingest<'a> {
    pub deliveries: Vec<DeliveryRef<'a>>,
    /// The touched partitions that derive their watermark, with their
    /// bound (None: idleness only), in pipeline order.
    pub derive: Vec<(String, Option<i64>)>,
}

/// The first line of a derived command's body (logs before the binary form).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Derive {
    derive: Vec<(String, Option<i64>)>,
}

impl Ingest<'_> {
    /// What the command log stores.
    pub fn body(&self) -> Vec<u8> {
        deliveries_body::encode(&self.deliveries, &self.derive)
    }
}

impl Cmd for Ingest<'_> {
    const ENGINE: EngineId = EngineId::Window;
    type Outcome = IngestOutcome;

    fn kind(&self) -> &'static str {
        "deliveries"
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
                // (its finalized buckets are not in the answer)
                let t = w
                    .advance_with(p, to, crate::engine::Finalized::Count)
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
        &["deliveries", "events", "ndjson", "events_derived", "ndjson_derived"];

    fn decode(kind: &str, body: &[u8]) -> Result<Self, String> {
        if kind == "deliveries" {
            let (deliveries, derive) = deliveries_body::decode(body).map_err(unreadable)?;
            return Ok(Ingest { deliveries, derive });
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(offset: Option<i64>, id: &str, ts: i64) -> DeliveryRef<'static> {
        DeliveryRef {
            partition: Cow::Borrowed("p0"),
            offset,
            event: EventRef {
                id: Cow::Owned(id.into()),
                key: Cow::Borrowed("k"),
                timestamp: ts,
                value: -2,
            },
        }
    }

    /// A command is logged in the binary form and read back as itself,
    /// and the four kinds of logs written before it still read back.
    #[test]
    fn logged_commands_read_back_in_every_kind() {
        let deliveries = vec![delivery(Some(3), "a", 10), delivery(None, "b\"", -4)];
        let derive = vec![("p0".to_string(), Some(300)), ("p1".to_string(), None)];
        let cmd = Ingest {
            deliveries: deliveries.clone(),
            derive: derive.clone(),
        };
        assert_eq!(cmd.kind(), "deliveries");
        let back = Ingest::decode("deliveries", &cmd.body()).unwrap();
        assert_eq!((back.deliveries, back.derive), (deliveries.clone(), derive.clone()));

        let json = r#"[{"partition":"p0","offset":3,"event":{"id":"a","key":"k","timestamp":10,"value":-2}},
            {"partition":"p0","event":{"id":"b\"","key":"k","timestamp":-4,"value":-2}}]"#;
        let ndjson = r#"{"partition":"p0","offset":3,"event":{"id":"a","key":"k","timestamp":10,"value":-2}}
{"event":{"id":"b\"","key":"k","timestamp":-4,"value":-2},"partition":"p0"}"#;
        let strategy = r#"{"derive":[["p0",300],["p1",null]]}"#;
        for (kind, body, with_derive) in [
            ("events", json.to_string(), false),
            ("ndjson", ndjson.to_string(), false),
            ("events_derived", format!("{strategy}\n{json}"), true),
            ("ndjson_derived", format!("{strategy}\n{ndjson}"), true),
        ] {
            let back = Ingest::decode(kind, body.as_bytes()).unwrap();
            assert_eq!(back.deliveries, deliveries, "{kind}");
            assert_eq!(back.derive, if with_derive { derive.clone() } else { vec![] }, "{kind}");
        }
        assert!(Ingest::decode("deliveries", json.as_bytes()).is_err());
        assert!(Ingest::decode("events_derived", json.as_bytes()).is_err());
    }
}
