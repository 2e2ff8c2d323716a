//! The ingest thread: small `POST /events` calls (one event per request,
//! the webhook producers' shape) are handed once, from the HTTP task, to a
//! thread of their own, which applies every call it has, commits them all
//! in one transaction and answers each (a oneshot wakes its task).
//!
//! The same write path as every other call (`ingest_command`, `apply_all`
//! and `ingest_applied`: the
//! turnstile, the processor lock, the commit queue; `ingest_finish`: the
//! group commit), only without a blocking-pool thread per call, a lock
//! hand-over between callers and a wake-up per commit: under load the
//! thread takes the calls queued while it committed, and they form the
//! next group. Large bodies still go through the blocking pool, where
//! their parsing runs on every core.

use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Weak};

use super::order::Held;
use super::parse::{self, Framing, ParseError};
use super::{IngestAnswer, Reply, Service, ServiceError};

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
    /// What the caller wants back.
    pub reply: Reply,
    /// Where the answer goes.
    pub done: tokio::sync::oneshot::Sender<Result<IngestAnswer, IngestError>>,
}

/// Hands calls to the ingest thread.
#[derive(Clone)]
pub struct IngestQueue {
    tx: Sender<IngestJob>,
}

impl IngestQueue {
    /// Queues `job`; gives it back when the thread has ended.
    pub fn send(&self, job: IngestJob) -> Result<(), IngestJob> {
        self.tx.send(job).map_err(|e| e.0)
    }
}

impl Service {
    /// Starts the ingest thread (it ends when every [`IngestQueue`] is
    /// dropped, or with the service).
    pub fn start_ingest_thread(self: &Arc<Self>) -> std::io::Result<IngestQueue> {
        let (tx, rx) = mpsc::channel();
        let svc = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("ingest".into())
            .spawn(move || run(svc, rx))?;
        Ok(IngestQueue { tx })
    }
}

fn run(svc: Weak<Service>, rx: Receiver<IngestJob>) {
    while let Ok(first) = rx.recv() {
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
    }
}

/// Applies every job in one turn of the processor lock, hands them all to
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
        .map(|j| (j.body, (j.framing, j.reply, j.done)))
        .unzip();
    let mut cmds = Vec::with_capacity(bodies.len());
    let mut waiting = Vec::with_capacity(bodies.len());
    for (body, (framing, reply, done)) in bodies.iter().zip(rest) {
        let raw = (**body).as_ref();
        // Parsed and made into a command, without a lock.
        let made = catch_unwind(AssertUnwindSafe(|| {
            let parsed = parse::deliveries(raw, framing).map_err(IngestError::Parse)?;
            let batch = parsed.batch;
            svc.ingest_command(raw, framing, parsed.items, reply)
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
