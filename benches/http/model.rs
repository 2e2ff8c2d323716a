//! The checkpoint size model, from the engine in this process: envelope
//! bytes against delivered events and live buckets (a least-squares fit),
//! and take/restore time per MB.

use std::time::Instant;

use streamforge::engine::{DeliveryRef, Pipeline, Processor};

use super::figures::mb;
use super::http_support::median;
use super::workload::{client_requests, requests, Req, PIPELINE};

/// Envelope bytes for several sizes, with the watermark advancing (few live
/// buckets) and without any advance (every bucket stays live); fits
/// bytes = a·events + b·buckets + c by least squares.
pub fn checkpoint_model(text: &str, sizes: &[usize], b: usize) {
    let mut rows: Vec<[f64; 3]> = Vec::new();
    let mut take_per_mb = Vec::new();
    let mut restore_per_mb = Vec::new();
    println!(
        "{:>10} {:>10} {:>12} {:>10} {:>10} {:>10}",
        "events", "advances", "live buckets", "MB", "take s", "restore s"
    );
    for &n in sizes {
        let (all, events) = requests(text, n, b);
        let order = client_requests(&all, 0, 1);
        for advances in [true, false] {
            let mut p = Processor::new(Pipeline::from_json(PIPELINE.as_bytes()).expect("pipeline"));
            for r in &order {
                match r {
                    Req::Events(body, _) => {
                        let d: Vec<DeliveryRef<'_>> = body
                            .split(|c| *c == b'\n')
                            .filter(|l| !l.is_empty())
                            .map(|l| serde_json::from_slice(l).expect("delivery"))
                            .collect();
                        p.ingest(d).expect("valid");
                    }
                    Req::Advance(_, part, w) if advances => {
                        p.advance(part, *w).expect("valid");
                    }
                    Req::Advance(..) => {}
                }
            }
            let t = Instant::now();
            let cp = p.checkpoint().expect("checkpoint");
            let take = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let back = Processor::restore(&cp, p.pipeline()).expect("restores");
            let restore = t.elapsed().as_secs_f64();
            drop(back);
            let size = cp.len() as f64;
            take_per_mb.push(take / mb(size));
            restore_per_mb.push(restore / mb(size));
            println!(
                "{events:>10} {:>10} {:>12} {:>10.1} {take:>10.3} {restore:>10.3}",
                if advances { "yes" } else { "no" },
                p.live_buckets(),
                mb(size)
            );
            rows.push([events as f64, p.live_buckets() as f64, size]);
        }
    }
    if let Some((a, bb, c)) = fit(&rows) {
        println!(
            "checkpoint model: {a:.1} bytes/event + {bb:.1} bytes/live bucket + {:.0} bytes; take {:.3} s/MB, restore {:.3} s/MB (medians)",
            c,
            median(take_per_mb),
            median(restore_per_mb)
        );
    }
}

/// Least squares for y = a·x1 + b·x2 + c.
fn fit(rows: &[[f64; 3]]) -> Option<(f64, f64, f64)> {
    if rows.len() < 3 {
        return None;
    }
    // Normal equations, 3x3, solved by Cramer's rule.
    let mut m = [[0.0f64; 3]; 3];
    let mut v = [0.0f64; 3];
    for r in rows {
        let x = [r[0], r[1], 1.0];
        for i in 0..3 {
            for j in 0..3 {
                m[i][j] += x[i] * x[j];
            }
            v[i] += x[i] * r[2];
        }
    }
    let det = |m: &[[f64; 3]; 3]| {
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    };
    let d = det(&m);
    if d.abs() < 1e-9 {
        return None;
    }
    let solve = |k: usize| {
        let mut mk = m;
        for i in 0..3 {
            mk[i][k] = v[i];
        }
        det(&mk) / d
    };
    Some((solve(0), solve(1), solve(2)))
}
