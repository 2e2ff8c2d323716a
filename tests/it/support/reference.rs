//! A deliberately naive reference model of docs/semantics.md.
//!
//! Everything is rebuilt the slow, obvious way, exactly as docs/semantics.md words it:
//! all live buckets sit in one `BTreeMap` keyed by address; after every
//! successful ingest / advance / mark_idle the complete ready view is
//! recomputed and diffed against the visible rows, and only then every live
//! bucket with `W > end + lateness` is finalized. Derived values are `i128`.
//!
//! It shares only the plain data types (`Event`, `Delivery`, `WindowDef`,
//! output records) with the engine, never its logic.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use streamforge::engine::{
    Address, BatchRejection, Change, ChangeOp, Delivery, Event, IngestOutcome, LateRecord,
    PartitionStatus, Rejection, TickOutcome, WindowDef, WindowResult,
};

/// `(window, key, start, end)`; tuple order = address order (String
/// compares bytes, which is code point order for UTF-8).
pub type Addr = (Arc<str>, Arc<str>, i128, i128);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agg {
    pub count: u64,
    pub sum: i128,
    pub min: i64,
    pub max: i64,
}

impl Agg {
    fn one(v: i64) -> Agg {
        Agg {
            count: 1,
            sum: v as i128,
            min: v,
            max: v,
        }
    }
    fn add(&mut self, v: i64) {
        self.count += 1;
        self.sum += v as i128;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
    fn merge(&mut self, o: &Agg) {
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub sources: Vec<Event>,
    pub progress: Option<i64>,
    pub idle: bool,
}

/// The naive model.
#[derive(Debug, Clone)]
pub struct Model {
    pub partitions: Vec<String>, // sorted
    pub windows: BTreeMap<String, WindowDef>,
    pub lateness: i64,
    pub parts: BTreeMap<String, Part>,
    pub watermark: Option<i64>,
    pub max_ts: Option<i64>,
    pub ids: BTreeMap<String, (String, i64, i64)>,
    pub live: BTreeMap<Addr, Agg>,
    pub visible: BTreeMap<Addr, Agg>,
    pub seq: u64,
    pub late: Vec<(Event, i64)>,
    /// Generator helper only: apply the delivery rules (offsets, identities,
    /// stream time, late records) but keep no windows. See `sources_only`.
    pub no_windows: bool,
}

fn row(a: &Addr, g: &Agg) -> WindowResult {
    WindowResult {
        window: a.0.clone(),
        key: a.1.clone(),
        start: a.2,
        end: a.3,
        count: g.count,
        sum: g.sum,
        min: g.min,
        max: g.max,
    }
}

fn address(a: &Addr) -> Address {
    Address {
        window: a.0.clone(),
        key: a.1.clone(),
        start: a.2,
        end: a.3,
    }
}

/// floor(a / b) for b > 0.
fn floor_div(a: i128, b: i128) -> i128 {
    assert!(b > 0);
    let q = a / b;
    if (a % b != 0) && (a < 0) {
        q - 1
    } else {
        q
    }
}

/// What a delivery turned out to be.
enum Kind {
    Unique,
    Duplicate,
    Redelivery,
}

impl Model {
    pub fn new(
        partitions: &[String],
        windows: &BTreeMap<String, WindowDef>,
        lateness: i64,
    ) -> Model {
        let mut ps: Vec<String> = partitions.to_vec();
        ps.sort();
        let parts = ps
            .iter()
            .map(|p| {
                (
                    p.clone(),
                    Part {
                        sources: vec![],
                        progress: None,
                        idle: false,
                    },
                )
            })
            .collect();
        Model {
            partitions: ps,
            windows: windows.clone(),
            lateness,
            parts,
            watermark: None,
            max_ts: None,
            ids: BTreeMap::new(),
            live: BTreeMap::new(),
            visible: BTreeMap::new(),
            seq: 0,
            late: vec![],
            no_windows: false,
        }
    }

    /// A cheap copy that tracks deliveries but no windows (the differential
    /// test's generator uses it to build batches; never compared).
    pub fn sources_only(&self) -> Model {
        Model {
            partitions: self.partitions.clone(),
            windows: self.windows.clone(),
            lateness: self.lateness,
            parts: self.parts.clone(),
            watermark: self.watermark,
            max_ts: self.max_ts,
            ids: self.ids.clone(),
            live: BTreeMap::new(),
            visible: BTreeMap::new(),
            seq: self.seq,
            late: vec![],
            no_windows: true,
        }
    }

    // ------------------------------------------------------------------
    // Reconciliation and finalization, from scratch every time.

    fn ready_view(&self) -> BTreeMap<Addr, Agg> {
        let mut out = BTreeMap::new();
        if let Some(w) = self.watermark {
            for (a, g) in &self.live {
                if a.3 <= w as i128 {
                    out.insert(a.clone(), g.clone());
                }
            }
        }
        out
    }

    /// Reconciles, then finalizes. Returns (changes, finalized addresses).
    fn reconcile_and_finalize(&mut self) -> (Vec<Change>, Vec<Address>) {
        let ready = self.ready_view();
        let mut changes = Vec::new();
        for (a, g) in &self.visible {
            if ready.get(a) != Some(g) {
                self.seq += 1;
                changes.push(Change {
                    seq: self.seq,
                    op: ChangeOp::Retract,
                    result: row(a, g),
                });
            }
        }
        for (a, g) in &ready {
            if self.visible.get(a) != Some(g) {
                self.seq += 1;
                changes.push(Change {
                    seq: self.seq,
                    op: ChangeOp::Upsert,
                    result: row(a, g),
                });
            }
        }
        self.visible = ready;
        let mut finalized = Vec::new();
        if let Some(w) = self.watermark {
            let doomed: Vec<Addr> = self
                .live
                .keys()
                .filter(|a| (w as i128) > a.3 + self.lateness as i128)
                .cloned()
                .collect();
            for a in doomed {
                self.live.remove(&a);
                self.visible.remove(&a);
                finalized.push(address(&a));
            }
        }
        (changes, finalized)
    }

    // ------------------------------------------------------------------
    // Window assignment.

    fn add_to_window(&mut self, name: &str, def: WindowDef, key: &str, ts: i64, value: i64) {
        let t = ts as i128;
        match def {
            WindowDef::Fixed { size } => {
                let s = size as i128;
                let start = floor_div(t, s) * s;
                self.add_bucket((name.into(), key.into(), start, start + s), value);
            }
            WindowDef::Sliding { size, step } => {
                let (s, p) = (size as i128, step as i128);
                // Walk down from the last start <= t while the window still
                // contains t.
                let mut start = floor_div(t, p) * p;
                let mut starts = vec![];
                while start + s > t {
                    starts.push(start);
                    start -= p;
                }
                for start in starts {
                    self.add_bucket((name.into(), key.into(), start, start + s), value);
                }
            }
            WindowDef::StreamTime { size } => {
                let mut st = self.max_ts.expect("max_ts set before assignment") as i128;
                if let Some(w) = self.watermark {
                    st = st.max(w as i128);
                }
                let s = size as i128;
                let start = floor_div(st, s) * s;
                self.add_bucket((name.into(), key.into(), start, start + s), value);
            }
            WindowDef::Session { gap } => {
                let mut cur: Addr = (name.into(), key.into(), t, t + gap as i128);
                let mut agg = Agg::one(value);
                loop {
                    // any live session of this window and key that intersects
                    // or touches the current one
                    let lo: Addr = (cur.0.clone(), cur.1.clone(), i128::MIN, i128::MIN);
                    let hi: Addr = (cur.0.clone(), cur.1.clone(), i128::MAX, i128::MAX);
                    let hit = self
                        .live
                        .range(lo..=hi)
                        .map(|(a, _)| a)
                        .find(|a| a.2 <= cur.3 && cur.2 <= a.3)
                        .cloned();
                    match hit {
                        None => break,
                        Some(a) => {
                            let g = self.live.remove(&a).unwrap();
                            agg.merge(&g);
                            cur.2 = cur.2.min(a.2);
                            cur.3 = cur.3.max(a.3);
                        }
                    }
                }
                assert!(self.live.insert(cur, agg).is_none());
            }
        }
    }

    fn add_bucket(&mut self, a: Addr, v: i64) {
        match self.live.get_mut(&a) {
            Some(g) => g.add(v),
            None => {
                self.live.insert(a, Agg::one(v));
            }
        }
    }

    // ------------------------------------------------------------------
    // Verbs.

    /// One delivery as its own call. `Ok(None)` = identical redelivery (no
    /// reconciliation at all).
    fn ingest_one(&mut self, d: &Delivery) -> Result<(Vec<Change>, Vec<LateRecord>), Rejection> {
        self.ingest_counted(d).map(|(c, l, _)| (c, l))
    }

    /// `ingest_one`, also saying what the delivery was.
    fn ingest_counted(
        &mut self,
        d: &Delivery,
    ) -> Result<(Vec<Change>, Vec<LateRecord>, Kind), Rejection> {
        let Some(part) = self.parts.get(&d.partition) else {
            return Err(Rejection::UnknownPartition(d.partition.clone()));
        };
        let c = part.sources.len() as i64 - 1;
        let offset = d.offset.unwrap_or(c + 1);
        if offset <= c {
            if offset >= 0 && part.sources[offset as usize] == d.event {
                return Ok((vec![], vec![], Kind::Redelivery));
            }
            return Err(Rejection::OffsetConflict("model".into()));
        }
        if offset > c + 1 {
            return Err(Rejection::OffsetConflict("model".into()));
        }
        let e = &d.event;
        let identity = (e.key.clone(), e.timestamp, e.value);
        let mut late_out = vec![];
        let mut kind = Kind::Unique;
        match self.ids.get(&e.id) {
            Some(known) if *known == identity => {
                kind = Kind::Duplicate;
                self.parts
                    .get_mut(&d.partition)
                    .unwrap()
                    .sources
                    .push(e.clone());
            }
            Some(_) => return Err(Rejection::IdentityConflict("model".into())),
            None => {
                self.ids.insert(e.id.clone(), identity);
                self.parts
                    .get_mut(&d.partition)
                    .unwrap()
                    .sources
                    .push(e.clone());
                self.max_ts = Some(match self.max_ts {
                    None => e.timestamp,
                    Some(m) => m.max(e.timestamp),
                });
                let is_late = match self.watermark {
                    Some(w) => (e.timestamp as i128) + (self.lateness as i128) < w as i128,
                    None => false,
                };
                if is_late {
                    let w = self.watermark.unwrap();
                    self.late.push((e.clone(), w));
                    late_out.push(LateRecord {
                        seq: self.late.len() as u64,
                        event: e.clone(),
                        watermark: w,
                    });
                }
                let windows: Vec<(String, WindowDef)> =
                    self.windows.iter().map(|(n, d)| (n.clone(), *d)).collect();
                for (name, def) in windows {
                    if self.no_windows {
                        break;
                    }
                    let is_stream = matches!(def, WindowDef::StreamTime { .. });
                    if is_late && !is_stream {
                        continue;
                    }
                    self.add_to_window(&name, def, &e.key, e.timestamp, e.value);
                }
            }
        }
        let (changes, _finalized) = self.reconcile_and_finalize();
        Ok((changes, late_out, kind))
    }

    pub fn ingest(&mut self, batch: &[Delivery]) -> Result<IngestOutcome, BatchRejection> {
        // Atomicity: first run the batch on a copy that only tracks
        // deliveries (whether a delivery is rejected depends on nothing
        // else); a single delivery checks everything before it mutates.
        if batch.len() > 1 && !self.no_windows {
            let mut probe = self.sources_only();
            for (index, d) in batch.iter().enumerate() {
                if let Err(rejection) = probe.ingest_one(d) {
                    return Err(BatchRejection { index, rejection });
                }
            }
        }
        let mut out = IngestOutcome::default();
        for (index, d) in batch.iter().enumerate() {
            match self.ingest_counted(d) {
                Ok((ch, late, kind)) => {
                    out.changes.extend(ch);
                    out.late.extend(late);
                    match kind {
                        Kind::Duplicate => out.duplicates += 1,
                        Kind::Redelivery => out.redeliveries += 1,
                        Kind::Unique => {}
                    }
                }
                Err(rejection) => {
                    assert!(
                        index == 0 && batch.len() == 1 || self.no_windows,
                        "probe and model disagree"
                    );
                    return Err(BatchRejection { index, rejection });
                }
            }
        }
        out.watermark = self.watermark;
        let named: BTreeSet<&String> = batch.iter().map(|d| &d.partition).collect();
        out.offsets = named
            .into_iter()
            .map(|p| (p.clone(), self.parts[p].sources.len() as i64 - 1))
            .collect();
        Ok(out)
    }

    fn recompute_watermark(&mut self) {
        let active: Vec<&Part> = self.parts.values().filter(|p| !p.idle).collect();
        if active.is_empty() || active.iter().any(|p| p.progress.is_none()) {
            return;
        }
        let cand = active.iter().map(|p| p.progress.unwrap()).min().unwrap();
        self.watermark = Some(match self.watermark {
            None => cand,
            Some(w) => w.max(cand),
        });
    }

    fn tick(&mut self) -> TickOutcome {
        self.recompute_watermark();
        let (changes, finalized) = self.reconcile_and_finalize();
        TickOutcome {
            changes,
            watermark: self.watermark,
            finalized_count: finalized.len(),
            finalized,
        }
    }

    pub fn advance(&mut self, partition: &str, w: i64) -> Result<TickOutcome, Rejection> {
        let Some(p) = self.parts.get_mut(partition) else {
            return Err(Rejection::UnknownPartition(partition.into()));
        };
        p.progress = Some(match p.progress {
            None => w,
            Some(old) => old.max(w),
        });
        p.idle = false;
        Ok(self.tick())
    }

    pub fn mark_idle(&mut self, partition: &str) -> Result<TickOutcome, Rejection> {
        let Some(p) = self.parts.get_mut(partition) else {
            return Err(Rejection::UnknownPartition(partition.into()));
        };
        p.idle = true;
        Ok(self.tick())
    }

    // ------------------------------------------------------------------
    // Queries.

    pub fn watermark(&self) -> Option<i64> {
        self.watermark
    }
    pub fn sequence(&self) -> u64 {
        self.seq
    }
    pub fn late_len(&self) -> u64 {
        self.late.len() as u64
    }
    pub fn live_buckets(&self) -> usize {
        self.live.len()
    }
    pub fn partitions(&self) -> Vec<PartitionStatus> {
        self.parts
            .iter()
            .map(|(n, p)| PartitionStatus {
                name: n.clone(),
                offset: p.sources.len() as i64 - 1,
                progress: p.progress,
                idle: p.idle,
            })
            .collect()
    }
    pub fn results(&self, window: Option<&str>, key: Option<&str>) -> Vec<WindowResult> {
        self.visible
            .iter()
            .filter(|(a, _)| window.is_none_or(|w| &*a.0 == w) && key.is_none_or(|k| &*a.1 == k))
            .map(|(a, g)| row(a, g))
            .collect()
    }
    pub fn late(&self, after: u64, limit: usize) -> Vec<LateRecord> {
        self.late
            .iter()
            .enumerate()
            .map(|(i, (e, w))| LateRecord {
                seq: i as u64 + 1,
                event: e.clone(),
                watermark: *w,
            })
            .filter(|r| r.seq > after)
            .take(limit)
            .collect()
    }

    // ------------------------------------------------------------------
    // Checkpoint format (version 1), written by hand.

    pub fn checkpoint_state(&self) -> String {
        self.state_text(false)
    }

    /// The state `S` (`chained == false`), or `S'` of the digest: each
    /// partition's sources and the late records replaced by the hex of
    /// their chains (`chained`).
    fn state_text(&self, chained: bool) -> String {
        let mut s = String::new();
        // keys sorted: changelog, clock, late, pipeline, sources, windows
        s.push_str("{\"changelog\":{\"sequence\":");
        s.push_str(&self.seq.to_string());
        s.push_str(",\"visible\":");
        push_results(&mut s, &self.visible);
        s.push_str("},\"clock\":{\"max_timestamp\":");
        push_opt(&mut s, self.max_ts);
        s.push_str(",\"partitions\":{");
        for (i, (n, p)) in self.parts.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            push_str(&mut s, n);
            s.push_str(":{\"idle\":");
            s.push_str(if p.idle { "true" } else { "false" });
            s.push_str(",\"progress\":");
            push_opt(&mut s, p.progress);
            s.push('}');
        }
        s.push_str("},\"watermark\":");
        push_opt(&mut s, self.watermark);
        let late: Vec<String> = self
            .late
            .iter()
            .map(|(e, w)| {
                let mut item = String::from("[");
                push_event(&mut item, e);
                item.push(',');
                item.push_str(&w.to_string());
                item.push(']');
                item
            })
            .collect();
        s.push_str("},\"late\":");
        push_list(&mut s, &late, chained);
        s.push_str(",\"pipeline\":{\"lateness\":");
        s.push_str(&self.lateness.to_string());
        s.push_str(",\"partitions\":[");
        for (i, p) in self.partitions.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            push_str(&mut s, p);
        }
        s.push_str("],\"windows\":{");
        for (i, (n, d)) in self.windows.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            push_str(&mut s, n);
            s.push(':');
            match *d {
                WindowDef::Fixed { size } => {
                    s.push_str(&format!("{{\"kind\":\"fixed\",\"size\":{size}}}"))
                }
                WindowDef::Sliding { size, step } => s.push_str(&format!(
                    "{{\"kind\":\"sliding\",\"size\":{size},\"step\":{step}}}"
                )),
                WindowDef::Session { gap } => {
                    s.push_str(&format!("{{\"gap\":{gap},\"kind\":\"session\"}}"))
                }
                WindowDef::StreamTime { size } => {
                    s.push_str(&format!("{{\"kind\":\"stream_time\",\"size\":{size}}}"))
                }
            }
        }
        s.push_str("}},\"sources\":{");
        for (i, (n, p)) in self.parts.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            push_str(&mut s, n);
            s.push(':');
            let items: Vec<String> = p
                .sources
                .iter()
                .map(|e| {
                    let mut item = String::new();
                    push_event(&mut item, e);
                    item
                })
                .collect();
            push_list(&mut s, &items, chained);
        }
        s.push_str("},\"windows\":");
        push_results(&mut s, &self.live);
        s.push('}');
        s
    }

    pub fn checkpoint(&self) -> Vec<u8> {
        self.checkpoint_with_hash(None)
    }

    /// The envelope; with `Some(hex)` that digest is written instead of the
    /// computed one (the differential test uses it to skip hashing when the
    /// engine's restore verifies the digest anyway).
    pub fn checkpoint_with_hash(&self, hex: Option<&str>) -> Vec<u8> {
        let state = self.checkpoint_state();
        let hex: String = match hex {
            Some(h) => h.to_string(),
            None => to_hex(&Sha256::digest(self.state_text(true).as_bytes())),
        };
        format!(
            "{{\"digest\":\"{hex}\",\"format\":\"streamforge-checkpoint\",\"state\":{state},\"version\":2}}"
        )
        .into_bytes()
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Items of the state's append-only arrays per chunk of the digest chain.
const CHUNK: usize = 4096;

/// The digest chain of an array, as defined: each chunk of [`CHUNK`] items
/// hashed as a JSON array, `c = SHA-256(c || leaf)` from 32 zero bytes.
pub fn chain_hex(items: &[String]) -> String {
    let mut c = [0u8; 32].to_vec();
    for chunk in items.chunks(CHUNK) {
        let leaf = Sha256::digest(format!("[{}]", chunk.join(",")).as_bytes());
        let mut h = Sha256::new();
        h.update(&c);
        h.update(leaf);
        c = h.finalize().to_vec();
    }
    to_hex(&c)
}

/// Appends an array of items, or (`chained`) the string of its chain.
fn push_list(s: &mut String, items: &[String], chained: bool) {
    if chained {
        s.push('"');
        s.push_str(&chain_hex(items));
        s.push('"');
    } else {
        s.push('[');
        s.push_str(&items.join(","));
        s.push(']');
    }
}

fn push_str(s: &mut String, v: &str) {
    s.push_str(&serde_json::to_string(v).unwrap());
}

fn push_opt(s: &mut String, v: Option<i64>) {
    match v {
        None => s.push_str("null"),
        Some(x) => s.push_str(&x.to_string()),
    }
}

fn push_event(s: &mut String, e: &Event) {
    s.push('[');
    push_str(s, &e.id);
    s.push(',');
    push_str(s, &e.key);
    s.push_str(&format!(",{},{}]", e.timestamp, e.value));
}

fn push_results(s: &mut String, m: &BTreeMap<Addr, Agg>) {
    s.push('[');
    for (i, (a, g)) in m.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!("{{\"count\":{},\"end\":{},\"key\":", g.count, a.3));
        push_str(s, &a.1);
        s.push_str(&format!(
            ",\"max\":{},\"min\":{},\"start\":{},\"sum\":{},\"window\":",
            g.max, g.min, a.2, g.sum
        ));
        push_str(s, &a.0);
        s.push('}');
    }
    s.push(']');
}
