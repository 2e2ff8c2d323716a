//! Differential test: the engine against the naive reference model of
//! docs/semantics.md (`tests/it/support/reference.rs`), over seeded random operation sequences.
//!
//! `MODEL_SEQUENCES=N` (default 20000) and `MODEL_SEED=S` (default 1) choose
//! how many sequences run and the first seed; sequence `i` uses seed `S + i`.
//! `MODEL_THREADS=T` overrides the number of worker threads, `MODEL_MAX_OPS=K`
//! the longest sequence (default 60 ops; sequences have 20..=K ops) and
//! `MODEL_MAX_FAILURES=F` how many failing seeds are reported (default 5).
//! On a mismatch the test prints the seed, the pipeline, the op index, the op,
//! both outputs, and a greedily shrunk op list that still fails.

use crate::support::reference;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use reference::Model;
use streamforge::engine::history::MemHistory;
use streamforge::engine::{Delivery, Event, Pipeline, Processor, WindowDef};

// ----------------------------------------------------------------------
// PRNG: splitmix64.

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    /// Uniform in [lo, hi] (inclusive).
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi as i128 - lo as i128 + 1) as u128;
        (lo as i128 + (self.next() as u128 % span) as i128) as i64
    }
    /// True with probability pct/100.
    fn pct(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

fn sat(a: i64, d: i64) -> i64 {
    a.saturating_add(d)
}

const EXTREMES: &[i64] = &[i64::MIN, i64::MIN + 1, i64::MAX, i64::MAX - 1, 0, -1, 1];
const BIG: &[i64] = &[i64::MAX, i64::MAX - 1, 1 << 62, (1 << 62) + 1, i64::MAX / 3];

// ----------------------------------------------------------------------
// Operations.

#[derive(Debug, Clone)]
enum Op {
    Ingest(Vec<Delivery>),
    Advance(String, i64),
    MarkIdle(String),
    /// Checkpoint the engine, restore it into a fresh processor, continue on
    /// the restored one. `own` = restore on the embedded pipeline.
    Restore {
        own: bool,
    },
    /// Flush the engine's history tail into its store (segments of at
    /// most `max_items`), with `between` applied after the snapshot and
    /// before the flush lands (a call that arrives while a checkpoint is
    /// being written); `resume`: then continue on a processor resumed from
    /// the flushed state (when the tail is empty), as after a restart.
    Flush {
        max_items: u64,
        between: Option<Box<Op>>,
        resume: bool,
    },
    /// Compare every query and (if `ckpt`) the checkpoint bytes.
    Query {
        window: Option<String>,
        key: Option<String>,
        after: u64,
        limit: usize,
        ckpt: bool,
    },
}

#[derive(Clone, Debug)]
struct Setup {
    partitions: Vec<String>,
    windows: Vec<(String, WindowDef)>,
    lateness: i64,
    /// Key-hash shards of the engine (1, 2 or 4 by seed; a restore moves
    /// to the next count).
    shards: usize,
}

impl Setup {
    fn pipeline(&self) -> Pipeline {
        Pipeline::new(self.partitions.clone(), self.windows.clone(), self.lateness)
            .expect("generated pipeline is valid")
    }
    /// The same pipeline declared in another order.
    fn pipeline_reordered(&self) -> Pipeline {
        let mut p = self.partitions.clone();
        p.reverse();
        let mut w = self.windows.clone();
        w.reverse();
        Pipeline::new(p, w, self.lateness).expect("generated pipeline is valid")
    }
    fn model(&self) -> Model {
        let windows: BTreeMap<String, WindowDef> = self.windows.iter().cloned().collect();
        Model::new(&self.partitions, &windows, self.lateness)
    }
}

// ----------------------------------------------------------------------
// Generator.

const PARTITION_NAMES: &[&str] = &["p0", "p1", "p2", "a", "\u{fc}", "\"q", "\t", "P"];
const WINDOW_NAMES: &[&str] = &[
    "f", "s", "sl", "w", "st", "a\"b", "\u{e9}", "\u{1}x", "\u{7f}", "Z", "f2", "\u{65e5}", "w\\",
];
const KEYS: &[&str] = &[
    "",
    "a",
    "b",
    "A",
    "\u{e4}",
    "\n",
    "\\",
    "\u{1f}",
    "\u{65e5}\u{672c}",
    "a\u{0}",
    "\u{1F600}",
    "\u{7f}",
];
const ID_SUFFIXES: &[&str] = &[
    "", "", "", "", "\"", "\u{8}", "\u{c}\r", "\u{2028}", "\u{0}", "/",
];

struct Gen {
    rng: Rng,
    base: i64,
    spread: i64,
    keys: Vec<String>,
    next_id: u64,
}

fn gen_size(rng: &mut Rng, max_small: i64) -> i64 {
    if rng.pct(85) {
        rng.range(1, max_small)
    } else {
        *rng.pick(BIG)
    }
}

fn gen_def(rng: &mut Rng, kind: u64) -> WindowDef {
    match kind {
        0 => WindowDef::Fixed {
            size: gen_size(rng, 8),
        },
        1 => {
            if rng.pct(5) {
                // many overlapping windows per event
                WindowDef::Sliding {
                    size: rng.range(20, 60),
                    step: rng.range(1, 3),
                }
            } else if rng.pct(85) {
                let step = rng.range(1, 6);
                let mut size = rng.range(1, 12);
                if size % step == 0 && rng.pct(70) {
                    size += 1;
                }
                WindowDef::Sliding { size, step }
            } else if rng.pct(50) {
                let size = i64::MAX - rng.range(0, 3);
                let step = (size / rng.range(1, 4)).saturating_add(rng.range(-2, 2));
                WindowDef::Sliding {
                    size,
                    step: step.max(1),
                }
            } else {
                WindowDef::Sliding {
                    size: rng.range(1, 4),
                    step: *rng.pick(BIG),
                }
            }
        }
        2 => WindowDef::Session {
            gap: gen_size(rng, 6),
        },
        _ => WindowDef::StreamTime {
            size: gen_size(rng, 8),
        },
    }
}

fn gen_setup(rng: &mut Rng) -> Setup {
    let np = rng.range(1, 4) as usize;
    let mut partitions: Vec<String> = Vec::new();
    while partitions.len() < np {
        let p = rng.pick(PARTITION_NAMES).to_string();
        if !partitions.contains(&p) {
            partitions.push(p);
        }
    }
    let mut kinds: Vec<u64> = Vec::new();
    if rng.pct(75) {
        kinds.extend([0, 1, 2, 3]);
        for _ in 0..rng.below(3) {
            kinds.push(rng.below(4));
        }
    } else {
        for _ in 0..rng.range(1, 3) {
            kinds.push(rng.below(4));
        }
    }
    let mut windows: Vec<(String, WindowDef)> = Vec::new();
    for k in kinds {
        let name = loop {
            let n = rng.pick(WINDOW_NAMES).to_string();
            if !windows.iter().any(|(m, _)| *m == n) {
                break n;
            }
        };
        windows.push((name, gen_def(rng, k)));
    }
    let lateness = match rng.below(10) {
        0 => *rng.pick(BIG),
        1 => 0,
        _ => rng.range(0, 5),
    };
    Setup {
        partitions,
        windows,
        lateness,
        shards: 1,
    }
}

impl Gen {
    fn new(seed: u64) -> (Gen, Setup) {
        let mut rng = Rng::new(seed);
        let mut setup = gen_setup(&mut rng);
        setup.shards = [1, 2, 4][(seed % 3) as usize];
        let base = match rng.below(10) {
            0 => i64::MIN + rng.range(0, 20),
            1 => i64::MAX - rng.range(0, 20),
            2 => rng.range(-1_000_000_000, 1_000_000_000),
            _ => 0,
        };
        let spread = rng.range(3, 30);
        let nkeys = rng.range(1, 4) as usize;
        let mut keys = Vec::new();
        for _ in 0..nkeys {
            keys.push(rng.pick(KEYS).to_string());
        }
        (
            Gen {
                rng,
                base,
                spread,
                keys,
                next_id: 0,
            },
            setup,
        )
    }

    fn ts(&mut self, m: &Model) -> i64 {
        match self.rng.below(40) {
            0 | 1 => *self.rng.pick(EXTREMES),
            2 => self.rng.next() as i64,
            3..=18 if m.watermark.is_some() => {
                let l = m.lateness.min(10);
                sat(m.watermark.unwrap(), self.rng.range(-l - 4, 6))
            }
            9..=14 if m.max_ts.is_some() => sat(m.max_ts.unwrap(), self.rng.range(-4, 4)),
            _ => sat(self.base, self.rng.range(-self.spread, self.spread)),
        }
    }

    fn value(&mut self) -> i64 {
        if self.rng.pct(85) {
            self.rng.range(-5, 10)
        } else {
            *self.rng.pick(EXTREMES)
        }
    }

    fn fresh_id(&mut self) -> String {
        self.next_id += 1;
        let suffix = *self.rng.pick(ID_SUFFIXES);
        format!("e{}{}", self.next_id, suffix)
    }

    fn event(&mut self, m: &Model) -> Event {
        let roll = self.rng.below(100);
        if roll < 15 && !m.ids.is_empty() {
            // duplicate: known id, identical identity
            let i = self.rng.below(m.ids.len() as u64) as usize;
            let (id, (key, ts, v)) = m.ids.iter().nth(i).unwrap();
            return Event {
                id: id.clone(),
                key: key.clone(),
                timestamp: *ts,
                value: *v,
            };
        }
        if roll < 21 && !m.ids.is_empty() {
            // identity conflict: known id, something changed
            let i = self.rng.below(m.ids.len() as u64) as usize;
            let (id, (key, ts, v)) = m.ids.iter().nth(i).unwrap();
            let mut e = Event {
                id: id.clone(),
                key: key.clone(),
                timestamp: *ts,
                value: *v,
            };
            match self.rng.below(3) {
                0 => e.value = e.value.wrapping_add(1),
                1 => e.timestamp = e.timestamp.wrapping_sub(1),
                _ => e.key.push('x'),
            }
            return e;
        }
        if roll < 27 && !m.ids.is_empty() {
            // fresh id, same identity as some known event
            let i = self.rng.below(m.ids.len() as u64) as usize;
            let (_, (key, ts, v)) = m.ids.iter().nth(i).unwrap();
            let (key, ts, v) = (key.clone(), *ts, *v);
            return Event {
                id: self.fresh_id(),
                key,
                timestamp: ts,
                value: v,
            };
        }
        let key = self.rng.pick(&self.keys).clone();
        let timestamp = self.ts(m);
        let value = self.value();
        Event {
            id: self.fresh_id(),
            key,
            timestamp,
            value,
        }
    }

    fn partition(&mut self, m: &Model) -> String {
        if self.rng.pct(4) {
            self.rng.pick(&["zz", "", "p9", "P0"]).to_string()
        } else {
            self.rng.pick(&m.partitions).clone()
        }
    }

    fn delivery(&mut self, m: &Model) -> Delivery {
        let partition = self.partition(m);
        let c = m
            .parts
            .get(&partition)
            .map_or(-1, |p| p.sources.len() as i64 - 1);
        let roll = self.rng.below(100);
        if roll < 12 && c >= 0 {
            // identical redelivery at an old offset
            let off = self.rng.range(0, c);
            let event = m.parts[&partition].sources[off as usize].clone();
            return Delivery {
                partition,
                offset: Some(off),
                event,
            };
        }
        let event = self.event(m);
        let offset = match roll {
            12..=16 if c >= 0 => Some(self.rng.range(0, c)), // conflicting redelivery (usually)
            17..=20 => Some(sat(c, self.rng.range(2, 4))),   // gap
            21 => Some(*self.rng.pick(&[i64::MIN, i64::MAX, -1, -2])),
            22..=55 => None, // append mode
            _ => Some(c + 1),
        };
        Delivery {
            partition,
            offset,
            event,
        }
    }

    fn bad_delivery(&mut self, m: &Model) -> Delivery {
        let mut d = self.delivery(m);
        match self.rng.below(3) {
            0 => d.partition = "nope".into(),
            1 => {
                let c = m
                    .parts
                    .get(&d.partition)
                    .map_or(-1, |p| p.sources.len() as i64 - 1);
                d.offset = Some(c + 3);
            }
            _ => {
                if let Some((id, (key, ts, v))) = m.ids.iter().next() {
                    d.event = Event {
                        id: id.clone(),
                        key: key.clone(),
                        timestamp: *ts,
                        value: v.wrapping_add(7),
                    };
                    d.offset = None;
                } else {
                    d.partition = "nope".into();
                }
            }
        }
        d
    }

    fn op(&mut self, m: &Model) -> Op {
        let roll = self.rng.below(100);
        match roll {
            0..=54 => {
                let n = if self.rng.pct(60) {
                    1
                } else if self.rng.pct(3) {
                    0
                } else {
                    self.rng.range(2, 6) as usize
                };
                let bad_at = if n >= 2 && self.rng.pct(15) {
                    Some(self.rng.below(n as u64) as usize)
                } else {
                    None
                };
                let mut batch = Vec::new();
                if n == 1 {
                    batch.push(self.delivery(m));
                } else {
                    // later deliveries are generated against the state the
                    // earlier ones leave
                    let mut scratch = m.sources_only();
                    for i in 0..n {
                        let d = if bad_at == Some(i) {
                            self.bad_delivery(&scratch)
                        } else {
                            self.delivery(&scratch)
                        };
                        let _ = scratch.ingest(std::slice::from_ref(&d));
                        batch.push(d);
                    }
                }
                Op::Ingest(batch)
            }
            55..=79 => {
                let p = self.partition(m);
                let prog = m.parts.get(&p).and_then(|x| x.progress);
                let w = match self.rng.below(10) {
                    0..=2 if prog.is_some() => sat(prog.unwrap(), self.rng.range(0, 4)),
                    3..=4 if prog.is_some() => sat(prog.unwrap(), -self.rng.range(1, 5)),
                    5..=7 if m.max_ts.is_some() => sat(m.max_ts.unwrap(), self.rng.range(-4, 3)),
                    8 => *self.rng.pick(EXTREMES),
                    _ => sat(self.base, self.rng.range(-self.spread, self.spread)),
                };
                Op::Advance(p, w)
            }
            80..=86 => Op::MarkIdle(self.partition(m)),
            87..=90 => Op::Restore {
                own: self.rng.pct(30),
            },
            91..=94 => {
                let between = self
                    .rng
                    .pct(40)
                    .then(|| match self.op(m) {
                        o @ (Op::Ingest(_) | Op::Advance(..) | Op::MarkIdle(_)) => {
                            Some(Box::new(o))
                        }
                        _ => None,
                    })
                    .flatten();
                Op::Flush {
                    max_items: self.rng.range(1, 6) as u64,
                    between,
                    resume: self.rng.pct(50),
                }
            }
            _ => {
                let window = if self.rng.pct(40) {
                    Some(
                        self.rng
                            .pick(&m.windows.keys().cloned().collect::<Vec<_>>())
                            .clone(),
                    )
                } else {
                    None
                };
                let key = if self.rng.pct(30) {
                    Some(self.rng.pick(&self.keys).clone())
                } else {
                    None
                };
                let after = self.rng.below(m.late.len() as u64 + 2);
                let limit = self.rng.below(5) as usize;
                Op::Query {
                    window,
                    key,
                    after,
                    limit,
                    ckpt: self.rng.pct(35),
                }
            }
        }
    }
}

// ----------------------------------------------------------------------
// Coverage counters (what the model saw), printed at the end of the run.

use std::sync::atomic::AtomicU64;

static STATS: [AtomicU64; 15] = [const { AtomicU64::new(0) }; 15];
const STAT_NAMES: [&str; 15] = [
    "ingest ok",
    "unknown_partition",
    "offset_conflict",
    "identity_conflict",
    "batch rejected at index > 0",
    "late records",
    "retracts",
    "upserts",
    "finalized",
    "restores",
    "checkpoints compared",
    "tick ok",
    "tick rejected",
    "max live buckets",
    "history flushes",
];

fn stat(i: usize, n: u64) {
    STATS[i].fetch_add(n, Ordering::Relaxed);
}

fn record_ingest(
    r: &Result<streamforge::engine::IngestOutcome, streamforge::engine::BatchRejection>,
) {
    match r {
        Ok(o) => {
            stat(0, 1);
            stat(5, o.late.len() as u64);
            for c in &o.changes {
                stat(
                    if c.op == streamforge::engine::ChangeOp::Retract {
                        6
                    } else {
                        7
                    },
                    1,
                );
            }
        }
        Err(e) => {
            stat(
                match e.rejection.code() {
                    "unknown_partition" => 1,
                    "offset_conflict" => 2,
                    _ => 3,
                },
                1,
            );
            if e.index > 0 {
                stat(4, 1);
            }
        }
    }
}

fn record_tick(r: &Result<streamforge::engine::TickOutcome, streamforge::engine::Rejection>) {
    match r {
        Ok(o) => {
            stat(11, 1);
            stat(8, o.finalized.len() as u64);
            for c in &o.changes {
                stat(
                    if c.op == streamforge::engine::ChangeOp::Retract {
                        6
                    } else {
                        7
                    },
                    1,
                );
            }
        }
        Err(_) => stat(12, 1),
    }
}

// ----------------------------------------------------------------------
// Running and comparing.

struct Mismatch {
    op_index: usize,
    what: String,
}

/// The first differing byte, with context. Envelopes are compared past their
/// digests when the digests alone differ (the state diff is what helps).
fn first_diff(a: &[u8], b: &[u8]) -> String {
    const HASH: std::ops::Range<usize> = 45..109;
    if a.len() > HASH.end
        && b.len() > HASH.end
        && a[..HASH.start] == b[..HASH.start]
        && a[HASH] != b[HASH]
    {
        let rest = first_diff_raw(&a[HASH.end..], &b[HASH.end..]);
        return format!("digests differ; after the digest: {rest}");
    }
    first_diff_raw(a, b)
}

fn first_diff_raw(a: &[u8], b: &[u8]) -> String {
    let i = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let lo = i.saturating_sub(80);
    format!(
        "first difference at byte {i}\n  engine: ...{}...\n  model:  ...{}...",
        String::from_utf8_lossy(&a[lo..(i + 80).min(a.len())]),
        String::from_utf8_lossy(&b[lo..(i + 80).min(b.len())])
    )
}

macro_rules! check {
    ($idx:expr, $what:expr, $engine:expr, $model:expr) => {{
        let (e, m) = (&$engine, &$model);
        if e != m {
            return Err(Mismatch {
                op_index: $idx,
                what: format!("{}:\n  engine: {:?}\n  model:  {:?}", $what, e, m),
            });
        }
    }};
}

fn compare_queries(
    i: usize,
    eng: &Processor,
    model: &Model,
    q: Option<(&Option<String>, &Option<String>, u64, usize)>,
    ckpt: Option<bool>,
) -> Result<(), Mismatch> {
    check!(
        i,
        "results(None, None)",
        eng.results(None, None),
        model.results(None, None)
    );
    check!(i, "partitions()", eng.partitions(), model.partitions());
    check!(
        i,
        "late(0, MAX)",
        eng.late(0, usize::MAX).unwrap(),
        model.late(0, usize::MAX)
    );
    if let Some((w, k, after, limit)) = q {
        check!(
            i,
            format!("results({w:?}, {k:?})"),
            eng.results(w.as_deref(), k.as_deref()),
            model.results(w.as_deref(), k.as_deref())
        );
        check!(
            i,
            format!("late({after}, {limit})"),
            eng.late(after, limit).unwrap(),
            model.late(after, limit)
        );
    }
    if let Some(hash) = ckpt {
        compare_checkpoint(i, &eng.checkpoint().unwrap(), model, hash)?;
    }
    Ok(())
}

/// Byte-for-byte envelope comparison. With `hash == false` the model takes
/// the engine's digest instead of hashing (used right before a restore, which
/// verifies the digest against the canonical state bytes anyway).
fn compare_checkpoint(i: usize, ec: &[u8], model: &Model, hash: bool) -> Result<(), Mismatch> {
    const PREFIX: &[u8] = b"{\"digest\":\"";
    let engine_hex = ec
        .strip_prefix(PREFIX)
        .and_then(|r| r.get(..64))
        .filter(|h| {
            h.iter()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        })
        .map(|h| std::str::from_utf8(h).unwrap());
    let mc = match engine_hex {
        Some(h) if !hash => model.checkpoint_with_hash(Some(h)),
        _ => model.checkpoint(),
    };
    stat(10, 1);
    if ec != mc {
        return Err(Mismatch {
            op_index: i,
            what: format!(
                "checkpoint bytes differ; {}\n  engine full: {}\n  model full:  {}",
                first_diff(ec, &mc),
                String::from_utf8_lossy(ec),
                String::from_utf8_lossy(&mc)
            ),
        });
    }
    Ok(())
}

/// One op on both sides; on a mismatch the report also says whether (and
/// where) the two checkpoints differ at that point.
fn step(
    i: usize,
    op: &Op,
    setup: &Setup,
    eng: &mut Processor,
    model: &mut Model,
) -> Result<(), Mismatch> {
    step_inner(i, op, setup, eng, model).map_err(|mut m| {
        let ec = catch_unwind(AssertUnwindSafe(|| eng.checkpoint().unwrap()));
        match ec {
            Ok(ec) => {
                let mc = model.checkpoint();
                if ec == mc {
                    m.what
                        .push_str("\n  (checkpoints after the op are identical)");
                } else {
                    let _ = write!(
                        m.what,
                        "\n  checkpoints after the op differ; {}",
                        first_diff(&ec, &mc)
                    );
                }
            }
            Err(_) => m.what.push_str("\n  (engine checkpoint panicked)"),
        }
        m
    })
}

fn step_inner(
    i: usize,
    op: &Op,
    setup: &Setup,
    eng: &mut Processor,
    model: &mut Model,
) -> Result<(), Mismatch> {
    match op {
        Op::Ingest(batch) => {
            let e = eng.ingest(batch.clone());
            let m = model.ingest(batch);
            record_ingest(&m);
            match (&e, &m) {
                (Ok(a), Ok(b)) => check!(i, "ingest outcome", a, b),
                (Err(a), Err(b)) => {
                    check!(
                        i,
                        "ingest rejection (index, code)",
                        (a.index, a.rejection.code()),
                        (b.index, b.rejection.code())
                    )
                }
                _ => check!(i, "ingest result", format!("{e:?}"), format!("{m:?}")),
            }
        }
        Op::Advance(p, w) => {
            let e = eng.advance(p, *w);
            let m = model.advance(p, *w);
            record_tick(&m);
            match (&e, &m) {
                (Ok(a), Ok(b)) => check!(i, "advance outcome", a, b),
                (Err(a), Err(b)) => check!(i, "advance rejection code", a.code(), b.code()),
                _ => check!(i, "advance result", format!("{e:?}"), format!("{m:?}")),
            }
        }
        Op::MarkIdle(p) => {
            let e = eng.mark_idle(p);
            let m = model.mark_idle(p);
            record_tick(&m);
            match (&e, &m) {
                (Ok(a), Ok(b)) => check!(i, "mark_idle outcome", a, b),
                (Err(a), Err(b)) => check!(i, "mark_idle rejection code", a.code(), b.code()),
                _ => check!(i, "mark_idle result", format!("{e:?}"), format!("{m:?}")),
            }
        }
        Op::Restore { own } => {
            compare_queries(i, eng, model, None, None)?;
            let bytes = eng.checkpoint().unwrap();
            compare_checkpoint(i, &bytes, model, false)?;
            stat(9, 1);
            // The restored history flushes into the same store: its
            // segments and ids of before stay there, as after a restore in
            // the service (the id index answers them; the engine keeps
            // only candidates of its own segments).
            let mem = MEM.with(|m| m.borrow().clone()).expect("a store");
            let restored = if *own {
                Processor::from_checkpoint_into(&bytes, mem)
            } else {
                Processor::restore_into(&bytes, &setup.pipeline_reordered(), mem)
            };
            match restored {
                // A checkpoint restores with any number of shards: rotate.
                Ok(p) => *eng = sharded(p, next_shards(eng.shards())),
                Err(r) => {
                    return Err(Mismatch {
                        op_index: i,
                        what: format!(
                            "restore of the engine's own checkpoint failed: {r}\n  checkpoint: {}",
                            String::from_utf8_lossy(&bytes)
                        ),
                    })
                }
            }
            // the restored processor re-serializes to the same bytes (checked
            // on a third of the restores; the end-of-sequence comparison
            // catches any lost state anyway)
            let again = if *own {
                eng.checkpoint().unwrap()
            } else {
                bytes.clone()
            };
            if again != bytes {
                return Err(Mismatch {
                    op_index: i,
                    what: format!(
                        "checkpoint after restore differs; {}",
                        first_diff(&again, &bytes)
                    ),
                });
            }
            compare_queries(i, eng, model, None, None)?;
        }
        Op::Flush {
            max_items,
            between,
            resume,
        } => {
            let mem = MEM.with(|m| m.borrow().clone()).expect("a store");
            let snap = eng.snapshot();
            let before = snap.checkpoint().unwrap();
            let segs = snap.tail_segments(*max_items);
            let stored: Vec<_> = segs
                .into_iter()
                .map(|s| {
                    let id = mem.put(&s).expect("stored");
                    (s, id)
                })
                .collect();
            let flushed = snap.flushed_with(&stored);
            let live = snap.live_parts();
            check!(
                i,
                "envelope_len of the flushed snapshot",
                streamforge::engine::checkpoint::envelope_len(&live, &flushed),
                before.len() as u64
            );
            // The digest from the chains the stored segments carry, and the
            // envelope read back from them: the snapshot's own.
            let digest = snap.digest_with(&live, &stored);
            check!(
                i,
                "digest of the flushed snapshot",
                before
                    .get(11..75)
                    .map(|d| String::from_utf8_lossy(d).into_owned()),
                Some(digest.clone())
            );
            let mut again = Vec::new();
            streamforge::engine::checkpoint::write_envelope(
                &live,
                &streamforge::engine::checkpoint::store_history_parts(&*mem, &flushed),
                &digest,
                &mut again,
            )
            .expect("read back");
            check!(
                i,
                "envelope read back from the segments",
                again == before,
                true
            );
            if let Some(op) = between {
                step_inner(i, op, setup, eng, model)?;
            }
            eng.flushed(&snap, &stored);
            stat(14, 1);
            if *resume && eng.tail_len() == 0 {
                let again = eng.snapshot();
                let resumed = Processor::resume(
                    &setup.pipeline_reordered(),
                    &again.live_parts(),
                    eng.flushed_history(),
                    mem.clone(),
                );
                match resumed {
                    Ok(p) => *eng = sharded(p, next_shards(eng.shards())),
                    Err(r) => {
                        return Err(Mismatch {
                            op_index: i,
                            what: format!("resume of a flushed state failed: {r}"),
                        })
                    }
                }
            }
            compare_queries(i, eng, model, None, None)?;
        }
        Op::Query {
            window,
            key,
            after,
            limit,
            ckpt,
        } => {
            compare_queries(
                i,
                eng,
                model,
                Some((window, key, *after, *limit)),
                ckpt.then_some(false),
            )?;
        }
    }
    check!(i, "watermark()", eng.watermark(), model.watermark());
    check!(i, "sequence()", eng.sequence(), model.sequence());
    check!(i, "late_len()", eng.late_len(), model.late_len());
    check!(
        i,
        "live_buckets()",
        eng.live_buckets(),
        model.live_buckets()
    );
    STATS[13].fetch_max(model.live_buckets() as u64, Ordering::Relaxed);
    Ok(())
}

thread_local! {
    /// The history store of the engine under test (flushes go there).
    static MEM: std::cell::RefCell<Option<std::sync::Arc<MemHistory>>> =
        const { std::cell::RefCell::new(None) };
}

/// A fresh engine over a fresh in-memory history store (set as [`MEM`]).
fn fresh(setup: &Setup) -> Processor {
    let mem = MemHistory::new();
    MEM.with(|m| *m.borrow_mut() = Some(mem.clone()));
    Processor::with_store(setup.pipeline(), mem)
}

/// `p` with `k` key-hash shards, every batch (however small) and every tick
/// going through the shard threads when `k > 1`.
fn sharded(mut p: Processor, k: usize) -> Processor {
    streamforge::shard_pool::set_shards(&mut p, k).expect("valid shard count");
    p.set_shard_min_events(1);
    p
}

/// The shard count after a restore: 1 -> 2 -> 4 -> 1.
fn next_shards(k: usize) -> usize {
    match k {
        1 => 2,
        2 => 4,
        _ => 1,
    }
}

/// Replays concrete ops; Err on the first mismatch or engine panic.
fn replay(setup: &Setup, ops: &[Op]) -> Result<(), Mismatch> {
    let cur = std::cell::Cell::new(0usize);
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<(), Mismatch> {
        let mut eng = sharded(fresh(setup), setup.shards);
        let mut model = setup.model();
        for (i, op) in ops.iter().enumerate() {
            cur.set(i);
            step(i, op, setup, &mut eng, &mut model)?;
        }
        cur.set(ops.len());
        compare_queries(ops.len(), &eng, &model, None, Some(true))
    }));
    match r {
        Ok(x) => x,
        Err(p) => Err(Mismatch {
            op_index: cur.get(),
            what: format!("engine panicked: {}", panic_msg(&p)),
        }),
    }
}

