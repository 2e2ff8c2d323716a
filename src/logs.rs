//! Where the server's log lines go: stderr, with the access lines batched.
//!
//! Every request logs one access line (`streamforge::access`). Written one
//! by one, each line was a `write` system call on the request's thread:
//! with the line's formatting, 13% of the server's CPU per single-event
//! request at 64 connections (BENCHMARKS.md, "Issue 35, eleventh pass").
//! So access lines are appended to a buffer in memory, which reaches
//! stderr in one write once it holds [`FLUSH_BYTES`], or [`FLUSH_AFTER`]
//! after its first line, whichever comes first: the `buffer=` and `flush=`
//! of nginx's `access_log`.
//!
//! When the log has no colours (a file or a pipe), access lines are also
//! formatted here ([`access_line`]), in the formatter's exact format,
//! without the cost of its general machinery.
//!
//! Every other line (start-up, checkpoints, warnings, errors) is written
//! at once, after whatever access lines wait before it, so the log keeps
//! the order in which lines were made. The buffer is also written out when
//! the server stops ([`Logs::flush`]) and before a panic's message.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// The target whose lines are batched.
pub const ACCESS_TARGET: &str = "streamforge::access";
/// Buffered access lines are written once they hold this many bytes.
pub const FLUSH_BYTES: usize = 64 << 10;
/// ... or once the oldest of them waited this long.
pub const FLUSH_AFTER: Duration = Duration::from_millis(100);

/// The lines waiting, and the flusher's wake-up.
struct Shared<W> {
    state: Mutex<State<W>>,
    /// Signalled when the buffer gets its first line.
    filled: Condvar,
}

struct State<W> {
    out: W,
    pending: Vec<u8>,
}

impl<W: Write> State<W> {
    /// Writes the waiting lines out. A failing stderr loses them: there is
    /// nowhere else to report it.
    fn drain(&mut self) {
        if !self.pending.is_empty() {
            let _ = self.out.write_all(&self.pending);
            let _ = self.out.flush();
            self.pending.clear();
        }
    }
}

/// The log's writer (a [`MakeWriter`] for `tracing_subscriber::fmt`).
/// Clones share one buffer.
pub struct Logs<W: Write + Send + 'static = io::Stderr> {
    shared: Arc<Shared<W>>,
}

impl<W: Write + Send + 'static> Clone for Logs<W> {
    fn clone(&self) -> Self {
        Logs {
            shared: self.shared.clone(),
        }
    }
}

impl Logs<io::Stderr> {
    /// Logs to stderr, with the flusher thread started.
    pub fn stderr() -> io::Result<Logs<io::Stderr>> {
        Logs::start(io::stderr(), FLUSH_AFTER)
    }
}

impl<W: Write + Send + 'static> Logs<W> {
    /// Logs to `out`; buffered lines wait at most `after`. Starts the
    /// flusher thread, which ends when the last clone is dropped.
    pub fn start(out: W, after: Duration) -> io::Result<Logs<W>> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                out,
                pending: Vec::new(),
            }),
            filled: Condvar::new(),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("log-flush".into())
            .spawn(move || flusher(weak, after))?;
        Ok(Logs { shared })
    }

    fn lock(&self) -> MutexGuard<'_, State<W>> {
        // A thread that panicked while writing a line left the buffer whole.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends to the waiting lines with `add`; writes them out once they
    /// reach [`FLUSH_BYTES`], wakes the flusher for a first line.
    fn buffer(&self, add: impl FnOnce(&mut Vec<u8>)) {
        let mut state = self.lock();
        let first = state.pending.is_empty();
        add(&mut state.pending);
        if state.pending.len() >= FLUSH_BYTES {
            state.drain();
        } else if first {
            self.shared.filled.notify_one();
        }
    }

    /// Writes the waiting access lines out now.
    pub fn flush(&self) {
        self.lock().drain();
    }

    /// Writes the waiting lines out before a panic's message (which the
    /// default hook writes straight to stderr).
    pub fn flush_on_panic(&self) {
        let logs = self.clone();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // Never wait for a lock a panicking writer may hold.
            if let Ok(mut state) = logs.shared.state.try_lock() {
                state.drain();
            }
            previous(info);
        }));
    }
}

