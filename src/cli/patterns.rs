//! `streamforge patterns ...`: the client of the pattern engine's routes
//! (`/patterns/...`, docs/patterns.md) and its offline checks.
//!
//! - `check FILE`: validates a patterns document with the engine's own
//!   parser (the messages of `serve --patterns`, with the JSON path),
//!   summarizes it, and warns (stderr) of conditions that can never be true;
//! - `send FILE|-`: pushes an NDJSON file of pattern operations (format
//!   below) in order;
//! - `advance W`, `finish`: print the output records of the call;
//! - `output`: the output pages (`--follow`: server-sent events);
//! - `status`, `show`;
//! - `checkpoint create|list|get|restore|delete`: the pattern engine's
//!   checkpoints (the window engine's commands on `/patterns/checkpoints`);
//! - `verify FILE [--patterns DOC]`: a pattern checkpoint checked offline.
//!
//! # Pattern operation files
//!
//! One operation per line, sent strictly in file order (blank lines are
//! skipped):
//! - an event, bare (`{"id":"a1","key":"alice","kind":"login","time":1000}`)
//!   or as `{"op":"push","event":{...}}`: consecutive events are POSTed to
//!   `/patterns/events` as NDJSON batches of `--batch`, each event exactly
//!   as written in the file (numbers keep their spelling: `2.0` stays a
//!   Double);
//! - `{"op":"advance","watermark":W}`: `POST /patterns/advance`;
//! - `{"op":"finish"}`: `POST /patterns/finish`.
//!
//! Every line is checked before it is sent (events with the engine's parser,
//! so a bad event names its field); a bad line stops the run after
//! everything before it was sent. A rejected batch (a `late_event`, ...) is
//! applied not at all, and the error names the file line of the failing
//! event. Pattern events are not deduplicated (an event pushed twice is two
//! occurrences), so every push and advance carries an `Idempotency-Key`
//! made of the file and its lines: a call that got no answer is sent again
//! with the same key, and after an error the file is sent again with
//! `--from-line N` (the line named); a batch the server applied already is
//! answered from its key. `--watermark-lag MS` advances the watermark from
//! the client side (the largest time sent minus MS, every
//! `--advance-every` events).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::value::RawValue;

use super::http::{parse, Api};
use super::input::{load_document, shown_path};
use super::send::{self, Batch, Progress, Replay, Wording};
use super::wire::{
    PatternAdvance, PatternOutputPage, PatternPushed, PatternRecord, PatternStatus, PatternTicked,
};
use super::{follow, pages, print, text, CheckpointCommand, Conn, Fetched, Json, Paging};
use crate::canonical::UniqueMap;
use crate::patterns::{parse_event, Document};

