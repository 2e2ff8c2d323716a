//! `PUT /patterns`: a new pattern document put in force, in order with the
//! pushes and advances, logged as the document's JSON as `GET /patterns`
//! writes it (kind `document`). Patterns unchanged by name and definition
//! keep their state; new and changed ones start empty.

use crate::patterns::{Document, DocumentChange};
use crate::service::ServiceError;
use crate::store::EngineId;

use super::{unreadable, Cmd, Engines, Logged, Output};

/// A document change.
#[derive(Debug)]
pub(in crate::service) struct PatternDocument {
    pub doc: Document,
}

impl Cmd for PatternDocument {
    const ENGINE: EngineId = EngineId::Patterns;
    type Outcome = DocumentChange;

    fn kind(&self) -> &'static str {
        "document"
    }

    fn apply(self, engines: &mut Engines) -> Result<DocumentChange, ServiceError> {
        Ok(engines.patterns.change_document(self.doc))
    }

    fn stored(_: &DocumentChange) -> Output<'_> {
        // a change outputs nothing
        Output::default()
    }
}

impl Logged for PatternDocument {
    const KINDS: &'static [&'static str] = &["document"];

    fn decode(_: &str, body: &[u8]) -> Result<Self, String> {
        Document::from_json(body)
            .map(|doc| PatternDocument { doc })
            .map_err(unreadable)
    }
}
