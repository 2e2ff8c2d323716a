//! The engine façade: push, advance (the processing order), finish, status,
//! checkpoint and restore.
//!
//! An advance to `W` takes every buffered event with `time <= W` and runs:
//!
//! ```text
//! for each distinct time t of the taken events, ascending:
//!     expire every deadline d < t            (ascending d)
//!     for each event e at t, by ordinal:
//!         for each pattern P, by name:   observe(P, e)
//! expire every deadline d <= W               (ascending d)
//! ```
//!
//! Atomicity: an advance records, the first time it changes a (pattern,
//! key) state, the state as it was (moved, not copied, when the change
//! replaces the branch set), plus the deadline entries it added and
//! removed. A limit reached anywhere restores exactly those and puts the
//! taken events back: the cost of failing is the cost of what the advance
//! touched, never a copy of the engine.

use std::sync::Arc;

use crate::branch::Shape;
use crate::buffer::{Buffer, Pending};
use crate::compiled::Conds;
use crate::deadlines::Deadlines;
use crate::document::{Document, Limits};
use crate::error::{PushRejection, Rejection};
use crate::event::Event;
use crate::expiry::expire;
use crate::keystate::{observe, KeyState, Scratch, Waits};
pub use crate::outcome::{
    AdvanceOutcome, DocumentChange, PatternStatus, PushOutcome, Status, TypeMismatch,
};
use crate::selection::{select, Emitter, Group};
use crate::{FINAL_WATERMARK, MAX_EVENT_TIME};
use streamforge_keys::{KeyId, KeyTable};

/// Largest ordinal (2^53 - 1).
pub(crate) const MAX_ORDINAL: u64 = MAX_EVENT_TIME as u64;

/// A pattern's names and shape, shared by output records, and its
/// conditions with their leaves numbered.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    pub name: Arc<str>,
    pub stage_names: Arc<[Arc<str>]>,
    pub shape: Shape,
    pub conds: Arc<Conds>,
}

impl Compiled {
    pub(crate) fn all(doc: &Document) -> Vec<Compiled> {
        doc.patterns
            .iter()
            .map(|p| Compiled {
                name: Arc::from(p.name.as_str()),
                stage_names: p
                    .stages
                    .iter()
                    .map(|s| Arc::from(s.name.as_str()))
                    .collect(),
                shape: Shape::of(p),
                conds: Arc::new(Conds::of(p)),
            })
            .collect()
    }
}

/// The `active_states` limit after an observation of (pattern, key).
#[inline]
fn check_active(
    live: u64,
    limit: u64,
    c: &Compiled,
    keys: &KeyTable,
    key: KeyId,
) -> Result<(), Rejection> {
    if live > limit {
        return Err(Rejection::LimitExceeded(format!(
            "limit active_states exceeded: {live} branches and waits for pattern {:?}, key {:?} (at most {limit})",
            c.name,
            keys.name(key)
        )));
    }
    Ok(())
}

impl Undo {
    fn clear(&mut self) {
        self.states.clear();
        self.inserted.clear();
        self.expired.clear();
    }
}

/// What an advance changed, to undo it if it fails.
#[derive(Debug, Clone, Default)]
struct Undo {
    /// (pattern, key, the state before the advance first changed it).
    states: Vec<(u32, KeyId, KeyState)>,
    /// Deadline entries the advance added.
    inserted: Vec<(i64, u32, KeyId)>,
    /// Deadline entries the advance expired.
    expired: Vec<(i64, u32, KeyId)>,
}

