//! The client subcommands of the `streamforge` binary: a terminal front end
//! to the HTTP API of docs/api.md (`send`, `watermark`, `idle`, `changes`, `late`,
//! `results`, `status`, `checkpoint`, `health`), the offline `verify`,
//! `patterns ...`, the same for the pattern engine (src/cli/patterns.rs),
//! `sink ...`, the webhook sinks (src/cli/sinks.rs), and `nexmark`, which
//! writes a demo stream (src/cli/nexmark.rs).
//!
//! Every networked command takes `--url` (`STREAMFORGE_URL`, default
//! `http://127.0.0.1:8080`) and `--token` (`STREAMFORGE_TOKEN`, the same
//! variable `serve` reads). Output is one readable line per item (formats in
//! [`text`]); `--json` prints the server's JSON instead. An error answer
//! prints the problem's `detail` (and `index` for batches) and the command
//! exits with status 1.
//!
//! Blocking reqwest: a command is a short sequence of calls, so there is no
//! async runtime to manage here (reqwest runs its own).

mod batch;
mod follow;
mod http;
mod indent;
mod input;
mod nexmark;
mod patterns;
mod patterns_send;
mod send;
mod sinks;
pub mod text;
mod verify;
pub mod wire;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use http::{parse, Api};
use wire::{Advance, ChangesPage, Checkpoint, CheckpointList, LatePage, Restored, Results, Status};

pub use http::Conn;
pub use nexmark::NexmarkArgs;
pub use patterns::PatternsCommand;
pub use sinks::SinkCommand;

/// Paging of `changes`, `late` and `patterns output`.
#[derive(Debug, Clone, Args)]
pub struct Paging {
    /// Start after this sequence.
    #[arg(long, default_value_t = 0)]
    pub after: u64,
    /// Page size per request (1..=10000).
    #[arg(long, default_value_t = 1000)]
    pub limit: u32,
    /// Keep printing new entries as they come, until Ctrl-C (changes and
    /// patterns output: server-sent events, resumed after a restore; late:
    /// long polls).
    #[arg(long, short)]
    pub follow: bool,
    /// With --follow (changes, patterns output): follow this other instance
    /// too (repeatable; instances sharing a Kafka topic, docs/cluster.md).
    /// Their records are printed as they come, each instance with its own
    /// cursor: text lines start with the instance's URL, JSON objects get
    /// an "instance" field.
    #[arg(long = "also", value_name = "URL")]
    pub also: Vec<String>,
    /// Print each entry as one line of JSON (the API's object) instead.
    #[arg(long)]
    pub json: bool,
}

/// `--json` for single-answer commands.
#[derive(Debug, Clone, Copy, Args)]
pub struct Json {
    /// Print the server's JSON answer as it is.
    #[arg(long)]
    pub json: bool,
}

/// What `send` asks the server to answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReturnMode {
    /// Counts, offsets and the watermark (`Prefer: return=minimal`).
    Minimal,
    /// Every change and late record.
    Full,
}