fn panic_msg(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic>".into()
    }
}

/// Generates and runs one sequence. Returns the ops and the mismatch, if any.
fn run_seed(seed: u64) -> (Setup, Vec<Op>, Option<Mismatch>) {
    let (mut gen, setup) = Gen::new(seed);
    let max_ops = env_u64("MODEL_MAX_OPS", 60).max(20) as i64;
    let nops = gen.rng.range(20, max_ops) as usize;
    let mut ops = Vec::with_capacity(nops);
    let cur = std::cell::Cell::new(0usize);
    let mut model = setup.model();
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<(), Mismatch> {
        let mut eng = sharded(fresh(&setup), setup.shards);
        for i in 0..nops {
            cur.set(i);
            let op = gen.op(&model);
            ops.push(op.clone());
            step(i, &op, &setup, &mut eng, &mut model)?;
        }
        cur.set(nops);
        compare_queries(nops, &eng, &model, None, Some(true))
    }));
    let mismatch = match r {
        Ok(Ok(())) => None,
        Ok(Err(m)) => Some(m),
        Err(p) => Some(Mismatch {
            op_index: cur.get(),
            what: format!("engine panicked: {}", panic_msg(&p)),
        }),
    };
    (setup, ops, mismatch)
}

thread_local! {
    /// Set while shrinking, so replayed engine panics do not flood stderr.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn install_quiet_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                default(info);
            }
        }));
    });
}

