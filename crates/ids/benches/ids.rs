//! The id index (`streamforge-ids`) at scale: flushes, lookups, bytes per entry.
//!
//! `cargo bench --bench ids` adds 10,000,000 entries (random 64-bit hashes,
//! splitmix64; positions 0, 1, 2, ...) in batches of 262,144, each batch
//! flushed (and merged) with its mark on a writing connection set up as the
//! service.s (4 KiB pages, WAL, `synchronous = FULL`), then looks up
//! 1,000,000 absent hashes and 1,000,000 present ones through a second,
//! reading connection, as the processor would.
//!
//! Printed: flush time (total, mean, the slowest flush with its merge), runs,
//! the lent transactions (how many; the longest, the 99th and 50th
//! percentiles, the time held in all of them: what the service's other
//! commits would wait behind), lookups/s absent and present, the share of
//! absent lookups that read a part (filter false positives), bytes per entry
//! on disk (the database's used pages; part blobs and filters apart) and
//! memory bytes per entry.
//!
//! Each flush lends the writing connection per transaction as the service
//! does (`IdFlusher::flush_with`); the lender times each transaction
//! (including any WAL checkpoint SQLite runs at its commit).
//!
//! Times are wall clock and this thread's CPU time (the honest figure on a
//! shared machine; flushes also wait for fsyncs).
//!
//! Environment: `BENCH_ENTRIES=N` (default 10,000,000), `BENCH_BATCH=B`
//! (default 262,144), `BENCH_LOOKUPS=L` (default 1,000,000), `BENCH_MMAP=BYTES`
//! (`PRAGMA mmap_size` of the reading connection; default 0, SQLite's),
//! `BENCH_TX_BYTES=B` (bytes per short transaction; default the index's,
//! `TRANSACTION_BYTES`).

use std::time::{Duration, Instant};

use rusqlite::Connection;
use streamforge_ids::{IdIndex, SCHEMA, TRANSACTION_BYTES};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// CPU time of this thread in seconds (`/proc/thread-self/schedstat`), so
/// that a busy shared machine shows as wall time, not as index cost.
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |ns| ns / 1e9)
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The hash of entry `i` (its position is `i`).
fn hash_of(i: u64) -> u64 {
    splitmix(i)
}

fn connect(path: &std::path::Path) -> Connection {
    let conn = Connection::open(path).expect("open");
    conn.pragma_update(None, "page_size", 4096)
        .expect("page_size");
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .expect("wal");
    assert_eq!(mode, "wal");
    conn.pragma_update(None, "synchronous", "FULL")
        .expect("synchronous");
    conn
}

