//! 8 concurrent producers on 4 partitions end in the same state as one
//! client sending the same deliveries.

use crate::common;

use common::*;

/// Producer `i`'s batches (append mode on partition `i % 4`), each retried
/// once every third batch, as a webhook would.
fn batches(i: usize) -> Vec<String> {
    let mut rng = Rng(1000 + i as u64);
    let p = format!("p{}", i % 4);
    let mut out = Vec::new();
    for b in 0..12 {
        let items: Vec<String> = (0..10)
            .map(|j| {
                let id = format!("w{i}-{b}-{j}");
                delivery(
                    &p,
                    None,
                    &id,
                    &format!("k{}", rng.below(7)),
                    rng.below(30_000) as i64,
                    rng.below(1000) as i64 - 500,
                )
            })
            .collect();
        let body = format!("[{}]", items.join(","));
        out.push(body.clone());
        if b % 3 == 0 {
            out.push(body);
        }
    }
    out
}

fn finish(s: &Server) -> (Vec<String>, String) {
    for p in ["p0", "p1", "p2", "p3"] {
        s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":25000}}"#),
        );
    }
    (s.all_changes(), s.snapshot())
}

#[test]
fn concurrent_producers_equal_a_single_client() {
    let dir = tempdir();
    let single = start(&dir.path().join("single.db"), &[]);
    for i in 0..8 {
        for b in batches(i) {
            single.ok("/events", &b);
        }
    }
    let want = finish(&single);
    assert!(want.0.len() > 20);

    let multi = start(&dir.path().join("multi.db"), &["--checkpoint-every", "7"]);
    std::thread::scope(|sc| {
        for i in 0..8 {
            let m = &multi;
            sc.spawn(move || {
                for b in batches(i) {
                    m.ok("/events", &b);
                }
            });
        }
    });
    assert_eq!(finish(&multi), want);
}