/// The complete state of the pattern engine.
#[derive(Clone)]
pub struct Engine {
    pub(crate) doc: Document,
    pub(crate) compiled: Vec<Compiled>,
    pub(crate) keys: KeyTable,
    pub(crate) buffer: Buffer,
    /// `states[pattern][key]`.
    pub(crate) states: Vec<Vec<KeyState>>,
    pub(crate) deadlines: Deadlines,
    pub(crate) watermark: i64,
    pub(crate) next_ordinal: u64,
    pub(crate) sequence: u64,
    /// Advances started (numbers the undo saves).
    epoch: u64,
    scratch: Scratch,
    /// The previous advance's taken events and undo log, cleared (their
    /// capacity is reused).
    taken: Vec<Pending>,
    undo: Undo,
    key_scratch: Vec<KeyId>,
    /// The entries of the deadline being expired (reused).
    due: Vec<(u32, KeyId)>,
    /// The previous advance's output count (the next one's first capacity).
    out_hint: usize,
    /// `mismatches[pattern][leaf]`: comparisons false because their values'
    /// types differ. Diagnostics, not state: never in a checkpoint, never
    /// undone by a failed advance.
    mismatches: Vec<Box<[u64]>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("watermark", &self.watermark)
            .field("buffered", &self.buffer.len())
            .field("next_ordinal", &self.next_ordinal)
            .field("sequence", &self.sequence)
            .field("keys", &self.keys.len())
            .field("deadlines", &self.deadlines.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// A fresh engine: watermark -1, nothing buffered, next ordinal 1.
    pub fn new(doc: Document) -> Engine {
        let compiled = Compiled::all(&doc);
        let n = doc.patterns.len();
        let mismatches = compiled
            .iter()
            .map(|c| vec![0; c.conds.leaves()].into_boxed_slice())
            .collect();
        Engine {
            mismatches,
            states: vec![Vec::new(); doc.patterns.len()],
            compiled,
            doc,
            keys: KeyTable::default(),
            buffer: Buffer::default(),
            deadlines: Deadlines::new(n),
            watermark: -1,
            next_ordinal: 1,
            sequence: 0,
            epoch: 0,
            scratch: Scratch::default(),
            taken: Vec::new(),
            undo: Undo::default(),
            key_scratch: Vec::new(),
            due: Vec::new(),
            out_hint: 0,
        }
    }

    /// The document (patterns and limits in force).
    pub fn document(&self) -> &Document {
        &self.doc
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.doc.limits
    }

    /// Puts other limits in force (limits are policy, not state: a lower
    /// `active_states` takes effect at the next observation of a key).
    pub fn set_limits(&mut self, limits: Limits) {
        self.doc.limits = limits;
    }

    /// Puts `doc` in force (its patterns and limits). A pattern whose name
    /// and definition are unchanged keeps its branches, waits and
    /// deadlines; a new or changed one starts empty and sees every event
    /// processed from now on (the ones buffered included); a removed one's
    /// state is dropped. The watermark, the buffer, the ordinals and the
    /// output sequence are unchanged; nothing is output.
    pub fn change_document(&mut self, doc: Document) -> DocumentChange {
        let from: Vec<Option<usize>> = doc
            .patterns
            .iter()
            .map(|p| self.doc.patterns.iter().position(|q| q == p))
            .collect();
        let mut change = DocumentChange::default();
        for (p, f) in doc.patterns.iter().zip(&from) {
            match f {
                Some(_) => change.kept.push(p.name.clone()),
                None => change.started.push(p.name.clone()),
            }
        }
        for (i, q) in self.doc.patterns.iter().enumerate() {
            if !from.contains(&Some(i)) && !doc.patterns.iter().any(|p| p.name == q.name) {
                change.removed.push(q.name.clone());
            }
        }
        let n = self.keys.len();
        let mut old = std::mem::take(&mut self.states);
        self.states = from
            .iter()
            .map(|f| match f {
                Some(i) => std::mem::take(&mut old[*i]),
                None => vec![KeyState::default(); n],
            })
            .collect();
        self.deadlines = std::mem::take(&mut self.deadlines).remap(&from);
        self.compiled = Compiled::all(&doc);
        // a kept pattern keeps its type mismatch counts, a new one starts at 0
        let mut counts = std::mem::take(&mut self.mismatches);
        self.mismatches = from
            .iter()
            .zip(&self.compiled)
            .map(|(f, c)| match f {
                Some(i) => std::mem::take(&mut counts[*i]),
                None => vec![0; c.conds.leaves()].into_boxed_slice(),
            })
            .collect();
        self.doc = doc;
        change
    }

    /// Interns a key and makes room for its states.
    pub(crate) fn intern(&mut self, key: &str) -> Option<KeyId> {
        self.intern_bytes(key.as_bytes())
    }

    /// [`Engine::intern`] by the key's bytes.
    #[inline]
    fn intern_bytes(&mut self, key: &[u8]) -> Option<KeyId> {
        if self.keys.len() > KeyId::MAX as usize {
            // Every id is taken: only a key already interned has one.
            return std::str::from_utf8(key).ok().and_then(|k| self.keys.get(k));
        }
        let id = self.keys.intern_bytes(key);
        let n = self.keys.len();
        for per_pattern in &mut self.states {
            if per_pattern.len() < n {
                per_pattern.resize_with(n, KeyState::default);
            }
        }
        Some(id)
    }

    /// Buffers a batch atomically: each event gets the next ordinal. The
    /// first event that is invalid (when built in code) or late (`time <=
    /// watermark`) rejects the whole batch, with its index; an empty batch
    /// is rejected too.
    pub fn push(&mut self, events: Vec<Event>) -> Result<PushOutcome, PushRejection> {
        if events.is_empty() {
            return Err(PushRejection {
                index: 0,
                rejection: Rejection::InvalidRequest("an empty batch".into()),
            });
        }
        for (index, e) in events.iter().enumerate() {
            if let Err(m) = e.validate() {
                return Err(PushRejection {
                    index,
                    rejection: Rejection::InvalidRequest(m),
                });
            }
            if e.time <= self.watermark {
                return Err(PushRejection {
                    index,
                    rejection: Rejection::LateEvent {
                        time: e.time,
                        watermark: self.watermark,
                    },
                });
            }
        }
        let n = events.len() as u64;
        let first = self.next_ordinal;
        if first.saturating_add(n - 1) > MAX_ORDINAL
            || self.keys.len() + events.len() > u32::MAX as usize
        {
            return Err(PushRejection {
                index: 0,
                rejection: Rejection::InvalidRequest(format!(
                    "ordinals are exhausted (at most {MAX_ORDINAL} events)"
                )),
            });
        }
        // keys first, in a tight loop (their lookups' cache misses overlap),
        // then the events
        let mut keys = std::mem::take(&mut self.key_scratch);
        keys.clear();
        // the room was checked above: interning cannot fail
        keys.extend(
            events
                .iter()
                .map(|e| self.intern_bytes(e.key_bytes()).unwrap_or(0)),
        );
        for (i, (e, &key)) in events.into_iter().zip(keys.iter()).enumerate() {
            self.buffer.push(Pending {
                time: e.time,
                ordinal: first + i as u64,
                key,
                event: e,
            });
        }
        self.key_scratch = keys;
        self.next_ordinal = first + n;
        Ok(PushOutcome {
            first,
            last: first + n - 1,
            buffered: self.buffer.len() as u64,
        })
    }

    /// Index of the first late event (`time <= watermark`), changing nothing.
    pub fn first_late(&self, events: &[Event]) -> Option<usize> {
        events.iter().position(|e| e.time <= self.watermark)
    }

    /// Processes every buffered event with `time <= watermark` and expires
    /// every deadline `<= watermark`; atomic.
    pub fn advance(&mut self, watermark: i64) -> Result<AdvanceOutcome, Rejection> {
        if watermark > FINAL_WATERMARK {
            return Err(Rejection::InvalidRequest(format!(
                "watermark {watermark} is above the final watermark {FINAL_WATERMARK}"
            )));
        }
        if watermark < self.watermark {
            return Err(Rejection::WatermarkRegression {
                watermark,
                current: self.watermark,
            });
        }
        if watermark == self.watermark {
            return Ok(AdvanceOutcome {
                output: Vec::new(),
                watermark,
                processed: 0,
            });
        }
        self.epoch += 1;
        let mut taken = std::mem::take(&mut self.taken);
        let mut undo = std::mem::take(&mut self.undo);
        self.buffer.take_through(watermark, &mut taken);
        let mut em = Emitter {
            out: Vec::with_capacity(self.out_hint),
            sequence: self.sequence,
            matches: 0,
            max_matches: self.doc.limits.max_results_per_advance,
        };
        match self.run(&taken, watermark, &mut undo, &mut em) {
            Ok(()) => {
                self.watermark = watermark;
                self.sequence = em.sequence;
                self.out_hint = em.out.len().min(4096);
                let processed = taken.len() as u64;
                taken.clear();
                undo.clear();
                self.taken = taken;
                self.undo = undo;
                Ok(AdvanceOutcome {
                    output: em.out,
                    watermark,
                    processed,
                })
            }
            Err(rejection) => {
                for (p, k, st) in undo.states.drain(..).rev() {
                    self.states[p as usize][k as usize] = st;
                }
                for &(d, p, k) in undo.inserted.iter().rev() {
                    self.deadlines.remove(d, p, k);
                }
                for &(d, p, k) in undo.expired.iter().rev() {
                    self.deadlines.insert(d, p, k);
                }
                undo.clear();
                self.undo = undo;
                self.buffer.put_back(taken.drain(..));
                self.taken = taken;
                Err(rejection)
            }
        }
    }

    /// `advance(FINAL_WATERMARK)`: every deadline expires.
    pub fn finish(&mut self) -> Result<AdvanceOutcome, Rejection> {
        self.advance(FINAL_WATERMARK)
    }

    fn run(
        &mut self,
        taken: &[Pending],
        watermark: i64,
        undo: &mut Undo,
        em: &mut Emitter,
    ) -> Result<(), Rejection> {
        let mut i = 0;
        let mut warmed = 0;
        while let Some(t) = taken.get(i).map(|e| e.time) {
            self.expire_through(t - 1, undo, em)?;
            while let Some(e) = taken.get(i).filter(|e| e.time == t) {
                if i >= warmed {
                    warmed = self.warm(taken, i);
                }
                for p in 0..self.compiled.len() {
                    self.observe(p, e, undo, em)?;
                }
                i += 1;
            }
        }
        self.expire_through(watermark, undo, em)
    }

    /// Reads the states (and their first branch) of the next few events'
    /// keys in one loop of independent loads, so that their cache misses
    /// overlap instead of stalling one observation each. Returns the index
    /// up to which states are warm.
    fn warm(&self, taken: &[Pending], from: usize) -> usize {
        const AHEAD: usize = 16;
        let to = (from + AHEAD).min(taken.len());
        let mut sum = 0usize;
        for e in &taken[from..to] {
            for states in &self.states {
                if let Some(st) = states.get(e.key as usize) {
                    sum = sum.wrapping_add(st.branches.len());
                    if let Some(b) = st.branches.first() {
                        sum = sum.wrapping_add(usize::from(b.wait));
                    }
                }
            }
        }
        std::hint::black_box(sum);
        to
    }

    /// Saves a state for undo the first time this advance changes it.
    fn save(&mut self, p: usize, k: KeyId, undo: &mut Undo) {
        let st = &mut self.states[p][k as usize];
        if st.saved_in != self.epoch {
            let old = st.clone();
            st.saved_in = self.epoch;
            undo.states.push((p as u32, k, old));
        }
    }

    fn observe(
        &mut self,
        p: usize,
        e: &Pending,
        undo: &mut Undo,
        em: &mut Emitter,
    ) -> Result<(), Rejection> {
        let pattern = &self.doc.patterns[p];
        let c = &self.compiled[p];
        let st = &mut self.states[p][e.key as usize];
        let Some(obs) = observe(
            pattern,
            &c.conds,
            &c.shape,
            st,
            e,
            &mut self.scratch,
            &mut self.mismatches[p],
        ) else {
            // the limit holds after every observation, also one that changes
            // nothing (a restore may have lowered it below what the key holds)
            let live = (st.branches.len() + st.waits.len()) as u64;
            return check_active(live, self.doc.limits.active_states, c, &self.keys, e.key);
        };
        // install, keeping the old state for undo on the first change
        let old_branches = std::mem::replace(&mut st.branches, obs.branches);
        let old_waits = match obs.waits {
            Some(w) => std::mem::replace(&mut st.waits, w.into()),
            None if st.saved_in != self.epoch => st.waits.clone(),
            None => Waits::default(),
        };
        if st.saved_in != self.epoch {
            undo.states.push((
                p as u32,
                e.key,
                KeyState {
                    branches: old_branches,
                    waits: old_waits,
                    saved_in: st.saved_in,
                },
            ));
            st.saved_in = self.epoch;
        }
        if obs.started {
            let d = e.time + pattern.within;
            if self.deadlines.insert(d, p as u32, e.key) {
                undo.inserted.push((d, p as u32, e.key));
            }
        }
        // 5. candidates: waits for a pattern with absence, else selection
        let cands = &mut self.scratch.candidates;
        if !cands.is_empty() {
            if pattern.absence.is_some() {
                crate::selection::order(cands, c.shape.len());
                st.waits.append(cands);
            } else {
                let g = Group {
                    pattern,
                    name: &c.name,
                    stage_names: &c.stage_names,
                    shape: &c.shape,
                    key: self.keys.name(e.key),
                };
                select(&g, st, cands, e.time, em)?;
            }
        }
        let live = (st.branches.len() + st.waits.len()) as u64;
        check_active(live, self.doc.limits.active_states, c, &self.keys, e.key)
    }

    /// Expires every deadline `<= through`, ascending; within a deadline,
    /// patterns by name, then keys in code point order.
    fn expire_through(
        &mut self,
        through: i64,
        undo: &mut Undo,
        em: &mut Emitter,
    ) -> Result<(), Rejection> {
        let mut due = std::mem::take(&mut self.due);
        let r = self.expire_due(through, undo, em, &mut due);
        self.due = due;
        r
    }

    fn expire_due(
        &mut self,
        through: i64,
        undo: &mut Undo,
        em: &mut Emitter,
        due: &mut Vec<(u32, KeyId)>,
    ) -> Result<(), Rejection> {
        while let Some(d) = self.deadlines.pop_due(through, due) {
            undo.expired.extend(due.iter().map(|&(p, k)| (d, p, k)));
            let keys = &self.keys;
            due.sort_by(|a, b| {
                a.0.cmp(&b.0)
                    .then_with(|| keys.name(a.1).cmp(keys.name(b.1)))
            });
            for &(p, k) in due.iter() {
                let pu = p as usize;
                let start = d - self.doc.patterns[pu].within;
                let st = &self.states[pu][k as usize];
                let due_here = st.branches.iter().any(|b| b.caps.start == start)
                    || st.waits.iter().any(|w| w.start == start);
                if !due_here {
                    continue;
                }
                self.save(pu, k, undo);
                let c = &self.compiled[pu];
                let g = Group {
                    pattern: &self.doc.patterns[pu],
                    name: &c.name,
                    stage_names: &c.stage_names,
                    shape: &c.shape,
                    key: self.keys.name(k),
                };
                expire(
                    &g,
                    &mut self.states[pu][k as usize],
                    d,
                    em,
                    &mut self.scratch.candidates,
                )?;
            }
        }
        Ok(())
    }

    /// The watermark (-1 at start).
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Buffered events.
    pub fn buffered(&self) -> u64 {
        self.buffer.len() as u64
    }

    /// The ordinal of the next pushed event (1 at start).
    pub fn next_ordinal(&self) -> u64 {
        self.next_ordinal
    }

    /// The last output seq (0 at start).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Counters, per pattern sorted by name.
    pub fn status(&self) -> Status {
        let patterns = self
            .compiled
            .iter()
            .zip(&self.states)
            .map(|(c, states)| {
                let mut s = PatternStatus::default();
                for st in states {
                    if !st.is_empty() {
                        s.keys += 1;
                        s.branches += st.branches.len() as u64;
                        s.waits += st.waits.len() as u64;
                    }
                }
                (c.name.to_string(), s)
            })
            .collect();
        Status {
            watermark: self.watermark,
            buffered: self.buffer.len() as u64,
            next_ordinal: self.next_ordinal,
            sequence: self.sequence,
            patterns,
        }
    }

    /// The field comparisons that were false because their two values'
    /// types differ (an Integer against a Double, a String against a
    /// number, ...), per pattern (by name) and condition (in document
    /// order); only nonzero counts.
    ///
    /// Diagnostics, not state: counted since this engine was built (a
    /// restore builds a new engine), never in a checkpoint or the output,
    /// and an advance that fails (and changes nothing else) keeps what it
    /// counted. A comparison is counted each time it is evaluated: for each
    /// branch or absence wait it is evaluated for.
    pub fn type_mismatches(&self) -> Vec<TypeMismatch> {
        let mut out = Vec::new();
        for (c, counts) in self.compiled.iter().zip(&self.mismatches) {
            for (path, &count) in c.conds.paths.iter().zip(counts.iter()) {
                if count > 0 {
                    out.push(TypeMismatch {
                        pattern: c.name.to_string(),
                        condition: path.to_string(),
                        count,
                    });
                }
            }
        }
        out
    }

    /// Sets every type mismatch count to zero (a replay of the command log
    /// counts what was counted when the calls ran).
    pub fn reset_type_mismatches(&mut self) {
        for counts in &mut self.mismatches {
            counts.fill(0);
        }
    }

    /// Adds `other`'s type mismatch counts to this engine's, when both run
    /// the same patterns (otherwise changes nothing): a service replacing
    /// its engine (a restore) keeps its counters going.
    pub fn keep_type_mismatches(&mut self, other: &Engine) {
        if !self.doc.same_patterns(&other.doc) {
            return;
        }
        for (mine, theirs) in self.mismatches.iter_mut().zip(&other.mismatches) {
            for (a, b) in mine.iter_mut().zip(theirs.iter()) {
                *a = a.saturating_add(*b);
            }
        }
    }

    /// An estimate of the heap bytes the engine holds: its structures,
    /// every buffered or captured event (each counted once), capture nodes,
    /// interned keys and the deadline index; allocator overhead excluded.
    /// A diagnostic (it walks everything), not for the hot path.
    pub fn heap_bytes(&self) -> u64 {
        use std::collections::BTreeSet;
        use std::mem::size_of;
        fn event_bytes(e: &Event) -> usize {
            e.heap_bytes()
        }
        let mut total = 0usize;
        let mut nodes = BTreeSet::new();
        let mut events = BTreeSet::new();
        for p in self.buffer.by_ordinal() {
            if events.insert(p.event.ptr()) {
                total += event_bytes(&p.event);
            }
        }
        total += self.buffer.len() * size_of::<Pending>();
        for states in &self.states {
            total += states.capacity() * size_of::<KeyState>();
            for st in states {
                total += st.branches.heap_bytes();
                total += st.waits.heap_bytes();
                let all = st.branches.iter().map(|b| &b.caps).chain(st.waits.iter());
                for caps in all {
                    let mut at = Some(&caps.last);
                    while let Some(n) = at {
                        if !nodes.insert(Arc::as_ptr(n) as usize) {
                            break;
                        }
                        total += 16 + size_of::<crate::branch::Node>();
                        if events.insert(n.event.ptr()) {
                            total += event_bytes(&n.event);
                        }
                        at = n.prev.as_ref();
                    }
                }
            }
        }
        total += self.keys.heap_bytes();
        total += self.deadlines.len() * 24;
        total as u64
    }
}

#[cfg(test)]
mod tests;