/// `streamforge patterns ...`
#[derive(Debug, Subcommand)]
pub enum PatternsCommand {
    /// Validate a patterns document offline and summarize it.
    ///
    /// Runs the engine's own validation (every rule of docs/patterns.md);
    /// an invalid document prints the message `serve --patterns` would give,
    /// with the JSON path of the offending value, and exits with status 1.
    /// A condition that can never be true (an order operator against a
    /// Bool, a field compared with values of two types in one "all", ...)
    /// is printed on stderr as `streamforge: warning: FILE: PATH: ...`; the
    /// document is valid all the same (status 0). No service is contacted.
    Check {
        /// Patterns document (JSON), or - for standard input.
        file: PathBuf,
    },
    /// Push an NDJSON file of pattern events, advances and finishes, in order.
    ///
    /// One operation per line: an event (bare, or {"op":"push","event":{...}}),
    /// {"op":"advance","watermark":W} or {"op":"finish"}. Consecutive events
    /// are POSTed to /patterns/events in NDJSON batches; advances and
    /// finishes in between, in file order (their output records are counted;
    /// read them with `patterns output`).
    ///
    /// A progress bar (events/s, ETA) is drawn on stderr when it is a
    /// terminal; the final line gives the counts and events/s. On an error
    /// the file line and the server's detail are printed, exit status 1.
    ///
    /// Every push and advance carries an Idempotency-Key made of the file
    /// and its lines (`PREFIX:FIRST-LAST`), so a call that got no answer is
    /// sent again safely (up to 5 times), and after an error the file can be
    /// sent again with `--from-line N` (the line named): a batch or advance
    /// that was applied already is answered from its key, not applied twice.
    Send {
        #[command(flatten)]
        conn: Conn,
        /// NDJSON file of operations, or - for standard input.
        file: PathBuf,
        /// Events per POST /patterns/events.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        batch: u32,
        /// Start at this line of the file (1 = the first): the lines before
        /// it are skipped, not sent.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        from_line: u64,
        /// The keys' prefix (default: `send-` and 16 hex digits of the
        /// SHA-256 of the file's absolute path; standard input has none
        /// unless given, and is then sent without keys).
        #[arg(long, conflicts_with = "no_keys")]
        key_prefix: Option<String>,
        /// Send without Idempotency-Key headers (a retried call then counts
        /// twice).
        #[arg(long)]
        no_keys: bool,
        /// Advance the pattern watermark from the client side: every
        /// --advance-every events, to the largest event time sent so far
        /// minus MS (never below the engine's watermark). The watermark
        /// stays the caller's assertion: an event sent later at or before it
        /// is refused as late.
        #[arg(long, value_name = "MS", value_parser = clap::value_parser!(i64).range(0..))]
        watermark_lag: Option<i64>,
        /// Events between two --watermark-lag advances.
        #[arg(long, default_value_t = 10_000, requires = "watermark_lag",
              value_parser = clap::value_parser!(u64).range(1..))]
        advance_every: u64,
    },
    /// Advance the pattern watermark (POST /patterns/advance); prints the output.
    ///
    /// One line per output record (see `patterns output`), then
    /// `# watermark W, N records, processed P`.
    Advance {
        #[command(flatten)]
        conn: Conn,
        /// The new pattern watermark.
        #[arg(allow_negative_numbers = true)]
        watermark: i64,
        #[command(flatten)]
        json: Json,
    },
    /// Advance to the final watermark (POST /patterns/finish): every deadline
    /// expires; prints the output as `advance` does.
    Finish {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        json: Json,
    },
    /// Print the pattern output, one record per line.
    ///
    /// Format: `SEQ TYPE PATTERN KEY [START..END] STAGE=CAPTURES ...`, with
    /// TYPE `match` or `timeout`, START the first capture's time, END the
    /// completing event's time (the deadline for an absence match or a
    /// timeout), and every stage in pattern order with the ordinals of the
    /// events it captured (`pay=#2,#3`; `-` for none). `--follow` reads the
    /// server-sent events of /patterns/output/stream and says when a pattern
    /// restore rewinds the output.
    Output {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        paging: Paging,
    },
    /// Print the pattern watermark, buffer, ordinals, sequence, epoch and the
    /// live keys, branches and absence waits per pattern.
    Status {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        json: Json,
    },
    /// Print the patterns document in force (GET /patterns), indented.
    Show {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        json: Json,
    },
    /// Create, list, download, restore and delete pattern checkpoints.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// Validate a pattern checkpoint file offline and print what it holds.
    ///
    /// Runs the engine's own restore (every rule of docs/patterns.md,
    /// "Checkpoints") against the patterns document the checkpoint was taken
    /// with; an invalid file prints exactly why and exits with status 1. No
    /// service is contacted.
    Verify {
        /// Pattern checkpoint envelope file (as `patterns checkpoint get -o` writes it).
        file: PathBuf,
        /// The patterns document of the service that took it (default: the
        /// embedded demo document, `pipelines/default.patterns.json`).
        #[arg(long, value_name = "DOC")]
        patterns: Option<PathBuf>,
    },
}

