//! `POST /patterns/events`: events buffered by the pattern engine, logged as
//! the request body (kind `events` for JSON, `ndjson` for NDJSON).

use crate::patterns::{self, PushOutcome};
use crate::service::parse::{self, Framing};
use crate::service::ServiceError;
use crate::store::EngineId;

use super::{unreadable, Cmd, Engines, Logged, Output};

/// The events of a push up to the first malformed item, and that item's
/// index and error (the first late event before it wins over it: decided
/// under the lock, by the engine's watermark).
#[derive(Debug)]
pub(in crate::service) struct PatternPush {
    pub framing: Framing,
    pub events: Vec<patterns::Event>,
    pub malformed: Option<(Option<usize>, String)>,
}

impl Cmd for PatternPush {
    const ENGINE: EngineId = EngineId::Patterns;
    type Outcome = PushOutcome;

    fn kind(&self) -> &'static str {
        self.framing.kind()
    }

    fn apply(self, engines: &mut Engines) -> Result<PushOutcome, ServiceError> {
        let q = &mut engines.patterns;
        if let Some((index, detail)) = self.malformed {
            // The first failing item decides: a late event before the
            // malformed one is its 409, else the 400.
            return Err(match q.first_late(&self.events) {
                Some(i) => ServiceError::Patterns(
                    patterns::PushRejection {
                        index: i,
                        rejection: patterns::Rejection::LateEvent {
                            time: self.events[i].time,
                            watermark: q.watermark(),
                        },
                    }
                    .into(),
                ),
                None => ServiceError::Malformed { index, detail },
            });
        }
        q.push(self.events)
            .map_err(|r| ServiceError::Patterns(r.into()))
    }

    fn stored(_: &PushOutcome) -> Output<'_> {
        // a push only buffers: no output records
        Output::default()
    }
}

impl Logged for PatternPush {
    const KINDS: &'static [&'static str] = &["events", "ndjson"];

    fn decode(kind: &str, body: &[u8]) -> Result<Self, String> {
        let framing = if kind == "events" {
            Framing::Json
        } else {
            Framing::Ndjson
        };
        let parsed = parse::pattern_events(body, framing).map_err(unreadable)?;
        Ok(PatternPush {
            framing,
            events: parsed.events,
            malformed: parsed.malformed,
        })
    }
}
