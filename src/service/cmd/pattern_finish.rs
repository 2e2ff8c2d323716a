//! `POST /patterns/finish`: the end of the pattern engine's input (every
//! wait and branch resolves), logged as `{}` (kind `finish`).

use crate::patterns::AdvanceOutcome;
use crate::service::ServiceError;
use crate::store::EngineId;

use super::{Cmd, Engines, Logged, Output};

/// The end of the pattern input.
#[derive(Debug)]
pub(in crate::service) struct PatternFinish;

impl PatternFinish {
    /// The body the command log stores.
    pub fn body(&self) -> Result<Vec<u8>, ServiceError> {
        Ok(b"{}".to_vec())
    }
}

impl Cmd for PatternFinish {
    const ENGINE: EngineId = EngineId::Patterns;
    type Outcome = AdvanceOutcome;

    fn kind(&self) -> &'static str {
        "finish"
    }

    fn apply(self, engines: &mut Engines) -> Result<AdvanceOutcome, ServiceError> {
        engines
            .patterns
            .finish()
            .map_err(|r| ServiceError::Patterns(r.into()))
    }

    fn stored(out: &AdvanceOutcome) -> Output<'_> {
        Output {
            patterns: &out.output,
            ..Output::default()
        }
    }
}

impl Logged for PatternFinish {
    const KINDS: &'static [&'static str] = &["finish"];

    fn decode(_: &str, _: &[u8]) -> Result<Self, String> {
        Ok(PatternFinish)
    }
}