/// Runs a `patterns` command.
pub fn run(cmd: PatternsCommand) -> anyhow::Result<()> {
    match cmd {
        PatternsCommand::Check { file } => {
            let (summary, warnings) = check(&file)?;
            print(&[summary.trim_end().to_string()])?;
            for w in warnings {
                eprintln!("streamforge: warning: {w}");
            }
            Ok(())
        }
        PatternsCommand::Send {
            conn,
            file,
            batch,
            from_line,
            key_prefix,
            no_keys,
            watermark_lag,
            advance_every,
        } => {
            let keys = match (no_keys, key_prefix) {
                (true, _) => None,
                (false, Some(p)) => Some(p),
                (false, None) => default_key_prefix(&file)?,
            };
            let opts = SendOptions {
                batch_size: batch as usize,
                from_line,
                keys,
                lag: watermark_lag.map(|lag| (lag, advance_every)),
            };
            send_file(&Api::new(&conn, None)?, &file, opts)
        }
        PatternsCommand::Advance {
            conn,
            watermark,
            json,
        } => {
            let body = serde_json::to_vec(&PatternAdvance { watermark })?;
            let answer = Api::new(&conn, None)?.post_text(
                &["patterns", "advance"],
                "application/json",
                Some(body),
            )?;
            tick(&answer, json)
        }
        PatternsCommand::Finish { conn, json } => {
            let answer = Api::new(&conn, None)?.post_text(&["patterns", "finish"], "", None)?;
            tick(&answer, json)
        }
        PatternsCommand::Output { conn, paging } => {
            let api = Api::new(&conn, None)?;
            let json = paging.json;
            let render = move |data: &str| record_line(data, json);
            if paging.follow {
                return follow::follow_all(
                    &conn,
                    &paging.also,
                    &follow::Stream {
                        segments: &["patterns", "output", "stream"],
                        name: "pattern output stream",
                        render: &render,
                    },
                    paging.after,
                    json,
                );
            }
            follow::only_with_follow(&paging)?;
            pages(&paging, |query| {
                let page: PatternOutputPage = api.get(&["patterns", "output"], query)?;
                let lines = page
                    .output
                    .iter()
                    .map(|r| render(r.get()))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                Ok(Fetched {
                    lines,
                    next: page.next,
                    head: page.head,
                    epoch: page.epoch,
                    rewound_to: page.rewound_to,
                })
            })
        }
        PatternsCommand::Status { conn, json } => {
            let body = Api::new(&conn, None)?.get_text(&["patterns", "status"], &[])?;
            if json.json {
                return print(&[body]);
            }
            let s: PatternStatus = parse(&body)?;
            let mut out = text::table(&[
                vec!["watermark".into(), s.watermark.to_string()],
                vec!["buffered".into(), s.buffered.to_string()],
                vec!["next ordinal".into(), s.next_ordinal.to_string()],
                vec!["sequence".into(), s.sequence.to_string()],
                vec!["epoch".into(), s.epoch.to_string()],
            ]);
            out.push('\n');
            let mut rows = vec![vec![
                "pattern".to_string(),
                "keys".into(),
                "branches".into(),
                "waits".into(),
            ]];
            for (name, p) in &s.patterns {
                rows.push(vec![
                    text::name(name),
                    p.keys.to_string(),
                    p.branches.to_string(),
                    p.waits.to_string(),
                ]);
            }
            out.push_str(&text::table(&rows));
            print(&[out.trim_end().to_string()])
        }
        PatternsCommand::Show { conn, json } => {
            let body = Api::new(&conn, None)?.get_text(&["patterns"], &[])?;
            if json.json {
                return print(&[body]);
            }
            print(&[indented(&body)?])
        }
        PatternsCommand::Checkpoint(c) => super::checkpoint(c, &["patterns"]),
        PatternsCommand::Verify { file, patterns } => {
            print(&[
                super::verify::describe_patterns(&file, patterns.as_deref())?
                    .trim_end()
                    .to_string(),
            ])
        }
    }
}