/// The client subcommands.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
pub enum ClientCommand {
    /// Send an NDJSON file of operations, in order.
    ///
    /// One operation per line, as benches/gen_workload.py writes them:
    /// {"op":"deliver","partition":P,"offset":N,"event":{...}} (or a bare
    /// Delivery without "op"), {"op":"advance","partition":P,"watermark":W},
    /// {"op":"idle","partition":P}. Consecutive deliveries are POSTed to
    /// /events in NDJSON batches; advances and idles in between. With
    /// --lanes N, up to N partitions are sent side by side, each strictly
    /// in file order.
    ///
    /// Re-running after an interruption is safe: a delivery re-sent with its
    /// offset is a no-op, one without an offset (append mode) is a duplicate
    /// counted once, and a repeated advance changes nothing. (An idle line
    /// re-sent after the partition reported again marks it idle once more,
    /// which may let the watermark move on.)
    ///
    /// A progress bar (events/s, ETA) is drawn on stderr when it is a
    /// terminal; the final line gives the counts and events/s. On an error
    /// the file line and the server's detail are printed, exit status 1.
    Send {
        #[command(flatten)]
        conn: Conn,
        /// NDJSON file of operations, or - for standard input.
        file: PathBuf,
        /// Deliveries per call (POST /events, or POST /batch with the
        /// advance lines that follow them).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        batch: u32,
        /// What the server answers each call with: `minimal` (counts only:
        /// `Prefer: return=minimal`, less work on both sides) or `full`
        /// (every change and late record).
        #[arg(long = "return", value_enum, default_value_t = ReturnMode::Minimal)]
        returns: ReturnMode,
        /// Partitions sent side by side, each strictly in file order on
        /// its own connection (more partitions share the lanes in turn).
        /// 1, the default, sends the whole file in order, one call at a
        /// time: the results are the file's, exactly. With more lanes only
        /// the interleaving across partitions differs from the file's, as
        /// with independent producers, so an event late in the file's order
        /// may be on time in another (and the other way round); use it for
        /// bulk loads whose partitions do not wait on each other.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        lanes: u32,
    },
    /// Advance a partition's watermark (POST /watermarks); prints the changes.
    Watermark {
        #[command(flatten)]
        conn: Conn,
        /// Partition name.
        partition: String,
        /// Reported progress.
        #[arg(allow_negative_numbers = true)]
        watermark: i64,
        #[command(flatten)]
        json: Json,
    },
    /// Mark a partition idle (POST /partitions/{p}/idle); prints the changes.
    Idle {
        #[command(flatten)]
        conn: Conn,
        /// Partition name.
        partition: String,
        #[command(flatten)]
        json: Json,
    },
    /// Print the changelog, one change per line.
    ///
    /// Format: `SEQ + WINDOW KEY [START,END) count=C sum=S min=m max=M` for
    /// an upsert, `-` instead of `+` for a retraction. Names that are empty or
    /// hold spaces, quotes or control characters are printed as JSON strings.
    Changes {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        paging: Paging,
    },
    /// Print the late side output: `SEQ ID KEY timestamp=T value=V watermark=W`.
    Late {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        paging: Paging,
    },
    /// Print the visible results: `WINDOW KEY [START,END) count=C sum=S min=m max=M`.
    Results {
        #[command(flatten)]
        conn: Conn,
        /// Only this window.
        #[arg(long)]
        window: Option<String>,
        /// Only this key.
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        json: Json,
    },
    /// Print the watermark, sequence, late count, live buckets and partitions.
    Status {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        json: Json,
    },
    /// Create, list, download, restore and delete checkpoints.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// The pattern engine: check, send, advance, finish, output, status,
    /// show, checkpoint, verify.
    #[command(subcommand)]
    Patterns(PatternsCommand),
    /// Webhook sinks: add, list, show, remove (docs/sinks.md).
    #[command(subcommand)]
    Sink(SinkCommand),
    /// Validate a checkpoint file offline and print what it holds.
    ///
    /// Runs the engine's own restore on the checkpoint's embedded pipeline
    /// (every rule of docs/checkpoint.md); an invalid file prints exactly why
    /// and exits with status 1. No service is contacted.
    Verify {
        /// Checkpoint envelope file (as `checkpoint get -o` writes it).
        file: PathBuf,
    },
    /// Validate a pipeline file offline.
    #[command(subcommand)]
    Pipeline(PipelineCommand),
    /// Write a Nexmark demo stream (people, auctions, bids) as an operation
    /// file on standard output.
    ///
    /// The lines are those `send` reads: deliveries with consecutive offsets
    /// per partition, and per-partition watermark advances that never make
    /// an event late (each partition reports the latest time it delivered
    /// minus --disorder-ms; after the last event every partition reports a
    /// time above every event). The same flags always give the same file.
    /// Example: `streamforge nexmark --seed 7 --events 1000000 --partitions 4
    /// > bids.ndjson`, then `streamforge serve --pipeline pipelines/q5.json`
    /// and `streamforge send bids.ndjson`.
    Nexmark(NexmarkArgs),
    /// Exit 0 if GET /healthz answers 200 within 2 s, else 1; with
    /// --ready, GET /readyz (the container image's HEALTHCHECK).
    Health {
        #[command(flatten)]
        conn: Conn,
        /// Ask GET /readyz instead (readiness): 200 only once recovery has
        /// finished and the engines match the database, where /healthz
        /// answers 200 whenever the process serves requests, during
        /// recovery too.
        #[arg(long)]
        ready: bool,
    },
}

