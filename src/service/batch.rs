//! `POST /batch`: deliveries and the watermark advances that close them, in
//! one call and one commit.
//!
//! A producer that sends a batch of deliveries and then advances its
//! partitions' watermarks makes two durable calls, each with its own commit
//! (its own `fdatasync`) and its own round trip. This call does both under
//! one turn of the engines lock: the deliveries as one [`Ingest`] command,
//! then the advances as one [`AdvanceAll`] command, logged as the two
//! commands separate calls would log (recovery replays them as such), and
//! committed together. Its effect and output are exactly those of
//! `POST /events` followed by `POST /watermarks/batch`.
//!
//! It is atomic: every advance's partition is checked before anything is
//! applied (an advance can be refused for no other reason), then the
//! deliveries are applied all or none; a refusal names the failing item,
//! counting the deliveries first, then the advances.

use crate::engine::{json_array, BatchRejection, DeliveryRef};
use crate::store::StoredBody;

use super::apply::{IngestAnswer, Prefer, PreparedIngest, TickAnswer};
use super::cmd::AdvanceAll;
use super::order::Held;
use super::queue::Encoded;
use super::{Metrics, Service, ServiceError};

/// The answer to an acknowledged `POST /batch`.
#[derive(Debug, Clone)]
pub struct BatchAnswer {
    /// The deliveries' part: their changes, late records and offsets
    /// (`changes` holds the advances' changes after theirs).
    pub ingest: IngestAnswer,
    /// The addresses the advances finalized, in address order per advance
    /// (empty with [`Prefer::Minimal`]).
    pub finalized: Vec<crate::engine::Address>,
    /// How many buckets the advances finalized.
    pub finalized_count: usize,
}

impl Service {
    /// `POST /batch`: the deliveries of the body, then `advances`, the
    /// `(partition, watermark)` that follow them.
    pub fn batch(
        &self,
        deliveries: Vec<DeliveryRef<'_>>,
        advances: &[(String, i64)],
        prefer: Prefer,
    ) -> Result<BatchAnswer, ServiceError> {
        let n = deliveries.len();
        let ingest = match n {
            0 => None,
            _ => Some(self.ingest_command(deliveries, prefer)?),
        };
        let tick = match advances.len() {
            0 => None,
            _ => {
                let cmd = AdvanceAll::of(advances, prefer.finalized());
                let body = StoredBody::raw(cmd.body()?);
                Some((cmd, body))
            }
        };
        let at = &mut Held::entry();
        // One turn of the engines lock: checked, then both applied.
        let (applied_ingest, applied_tick) = {
            let mut turn = self.engines_lock.turns.wait(at);
            let mut guard = self.lock_consistent(turn.held())?;
            let (inner, at) = guard.parts();
            for (j, (partition, _)) in advances.iter().enumerate() {
                if let Err(rejection) = inner.engines.window.check_partition(partition) {
                    Metrics::inc(&self.env.metrics.rejected, 1);
                    return Err(ServiceError::BatchRejected(BatchRejection {
                        index: n + j,
                        rejection,
                    }));
                }
            }
            let i = match ingest {
                Some((cmd, body, pending)) => {
                    Some((pending, self.apply_locked(inner, at, cmd, body)?))
                }
                None => None,
            };
            // The partitions were checked: nothing refuses the advances.
            let t = match tick {
                Some((cmd, body)) => Some(self.apply_locked(inner, at, cmd, body)?),
                None => None,
            };
            (i, t)
        };
        let mut prepared: Option<PreparedIngest> = match applied_ingest {
            Some((pending, applied)) => Some(self.ingest_applied(at, pending, applied)?),
            None => None,
        };
        let tick = match applied_tick {
            Some((ticket, o)) => {
                let enc = Encoded::of::<AdvanceAll<'_>>(&o);
                self.hand_over(at, ticket, enc)?;
                Some((ticket, o))
            }
            None => None,
        };
        // Leads the commit of both at once, and writes the answer while it
        // runs.
        self.lead(at);
        let tick_changes = match (&tick, prefer) {
            (Some((_, o)), Prefer::Full) => json_array(&o.changes),
            _ => Vec::new(),
        };
        if let Some(p) = prepared.as_mut() {
            p.write_answer();
        }
        let mut ingest = match prepared {
            Some(p) => self.ingest_finish(at, p)?,
            None => IngestAnswer {
                changes: b"[]".to_vec(),
                change_count: 0,
                late: b"[]".to_vec(),
                late_count: 0,
                duplicates: 0,
                watermark: None,
                offsets: Vec::new(),
            },
        };
        let Some((ticket, o)) = tick else {
            return Ok(BatchAnswer {
                ingest,
                finalized: Vec::new(),
                finalized_count: 0,
            });
        };
        self.finish(at, ticket)?;
        for (p, _) in advances {
            self.setup.derived.touch(p);
        }
        Metrics::inc(&self.env.metrics.changes, o.changes.len() as u64);
        let tick = TickAnswer {
            changes: tick_changes,
            change_count: o.changes.len(),
            watermark: o.watermark,
            finalized: o.finalized,
            finalized_count: o.finalized_count,
        };
        ingest.changes = join_arrays(std::mem::take(&mut ingest.changes), &tick.changes);
        ingest.change_count += tick.change_count;
        ingest.watermark = tick.watermark;
        Ok(BatchAnswer {
            ingest,
            finalized: tick.finalized,
            finalized_count: tick.finalized_count,
        })
    }
}

/// Two JSON arrays as one (`[a..]` and `[b..]` -> `[a..,b..]`); empty
/// bytes (a minimal answer) stay empty.
fn join_arrays(mut a: Vec<u8>, b: &[u8]) -> Vec<u8> {
    if b.len() <= 2 || a.is_empty() {
        return if a.is_empty() { b.to_vec() } else { a };
    }
    if a.len() <= 2 {
        return b.to_vec();
    }
    a.pop();
    a.push(b',');
    a.extend_from_slice(&b[1..]);
    a
}

#[cfg(test)]
mod tests {
    use super::join_arrays;

    #[test]
    fn arrays_join_into_one() {
        let j = |a: &str, b: &str| String::from_utf8(join_arrays(a.into(), b.as_bytes())).unwrap();
        assert_eq!(j("[1,2]", "[3]"), "[1,2,3]");
        assert_eq!(j("[]", "[3]"), "[3]");
        assert_eq!(j("[1]", "[]"), "[1]");
        assert_eq!(j("[]", "[]"), "[]");
        assert_eq!(j("", ""), "");
    }
}
