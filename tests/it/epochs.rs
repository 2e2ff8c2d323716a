//! Restores and epochs, retention, and start-up readiness, against the real
//! binary: a consumer that pages or streams across restores (several
//! between two polls, one followed by a crash) ends with exactly the
//! service's history; retention prunes old checkpoints and pages, and a
//! consumer behind it resyncs from `/results`.

use crate::support::server;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;
use server::*;

/// A consumer of `/changes` (or `/late`) that keeps the history it read and
/// follows the page rules: pages carry the epoch of their `next`; a page
/// with `rewound_to` voids what is held beyond it.
struct Consumer {
    what: &'static str,
    held: Vec<Value>,
    after: u64,
    epoch: u64,
    rewinds: Vec<u64>,
}

impl Consumer {
    fn new(what: &'static str) -> Consumer {
        Consumer {
            what,
            held: Vec::new(),
            after: 0,
            epoch: 0,
            rewinds: Vec::new(),
        }
    }

    /// Reads pages until one is empty.
    fn catch_up(&mut self, s: &Server) {
        loop {
            let r = s.get(&format!(
                "/{}?after={}&epoch={}&limit=7",
                self.what, self.after, self.epoch
            ));
            assert_eq!(r.status, 200, "{}", r.body);
            let v = r.json();
            if let Some(to) = v.get("rewound_to") {
                let to = to.as_u64().unwrap();
                self.rewinds.push(to);
                self.held.truncate(to as usize);
            }
            let items = v[self.what].as_array().unwrap().clone();
            for it in &items {
                assert_eq!(
                    it["seq"].as_u64().unwrap(),
                    self.held.len() as u64 + 1,
                    "{}: no gap, no repeat (rewinds {:?}, page {})",
                    self.what,
                    self.rewinds,
                    r.body.chars().take(300).collect::<String>()
                );
                self.held.push(it.clone());
            }
            self.after = v["next"].as_u64().unwrap();
            self.epoch = v["epoch"].as_u64().unwrap();
            if items.is_empty() {
                return;
            }
        }
    }

    fn strings(&self) -> Vec<String> {
        self.held.iter().map(Value::to_string).collect()
    }
}

fn send_all(s: &Server, ops: &[Op]) {
    for op in ops {
        let r = op.send(s);
        assert_eq!(r.status, 200, "{}", r.body);
    }
}

fn status(s: &Server) -> Value {
    s.get("/status").json()
}

#[test]
fn pages_rewind_across_several_restores_and_a_crash() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let mut s = start(&db, &["--checkpoint-every", "0"]);
    let ops = workload(11, 240);
    let (mut changes, mut late) = (Consumer::new("changes"), Consumer::new("late"));
    send_all(&s, &ops[..60]);
    let c1 = s.post_empty("/checkpoints").json();
    send_all(&s, &ops[60..120]);
    let c2 = s.post_empty("/checkpoints").json();
    send_all(&s, &ops[120..180]);
    changes.catch_up(&s);
    late.catch_up(&s);
    let (s1, s2) = (
        c1["sequence"].as_u64().unwrap(),
        c2["sequence"].as_u64().unwrap(),
    );
    let head0 = changes.after;
    assert!(s1 < s2 && s2 < head0, "{s1} {s2} {head0}");
    assert!(late.after > 0, "the workload has late events");
    assert_eq!((changes.epoch, late.epoch), (0, 0));

    // Two restores (and new calls after each) between two polls.
    let r = s.post_empty("/checkpoints/2/restore");
    assert_eq!(r.status, 200, "{}", r.body);
    send_all(&s, &ops[120..140]);
    let r = s.post_empty("/checkpoints/1/restore").json();
    let late1 = r["late"].as_u64().unwrap();
    send_all(&s, &ops[60..100]);
    assert_eq!(status(&s)["epoch"], 2);
    changes.catch_up(&s);
    late.catch_up(&s);
    // The smallest cut wins: checkpoint 1's sequence and late count.
    assert_eq!(changes.rewinds, [s1]);
    assert_eq!(late.rewinds, [late1.min(late.rewinds[0])]);
    assert!(late.rewinds[0] <= late1);
    assert_eq!(changes.strings(), s.all_changes());
    assert_eq!(late.strings(), s.all_late());
    assert_eq!((changes.epoch, late.epoch), (2, 2));

    // The current epoch and no epoch at all page as before; a future one is
    // refused.
    let plain = s.get(&format!("/changes?after={s1}")).json();
    assert!(plain.get("rewound_to").is_none());
    assert_eq!(plain["epoch"], 2);
    s.get("/changes?after=0&epoch=3")
        .problem(422, "invalid_request");
    s.get("/late?after=0&epoch=99")
        .problem(422, "invalid_request");

    // A crash right after a restore keeps the new epoch and its cut.
    let before = changes.after;
    assert!(before > s1);
    let r = s.post_empty("/checkpoints/1/restore");
    assert_eq!(r.status, 200, "{}", r.body);
    s.kill();
    let s = start(&db, &["--checkpoint-every", "0"]);
    assert_eq!(status(&s)["epoch"], 3);
    let v = s.get(&format!("/changes?after={before}&epoch=2")).json();
    assert_eq!(v["rewound_to"], s1);
    assert_eq!(v["epoch"], 3);
    send_all(&s, &ops[60..240]);
    changes.catch_up(&s);
    late.catch_up(&s);
    assert_eq!(changes.strings(), s.all_changes());
    assert_eq!(late.strings(), s.all_late());

    // /results carries the sequence and epoch of the state it shows.
    let res = s.get("/results").json();
    let st = status(&s);
    assert_eq!(res["sequence"], st["sequence"]);
    assert_eq!(
        (res["epoch"].as_u64(), st["epoch"].as_u64()),
        (Some(3), Some(3))
    );
}

