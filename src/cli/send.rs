//! `streamforge send FILE|-`: replays an NDJSON file of operations.
//!
//! The format is the one `benches/gen_workload.py` writes, one
//! operation per line, sent strictly in file order, one call at a time,
//! while the next lines are read and checked (with `--lanes N`, each
//! partition's operations in file order, up to N partitions side by side:
//! [`Lanes`]):
//! - `{"op":"deliver","partition":"p0","offset":0,"event":{...}}`, or a bare
//!   Delivery without `"op"`: consecutive deliveries are batched (`--batch`)
//!   and POSTed to `/events` as NDJSON, with `"op"` stripped (the server
//!   rejects unknown fields). An omitted offset is append mode.
//! - `{"op":"advance","partition":"p0","watermark":100}`: the advance lines
//!   after a batch of deliveries go with it as one `POST /batch` (one commit
//!   instead of two); consecutive advance lines without deliveries before
//!   them as one `POST /watermarks/batch` (one alone as `POST /watermarks`).
//! - `{"op":"idle","partition":"p0"}`: `POST /partitions/p0/idle`.
//!
//! Blank lines are skipped. Lines are checked before they are sent: a bad line
//! stops the run after everything before it was sent. A rejected batch is
//! applied not at all (batches are atomic), and the error names the file line
//! of the failing delivery.
//!
//! The file walk, the batches, the error wording and the progress bar are
//! shared with `patterns send` (src/cli/patterns_send.rs) through [`Replay`] and
//! [`replay`].

use std::collections::HashMap;
use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Deserializer};

use super::batch::{batch_error, Batch, Wording};
use super::http::{parse, Api, CallError};
use super::wire::{Advance, Ingested, TickCount};
use crate::engine::{Delivery, Event};

/// One input line as written by the workload generator.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(default)]
    op: Option<Kind>,
    partition: String,
    #[serde(default, deserialize_with = "present_offset")]
    offset: Option<i64>,
    #[serde(default)]
    event: Option<Event>,
    #[serde(default, deserialize_with = "present_watermark")]
    watermark: Option<i64>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Deliver,
    Advance,
    Idle,
}

/// A present field must hold an integer (`null` is refused, `-0` is 0: the
/// server's rules and words).
fn present_offset<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    crate::canonical::strict::int_field(d, "offset").map(Some)
}

/// As [`present_offset`], for `watermark`.
fn present_watermark<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    crate::canonical::strict::int_field(d, "watermark").map(Some)
}

/// One checked operation.
enum Operation {
    /// A delivery's JSON text, as `POST /events` reads it, and its partition.
    Deliver {
        partition: String,
        json: Vec<u8>,
    },
    Advance {
        partition: String,
        watermark: i64,
    },
    Idle(String),
    /// Consecutive deliveries of one lane, put together by the reader
    /// (while the lane's call is in flight) and handed over at once.
    Run(Batch),
}

/// The generator's delivery lines start so.
const DELIVER_OP: &str = r#"{"op":"deliver","#;

fn parse_line(text: &str) -> Result<Operation, String> {
    // The common line, `{"op":"deliver",...}` or a bare delivery in plain
    // form: checked by the server's own fast path and forwarded as it is
    // (without `"op"`), not parsed into owned values and written again.
    let bare = match text.strip_prefix(DELIVER_OP) {
        Some(rest) => {
            let mut json = Vec::with_capacity(rest.len() + 1);
            json.push(b'{');
            json.extend_from_slice(rest.as_bytes());
            json
        }
        None => text.as_bytes().to_vec(),
    };
    if let Some(d) = crate::service::fastparse::one(&bare) {
        return Ok(Operation::Deliver {
            partition: d.partition.into_owned(),
            json: bare,
        });
    }
    let l: Line = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let forbid = |field: &str, present: bool, op: &str| {
        if present {
            Err(format!("an {op:?} line has no {field:?} field"))
        } else {
            Ok(())
        }
    };
    match l.op.unwrap_or(Kind::Deliver) {
        Kind::Deliver => {
            forbid("watermark", l.watermark.is_some(), "deliver")?;
            let event = l
                .event
                .ok_or_else(|| "a delivery needs an \"event\"".to_string())?;
            let json = serde_json::to_vec(&Delivery {
                partition: l.partition.clone(),
                offset: l.offset,
                event,
            })
            .map_err(|e| e.to_string())?;
            Ok(Operation::Deliver {
                partition: l.partition,
                json,
            })
        }
        Kind::Advance => {
            forbid("offset", l.offset.is_some(), "advance")?;
            forbid("event", l.event.is_some(), "advance")?;
            let watermark = l
                .watermark
                .ok_or_else(|| "an advance needs a \"watermark\"".to_string())?;
            Ok(Operation::Advance {
                partition: l.partition,
                watermark,
            })
        }
        Kind::Idle => {
            forbid("offset", l.offset.is_some(), "idle")?;
            forbid("event", l.event.is_some(), "idle")?;
            forbid("watermark", l.watermark.is_some(), "idle")?;
            Ok(Operation::Idle(l.partition))
        }
    }
}

