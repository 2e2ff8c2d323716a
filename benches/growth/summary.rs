//! The summary: the targets beside the figures (it asserts
//! nothing).

use super::ingest::{Restart, Tenth};
use super::report::{mb, Report};

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "n/a".into()
    }
}

/// A row of the table: what, the figures, the target (empty: informative).
type Row = (String, String, &'static str);

/// The figures the rows compare.
struct Ends<'a> {
    /// The first tenth.
    f: &'a Tenth,
    /// The next to last tenth.
    prev: &'a Tenth,
    /// The last tenth.
    l: &'a Tenth,
    /// The first restart.
    r0: &'a Restart,
    /// The last restart.
    r1: &'a Restart,
    rss_growth: f64,
    disk_per_event: f64,
    /// The server's RSS over its level before, during the download.
    delta: u64,
}

/// Prints the table and writes its ratios.
pub fn summary(
    report: &mut Report,
    tenths: &[Tenth],
    restarts: &[Restart],
    delta: u64,
    cpu_total: f64,
) {
    let f = &tenths[0];
    let l = tenths.last().expect("ten tenths");
    let rss_growth = (l.rss as f64 - f.rss as f64) / (l.events - f.events).max(1) as f64;
    let disk_per_event = l.disk as f64 / l.events as f64;
    let (r0, r1) = (&restarts[0], restarts.last().expect("two restarts"));
    println!();
    println!(
        "summary (first tenth = {} events, last = {} events):",
        f.events, l.events
    );
    let e = Ends {
        f,
        prev: &tenths[tenths.len() - 2],
        l,
        r0,
        r1,
        rss_growth,
        disk_per_event,
        delta,
    };
    let mut rows = with_targets(&e);
    rows.extend(informative(&e));
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let vwidth = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    for (name, value, target) in &rows {
        if target.is_empty() {
            println!("  {name:<width$}  {value}");
        } else {
            println!("  {name:<width$}  {value:<vwidth$}  target {target}");
        }
    }
    report.json(serde_json::json!({
        "kind": "summary",
        "first_events": f.events, "last_events": l.events,
        "rss_growth_bytes_per_event": rss_growth,
        "checkpoint_write_ratio": l.ck.write_bytes as f64 / f.ck.write_bytes.max(1) as f64,
        "checkpoint_time_ratio": l.ck.secs / f.ck.secs,
        "restart_ratio": r1.ready / r0.ready,
        "list_time_ratio": l.list_secs / f.list_secs,
        "ingest_rate_ratio": l.rate / f.rate,
        "disk_bytes_per_event": disk_per_event,
        "download_rss_delta_bytes": delta,
        "envelope_ratio": l.ck.created.bytes as f64 / f.ck.created.bytes.max(1) as f64,
        "cpu_secs": cpu_total,
    }));
}

/// The rows with a target of the issue.
fn with_targets(e: &Ends<'_>) -> Vec<Row> {
    let (f, l, r0, r1) = (e.f, e.l, e.r0, e.r1);
    vec![
        (
            "RSS growth per event, first to last tenth".to_string(),
            format!(
                "{:.1} B/event ({:.1} -> {:.1} MB)",
                e.rss_growth,
                mb(f.rss as f64),
                mb(l.rss as f64)
            ),
            "<= 2 B/event",
        ),
        (
            "checkpoint bytes written, last / first".into(),
            format!(
                "{} ({:.1} -> {:.1} MB)",
                ratio(l.ck.write_bytes as f64, f.ck.write_bytes as f64),
                mb(f.ck.write_bytes as f64),
                mb(l.ck.write_bytes as f64)
            ),
            "<= 1.5x",
        ),
        (
            "checkpoint time, last / first".into(),
            format!(
                "{} ({:.3} -> {:.3} s)",
                ratio(l.ck.secs, f.ck.secs),
                f.ck.secs,
                l.ck.secs
            ),
            "<= 1.5x",
        ),
        (
            "GET /checkpoints time, last / first".into(),
            format!(
                "{} ({:.4} -> {:.4} s)",
                ratio(l.list_secs, f.list_secs),
                f.list_secs,
                l.list_secs
            ),
            "flat",
        ),
        (
            "restart to ready, last / first".into(),
            format!(
                "{} ({:.3} s after {} -> {:.3} s after {} events)",
                ratio(r1.ready, r0.ready),
                r0.ready,
                r0.after_events,
                r1.ready,
                r1.after_events
            ),
            "<= 2x",
        ),
        (
            "ingest rate, last / first tenth".into(),
            format!(
                "{} ({:.0} -> {:.0} events/s)",
                ratio(l.rate, f.rate),
                f.rate,
                l.rate
            ),
            ">= 0.9x",
        ),
        (
            "disk per event at the end".into(),
            format!(
                "{:.1} B/event ({:.1} MB)",
                e.disk_per_event,
                mb(l.disk as f64)
            ),
            "<= 100 B/event",
        ),
        (
            "server RSS during the checkpoint download".into(),
            format!("+{:.1} MB", mb(e.delta as f64)),
            "< 64 MB",
        ),
    ]
}

/// The informative rows (no target).
fn informative(e: &Ends<'_>) -> Vec<Row> {
    let (f, l, r0, r1) = (e.f, e.l, e.r0, e.r1);
    vec![
        (
            "envelope, last / first (informative)".into(),
            format!(
                "{} ({:.1} -> {:.1} MB)",
                ratio(l.ck.created.bytes as f64, f.ck.created.bytes as f64),
                mb(f.ck.created.bytes as f64),
                mb(l.ck.created.bytes as f64)
            ),
            "",
        ),
        (
            "RSS when ready after restart, last / first (informative)".into(),
            format!(
                "{} ({:.1} -> {:.1} MB)",
                ratio(r1.rss_ready as f64, r0.rss_ready as f64),
                mb(r0.rss_ready as f64),
                mb(r1.rss_ready as f64)
            ),
            "",
        ),
        (
            "server CPU per 1M events, last / first tenth (informative)".into(),
            {
                let first = f.cpu / f.events as f64 * 1e6;
                let last = (l.cpu - e.prev.cpu) / (l.events - e.prev.events) as f64 * 1e6;
                format!("{} ({first:.2} -> {last:.2} s)", ratio(last, first))
            },
            "",
        ),
    ]
}
