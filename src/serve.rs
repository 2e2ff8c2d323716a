//! The accept loop: `axum::serve`, with each connection's task kept from
//! rescheduling itself.
//!
//! hyper wakes a connection's own task while it runs it: the request body,
//! once read by the handler, signals the connection. tokio then reschedules
//! the task as a yield once the poll returns, and a yield wakes an idle
//! worker thread (a futex wake, a context switch, a search for work and a
//! park again) for nothing: the same thread polls the task again at once.
//! That was on every request; at one connection the sibling's wake-ups were
//! 6-7% of the server's CPU (BENCHMARKS.md, "Issue 35, sixth pass").
//!
//! So each connection runs inside [`Inline`]: a wake that arrives while the
//! connection is being polled is noted, and the connection is polled again
//! before the poll returns, instead of being handed to the scheduler. A
//! wake that arrives between polls (the socket, a commit's answer) goes to
//! the task as usual.
//!
//! Everything else is `axum::serve`'s (axum 0.8): HTTP/1.1 with upgrades
//! through hyper-util's builder, accept errors skipped (a second's pause for
//! those that are not the peer's), and graceful shutdown: once `signal`
//! completes nothing more is accepted, every connection finishes the
//! request in flight and closes, and [`serve`] returns when the last one
//! has.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use atomic_waker::AtomicWaker;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt as _;

/// Polls per poll of the task at most: past it, a connection that keeps
/// waking itself is rescheduled (other tasks get their turn).
const MAX_REPOLLS: usize = 8;

/// Serves `app` on `listener` until `signal` completes and every
/// connection has ended.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    signal: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    // Closed (every receiver dropped) once the signal came: each
    // connection then finishes its request in flight and closes.
    let (signal_tx, signal_rx) = watch::channel(());
    tokio::spawn(async move {
        signal.await;
        drop(signal_rx);
    });
    // Every connection task holds a receiver; `closed` says they all ended.
    let (close_tx, close_rx) = watch::channel(());
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            _ = signal_tx.closed() => break,
        };
        let app = app.clone();
        let signal_tx = signal_tx.clone();
        let close_rx = close_rx.clone();
        let open = Open::new();
        tokio::spawn(Inline::new(async move {
            connection(stream, app, &signal_tx).await;
            drop((close_rx, open));
        }));
    }
    drop(listener);
    drop(close_rx);
    close_tx.closed().await;
    Ok(())
}

/// Connections open in this process (accepted and not yet ended).
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// How many connections this process serves right now. A handler whose
/// connection is the only one knows no other request can be waiting to
/// be read (the ingest thread's in-place rule on a runtime of one
/// worker).
pub fn open_connections() -> usize {
    OPEN.load(Ordering::Relaxed)
}

/// One open connection, counted in [`OPEN`] until dropped.
struct Open;

impl Open {
    fn new() -> Open {
        OPEN.fetch_add(1, Ordering::Relaxed);
        Open
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one connection until it ends; once the shutdown signal came, it
/// ends after the request in flight.
async fn connection(stream: TcpStream, app: Router, signal_tx: &watch::Sender<()>) {
    let service = app.map_request(|req: axum::http::Request<hyper::body::Incoming>| {
        req.map(axum::body::Body::new)
    });
    let builder = Builder::new(TokioExecutor::new());
    let conn = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service));
    let mut conn = std::pin::pin!(conn);
    let mut signal_closed = std::pin::pin!(signal_tx.closed());
    let mut signalled = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::trace!(error = %e, "connection ended with an error");
                }
                break;
            }
            _ = &mut signal_closed, if !signalled => {
                signalled = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// What `axum::serve` does when `accept` fails: the peer's errors are
/// skipped; anything else (out of file descriptors) waits a second before
/// the next try.
async fn accept_failed(e: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
}

/// Not being polled.
const IDLE: u8 = 0;
/// Being polled, not woken meanwhile.
const POLLING: u8 = 1;
/// Being polled, and woken meanwhile: poll again.
const WOKEN: u8 = 2;

/// A future whose wakes during its own poll make it poll again at once
/// (see the module docs).
pub struct Inline<F> {
    future: Pin<Box<F>>,
    waker: Arc<InlineWaker>,
    as_waker: Waker,
}

/// The waker an [`Inline`] future's inner future sees.
struct InlineWaker {
    state: AtomicU8,
    /// The task's waker, registered by each poll (taken by a wake).
    task: AtomicWaker,
}

impl Wake for InlineWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // During a poll, the poll sees it (and polls again); otherwise the
        // task is woken.
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) | Err(WOKEN) => {}
            Err(_) => self.task.wake(),
        }
    }
}

