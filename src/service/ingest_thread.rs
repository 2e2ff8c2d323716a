//! The ingest thread: small `POST /events` calls (one event per request,
//! the webhook producers' shape) are handed once, from the HTTP task, to a
//! thread of their own, which applies every call it has, commits them all
//! in one transaction and answers each (a oneshot wakes its task).
//!
//! The same write path as every other call (`ingest_command`, `apply_all`
//! and `ingest_applied`: the
//! turnstile, the engines lock, the commit queue; `ingest_finish`: the
//! group commit), only without a blocking-pool thread per call, a lock
//! hand-over between callers and a wake-up per commit: under load the
//! thread takes the calls queued while it committed, and they form the
//! next group. Large bodies still go through the blocking pool, where
//! their parsing runs on every core.
//!
//! A call that finds no other small call in flight and the thread idle
//! (one connection, or a quiet moment) is not handed over at all: its HTTP
//! task runs the same round at once, on its own thread ([`IngestQueue::call`]).
//! There is nothing to group it with, and the hand-over would cost two
//! thread wake-ups of the ~100 us such a call takes; the round blocks that
//! tokio worker for one commit, only while nothing else is in flight.
//! Only when the runtime has another worker, or the call's connection is
//! the only one open: with a single worker (a server given one CPU),
//! blocking it would stop every other connection from being read
//! meanwhile, so every call would find itself alone and commit alone
//! (about 4,000 calls/s at 64 connections, against 24,000-38,000 handed
//! over).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};

use super::order::Held;
use super::parse::{self, Framing, ParseError};
use super::{IngestAnswer, Prefer, Service, ServiceError};

/// Calls taken per round (one commit when nothing else commits).
const MAX_ROUND: usize = 512;

/// Why a queued call was refused.
#[derive(Debug)]
pub enum IngestError {
    /// The body is not a valid delivery or batch.
    Parse(ParseError),
    /// The service refused or failed it; `batch` says whether the body was
    /// a batch (its errors name the delivery).
    Service {
        /// What went wrong.
        error: ServiceError,
        /// Whether the body was a batch.
        batch: bool,
    },
}

/// A call for the ingest thread.
pub struct IngestJob {
    /// The body as received.
    pub body: Box<dyn AsRef<[u8]> + Send>,
    /// Its framing.
    pub framing: Framing,
    /// How much of the answer the caller asks for.
    pub prefer: Prefer,
    /// Where the answer goes.
    pub done: tokio::sync::oneshot::Sender<Result<IngestAnswer, IngestError>>,
}

/// Hands calls to the ingest thread (or runs them at once, see
/// [`IngestQueue::call`]).
#[derive(Clone)]
pub struct IngestQueue {
    tx: Sender<IngestJob>,
    rounds: Arc<Rounds>,
    /// Whether a call alone in flight may run in place whatever the
    /// connections: the runtime has another worker to read them meanwhile.
    in_place: bool,
}

/// What the ingest thread and the calls run in place share.
#[derive(Default)]
struct Rounds {
    /// Held for each round, by the thread or by a call run in place: one
    /// round at a time, in the order they take it.
    running: Mutex<()>,
    /// Small calls between [`IngestQueue::call`]'s start and its answer.
    in_flight: AtomicUsize,
}