/// Greedy shrink: drop ops (then batch members) while the replay still fails.
fn shrink(setup: &Setup, ops: Vec<Op>, first: &Mismatch) -> (Vec<Op>, Mismatch) {
    QUIET.with(|q| q.set(true));
    let r = shrink_inner(setup, ops, first);
    QUIET.with(|q| q.set(false));
    r
}

fn shrink_inner(setup: &Setup, ops: Vec<Op>, first: &Mismatch) -> (Vec<Op>, Mismatch) {
    let mut ops: Vec<Op> = ops[..=first.op_index.min(ops.len() - 1)].to_vec();
    let mut last = match replay(setup, &ops) {
        Err(m) => m,
        Ok(()) => {
            return (
                ops,
                Mismatch {
                    op_index: first.op_index,
                    what: first.what.clone(),
                },
            )
        }
    };
    let mut budget = 3000;
    loop {
        let mut progress = false;
        let mut i = ops.len();
        while i > 0 && budget > 0 {
            i -= 1;
            let mut cand = ops.clone();
            cand.remove(i);
            budget -= 1;
            if let Err(m) = replay(setup, &cand) {
                cand.truncate(m.op_index + 1);
                ops = cand;
                last = m;
                progress = true;
                i = i.min(ops.len());
            }
        }
        // shrink batches member by member
        for oi in 0..ops.len() {
            if let Op::Ingest(b) = &ops[oi] {
                let mut j = b.len();
                while j > 0 && budget > 0 {
                    j -= 1;
                    let mut cand = ops.clone();
                    if let Op::Ingest(b2) = &mut cand[oi] {
                        if j >= b2.len() {
                            continue;
                        }
                        b2.remove(j);
                    }
                    budget -= 1;
                    if let Err(m) = replay(setup, &cand) {
                        if m.op_index >= oi {
                            cand.truncate(m.op_index + 1);
                            ops = cand;
                            last = m;
                            progress = true;
                        }
                    }
                    if oi >= ops.len() {
                        break;
                    }
                }
            }
            if oi + 1 >= ops.len() {
                break;
            }
        }
        if !progress || budget == 0 {
            return (ops, last);
        }
    }
}

