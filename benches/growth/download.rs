//! The last checkpoint downloaded (`GET /checkpoints/{id}`) into a file
//! while the server's RSS is watched; the file's digest checked and the
//! file verified with `streamforge verify`.

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::http_support::proc_kib;
use super::report::mb;
use super::rss::{RssWatch, SAMPLE_EVERY};
use super::server::Created;
use super::setup::Bench;

/// The download's figures.
pub struct Download {
    pub file: PathBuf,
    id: i64,
    status: u16,
    len: u64,
    secs: f64,
    rss_before: u64,
    /// Of the sampled and the kernel's peaks, the larger.
    peak: u64,
    sampled: u64,
    hwm: u64,
    /// Peak over the RSS before.
    pub delta: u64,
    digest: String,
    sha_ok: bool,
    verified: bool,
    verify_secs: f64,
}

impl Download {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "download", "checkpoint_id": self.id, "status": self.status, "bytes": self.len,
            "secs": self.secs, "rss_bytes_before": self.rss_before, "rss_bytes_peak": self.peak,
            "rss_bytes_peak_sampled": self.sampled, "rss_bytes_hwm": self.hwm,
            "rss_bytes_delta": self.delta, "sha256": self.digest, "sha256_matches": self.sha_ok,
            "verified": self.verified, "verify_secs": self.verify_secs,
        })
    }
}

/// Downloads checkpoint `last` of the running server, prints the figures,
/// checks the digest and verifies the file.
pub fn last_checkpoint(b: &mut Bench, last: &Created) -> Download {
    let id = last.id;
    let pid = b.server.get().pid();
    let file = b.tmp.path().join(format!("checkpoint-{id}.json"));
    let rss_before = proc_kib(pid, "VmRSS");
    // the kernel's peak (VmHWM) starts again from the current RSS
    let hwm_reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
    let watch = RssWatch::start(pid, rss_before);
    let t = Instant::now();
    let (status, len) = {
        let mut f = BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(&file).expect("create the download file"),
        );
        let r = b.conn.download(&format!("/checkpoints/{id}"), &mut f);
        f.flush().expect("write the download file");
        r
    };
    let secs = t.elapsed().as_secs_f64();
    let sampled = watch.stop();
    let hwm = if hwm_reset { proc_kib(pid, "VmHWM") } else { 0 };
    let peak = sampled.max(hwm);
    let delta = peak.saturating_sub(rss_before);
    let digest = sha256_of(&file);
    let carried = carried_digest(&file);
    let sha_ok = carried == last.digest;
    println!();
    println!(
        "download: GET /checkpoints/{id}: {status}, {:.1} MB in {secs:.3} s; server RSS {:.1} MB before, peak {:.1} MB ({}), +{:.1} MB (target < 64 MB)",
        mb(len as f64),
        mb(rss_before as f64),
        mb(peak as f64),
        if hwm_reset {
            format!(
                "VmHWM after reset {:.1} MB, sampled every {} ms {:.1} MB",
                mb(hwm as f64),
                SAMPLE_EVERY.as_millis(),
                mb(sampled as f64)
            )
        } else {
            format!("sampled every {} ms", SAMPLE_EVERY.as_millis())
        },
        mb(delta as f64)
    );
    println!(
        "digest the file carries {carried} {} the POST's {} (sha256 of the file {digest})",
        if sha_ok { "==" } else { "!=" },
        last.digest
    );
    let (verified, verify_secs) = verify(&b.bin, &file);
    Download {
        file,
        id,
        status,
        len,
        secs,
        rss_before,
        peak,
        sampled,
        hwm,
        delta,
        digest,
        sha_ok,
        verified,
        verify_secs,
    }
}

/// The SHA-256 of a file, in hex.
fn sha256_of(file: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(file).expect("open the download");
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("read the download");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest the file carries (`{"digest":"<64 hex>",...`).
fn carried_digest(file: &Path) -> String {
    let mut head = [0u8; 75];
    let mut f = std::fs::File::open(file).expect("open the download");
    f.read_exact(&mut head).expect("read the download");
    String::from_utf8_lossy(&head[11..]).into_owned()
}

/// `streamforge verify FILE`, timed, its output printed; whether it
/// verified, and its seconds.
fn verify(bin: &Path, file: &Path) -> (bool, f64) {
    let t = Instant::now();
    let v = Command::new(bin)
        .arg("verify")
        .arg(file)
        .output()
        .expect("run streamforge verify");
    let verify_secs = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&v.stdout);
    let verified = v.status.success() && stdout.starts_with("valid checkpoint");
    println!(
        "streamforge verify: {} in {verify_secs:.3} s ({})",
        if verified { "verified" } else { "NOT verified" },
        v.status
    );
    for l in stdout
        .lines()
        .chain(String::from_utf8_lossy(&v.stderr).lines())
    {
        println!("    {l}");
    }
    (verified, verify_secs)
}