/// One output record (its JSON text) as printed: the readable line, or the
/// text itself with `--json`.
fn record_line(data: &str, json: bool) -> anyhow::Result<String> {
    if json {
        return Ok(data.to_string());
    }
    let r: PatternRecord = parse(data)?;
    Ok(text::pattern_record(&r))
}

/// Prints an advance or finish answer: its records, then a summary line.
fn tick(body: &str, json: Json) -> anyhow::Result<()> {
    if json.json {
        return print(&[body.to_string()]);
    }
    let t: PatternTicked = parse(body)?;
    let mut lines: Vec<String> = t.output.iter().map(text::pattern_record).collect();
    lines.push(format!(
        "# watermark {}, {}, processed {}",
        t.watermark,
        plural(t.output.len() as u64, "record"),
        t.processed
    ));
    print(&lines)
}

/// `1 record`, `2 records` (`batch`, `match` and `finish` take `es`).
fn plural(n: u64, what: &str) -> String {
    match (n, what.ends_with("ch") || what.ends_with("sh")) {
        (1, _) => format!("1 {what}"),
        (_, true) => format!("{n} {what}es"),
        (_, false) => format!("{n} {what}s"),
    }
}

/// `patterns check`: the summary of a valid document, and its warnings
/// (`FILE: PATH: message`: conditions that can never be true).
fn check(path: &Path) -> anyhow::Result<(String, Vec<String>)> {
    let doc = load_document(path)?;
    let shown = shown_path(path);
    let warnings = doc
        .warnings()
        .iter()
        .map(|w| format!("{shown}: {w}"))
        .collect();
    Ok((summary(&doc, &shown), warnings))
}

/// What `check` prints: per pattern (by name) its within, skip policy and
/// absence, and a table of its stages; then the limits.
pub(super) fn summary(doc: &Document, shown: &str) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{shown}: valid, {}\n",
        plural(doc.patterns().len() as u64, "pattern")
    ));
    for p in doc.patterns() {
        out.push_str(&format!(
            "pattern {}: within {}, skip {}, absence {}\n",
            p.name,
            p.within,
            p.skip.name(),
            if p.absence.is_some() { "yes" } else { "no" }
        ));
        let mut rows = vec![vec![
            "  stage".to_string(),
            "min".into(),
            "max".into(),
            "contiguity".into(),
            "forbidden".into(),
        ]];
        for s in &p.stages {
            rows.push(vec![
                format!("  {}", s.name),
                s.min.to_string(),
                s.max.to_string(),
                s.contiguity.name().into(),
                if s.forbidden.is_some() { "yes" } else { "no" }.into(),
            ]);
        }
        out.push_str(&text::table(&rows));
    }
    let l = doc.limits();
    out.push_str(&format!(
        "limits: max_results_per_advance {}, active_states {}\n",
        l.max_results_per_advance, l.active_states
    ));
    out
}

/// The JSON text re-indented for reading: a value that fits in 80 columns
/// stays on one line, larger ones get one member per line. Keys keep their
/// order and scalars their spelling (no reparse into numbers).
fn indented(json: &str) -> anyhow::Result<String> {
    // Valid JSON only: the walk below relies on it.
    serde_json::from_str::<serde::de::IgnoredAny>(json)
        .map_err(|e| anyhow::anyhow!("unexpected answer ({e})"))?;
    let bytes = json.as_bytes();
    let mut at = 0;
    let node = Node::read(bytes, &mut at);
    let mut out = String::new();
    node.write(&mut out, 0, 0);
    Ok(out)
}