/// Writes the buffer out [`FLUSH_AFTER`] after it got its first line;
/// waits while it is empty (waking once a second to see whether the
/// writer is gone).
fn flusher<W: Write + Send + 'static>(shared: std::sync::Weak<Shared<W>>, after: Duration) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        {
            let state = s.state.lock().unwrap_or_else(PoisonError::into_inner);
            // Woken by the first line; a timeout lets a dropped writer end
            // this thread.
            let (state, _) = s
                .filled
                .wait_timeout_while(state, Duration::from_secs(1), |st| st.pending.is_empty())
                .unwrap_or_else(PoisonError::into_inner);
            if state.pending.is_empty() {
                continue;
            }
        }
        drop(s);
        // Lines gather meanwhile.
        std::thread::sleep(after);
        let Some(s) = shared.upgrade() else { return };
        s.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain();
    }
}

/// The log that access lines go to directly ([`access_line`]), once
/// [`Logs::take_access_lines`] made it so.
static ACCESS: std::sync::OnceLock<Logs<io::Stderr>> = std::sync::OnceLock::new();

impl Logs<io::Stderr> {
    /// Access lines are written by [`access_line`] from now on, formatted
    /// here as the log's formatter (`tracing_subscriber::fmt`, colours off)
    /// formats them, without the formatter's general machinery: that was
    /// 2.5 us per request, 15% of a `GET /healthz` at 64 connections
    /// (BENCHMARKS.md, "Issue 35, eleventh pass"). Only for a log without
    /// colours (a file or a pipe, never a terminal).
    pub fn take_access_lines(&self) {
        let _ = ACCESS.set(self.clone());
    }
}

/// Writes one access line as
/// `tracing::info!(target: "streamforge::access", %method, path = %path,
/// status, ms, "request")` would appear in the log, if the log takes them
/// ([`Logs::take_access_lines`]); false otherwise (the caller logs the
/// event through `tracing`). The caller has checked that the log's filter
/// lets access lines through.
pub fn access_line(method: &str, path: &str, status: u16, ms: f64) -> bool {
    let Some(logs) = ACCESS.get() else {
        return false;
    };
    let now = std::time::SystemTime::now();
    logs.buffer(|out| write_access(out, now, method, path, status, ms));
    true
}

/// Appends the access line [`access_line`] writes.
fn write_access(
    out: &mut Vec<u8>,
    now: std::time::SystemTime,
    method: &str,
    path: &str,
    status: u16,
    ms: f64,
) {
    timestamp(now, out);
    out.extend_from_slice(b"  INFO ");
    out.extend_from_slice(ACCESS_TARGET.as_bytes());
    out.extend_from_slice(b": request method=");
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(b" path=");
    out.extend_from_slice(path.as_bytes());
    let _ = write!(out, " status={status} ms={ms:?}");
    out.push(b'\n');
}

/// `time` as the log's formatter writes it (RFC 3339, UTC, microseconds:
/// `2026-12-06T18:22:13.202442Z`); the date and time of day of the same
/// second are formatted once per thread.
fn timestamp(time: std::time::SystemTime, out: &mut Vec<u8>) {
    use std::cell::Cell;
    thread_local! {
        static SECOND: Cell<(u64, [u8; 20])> = const { Cell::new((u64::MAX, [0; 20])) };
    }
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (secs, micros) = (since.as_secs(), since.subsec_micros());
    let (cached, mut prefix) = SECOND.get();
    if cached != secs {
        prefix = date_time(secs);
        SECOND.set((secs, prefix));
    }
    out.extend_from_slice(&prefix);
    let mut digits = [b'0'; 6];
    let mut m = micros;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (m % 10) as u8;
        m /= 10;
    }
    out.extend_from_slice(&digits);
    out.push(b'Z');
}

