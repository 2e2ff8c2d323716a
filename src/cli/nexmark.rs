//! `streamforge nexmark`: writes a Nexmark demo stream (people, auctions,
//! bids) as an operation file on standard output, for `streamforge send`
//! and the benchmarks. The generator is [`crate::nexmark`].

use std::io::Write as _;

use clap::Args;

use crate::nexmark::{Config, Query, Workload};

/// Flags of `streamforge nexmark`.
#[derive(Debug, Clone, Args)]
pub struct NexmarkArgs {
    /// Seed: the same flags always write the same file.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Source events (people, auctions and bids in the proportions 1:3:46);
    /// the query keeps some of them.
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
    /// Partitions p0 .. p{N-1}; an event goes to one by a hash of its entity
    /// (a person's id, an auction's id; a bid goes with its auction).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub partitions: u32,
    /// Which deliveries, keys and values to write: q5 (bids by auction,
    /// value the price), q7 (each bid under its auction and under "*"), q8
    /// (people by city, value the person id), q11 and q12 (bids by bidder,
    /// value the price). The pipelines are in pipelines/ (README there).
    #[arg(long, default_value = "q5", value_parser = ["q5", "q7", "q8", "q11", "q12"])]
    pub query: String,
    /// Event-time milliseconds between consecutive source events.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i64).range(0..=1_000_000_000))]
    pub interval_ms: i64,
    /// Largest number of milliseconds an event's time lies before its
    /// position's time (bounded disorder); each partition's watermark stays
    /// this far behind the latest time it delivered.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(i64).range(0..=1_000_000_000))]
    pub disorder_ms: i64,
    /// Let each partition's watermark run this many milliseconds ahead of
    /// the safe bound: events then arrive up to this far behind the
    /// watermark and correct published windows; none is late for a
    /// pipeline whose lateness is at least this (the pipelines in
    /// pipelines/ have 1000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i64).range(0..=1_000_000_000))]
    pub lead_ms: i64,
    /// Source events between two rounds of watermark advances.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub watermark_every: u64,
    /// Leave the offsets out (append mode).
    #[arg(long)]
    pub append: bool,
    /// Make every N-th delivery late, moved --late-by-ms back (0: no event
    /// is ever late, whatever the lateness).
    #[arg(long, default_value_t = 0)]
    pub late_every: u64,
    /// How far back a late event is moved.
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(i64).range(0..=1_000_000_000_000))]
    pub late_by_ms: i64,
}

/// Writes the workload to standard output.
pub fn run(a: &NexmarkArgs) -> anyhow::Result<()> {
    let query =
        Query::from_name(&a.query).ok_or_else(|| anyhow::anyhow!("unknown query {:?}", a.query))?;
    let workload = Workload::new(Config {
        seed: a.seed,
        events: a.events,
        partitions: a.partitions,
        query,
        interval: a.interval_ms,
        disorder: a.disorder_ms,
        watermark_every: a.watermark_every,
        lead: a.lead_ms,
        late_every: a.late_every,
        late_by: a.late_by_ms,
    });
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    for op in workload {
        out.write_all(op.to_line(!a.append).as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