/// A JSON value with its scalars (and keys) as written.
enum Node<'a> {
    Scalar(&'a str),
    Array(Vec<Node<'a>>),
    Object(Vec<(&'a str, Node<'a>)>),
}

impl<'a> Node<'a> {
    fn read(b: &'a [u8], at: &mut usize) -> Node<'a> {
        skip_ws(b, at);
        match b.get(*at) {
            Some(b'{') => {
                *at += 1;
                let mut members = Vec::new();
                loop {
                    skip_ws(b, at);
                    match b.get(*at) {
                        Some(b'}') | None => {
                            *at += 1;
                            return Node::Object(members);
                        }
                        Some(b',') => *at += 1,
                        _ => {
                            let key = string_token(b, at);
                            skip_ws(b, at);
                            *at += 1; // ':'
                            members.push((key, Node::read(b, at)));
                        }
                    }
                }
            }
            Some(b'[') => {
                *at += 1;
                let mut items = Vec::new();
                loop {
                    skip_ws(b, at);
                    match b.get(*at) {
                        Some(b']') | None => {
                            *at += 1;
                            return Node::Array(items);
                        }
                        Some(b',') => *at += 1,
                        _ => items.push(Node::read(b, at)),
                    }
                }
            }
            Some(b'"') => Node::Scalar(string_token(b, at)),
            _ => {
                let start = *at;
                while *at < b.len() && !b",]} \t\r\n".contains(&b[*at]) {
                    *at += 1;
                }
                // Cut at ASCII delimiters of a `str`: still UTF-8.
                Node::Scalar(std::str::from_utf8(&b[start..*at]).unwrap_or(""))
            }
        }
    }

    /// The value on one line (`{"a": 1, "b": [2, 3]}`).
    fn flat(&self) -> String {
        match self {
            Node::Scalar(s) => (*s).to_string(),
            Node::Array(items) => {
                let inner: Vec<String> = items.iter().map(Node::flat).collect();
                format!("[{}]", inner.join(", "))
            }
            Node::Object(members) => {
                let inner: Vec<String> = members
                    .iter()
                    .map(|(k, v)| format!("{k}: {}", v.flat()))
                    .collect();
                format!("{{{}}}", inner.join(", "))
            }
        }
    }

    /// Writes the value at column `col` (where the current line already is)
    /// with members indented by `indent + 2`.
    fn write(&self, out: &mut String, indent: usize, col: usize) {
        let flat = self.flat();
        if col + flat.len() <= 80 || matches!(self, Node::Scalar(_)) {
            out.push_str(&flat);
            return;
        }
        let pad = " ".repeat(indent + 2);
        let (open, close, n) = match self {
            Node::Array(items) => ('[', ']', items.len()),
            Node::Object(members) => ('{', '}', members.len()),
            Node::Scalar(_) => unreachable!("written flat above"),
        };
        out.push(open);
        for i in 0..n {
            out.push('\n');
            out.push_str(&pad);
            match self {
                Node::Array(items) => items[i].write(out, indent + 2, indent + 2),
                Node::Object(members) => {
                    let (k, v) = &members[i];
                    out.push_str(k);
                    out.push_str(": ");
                    v.write(out, indent + 2, indent + 2 + k.len() + 2);
                }
                Node::Scalar(_) => {}
            }
            if i + 1 < n {
                out.push(',');
            }
        }
        out.push('\n');
        out.push_str(&" ".repeat(indent));
        out.push(close);
    }
}

fn skip_ws(b: &[u8], at: &mut usize) {
    while *at < b.len() && b[*at].is_ascii_whitespace() {
        *at += 1;
    }
}

/// A string token with its quotes, as written.
fn string_token<'a>(b: &'a [u8], at: &mut usize) -> &'a str {
    let start = *at;
    *at += 1;
    while *at < b.len() {
        match b[*at] {
            b'\\' => *at += 2,
            b'"' => {
                *at += 1;
                break;
            }
            _ => *at += 1,
        }
    }
    // Cut at ASCII quotes of a `str`: still UTF-8.
    std::str::from_utf8(&b[start..(*at).min(b.len())]).unwrap_or("")
}

