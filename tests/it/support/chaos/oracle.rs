//! The batch oracle: from the complete input (every event of a run, in any
//! order), the rows each window must end with. Written from the processing
//! rules of docs/semantics.md and docs/pipeline.md alone; it shares no code
//! with `crates/engine/src` (it reads the pipeline file as plain JSON and computes
//! every bucket from scratch, by sorting and scanning, with i128 arithmetic).
//!
//! - `fixed`, `sliding` and `session` windows: the final aggregate of every
//!   bucket, from the unique events. Sessions are merged by one sweep over
//!   each key's sorted timestamps (the final sessions do not depend on the
//!   order events arrived in).
//! - `stream_time` windows assign by arrival order, so there is no single
//!   right set of rows; [`Oracle::check_stream_time`] checks what holds in
//!   every order: each key's total count and sum over all its windows, every
//!   window one aligned slot `[k·size, (k+1)·size)` inside the stream's span,
//!   one row per key and slot, and min and max within the key's values.

use std::collections::{BTreeMap, BTreeSet};

/// A result row, as the service writes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    pub window: String,
    pub key: String,
    pub start: i128,
    pub end: i128,
    pub count: u64,
    pub sum: i128,
    pub min: i64,
    pub max: i64,
}

/// A row's address.
pub type Addr = (String, String, i128, i128);

impl Row {
    pub fn addr(&self) -> Addr {
        (self.window.clone(), self.key.clone(), self.start, self.end)
    }

    /// From the service's Result object.
    pub fn from_json(v: &serde_json::Value) -> Result<Row, String> {
        let int = |f: &str| -> Result<i128, String> {
            let n = &v[f];
            n.as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .ok_or_else(|| format!("result field {f} is not an integer: {v}"))
        };
        let text = |f: &str| -> Result<String, String> {
            v[f].as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("result field {f} is not a string: {v}"))
        };
        Ok(Row {
            window: text("window")?,
            key: text("key")?,
            start: int("start")?,
            end: int("end")?,
            count: int("count")? as u64,
            sum: int("sum")?,
            min: int("min")? as i64,
            max: int("max")? as i64,
        })
    }
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} [{},{}) c={} s={} min={} max={}",
            self.window, self.key, self.start, self.end, self.count, self.sum, self.min, self.max
        )
    }
}

/// A window definition, as the pipeline file gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Def {
    Fixed(i128),
    Sliding(i128, i128),
    Session(i128),
    StreamTime(i128),
}

/// The windows and lateness of a pipeline file.
#[derive(Debug, Clone)]
pub struct Spec {
    pub windows: BTreeMap<String, Def>,
    pub lateness: i128,
}

impl Spec {
    /// Reads a pipeline file's JSON (no validation beyond what is used).
    pub fn from_json(text: &str) -> Result<Spec, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut windows = BTreeMap::new();
        let defs = v["windows"].as_object().ok_or("no windows")?;
        for (name, d) in defs {
            let n = |f: &str| -> Result<i128, String> {
                d[f].as_i64()
                    .map(i128::from)
                    .ok_or_else(|| format!("window {name}: no {f}"))
            };
            let def = match d["kind"].as_str() {
                Some("fixed") => Def::Fixed(n("size")?),
                Some("sliding") => Def::Sliding(n("size")?, n("step")?),
                Some("session") => Def::Session(n("gap")?),
                Some("stream_time") => Def::StreamTime(n("size")?),
                other => return Err(format!("window {name}: kind {other:?}")),
            };
            windows.insert(name.clone(), def);
        }
        let lateness = v["lateness"].as_i64().ok_or("no lateness")?.into();
        Ok(Spec { windows, lateness })
    }

    /// Whether a window is a stream-time one.
    pub fn is_stream_time(&self, window: &str) -> bool {
        matches!(self.windows.get(window), Some(Def::StreamTime(_)))
    }
}

/// One input event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ev {
    pub id: String,
    pub key: String,
    pub ts: i64,
    pub value: i64,
}

/// Floor division.
fn floor_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

#[derive(Debug, Clone, Copy)]
struct Agg {
    count: u64,
    sum: i128,
    min: i64,
    max: i64,
}

impl Agg {
    fn one(v: i64) -> Agg {
        Agg {
            count: 1,
            sum: v.into(),
            min: v,
            max: v,
        }
    }

