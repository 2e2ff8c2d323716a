//! `--follow` over server-sent events: `changes --follow`
//! (`GET /changes/stream`) and `patterns output --follow`
//! (`GET /patterns/output/stream`), printed as they come, until Ctrl-C.
//!
//! Each event's id is `<epoch>:<seq>`. When the service is restored to an
//! earlier checkpoint, the stream sends `event: rewind` (`{"epoch": E,
//! "after": R}`) and continues with the records after `R` of the new epoch:
//! the command says on stderr that what it printed after `R` is void, marks
//! the point on stdout too, between the records before it and the ones after
//! (`# rewind: epoch E, cut back to sequence R: the lines printed after R are
//! void`; with `--json`, `{"rewind":{"epoch":E,"after":R}}`), and prints the
//! new history from there. When
//! the stream ends (a restart), it reconnects with `Last-Event-ID` set to the
//! last id it saw, so nothing is missed or repeated; a restore that happened
//! meanwhile arrives as a rewind. A reconnect that fails ends the command
//! with the error.
//!
//! `--also URL` follows other instances too (instances sharing a Kafka
//! topic each serve their share of the keys): one connection and one cursor
//! per instance, their records printed as they come, each line naming its
//! instance.

use std::io::{BufRead, BufReader};

use anyhow::Context as _;
use serde::Deserialize;

use super::http::{parse, Api};
use super::wire::Change;
use super::{item, print, rewind_note, text, Conn, Paging};

/// The line that marks a rewind on stdout in plain output (a `#` note, as
/// the summaries of other commands are): what was printed after `after`
/// is void, and what follows is epoch `epoch`'s history from `after`.
pub(super) fn rewind_marker(epoch: u64, after: u64) -> String {
    format!("# rewind: epoch {epoch}, cut back to sequence {after}: the lines printed after {after} are void")
}

/// The data of an `event: rewind`.
#[derive(Debug, Deserialize, serde::Serialize)]
struct Rewind {
    epoch: u64,
    after: u64,
}

/// The route of an output stream to follow (its SSE endpoint), what the
/// reconnect note calls it and how one record prints.
pub struct StreamRoute<'a> {
    /// The route's path segments (`["changes", "stream"]`).
    pub segments: &'a [&'a str],
    /// What the reconnect note calls it (`change stream`).
    pub name: &'a str,
    /// One record's `data:` (its JSON) as the line to print.
    pub render: &'a (dyn Fn(&str) -> anyhow::Result<String> + Sync),
}

/// `--also` without `--follow` is refused (pages are per instance).
pub fn only_with_follow(paging: &Paging) -> anyhow::Result<()> {
    if paging.also.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("--also needs --follow (pages are read from one instance)")
    }
}

/// Follows the changelog from `after` (of `conn`'s instance and the
/// `also` ones); returns only on an error.
pub fn changes(conn: &Conn, also: &[String], after: u64, json: bool) -> anyhow::Result<()> {
    let render = |data: &str| -> anyhow::Result<String> {
        let change: Change = parse(data)?;
        item(&change, json, text::change)
    };
    follow_all(
        conn,
        also,
        &StreamRoute {
            segments: &["changes", "stream"],
            name: "change stream",
            render: &render,
        },
        after,
        json,
    )
}

/// Follows `stream` of `conn`'s instance, and of the `also` ones (each
/// from `after`, in a thread of its own); returns on the first error.
pub fn follow_all(
    conn: &Conn,
    also: &[String],
    stream: &StreamRoute<'_>,
    after: u64,
    json: bool,
) -> anyhow::Result<()> {
    if also.is_empty() {
        return follow(&Api::new(conn, None)?, stream, after, json, None);
    }
    let mut apis = Vec::new();
    for url in std::iter::once(&conn.url).chain(also) {
        let c = Conn {
            url: url.clone(),
            token: conn.token.clone(),
        };
        apis.push((url.clone(), Api::new(&c, None)?));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for (url, api) in &apis {
            let tx = tx.clone();
            scope.spawn(move || {
                let r = follow(api, stream, after, json, Some(url))
                    .with_context(|| format!("following {url}"));
                let _ = tx.send(r);
            });
        }
        drop(tx);
        // The first to end ends the command (each runs until an error).
        match rx.recv() {
            Ok(r) => r.and_then(|()| anyhow::bail!("a stream ended")),
            Err(_) => anyhow::bail!("no stream to follow"),
        }
        .map_err(|e| {
            // The others follow on forever: this process ends with the error.
            eprintln!("streamforge: error: {e:#}");
            std::process::exit(1)
        })
    })
}

/// A line of instance `url`: text prefixed with it, a JSON object with an
/// `"instance"` field first.
fn tagged(line: String, instance: Option<&str>, json: bool) -> String {
    match instance {
        None => line,
        Some(url) if json => match line.strip_prefix('{') {
            Some(rest) => format!(
                "{{\"instance\":{},{rest}",
                serde_json::Value::String(url.to_string())
            ),
            None => line,
        },
        Some(url) => format!("{url}  {line}"),
    }
}

/// Follows `stream` from `after`; returns only on an error. Lines name
/// `instance` when several are followed.
pub fn follow(
    api: &Api,
    stream: &StreamRoute<'_>,
    after: u64,
    json: bool,
    instance: Option<&str>,
) -> anyhow::Result<()> {
    let mut last: Option<String> = None;
    let mut reconnect = false;
    loop {
        let headers: Vec<(&str, String)> = last
            .iter()
            .map(|id| ("last-event-id", id.clone()))
            .collect();
        let resp = api.get_response(stream.segments, &[("after", after.to_string())], &headers)?;
        if reconnect {
            eprintln!(
                "streamforge: the {} ended (a restart) and was resumed after {}",
                stream.name,
                last.as_deref().unwrap_or("0")
            );
        }
        reconnect = true;
        let (mut data, mut id, mut event) = (String::new(), None::<String>, String::new());
        for line in BufReader::new(resp).lines() {
            let line = match line {
                Ok(l) => l,
                // A cut connection ends the stream like a clean end does.
                Err(_) => break,
            };
            if line.is_empty() {
                if !data.is_empty() {
                    if event == "rewind" {
                        let r: Rewind = parse(&data).context("a rewind event")?;
                        eprintln!("{}", tagged(rewind_note(r.epoch, r.after), instance, false));
                        // On stdout too, in its place among the records: a
                        // pipe reading stdout learns where its lines became void.
                        let line = if json {
                            serde_json::json!({ "rewind": r }).to_string()
                        } else {
                            rewind_marker(r.epoch, r.after)
                        };
                        print(&[tagged(line, instance, json)])?;
                    } else {
                        let line = (stream.render)(&data).context("a server-sent event")?;
                        print(&[tagged(line, instance, json)])?;
                    }
                    if let Some(i) = id.take() {
                        last = Some(i);
                    }
                }
                data.clear();
                event.clear();
            } else if let Some(d) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            } else if let Some(v) = line.strip_prefix("id:") {
                id = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("event:") {
                event = v.trim().to_string();
            }
            // `retry:` and `:` comments (heartbeats) need nothing.
        }
    }
}