/// One checked line of a pattern operation file.
#[derive(Debug, PartialEq, Eq)]
enum Operation<'a> {
    /// An event's JSON text, exactly as in the file.
    Event(&'a str),
    Advance(i64),
    Finish,
}

/// Reads one line: an event (bare or `"op":"push"`), an advance or a finish.
fn parse_line(text: &str) -> Result<Operation<'_>, String> {
    let top: UniqueMap<&RawValue> = serde_json::from_str(text).map_err(|e| {
        if e.is_data() {
            format!("a line must be a JSON object with unique keys: {e}")
        } else {
            format!("malformed JSON: {e}")
        }
    })?;
    let Some(op) = top.0.iter().find(|(k, _)| k == "op").map(|(_, v)| *v) else {
        // a bare event
        parse_event(text.as_bytes())?;
        return Ok(Operation::Event(text));
    };
    let op: String = serde_json::from_str(op.get())
        .map_err(|_| format!("\"op\" must be a string, not {}", op.get()))?;
    let only = |allowed: &[&str]| -> Result<(), String> {
        match top.0.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            Some((k, _)) => Err(format!("an {op:?} line has no {k:?} field")),
            None => Ok(()),
        }
    };
    let field = |name: &str| top.0.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
    match op.as_str() {
        "push" => {
            only(&["op", "event"])?;
            let event = field("event").ok_or("a push needs an \"event\"")?;
            parse_event(event.get().as_bytes()).map_err(|e| format!("event: {e}"))?;
            Ok(Operation::Event(event.get()))
        }
        "advance" => {
            only(&["op", "watermark"])?;
            let w = field("watermark").ok_or("an advance needs a \"watermark\"")?;
            let w = crate::canonical::strict::int_token(w.get(), "watermark")
                .map_err(|_| format!("watermark: {} is not a 64-bit integer", w.get()))?;
            Ok(Operation::Advance(w))
        }
        "finish" => {
            only(&["op"])?;
            Ok(Operation::Finish)
        }
        other => Err(format!(
            "unknown op {other:?} (push, advance or finish; or a bare event)"
        )),
    }
}

/// What `patterns send` says after a rejected batch.
const EVENTS: Wording = Wording {
    item: "event",
    scope: "",
    advice: |first| {
        format!(
            "fix the cause and send the file again with --from-line {first} \
             (with keys, a batch or advance already applied is not applied twice)"
        )
    },
};

/// Counts for the final line.
#[derive(Default)]
struct Tally {
    events: u64,
    batches: u64,
    advances: u64,
    finishes: u64,
    matches: u64,
    timeouts: u64,
}

/// How `patterns send` sends.
struct SendOptions {
    batch_size: usize,
    from_line: u64,
    /// The Idempotency-Key prefix (none: no keys).
    keys: Option<String>,
    /// `--watermark-lag MS` and `--advance-every N`.
    lag: Option<(i64, u64)>,
}

/// `send-` and 16 hex digits of the SHA-256 of `path` made absolute (none
/// for standard input).
fn default_key_prefix(path: &Path) -> anyhow::Result<Option<String>> {
    if path == Path::new("-") {
        return Ok(None);
    }
    let abs =
        std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))?;
    let hex = crate::canonical::sha256_hex(abs.as_os_str().as_encoded_bytes());
    Ok(Some(format!("send-{}", &hex[..16])))
}

struct Sender<'a> {
    api: &'a Api,
    opts: SendOptions,
    batch: Batch,
    tally: Tally,
    /// `--watermark-lag`: the largest event time sent, the events sent
    /// since the last lag advance, and the watermark known to be in force.
    max_time: Option<i64>,
    since_advance: u64,
    watermark: Option<i64>,
}

