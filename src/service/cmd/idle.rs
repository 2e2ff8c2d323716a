//! `POST /partitions/{p}/idle`: a partition marked idle, logged as its name
//! as a JSON string (kind `idle`).

use std::borrow::Cow;

use crate::engine::{Finalized, TickOutcome};
use crate::service::ServiceError;
use crate::store::EngineId;

use super::{unreadable, Cmd, Engines, Logged, Output};

/// A partition marked idle.
#[derive(Debug)]
pub(in crate::service) struct Idle<'a> {
    pub partition: Cow<'a, str>,
    /// What the answer shows of the finalized buckets (not logged).
    pub detail: Finalized,
}

impl Idle<'_> {
    /// The body the command log stores.
    pub fn body(&self) -> Result<Vec<u8>, ServiceError> {
        serde_json::to_vec(&self.partition)
            .map_err(|e| ServiceError::Unavailable(format!("cannot encode the command: {e}")))
    }
}

impl Cmd for Idle<'_> {
    const ENGINE: EngineId = EngineId::Window;
    type Outcome = TickOutcome;

    fn kind(&self) -> &'static str {
        "idle"
    }

    fn apply(self, engines: &mut Engines) -> Result<TickOutcome, ServiceError> {
        engines
            .window
            .mark_idle_with(&self.partition, self.detail)
            .map_err(ServiceError::Rejected)
    }

    fn stored(out: &TickOutcome) -> Output<'_> {
        Output {
            changes: &out.changes,
            ..Output::default()
        }
    }
}

impl Logged for Idle<'static> {
    const KINDS: &'static [&'static str] = &["idle"];

    fn decode(_: &str, body: &[u8]) -> Result<Self, String> {
        let partition: String = serde_json::from_slice(body).map_err(unreadable)?;
        Ok(Idle {
            partition: Cow::Owned(partition),
            detail: Finalized::Count,
        })
    }
}
