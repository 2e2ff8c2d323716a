//! `streamforge sink add | list | show | remove`: the webhook sinks
//! (docs/sinks.md) over `/sinks`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::{json, Map, Value};

use super::http::{parse, Api};
use super::{print, text, Conn, Json};

/// The sink commands.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
pub enum SinkCommand {
    /// Add a sink: the service posts the records of a stream to URL, in
    /// order, batch by batch, until it answers 2xx (POST /sinks).
    Add {
        #[command(flatten)]
        conn: Conn,
        /// Unique name (1 to 64 of A-Z a-z 0-9 . _ -).
        name: String,
        /// The receiver's http(s) URL.
        #[arg(value_name = "URL")]
        receiver: String,
        /// The stream: changes, late or patterns.
        #[arg(long, default_value = "changes")]
        stream: String,
        /// Only changes of this window.
        #[arg(long)]
        window: Option<String>,
        /// Only changes (or late events) of this key.
        #[arg(long)]
        key: Option<String>,
        /// Only pattern output of this pattern.
        #[arg(long)]
        pattern: Option<String>,
        /// Only pattern output of this type (match or timeout).
        #[arg(long = "type")]
        kind: Option<String>,
        /// Records per request (1..=10000; the service's default is 100).
        #[arg(long)]
        batch_size: Option<u32>,
        /// Where to start: head (only what comes next), start (everything),
        /// or a sequence.
        #[arg(long)]
        start: Option<String>,
        /// An extra request header, `Name: value` (repeatable).
        #[arg(long = "header")]
        headers: Vec<String>,
        /// A file whose content (trailing newline removed) is the secret
        /// that signs the requests; or set STREAMFORGE_SINK_SECRET.
        #[arg(long, conflicts_with = "secret")]
        secret_file: Option<PathBuf>,
        /// The signing secret (prefer the environment variable or a file:
        /// a command line is visible to other users).
        #[arg(long, env = "STREAMFORGE_SINK_SECRET", hide_env_values = true)]
        secret: Option<String>,
        #[command(flatten)]
        json: Json,
    },
    /// List the sinks: name, stream, state, lag, cursor, URL.
    List {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        json: Json,
    },
    /// Show one sink: configuration (secret masked), cursor, head, lag,
    /// state, attempts, last error, last success.
    Show {
        #[command(flatten)]
        conn: Conn,
        /// The sink's name.
        name: String,
        #[command(flatten)]
        json: Json,
    },
    /// Remove a sink (its delivery stops; DELETE /sinks/{name}).
    Remove {
        #[command(flatten)]
        conn: Conn,
        /// The sink's name.
        name: String,
    },
}

fn show(v: &Value) -> String {
    let s = |k: &str| match &v[k] {
        Value::Null => "-".to_string(),
        Value::String(x) => x.clone(),
        other => other.to_string(),
    };
    let mut rows = Vec::new();
    for k in [
        "name",
        "url",
        "stream",
        "filter",
        "batch_size",
        "headers",
        "secret",
        "created_at",
        "epoch",
        "cursor",
        "head",
        "lag",
        "state",
        "attempts",
        "last_error",
        "last_success",
        "delivered",
        "failed",
    ] {
        rows.push(vec![k.replace('_', " "), s(k)]);
    }
    text::table(&rows).trim_end().to_string()
}

/// Runs a sink command.
// Over 120 lines: one arm per sink subcommand.
pub fn run(cmd: SinkCommand) -> anyhow::Result<()> {
    match cmd {
        SinkCommand::Add {
            conn,
            name,
            receiver,
            stream,
            window,
            key,
            pattern,
            kind,
            batch_size,
            start,
            headers,
            secret_file,
            secret,
            json,
        } => {
            let mut body = Map::new();
            body.insert("name".into(), json!(name));
            body.insert("url".into(), json!(receiver));
            body.insert("stream".into(), json!(stream));
            let mut filter = Map::new();
            for (k, v) in [
                ("window", window),
                ("key", key),
                ("pattern", pattern),
                ("type", kind),
            ] {
                if let Some(v) = v {
                    filter.insert(k.into(), json!(v));
                }
            }
            if !filter.is_empty() {
                body.insert("filter".into(), Value::Object(filter));
            }
            if let Some(b) = batch_size {
                body.insert("batch_size".into(), json!(b));
            }
            if let Some(s) = start {
                let v = match s.parse::<u64>() {
                    Ok(n) => json!(n),
                    Err(_) => json!(s),
                };
                body.insert("start".into(), v);
            }
            if !headers.is_empty() {
                let mut h = Map::new();
                for line in &headers {
                    let (k, v) = line
                        .split_once(':')
                        .with_context(|| format!("--header {line:?}: expected `Name: value`"))?;
                    h.insert(k.trim().to_string(), json!(v.trim()));
                }
                body.insert("headers".into(), Value::Object(h));
            }
            let secret = match (secret_file, secret) {
                (Some(path), _) => Some(
                    std::fs::read_to_string(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?
                        .trim_end_matches(['\r', '\n'])
                        .to_string(),
                ),
                (None, s) => s,
            };
            if let Some(s) = secret {
                body.insert("secret".into(), json!(s));
            }
            let answer = Api::new(&conn, None)?.post_text(
                &["sinks"],
                "application/json",
                Some(serde_json::to_vec(&Value::Object(body))?),
            )?;
            if json.json {
                return print(&[answer]);
            }
            let v: Value = parse(&answer)?;
            print(&[format!(
                "sink {} added: {} stream from sequence {} of epoch {}",
                v["name"].as_str().unwrap_or(""),
                v["stream"].as_str().unwrap_or(""),
                v["cursor"],
                v["epoch"]
            )])
        }
        SinkCommand::List { conn, json } => {
            let answer = Api::new(&conn, None)?.get_text(&["sinks"], &[])?;
            if json.json {
                return print(&[answer]);
            }
            let v: Value = parse(&answer)?;
            let mut rows = vec![vec![
                "name".to_string(),
                "stream".into(),
                "state".into(),
                "lag".into(),
                "cursor".into(),
                "url".into(),
            ]];
            for s in v["sinks"].as_array().into_iter().flatten() {
                rows.push(vec![
                    s["name"].as_str().unwrap_or("").to_string(),
                    s["stream"].as_str().unwrap_or("").to_string(),
                    s["state"].as_str().unwrap_or("").to_string(),
                    s["lag"].to_string(),
                    format!("{}:{}", s["epoch"], s["cursor"]),
                    s["url"].as_str().unwrap_or("").to_string(),
                ]);
            }
            print(&[text::table(&rows).trim_end().to_string()])
        }
        SinkCommand::Show { conn, name, json } => {
            let answer = Api::new(&conn, None)?.get_text(&["sinks", &name], &[])?;
            if json.json {
                return print(&[answer]);
            }
            let v: Value = parse(&answer)?;
            print(&[show(&v)])
        }
        SinkCommand::Remove { conn, name } => {
            Api::new(&conn, None)?.delete(&["sinks", &name])?;
            print(&[format!("removed sink {name}")])
        }
    }
}
