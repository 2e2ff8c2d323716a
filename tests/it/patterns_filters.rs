//! The output filters of `GET /patterns/output` and its stream (`pattern=`,
//! `key=`, repeatable) against the real binary: every filtered page is the
//! unfiltered page of the same `after` and `limit` with the records the
//! filter drops taken out (the same `next`, `head` and `epoch`), paging with
//! small limits reaches the head, a filtered long poll answers once anything
//! new was scanned, a filtered stream sends exactly the matching records
//! with their ids (catching up, live, across a pattern restore's rewind and
//! resumed from a `Last-Event-ID`), an unknown pattern is 422; and the
//! per-pattern metrics of `/metrics` equal the output's counts and `GET
//! /patterns/status`.

use crate::support::server;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc;
use std::time::Instant;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use server::*;

/// `pair` (an `a`, then a `b` whose `n` is at least the `a`'s; timeouts),
/// `echo` (every `v` is a match) and `quiet` (a `login` with no `logout`
/// within 30: absence waits, matched at their deadline).
const DOC: &str = r#"{"patterns": [
  {"name": "pair", "within": 100, "stages": [
    {"name": "a", "where": {"kind": "a"}},
    {"name": "b", "where": {"all": [{"kind": "b"},
      {"field": "n", "op": "ge", "capture": "a", "capture_field": "n"}]}}]},
  {"name": "echo", "within": 10, "stages": [{"name": "v", "where": {"kind": "v"}}]},
  {"name": "quiet", "within": 30, "stages": [{"name": "start", "where": {"kind": "login"}}],
   "absence": {"kind": "logout"}}],
 "limits": {"max_results_per_advance": 100000, "active_states": 10000}}"#;

const PATTERNS: [&str; 3] = ["echo", "pair", "quiet"];

/// The keys of the workload; the last one needs escaping in JSON and in a
/// query string alike.
const KEYS: [&str; 4] = ["k1", "k2", "k3", "a \"b\"&c=d/\\é %2F+"];

fn serve(dir: &Path) -> Server {
    let file = dir.join("patterns.json");
    std::fs::write(&file, DOC).unwrap();
    start(
        &dir.join("db"),
        &[
            "--patterns",
            file.to_str().unwrap(),
            "--checkpoint-every",
            "0",
        ],
    )
}

/// A query value, percent-encoded (everything but the unreserved bytes).
fn enc(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A filter: the patterns and keys asked for (empty: any).
#[derive(Debug, Clone)]
struct Filter {
    patterns: Vec<&'static str>,
    keys: Vec<&'static str>,
}

impl Filter {
    fn new(patterns: &[&'static str], keys: &[&'static str]) -> Filter {
        Filter {
            patterns: patterns.to_vec(),
            keys: keys.to_vec(),
        }
    }

    /// `&pattern=..&key=..`.
    fn query(&self) -> String {
        let mut q = String::new();
        for p in &self.patterns {
            q.push_str(&format!("&pattern={}", enc(p)));
        }
        for k in &self.keys {
            q.push_str(&format!("&key={}", enc(k)));
        }
        q
    }

    /// Whether a record passes, by its parsed fields.
    fn keeps(&self, record: &str) -> bool {
        let v: Value = serde_json::from_str(record).unwrap();
        let (p, k) = (v["pattern"].as_str().unwrap(), v["key"].as_str().unwrap());
        (self.patterns.is_empty() || self.patterns.contains(&p))
            && (self.keys.is_empty() || self.keys.contains(&k))
    }
}

/// The filters the tests try: one pattern, several, one key, several keys,
/// and both.
fn filters() -> Vec<Filter> {
    vec![
        Filter::new(&["pair"], &[]),
        Filter::new(&["quiet", "echo"], &[]),
        Filter::new(&[], &["k2"]),
        Filter::new(&[], &["k1", KEYS[3]]),
        Filter::new(&["pair"], &["k1"]),
        Filter::new(&["echo", "quiet"], &[KEYS[3], "k3"]),
        // a key nobody uses
        Filter::new(&["pair"], &["nobody"]),
    ]
}

/// A page as served.
struct Page {
    body: String,
    output: Vec<String>,
    next: u64,
    head: u64,
    epoch: u64,
}

fn page(s: &Server, query: &str) -> Page {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        output: Vec<&'a RawValue>,
        next: u64,
        head: u64,
        epoch: u64,
    }
    let r = s.get(&format!("/patterns/output?{query}"));
    assert_eq!(r.status, 200, "{query}: {}", r.body);
    let b: Body<'_> = serde_json::from_str(&r.body).unwrap();
    Page {
        output: b.output.iter().map(|o| o.get().to_string()).collect(),
        next: b.next,
        head: b.head,
        epoch: b.epoch,
        body: r.body.clone(),
    }
}

