//! The logged commands: what a mutating call applies to an engine, how it is
//! written to the command log and read back, and its application. The live
//! write path and recovery both go through [`Command::apply`], so a replay
//! is the same code as the call it replays.
//!
//! A command row stores the engine, a kind and a body:
//!
//! | engine | kind | body |
//! | --- | --- | --- |
//! | `window` | `events` | a `POST /events` JSON body, as received |
//! | `window` | `ndjson` | a `POST /events` NDJSON body, as received |
//! | `window` | `advance` | `{"partition":P,"watermark":W}` |
//! | `window` | `idle` | the partition name as a JSON string |
//! | `patterns` | `events` | a `POST /patterns/events` JSON body, as received |
//! | `patterns` | `ndjson` | a `POST /patterns/events` NDJSON body, as received |
//! | `patterns` | `advance` | `{"watermark":W}` |
//! | `patterns` | `finish` | `{}` |

use std::borrow::Cow;

use crate::engine::{
    Change, DeliveryRef, EventRef, IngestOutcome, LateRecord, Processor, TickOutcome,
};
use crate::patterns;
use crate::store::EngineId;

use super::parse::{self, Framing};
use super::ServiceError;

/// The engines the service drives, under its one processor lock.
pub(super) struct Engines {
    /// The windowed-aggregation engine.
    pub window: Processor,
    /// The pattern engine.
    pub patterns: patterns::Engine,
}

/// One mutating call, borrowed from its request (live) or owned (replay).
#[derive(Debug)]
pub(super) enum Command<'a> {
    /// `POST /events`.
    Ingest {
        framing: Framing,
        deliveries: Vec<DeliveryRef<'a>>,
    },
    /// `POST /watermarks`.
    Advance {
        partition: Cow<'a, str>,
        watermark: i64,
    },
    /// `POST /partitions/{p}/idle`.
    Idle { partition: Cow<'a, str> },
    /// `POST /patterns/events`: the events up to the first malformed item,
    /// and that item's index and error (the first late event before it
    /// wins over it: decided under the lock, by the engine's watermark).
    PatternPush {
        framing: Framing,
        events: Vec<patterns::Event>,
        malformed: Option<(Option<usize>, String)>,
    },
    /// `POST /patterns/advance`.
    PatternAdvance { watermark: i64 },
    /// `POST /patterns/finish`.
    PatternFinish,
}

/// What a command produced.
#[derive(Debug)]
pub(super) enum Applied {
    Ingest(IngestOutcome),
    Tick(TickOutcome),
    PatternPush(patterns::PushOutcome),
    PatternAdvance(patterns::AdvanceOutcome),
}

/// The output records of an applied command, as they are stored.
#[derive(Default)]
pub(super) struct Output<'a> {
    /// Window engine changes.
    pub changes: &'a [Change],
    /// Window engine late records.
    pub late: &'a [LateRecord],
    /// Pattern engine output.
    pub patterns: &'a [patterns::Output],
}

impl Applied {
    /// The records the store keeps for this command.
    pub fn output(&self) -> Output<'_> {
        match self {
            Applied::Ingest(o) => Output {
                changes: &o.changes,
                late: &o.late,
                ..Output::default()
            },
            Applied::Tick(o) => Output {
                changes: &o.changes,
                ..Output::default()
            },
            Applied::PatternPush(_) => Output::default(),
            Applied::PatternAdvance(o) => Output {
                patterns: &o.output,
                ..Output::default()
            },
        }
    }
}