/// Counts for the final line.
#[derive(Default, Clone, Copy)]
struct Tally {
    deliveries: u64,
    batches: u64,
    advances: u64,
    idles: u64,
    changes: u64,
    late: u64,
}

/// What `send` says.
const DELIVERIES: Wording = Wording {
    item: "delivery",
    scope: "",
    advice: |_| "fix the cause and run send again".into(),
};

/// What `send` says when partitions go in parallel.
const LANE_DELIVERIES: Wording = Wording {
    scope: " of this partition",
    ..DELIVERIES
};

/// One file's operations as a [`replay`] sends them.
pub(super) trait Replay {
    /// Handles one non-blank line (its text trimmed): `Ok(Err(why))` for a
    /// line that is no operation (nothing of it was sent).
    fn line(
        &mut self,
        line_no: u64,
        text: &str,
        progress: &Progress,
    ) -> anyhow::Result<Result<(), String>>;
    /// Sends what is still pending.
    fn flush(&mut self, progress: &Progress) -> anyhow::Result<()>;
}

/// Sends one stream of operations strictly in order, one call at a time:
/// the whole file (the default) or one lane of partitions.
struct Sender<'a> {
    api: &'a Api,
    batch_size: usize,
    batch: Batch,
    /// Consecutive advance lines not sent yet: they go with the deliveries
    /// before them as one `POST /batch`, or without deliveries as one `POST
    /// /watermarks/batch` (one alone as `POST /watermarks`).
    advances: Vec<(u64, String, i64)>,
    /// The server has no `POST /batch` (an older one): deliveries and
    /// advances go in calls of their own.
    no_batch_route: bool,
    tally: Tally,
    wording: &'static Wording,
}