    fn add(&mut self, v: i64) {
        self.count += 1;
        self.sum += i128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
}

/// The oracle of one run.
pub struct Oracle {
    spec: Spec,
    /// Unique events (first delivery of each id wins; the generator never
    /// reuses an id with another identity).
    events: Vec<Ev>,
}

impl Oracle {
    pub fn new(spec: Spec, all: impl IntoIterator<Item = Ev>) -> Result<Oracle, String> {
        let mut seen: BTreeMap<String, (String, i64, i64)> = BTreeMap::new();
        let mut events = Vec::new();
        for e in all {
            match seen.get(&e.id) {
                Some(identity) if *identity != (e.key.clone(), e.ts, e.value) => {
                    return Err(format!(
                        "the input reuses the id {} with another identity",
                        e.id
                    ))
                }
                Some(_) => {}
                None => {
                    seen.insert(e.id.clone(), (e.key.clone(), e.ts, e.value));
                    events.push(e);
                }
            }
        }
        Ok(Oracle { spec, events })
    }

    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Every bucket of the event-time windows (`fixed`, `sliding`,
    /// `session`) with its final aggregate, in address order.
    pub fn event_time_rows(&self) -> Vec<Row> {
        let mut out: BTreeMap<Addr, Agg> = BTreeMap::new();
        fn put(out: &mut BTreeMap<Addr, Agg>, addr: Addr, v: i64) {
            out.entry(addr)
                .and_modify(|a| a.add(v))
                .or_insert_with(|| Agg::one(v));
        }
        for (name, def) in &self.spec.windows {
            match *def {
                Def::Fixed(size) => {
                    for e in &self.events {
                        let s = floor_div(e.ts.into(), size) * size;
                        put(
                            &mut out,
                            (name.clone(), e.key.clone(), s, s + size),
                            e.value,
                        );
                    }
                }
                Def::Sliding(size, step) => {
                    for e in &self.events {
                        let t = i128::from(e.ts);
                        let mut s = floor_div(t, step) * step;
                        while s > t - size {
                            put(
                                &mut out,
                                (name.clone(), e.key.clone(), s, s + size),
                                e.value,
                            );
                            s -= step;
                        }
                    }
                }
                Def::Session(gap) => {
                    let mut by_key: BTreeMap<&str, Vec<(i128, i64)>> = BTreeMap::new();
                    for e in &self.events {
                        by_key
                            .entry(&e.key)
                            .or_default()
                            .push((e.ts.into(), e.value));
                    }
                    for (key, mut evs) in by_key {
                        evs.sort();
                        let mut cur: Option<(i128, i128, Agg)> = None;
                        for (t, v) in evs {
                            cur = Some(match cur {
                                // overlaps or touches: merge
                                Some((s, end, mut a)) if t <= end => {
                                    a.add(v);
                                    (s, end.max(t + gap), a)
                                }
                                Some((s, end, a)) => {
                                    out.insert((name.clone(), key.to_string(), s, end), a);
                                    (t, t + gap, Agg::one(v))
                                }
                                None => (t, t + gap, Agg::one(v)),
                            });
                        }
                        if let Some((s, end, a)) = cur {
                            out.insert((name.clone(), key.to_string(), s, end), a);
                        }
                    }
                }
                Def::StreamTime(_) => {}
            }
        }
        out.into_iter()
            .map(|((window, key, start, end), a)| Row {
                window,
                key,
                start,
                end,
                count: a.count,
                sum: a.sum,
                min: a.min,
                max: a.max,
            })
            .collect()
    }

    /// The event-time rows that are ready (published) at watermark `w`:
    /// `end <= w`. With no late events, these are exactly the rows the
    /// changelog must hold once the global watermark is `w`.
    pub fn ready_at(&self, w: i128) -> Vec<Row> {
        self.event_time_rows()
            .into_iter()
            .filter(|r| r.end <= w)
            .collect()
    }

    /// Checks the rows of the `stream_time` windows (all of them ready:
    /// after a watermark above every slot) against what holds in every
    /// arrival order. `end` is the largest watermark of the run.
    pub fn check_stream_time(&self, rows: &[Row], end: i128) -> Result<(), String> {
        for (name, def) in &self.spec.windows {
            let Def::StreamTime(size) = *def else {
                continue;
            };
            let mine: Vec<&Row> = rows.iter().filter(|r| r.window == *name).collect();
            let mut totals: BTreeMap<&str, (u64, i128, i64, i64)> = BTreeMap::new();
            for e in &self.events {
                let t = totals.entry(&e.key).or_insert((0, 0, e.value, e.value));
                t.0 += 1;
                t.1 += i128::from(e.value);
                t.2 = t.2.min(e.value);
                t.3 = t.3.max(e.value);
            }
            let first = self.events.iter().map(|e| i128::from(e.ts)).min();
            let Some(first) = first else {
                if mine.is_empty() {
                    continue;
                }
                return Err(format!("{name}: rows without events"));
            };
            let lo = floor_div(first, size) * size;
            let hi = floor_div(end.max(first), size) * size;
            let mut got: BTreeMap<&str, (u64, i128)> = BTreeMap::new();
            let mut slots = BTreeSet::new();
            for r in &mine {
                if floor_div(r.start, size) * size != r.start || r.end != r.start + size {
                    return Err(format!("{name}: {r} is not one aligned slot of {size}"));
                }
                if r.start < lo || r.start > hi {
                    return Err(format!(
                        "{name}: {r} lies outside the stream's slots [{lo}, {hi}]"
                    ));
                }
                if !slots.insert((r.key.as_str(), r.start)) {
                    return Err(format!(
                        "{name}: two rows for key {} and slot {}",
                        r.key, r.start
                    ));
                }
                let Some(t) = totals.get(r.key.as_str()) else {
                    return Err(format!("{name}: {r}: the key has no events"));
                };
                if r.count == 0 || r.min < t.2 || r.max > t.3 || r.min > r.max {
                    return Err(format!(
                        "{name}: {r}: count, min or max impossible for the key (values {}..={})",
                        t.2, t.3
                    ));
                }
                let g = got.entry(&r.key).or_insert((0, 0));
                g.0 += r.count;
                g.1 += r.sum;
            }
            for (key, t) in &totals {
                let g = got.get(key).copied().unwrap_or((0, 0));
                if g != (t.0, t.1) {
                    return Err(format!(
                        "{name}: key {key}: count {} and sum {} over its windows, the input has count {} and sum {}",
                        g.0, g.1, t.0, t.1
                    ));
                }
            }
            if let Some(k) = got.keys().find(|k| !totals.contains_key(*k)) {
                return Err(format!("{name}: rows for the unknown key {k}"));
            }
        }
        Ok(())
    }
}

/// The rows a changelog leaves when applied in order: an upsert sets its
/// address, a retraction must remove exactly the row it names. Finalized
/// rows are kept (finalization is silent).
pub fn apply_changelog(changes: &[serde_json::Value]) -> Result<BTreeMap<Addr, Row>, String> {
    let mut rows: BTreeMap<Addr, Row> = BTreeMap::new();
    for c in changes {
        let row = Row::from_json(&c["result"])?;
        match c["op"].as_str() {
            Some("upsert") => {
                if let Some(old) = rows.get(&row.addr()) {
                    return Err(format!(
                        "change {}: upsert of {row} over the visible {old} without a retraction",
                        c["seq"]
                    ));
                }
                rows.insert(row.addr(), row);
            }
            Some("retract") => match rows.remove(&row.addr()) {
                Some(old) if old == row => {}
                Some(old) => {
                    return Err(format!(
                        "change {}: retraction of {row}, but {old} is visible",
                        c["seq"]
                    ))
                }
                None => {
                    return Err(format!(
                        "change {}: retraction of {row}, which is not visible",
                        c["seq"]
                    ))
                }
            },
            other => return Err(format!("change {}: op {other:?}", c["seq"])),
        }
    }
    Ok(rows)
}

/// The first difference between two sorted row lists, for messages.
pub fn diff(what: &str, got: &[Row], want: &[Row]) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let g: BTreeSet<&Row> = got.iter().collect();
    let w: BTreeSet<&Row> = want.iter().collect();
    let extra: Vec<String> = g.difference(&w).take(3).map(|r| r.to_string()).collect();
    let missing: Vec<String> = w.difference(&g).take(3).map(|r| r.to_string()).collect();
    Err(format!(
        "{what}: {} rows, expected {}; unexpected (first 3): [{}]; missing (first 3): [{}]",
        got.len(),
        want.len(),
        extra.join("; "),
        missing.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: &str, key: &str, ts: i64, value: i64) -> Ev {
        Ev {
            id: id.into(),
            key: key.into(),
            ts,
            value,
        }
    }

    /// docs/pipeline.md, session example: events at 0, 10, 3, 5, 15, 21 with
    /// gap 5 end as [0, 20) and [21, 26).
    #[test]
    fn sessions_of_the_documented_example() {
        let spec = Spec::from_json(
            r#"{"partitions":["p"],"windows":{"s":{"kind":"session","gap":5}},"lateness":0}"#,
        )
        .unwrap();
        let evs = [0, 10, 3, 5, 15, 21]
            .iter()
            .enumerate()
            .map(|(i, t)| ev(&format!("e{i}"), "k", *t, 1));
        let o = Oracle::new(spec, evs).unwrap();
        let rows: Vec<(i128, i128, u64)> = o
            .event_time_rows()
            .iter()
            .map(|r| (r.start, r.end, r.count))
            .collect();
        assert_eq!(rows, [(0, 20, 5), (21, 26, 1)]);
    }

    /// docs/pipeline.md: sliding size 10 step 4 at t = -7 is in [-16,-6),
    /// [-12,-2), [-8,2); fixed 10 puts -1 in [-10, 0); a duplicate id is
    /// counted once.
    #[test]
    fn fixed_and_sliding_assignment() {
        let spec = Spec::from_json(
            r#"{"partitions":["p"],"windows":{"f":{"kind":"fixed","size":10},"h":{"kind":"sliding","size":10,"step":4}},"lateness":0}"#,
        )
        .unwrap();
        let o = Oracle::new(
            spec,
            [
                ev("a", "k", -7, 2),
                ev("a", "k", -7, 2),
                ev("b", "k", -1, 3),
            ],
        )
        .unwrap();
        let rows: Vec<String> = o.event_time_rows().iter().map(|r| r.to_string()).collect();
        assert_eq!(
            rows,
            [
                "f k [-10,0) c=2 s=5 min=2 max=3",
                "h k [-16,-6) c=1 s=2 min=2 max=2",
                "h k [-12,-2) c=1 s=2 min=2 max=2",
                "h k [-8,2) c=2 s=5 min=2 max=3",
                "h k [-4,6) c=1 s=3 min=3 max=3",
            ]
        );
        assert!(Oracle::new(
            Spec::from_json(r#"{"windows":{"f":{"kind":"fixed","size":1}},"lateness":0}"#).unwrap(),
            [ev("a", "k", 1, 1), ev("a", "k", 1, 2)]
        )
        .is_err());
    }

    #[test]
    fn stream_time_checks_hold_for_any_order_and_catch_a_lost_event() {
        let spec =
            Spec::from_json(r#"{"windows":{"t":{"kind":"stream_time","size":10}},"lateness":0}"#)
                .unwrap();
        let o = Oracle::new(spec, [ev("a", "k", 25, 1), ev("b", "k", 3, 2)]).unwrap();
        let row = |start, count, sum, min, max| Row {
            window: "t".into(),
            key: "k".into(),
            start,
            end: start + 10,
            count,
            sum,
            min,
            max,
        };
        // arrival 25 then 3 (W = 30 between): [20,30) and [30,40)
        o.check_stream_time(&[row(20, 1, 1, 1, 1), row(30, 1, 2, 2, 2)], 40)
            .unwrap();
        // arrival 3 then 25: [0,10) and [20,30)
        o.check_stream_time(&[row(0, 1, 2, 2, 2), row(20, 1, 1, 1, 1)], 40)
            .unwrap();
        assert!(o.check_stream_time(&[row(20, 1, 1, 1, 1)], 40).is_err());
        assert!(o
            .check_stream_time(&[row(20, 2, 3, 1, 2), row(25, 0, 0, 0, 0)], 40)
            .is_err());
    }

    #[test]
    fn the_changelog_is_applied_strictly() {
        let up = |seq: u64, count: u64| serde_json::json!({"seq":seq,"op":"upsert","result":{"window":"w","key":"k","start":0,"end":10,"count":count,"sum":count,"min":1,"max":1}});
        let down = |seq: u64, count: u64| serde_json::json!({"seq":seq,"op":"retract","result":{"window":"w","key":"k","start":0,"end":10,"count":count,"sum":count,"min":1,"max":1}});
        let rows = apply_changelog(&[up(1, 1), down(2, 1), up(3, 2)]).unwrap();
        assert_eq!(rows.values().next().unwrap().count, 2);
        assert!(apply_changelog(&[up(1, 1), up(2, 2)]).is_err());
        assert!(apply_changelog(&[up(1, 1), down(2, 2)]).is_err());
        assert!(apply_changelog(&[down(1, 1)]).is_err());
    }
}