impl Rounds {
    fn lock(&self) -> MutexGuard<'_, ()> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn try_lock(&self) -> Option<MutexGuard<'_, ()>> {
        match self.running.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// One call counted in [`Rounds::in_flight`] until dropped.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What became of a call given to [`IngestQueue::call`].
pub enum Called {
    /// Applied and committed, or refused.
    Answered(Result<IngestAnswer, IngestError>),
    /// Not taken: the ingest thread has ended (nothing was applied; the
    /// caller takes another path).
    NotTaken,
    /// Taken, but the answer was lost (a failure inside the round).
    Lost,
}

impl IngestQueue {
    /// Applies and commits a small call. When it is the only small call in
    /// flight, no round is running, and the runtime has another worker or
    /// `lone` (the caller's connection is the only one open), it runs here
    /// and now, on the caller's thread (for the one-connection shape: no
    /// hand-over, one commit); otherwise the ingest thread takes it with the calls
    /// queued beside it, and this waits for the answer.
    pub async fn call(
        &self,
        svc: &Service,
        body: Box<dyn AsRef<[u8]> + Send>,
        framing: Framing,
        prefer: Prefer,
        lone: bool,
    ) -> Called {
        let first = self.rounds.in_flight.fetch_add(1, Ordering::AcqRel) == 0;
        let alone = first && (self.in_place || lone);
        let _in_flight = InFlight(&self.rounds.in_flight);
        let (done, answered) = tokio::sync::oneshot::channel();
        let job = IngestJob {
            body,
            framing,
            prefer,
            done,
        };
        let queued = {
            match alone.then(|| self.rounds.try_lock()).flatten() {
                Some(running) => {
                    round(svc, vec![job]);
                    drop(running);
                    true
                }
                None => self.tx.send(job).is_ok(),
            }
        };
        if !queued {
            return Called::NotTaken;
        }
        match answered.await {
            Ok(r) => Called::Answered(r),
            Err(_) => Called::Lost,
        }
    }
}

impl Service {
    /// Starts the ingest thread (it ends when every [`IngestQueue`] is
    /// dropped, or with the service).
    pub fn start_ingest_thread(self: &Arc<Self>) -> std::io::Result<IngestQueue> {
        let (tx, rx) = mpsc::channel();
        let svc = Arc::downgrade(self);
        let rounds = Arc::new(Rounds::default());
        let shared = rounds.clone();
        std::thread::Builder::new()
            .name("ingest".into())
            .spawn(move || run(svc, rx, &shared))?;
        // Outside a runtime (no worker to block), every call is handed over.
        let in_place =
            tokio::runtime::Handle::try_current().is_ok_and(|h| h.metrics().num_workers() >= 2);
        Ok(IngestQueue {
            tx,
            rounds,
            in_place,
        })
    }
}

fn run(svc: Weak<Service>, rx: Receiver<IngestJob>, rounds: &Rounds) {
    while let Ok(first) = rx.recv() {
        // After a round run in place, the calls queued meanwhile.
        let running = rounds.lock();
        let mut jobs = vec![first];
        while jobs.len() < MAX_ROUND {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let Some(svc) = svc.upgrade() else {
            return;
        };
        round(&svc, jobs);
        drop(running);
    }
}

/// Applies every job in one turn of the engines lock, hands them all to
/// the commit queue, then commits them (one group when nothing else is
/// committing) and answers each. Between handing a call over and leading
/// its commit the thread takes no lock that a reader settling the engines
/// could hold.
fn round(svc: &Service, jobs: Vec<IngestJob>) {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let at = &mut Held::entry();
    // The bodies stay here while the commands borrow from them.
    let (bodies, rest): (Vec<_>, Vec<_>) = jobs
        .into_iter()
        .map(|j| (j.body, (j.framing, j.prefer, j.done)))
        .unzip();
    let mut cmds = Vec::with_capacity(bodies.len());
    let mut waiting = Vec::with_capacity(bodies.len());
    for (body, (framing, prefer, done)) in bodies.iter().zip(rest) {
        let raw = (**body).as_ref();
        // Parsed and made into a command, without a lock.
        let made = catch_unwind(AssertUnwindSafe(|| {
            let parsed = parse::deliveries(raw, framing).map_err(IngestError::Parse)?;
            let batch = parsed.batch;
            svc.ingest_command(parsed.items, prefer)
                .map(|c| (c, batch))
                .map_err(|error| IngestError::Service { error, batch })
        }));
        match made {
            Ok(Ok(((cmd, stored, pending), batch))) => {
                cmds.push((cmd, stored));
                waiting.push((pending, batch, done));
            }
            Ok(Err(e)) => drop(done.send(Err(e))),
            Err(_) => drop(done.send(Err(internal()))),
        }
    }
    if cmds.is_empty() {
        return;
    }
    let Ok(applied) = catch_unwind(AssertUnwindSafe(|| svc.apply_all(at, cmds))) else {
        for (_, _, done) in waiting {
            let _ = done.send(Err(internal()));
        }
        return;
    };
    let mut prepared = Vec::with_capacity(waiting.len());
    for ((pending, batch, done), applied) in waiting.into_iter().zip(applied) {
        match applied.and_then(|a| svc.ingest_applied(at, pending, a)) {
            Ok(p) => prepared.push((p, batch, done)),
            Err(error) => drop(done.send(Err(IngestError::Service { error, batch }))),
        }
    }
    svc.lead(at);
    for (p, _, _) in &mut prepared {
        p.write_answer();
    }
    for (p, batch, done) in prepared {
        let r = catch_unwind(AssertUnwindSafe(|| svc.ingest_finish(at, p)));
        // A caller that went away (its connection closed) is not waited for.
        let _ = done.send(match r {
            Ok(r) => r.map_err(|error| IngestError::Service { error, batch }),
            Err(_) => Err(internal()),
        });
    }
}

fn internal() -> IngestError {
    IngestError::Service {
        error: ServiceError::Unavailable("internal failure; nothing was applied".into()),
        batch: false,
    }
}