fn report(seed: u64, setup: &Setup, ops: &[Op], m: &Mismatch) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "==== MISMATCH seed={seed} op_index={} ====", m.op_index);
    let _ = writeln!(s, "pipeline: {:?}", setup);
    if let Some(op) = ops.get(m.op_index) {
        let _ = writeln!(s, "op: {op:?}");
    }
    let _ = writeln!(s, "{}", m.what);
    let (small, sm) = shrink(setup, ops.to_vec(), m);
    let _ = writeln!(
        s,
        "-- shrunk to {} ops (failing at op {}):",
        small.len(),
        sm.op_index
    );
    for (i, op) in small.iter().enumerate() {
        let _ = writeln!(s, "  [{i}] {op:?}");
    }
    let _ = writeln!(s, "-- shrunk failure: {}", sm.what);
    s
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[test]
fn engine_matches_naive_reference_model() {
    let n = env_u64("MODEL_SEQUENCES", 20_000);
    let seed0 = env_u64("MODEL_SEED", 1);
    let threads = env_u64(
        "MODEL_THREADS",
        std::thread::available_parallelism().map_or(2, |x| x.get() as u64),
    )
    .max(1);
    let max_failures = env_u64("MODEL_MAX_FAILURES", 5) as usize;
    install_quiet_panic_hook();
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let failures: Arc<Mutex<Vec<(u64, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let ops_total = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let next = next.clone();
            let failures = failures.clone();
            let ops_total = ops_total.clone();
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as u64;
                if i >= n || failures.lock().unwrap().len() >= max_failures {
                    return;
                }
                let seed = seed0.wrapping_add(i);
                let (setup, ops, mismatch) = run_seed(seed);
                ops_total.fetch_add(ops.len(), Ordering::Relaxed);
                if let Some(m) = mismatch {
                    let text = report(seed, &setup, &ops, &m);
                    eprintln!("{text}");
                    failures.lock().unwrap().push((seed, text));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("worker thread");
    }
    let failures = failures.lock().unwrap();
    let stats: Vec<String> = STAT_NAMES
        .iter()
        .zip(&STATS)
        .map(|(n, v)| format!("{n}={}", v.load(Ordering::Relaxed)))
        .collect();
    eprintln!("engine_model coverage: {}", stats.join(", "));
    eprintln!(
        "engine_model: {} sequences from seed {seed0}, {} ops, {} threads, {:.1?}, {} failing",
        n.min(next.load(Ordering::Relaxed) as u64),
        ops_total.load(Ordering::Relaxed),
        threads,
        started.elapsed(),
        failures.len()
    );
    if !failures.is_empty() {
        let seeds: Vec<u64> = failures.iter().map(|f| f.0).collect();
        panic!(
            "{} failing sequences (seeds {seeds:?}); first:\n{}",
            failures.len(),
            failures[0].1
        );
    }
}

// ----------------------------------------------------------------------
// Self-checks of the model (these do not touch the engine).

#[test]
fn model_self_check_hand_cases() {
    let windows: BTreeMap<String, WindowDef> = [
        ("s".to_string(), WindowDef::Session { gap: 5 }),
        ("sl".to_string(), WindowDef::Sliding { size: 10, step: 3 }),
    ]
    .into_iter()
    .collect();
    let mut m = Model::new(&["a".to_string()], &windows, 100);
    let ev = |id: &str, ts: i64, v: i64| Delivery {
        partition: "a".into(),
        offset: None,
        event: Event {
            id: id.into(),
            key: "k".into(),
            timestamp: ts,
            value: v,
        },
    };
    // sliding size 10 step 3 for ts=-1: starts -9, -6, -3 (start <= -1 < start+10)
    m.ingest(&[ev("x", -1, 1)]).unwrap();
    let sl: Vec<(i128, i128)> = m
        .live
        .keys()
        .filter(|a| &*a.0 == "sl")
        .map(|a| (a.2, a.3))
        .collect();
    assert_eq!(sl, vec![(-9, 1), (-6, 4), (-3, 7)]);
    // sessions [0,5) and [10,15) visible, then bridge at 5 -> touch both
    m.ingest(&[ev("a", 0, 1), ev("b", 10, 2)]).unwrap();
    m.advance("a", 15).unwrap();
    assert_eq!(m.results(Some("s"), None).len(), 2);
    let out = m.ingest(&[ev("c", 5, 3)]).unwrap();
    let ops: Vec<_> = out
        .changes
        .iter()
        .filter(|c| &*c.result.window == "s")
        .map(|c| (c.op, c.result.start, c.result.end))
        .collect();
    use streamforge::engine::ChangeOp::*;
    assert_eq!(
        ops,
        vec![(Retract, -1, 5), (Retract, 10, 15), (Upsert, -1, 15)]
    );
    // identical redelivery: no changes
    let out = m
        .ingest(&[Delivery {
            offset: Some(0),
            ..ev("x", -1, 1)
        }])
        .unwrap();
    assert!(out.changes.is_empty());
    // duplicate id on a new offset: consumed
    m.ingest(&[ev("x", -1, 1)]).unwrap();
    assert_eq!(m.parts["a"].sources.len(), 5);
    // identity conflict leaves state unchanged
    let before = m.checkpoint();
    let err = m.ingest(&[ev("y", 1, 1), ev("x", -1, 2)]).unwrap_err();
    assert_eq!((err.index, err.rejection.code()), (1, "identity_conflict"));
    assert_eq!(before, m.checkpoint());
}

#[test]
fn model_self_check_generator_is_deterministic() {
    let a = run_model_only(42);
    let b = run_model_only(42);
    assert_eq!(a, b);
}

fn run_model_only(seed: u64) -> Vec<u8> {
    let (mut gen, setup) = Gen::new(seed);
    let mut model = setup.model();
    for _ in 0..60 {
        let op = gen.op(&model);
        match &op {
            Op::Ingest(b) => {
                let _ = model.ingest(b);
            }
            Op::Advance(p, w) => {
                let _ = model.advance(p, *w);
            }
            Op::MarkIdle(p) => {
                let _ = model.mark_idle(p);
            }
            _ => {}
        }
    }
    model.checkpoint()
}

/// Times the generator + model alone (no engine): `cargo test -- --ignored model_only`.
#[test]
#[ignore]
fn model_only_timing() {
    let n = env_u64("MODEL_SEQUENCES", 20_000);
    let t = Instant::now();
    let mut bytes = 0;
    for s in 0..n {
        bytes += run_model_only(s).len();
    }
    eprintln!(
        "model only: {n} sequences in {:.1?} ({bytes} checkpoint bytes)",
        t.elapsed()
    );
}
