//! The ordered index of deadlines: `(deadline, pattern, key)` for every
//! (pattern, key) that started a branch with that deadline.
//!
//! Every branch and wait of a (pattern, key) descends from a start, and its
//! deadline is that start's time plus `within`, so one entry per start
//! covers all of them. An entry may outlive what it indexes (the branches
//! died earlier); expiring it then finds nothing, which costs no more than
//! the insertion did. Expiring walks the index in deadline order and never
//! looks at keys without a deadline due.

use std::collections::BTreeSet;

use crate::patterns::keys::KeyId;

/// The index.
#[derive(Debug, Clone, Default)]
pub(crate) struct Deadlines {
    set: BTreeSet<(i64, u32, KeyId)>,
}

impl Deadlines {
    /// Indexes a deadline; false when it was already there.
    pub fn insert(&mut self, deadline: i64, pattern: u32, key: KeyId) -> bool {
        self.set.insert((deadline, pattern, key))
    }

    /// Removes an entry (undo of an insertion).
    pub fn remove(&mut self, deadline: i64, pattern: u32, key: KeyId) {
        self.set.remove(&(deadline, pattern, key));
    }

    /// Removes and returns every entry of the earliest deadline if it is
    /// `<= through`, as `(deadline, [(pattern, key)])`.
    pub fn pop_due(&mut self, through: i64) -> Option<(i64, Vec<(u32, KeyId)>)> {
        let &(d, _, _) = self.set.first()?;
        if d > through {
            return None;
        }
        let mut due = Vec::new();
        while let Some(&(d2, p, k)) = self.set.first() {
            if d2 != d {
                break;
            }
            self.set.pop_first();
            due.push((p, k));
        }
        Some((d, due))
    }

    /// Entries in the index.
    pub fn len(&self) -> usize {
        self.set.len()
    }
}
