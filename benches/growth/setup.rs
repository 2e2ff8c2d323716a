//! The run's setup: its directory, database and pipeline under
//! `BENCH_DIR`, the `--out` file, the configuration lines, and the first
//! server; and what the phases share afterwards.

use std::io::BufWriter;
use std::path::{Path, PathBuf};

use super::args::Args;
use super::http_support::{pipeline_json, Conn};
use super::report::Report;
use super::server::{start, Running};
use super::workload::{DISORDER, WM_EVERY};

/// What the phases of the run share: the server in its current process,
/// the connection to it, the files and the tallies. (The fields drop in
/// order: the server is killed before its directory is removed.)
pub struct Bench {
    pub conn: Conn,
    pub server: Running,
    /// CPU seconds of the killed servers.
    pub cpu_before: f64,
    pub report: Report,
    pub bin: PathBuf,
    pub db: PathBuf,
    pub pipeline: PathBuf,
    pub tmp: tempfile::TempDir,
}

impl Bench {
    /// Prints the configuration (and writes it with `--out`) and starts the
    /// first server on a fresh database.
    pub fn start(a: &Args, bin: PathBuf) -> Bench {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let base_dir =
            std::env::var("BENCH_DIR").map_or_else(|_| root.join("target"), PathBuf::from);
        std::fs::create_dir_all(&base_dir).expect("create BENCH_DIR");
        let tmp = tempfile::Builder::new()
            .prefix("bench-growth-")
            .tempdir_in(&base_dir)
            .expect("temp dir");
        let db = tmp.path().join("growth.db");
        let pipeline = tmp.path().join("pipeline.json");
        std::fs::write(&pipeline, pipeline_json(a.partitions)).expect("write the pipeline");
        let mut report = Report {
            out: a.out.as_ref().map(|p| {
                BufWriter::new(
                    std::fs::File::create(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
                )
            }),
        };

        println!(
            "growth: {} events, {} partition(s), {} keys, batches of {}, advance every {WM_EVERY} events (disorder {DISORDER} ms)",
            a.events, a.partitions, a.keys, a.batch
        );
        println!(
            "server: {} serve --db {} --pipeline (fixed 10s, sliding 10s/2s, session 1s, lateness 0), default flags; MALLOC_ARENA_MAX={}",
            bin.display(),
            db.display(),
            std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "2".into())
        );
        report.json(serde_json::json!({
            "kind": "config", "events": a.events, "partitions": a.partitions, "keys": a.keys,
            "batch": a.batch, "bin": bin.display().to_string(),
            "pipeline": serde_json::from_str::<serde_json::Value>(&pipeline_json(a.partitions)).expect("json"),
        }));

        let first = start(&bin, &db, &pipeline);
        println!(
            "started pid {} on {} (ready after {:.3} s)",
            first.pid(),
            first.addr,
            first.ready_after.as_secs_f64()
        );
        let server = Running(Some(first));
        let conn = Conn::new(&server.get().addr);
        Bench {
            conn,
            server,
            cpu_before: 0.0,
            report,
            bin,
            db,
            pipeline,
            tmp,
        }
    }
}
