//! `POST /patterns/advance`: the pattern engine's watermark advance (it
//! processes what it buffered), logged as `{"watermark":W}` (kind
//! `advance`).

use crate::patterns::AdvanceOutcome;
use crate::service::ServiceError;
use crate::store::EngineId;

use super::{unreadable, Cmd, Engines, Logged, Output};

/// A pattern watermark advance.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::service) struct PatternAdvance {
    pub watermark: i64,
}

impl PatternAdvance {
    /// The body the command log stores.
    pub fn body(&self) -> Result<Vec<u8>, ServiceError> {
        serde_json::to_vec(self)
            .map_err(|e| ServiceError::Unavailable(format!("cannot encode the command: {e}")))
    }
}

impl Cmd for PatternAdvance {
    const ENGINE: EngineId = EngineId::Patterns;
    type Outcome = AdvanceOutcome;

    fn kind(&self) -> &'static str {
        "advance"
    }

    fn apply(self, engines: &mut Engines) -> Result<AdvanceOutcome, ServiceError> {
        engines
            .patterns
            .advance(self.watermark)
            .map_err(|r| ServiceError::Patterns(r.into()))
    }

    fn stored(out: &AdvanceOutcome) -> Output<'_> {
        Output {
            patterns: &out.output,
            ..Output::default()
        }
    }
}

impl Logged for PatternAdvance {
    const KINDS: &'static [&'static str] = &["advance"];

    fn decode(_: &str, body: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(body).map_err(unreadable)
    }
}
