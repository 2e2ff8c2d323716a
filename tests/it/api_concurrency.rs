//! 8 concurrent producers on 4 partitions end in the same state as one
//! client sending the same deliveries.

use crate::support::server;

use server::*;

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

/// One event per request from many connections (the ingest thread's
/// shape), while readers settle the engines (`/status`, `/results`),
/// checkpoints are taken and one group commit fails: every call is answered
/// (a deadlock fails the test at the client's timeout), the refused ones
/// (503) are sent again, and the end state equals one client sending the
/// same events, before and after a SIGKILL.
#[test]
fn single_event_calls_with_readers_checkpoints_and_a_failed_commit() {
    use std::time::Duration;
    let dir = tempdir();
    let event = |t: usize, i: usize| {
        let mut rng = Rng((t * 1000 + i) as u64);
        delivery(
            &format!("p{}", t % 4),
            None,
            &format!("s{t}-{i}"),
            &format!("k{}", rng.below(5)),
            rng.below(20_000) as i64,
            rng.below(100) as i64,
        )
    };
    let (threads, per) = (16, 40);
    let single = start(&dir.path().join("single.db"), &[]);
    for t in 0..threads {
        for i in 0..per {
            single.ok("/events", &event(t, i));
        }
    }
    let want = finish(&single).1;

    let db = dir.path().join("multi.db");
    let mut multi = start_env(
        &db,
        &["--checkpoint-every", "25"],
        &[("STREAMFORGE_FAULTS", "fail_commit=20")],
    );
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let refused = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let (m, c, refused, done) = (&multi, &client, &refused, &done);
        let producers: Vec<_> = (0..threads)
            .map(|t| {
                sc.spawn(move || {
                    for i in 0..per {
                        loop {
                            let r = c
                                .post(m.url("/events"))
                                .header("content-type", "application/json")
                                .header("prefer", "return=minimal")
                                .body(event(t, i))
                                .send()
                                .expect("an answer before the timeout (no deadlock)");
                            match r.status().as_u16() {
                                200 => break,
                                503 => {
                                    refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                                s => panic!("status {s}: {}", r.text().unwrap_or_default()),
                            }
                        }
                    }
                })
            })
            .collect();
        for path in ["/status", "/results"] {
            sc.spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let r = c.get(m.url(path)).send().expect("a reader's answer");
                    assert!(matches!(r.status().as_u16(), 200 | 503), "{path}");
                }
            });
        }
        sc.spawn(move || {
            for _ in 0..3 {
                let r = c.post(m.url("/checkpoints")).send().expect("checkpoint");
                assert!(matches!(r.status().as_u16(), 201 | 503));
            }
        });
        for p in producers {
            p.join().expect("producer");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(
        refused.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the failed commit refused its group"
    );
    assert_eq!(finish(&multi).1, want);
    multi.kill();
    let again = start(&db, &[]);
    assert_eq!(again.snapshot(), want, "the same state after SIGKILL");
}

/// On a runtime of one worker (`TOKIO_WORKER_THREADS=1`, as a server given
/// one CPU gets), single-event calls from many connections are still
/// grouped into commits. A call alone in flight runs in place (blocking its
/// worker for its commit) only while its connection is the only one open;
/// otherwise the single worker would never read the other connections
/// meanwhile, every call would find itself alone, and each would commit
/// alone.
#[test]
fn one_worker_still_groups_the_single_event_calls_of_many_connections() {
    let dir = tempdir();
    let s = start_env(
        &dir.path().join("one-worker.db"),
        &[],
        &[("TOKIO_WORKER_THREADS", "1")],
    );
    let (threads, per) = (16, 25);
    let groups = |s: &Server| {
        (
            s.metric("streamforge_commit_group_calls_count"),
            s.metric("streamforge_commit_group_calls_sum"),
        )
    };
    let before = groups(&s);
    std::thread::scope(|sc| {
        for t in 0..threads {
            let s = &s;
            sc.spawn(move || {
                let client = reqwest::blocking::Client::new();
                for i in 0..per {
                    let body = delivery(
                        &format!("p{}", t % 4),
                        None,
                        &format!("one-{t}-{i}"),
                        &format!("k{}", i % 3),
                        (t * per + i) as i64,
                        1,
                    );
                    let r = client
                        .post(s.url("/events"))
                        .header("content-type", "application/json")
                        .header("prefer", "return=minimal")
                        .body(body)
                        .send()
                        .expect("an answer");
                    assert_eq!(r.status().as_u16(), 200, "{}", r.text().unwrap_or_default());
                }
            });
        }
    });
    let after = groups(&s);
    let (commits, calls) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(
        calls as usize,
        threads * per,
        "every call was committed once"
    );
    assert!(
        calls / commits >= 2.0,
        "{calls} calls in {commits} commits: the calls of 16 connections were not grouped"
    );
}
