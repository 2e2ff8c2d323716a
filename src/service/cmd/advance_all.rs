//! `POST /watermarks/batch`: several partitions' advances in one atomic
//! call, logged as a JSON array of `{"partition":P,"watermark":W}` (kind
//! `advances`). Its effect and its output are exactly those of the same
//! advances sent one by one, in order.

use std::borrow::Cow;

use crate::engine::{Finalized, TickOutcome};
use crate::service::ServiceError;
use crate::store::EngineId;

use super::{unreadable, Advance, Cmd, Engines, Logged, Output};

/// Advances applied in order, all or none.
#[derive(Debug)]
pub(in crate::service) struct AdvanceAll<'a> {
    pub advances: Vec<Advance<'a>>,
    /// What the answer shows of the finalized buckets (not logged).
    pub detail: Finalized,
}

impl AdvanceAll<'_> {
    /// The advances `(partition, watermark)`, in order.
    pub fn of(advances: &[(String, i64)], detail: Finalized) -> AdvanceAll<'_> {
        AdvanceAll {
            advances: advances
                .iter()
                .map(|(partition, watermark)| Advance {
                    partition: partition.as_str().into(),
                    watermark: *watermark,
                    // (unused here: the call's `detail` applies to all)
                    detail: Finalized::Count,
                })
                .collect(),
            detail,
        }
    }

    /// The body the command log stores.
    pub fn body(&self) -> Result<Vec<u8>, ServiceError> {
        serde_json::to_vec(&self.advances)
            .map_err(|e| ServiceError::Unavailable(format!("cannot encode the command: {e}")))
    }
}

impl Cmd for AdvanceAll<'_> {
    const ENGINE: EngineId = EngineId::Window;
    type Outcome = TickOutcome;

    fn kind(&self) -> &'static str {
        "advances"
    }

    fn apply(self, engines: &mut Engines) -> Result<TickOutcome, ServiceError> {
        let items: Vec<(&str, i64)> = self
            .advances
            .iter()
            .map(|a| (a.partition.as_ref(), a.watermark))
            .collect();
        engines
            .window
            .advance_all_with(&items, self.detail)
            .map_err(ServiceError::BatchRejected)
    }

    fn stored(out: &TickOutcome) -> Output<'_> {
        Output {
            changes: &out.changes,
            ..Output::default()
        }
    }
}

impl Logged for AdvanceAll<'static> {
    const KINDS: &'static [&'static str] = &["advances"];

    fn decode(_: &str, body: &[u8]) -> Result<Self, String> {
        let rows: Vec<Advance<'_>> = serde_json::from_slice(body).map_err(unreadable)?;
        Ok(AdvanceAll {
            advances: rows
                .into_iter()
                .map(|a| Advance {
                    partition: Cow::Owned(a.partition.into_owned()),
                    watermark: a.watermark,
                    // (unused here, as above)
                    detail: Finalized::Count,
                })
                .collect(),
            detail: Finalized::Count,
        })
    }
}