impl Sender<'_> {
    fn key(&self, lines: &str) -> Option<String> {
        self.opts.keys.as_ref().map(|p| format!("{p}:{lines}"))
    }

    /// A keyed advance (or finish, never keyed: it is idempotent) from
    /// `line_no`; counts its output records.
    fn tick(
        &mut self,
        segments: &[&str],
        body: Option<Vec<u8>>,
        key: Option<String>,
        what: &str,
        line_no: u64,
    ) -> anyhow::Result<()> {
        let answer = self
            .api
            .post_keyed(segments, "application/json", body, key.as_deref())
            .with_context(|| format!("line {line_no} ({what})"))?;
        let t: PatternTicked =
            parse(&answer).with_context(|| format!("line {line_no} ({what})"))?;
        self.watermark = Some(t.watermark);
        if what == "finish" {
            self.tally.finishes += 1;
        } else {
            self.tally.advances += 1;
        }
        for r in &t.output {
            if r.kind == "timeout" {
                self.tally.timeouts += 1;
            } else {
                self.tally.matches += 1;
            }
        }
        Ok(())
    }

    /// `--watermark-lag`: after a flush, every `--advance-every` events,
    /// advances to the largest time sent minus the lag, when that is above
    /// the watermark in force.
    fn lag_advance(&mut self, line_no: u64) -> anyhow::Result<()> {
        let (Some((lag, every)), Some(max)) = (self.opts.lag, self.max_time) else {
            return Ok(());
        };
        if self.since_advance < every {
            return Ok(());
        }
        self.since_advance = 0;
        if self.watermark.is_none() {
            let st: PatternStatus = parse(&self.api.get_text(&["patterns", "status"], &[])?)?;
            self.watermark = Some(st.watermark);
        }
        let w = max.saturating_sub(lag);
        if self.watermark.is_some_and(|now| w <= now) {
            return Ok(());
        }
        let body = serde_json::to_vec(&PatternAdvance { watermark: w })?;
        let key = self.key(&format!("lag@{line_no}"));
        self.tick(
            &["patterns", "advance"],
            Some(body),
            key,
            "--watermark-lag advance",
            line_no,
        )
    }
}

impl Replay for Sender<'_> {
    fn line(
        &mut self,
        line_no: u64,
        text: &str,
        progress: &Progress,
    ) -> anyhow::Result<Result<(), String>> {
        if line_no < self.opts.from_line {
            return Ok(Ok(()));
        }
        let op = match parse_line(text) {
            Ok(op) => op,
            Err(e) => return Ok(Err(e)),
        };
        let (segments, body, what): (&[&str], _, _) = match op {
            Operation::Event(json) => {
                if self.opts.lag.is_some() {
                    // the line was checked: it parses
                    let time = parse_event(json.as_bytes()).map_or(i64::MIN, |e| e.time);
                    self.max_time = self.max_time.max(Some(time));
                }
                self.batch.add(line_no, json.as_bytes());
                if self.batch.len() >= self.opts.batch_size {
                    self.flush(progress)?;
                }
                return Ok(Ok(()));
            }
            Operation::Advance(watermark) => (
                &["patterns", "advance"],
                Some(serde_json::to_vec(&PatternAdvance { watermark })?),
                "advance",
            ),
            Operation::Finish => (&["patterns", "finish"], None, "finish"),
        };
        self.flush(progress)?;
        let key = match what {
            "advance" => self.key(&line_no.to_string()),
            _ => None,
        };
        self.tick(segments, body, key, what, line_no)?;
        Ok(Ok(()))
    }

    fn flush(&mut self, progress: &Progress) -> anyhow::Result<()> {
        let prefix = self.opts.keys.clone();
        let key = |first: u64, last: u64| {
            format!("{}:{first}-{last}", prefix.as_deref().unwrap_or_default())
        };
        let last = self.batch.lines().map(|(_, l)| l);
        let Some((answer, n)) = self.batch.post_keyed(
            self.api,
            &["patterns", "events"],
            &EVENTS,
            prefix
                .is_some()
                .then_some(&key as &dyn Fn(u64, u64) -> String),
        )?
        else {
            return Ok(());
        };
        let _: PatternPushed = parse(&answer).context("the answer to POST /patterns/events")?;
        self.tally.events += n;
        self.tally.batches += 1;
        self.since_advance += n;
        progress.update(self.tally.events);
        if let Some(line) = last {
            self.lag_advance(line)?;
        }
        Ok(())
    }
}

