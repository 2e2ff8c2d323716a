//! The commit queue's data: the applied calls waiting for their commit,
//! each with its stored body and encoded output, and the callers waiting
//! for their commit's verdict. The group commit that drains it is `commit`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar};

use crate::store::{self, CommandRow, EngineId, StoredBody, Stream};

use super::cmd::{Cmd, Output};
use super::error::ServiceError;
use super::heads::Heads;
use super::recover::LogCounts;

/// The queue of applied calls waiting for their commit.
#[derive(Default)]
pub(super) struct CommitQueue {
    /// Applied calls not yet committed, in ticket (engine) order.
    pub(super) queue: VecDeque<Pending>,
    /// A leader is committing a group.
    pub(super) leader: bool,
    /// The verdicts of decided calls (committed, or failed and why) that
    /// their callers have not collected yet.
    pub(super) verdicts: HashMap<u64, Result<(), String>>,
    /// The callers waiting for their call's verdict (or to lead), by
    /// ticket: each waits on its own thread's condition, so that a commit
    /// wakes exactly the callers it decided and the one that leads next,
    /// not every caller in flight.
    pub(super) waiting: HashMap<u64, Arc<Condvar>>,
    /// A commit failed: queued and newly applied calls fail until the
    /// engines are rebuilt from the store.
    pub poisoned: bool,
    /// Commands logged since each engine's recovery base.
    pub logged: LogCounts,
    /// Readers waiting in `Service::drain`: a commit wakes them only
    /// when there are some (`notify_all` is a system call even with no
    /// one waiting, on every commit).
    pub(super) draining: usize,
}

impl CommitQueue {
    /// An empty queue for engines that logged `logged` commands since their
    /// bases.
    pub fn new(logged: LogCounts) -> CommitQueue {
        CommitQueue {
            logged,
            ..CommitQueue::default()
        }
    }
}

/// A call applied to an engine, waiting for its commit.
pub(super) struct Pending {
    pub(super) ticket: u64,
    pub(super) engine: EngineId,
    pub(super) kind: &'static str,
    pub(super) body: StoredBody,
    /// The heads after this call.
    pub(super) heads: Heads,
    /// Filled by the caller outside the engines lock.
    pub(super) encoded: Option<Encoded>,
}

impl Pending {
    pub fn new(
        ticket: u64,
        engine: EngineId,
        kind: &'static str,
        body: StoredBody,
        heads: Heads,
    ) -> Pending {
        Pending {
            ticket,
            engine,
            kind,
            body,
            heads,
            encoded: None,
        }
    }

    /// The call as its group's transaction stores it.
    pub(super) fn row(&self) -> CommandRow<'_> {
        let e = self.encoded.as_ref();
        CommandRow {
            engine: self.engine,
            kind: self.kind,
            body: &self.body.bytes,
            encoding: self.body.encoding,
            changes: e
                .and_then(|e| e.changes.as_ref())
                .map(|(f, l, c)| (*f, *l, c.as_slice())),
            records: e.map_or((Stream::Late, &[][..]), |e| {
                (e.records.0, e.records.1.as_slice())
            }),
            key: e
                .and_then(|e| e.key.as_ref())
                .map(|k| k.request.row(&k.response, k.at)),
            document: e.and_then(|e| e.document.as_deref()),
        }
    }
}

/// A call's output encoded for its commit, as the store keeps it (the
/// answer's JSON is written while the commit runs, see `Service::commit`).
pub(super) struct Encoded {
    /// The changes, when the call produced any: first and last sequence,
    /// and the binary chunk ([`store::chunk`]).
    pub(super) changes: Option<(u64, u64, Vec<u8>)>,
    /// The records of a record stream (late records or pattern output) as
    /// `(seq, compact JSON)`.
    pub(super) records: (Stream, Vec<(u64, String)>),
    /// The answer of a call made with an idempotency key, stored with it.
    pub key: Option<KeyAnswer>,
    /// The pattern document a change puts in force.
    pub document: Option<String>,
}

/// A keyed call's answer as stored with the call.
pub(super) struct KeyAnswer {
    pub request: super::KeyedRequest,
    pub response: Vec<u8>,
    pub at: store::KeyAt,
}

impl Encoded {
    /// Encodes what the store keeps of a command's outcome: its output
    /// ([`Cmd::stored`]). A failure fails the call: nothing is ever logged
    /// with an empty body.
    pub fn of<C: Cmd>(out: &C::Outcome) -> Result<Encoded, ServiceError> {
        Encoded::new(&C::stored(out))
    }

    /// Encodes output records for the store (see [`Encoded::of`]).
    fn new(out: &Output<'_>) -> Result<Encoded, ServiceError> {
        let changes = match (out.changes.first(), out.changes.last()) {
            (Some(f), Some(l)) => Some((f.seq, l.seq, store::chunk::encode(out.changes))),
            _ => None,
        };
        fn records<T: serde::Serialize>(
            items: &[T],
            seq: impl Fn(&T) -> u64,
        ) -> Result<Vec<(u64, String)>, ServiceError> {
            items
                .iter()
                .map(|r| Ok((seq(r), serde_json::to_string(r)?)))
                .collect::<Result<Vec<_>, serde_json::Error>>()
                .map_err(|e| ServiceError::Unavailable(format!("cannot encode the output: {e}")))
        }
        let records = if out.patterns.is_empty() {
            (Stream::Late, records(out.late, |l| l.seq)?)
        } else {
            (Stream::Patterns, records(out.patterns, |o| o.seq)?)
        };
        Ok(Encoded {
            changes,
            records,
            key: None,
            document: None,
        })
    }

    /// The stored records, `(seq, compact JSON)`.
    pub fn records(&self) -> &[(u64, String)] {
        &self.records.1
    }
}

/// `[r1,r2,...]` from records already serialized one by one.
pub(super) fn json_records(records: &[(u64, String)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + records.iter().map(|(_, r)| r.len() + 1).sum::<usize>());
    out.push(b'[');
    for (i, (_, r)) in records.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(r.as_bytes());
    }
    out.push(b']');
    out
}

/// Wakes the callers of a committed group, and the one whose call heads
/// the queue (it leads the next commit; a call not encoded yet is led by
/// its own caller once encoded).
pub(super) fn wake_group(q: &CommitQueue, tickets: &[u64]) {
    for t in tickets {
        if let Some(cv) = q.waiting.get(t) {
            cv.notify_one();
        }
    }
    if let Some(head) = q.queue.front().filter(|p| p.encoded.is_some()) {
        if let Some(cv) = q.waiting.get(&head.ticket) {
            cv.notify_one();
        }
    }
}

/// Wakes every caller waiting for a commit (after a failure, which decides
/// all of them).
pub(super) fn wake_all(q: &CommitQueue) {
    for cv in q.waiting.values() {
        cv.notify_one();
    }
}
