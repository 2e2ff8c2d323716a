//! The chaos soak: the chaos suite of `tests/it/chaos.rs` over many seeds,
//! against the release binary.
//!
//! ```sh
//! cargo bench --bench chaos -- --seeds 1-200                # every query
//! cargo bench --bench chaos -- --query q11 --seeds 1-200
//! cargo bench --bench chaos -- --query q5 --seeds 17        # one seed again
//! ```
//!
//! Flags: `--query q5|q7|q8|q11|q12|all` (default all), `--seeds` (ranges and
//! lists: `1-200`, `3,9`), `--faults N` (faulty server processes per run,
//! default 6), `--scale N` (workload size, default 2: twice the CI runs),
//! `--jobs N` (runs at once, default 2). Each run is the test suite's run
//! (tests/it/support/chaos/mod.rs): its plan, faults and checks are a function
//! of (query, seed, faults, scale) alone. A failure prints the query, the
//! seed, the fault schedule and what failed. At the end, one line per query
//! `qN: N passed, M failed`, then the total `N passed, M failed`; the exit
//! status is 1 when a run failed.

#[path = "../tests/it/support/chaos/mod.rs"]
mod chaos;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use streamforge::nexmark::Query;

fn main() {
    let mut queries: Vec<Query> = Query::ALL.to_vec();
    let mut seeds: Vec<u64> = (1..=20).collect();
    let (mut faults, mut scale, mut jobs) = (6usize, 2u64, 2usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| fail(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--bench" => {}
            "--query" => {
                let q = value();
                queries = if q == "all" {
                    Query::ALL.to_vec()
                } else {
                    vec![Query::from_name(&q).unwrap_or_else(|| fail(&format!("unknown query {q}")))]
                };
            }
            "--seeds" => seeds = chaos::parse_seeds(&value()).unwrap_or_else(|e| fail(&e)),
            "--faults" => faults = value().parse().unwrap_or_else(|_| fail("--faults N")),
            "--scale" => scale = value().parse().unwrap_or_else(|_| fail("--scale N")),
            "--jobs" => {
                jobs = value()
                    .parse::<usize>()
                    .unwrap_or_else(|_| fail("--jobs N"))
                    .max(1)
            }
            other => fail(&format!("unknown argument {other}")),
        }
    }
    let started = Instant::now();
    let mut total = (0usize, 0usize);
    for query in queries {
        let next = AtomicUsize::new(0);
        let outcome = Mutex::new((0usize, 0usize));
        let fired = Mutex::new(BTreeMap::<&str, u64>::new());
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..jobs {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&seed) = seeds.get(i) else { return };
                    let r = chaos::run_seed(query, seed, faults, scale);
                    let mut o = outcome.lock().unwrap();
                    match r {
                        Ok(r) => {
                            o.0 += 1;
                            let mut f = fired.lock().unwrap();
                            for (k, n) in r.fired {
                                *f.entry(k).or_insert(0) += n;
                            }
                        }
                        Err(e) => {
                            o.1 += 1;
                            println!("{e}");
                        }
                    }
                });
            }
        });
        let (passed, failed) = *outcome.lock().unwrap();
        println!(
            "{}: {passed} passed, {failed} failed ({} seeds, {faults} faults each, scale {scale}, {:.0} s)",
            query.name(),
            seeds.len(),
            t.elapsed().as_secs_f64()
        );
        let fired = fired.into_inner().unwrap();
        println!(
            "  fired over the passed runs: {}",
            chaos::EXERCISED
                .iter()
                .map(|k| format!("{k} {}", fired.get(k).copied().unwrap_or(0)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        total.0 += passed;
        total.1 += failed;
    }
    println!("{} passed, {} failed", total.0, total.1);
    eprintln!("({:.0} s)", started.elapsed().as_secs_f64());
    if total.1 > 0 {
        std::process::exit(1);
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("chaos soak: {msg}");
    std::process::exit(2)
}