/// `patterns send`: sends the file, prints the final line.
fn send_file(api: &Api, path: &Path, opts: SendOptions) -> anyhow::Result<()> {
    let mut sender = Sender {
        api,
        opts: SendOptions {
            batch_size: opts.batch_size.max(1),
            ..opts
        },
        batch: Batch::default(),
        tally: Tally::default(),
        max_time: None,
        since_advance: 0,
        watermark: None,
    };
    let (shown, elapsed) = send::replay(path, &mut sender)?;
    print(&[sent_line(&shown, &sender.tally, elapsed)])
}

/// `sent FILE: E events in B batches, A advances, F finishes; R records (M matches, T timeouts); S s, X events/s`.
fn sent_line(shown: &str, t: &Tally, elapsed: Duration) -> String {
    format!(
        "sent {shown}: {} in {}, {}, {}; {} ({}, {}); {:.2} s, {} events/s",
        plural(t.events, "event"),
        plural(t.batches, "batch"),
        plural(t.advances, "advance"),
        plural(t.finishes, "finish"),
        plural(t.matches + t.timeouts, "record"),
        plural(t.matches, "match"),
        plural(t.timeouts, "timeout"),
        elapsed.as_secs_f64(),
        send::rate(t.events, elapsed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_a_pattern_operation_file() {
        let ev = r#"{"id":"a1","key":"alice","kind":"pay","time":1000,"fields":{"amount":2.0,"d":{"decimal":"1.50"}}}"#;
        assert_eq!(parse_line(ev), Ok(Operation::Event(ev)));
        let pushed = format!(r#"{{"op":"push","event":{ev}}}"#);
        assert_eq!(parse_line(&pushed), Ok(Operation::Event(ev)));
        assert_eq!(
            parse_line(r#"{"op":"advance","watermark":-5}"#),
            Ok(Operation::Advance(-5))
        );
        assert_eq!(parse_line(r#"{"op":"finish"}"#), Ok(Operation::Finish));
        for (line, why) in [
            (
                r#"{"op":"finish","watermark":3}"#,
                r#"an "finish" line has no "watermark" field"#,
            ),
            (r#"{"op":"advance"}"#, r#"an advance needs a "watermark""#),
            (
                r#"{"op":"advance","watermark":1.5}"#,
                "watermark: 1.5 is not a 64-bit integer",
            ),
            (r#"{"op":"push"}"#, r#"a push needs an "event""#),
            (
                r#"{"op":"stop"}"#,
                r#"unknown op "stop" (push, advance or finish; or a bare event)"#,
            ),
            (r#"{"op":1}"#, r#""op" must be a string, not 1"#),
            (
                r#"{"id":"a","key":"k","kind":"x","time":1.0}"#,
                "time: 1.0 is not an integer",
            ),
            (
                r#"{"op":"push","event":{"id":"a","key":"k","kind":"x","time":1,"extra":1}}"#,
                r#"event: unknown field "extra""#,
            ),
        ] {
            assert_eq!(parse_line(line), Err(why.to_string()), "{line}");
        }
        assert!(parse_line(r#"{"op":"finish","op":"finish"}"#).is_err());
        assert!(parse_line("not json").is_err());
    }

    #[test]
    fn indented_keeps_order_and_spelling() {
        let json = r#"{"z":1E2,"a":[{"kind":"x"},"s\"]"],"long":["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","c"]}"#;
        assert_eq!(
            indented(json).expect("valid"),
            "{\n  \"z\": 1E2,\n  \"a\": [{\"kind\": \"x\"}, \"s\\\"]\"],\n  \"long\": [\n    \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\n    \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\",\n    \"c\"\n  ]\n}"
        );
    }
}