impl<'a> Sender<'a> {
    fn new(api: &'a Api, batch_size: usize, wording: &'static Wording) -> Sender<'a> {
        Sender {
            api,
            batch_size: batch_size.max(1),
            batch: Batch::default(),
            advances: Vec::new(),
            no_batch_route: false,
            tally: Tally::default(),
            wording,
        }
    }

    /// Handles one operation; the deliveries it sent. A full batch waits
    /// for the next line: the advances that follow it go in its call.
    fn op(&mut self, line_no: u64, op: Operation) -> anyhow::Result<u64> {
        match op {
            Operation::Deliver { json, .. } => {
                let mut run = Batch::default();
                run.add(line_no, &json);
                self.op(line_no, Operation::Run(run))
            }
            Operation::Run(run) => {
                let sent = if !self.advances.is_empty()
                    || (self.batch.len() > 0 && self.batch.len() + run.len() > self.batch_size)
                {
                    self.flush()?
                } else {
                    0
                };
                self.batch.append(run);
                Ok(sent)
            }
            Operation::Advance {
                partition,
                watermark,
            } => {
                // Consecutive advances go together, after the deliveries
                // before them (the same effect as one by one).
                self.advances.push((line_no, partition, watermark));
                if self.advances.len() >= self.batch_size {
                    return self.flush();
                }
                Ok(0)
            }
            op => {
                let sent = self.flush()?;
                self.tick(line_no, &op)?;
                Ok(sent)
            }
        }
    }

    /// Sends whatever is pending: deliveries and the advances after them
    /// as one `POST /batch`, or either alone; the deliveries sent.
    fn flush(&mut self) -> anyhow::Result<u64> {
        if self.advances.is_empty() {
            return self.flush_deliveries();
        }
        if self.batch.len() == 0 || self.no_batch_route {
            let sent = self.flush_deliveries()?;
            self.flush_advances()?;
            return Ok(sent);
        }
        self.flush_batch()
    }

    /// Sends the pending deliveries and the advances after them as one
    /// atomic `POST /batch` (one commit on the server instead of two).
    /// When the server refuses an advance (an unknown partition: nothing
    /// was applied), or has no such route, they go as separate calls, which
    /// give the outcome and the error of sending the lines one by one.
    fn flush_batch(&mut self) -> anyhow::Result<u64> {
        let n = self.batch.len();
        let mut body = self.batch.body().to_vec();
        let mut lines = self.batch.lines.clone();
        for (line_no, partition, watermark) in &self.advances {
            body.push(b'\n');
            body.extend(serde_json::to_vec(&Advance {
                partition,
                watermark: *watermark,
            })?);
            lines.push(*line_no);
        }
        match self
            .api
            .post_text(&["batch"], "application/x-ndjson", Some(body))
        {
            Ok(answer) => {
                let done: Ingested = parse(&answer)
                    .with_context(|| format!("line {}: the answer to POST /batch", lines[0]))?;
                self.batch = Batch::default();
                self.tally.deliveries += n as u64;
                self.tally.batches += 1;
                self.tally.advances += std::mem::take(&mut self.advances).len() as u64;
                self.tally.changes += done.changes.0;
                self.tally.late += done.late.0;
                Ok(n as u64)
            }
            Err(CallError::Problem(p)) if p.index.is_some_and(|i| i >= n as u64) => {
                let sent = self.flush_deliveries()?;
                self.flush_advances()?;
                Ok(sent)
            }
            Err(CallError::Problem(p)) if p.index.is_none() && matches!(p.status, 404 | 405) => {
                self.no_batch_route = true;
                self.flush()
            }
            Err(CallError::Status {
                status: 404 | 405, ..
            }) => {
                self.no_batch_route = true;
                self.flush()
            }
            Err(e) => {
                let wording = Wording {
                    item: "delivery",
                    ..*self.wording
                };
                Err(batch_error(e, &lines, &wording))
            }
        }
    }

    /// Sends the pending advances: one alone as `POST /watermarks`, several
    /// as one atomic `POST /watermarks/batch`. When the server refuses the
    /// batch at its advance `i` (an unknown partition), the advances before
    /// `i` are sent again without it and the error names `i`'s line: the
    /// same outcome as sending the lines one by one.
    fn flush_advances(&mut self) -> anyhow::Result<()> {
        let mut pending = std::mem::take(&mut self.advances);
        while !pending.is_empty() {
            if let [(line_no, partition, watermark)] = &pending[..] {
                let op = Operation::Advance {
                    partition: partition.clone(),
                    watermark: *watermark,
                };
                self.tick(*line_no, &op)?;
                return Ok(());
            }
            let first = pending[0].0;
            let mut body = Vec::new();
            for (line_no, partition, watermark) in &pending {
                if *line_no != first {
                    body.push(b'\n');
                }
                body.extend(serde_json::to_vec(&Advance {
                    partition,
                    watermark: *watermark,
                })?);
            }
            let refused_at = match self.api.post_text(
                &["watermarks", "batch"],
                "application/x-ndjson",
                Some(body),
            ) {
                Ok(answer) => {
                    let ticked: TickCount = parse(&answer).with_context(|| {
                        format!("line {first}: the answer to POST /watermarks/batch")
                    })?;
                    self.tally.advances += pending.len() as u64;
                    self.tally.changes += ticked.changes.0;
                    return Ok(());
                }
                Err(CallError::Problem(p))
                    if p.index
                        .is_some_and(|i| i > 0 && (i as usize) < pending.len()) =>
                {
                    p.index.map_or(0, |i| i as usize)
                }
                Err(e) => {
                    let lines: Vec<u64> = pending.iter().map(|(l, ..)| *l).collect();
                    let wording = Wording {
                        item: "advance",
                        ..*self.wording
                    };
                    return Err(batch_error(e, &lines, &wording));
                }
            };
            // Those before the refused one, then the refused one alone (its
            // error is the one-by-one error); the later ones are not sent.
            let mut rest = pending.split_off(refused_at);
            self.advances = pending;
            self.flush_advances()?;
            rest.truncate(1);
            pending = rest;
        }
        Ok(())
    }

    /// Sends the pending batch of deliveries; the deliveries it held.
    fn flush_deliveries(&mut self) -> anyhow::Result<u64> {
        let first = self.batch.lines.first().copied().unwrap_or_default();
        let Some((answer, n)) = self.batch.post(self.api, &["events"], self.wording)? else {
            return Ok(0);
        };
        let ingested: Ingested =
            parse(&answer).with_context(|| format!("line {first}: the answer to POST /events"))?;
        self.tally.deliveries += n;
        self.tally.batches += 1;
        self.tally.changes += ingested.changes.0;
        self.tally.late += ingested.late.0;
        Ok(n)
    }

    /// An advance or idle call (nothing else pending).
    fn tick(&mut self, line_no: u64, op: &Operation) -> anyhow::Result<()> {
        let (answer, what) = match op {
            Operation::Advance {
                partition,
                watermark,
            } => {
                let body = serde_json::to_vec(&Advance {
                    partition,
                    watermark: *watermark,
                })?;
                self.tally.advances += 1;
                (
                    self.api
                        .post_text(&["watermarks"], "application/json", Some(body)),
                    "advance",
                )
            }
            Operation::Idle(p) => {
                self.tally.idles += 1;
                (
                    self.api.post_text(&["partitions", p, "idle"], "", None),
                    "idle",
                )
            }
            Operation::Deliver { .. } | Operation::Run(_) => {
                anyhow::bail!("line {line_no}: deliveries go in batches, not alone")
            }
        };
        let answer = answer.with_context(|| format!("line {line_no} ({what})"))?;
        let ticked: TickCount =
            parse(&answer).with_context(|| format!("line {line_no} ({what})"))?;
        self.tally.changes += ticked.changes.0;
        Ok(())
    }
}