/// The pattern engine's late rejection of `e` (which `first_late` found).
fn late_of(q: &patterns::Engine, e: &patterns::Event) -> patterns::Rejection {
    patterns::Rejection::LateEvent {
        time: e.time,
        watermark: q.watermark(),
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternAdvanceRow {
    watermark: i64,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AdvanceRow<'a> {
    #[serde(borrow)]
    partition: Cow<'a, str>,
    watermark: i64,
}

fn unreadable(e: impl std::fmt::Display) -> String {
    format!("unreadable body: {e}")
}

impl<'a> Command<'a> {
    /// The engine it applies to.
    pub fn engine(&self) -> EngineId {
        match self {
            Command::Ingest { .. } | Command::Advance { .. } | Command::Idle { .. } => {
                EngineId::Window
            }
            Command::PatternPush { .. }
            | Command::PatternAdvance { .. }
            | Command::PatternFinish => EngineId::Patterns,
        }
    }

    /// Its kind in the command log.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Ingest { framing, .. } | Command::PatternPush { framing, .. } => {
                framing.kind()
            }
            Command::Advance { .. } | Command::PatternAdvance { .. } => "advance",
            Command::Idle { .. } => "idle",
            Command::PatternFinish => "finish",
        }
    }

    /// The body the command log stores, for commands that are not stored as
    /// their request body (ingests are: the caller passes the raw body).
    /// A serialization failure fails the call (nothing is logged empty).
    pub fn compact_body(&self) -> Result<Vec<u8>, ServiceError> {
        let body = match self {
            Command::Ingest { .. } | Command::PatternPush { .. } => {
                return Err(ServiceError::Unavailable(
                    "an ingest is logged as its request body".into(),
                ))
            }
            Command::PatternAdvance { watermark } => serde_json::to_vec(&PatternAdvanceRow {
                watermark: *watermark,
            }),
            Command::PatternFinish => Ok(b"{}".to_vec()),
            Command::Advance {
                partition,
                watermark,
            } => serde_json::to_vec(&AdvanceRow {
                partition: Cow::Borrowed(partition),
                watermark: *watermark,
            }),
            Command::Idle { partition } => serde_json::to_vec(partition),
        };
        body.map_err(|e| ServiceError::Unavailable(format!("cannot encode the command: {e}")))
    }

    /// Reads a logged command back (borrowing from `body`).
    pub fn decode(engine: EngineId, kind: &str, body: &'a [u8]) -> Result<Command<'a>, String> {
        match (engine, kind) {
            (EngineId::Window, "events" | "ndjson") => {
                let framing = if kind == "events" {
                    Framing::Json
                } else {
                    Framing::Ndjson
                };
                let parsed = parse::deliveries(body, framing).map_err(unreadable)?;
                Ok(Command::Ingest {
                    framing,
                    deliveries: parsed.items,
                })
            }
            (EngineId::Window, "advance") => {
                let row: AdvanceRow<'a> = serde_json::from_slice(body).map_err(unreadable)?;
                Ok(Command::Advance {
                    partition: row.partition,
                    watermark: row.watermark,
                })
            }
            (EngineId::Window, "idle") => Ok(Command::Idle {
                partition: serde_json::from_slice(body).map_err(unreadable)?,
            }),
            (EngineId::Patterns, "events" | "ndjson") => {
                let framing = if kind == "events" {
                    Framing::Json
                } else {
                    Framing::Ndjson
                };
                let parsed = parse::pattern_events(body, framing).map_err(unreadable)?;
                Ok(Command::PatternPush {
                    framing,
                    events: parsed.events,
                    malformed: parsed.malformed,
                })
            }
            (EngineId::Patterns, "advance") => {
                let row: PatternAdvanceRow = serde_json::from_slice(body).map_err(unreadable)?;
                Ok(Command::PatternAdvance {
                    watermark: row.watermark,
                })
            }
            (EngineId::Patterns, "finish") => Ok(Command::PatternFinish),
            (engine, kind) => Err(format!(
                "unknown command kind {kind:?} of the {} engine",
                engine.name()
            )),
        }
    }

    /// The same command owning its strings (it can cross threads).
    pub fn into_owned(self) -> Command<'static> {
        fn own(s: Cow<'_, str>) -> Cow<'static, str> {
            Cow::Owned(s.into_owned())
        }
        match self {
            Command::Ingest {
                framing,
                deliveries,
            } => Command::Ingest {
                framing,
                deliveries: deliveries
                    .into_iter()
                    .map(|d| DeliveryRef {
                        partition: own(d.partition),
                        offset: d.offset,
                        event: EventRef {
                            id: own(d.event.id),
                            key: own(d.event.key),
                            timestamp: d.event.timestamp,
                            value: d.event.value,
                        },
                    })
                    .collect(),
            },
            Command::Advance {
                partition,
                watermark,
            } => Command::Advance {
                partition: own(partition),
                watermark,
            },
            Command::Idle { partition } => Command::Idle {
                partition: own(partition),
            },
            Command::PatternPush {
                framing,
                events,
                malformed,
            } => Command::PatternPush {
                framing,
                events,
                malformed,
            },
            Command::PatternAdvance { watermark } => Command::PatternAdvance { watermark },
            Command::PatternFinish => Command::PatternFinish,
        }
    }

    /// Applies the command to its engine. A rejection changes nothing.
    pub fn apply(self, engines: &mut Engines) -> Result<Applied, ServiceError> {
        let p = &mut engines.window;
        let q = &mut engines.patterns;
        match self {
            Command::PatternPush {
                events, malformed, ..
            } => {
                if let Some((index, detail)) = malformed {
                    // The first failing item decides: a late event before
                    // the malformed one is its 409, else the 400.
                    return Err(match q.first_late(&events) {
                        Some(i) => ServiceError::Patterns(
                            patterns::PushRejection {
                                index: i,
                                rejection: late_of(q, &events[i]),
                            }
                            .into(),
                        ),
                        None => ServiceError::Malformed { index, detail },
                    });
                }
                q.push(events)
                    .map(Applied::PatternPush)
                    .map_err(|r| ServiceError::Patterns(r.into()))
            }
            Command::PatternAdvance { watermark } => q
                .advance(watermark)
                .map(Applied::PatternAdvance)
                .map_err(|r| ServiceError::Patterns(r.into())),
            Command::PatternFinish => q
                .finish()
                .map(Applied::PatternAdvance)
                .map_err(|r| ServiceError::Patterns(r.into())),
            Command::Ingest { deliveries, .. } => {
                p.ingest(deliveries)
                    .map(Applied::Ingest)
                    .map_err(|b| match b.rejection {
                        // The history could not be read: nothing applied.
                        crate::engine::Rejection::Unavailable(d) => ServiceError::Unavailable(d),
                        _ => ServiceError::BatchRejected(b),
                    })
            }
            Command::Advance {
                partition,
                watermark,
            } => p
                .advance(&partition, watermark)
                .map(Applied::Tick)
                .map_err(ServiceError::Rejected),
            Command::Idle { partition } => p
                .mark_idle(&partition)
                .map(Applied::Tick)
                .map_err(ServiceError::Rejected),
        }
    }
}
