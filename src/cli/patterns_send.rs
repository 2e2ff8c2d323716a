//! `streamforge patterns send`: a file of pattern operations sent in order.
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

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::value::RawValue;

use super::batch::{Batch, Wording};
use super::http::{parse, Api};
use super::print;
use super::send::{self, Progress, Replay};
use super::text::plural;
use super::wire::{PatternAdvance, PatternPushed, PatternStatus, PatternTicked};
use crate::canonical::UniqueMap;
use crate::patterns::parse_event;

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
pub(super) struct SendOptions {
    pub(super) batch_size: usize,
    pub(super) from_line: u64,
    /// The Idempotency-Key prefix (none: no keys).
    pub(super) keys: Option<String>,
    /// `--watermark-lag MS` and `--advance-every N`.
    pub(super) lag: Option<(i64, u64)>,
}

/// `send-` and 16 hex digits of the SHA-256 of `path` made absolute (none
/// for standard input).
pub(super) fn default_key_prefix(path: &Path) -> anyhow::Result<Option<String>> {
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
pub(super) fn send_file(api: &Api, path: &Path, opts: SendOptions) -> anyhow::Result<()> {
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
}
