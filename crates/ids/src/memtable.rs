//! The memtable: new entries in memory, seen by lookups at once, not
//! durable until a flush writes them as a run.

use std::collections::HashMap;

use streamforge_keys::FxBuild;

/// The first position of each hash, and the others (rare: the same hash at
/// several positions) beside.
#[derive(Default)]
pub(crate) struct Memtable {
    pub(crate) first: HashMap<u64, u64, FxBuild>,
    pub(crate) more: HashMap<u64, Vec<u64>, FxBuild>,
    pub(crate) len: u64,
}

impl Memtable {
    pub(crate) fn add(&mut self, hash: u64, pos: u64) {
        match self.first.entry(hash) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(pos);
            }
            std::collections::hash_map::Entry::Occupied(o) => {
                if *o.get() == pos {
                    return;
                }
                let more = self.more.entry(hash).or_default();
                if more.contains(&pos) {
                    return;
                }
                more.push(pos);
            }
        }
        self.len += 1;
    }

    pub(crate) fn lookup(&self, hash: u64, out: &mut Vec<u64>) {
        if let Some(&pos) = self.first.get(&hash) {
            out.push(pos);
            if let Some(more) = self.more.get(&hash) {
                out.extend_from_slice(more);
            }
        }
    }

    /// Every pair, sorted.
    pub(crate) fn sorted(&self) -> Vec<(u64, u64)> {
        let mut v = Vec::with_capacity(self.len as usize);
        v.extend(self.first.iter().map(|(&h, &p)| (h, p)));
        for (&h, more) in &self.more {
            v.extend(more.iter().map(|&p| (h, p)));
        }
        v.sort_unstable();
        v
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        // hashbrown: the pair and one control byte per bucket
        let first = self.first.capacity() * (16 + 1);
        let more = self.more.capacity() * (8 + 24 + 1)
            + self.more.values().map(|v| v.capacity() * 8).sum::<usize>();
        first + more
    }
}
