//! The chaos suite in CI: each Nexmark query (pipelines/q*.json) through
//! the real binary under a seeded schedule of faults, checked against the
//! batch oracle (tests/it/support/chaos/mod.rs says what a run does and checks).
//!
//! A few seeds per query, each with several faults; the long soak is
//! `cargo bench --bench chaos -- --seeds 1-200` (docs/testing.md). A failure
//! prints the query, the seed and the fault schedule: run that seed alone
//! with `cargo bench --bench chaos -- --query Q --seeds N`.

use crate::support::chaos;

use std::collections::BTreeMap;

use streamforge::nexmark::Query;

/// Faults (server processes that end by one) per run: each kind once
/// (tests/it/support/chaos/mod.rs, `Plan::new`).
const FAULTS: usize = 6;

/// Runs the seeds, then checks that every fault kind and every retry the
/// suite exists for fired in at least one of them (a planned fault that
/// never fires proves nothing).
fn suite(query: Query, seeds: &[u64]) {
    let mut fired: BTreeMap<&str, u64> = BTreeMap::new();
    for &seed in seeds {
        match chaos::run_seed(query, seed, FAULTS, 1) {
            Ok(r) => {
                eprintln!(
                    "{} seed {seed}: {} acknowledged calls over {} processes, {} changes, {} rows; fired {:?}; {}",
                    query.name(),
                    r.acks,
                    r.processes,
                    r.changes,
                    r.rows,
                    r.fired,
                    r.notes.join("; ")
                );
                for (k, n) in r.fired {
                    *fired.entry(k).or_insert(0) += n;
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    let missing: Vec<&str> = chaos::EXERCISED
        .iter()
        .filter(|k| !fired.contains_key(*k))
        .copied()
        .collect();
    assert!(
        missing.is_empty(),
        "{}: seeds {seeds:?} never exercised {missing:?} (fired: {fired:?})",
        query.name()
    );
}

#[test]
fn q5_hot_items_survive_the_faults() {
    suite(Query::Q5, &[1, 2, 3]);
}

#[test]
fn q7_highest_bid_survives_the_faults() {
    suite(Query::Q7, &[1, 2, 3]);
}

#[test]
fn q8_new_people_per_city_survive_the_faults() {
    suite(Query::Q8, &[1, 2, 3]);
}

#[test]
fn q11_user_sessions_survive_the_faults() {
    suite(Query::Q11, &[1, 2, 3]);
}

#[test]
fn q12_stream_time_windows_survive_the_faults() {
    suite(Query::Q12, &[1, 2, 3]);
}

/// The schedule is a function of the seed: the same seed, the same faults.
#[test]
fn the_schedule_is_reproducible_from_the_seed() {
    let a = chaos::Plan::new(Query::Q5, 9, FAULTS, 1).to_string();
    assert_eq!(a, chaos::Plan::new(Query::Q5, 9, FAULTS, 1).to_string());
    assert_ne!(a, chaos::Plan::new(Query::Q5, 10, FAULTS, 1).to_string());
    assert_eq!(chaos::parse_seeds("1-3,7").unwrap(), [1, 2, 3, 7]);
}
