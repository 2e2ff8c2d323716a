//! Growth with the number of events received in a lifetime (issue 23,
//! point 5): a service that runs for months may grow its memory, its
//! checkpoint work and its restart time with its live state, never with the
//! number of events it has received. This bench feeds one real
//! `streamforge serve` a long stream whose live state is bounded (1,000 keys,
//! watermarks close behind the events) and prints, at every tenth of the
//! stream, what grows.
//!
//! ```sh
//! cargo bench --bench growth -- --events 200000            # quick: seconds
//! cargo bench --bench growth -- --events 8000000 --out target/growth-8m.jsonl
//! cargo bench --bench growth                               # 50,000,000 events
//! ```
//!
//! Flags (numbers may contain `_`): `--events N` (50,000,000), `--partitions
//! P` (1), `--keys K` (1,000), `--batch B` (1,000 deliveries per `POST
//! /events`), `--out FILE` (the figures also as JSON lines, one object per
//! tenth, restart, download and summary), `--bin PATH` (default:
//! `STREAMFORGE_BIN` or target/release/streamforge, built with `cargo build
//! --release --bin streamforge` when missing), `--kill-during-merge[=N]`
//! (each `kill -9` lands while the id index merges runs of at least N
//! entries, default 1,000,000: see below).
//!
//! The events are generated here, in the shape of `benches/gen_workload.py`
//! (its defaults: disorder 500, an advance every 1,000 events, no duplicates,
//! no late events): event i has id `e{i}`, key `k<uniform 0..K-1>`, value
//! uniform in [-1000, 1000] and timestamp T0 + i - jitter (jitter uniform in
//! [0, 500]); partitions round-robin with consecutive offsets; after every
//! 1,000th event every partition is advanced to (max timestamp - 500). The
//! random numbers come from a SplitMix64 of seed 42, not Python's: the same
//! shape, not the same file.
//!
//! The server runs on a fresh database in a temporary directory under
//! `BENCH_DIR` (default target/; a real disk, so `write_bytes` counts),
//! with the pipeline: partitions p0..p{P-1}, windows fixed 10 s, sliding
//! 10 s / 2 s, session 1 s, lateness 0; and its default flags otherwise
//! (automatic checkpoints every 1,000 logged commands, 3 kept), with
//! `MALLOC_ARENA_MAX=2` as the Dockerfile sets it (override it in the
//! environment). The events go as NDJSON batches of B (`Prefer:
//! return=minimal`, as `streamforge send` sends them), the pending batch is
//! sent before each advance, and each advance is one `POST /watermarks`: one
//! call at a time, in order, on one keep-alive connection.
//!
//! At every tenth of the stream one line: events so far; ingest rate over
//! the tenth (events / wall time of its calls, the automatic checkpoints
//! taken meanwhile included); server RSS (`VmRSS`); one `POST
//! /checkpoints`: the bytes the server wrote meanwhile (`write_bytes` of
//! `/proc/PID/io`; and `wchar`), its time and the envelope's `bytes`;
//! bytes on disk (database, -wal, -shm) and per event; server CPU seconds
//! (all server processes of the run; and of this tenth). The previous
//! tenth's checkpoint is deleted after each new one (checkpoints made with
//! `POST /checkpoints` are kept until deleted: ten envelopes would be the
//! bench's own growth, not the service's).
//!
//! After the first and the last tenth: `kill -9` and a new server on the same
//! database; spawn to `/readyz` 200 is the restart time, and the run goes
//! on with the new process. With `--kill-during-merge`, the bench first
//! goes on sending batches (of the same stream, counted in the next tenth)
//! until `/metrics` shows `streamforge_id_index_merging` of at least N
//! entries (a merge of the id index's runs in progress on the server's
//! merge thread), at most another tenth's worth, and kills it then.
//! `GET /checkpoints` (the listing) is timed at every tenth too. At the end: `GET /checkpoints/{id}` of the last
//! checkpoint into a file while the server's RSS is sampled (and its peak
//! kept by the kernel: `VmHWM` after resetting it with
//! `/proc/PID/clear_refs`), the file's SHA-256 against the one the `POST`
//! answered, `streamforge verify FILE` and its time, then a clean shutdown
//! (SIGTERM) and its time.
//!
//! The summary prints the issue's targets beside the figures; it asserts
//! nothing. MB are 10^6 bytes.
//!
//! The phases live in `benches/growth/`, one file each: `setup.rs` (the
//! directory, the configuration lines, the first server), `ingest.rs` (the
//! ten tenths with their kills and restarts), `download.rs` (the last
//! checkpoint's download, its RSS watch, digest and `verify`),
//! `restore.rs` (the restore by body on a fresh server) and `summary.rs`
//! (the table against the targets); beside them the flags (`args.rs`), the
//! stream (`workload.rs`), the server and its calls (`server.rs`, with the
//! clean shutdown), the RSS sampler (`rss.rs`) and the output (`report.rs`).

#[path = "support/http.rs"]
mod http_support;

#[path = "growth/args.rs"]
mod args;
#[path = "growth/download.rs"]
mod download;
#[path = "growth/ingest.rs"]
mod ingest;
#[path = "growth/report.rs"]
mod report;
#[path = "growth/restore.rs"]
mod restore;
#[path = "growth/rss.rs"]
mod rss;
#[path = "growth/server.rs"]
mod server;
#[path = "growth/setup.rs"]
mod setup;
#[path = "growth/summary.rs"]
mod summary;
#[path = "growth/workload.rs"]
mod workload;

fn main() {
    let a = args::parse_args();
    let bin = args::server_binary(&a);
    let mut b = setup::Bench::start(&a, bin);
    let (tenths, restarts) = ingest::ten_tenths(&a, &mut b);

    // the last checkpoint, downloaded while the server's RSS is watched,
    // then restored by body on a fresh server
    let last = &tenths.last().expect("ten tenths").ck.created;
    let download = download::last_checkpoint(&mut b, last);
    let restore = restore::by_body(&b, &download.file);
    b.report.json(restore.json());
    b.report.json(download.json());

    let cpu_total = server::shutdown(&mut b.server, b.cpu_before);
    summary::summary(&mut b.report, &tenths, &restarts, download.delta, cpu_total);
}
