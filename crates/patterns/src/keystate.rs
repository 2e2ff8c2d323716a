//! The state of one pattern and one key: its live branches and absence
//! waits, and `observe` (steps 1 to 4 of an observation).
//!
//! `observe` reads the state and returns what it becomes, or `None` when the
//! event changes nothing (the common case for a key that is idle for the
//! pattern), so an untouched state is never copied. The caller installs the
//! result, keeping the old state for undo the first time an advance touches
//! it.

use crate::branch::{successors, Branch, Caps, Shape};
use crate::buffer::Pending;
use crate::compiled::Conds;
use crate::pattern::{Contiguity, Pattern};

/// The live branches of one (pattern, key): the first held inline (most
/// keys hold one or none, so reaching it reads the state and nothing else,
/// and replacing it allocates nothing), the others in a vector.
#[derive(Debug, Clone, Default)]
pub(crate) struct Branches {
    /// The first branch; `None` only when there is none at all.
    head: Option<Branch>,
    /// The others, in order.
    rest: Vec<Branch>,
}

impl Branches {
    /// How many.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }

    /// None at all.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// In order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = &Branch> + '_ {
        self.head.iter().chain(self.rest.iter())
    }

    /// The first.
    #[inline]
    pub fn first(&self) -> Option<&Branch> {
        self.head.as_ref()
    }

    /// Appends one.
    #[inline]
    pub fn push(&mut self, b: Branch) {
        if self.head.is_none() {
            self.head = Some(b);
        } else {
            self.rest.push(b);
        }
    }

    /// Room for `n` branches in all.
    #[inline]
    pub fn reserve(&mut self, n: usize) {
        if n > 1 {
            self.rest.reserve(n - 1 - self.rest.len().min(n - 1));
        }
    }

    /// Keeps, in order, the branches for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&Branch) -> bool) {
        if let Some(h) = self.head.take() {
            if keep(&h) {
                self.head = Some(h);
            }
        }
        self.rest.retain(|b| keep(b));
        if self.head.is_none() && !self.rest.is_empty() {
            self.head = Some(self.rest.remove(0));
        }
    }

    /// Heap bytes of the vector (the first branch is inline).
    pub fn heap_bytes(&self) -> usize {
        self.rest.capacity() * std::mem::size_of::<Branch>()
    }
}

impl From<Vec<Branch>> for Branches {
    fn from(v: Vec<Branch>) -> Branches {
        let mut out = Branches::default();
        out.reserve(v.len());
        for b in v {
            out.push(b);
        }
        out
    }
}

/// The absence waits of one (pattern, key): nothing but a null pointer
/// when there are none (the common case; only patterns with `absence` have
/// any), so a key's state stays small.
// One pointer (8 bytes) instead of a Vec's 24 in every key's state: the
// extra allocation is paid only by keys that hold absence waits.
#[allow(clippy::box_collection)]
#[derive(Debug, Clone, Default)]
pub(crate) struct Waits(Option<Box<Vec<Caps>>>);

impl std::ops::Deref for Waits {
    type Target = [Caps];
    #[inline]
    fn deref(&self) -> &[Caps] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl From<Vec<Caps>> for Waits {
    fn from(v: Vec<Caps>) -> Waits {
        Waits(if v.is_empty() {
            None
        } else {
            Some(Box::new(v))
        })
    }
}

impl Waits {
    /// Moves `more` to the end.
    pub fn append(&mut self, more: &mut Vec<Caps>) {
        if more.is_empty() {
            return;
        }
        match &mut self.0 {
            Some(v) => v.append(more),
            None => self.0 = Some(Box::new(std::mem::take(more))),
        }
    }

    /// Keeps, in order, the waits for which `keep` holds.
    pub fn retain(&mut self, keep: impl FnMut(&Caps) -> bool) {
        if let Some(v) = &mut self.0 {
            v.retain(keep);
            if v.is_empty() {
                self.0 = None;
            }
        }
    }

    /// The waits as a vector, leaving none.
    pub fn take(&mut self) -> Vec<Caps> {
        self.0.take().map(|b| *b).unwrap_or_default()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |v| 24 + v.capacity() * std::mem::size_of::<Caps>())
    }
}

/// Branches and absence waits of one (pattern, key).
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyState {
    /// Live branches (no two with the same stage and captures).
    pub branches: Branches,
    /// Absence waits (complete captures waiting for their deadline).
    pub waits: Waits,
    /// The advance that last saved this state for undo.
    pub saved_in: u64,
}

impl KeyState {
    /// Nothing live.
    pub fn is_empty(&self) -> bool {
        self.branches.is_empty() && self.waits.is_empty()
    }
}

