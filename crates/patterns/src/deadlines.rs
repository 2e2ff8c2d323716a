//! The ordered index of deadlines: for each pattern, the `(deadline, key)`
//! of every start, in deadline order.
//!
//! Every branch and wait of a (pattern, key) descends from a start, and its
//! deadline is that start's time plus the pattern's `within`, so one entry
//! per start covers all of them. Starts happen in processing order, which
//! is time order across advances, so each pattern's deadlines arrive in
//! non-decreasing order: a queue per pattern is a sorted index with O(1)
//! insertion at the back and removal at the front (an out-of-order insertion,
//! which processing never makes, is placed by binary search). An entry may
//! outlive what it indexes (the branches died earlier); expiring it then
//! finds nothing, which costs no more than the insertion did. Expiring
//! never looks at a key without a deadline due.

use std::collections::VecDeque;

use streamforge_keys::KeyId;

/// The index.
#[derive(Debug, Clone, Default)]
pub(crate) struct Deadlines {
    queues: Vec<VecDeque<(i64, KeyId)>>,
}

impl Deadlines {
    /// An empty index for `patterns` patterns.
    pub fn new(patterns: usize) -> Deadlines {
        Deadlines {
            queues: vec![VecDeque::new(); patterns],
        }
    }

    /// An index of `entries` `(deadline, pattern, key)` in any order
    /// (duplicates are kept once; unknown patterns are ignored).
    pub fn from_entries(patterns: usize, mut entries: Vec<(i64, u32, KeyId)>) -> Deadlines {
        entries.sort_unstable();
        entries.dedup();
        let mut d = Deadlines::new(patterns);
        for (deadline, p, k) in entries {
            if let Some(q) = d.queues.get_mut(p as usize) {
                q.push_back((deadline, k));
            }
        }
        d
    }

    /// The index for another list of patterns: new pattern `j` keeps the
    /// queue of old pattern `from[j]`, or starts empty.
    pub fn remap(mut self, from: &[Option<usize>]) -> Deadlines {
        Deadlines {
            queues: from
                .iter()
                .map(|f| {
                    f.and_then(|i| self.queues.get_mut(i).map(std::mem::take))
                        .unwrap_or_default()
                })
                .collect(),
        }
    }

    /// Indexes a deadline; false when it was already there.
    pub fn insert(&mut self, deadline: i64, pattern: u32, key: KeyId) -> bool {
        let Some(q) = self.queues.get_mut(pattern as usize) else {
            return false;
        };
        let entry = (deadline, key);
        match q.back() {
            Some(&last) if last == entry => false,
            Some(&(d, _)) if d > deadline => {
                let from = q.partition_point(|&(x, _)| x < deadline);
                let to = q.partition_point(|&(x, _)| x <= deadline);
                if q.range(from..to).any(|&e| e == entry) {
                    return false;
                }
                q.insert(to, entry);
                true
            }
            _ => {
                q.push_back(entry);
                true
            }
        }
    }

    /// Removes an entry (undo of an insertion: usually the last one).
    pub fn remove(&mut self, deadline: i64, pattern: u32, key: KeyId) {
        let Some(q) = self.queues.get_mut(pattern as usize) else {
            return;
        };
        if q.back() == Some(&(deadline, key)) {
            q.pop_back();
        } else if let Some(i) = q.iter().position(|&e| e == (deadline, key)) {
            q.remove(i);
        }
    }

    /// Removes every entry of the earliest deadline if it is `<= through`,
    /// returning that deadline and leaving its `(pattern, key)` entries in
    /// `due` (cleared first), patterns ascending.
    pub fn pop_due(&mut self, through: i64, due: &mut Vec<(u32, KeyId)>) -> Option<i64> {
        due.clear();
        let d = self
            .queues
            .iter()
            .filter_map(|q| q.front().map(|&(d, _)| d))
            .min()?;
        if d > through {
            return None;
        }
        for (p, q) in self.queues.iter_mut().enumerate() {
            while let Some(&(d2, k)) = q.front() {
                if d2 != d {
                    break;
                }
                q.pop_front();
                due.push((p as u32, k));
            }
        }
        Some(d)
    }

    /// Entries in the index.
    pub fn len(&self) -> usize {
        self.queues.iter().map(|q| q.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pop_due` as a value.
    fn pop(d: &mut Deadlines, through: i64) -> Option<(i64, Vec<(u32, KeyId)>)> {
        let mut due = Vec::new();
        d.pop_due(through, &mut due).map(|x| (x, due))
    }

    #[test]
    fn pops_in_deadline_order_whatever_the_insertion_order() {
        let mut d = Deadlines::new(2);
        assert!(d.insert(10, 0, 1));
        assert!(!d.insert(10, 0, 1));
        assert!(d.insert(30, 0, 2));
        assert!(d.insert(20, 0, 3)); // out of order: placed
        assert!(!d.insert(20, 0, 3));
        assert!(d.insert(10, 1, 4));
        assert!(d.insert(20, 1, 5));
        d.remove(20, 1, 5);
        assert_eq!(pop(&mut d, 5), None);
        assert_eq!(pop(&mut d, 100), Some((10, vec![(0, 1), (1, 4)])));
        assert_eq!(pop(&mut d, 100), Some((20, vec![(0, 3)])));
        assert_eq!(pop(&mut d, 29), None);
        assert_eq!(pop(&mut d, 30), Some((30, vec![(0, 2)])));
        assert_eq!(pop(&mut d, i64::MAX), None);
        assert_eq!(d.len(), 0);
        assert!(!d.insert(1, 7, 1), "unknown pattern");
        let mut d = Deadlines::from_entries(
            2,
            vec![(30, 0, 2), (10, 1, 4), (10, 0, 1), (30, 0, 2), (5, 9, 9)],
        );
        assert_eq!(d.len(), 3);
        assert_eq!(pop(&mut d, 100), Some((10, vec![(0, 1), (1, 4)])));
        assert_eq!(pop(&mut d, 100), Some((30, vec![(0, 2)])));
    }
}
