//! `POST /watermarks`: a partition's watermark advance, logged as
//! `{"partition":P,"watermark":W}` (kind `advance`).

use std::borrow::Cow;

use crate::engine::{Finalized, TickOutcome};
use crate::service::ServiceError;
use crate::store::EngineId;

use super::{unreadable, Cmd, Engines, Logged, Output};

/// A watermark advance of one partition.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::service) struct Advance<'a> {
    #[serde(borrow)]
    pub partition: Cow<'a, str>,
    pub watermark: i64,
    /// What the answer shows of the finalized buckets (not logged: a
    /// replay needs their number only).
    #[serde(skip)]
    pub detail: Finalized,
}

impl Advance<'_> {
    /// The body the command log stores.
    pub fn body(&self) -> Result<Vec<u8>, ServiceError> {
        serde_json::to_vec(self)
            .map_err(|e| ServiceError::Unavailable(format!("cannot encode the command: {e}")))
    }
}

impl Cmd for Advance<'_> {
    const ENGINE: EngineId = EngineId::Window;
    type Outcome = TickOutcome;

    fn kind(&self) -> &'static str {
        "advance"
    }

    fn apply(self, engines: &mut Engines) -> Result<TickOutcome, ServiceError> {
        engines
            .window
            .advance_with(&self.partition, self.watermark, self.detail)
            .map_err(ServiceError::Rejected)
    }

    fn stored(out: &TickOutcome) -> Output<'_> {
        Output {
            changes: &out.changes,
            ..Output::default()
        }
    }
}

impl Logged for Advance<'static> {
    const KINDS: &'static [&'static str] = &["advance"];

    fn decode(_: &str, body: &[u8]) -> Result<Self, String> {
        let row: Advance<'_> = serde_json::from_slice(body).map_err(unreadable)?;
        Ok(Advance {
            partition: Cow::Owned(row.partition.into_owned()),
            watermark: row.watermark,
            detail: Finalized::Count,
        })
    }
}