/// What a branch does with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Keeps waiting, unchanged.
    Keep,
    /// Removed (forbidden, or a `strict` miss).
    Drop,
    /// Replaced by the successors of capturing the event.
    Capture,
    /// Kept, and the successors of capturing the event added (`skip_any`).
    Fork,
}

/// The state after an observation's steps 1 to 4 (its candidates are left
/// in [`Scratch::candidates`]).
pub(crate) struct Observed {
    /// The new branch set.
    pub branches: Branches,
    /// The new wait set, when step 1 cancelled some.
    pub waits: Option<Vec<Caps>>,
    /// Whether the event started a branch or a candidate (a new deadline).
    pub started: bool,
}

/// Buffers reused by every observation (no allocation per event for them).
#[derive(Debug, Clone, Default)]
pub(crate) struct Scratch {
    /// One decision per branch.
    pub decisions: Vec<Decision>,
    /// Successors born from the event.
    pub born: Vec<Branch>,
    /// Candidates completing on the event.
    pub candidates: Vec<Caps>,
}

/// Steps 1 to 4 of observing `e` for a pattern, whose conditions are
/// `conds` (type mismatches counted in `mismatches`).
pub(crate) fn observe(
    pattern: &Pattern,
    conds: &Conds,
    shape: &Shape,
    st: &KeyState,
    e: &Pending,
    scratch: &mut Scratch,
    mismatches: &mut [u64],
) -> Option<Observed> {
    let ev = &e.event;
    // 1. absence waits that existed before e: cancelled when absence holds
    // (each wait evaluated once)
    let mut waits = None;
    if let Some(absence) = &conds.absence {
        if !st.waits.is_empty() {
            let mut holds = |w: &Caps| absence.eval(ev, &|r| w.last_of(r), mismatches);
            if let Some(first) = st.waits.iter().position(&mut holds) {
                let mut kept: Vec<Caps> = st.waits[..first].to_vec();
                kept.extend(st.waits[first + 1..].iter().filter(|w| !holds(w)).cloned());
                waits = Some(kept);
            }
        }
    }
    // 2. live branches that existed before e
    let Scratch {
        decisions,
        born,
        candidates,
    } = scratch;
    decisions.clear();
    born.clear();
    candidates.clear();
    let mut changed = waits.is_some();
    for b in st.branches.iter() {
        let wait = usize::from(b.wait);
        let stage = &pattern.stages[wait];
        let sc = &conds.stages[wait];
        let caps = |r: usize| b.caps.last_of(r);
        let d = if sc
            .forbidden
            .as_ref()
            .is_some_and(|f| f.eval(ev, &caps, mismatches))
        {
            Decision::Drop
        } else if sc.where_.eval(ev, &caps, mismatches) {
            match stage.contiguity {
                Contiguity::SkipAny => Decision::Fork,
                _ => Decision::Capture,
            }
        } else if stage.contiguity == Contiguity::Strict {
            Decision::Drop
        } else {
            Decision::Keep
        };
        changed |= d != Decision::Keep;
        decisions.push(d);
    }
    // 3. a start (stage 0's forbidden never blocks it)
    let start = conds.stages[0].where_.eval(ev, &|_| None, mismatches);
    if !changed && !start {
        return None;
    }
    let mut kept = 0;
    for (b, d) in st.branches.iter().zip(decisions.iter()) {
        match d {
            Decision::Keep => kept += 1,
            Decision::Drop => {}
            Decision::Capture | Decision::Fork => {
                let caps = b.caps.with(e, b.wait);
                successors(shape, b.wait, caps, born, candidates);
                if *d == Decision::Fork {
                    kept += 1;
                }
            }
        }
    }
    if start {
        successors(shape, 0, Caps::start(e), born, candidates);
    }
    // 4. the new branches join (each holds e, the kept ones do not, and two
    // successors of different branches differ: no duplicates can arise)
    let mut branches = Branches::default();
    branches.reserve(kept + born.len());
    for (b, d) in st.branches.iter().zip(decisions.iter()) {
        if matches!(d, Decision::Keep | Decision::Fork) {
            branches.push(b.clone());
        }
    }
    for b in born.drain(..) {
        branches.push(b);
    }
    Some(Observed {
        branches,
        waits,
        started: start,
    })
}

#[cfg(test)]
mod tests {
    /// A key's state stays small: the first branch inline, the rest and
    /// the waits behind one pointer each.
    #[test]
    fn a_key_state_is_small() {
        assert!(std::mem::size_of::<super::Branch>() <= 40);
        assert!(std::mem::size_of::<super::KeyState>() <= 80);
    }
}
