//! `changes --follow`: the changelog as server-sent events
//! (`GET /changes/stream`), printed as they come, until Ctrl-C.
//!
//! A restore (or a server shutdown) ends the stream. The client reconnects
//! once at once with `Last-Event-ID` set to the last change it printed; when a
//! restore has cut the changelog back below that, the server continues from
//! its new head, so the changes that follow the restore are printed even
//! where they reuse sequence numbers already shown. (Changes made between the
//! end of the stream and the reconnect, at positions already shown, are the
//! one thing this cannot see.) Each resumption is noted on stderr. A
//! reconnect that fails ends the command with the error.

use std::io::{BufRead, BufReader};

use anyhow::Context as _;

use super::http::{parse, Api};
use super::wire::Change;
use super::{item, print, text};

/// Follows the changelog from `after`; returns only on an error.
pub fn changes(api: &Api, after: u64, json: bool) -> anyhow::Result<()> {
    let mut last: Option<u64> = None;
    let mut reconnect = false;
    loop {
        let headers: Vec<(&str, String)> = last
            .map(|s| ("last-event-id", s.to_string()))
            .into_iter()
            .collect();
        let resp = api.get_response(
            &["changes", "stream"],
            &[("after", after.to_string())],
            &headers,
        )?;
        if reconnect {
            eprintln!(
                "streamforge: the change stream ended (a restore or a restart) and was resumed after {}",
                last.unwrap_or(after)
            );
        }
        reconnect = true;
        let mut data = String::new();
        for line in BufReader::new(resp).lines() {
            let line = match line {
                Ok(l) => l,
                // A cut connection ends the stream like a clean end does.
                Err(_) => break,
            };
            if line.is_empty() {
                if !data.is_empty() {
                    let change: Change = parse(&data).context("a server-sent event")?;
                    last = Some(change.seq);
                    print(&[item(&change, json, text::change)?])?;
                    data.clear();
                }
            } else if let Some(d) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            }
            // `id:`, `event:`, `retry:` and `:` comments (heartbeats) need nothing.
        }
    }
}