/// The progress bar on stderr (hidden when stderr is not a terminal).
pub(super) struct Progress {
    bar: ProgressBar,
    started: Instant,
    /// Bytes read and not yet counted on the bar (it reads the clock on
    /// every count: counted per MiB, not per line).
    unread: std::cell::Cell<u64>,
    /// The events last shown (the message is written when they change).
    shown: std::cell::Cell<u64>,
}

impl Progress {
    fn new(total_bytes: Option<u64>) -> Progress {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = match total_bytes {
            Some(n) => {
                let bar = ProgressBar::with_draw_target(Some(n), target);
                bar.set_style(
                    ProgressStyle::with_template(
                        "{spinner} [{elapsed_precise}] {wide_bar} {percent:>3}% {msg} ETA {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar
            }
            None => {
                let bar = ProgressBar::with_draw_target(None, target);
                bar.set_style(
                    ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar
            }
        };
        bar.enable_steady_tick(Duration::from_millis(200));
        #[allow(clippy::disallowed_methods)] // the client measures its own throughput
        let started = Instant::now();
        Progress {
            bar,
            started,
            unread: Default::default(),
            shown: std::cell::Cell::new(u64::MAX),
        }
    }

    fn read(&self, bytes: u64) {
        let n = self.unread.get() + bytes;
        if n >= 1 << 20 {
            self.bar.inc(n);
            self.unread.set(0);
        } else {
            self.unread.set(n);
        }
    }

    /// Shows the events sent so far and their rate.
    pub(super) fn update(&self, events: u64) {
        if events == self.shown.get() {
            return;
        }
        self.shown.set(events);
        self.bar.inc(self.unread.take());
        self.bar.set_message(format!(
            "{events} events, {} events/s",
            rate(events, self.started.elapsed())
        ));
    }
}

/// Events per second, rounded.
pub(super) fn rate(events: u64, elapsed: Duration) -> u64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        (events as f64 / secs).round() as u64
    } else {
        0
    }
}

/// Reads `path` (`-`: standard input) line by line and hands each non-blank
/// line to `r`, in order, then flushes it. A line that is no operation stops
/// the run after everything before it was sent. Returns the file's name as
/// printed (`stdin` for `-`) and the time it took.
pub(super) fn replay(path: &Path, r: &mut impl Replay) -> anyhow::Result<(String, Duration)> {
    let stdin = path == Path::new("-");
    let (reader, total, shown): (Box<dyn Read>, Option<u64>, String) = if stdin {
        (Box::new(std::io::stdin().lock()), None, "stdin".into())
    } else {
        let f =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        // Without its size, the progress bar shows no total.
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(f), len, path.display().to_string())
    };
    let mut reader = BufReader::with_capacity(1 << 20, reader);
    let progress = Progress::new(total);
    let mut buf = String::new();
    let mut line_no = 0u64;
    let outcome = (|| -> anyhow::Result<()> {
        loop {
            buf.clear();
            let n = reader
                .read_line(&mut buf)
                .with_context(|| format!("reading {shown} after line {line_no}"))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            progress.read(n as u64);
            let text = buf.trim();
            if text.is_empty() {
                continue;
            }
            if let Err(e) = r.line(line_no, text, &progress)? {
                r.flush(&progress)?;
                anyhow::bail!(
                    "{shown} line {line_no}: {e}\n  everything before line {line_no} was sent"
                );
            }
        }
        r.flush(&progress)
    })();
    progress.bar.finish_and_clear();
    outcome?;
    Ok((shown, progress.started.elapsed()))
}