fn main() {
    let n = env("BENCH_ENTRIES", 10_000_000);
    let batch = env("BENCH_BATCH", 262_144).max(1);
    let lookups = env("BENCH_LOOKUPS", 1_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ids.db");
    let mut writer = connect(&path);
    writer.execute_batch(SCHEMA).expect("schema");
    let reader = connect(&path);
    let mmap = env("BENCH_MMAP", 0);
    if mmap > 0 {
        reader
            .pragma_update(None, "mmap_size", mmap as i64)
            .expect("mmap_size");
    }
    let mut index = IdIndex::open(&reader).expect("open");
    let tx_bytes = env("BENCH_TX_BYTES", TRANSACTION_BYTES as u64);
    index.set_transaction_bytes(tx_bytes as usize);
    let flusher = index.flusher();
    // every lent transaction's time
    let mut lent: Vec<Duration> = Vec::new();

    let mut flush_total = Duration::ZERO;
    let mut flush_cpu = 0.0;
    let mut slowest = Duration::ZERO;
    let mut max_runs = 0;
    let mut flushes = 0;
    let mut done = 0;
    while done < n {
        let k = batch.min(n - done);
        index.add((done..done + k).map(|i| (hash_of(i), i)));
        done += k;
        let t = Instant::now();
        let cpu = cpu_seconds();
        index.seal(done);
        flusher
            .flush_with(&mut |work| {
                let t = Instant::now();
                let done = work(&mut writer);
                lent.push(t.elapsed());
                done
            })
            .expect("flush");
        flush_cpu += cpu_seconds() - cpu;
        let took = t.elapsed();
        flush_total += took;
        slowest = slowest.max(took);
        max_runs = max_runs.max(index.runs());
        flushes += 1;
    }
    println!(
        "{n} entries in {flushes} flushes of {batch}: {:.2} s flushing ({flush_cpu:.2} s CPU; \
         {:.0} entries/s), mean {:.0} ms, slowest {:.0} ms; {} runs (at most {max_runs})",
        flush_total.as_secs_f64(),
        n as f64 / flush_total.as_secs_f64(),
        flush_total.as_secs_f64() * 1000.0 / flushes as f64,
        slowest.as_secs_f64() * 1000.0,
        index.runs()
    );
    let held: Duration = lent.iter().sum();
    lent.sort_unstable();
    let at = |q: f64| {
        let i = ((lent.len() as f64 - 1.0) * q).round() as usize;
        lent.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "lent transactions ({} KiB each at most): {}; longest {:.1} ms, p99 {:.1} ms, \
         p50 {:.2} ms; held {:.2} s in all ({:.0}% of the flushing time)",
        tx_bytes >> 10,
        lent.len(),
        at(1.0),
        at(0.99),
        at(0.5),
        held.as_secs_f64(),
        held.as_secs_f64() * 100.0 / flush_total.as_secs_f64()
    );

    let q = |sql: &str| -> i64 { writer.query_row(sql, [], |r| r.get(0)).expect(sql) };
    let used = (q("PRAGMA page_count") - q("PRAGMA freelist_count")) * q("PRAGMA page_size");
    let parts = q("SELECT sum(length(data)) FROM id_parts");
    let filters = q("SELECT sum(length(data)) FROM id_filters");
    println!(
        "disk: {:.2} B/entry in used pages (part blobs {:.2}, filters {:.2}); \
         memory: {:.3} B/entry ({:.2} filter bits/entry)",
        used as f64 / n as f64,
        parts as f64 / n as f64,
        filters as f64 / n as f64,
        index.memory_bytes() as f64 / n as f64,
        index.filter_bits_per_entry()
    );

    look_up(&index, &reader, n, lookups);
}

/// Lookups of absent and present hashes through the reading connection,
/// then what `open` costs at this size.
fn look_up(index: &IdIndex, reader: &Connection, n: u64, lookups: u64) {
    // absent: hashes from another stream
    let absent: Vec<u64> = (0..lookups).map(|i| splitmix(!i ^ 0x5555)).collect();
    let mut out = Vec::new();
    let t = Instant::now();
    let cpu = cpu_seconds();
    let mut false_hits = 0;
    for &h in &absent {
        out.clear();
        index.lookup(reader, h, &mut out).expect("lookup");
        false_hits += out.len();
    }
    let absent_s = t.elapsed().as_secs_f64();
    let absent_cpu = cpu_seconds() - cpu;
    let reads: usize = absent.iter().map(|&h| index.filter_hits(h)).sum();
    println!(
        "absent: {:.0} lookups/s ({:.2} us each; CPU {:.2} us); {:.2}% of them read a part \
         ({:.3}% per run); {false_hits} positions returned",
        lookups as f64 / absent_s,
        absent_s * 1e6 / lookups as f64,
        absent_cpu * 1e6 / lookups as f64,
        reads as f64 * 100.0 / lookups as f64,
        reads as f64 * 100.0 / (lookups as f64 * index.runs() as f64)
    );

    // present: random entries
    let present: Vec<u64> = (0..lookups).map(|i| splitmix(i ^ 0xABCD) % n).collect();
    let t = Instant::now();
    let cpu = cpu_seconds();
    for &i in &present {
        out.clear();
        index.lookup(reader, hash_of(i), &mut out).expect("lookup");
        assert!(out.contains(&i), "entry {i} missed");
    }
    let present_s = t.elapsed().as_secs_f64();
    let present_cpu = cpu_seconds() - cpu;
    println!(
        "present: {:.0} lookups/s ({:.2} us each; CPU {:.2} us)",
        lookups as f64 / present_s,
        present_s * 1e6 / lookups as f64,
        present_cpu * 1e6 / lookups as f64
    );

    // reopen: what `open` costs at this size
    let t = Instant::now();
    let reopened = IdIndex::open(reader).expect("reopen");
    println!(
        "open: {:.0} ms ({} runs, mark {:?})",
        t.elapsed().as_secs_f64() * 1000.0,
        reopened.runs(),
        reopened.mark()
    );
}
