//! `POST /events`: deliveries to the window engine, logged as the request
//! body (kind `events` for JSON, `ndjson` for NDJSON).

use std::borrow::Cow;

use crate::engine::{DeliveryRef, EventRef, IngestOutcome, Rejection};
use crate::service::parse::{self, Framing};
use crate::service::ServiceError;
use crate::store::EngineId;

use super::{unreadable, Cmd, Engines, Logged, Records};

/// Deliveries, borrowed from their request (live) or owned (replay).
#[derive(Debug)]
pub(in crate::service) struct Ingest<'a> {
    pub framing: Framing,
    pub deliveries: Vec<DeliveryRef<'a>>,
}

impl Cmd for Ingest<'_> {
    const ENGINE: EngineId = EngineId::Window;
    type Out = IngestOutcome;

    fn kind(&self) -> &'static str {
        self.framing.kind()
    }

    fn apply(self, engines: &mut Engines) -> Result<IngestOutcome, ServiceError> {
        engines
            .window
            .ingest(self.deliveries)
            .map_err(|b| match b.rejection {
                // The history could not be read: nothing applied.
                Rejection::Unavailable(d) => ServiceError::Unavailable(d),
                _ => ServiceError::BatchRejected(b),
            })
    }

    fn records(out: IngestOutcome) -> Records {
        Records {
            changes: out.changes,
            late: out.late,
            ..Records::default()
        }
    }
}

impl Logged for Ingest<'static> {
    const KINDS: &'static [&'static str] = &["events", "ndjson"];

    fn decode(kind: &str, body: &[u8]) -> Result<Self, String> {
        let framing = if kind == "events" {
            Framing::Json
        } else {
            Framing::Ndjson
        };
        let parsed = parse::deliveries(body, framing).map_err(unreadable)?;
        Ok(Ingest {
            framing,
            deliveries: parsed.items.into_iter().map(owned).collect(),
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
