//! The downloaded envelope restored by body on a fresh server (read as it
//! streams: staged on disk, memory bounded), its RSS watched.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::http_support::{proc_kib, Server};
use super::report::mb;
use super::rss::RssWatch;
use super::setup::Bench;

pub struct Restore {
    ok: bool,
    secs: f64,
    before: u64,
    peak: u64,
}

impl Restore {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "restore", "ok": self.ok, "secs": self.secs,
            "rss_bytes_before": self.before, "rss_bytes_peak": self.peak,
        })
    }
}

/// `streamforge checkpoint restore --file FILE` to a fresh server on a new
/// database, timed, printed.
pub fn by_body(b: &Bench, file: &Path) -> Restore {
    let fresh = b.tmp.path().join("restored.db");
    let pipeline_file = b.pipeline.clone();
    let r = Server::start_bin(
        &b.bin,
        &fresh,
        &[
            "--pipeline".as_ref(),
            pipeline_file.as_os_str(),
            "--max-restore-bytes".as_ref(),
            "1099511627776".as_ref(),
            "--checkpoint-every".as_ref(),
            "0".as_ref(),
        ],
    );
    let rpid = r.child.id();
    let before = proc_kib(rpid, "VmRSS");
    let watch = RssWatch::start(rpid, before);
    let t = Instant::now();
    let out = Command::new(&b.bin)
        .args([
            "checkpoint",
            "restore",
            "--url",
            &format!("http://{}", r.addr),
            "--json",
            "--file",
        ])
        .arg(file)
        .output()
        .expect("run streamforge restore");
    let secs = t.elapsed().as_secs_f64();
    let peak = watch.stop();
    // (It was left running: its stdout kept the bench's pipe open.)
    r.kill9();
    let ok = out.status.success();
    println!(
        "restore by body (streamed) on a fresh server: {} in {secs:.1} s; server RSS {:.1} MB before, peak {:.1} MB, +{:.1} MB ({})",
        if ok { "restored" } else { "FAILED" },
        mb(before as f64),
        mb(peak as f64),
        mb(peak.saturating_sub(before) as f64),
        String::from_utf8_lossy(if ok { &out.stdout } else { &out.stderr }).trim()
    );
    Restore {
        ok,
        secs,
        before,
        peak,
    }
}