/// Partitions in parallel (`--lanes N`, N > 1): each partition's operations go,
/// in file order, to one lane, a thread that sends them one call at a time
/// like the default does; lanes run side by side. A partition always uses
/// the same lane (the first `lanes` partitions get one each, later ones
/// share them in turn), so every partition's calls keep the file's order;
/// only the interleaving across partitions differs from the file's.
///
/// The default in-order send is one lane for every partition: the calls are
/// the same, strictly in file order, but the file is read and parsed on the
/// calling thread while the lane's call is in flight.
struct Lanes<'scope, 'env> {
    scope: &'scope std::thread::Scope<'scope, 'env>,
    api: &'env Api,
    batch_size: usize,
    max: usize,
    /// Whether partitions go side by side (`--lanes N`, N > 1): the words
    /// of errors say so.
    parallel: bool,
    lane_of: HashMap<String, usize>,
    inboxes: Vec<SyncSender<(u64, Operation)>>,
    /// Each lane's deliveries read and not handed over yet: they go as one
    /// [`Operation::Run`] of up to `batch_size`, so the lane's thread takes
    /// a batch at once instead of line by line.
    runs: Vec<Batch>,
    handles: Vec<std::thread::ScopedJoinHandle<'scope, anyhow::Result<Tally>>>,
    shared: Arc<LaneShared>,
    /// The counts of the lanes that ended.
    total: Tally,
}

/// What the lanes share with the reader.
#[derive(Default)]
struct LaneShared {
    /// A lane failed: the others stop at their next call.
    failed: AtomicBool,
    /// Deliveries acknowledged, all lanes.
    delivered: AtomicU64,
}

impl<'scope, 'env> Lanes<'scope, 'env> {
    fn partition(op: &Operation) -> &str {
        match op {
            Operation::Deliver { partition, .. } => partition,
            Operation::Advance { partition, .. } => partition,
            Operation::Idle(p) => p,
            // (made by the reader after it chose the lane)
            Operation::Run(_) => "",
        }
    }

    /// The lane of `partition`, started if new.
    fn lane(&mut self, partition: &str) -> usize {
        if let Some(&l) = self.lane_of.get(partition) {
            return l;
        }
        let l = if self.inboxes.len() < self.max {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(u64, Operation)>(4096);
            let (api, batch_size, shared) = (self.api, self.batch_size, self.shared.clone());
            let name = partition.to_string();
            let parallel = self.parallel;
            self.handles.push(self.scope.spawn(move || {
                let wording = if parallel {
                    &LANE_DELIVERIES
                } else {
                    &DELIVERIES
                };
                let mut sender = Sender::new(api, batch_size, wording);
                let fail = |e: anyhow::Error| {
                    shared.failed.store(true, Ordering::SeqCst);
                    if parallel {
                        e.context(format!("partition {name} (and any sharing its lane)"))
                    } else {
                        e
                    }
                };
                for (line_no, op) in rx {
                    if shared.failed.load(Ordering::SeqCst) {
                        return Ok(sender.tally);
                    }
                    let n = sender.op(line_no, op).map_err(fail)?;
                    shared.delivered.fetch_add(n, Ordering::Relaxed);
                }
                if !shared.failed.load(Ordering::SeqCst) {
                    let n = sender.flush().map_err(fail)?;
                    shared.delivered.fetch_add(n, Ordering::Relaxed);
                }
                Ok(sender.tally)
            }));
            self.inboxes.push(tx);
            self.runs.push(Batch::default());
            self.inboxes.len() - 1
        } else {
            self.lane_of.len() % self.max
        };
        self.lane_of.insert(partition.to_string(), l);
        l
    }