/// `streamforge checkpoint ...` and `streamforge patterns checkpoint ...`
/// (the same commands on `/patterns/checkpoints...`).
#[derive(Debug, Subcommand)]
pub enum CheckpointCommand {
    /// Take and store a checkpoint of the current state (POST /checkpoints;
    /// /patterns/checkpoints under `patterns`).
    Create {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        json: Json,
    },
    /// List the stored checkpoints, newest first.
    List {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        json: Json,
    },
    /// Download a checkpoint's envelope bytes (to stdout, or to FILE with -o).
    Get {
        #[command(flatten)]
        conn: Conn,
        /// Checkpoint id.
        id: u64,
        /// Write the envelope to this file.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Restore a stored checkpoint by id, or a checkpoint file with --file.
    Restore {
        #[command(flatten)]
        conn: Conn,
        /// Stored checkpoint id.
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        id: Option<u64>,
        /// Checkpoint envelope file to upload (POST /restore; /patterns/restore
        /// under `patterns`).
        #[arg(long)]
        file: Option<PathBuf>,
        #[command(flatten)]
        json: Json,
    },
    /// Delete a stored checkpoint (DELETE /checkpoints/{id};
    /// /patterns/checkpoints/{id} under `patterns`).
    Delete {
        #[command(flatten)]
        conn: Conn,
        /// Checkpoint id.
        id: u64,
    },
}

/// Runs a client command. A closed stdout (`| head`) ends it quietly.
pub fn run(cmd: ClientCommand) -> anyhow::Result<()> {
    match dispatch(cmd) {
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            Ok(())
        }
        other => other,
    }
}