impl<F: Future<Output = ()>> Inline<F> {
    /// Wraps `future`.
    pub fn new(future: F) -> Inline<F> {
        let waker = Arc::new(InlineWaker {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        Inline {
            future: Box::pin(future),
            as_waker: Waker::from(waker.clone()),
            waker,
        }
    }
}

impl<F: Future<Output = ()>> Future for Inline<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        this.waker.task.register(cx.waker());
        let mut inner = Context::from_waker(&this.as_waker);
        for _ in 0..MAX_REPOLLS {
            this.waker.state.store(POLLING, Ordering::Release);
            if this.future.as_mut().poll(&mut inner).is_ready() {
                this.waker.state.store(IDLE, Ordering::Release);
                return Poll::Ready(());
            }
            // Not woken meanwhile: wait for the next wake, which goes to
            // the task.
            if this
                .waker
                .state
                .compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
        }
        // Woken during every poll: let the scheduler run others first.
        this.waker.state.store(IDLE, Ordering::Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    /// Counts the wakes of the task it is polled in.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A future that wakes itself `n` times during its polls, then is
    /// ready; counts its polls.
    struct SelfWaking {
        left: usize,
        polls: Arc<AtomicUsize>,
        saved: Arc<Mutex<Option<Waker>>>,
    }

    impl Future for SelfWaking {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            *self.saved.lock().unwrap() = Some(cx.waker().clone());
            if self.left == 0 {
                return Poll::Ready(());
            }
            self.left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn setup(
        n: usize,
    ) -> (
        Inline<SelfWaking>,
        Arc<AtomicUsize>,
        Arc<Mutex<Option<Waker>>>,
    ) {
        let polls = Arc::new(AtomicUsize::new(0));
        let saved = Arc::new(Mutex::new(None));
        let f = SelfWaking {
            left: n,
            polls: polls.clone(),
            saved: saved.clone(),
        };
        (Inline::new(f), polls, saved)
    }

    #[test]
    fn wakes_during_a_poll_poll_again_without_waking_the_task() {
        let task = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let (mut f, polls, _) = setup(3);
        assert!(Pin::new(&mut f).poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 4);
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_future_that_always_wakes_itself_yields_to_the_scheduler() {
        let task = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let (mut f, polls, _) = setup(100);
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), MAX_REPOLLS);
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_wake_between_polls_wakes_the_task() {
        /// Pending until woken from outside, then ready.
        struct Waits {
            saved: Arc<Mutex<Option<Waker>>>,
            woken: Arc<std::sync::atomic::AtomicBool>,
        }
        impl Future for Waits {
            type Output = ();
            fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                if self.woken.load(Ordering::SeqCst) {
                    return Poll::Ready(());
                }
                *self.saved.lock().unwrap() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
        let task = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let saved = Arc::new(Mutex::new(None));
        let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut f = Inline::new(Waits {
            saved: saved.clone(),
            woken: woken.clone(),
        });
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
        // From another thread, as a socket's readiness or a commit's answer.
        let inner = saved.lock().unwrap().clone().unwrap();
        woken.store(true, Ordering::SeqCst);
        std::thread::spawn(move || inner.wake()).join().unwrap();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert!(Pin::new(&mut f).poll(&mut cx).is_ready());
    }
}
