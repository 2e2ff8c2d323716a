//! Selection: ordering a group of candidates and applying the skip policy;
//! the emitter that numbers output records and enforces
//! `max_results_per_advance`.
//!
//! A group is the candidates of one pattern and one key that complete on one
//! event or expire at one deadline. Duplicates (same assignment) are removed;
//! the rest are sorted by `(start time, first ordinal, capture counts in
//! stage order, all capture ordinals in stage order)` and walked in that
//! order, every candidate not yet removed being selected and emitted:
//! - `no_skip` removes nothing;
//! - `skip_to_next_start` removes every remaining candidate, live branch and
//!   wait of the (pattern, key) with the selected candidate's first ordinal;
//! - `skip_past_last` removes every remaining candidate, live branch and wait
//!   whose first capture's `(time, ordinal)` is `<=` the selected candidate's
//!   last capture's.

use std::sync::Arc;

use crate::branch::{Caps, Shape};
use crate::error::Rejection;
use crate::keystate::KeyState;
use crate::output::{build, Output, OutputKind};
use crate::pattern::{Pattern, Skip};

/// Largest output sequence number (2^53 - 1, exact in every JSON reader).
pub(crate) const MAX_SEQUENCE: u64 = 9_007_199_254_740_991;

/// One (pattern, key) as selection and output need it.
pub(crate) struct Group<'a> {
    /// The pattern.
    pub pattern: &'a Pattern,
    /// Its name, shared by output records.
    pub name: &'a Arc<str>,
    /// Its stage names, shared by output records.
    pub stage_names: &'a Arc<[Arc<str>]>,
    /// Its stage bounds.
    pub shape: &'a Shape,
    /// The key.
    pub key: &'a Arc<str>,
}

/// Collects an advance's output.
pub(crate) struct Emitter {
    /// The records, in sequence order.
    pub out: Vec<Output>,
    /// The last sequence number given.
    pub sequence: u64,
    /// Matches emitted in this advance.
    pub matches: u64,
    /// `max_results_per_advance`.
    pub max_matches: u64,
}

impl Emitter {
    /// Emits one record.
    pub fn emit(
        &mut self,
        kind: OutputKind,
        g: &Group<'_>,
        caps: &Caps,
        end_time: i64,
    ) -> Result<(), Rejection> {
        if kind == OutputKind::Match {
            self.matches += 1;
            if self.matches > self.max_matches {
                return Err(Rejection::LimitExceeded(format!(
                    "limit max_results_per_advance exceeded: more than {} matches in one advance (reached at pattern {:?}, key {:?})",
                    self.max_matches, g.name, g.key
                )));
            }
        }
        if self.sequence >= MAX_SEQUENCE {
            return Err(Rejection::LimitExceeded(format!(
                "the output sequence is exhausted ({MAX_SEQUENCE}), reached by pattern {:?}, key {:?}",
                g.name, g.key
            )));
        }
        self.sequence += 1;
        self.out.push(build(
            self.sequence,
            kind,
            g.name,
            g.stage_names,
            g.key,
            caps,
            end_time,
            g.pattern.within,
        ));
        Ok(())
    }
}

/// Sorts captures by the selection key and removes duplicate assignments
/// (equal keys are exactly equal assignments).
pub(crate) fn order(caps: &mut Vec<Caps>, stages: usize) {
    if caps.len() < 2 {
        return;
    }
    caps.sort_by(|a, b| a.cmp_key(b, stages));
    caps.dedup_by(|a, b| a.cmp_key(b, stages).is_eq());
}

/// Runs selection on one group (`cands`, left empty), removing what the
/// skip policy says from the candidates and from `st`, and emits every
/// selected candidate as a match ending at `end_time`.
pub(crate) fn select(
    g: &Group<'_>,
    st: &mut KeyState,
    cands: &mut Vec<Caps>,
    end_time: i64,
    em: &mut Emitter,
) -> Result<(), Rejection> {
    order(cands, g.shape.len());
    // Candidates are sorted by (start, first ordinal, ...): those a selected
    // candidate removes are the run right after it (the same first ordinal
    // has the same start; a first capture at or before its last capture is
    // a prefix of what remains). Branches and waits play no part in the
    // walk, so their removal is done once at the end: everything with a
    // removed first ordinal, or at or before the latest last capture.
    let mut firsts: Vec<u64> = Vec::new();
    let mut past: Option<(i64, u64)> = None;
    let mut i = 0;
    while let Some(sel) = cands.get(i) {
        em.emit(OutputKind::Match, g, sel, end_time)?;
        i += 1;
        match g.pattern.skip {
            Skip::NoSkip => {}
            Skip::SkipToNextStart => {
                let first = sel.first;
                while cands.get(i).is_some_and(|c| c.first == first) {
                    i += 1;
                }
                firsts.push(first);
            }
            Skip::SkipPastLast => {
                let last = sel.last_position();
                while cands.get(i).is_some_and(|c| (c.start, c.first) <= last) {
                    i += 1;
                }
                past = past.max(Some(last));
            }
        }
    }
    if !firsts.is_empty() {
        firsts.sort_unstable();
        let gone = |first: u64| firsts.binary_search(&first).is_ok();
        st.branches.retain(|b| !gone(b.caps.first));
        st.waits.retain(|w| !gone(w.first));
    }
    if let Some(last) = past {
        st.branches.retain(|b| (b.caps.start, b.caps.first) > last);
        st.waits.retain(|w| (w.start, w.first) > last);
    }
    cands.clear();
    Ok(())
}