// Over 120 lines: one arm per CLI command.
fn dispatch(cmd: ClientCommand) -> anyhow::Result<()> {
    match cmd {
        ClientCommand::Send {
            conn,
            file,
            batch,
            returns,
            lanes,
        } => {
            let api = Api::new(&conn, None)?;
            let api = match returns {
                ReturnMode::Minimal => api.minimal(),
                ReturnMode::Full => api,
            };
            send::run(&api, &file, batch as usize, lanes as usize)
        }
        ClientCommand::Watermark {
            conn,
            partition,
            watermark,
            json,
        } => {
            let body = serde_json::to_vec(&Advance {
                partition: &partition,
                watermark,
            })?;
            let answer = Api::new(&conn, None)?.post_text(
                &["watermarks"],
                "application/json",
                Some(body),
            )?;
            tick(&answer, json)
        }
        ClientCommand::Idle {
            conn,
            partition,
            json,
        } => {
            let answer =
                Api::new(&conn, None)?.post_text(&["partitions", &partition, "idle"], "", None)?;
            tick(&answer, json)
        }
        ClientCommand::Changes { conn, paging } => {
            let api = Api::new(&conn, None)?;
            if paging.follow {
                return follow::changes(&conn, &paging.also, paging.after, paging.json);
            }
            follow::only_with_follow(&paging)?;
            pages(&paging, |query| {
                let page: ChangesPage = api.get(&["changes"], query)?;
                let lines = page
                    .changes
                    .iter()
                    .map(|c| item(c, paging.json, text::change))
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
        ClientCommand::Late { conn, paging } => {
            let api = Api::new(&conn, None)?;
            if !paging.also.is_empty() {
                anyhow::bail!("--also follows the server-sent streams: changes --follow and patterns output --follow");
            }
            pages(&paging, |query| {
                let page: LatePage = api.get(&["late"], query)?;
                let lines = page
                    .late
                    .iter()
                    .map(|l| item(l, paging.json, text::late))
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
        ClientCommand::Results {
            conn,
            window,
            key,
            json,
        } => {
            let mut query = Vec::new();
            if let Some(w) = window {
                query.push(("window", w));
            }
            if let Some(k) = key {
                query.push(("key", k));
            }
            let body = Api::new(&conn, None)?.get_text(&["results"], &query)?;
            if json.json {
                return print(&[body]);
            }
            let r: Results = parse(&body)?;
            let mut lines = vec![format!(
                "# watermark {}, {} visible rows",
                text::opt(r.watermark),
                r.results.len()
            )];
            lines.extend(r.results.iter().map(text::row));
            print(&lines)
        }
        ClientCommand::Status { conn, json } => {
            let body = Api::new(&conn, None)?.get_text(&["status"], &[])?;
            if json.json {
                return print(&[body]);
            }
            let s: Status = parse(&body)?;
            let mut out = text::table(&[
                vec!["watermark".into(), text::opt(s.watermark)],
                vec!["sequence".into(), s.sequence.to_string()],
                vec!["late".into(), s.late.to_string()],
                vec!["live buckets".into(), s.live_buckets.to_string()],
            ]);
            out.push('\n');
            let mut rows = vec![vec![
                "partition".to_string(),
                "offset".into(),
                "progress".into(),
                "idle".into(),
            ]];
            for (name, p) in &s.partitions {
                rows.push(vec![
                    text::name(name),
                    p.offset.to_string(),
                    text::opt(p.progress),
                    if p.idle { "yes" } else { "no" }.into(),
                ]);
            }
            out.push_str(&text::table(&rows));
            print(&[out.trim_end().to_string()])
        }
        ClientCommand::Checkpoint(c) => checkpoint(c, &[]),
        ClientCommand::Patterns(c) => patterns::run(c),
        ClientCommand::Nexmark(args) => nexmark::run(&args),
        ClientCommand::Sink(c) => sinks::run(c),
        ClientCommand::Pipeline(PipelineCommand::Check { file }) => {
            print(&[pipeline_check(&file)?])
        }
        ClientCommand::Verify { file } => print(&[verify::describe(&file)?.trim_end().to_string()]),
        ClientCommand::Health { conn, ready } => {
            let api = Api::new(&conn, Some(Duration::from_secs(2)))?;
            if ready {
                api.get_text(&["readyz"], &[]).context("not ready")?;
            } else {
                api.get_text(&["healthz"], &[]).context("unhealthy")?;
            }
            print(&["ok".to_string()])
        }
    }
}

/// `streamforge pipeline ...`
#[derive(Debug, Subcommand)]
pub enum PipelineCommand {
    /// Validate a pipeline file (as `serve --pipeline` reads it) and
    /// summarize it.
    ///
    /// Runs the engine's own validation of partitions, windows and
    /// lateness, and checks the inbound webhook "sources" and "watermarks"
    /// (docs/webhooks.md): every mistake is printed with its JSON path
    /// (`sources.stripe.timestamp.unit: ...`), exit status 1. Secrets are
    /// not read (a missing secret variable or file is said on stderr as a
    /// warning). No service is contacted.
    Check {
        /// Pipeline file (JSON), or - for standard input.
        file: PathBuf,
    },
}

/// `pipeline check FILE`: the summary, or every mistake.
fn pipeline_check(file: &std::path::Path) -> anyhow::Result<String> {
    use crate::inbound::config::{pipeline_file, Secrets};
    let bytes = if file.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)?;
        b
    } else {
        std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    let (pipeline, inbound) = pipeline_file(&bytes, Secrets::Skip).map_err(|e| {
        let e = e.strip_prefix("invalid pipeline: ").unwrap_or(&e);
        anyhow::anyhow!("{}: invalid pipeline:\n{e}", file.display())
    })?;
    let mut out = format!(
        "{}: valid: {} partitions ({}), {} windows ({}), lateness {}",
        file.display(),
        pipeline.partitions().len(),
        pipeline.partitions().join(", "),
        pipeline.windows().len(),
        pipeline
            .windows()
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
        pipeline.lateness()
    );
    for (name, s) in &inbound.sources {
        let target = match &s.target {
            crate::inbound::Target::Window { partition, .. } => format!("partition {partition}"),
            crate::inbound::Target::Patterns { .. } => "the pattern engine".to_string(),
        };
        let sig = match &s.signature {
            Some(sig) => {
                if !sig.secrets_from.present() {
                    eprintln!(
                        "streamforge: warning: sources.{name}.signature: {} {} here (serve needs it)",
                        sig.secrets_from,
                        match sig.secrets_from {
                            crate::inbound::config::SecretsFrom::File(_) => "does not exist",
                            crate::inbound::config::SecretsFrom::Env(_) => "is not set",
                        }
                    );
                }
                format!(
                    "signed ({:?}, secrets from {})",
                    sig.scheme, sig.secrets_from
                )
            }
            None => "unsigned (needs the bearer token when one is set)".to_string(),
        };
        out.push_str(&format!(
            "\nsource {name}: POST /ingest/{name} -> {target}, {sig}"
        ));
    }
    for (p, st) in &inbound.watermarks {
        out.push_str(&format!(
            "\nwatermark {p}: max_out_of_orderness {}, idle_after {}",
            st.max_out_of_orderness
                .map_or("none".into(), |b| b.to_string()),
            st.idle_after_ms
                .map_or("none".into(), |b| format!("{b} ms"))
        ));
    }
    Ok(out)
}

/// The checkpoint commands of the engine whose routes start with `prefix`
/// (`[]`: the window engine; `["patterns"]`: the pattern engine).
fn checkpoint(cmd: CheckpointCommand, prefix: &[&str]) -> anyhow::Result<()> {
    let at = |rest: &[&'_ str]| -> Vec<String> {
        prefix
            .iter()
            .chain(rest)
            .map(|s| (*s).to_string())
            .collect()
    };
    let checkpoints = at(&["checkpoints"]);
    match cmd {
        CheckpointCommand::Create { conn, json } => {
            let body = Api::new(&conn, None)?.post_text(&segments(&checkpoints), "", None)?;
            if json.json {
                return print(&[body]);
            }
            let c: Checkpoint = parse(&body)?;
            print(&[format!(
                "checkpoint {}: sequence {}, {} bytes, digest {}",
                c.id, c.sequence, c.bytes, c.digest
            )])
        }
        CheckpointCommand::List { conn, json } => {
            let body = Api::new(&conn, None)?.get_text(&segments(&checkpoints), &[])?;
            if json.json {
                return print(&[body]);
            }
            let list: CheckpointList = parse(&body)?;
            let mut rows = vec![vec![
                "id".to_string(),
                "sequence".into(),
                "bytes".into(),
                "created_at".into(),
                "digest".into(),
            ]];
            for c in &list.checkpoints {
                rows.push(vec![
                    c.id.to_string(),
                    c.sequence.to_string(),
                    c.bytes.to_string(),
                    c.created_at.clone().unwrap_or_default(),
                    c.digest.clone(),
                ]);
            }
            print(&[text::table(&rows).trim_end().to_string()])
        }
        CheckpointCommand::Get { conn, id, output } => {
            let one = at(&["checkpoints", &id.to_string()]);
            let bytes = Api::new(&conn, None)?.get_bytes(&segments(&one))?;
            match output {
                Some(path) => {
                    std::fs::write(&path, &bytes)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    print(&[format!(
                        "wrote checkpoint {id} to {} ({} bytes)",
                        path.display(),
                        bytes.len()
                    )])
                }
                None => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&bytes)?;
                    out.flush()?;
                    Ok(())
                }
            }
        }
        CheckpointCommand::Restore {
            conn,
            id,
            file,
            json,
        } => {
            let api = Api::new(&conn, None)?;
            let body = match (id, file) {
                (_, Some(path)) => {
                    // Streamed from disk: a checkpoint of any size.
                    let file = std::fs::File::open(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    let len = file
                        .metadata()
                        .with_context(|| format!("cannot read {}", path.display()))?
                        .len();
                    api.post_file(&segments(&at(&["restore"])), "application/json", file, len)?
                }
                (Some(id), None) => {
                    let one = at(&["checkpoints", &id.to_string(), "restore"]);
                    api.post_text(&segments(&one), "", None)?
                }
                (None, None) => anyhow::bail!("give a checkpoint id or --file FILE"),
            };
            if json.json {
                return print(&[body]);
            }
            let r: Restored = parse(&body)?;
            let late = r.late.map_or(String::new(), |l| format!(", late {l}"));
            print(&[format!(
                "restored: sequence {}{late}, watermark {}",
                r.sequence,
                text::opt(r.watermark)
            )])
        }
        CheckpointCommand::Delete { conn, id } => {
            let one = at(&["checkpoints", &id.to_string()]);
            Api::new(&conn, None)?.delete(&segments(&one))?;
            print(&[format!("deleted checkpoint {id}")])
        }
    }
}

/// A route's segments as [`Api`] takes them.
fn segments(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Prints the changes of a `/watermarks` or idle answer, then a summary line.
fn tick(body: &str, json: Json) -> anyhow::Result<()> {
    if json.json {
        return print(&[body.to_string()]);
    }
    let t: wire::Ticked = parse(body)?;
    let mut lines: Vec<String> = t.changes.iter().map(text::change).collect();
    lines.push(format!(
        "# watermark {}, {} changes, {} finalized",
        text::opt(t.watermark),
        t.changes.len(),
        t.finalized.len()
    ));
    print(&lines)
}

/// One item as its readable line or its JSON.
fn item<T: serde::Serialize>(
    v: &T,
    json: bool,
    line: impl Fn(&T) -> String,
) -> anyhow::Result<String> {
    Ok(if json {
        serde_json::to_string(v)?
    } else {
        line(v)
    })
}

/// One page as [`pages`] walks it.
struct Fetched {
    lines: Vec<String>,
    next: u64,
    head: u64,
    epoch: u64,
    rewound_to: Option<u64>,
}

/// Walks `/changes`- or `/late`-style pages from `--after`. `fetch` gets the
/// query and returns the page. Without `--follow` it stops at the head;
/// with it, it long-polls (`wait_ms=30000`) forever. Every page after the
/// first names the epoch of its position, so a restore in between (or
/// several) is seen: the server answers from the rewind point, and the
/// command says plainly that what it printed after that point is void.
fn pages(
    paging: &Paging,
    mut fetch: impl FnMut(&[(&str, String)]) -> anyhow::Result<Fetched>,
) -> anyhow::Result<()> {
    let mut after = paging.after;
    let mut epoch: Option<u64> = None;
    let mut wait = false;
    loop {
        let mut query = vec![
            ("after", after.to_string()),
            ("limit", paging.limit.to_string()),
        ];
        if let Some(e) = epoch {
            query.push(("epoch", e.to_string()));
        }
        if wait {
            query.push(("wait_ms", "30000".to_string()));
        }
        let page = fetch(&query)?;
        if let Some(r) = page.rewound_to {
            eprintln!("{}", rewind_note(page.epoch, r));
            // and on stdout, in its place, so that a pipe learns of it too
            print(&[if paging.json {
                // as `changes --follow --json` writes it
                format!(r#"{{"rewind":{{"epoch":{},"after":{r}}}}}"#, page.epoch)
            } else {
                follow::rewind_marker(page.epoch, r)
            }])?;
        }
        epoch = Some(page.epoch);
        print(&page.lines)?;
        if !page.lines.is_empty() || page.rewound_to.is_some() {
            after = page.next;
            wait = false;
            if paging.follow || page.next < page.head {
                continue;
            }
        }
        if !paging.follow {
            return Ok(());
        }
        wait = true;
    }
}

/// The note printed when a restore rewound what a command follows.
pub(crate) fn rewind_note(epoch: u64, after: u64) -> String {
    format!(
        "streamforge: the service was restored to an earlier checkpoint (epoch {epoch}): \
         everything printed after sequence {after} is void; reading again from {after}"
    )
}

/// Writes lines to stdout and flushes (followers see each page at once).
fn print(lines: &[String]) -> anyhow::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    for l in lines {
        out.write_all(l.as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