#[test]
fn a_stream_resumed_from_an_older_epoch_rewinds_then_continues() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &["--checkpoint-every", "0"]);
    let ops = workload(5, 160);
    send_all(&s, &ops[..60]);
    let cp = s.post_empty("/checkpoints").json()["sequence"]
        .as_u64()
        .unwrap();
    send_all(&s, &ops[60..120]);
    let head0 = status(&s)["sequence"].as_u64().unwrap();
    assert!(cp < head0);
    // Two restores while the client is away, with calls in between.
    s.post_empty("/checkpoints/1/restore");
    send_all(&s, &ops[60..70]);
    s.post_empty("/checkpoints/1/restore");
    send_all(&s, &ops[60..100]);
    let head = status(&s)["sequence"].as_u64().unwrap();
    assert!(head > cp, "changes after the restore: {head} {cp}");
    let resp = s
        .client
        .get(s.url("/changes/stream"))
        .header("Last-Event-ID", format!("0:{head0}"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = read_events(resp, |e| e.id == format!("2:{head}"));
    assert_eq!(events[0].event, "rewind");
    assert_eq!(events[0].id, format!("2:{cp}"));
    assert_eq!(events[0].data, format!(r#"{{"epoch":2,"after":{cp}}}"#));
    let rest: Vec<String> = events[1..]
        .iter()
        .map(|e| {
            assert_eq!(e.event, "");
            serde_json::from_str::<Value>(&e.data).unwrap().to_string()
        })
        .collect();
    assert_eq!(rest, s.all_changes()[cp as usize..]);
    // A plain `15` is epoch 0; a malformed id is a 400, a future epoch 422.
    let r = s
        .client
        .get(s.url("/changes/stream"))
        .header("Last-Event-ID", "x:1")
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
    // Digits only (openapi.yaml's pattern): a sign, which Rust's integer
    // parsing would take, is a 400 too, as is an empty part.
    for bad in ["+1", "2:+1", "+2:1", "2:", ":1"] {
        let r = s
            .client
            .get(s.url("/changes/stream"))
            .header("Last-Event-ID", bad)
            .send()
            .unwrap();
        assert_eq!(r.status(), 400, "{bad:?}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    // A blank one is no position (the SSE spec's empty last event ID, as
    // without the header): the stream starts after `after`, here 0 of the
    // current epoch.
    let resp = s
        .client
        .get(s.url("/changes/stream"))
        .header("Last-Event-ID", "")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let first = read_events(resp, |_| true);
    assert_eq!((first[0].event.as_str(), first[0].id.as_str()), ("", "2:1"));
    let r = s
        .client
        .get(s.url("/changes/stream"))
        .header("Last-Event-ID", "7:1")
        .send()
        .unwrap();
    assert_eq!(r.status(), 422);
    let resp = s
        .client
        .get(s.url("/changes/stream"))
        .header("Last-Event-ID", "1")
        .send()
        .unwrap();
    let first = read_events(resp, |_| true);
    assert_eq!(first[0].event, "rewind");
    assert_eq!(first[0].data, r#"{"epoch":2,"after":1}"#);
}

#[test]
fn retention_keeps_few_automatic_checkpoints_and_prunes_old_pages() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let args = [
        "--checkpoint-every",
        "4",
        "--keep-checkpoints",
        "2",
        "--retain-changes",
        "10",
        "--retain-late",
        "2",
    ];
    let mut s = start(&db, &args);
    let ops = workload(3, 200);
    send_all(&s, &ops[..20]);
    let mine = s.post_empty("/checkpoints").json()["id"].as_i64().unwrap();
    send_all(&s, &ops[20..]);
    // The automatic checkpoints catch up (each prunes after it is stored).
    wait_until("automatic checkpoints", DEADLINE, || {
        (s.metric("streamforge_logged_commands") < 4.0).then_some(())
    });
    let list = wait_until("pruned checkpoint list", DEADLINE, || {
        let l = s.get("/checkpoints").json()["checkpoints"]
            .as_array()
            .unwrap()
            .clone();
        (l.len() <= 3).then_some(l)
    });
    let ids: Vec<i64> = list.iter().map(|c| c["id"].as_i64().unwrap()).collect();
    assert!(
        ids.contains(&mine),
        "the user's checkpoint is kept: {ids:?}"
    );
    assert_eq!(ids.len(), 3, "two automatic ones and the user's: {ids:?}");
    assert!(s.metric("streamforge_checkpoints_total") > 3.0);

    // Old pages are gone; asking for them says where to resume.
    let head = status(&s)["sequence"].as_u64().unwrap();
    let p = s.get("/changes?after=0").problem(410, "pruned");
    let earliest = p["earliest"].as_u64().unwrap();
    assert!(
        earliest > 1 && earliest + 10 <= head + 1,
        "{earliest} {head}"
    );
    assert!(p["detail"].as_str().unwrap().contains("GET /results"));
    assert_eq!(
        s.get(&format!("/changes?after={}", earliest - 1)).status,
        200
    );
    let r = s
        .client
        .get(s.url("/changes/stream?after=0"))
        .send()
        .unwrap();
    assert_eq!(r.status(), 410);
    let late_head = status(&s)["late"].as_u64().unwrap();
    if late_head > 3 {
        s.get("/late?after=0").problem(410, "pruned");
    }
    // Resync: the snapshot's sequence, then the changes after it.
    let res = s.get("/results").json();
    let seq = res["sequence"].as_u64().unwrap();
    let v = s
        .get(&format!("/changes?after={seq}&epoch={}", res["epoch"]))
        .json();
    assert_eq!(v["changes"].as_array().unwrap().len(), 0);
    assert_eq!(v["head"], seq);

    // Deleting: the user's checkpoint, then the one recovery starts from.
    assert_eq!(s.delete(&format!("/checkpoints/{mine}")).status, 204);
    s.get(&format!("/checkpoints/{mine}"))
        .problem(404, "not_found");
    s.delete(&format!("/checkpoints/{mine}"))
        .problem(404, "not_found");
    s.delete("/checkpoints/x").problem(404, "not_found");
    let newest = ids.iter().max().unwrap();
    assert_eq!(s.delete(&format!("/checkpoints/{newest}")).status, 204);
    let snap = s.snapshot();
    s.kill();
    let s = start(&db, &args);
    assert_eq!(s.snapshot(), snap, "recovery without the deleted base");
}

#[test]
fn ready_is_printed_after_recovery_and_a_refused_pipeline_never_listens() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let mut s = start(&db, &["--checkpoint-every", "0"]);
    send_all(&s, &workload(2, 30));
    s.kill();
    let mut child = Command::new(env!("CARGO_BIN_EXE_streamforge"))
        .args(["serve", "--addr", "127.0.0.1:0", "--db"])
        .arg(&db)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("listening on 127.0.0.1:"), "{first}");
    let second = lines.next().unwrap().unwrap();
    let rest = second
        .strip_prefix("ready: replayed ")
        .unwrap_or_else(|| panic!("{second}"));
    let (n, t) = rest.split_once(" logged calls in ").unwrap();
    assert!(n.parse::<u64>().unwrap() > 0, "{second}");
    assert!(t.ends_with(" s"), "{second}");
    let addr = first.trim_start_matches("listening on ");
    let ready = reqwest::blocking::get(format!("http://{addr}/readyz")).unwrap();
    assert_eq!(ready.status(), 200);
    let _ = child.kill();
    let _ = child.wait();

    // A pipeline the database does not hold: refused before listening.
    let other = dir.path().join("other.json");
    std::fs::write(
        &other,
        r#"{"partitions":["x"],"windows":{"w":{"kind":"fixed","size":5}},"lateness":0}"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_streamforge"))
        .args(["serve", "--addr", "127.0.0.1:0", "--db"])
        .arg(&db)
        .arg("--pipeline")
        .arg(&other)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "nothing listened");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not equivalent"));
}

/// Follows `/changes` pages from `start` with `limit` until an empty page:
/// each page's `head` is `head`, `next` moves forward, an empty page keeps
/// `next` where it was. Returns every change read.
fn follow_pages(s: &Server, start: u64, limit: u64, head: u64) -> Vec<String> {
    let mut got = Vec::new();
    let mut after = start;
    loop {
        let v = s
            .get(&format!("/changes?after={after}&limit={limit}"))
            .json();
        assert_eq!(v["head"], head, "after {after}, limit {limit}");
        let items = v["changes"].as_array().unwrap();
        let next = v["next"].as_u64().unwrap();
        if items.is_empty() {
            assert_eq!(next, after);
            return got;
        }
        assert!(next > after, "after {after}, limit {limit}: {v}");
        got.extend(items.iter().map(Value::to_string));
        after = next;
    }
}

/// After a restore beyond the stored head, every page from any position,
/// of any size, and the stream, read exactly the changes held after that
/// position (`want`, with a gap up to `cut`): no empty page while changes
/// follow, none skipped.
fn pages_read_everything_after_a_gap(s: &Server, epoch: u64, want: &[Value], cut: u64) {
    let head = want.last().unwrap()["seq"].as_u64().unwrap();
    let seqs: Vec<u64> = want.iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    assert!(
        !seqs.contains(&cut) && seqs.contains(&(cut + 1)),
        "a gap up to {cut}"
    );
    for limit in [1, 2, 3, 7, 1000] {
        for start in [0, 1, cut / 2, cut - 1, cut, cut + 1, cut + 4, head] {
            let expect: Vec<String> = want
                .iter()
                .filter(|c| c["seq"].as_u64().unwrap() > start)
                .map(Value::to_string)
                .collect();
            assert_eq!(
                follow_pages(s, start, limit, head),
                expect,
                "from {start}, limit {limit}"
            );
        }
    }
    let resp = s
        .client
        .get(s.url("/changes/stream?after=0"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = read_events(resp, |e| e.id == format!("{epoch}:{head}"));
    let streamed: Vec<String> = events
        .iter()
        .map(|e| serde_json::from_str::<Value>(&e.data).unwrap().to_string())
        .collect();
    let all: Vec<String> = want.iter().map(Value::to_string).collect();
    assert_eq!(streamed, all);
}

/// A checkpoint restored into a fresh database, and a newer checkpoint
/// restored over an older one, leave no changes up to the checkpoint's
/// sequence; the changes that follow are all readable, page by page and
/// streamed.
#[test]
fn pages_after_a_restore_beyond_the_stored_head_skip_nothing() {
    let dir = tempdir();
    let a = start(&dir.path().join("a"), &["--checkpoint-every", "0"]);
    let ops = workload(23, 240);
    send_all(&a, &ops[..100]);
    let seq1 = a.post_empty("/checkpoints").json()["sequence"]
        .as_u64()
        .unwrap();
    send_all(&a, &ops[100..170]);
    let seq2 = a.post_empty("/checkpoints").json()["sequence"]
        .as_u64()
        .unwrap();
    send_all(&a, &ops[170..]);
    // the uninterrupted history, read from a database without gaps
    let full: Vec<Value> = a
        .all_changes()
        .iter()
        .map(|c| serde_json::from_str(c).unwrap())
        .collect();
    assert!(
        seq1 > 8 && seq2 > seq1 + 8 && full.len() as u64 > seq2 + 8,
        "{seq1} {seq2} {}",
        full.len()
    );

    // A fresh database restored to checkpoint 1, then the same calls.
    let b = start(&dir.path().join("b"), &["--checkpoint-every", "0"]);
    let envelope = a.get("/checkpoints/1").body;
    let r = b.post("/restore", &envelope);
    assert_eq!(r.status, 200, "{}", r.body);
    send_all(&b, &ops[100..]);
    pages_read_everything_after_a_gap(&b, 1, &full[seq1 as usize..], seq1);

    // The first database: back to checkpoint 1, then forward to the newer
    // checkpoint 2 (whose changes after checkpoint 1 are gone), then the
    // same calls.
    for id in [1, 2] {
        let r = a.post_empty(&format!("/checkpoints/{id}/restore"));
        assert_eq!(r.status, 200, "{}", r.body);
    }
    send_all(&a, &ops[170..]);
    let held = [&full[..seq1 as usize], &full[seq2 as usize..]].concat();
    pages_read_everything_after_a_gap(&a, 2, &held, seq2);
}