/// The page body the filtered request must answer: the unfiltered one's
/// records that pass, and its `next`, `head` and `epoch`.
fn expected_body(unfiltered: &Page, f: &Filter) -> String {
    let kept: Vec<&str> = unfiltered
        .output
        .iter()
        .filter(|r| f.keeps(r))
        .map(String::as_str)
        .collect();
    format!(
        r#"{{"output":[{}],"next":{},"head":{},"epoch":{}}}"#,
        kept.join(","),
        unfiltered.next,
        unfiltered.head,
        unfiltered.epoch
    )
}

/// A pattern event.
fn pev(id: u64, key: &str, kind: &str, time: i64, n: u64) -> String {
    format!(
        r#"{{"id":"e{id}","key":{},"kind":"{kind}","time":{time},"fields":{{"n":{n}}}}}"#,
        serde_json::to_string(key).unwrap()
    )
}

/// Pushes and advances a seeded workload over every key; returns the
/// watermark it ended at. Events lie after it (up to 120 later), so the
/// state holds branches, waits and buffered events in the end.
struct Load {
    rng: Rng,
    id: u64,
    w: i64,
}

impl Load {
    fn new(seed: u64) -> Load {
        Load {
            rng: Rng(seed),
            id: 0,
            w: -1,
        }
    }

    fn push(&mut self, s: &Server, events: usize) {
        let items: Vec<String> = (0..events)
            .map(|_| {
                self.id += 1;
                let kind = ["a", "b", "b", "v", "login", "logout"][self.rng.below(6) as usize];
                let key = KEYS[self.rng.below(KEYS.len() as u64) as usize];
                let t = self.w + 1 + self.rng.below(120) as i64;
                pev(self.id, key, kind, t, self.rng.below(10))
            })
            .collect();
        let r = s.post("/patterns/events", &format!("[{}]", items.join(",")));
        assert_eq!(r.status, 200, "{}", r.body);
    }

