//! The logged commands, one file per command (as mini-redis's `cmd/`):
//! each says which engine it applies to, under which kind the command log
//! stores it and how it is read back, how it applies itself to its engine,
//! and which output records it stores. The live write path
//! (`Service::apply`, generic over [`Cmd`]) and recovery ([`Replay`]) run
//! the same [`Cmd::apply`], so a replay is the code of the call it replays,
//! and each verb gets its own outcome type back: no runtime downcast.
//!
//! A command row stores the engine, a kind and a body:
//!
//! | engine | kind | body | file |
//! | --- | --- | --- | --- |
//! | `window` | `deliveries` | the deliveries of a `POST /events` (or `/batch`, or a webhook), binary (`deliveries_body.rs`) | `ingest.rs` |
//! | `window` | `events`, `ndjson` (read only) | a `POST /events` body as received, in logs written before `deliveries` | `ingest.rs` |
//! | `window` | `advance` | `{"partition":P,"watermark":W}` | `advance.rs` |
//! | `window` | `advances` | `[{"partition":P,"watermark":W},...]` | `advance_all.rs` |
//! | `window` | `idle` | the partition name as a JSON string | `idle.rs` |
//! | `patterns` | `events` | a `POST /patterns/events` JSON body, as received | `pattern_push.rs` |
//! | `patterns` | `ndjson` | a `POST /patterns/events` NDJSON body, as received | `pattern_push.rs` |
//! | `patterns` | `advance` | `{"watermark":W}` | `pattern_advance.rs` |
//! | `patterns` | `finish` | `{}` | `pattern_finish.rs` |
//! | `patterns` | `document` | the new document, as `GET /patterns` writes it | `pattern_document.rs` |
//!
//! Adding a command: a file here implementing [`Cmd`] and [`Logged`], and
//! one line in the `registry!` below, which declares the file's module and
//! its type (and recovery then reads it back).

use crate::engine::{Change, LateRecord, Processor};
use crate::patterns;
use crate::store::EngineId;

use super::error::ServiceError;

mod deliveries_body;

/// The engines the service drives, under its one engines lock.
pub(in crate::service) struct Engines {
    /// The windowed-aggregation engine.
    pub window: Processor,
    /// The pattern engine.
    pub patterns: patterns::Engine,
}

/// The output records of an applied command, as they are stored.
#[derive(Default)]
pub(in crate::service) struct Output<'a> {
    /// Window engine changes.
    pub changes: &'a [Change],
    /// Window engine late records.
    pub late: &'a [LateRecord],
    /// Pattern engine output.
    pub patterns: &'a [patterns::Output],
}

/// A replayed command's outcome, boxed (any command type), saying what
/// the store keeps of it ([`Cmd::stored`]); a replay hands it to its
/// checker thread, which compares that output with the store's.
pub(in crate::service) struct ReplayOutcome(Box<dyn StoredOutcome>);

impl ReplayOutcome {
    /// What the store keeps, borrowed.
    pub fn output(&self) -> Output<'_> {
        self.0.output()
    }
}

impl std::fmt::Debug for ReplayOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = self.output();
        f.debug_struct("ReplayOutcome")
            .field("changes", &o.changes.len())
            .field("late", &o.late.len())
            .field("patterns", &o.patterns.len())
            .finish()
    }
}

/// An outcome that can say what the store keeps of it.
trait StoredOutcome: Send {
    fn output(&self) -> Output<'_>;
}

/// The outcome of a command of type `C`.
struct OutcomeOf<C: Cmd>(C::Outcome, std::marker::PhantomData<fn() -> C>);

impl<C: Cmd> StoredOutcome for OutcomeOf<C>
where
    C::Outcome: Send,
{
    fn output(&self) -> Output<'_> {
        C::stored(&self.0)
    }
}

impl ReplayOutcome {
    fn of<C: Cmd + 'static>(out: C::Outcome) -> ReplayOutcome
    where
        C::Outcome: Send + 'static,
    {
        ReplayOutcome(Box::new(OutcomeOf::<C>(out, std::marker::PhantomData)))
    }
}

/// A mutating call: applied to one engine under the engines lock, logged
/// under [`Cmd::kind`].
pub(in crate::service) trait Cmd: Sized {
    /// The engine it applies to.
    const ENGINE: EngineId;
    /// What applying it to its engine produced: its outcome (the call's
    /// answer is built from it, the store keeps its output).
    type Outcome;
    /// Its kind in the command log.
    fn kind(&self) -> &'static str;
    /// Applies it to its engine; a rejection changes nothing.
    fn apply(self, engines: &mut Engines) -> Result<Self::Outcome, ServiceError>;
    /// What the store keeps of its outcome: the live path encodes it for
    /// the commit, and recovery checks a replay's against the store (the
    /// one declaration of what a command stores).
    fn stored(out: &Self::Outcome) -> Output<'_>;
}

/// A command as the log reads it back: owned (it crosses from the log
/// reader's thread to the engine's).
pub(in crate::service) trait Logged: Cmd + Send + 'static {
    /// The kinds it is stored under.
    const KINDS: &'static [&'static str];
    /// Reads a row of kind `kind` (one of [`Logged::KINDS`]) back.
    fn decode(kind: &str, body: &[u8]) -> Result<Self, String>;
}

/// `unreadable body: ...`, the decode error of every command.
fn unreadable(e: impl std::fmt::Display) -> String {
    format!("unreadable body: {e}")
}

/// Declares each command's module (`file`) and type (`Name`), and defines
/// [`Replay`]: one variant per logged command type, read back by its engine
/// and kind.
macro_rules! registry {
    ($($file:ident::$name:ident: $ty:ty),* $(,)?) => {
        $(
            mod $file;
            pub(super) use $file::$name;
        )*

        /// A command read back from the log, of any registered type.
        pub(in crate::service) enum Replay {
            $($name($ty),)*
        }

        impl Replay {
            /// Reads a logged command back.
            pub fn decode(engine: EngineId, kind: &str, body: &[u8]) -> Result<Replay, String> {
                $(
                    if <$ty as Cmd>::ENGINE == engine && <$ty as Logged>::KINDS.contains(&kind) {
                        return <$ty as Logged>::decode(kind, body).map(Replay::$name);
                    }
                )*
                Err(format!("unknown command kind {kind:?} of the {} engine", engine.name()))
            }

            /// Its kind in the command log.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Replay::$name(c) => c.kind(),)*
                }
            }

            /// Applies it ([`Cmd::apply`]) and returns its outcome.
            pub fn apply(self, engines: &mut Engines) -> Result<ReplayOutcome, ServiceError> {
                match self {
                    $(Replay::$name(c) => c.apply(engines).map(ReplayOutcome::of::<$ty>),)*
                }
            }
        }
    };
}

registry! {
    ingest::Ingest: Ingest<'static>,
    advance::Advance: Advance<'static>,
    advance_all::AdvanceAll: AdvanceAll<'static>,
    idle::Idle: Idle<'static>,
    pattern_push::PatternPush: PatternPush,
    pattern_advance::PatternAdvance: PatternAdvance,
    pattern_finish::PatternFinish: PatternFinish,
    pattern_document::PatternDocument: PatternDocument,
}
