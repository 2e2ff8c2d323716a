//! `streamforge patterns ...`: the client of the pattern engine's routes
//! (`/patterns/...`, docs/patterns.md) and its offline checks.
//!
//! - `check FILE`: validates a patterns document with the engine's own
//!   parser (the messages of `serve --patterns`, with the JSON path),
//!   summarizes it, and warns (stderr) of conditions that can never be true;
//! - `send FILE|-`: pushes an NDJSON file of pattern operations (their
//!   format: `patterns_send.rs`) in order;
//! - `advance W`, `finish`: print the output records of the call;
//! - `output`: the output pages (`--follow`: server-sent events);
//! - `status`, `show`;
//! - `checkpoint create|list|get|restore|delete`: the pattern engine's
//!   checkpoints (the window engine's commands on `/patterns/checkpoints`);
//! - `verify FILE [--patterns DOC]`: a pattern checkpoint checked offline.
//!

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::http::{parse, Api};
use super::indent::indented;
use super::input::{load_document, shown_path};
use super::patterns_send::{default_key_prefix, send_file, SendOptions};
use super::text::plural;
use super::wire::{PatternAdvance, PatternOutputPage, PatternRecord, PatternStatus, PatternTicked};
use super::{follow, pages, print, text, CheckpointCommand, Conn, Fetched, Json, Paging};
use crate::patterns::Document;

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
        PatternsCommand::Output { conn, paging } => output(&conn, &paging),
        PatternsCommand::Status { conn, json } => status(&conn, json),
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

/// `patterns output`: the output pages, or (`--follow`) the stream.
fn output(conn: &Conn, paging: &Paging) -> anyhow::Result<()> {
    let api = Api::new(conn, None)?;
    let json = paging.json;
    let render = move |data: &str| record_line(data, json);
    if paging.follow {
        return follow::follow_all(
            conn,
            &paging.also,
            &follow::StreamRoute {
                segments: &["patterns", "output", "stream"],
                name: "pattern output stream",
                render: &render,
            },
            paging.after,
            json,
        );
    }
    follow::only_with_follow(paging)?;
    pages(paging, |query| {
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

/// `patterns status`: the engine's counters, then a table of its patterns.
fn status(conn: &Conn, json: Json) -> anyhow::Result<()> {
    let body = Api::new(conn, None)?.get_text(&["patterns", "status"], &[])?;
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