    fn advance(&mut self, s: &Server, by: i64) {
        self.w += by;
        let r = s.post(
            "/patterns/advance",
            &format!(r#"{{"watermark":{}}}"#, self.w),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }

    /// `steps` pushes of a few events, each followed by an advance.
    fn run(&mut self, s: &Server, steps: usize) {
        for _ in 0..steps {
            let n = 1 + self.rng.below(6) as usize;
            self.push(s, n);
            let by = 1 + self.rng.below(40) as i64;
            self.advance(s, by);
        }
    }
}

/// The whole output, unfiltered, as served.
fn all_output(s: &Server) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let p = page(s, &format!("after={after}&limit=1000"));
        if p.output.is_empty() {
            assert_eq!(after, p.head);
            return out;
        }
        out.extend(p.output);
        after = p.next;
    }
}

fn seq_of(record: &str) -> u64 {
    serde_json::from_str::<Value>(record).unwrap()["seq"]
        .as_u64()
        .unwrap()
}

#[test]
fn filtered_pages_are_the_unfiltered_pages_with_the_others_taken_out() {
    let dir = tempdir();
    let s = serve(dir.path());
    Load::new(7).run(&s, 60);
    let all = all_output(&s);
    let head = all.len() as u64;
    assert!(head > 60, "workload too small: {head}");
    for p in PATTERNS {
        assert!(all.iter().any(|r| Filter::new(&[p], &[]).keeps(r)), "{p}");
    }
    for k in KEYS {
        assert!(all.iter().any(|r| Filter::new(&[], &[k]).keeps(r)), "{k}");
    }
    assert!(all.iter().any(|r| r.contains(r#""type":"timeout""#)));

    for f in filters() {
        let want: Vec<&String> = all.iter().filter(|r| f.keeps(r)).collect();
        for limit in [1, 3, 7, 1000] {
            let mut got: Vec<String> = Vec::new();
            let mut after = 0;
            let mut pages = 0;
            while after < head {
                let q = format!("after={after}&limit={limit}");
                let unfiltered = page(&s, &q);
                let filtered = page(&s, &format!("{q}{}", f.query()));
                assert_eq!(filtered.body, expected_body(&unfiltered, &f), "{f:?} {q}");
                // `limit` bounds the records scanned; `next` passes them all.
                assert!(filtered.next > after && filtered.next <= head, "{f:?} {q}");
                assert_eq!(filtered.next, (after + limit).min(head), "{f:?} {q}");
                assert!(filtered.output.iter().all(|r| {
                    let q = seq_of(r);
                    q > after && q <= filtered.next
                }));
                got.extend(filtered.output);
                after = filtered.next;
                pages += 1;
            }
            assert_eq!(pages, head.div_ceil(limit), "{f:?} limit {limit}");
            assert_eq!(got.iter().collect::<Vec<_>>(), want, "{f:?} limit {limit}");
            // At the head: an empty page that stays there.
            let end = page(&s, &format!("after={head}&limit={limit}{}", f.query()));
            assert_eq!(
                end.body,
                format!(r#"{{"output":[],"next":{head},"head":{head},"epoch":0}}"#)
            );
        }
    }

    // Repeating a value changes nothing; the order of the values neither.
    let once = page(&s, "after=0&pattern=pair&key=k1").body;
    assert_eq!(
        page(&s, "key=k1&pattern=pair&after=0&pattern=pair&key=k1").body,
        once
    );
    assert_eq!(
        page(&s, "pattern=echo&pattern=quiet").body,
        page(&s, "pattern=quiet&pattern=echo").body
    );
    // Every pattern and no key filter: the unfiltered page, byte for byte.
    assert_eq!(
        page(
            &s,
            "after=5&limit=20&pattern=echo&pattern=pair&pattern=quiet"
        )
        .body,
        page(&s, "after=5&limit=20").body
    );
    // A key is compared exactly: no prefix matches.
    assert_eq!(
        page(&s, "key=k").body,
        format!(
            r#"{{"output":[],"next":{},"head":{head},"epoch":0}}"#,
            head.min(1000)
        )
    );
}

#[test]
fn a_filtered_long_poll_answers_once_anything_new_was_scanned() {
    let dir = tempdir();
    let s = serve(dir.path());
    let poll = |query: String| {
        let (c, u) = (
            s.client.clone(),
            s.url(&format!("/patterns/output?{query}")),
        );
        std::thread::spawn(move || {
            let r = c.get(u).send().unwrap();
            assert_eq!(r.status(), 200);
            r.text().unwrap()
        })
    };
    let waiting = || {
        wait_until("the poll waits", DEADLINE, || {
            (s.metric("streamforge_waiters") >= 1.0).then_some(())
        })
    };
    let events = |body: &str| {
        let r = s.post("/patterns/events", body);
        assert_eq!(r.status, 200, "{}", r.body);
    };
    let advance = |w: i64| {
        let r = s.post("/patterns/advance", &format!(r#"{{"watermark":{w}}}"#));
        assert_eq!(r.status, 200, "{}", r.body);
    };

    // New records that do not match: an empty page whose `next` moved past
    // them.
    let p = poll("after=0&wait_ms=20000&pattern=pair".into());
    waiting();
    events(&pev(1, "solo", "v", 1, 0));
    advance(2);
    let body = p.join().unwrap();
    let echo = page(&s, "after=0");
    assert!(!echo.output.is_empty(), "{}", echo.body);
    assert!(echo
        .output
        .iter()
        .all(|r| r.contains(r#""pattern":"echo""#)));
    let head = echo.head;
    assert_eq!(
        body,
        format!(r#"{{"output":[],"next":{head},"head":{head},"epoch":0}}"#)
    );

    // Then a match: the poll answers with it.
    let p = poll(format!("after={head}&wait_ms=20000&pattern=pair&key=solo"));
    waiting();
    events(&format!(
        "[{},{}]",
        pev(2, "solo", "a", 3, 1),
        pev(3, "solo", "b", 4, 2)
    ));
    advance(5);
    let body = p.join().unwrap();
    let pair = page(&s, &format!("after={head}"));
    assert_eq!(pair.output.len(), 1, "{}", pair.body);
    assert!(pair.output[0].contains(r#""pattern":"pair""#));
    assert_eq!(body, pair.body);

    // Nothing new within the budget: the empty page at `after`.
    let t = Instant::now();
    let end = pair.next;
    let r = s.get(&format!("/patterns/output?after={end}&wait_ms=200&key=k1"));
    assert!(t.elapsed().as_millis() >= 200);
    assert_eq!(
        r.body,
        format!(r#"{{"output":[],"next":{end},"head":{end},"epoch":0}}"#)
    );
}

/// The events of a stream, as they arrive.
fn follow(s: &Server, query: &str, last_event_id: Option<&str>) -> mpsc::Receiver<SseEvent> {
    let mut rb = s
        .client
        .get(s.url(&format!("/patterns/output/stream?{query}")));
    if let Some(id) = last_event_id {
        rb = rb.header("Last-Event-ID", id);
    }
    let resp = rb.send().unwrap();
    assert_eq!(resp.status(), 200);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        read_events(resp, |e| tx.send(e.clone()).is_err());
    });
    rx
}

/// The next `n` events (each within the deadline).
fn take(rx: &mpsc::Receiver<SseEvent>, n: usize) -> Vec<SseEvent> {
    (0..n)
        .map(|i| {
            rx.recv_timeout(DEADLINE)
                .unwrap_or_else(|e| panic!("event {i} of {n}: {e}"))
        })
        .collect()
}

/// The events a filtered stream sends for `records` of `epoch`.
fn events_of(records: &[String], epoch: u64, f: &Filter) -> Vec<SseEvent> {
    records
        .iter()
        .filter(|r| f.keeps(r))
        .map(|r| SseEvent {
            event: String::new(),
            id: format!("{epoch}:{}", seq_of(r)),
            data: r.clone(),
        })
        .collect()
}

#[test]
fn a_filtered_stream_sends_exactly_the_matching_records_with_their_ids() {
    let dir = tempdir();
    let s = serve(dir.path());
    let mut load = Load::new(23);
    load.run(&s, 25);
    let cp = s.post_empty("/patterns/checkpoints");
    assert_eq!(cp.status, 201, "{}", cp.body);
    let cp = cp.json();
    let cut = cp["sequence"].as_u64().unwrap();
    load.run(&s, 25);
    let before = all_output(&s);
    assert!(before.len() as u64 > cut + 10, "{} {cut}", before.len());

    let f = Filter::new(&["pair", "quiet"], &["k1", KEYS[3], "zz"]);
    let want = events_of(&before, 0, &f);
    assert!(want.len() > 3, "too few matching records: {}", want.len());
    let stream = follow(&s, &f.query()[1..], None);
    // Every filter of the list, caught up from the start.
    let others: Vec<(Filter, mpsc::Receiver<SseEvent>)> = filters()
        .into_iter()
        .map(|g| {
            let rx = follow(&s, &g.query()[1..], None);
            (g, rx)
        })
        .collect();
    assert_eq!(take(&stream, want.len()), want, "catching up");
    for (g, rx) in &others {
        let want = events_of(&before, 0, g);
        assert_eq!(take(rx, want.len()), want, "{g:?}");
    }
    drop(others);

    // Live: new records as they are committed, the others passed over.
    let mut load2 = Load {
        rng: Rng(99),
        id: 100_000,
        w: load.w,
    };
    load2.run(&s, 20);
    let now = all_output(&s);
    let live = events_of(&now[before.len()..], 0, &f);
    assert!(!live.is_empty(), "no live matching record");
    assert_eq!(take(&stream, live.len()), live, "live");

    // Resumed from a Last-Event-ID (the header wins over `after`).
    let mid = &want[want.len() / 2].id;
    let resumed = follow(&s, &format!("after=1{}", f.query()), Some(mid));
    let rest: Vec<SseEvent> = want[want.len() / 2 + 1..]
        .iter()
        .chain(&live)
        .cloned()
        .collect();
    assert_eq!(take(&resumed, rest.len()), rest, "resumed after {mid}");

    // A pattern restore: the rewind, unchanged, then the new epoch's
    // matching records.
    let r = s.post_empty(&format!("/patterns/checkpoints/{}/restore", cp["id"]));
    assert_eq!(r.status, 200, "{}", r.body);
    let rewind = SseEvent {
        event: "rewind".into(),
        id: format!("1:{cut}"),
        data: format!(r#"{{"epoch":1,"after":{cut}}}"#),
    };
    assert_eq!(take(&stream, 1), std::slice::from_ref(&rewind));
    assert_eq!(take(&resumed, 1), [rewind]);
    let status = s.get("/patterns/status").json();
    let mut load3 = Load {
        rng: Rng(5),
        id: 200_000,
        w: status["watermark"].as_i64().unwrap(),
    };
    load3.run(&s, 20);
    // Last, a match of a key only this pair has, so the phase has one.
    let w = load3.w;
    let r = s.post(
        "/patterns/events",
        &format!(
            "[{},{}]",
            pev(300_000, "zz", "a", w + 1, 1),
            pev(300_001, "zz", "b", w + 2, 2)
        ),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    load3.advance(&s, 2);
    let after_restore: Vec<String> = all_output(&s)[cut as usize..].to_vec();
    let want = events_of(&after_restore, 1, &f);
    assert!(
        want.iter().any(|e| e.data.contains(r#""key":"zz""#)),
        "{want:?}"
    );
    assert_eq!(take(&stream, want.len()), want, "after the restore");
    assert_eq!(take(&resumed, want.len()), want, "after the restore");
}

#[test]
fn an_unknown_pattern_is_422_naming_the_known_ones() {
    let dir = tempdir();
    let s = serve(dir.path());
    Load::new(3).run(&s, 5);
    let names = s.get("/patterns").json()["patterns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert_eq!(names, PATTERNS);
    for query in [
        "pattern=nope",
        "pattern=pair&pattern=nope",
        "pattern=",
        "pattern=Pair",
        "pattern=pai",
        "pattern=nope&key=k1",
        "after=0&limit=3&wait_ms=1000&pattern=nope",
    ] {
        for path in ["/patterns/output", "/patterns/output/stream"] {
            let r = s.get(&format!("{path}?{query}"));
            let v = r.problem(422, "invalid_request");
            let detail = v["detail"].as_str().unwrap();
            assert!(detail.contains("pattern"), "{detail}");
            assert!(
                detail.contains(r#"the patterns are "echo", "pair", "quiet""#),
                "{path}?{query}: {detail}"
            );
        }
    }
    // The other parameters are checked first, as without a filter.
    s.get("/patterns/output?limit=0&pattern=nope")
        .problem(422, "invalid_request");
    s.get("/patterns/output?after=x&pattern=nope")
        .problem(400, "bad_request");
    // A key nobody has is no error: it matches nothing (yet).
    let r = s.get("/patterns/output?key=nobody");
    assert_eq!(r.status, 200);
    assert!(r.body.starts_with(r#"{"output":[],"next":"#), "{}", r.body);
}

/// The samples of a family with the label `pattern`, from `/metrics`
/// (label values unescaped).
fn per_pattern(text: &str, name: &str) -> BTreeMap<String, f64> {
    let prefix = format!("{name}{{pattern=\"");
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let (label, value) = rest.rsplit_once("\"} ").unwrap();
        let label = label
            .replace("\\n", "\n")
            .replace("\\\"", "\"")
            .replace("\\\\", "\\");
        out.insert(label, value.parse().unwrap());
    }
    assert!(
        text.contains(&format!("# TYPE {name} ")),
        "{name} has no TYPE line"
    );
    out
}

#[test]
fn per_pattern_metrics_count_the_output_and_show_the_engine() {
    let dir = tempdir();
    let s = serve(dir.path());
    // Before any output: every pattern, at 0.
    let text = s.get("/metrics").body;
    for name in [
        "streamforge_pattern_matches_total",
        "streamforge_pattern_timeouts_total",
        "streamforge_pattern_active_branches",
        "streamforge_pattern_waits",
        "streamforge_pattern_keys",
    ] {
        let zero: BTreeMap<String, f64> = PATTERNS.iter().map(|p| (p.to_string(), 0.0)).collect();
        assert_eq!(per_pattern(&text, name), zero, "{name}");
    }
    assert!(text.contains("# TYPE streamforge_pattern_matches_total counter\n"));
    assert!(text.contains("# TYPE streamforge_pattern_active_branches gauge\n"));
    assert_eq!(s.metric("streamforge_pattern_buffered_events"), 0.0);

    let mut load = Load::new(41);
    load.run(&s, 40);
    // A branch and a wait surely open, and events left buffered (after the
    // watermark).
    let w = load.w;
    let r = s.post(
        "/patterns/events",
        &format!(
            "[{},{}]",
            pev(5000, "open", "login", w + 1, 0),
            pev(5001, "open", "a", w + 1, 9)
        ),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    load.advance(&s, 1);
    load.push(&s, 12);

    let all = all_output(&s);
    let text = s.get("/metrics").body;
    let status = s.get("/patterns/status").json();
    let matches = records_by_pattern(&all, "match");
    let timeouts = records_by_pattern(&all, "timeout");
    assert!(matches.values().all(|n| *n > 0.0), "{matches:?}");
    assert!(timeouts["pair"] > 0.0, "{timeouts:?}");
    assert_eq!(
        per_pattern(&text, "streamforge_pattern_matches_total"),
        matches
    );
    assert_eq!(
        per_pattern(&text, "streamforge_pattern_timeouts_total"),
        timeouts
    );
    assert_eq!(
        matches.values().chain(timeouts.values()).sum::<f64>(),
        s.metric("streamforge_pattern_output_total")
    );
    let engine = |field: &str| -> BTreeMap<String, f64> {
        status["patterns"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(p, v)| (p.clone(), v[field].as_f64().unwrap()))
            .collect()
    };
    for (name, field) in [
        ("streamforge_pattern_active_branches", "branches"),
        ("streamforge_pattern_waits", "waits"),
        ("streamforge_pattern_keys", "keys"),
    ] {
        let want = engine(field);
        assert_eq!(want.len(), PATTERNS.len());
        assert!(want.values().any(|v| *v > 0.0), "{field}: {status}");
        assert_eq!(per_pattern(&text, name), want, "{name}");
    }
    let buffered = status["buffered"].as_f64().unwrap();
    assert!(buffered > 0.0, "{status}");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("streamforge_pattern_buffered_events "))
        .expect("streamforge_pattern_buffered_events");
    assert_eq!(line.parse::<f64>().unwrap(), buffered);

    // A finish: everything expires; the counters go on from there.
    let f = s.post_empty("/patterns/finish");
    assert_eq!(f.status, 200, "{}", f.body);
    let all = all_output(&s);
    assert!(all.len() > matches.values().chain(timeouts.values()).sum::<f64>() as usize);
    let text = s.get("/metrics").body;
    assert_eq!(
        per_pattern(&text, "streamforge_pattern_matches_total"),
        records_by_pattern(&all, "match")
    );
    assert_eq!(
        per_pattern(&text, "streamforge_pattern_timeouts_total"),
        records_by_pattern(&all, "timeout")
    );
    for name in [
        "streamforge_pattern_active_branches",
        "streamforge_pattern_waits",
        "streamforge_pattern_keys",
    ] {
        assert!(
            per_pattern(&text, name).values().all(|v| *v == 0.0),
            "{name} after the finish"
        );
    }
    assert_eq!(s.metric("streamforge_pattern_buffered_events"), 0.0);
}

/// How many of the output records `all` are of type `kind`, per pattern.
fn records_by_pattern(all: &[String], kind: &str) -> BTreeMap<String, f64> {
    PATTERNS
        .iter()
        .map(|p| {
            let n = all
                .iter()
                .filter(|r| {
                    let v: Value = serde_json::from_str(r).unwrap();
                    v["pattern"] == *p && v["type"] == kind
                })
                .count();
            (p.to_string(), n as f64)
        })
        .collect()
}