/// `YYYY-MM-DDTHH:MM:SS.` of a second since the epoch (years 1970-9999).
fn date_time(secs: u64) -> [u8; 20] {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = streamforge_store::civil_from_days(days as i64);
    let mut out = [0u8; 20];
    let mut w = &mut out[..];
    let _ = write!(
        w,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    out
}

/// One line's writer: buffered (an access line) or direct.
pub struct Line<'a, W: Write + Send + 'static> {
    logs: &'a Logs<W>,
    buffered: bool,
}

impl<W: Write + Send + 'static> Write for Line<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.buffered {
            self.logs.buffer(|pending| pending.extend_from_slice(buf));
            Ok(())
        } else {
            let mut state = self.logs.lock();
            // The access lines made before this line go first.
            state.drain();
            state.out.write_all(buf)?;
            state.out.flush()
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a, W: Write + Send + 'static> MakeWriter<'a> for Logs<W> {
    type Writer = Line<'a, W>;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            logs: self,
            buffered: false,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        Line {
            logs: self,
            buffered: meta.target() == ACCESS_TARGET,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A `Write` whose bytes the test can read, counting the writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut s = self.0.lock().unwrap();
            s.0.extend_from_slice(buf);
            s.1 += 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().0.clone()).unwrap()
        }
        fn writes(&self) -> usize {
            self.0.lock().unwrap().1
        }
    }

    fn line(logs: &Logs<Sink>, access: bool, text: &str) {
        let mut w = Line {
            logs,
            buffered: access,
        };
        w.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn access_lines_wait_and_leave_in_one_write_other_lines_keep_their_place() {
        let sink = Sink::default();
        // A flush delay no test run reaches: only the other line and
        // `flush` write the buffer out here.
        let logs = Logs::start(sink.clone(), Duration::from_secs(3600)).unwrap();
        line(&logs, true, "a1\n");
        line(&logs, true, "a2\n");
        assert_eq!(sink.text(), "", "access lines wait");
        line(&logs, false, "warn\n");
        assert_eq!(sink.text(), "a1\na2\nwarn\n");
        line(&logs, true, "a3\n");
        assert_eq!(sink.text(), "a1\na2\nwarn\n");
        logs.flush();
        assert_eq!(sink.text(), "a1\na2\nwarn\na3\n");
        // a1 and a2 in one write, then warn, then a3
        assert_eq!(sink.writes(), 3);
    }

    #[test]
    fn a_full_buffer_is_written_at_once() {
        let sink = Sink::default();
        let logs = Logs::start(sink.clone(), Duration::from_secs(3600)).unwrap();
        let l = "x".repeat(1000) + "\n";
        let n = FLUSH_BYTES / l.len() + 1;
        for _ in 0..n {
            line(&logs, true, &l);
        }
        assert_eq!(sink.text().len(), n * l.len());
        assert_eq!(sink.writes(), 1);
    }

    #[test]
    fn time_stamps_are_the_formatters() {
        let at = |secs: u64, micros: u32| {
            let mut out = Vec::new();
            let t = std::time::UNIX_EPOCH
                + Duration::from_secs(secs)
                + Duration::from_micros(u64::from(micros));
            timestamp(t, &mut out);
            String::from_utf8(out).unwrap()
        };
        // expected values from Python's datetime
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 7), "2000-02-29T00:00:00.000007Z");
        assert_eq!(at(1_709_164_800, 999_999), "2024-02-29T00:00:00.999999Z");
        assert_eq!(at(1_796_581_333, 202_442), "2026-12-06T18:22:13.202442Z");
        assert_eq!(at(1_234_567_890, 10), "2009-02-13T23:31:30.000010Z");
        assert_eq!(at(4_102_444_799, 500_000), "2099-12-31T23:59:59.500000Z");
        // the same second again (the cached prefix), then the next
        assert_eq!(at(1_796_581_333, 1), "2026-12-06T18:22:13.000001Z");
        assert_eq!(at(1_796_581_334, 0), "2026-12-06T18:22:14.000000Z");
    }

    /// The direct line is, after its time stamp, byte for byte what the
    /// `tracing` event gives through the log's formatter (colours off).
    #[test]
    fn a_direct_access_line_is_the_formatters_line() {
        let sink = Sink::default();
        let logs = Logs::start(sink.clone(), Duration::from_secs(3600)).unwrap();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(logs.clone())
            .finish();
        let method = axum::http::Method::POST;
        let path = "/ingest/st ripe";
        let (status, ms) = (409u16, 0.125f64);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "streamforge::access", %method, path = %path, status, ms, "request");
        });
        logs.flush();
        let via_tracing = sink.text();
        let mut direct = Vec::new();
        write_access(
            &mut direct,
            std::time::SystemTime::now(),
            method.as_str(),
            path,
            status,
            ms,
        );
        // the time stamps differ (made at different moments), not their
        // length; the rest is the same bytes
        let stamp = "2026-12-06T18:22:13.202442Z".len();
        assert_eq!(via_tracing.len(), direct.len(), "{via_tracing}");
        assert_eq!(
            via_tracing.as_bytes()[stamp..],
            direct[stamp..],
            "{via_tracing}"
        );
        assert_eq!(via_tracing.as_bytes()[stamp - 1], b'Z');
    }

    #[test]
    fn the_flusher_writes_waiting_lines_out_by_itself() {
        let sink = Sink::default();
        let logs = Logs::start(sink.clone(), Duration::from_millis(20)).unwrap();
        line(&logs, true, "a1\n");
        let deadline = Instant::now() + Duration::from_secs(30);
        while sink.text().is_empty() {
            assert!(Instant::now() < deadline, "the line never left");
            std::thread::yield_now();
        }
        assert_eq!(sink.text(), "a1\n");
    }
}