    /// Closes the inboxes and waits for every lane, adding their counts to
    /// `total`; the first failure. Lanes are started again by the next
    /// operation, so it is only called at the end (or to report a failure).
    fn finish(&mut self) -> anyhow::Result<()> {
        for lane in 0..self.inboxes.len() {
            // (a lane that ended early reports its failure below)
            let _ = self.hand_run(lane);
        }
        self.inboxes.clear();
        self.runs.clear();
        self.lane_of.clear();
        let mut failure = None;
        for h in self.handles.drain(..) {
            match h.join() {
                Ok(Ok(t)) => self.total.add(&t),
                Ok(Err(e)) => {
                    failure.get_or_insert(e);
                }
                Err(_) => {
                    failure.get_or_insert(anyhow::anyhow!("a sending thread failed"));
                }
            }
        }
        match failure {
            Some(e) if self.parallel => Err(e.context(
                "partitions were sent in parallel (--lanes): the other partitions stopped \
                 at their next call",
            )),
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Hands `lane` its deliveries read so far, if any; false if the lane
    /// ended early.
    fn hand_run(&mut self, lane: usize) -> bool {
        if self.runs[lane].len() == 0 {
            return true;
        }
        let run = std::mem::take(&mut self.runs[lane]);
        let first = run.lines.first().copied().unwrap_or_default();
        self.inboxes[lane]
            .send((first, Operation::Run(run)))
            .is_ok()
    }

    /// The failure of a lane that ended early.
    fn failed(&mut self) -> anyhow::Error {
        match self.finish() {
            Err(e) => e,
            Ok(()) => anyhow::anyhow!("a sending thread ended early"),
        }
    }
}

impl Replay for Lanes<'_, '_> {
    fn line(
        &mut self,
        line_no: u64,
        text: &str,
        progress: &Progress,
    ) -> anyhow::Result<Result<(), String>> {
        let op = match parse_line(text) {
            Ok(op) => op,
            Err(e) => return Ok(Err(e)),
        };
        if self.shared.failed.load(Ordering::SeqCst) {
            return Err(self.failed());
        }
        let lane = self.lane(Self::partition(&op));
        let handed = match op {
            Operation::Deliver { json, .. } => {
                self.runs[lane].add(line_no, &json);
                self.runs[lane].len() < self.batch_size || self.hand_run(lane)
            }
            op => self.hand_run(lane) && self.inboxes[lane].send((line_no, op)).is_ok(),
        };
        if !handed {
            // the lane ended early: it failed
            return Err(self.failed());
        }
        progress.update(self.shared.delivered.load(Ordering::Relaxed));
        Ok(Ok(()))
    }

    fn flush(&mut self, progress: &Progress) -> anyhow::Result<()> {
        self.finish()?;
        progress.update(self.shared.delivered.load(Ordering::Relaxed));
        Ok(())
    }
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.deliveries += o.deliveries;
        self.batches += o.batches;
        self.advances += o.advances;
        self.idles += o.idles;
        self.changes += o.changes;
        self.late += o.late;
    }
}

/// Sends `path` (`-`: standard input): with `lanes` > 1 the partitions in
/// parallel (each in file order), else the whole file strictly in order;
/// prints the final line.
pub fn run(api: &Api, path: &Path, batch_size: usize, lanes: usize) -> anyhow::Result<()> {
    let (shown, elapsed, t) = std::thread::scope(|scope| -> anyhow::Result<_> {
        let mut l = Lanes {
            scope,
            api,
            batch_size: batch_size.max(1),
            max: lanes.max(1),
            parallel: lanes > 1,
            lane_of: HashMap::new(),
            inboxes: Vec::new(),
            runs: Vec::new(),
            handles: Vec::new(),
            shared: Arc::default(),
            total: Tally::default(),
        };
        let r = replay(path, &mut l);
        // whatever ended the replay, the lanes are joined before leaving
        let joined = l.finish();
        let (shown, elapsed) = r?;
        joined?;
        Ok((shown, elapsed, l.total))
    })?;
    println!(
        "sent {shown}: {} deliveries in {} batches, {} advances, {} idles; {} changes, {} late; {:.2} s, {} events/s",
        t.deliveries,
        t.batches,
        t.advances,
        t.idles,
        t.changes,
        t.late,
        elapsed.as_secs_f64(),
        rate(t.deliveries, elapsed)
    );
    Ok(())
}

#[cfg(test)]
mod tests;
