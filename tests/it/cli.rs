//! The client subcommands end to end: the real binary as server and as
//! client, on the example pipeline and events of `examples/`.

use crate::support::server;

use std::path::Path;

use server::client::{client, closed_port_url, run, sf, Follower};
use server::{start, tempdir, Server};

const PIPELINE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/pageviews.pipeline.json"
);
const EVENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/pageviews.ndjson");

/// What `streamforge changes` prints after `send examples/pageviews.ndjson`,
/// derived from docs/semantics.md by hand.
///
/// Pipeline: partitions web, mobile; lateness 10000; windows in address
/// (name) order `views_5min_every_1min` (sliding 300000/60000) <
/// `views_per_minute` (fixed 60000) < `visits` (session gap 30000).
///
/// 1. v1 alice 5000 12, v2 bob 20000 30, v3 alice 25000 8, v4 alice 61000 5,
///    v5 bob 15000 7: no watermark yet, so nothing is ready: no changes.
/// 2. advance web 60000: mobile has not reported, still no watermark.
/// 3. advance mobile 60000: W = 60000. Ready (end <= 60000):
///    - sliding: an event at t is in every [s, s+300000) with s a multiple of
///      60000 in (t-300000, t]; only [-240000,60000) ends by 60000: alice
///      {12, 8}, bob {30, 7};
///    - fixed [0,60000): alice {12, 8}, bob {30, 7};
///    - sessions: alice [5000,35000) and [25000,55000) overlap and merge to
///      [5000,55000) {12, 8}; bob [20000,50000) + [15000,45000) merge to
///      [15000,50000) {30, 7}; alice's v4 session [61000,91000) is not ready.
///
///    Six upserts in address order (seq 1-6). Nothing is final yet
///    (final needs W > end + 10000, i.e. end < 50000).
/// 4. v3 again on mobile offset 2: same id and identity, a duplicate: nothing.
/// 5. v6 bob 58000 4: 58000 + 10000 >= 60000, not late. bob's fixed
///    [0,60000) and sliding [-240000,60000) become {30, 7, 4}: retractions
///    first (7, 8), then the corrected upserts (9, 10). Its session
///    [58000,88000) does not touch [15000,50000) and is not ready.
/// 6. advance web 120000: mobile is at 60000, W stays 60000: nothing.
/// 7. advance mobile 120000: W = 120000. Newly ready: sliding
///    [-180000,120000) alice {12, 8, 5}, bob {30, 7, 4}; fixed alice
///    [60000,120000) {5}; sessions alice [61000,91000) {5}, bob [58000,88000)
///    {4}: upserts 11-15. Then everything with end < 110000 is finalized
///    (silently).
/// 8. v7 alice 40000 3: 40000 + 10000 < 120000, late: one late record at
///    W = 120000, no window changes.
const EXPECTED_CHANGES: &str = "\
1 + views_5min_every_1min alice [-240000,60000) count=2 sum=20 min=8 max=12
2 + views_5min_every_1min bob [-240000,60000) count=2 sum=37 min=7 max=30
3 + views_per_minute alice [0,60000) count=2 sum=20 min=8 max=12
4 + views_per_minute bob [0,60000) count=2 sum=37 min=7 max=30
5 + visits alice [5000,55000) count=2 sum=20 min=8 max=12
6 + visits bob [15000,50000) count=2 sum=37 min=7 max=30
7 - views_5min_every_1min bob [-240000,60000) count=2 sum=37 min=7 max=30
8 - views_per_minute bob [0,60000) count=2 sum=37 min=7 max=30
9 + views_5min_every_1min bob [-240000,60000) count=3 sum=41 min=4 max=30
10 + views_per_minute bob [0,60000) count=3 sum=41 min=4 max=30
11 + views_5min_every_1min alice [-180000,120000) count=3 sum=25 min=5 max=12
12 + views_5min_every_1min bob [-180000,120000) count=3 sum=41 min=4 max=30
13 + views_per_minute alice [60000,120000) count=1 sum=5 min=5 max=5
14 + visits alice [61000,91000) count=1 sum=5 min=5 max=5
15 + visits bob [58000,88000) count=1 sum=4 min=4 max=4
";

/// The visible rows at W = 120000: what is ready and not finalized
/// (end >= 110000): the two sliding windows ending at 120000 and alice's
/// fixed [60000,120000).
const EXPECTED_RESULTS: &str = "\
# watermark 120000, 3 visible rows
views_5min_every_1min alice [-180000,120000) count=3 sum=25 min=5 max=12
views_5min_every_1min bob [-180000,120000) count=3 sum=41 min=4 max=30
views_per_minute alice [60000,120000) count=1 sum=5 min=5 max=5
";

fn example_server(dir: &Path) -> Server {
    start(&dir.join("db"), &["--pipeline", PIPELINE])
}

#[test]
fn send_changes_checkpoint_verify_restore() {
    let dir = tempdir();
    let s = example_server(dir.path());
    // Started before anything is sent: it long-polls and prints as changes come.
    let follower = Follower::start(&s, &["changes", "--follow"]);

    let sent = sf(&s, &["send", EVENTS]).ok();
    assert!(
        sent.stdout.starts_with(&format!(
            "sent {EVENTS}: 8 deliveries in 3 batches, 4 advances, 0 idles; 15 changes, 1 late; "
        )),
        "{sent:?}"
    );
    assert!(sent.stdout.trim_end().ends_with(" events/s"), "{sent:?}");
    assert_eq!(sent.stdout.lines().count(), 1, "{sent:?}");
    // stderr is not a terminal here: no progress bar.
    assert_eq!(sent.stderr, "", "{sent:?}");

    assert_eq!(sf(&s, &["changes"]).ok().stdout, EXPECTED_CHANGES);
    assert_eq!(follower.take(15), EXPECTED_CHANGES);
    // Paging: small pages and --after give the same lines.
    let tail: String = EXPECTED_CHANGES
        .lines()
        .skip(10)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        sf(&s, &["changes", "--after", "10", "--limit", "2"])
            .ok()
            .stdout,
        tail
    );
    assert_eq!(
        sf(&s, &["late"]).ok().stdout,
        "1 v7 alice timestamp=40000 value=3 watermark=120000\n"
    );
    assert_eq!(sf(&s, &["results"]).ok().stdout, EXPECTED_RESULTS);
    assert_eq!(
        sf(&s, &["results", "--window", "views_per_minute", "--key", "alice"])
            .ok()
            .stdout,
        "# watermark 120000, 1 visible rows\nviews_per_minute alice [60000,120000) count=1 sum=5 min=5 max=5\n"
    );
    // Live buckets at W = 120000: alice's sliding windows starting -180000..60000
    // (5), bob's starting -180000..0 (4), alice's fixed [60000,120000) (1).
    assert_eq!(
        sf(&s, &["status"]).ok().stdout,
        "\
watermark     120000
sequence      15
late          1
live buckets  10

partition  offset  progress  idle
mobile     3       120000    no
web        3       120000    no
"
    );
    assert_eq!(
        sf(&s, &["status", "--json"]).ok().stdout.trim_end(),
        s.get("/status").body
    );

    // Checkpoint, download, verify offline.
    let created = sf(&s, &["checkpoint", "create"]).ok().stdout;
    let fields: Vec<&str> = created.split_whitespace().collect();
    assert_eq!(
        fields[..4],
        ["checkpoint", "1:", "sequence", "15,"],
        "{created}"
    );
    let sha = fields[fields.len() - 1];
    let file = dir.path().join("ckpt.json");
    let file_s = file.to_str().expect("utf-8 path");
    let got = sf(&s, &["checkpoint", "get", "1", "-o", file_s]).ok();
    let bytes = std::fs::read(&file).expect("checkpoint file");
    assert_eq!(
        got.stdout,
        format!("wrote checkpoint 1 to {file_s} ({} bytes)\n", bytes.len())
    );
    assert!(
        bytes.starts_with(format!(r#"{{"digest":"{sha}","#).as_bytes()),
        "the digest is the file's own"
    );
    assert!(created.contains(&format!(", {} bytes,", bytes.len())));
    // Without -o the bytes go to stdout unchanged.
    assert_eq!(
        sf(&s, &["checkpoint", "get", "1"]).ok().stdout.as_bytes(),
        &bytes[..]
    );
    assert_eq!(
        sf(&s, &["verify", file_s]).ok().stdout,
        format!(
            "\
valid checkpoint {file_s} ({} bytes, version 2, digest {sha})
pipeline: partitions mobile, web; lateness 10000
  window views_5min_every_1min: sliding size 300000 step 60000
  window views_per_minute: fixed size 60000
  window visits: session gap 30000
watermark: 120000
sequence: 15
live buckets: 10
visible rows: 3
late records: 1
  partition  offset  progress  idle
  mobile     3       120000    no
  web        3       120000    no
",
            bytes.len()
        )
    );
    let list = sf(&s, &["checkpoint", "list"]).ok().stdout;
    let mut rows = list.lines();
    assert_eq!(
        rows.next()
            .map(|h| h.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["id", "sequence", "bytes", "created_at", "digest"])
    );
    let row: Vec<String> = rows
        .next()
        .expect("one checkpoint")
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(row[..3], ["1", "15", &bytes.len().to_string()]);
    assert_eq!(row[4], sha);

    // Move on past the checkpoint: both partitions to 200000. The sliding
    // windows [-120000,180000) become ready (alice {12,8,5}, bob {30,7,4});
    // everything with end < 190000 is finalized: the two sliding windows
    // ending at 120000, alice's fixed [60000,120000) and the two new ones.
    assert_eq!(
        sf(&s, &["watermark", "web", "200000"]).ok().stdout,
        "# watermark 120000, 0 changes, 0 finalized\n"
    );
    let moved = "\
16 + views_5min_every_1min alice [-120000,180000) count=3 sum=25 min=5 max=12
17 + views_5min_every_1min bob [-120000,180000) count=3 sum=41 min=4 max=30
";
    assert_eq!(
        sf(&s, &["watermark", "mobile", "200000"]).ok().stdout,
        format!("{moved}# watermark 200000, 2 changes, 5 finalized\n")
    );
    assert_eq!(follower.take(2), moved);
    assert_eq!(
        sf(&s, &["results"]).ok().stdout,
        "# watermark 200000, 0 visible rows\n"
    );

    // Restore by id: back to sequence 15; the changelog is cut back.
    assert_eq!(
        sf(&s, &["checkpoint", "restore", "1"]).ok().stdout,
        "restored: sequence 15, late 1, watermark 120000\n"
    );
    follower.rewound(1, 15);
    assert_eq!(
        sf(&s, &["changes", "--after", "14"]).ok().stdout,
        &EXPECTED_CHANGES[EXPECTED_CHANGES.find("15 +").unwrap()..]
    );
    assert_eq!(sf(&s, &["results"]).ok().stdout, EXPECTED_RESULTS);

    // Sending the file again is a no-op: every delivery carries its offset,
    // every advance is at or below the progress already reported.
    let again = sf(&s, &["send", EVENTS]).ok();
    assert!(
        again
            .stdout
            .contains("8 deliveries in 3 batches, 4 advances, 0 idles; 0 changes, 0 late;"),
        "{again:?}"
    );
    assert_eq!(sf(&s, &["changes", "--after", "15"]).ok().stdout, "");
    assert_eq!(sf(&s, &["late", "--after", "1"]).ok().stdout, "");

    // Restore from the file too.
    assert_eq!(
        sf(&s, &["checkpoint", "restore", "--file", file_s])
            .ok()
            .stdout,
        "restored: sequence 15, late 1, watermark 120000\n"
    );
    follower.rewound(2, 15);
    assert_eq!(sf(&s, &["changes"]).ok().stdout, EXPECTED_CHANGES);

    // Processing continues as if the checkpoint had just been taken: the same
    // two changes as before, with the same sequence numbers. The follower,
    // which had seen up to 17, noticed the cut back and prints them again.
    sf(&s, &["watermark", "web", "200000"]).ok();
    assert_eq!(
        sf(&s, &["watermark", "mobile", "200000"]).ok().stdout,
        format!("{moved}# watermark 200000, 2 changes, 5 finalized\n")
    );
    assert_eq!(follower.take(2), moved);
}

#[test]
fn send_reads_stdin_bare_deliveries_and_idles_in_small_batches() {
    let dir = tempdir();
    let s = example_server(dir.path());
    // Bare deliveries (no "op"), append mode, an idle and a negative watermark.
    let input = r#"
{"partition":"web","offset":0,"event":{"id":"a","key":"k","timestamp":-70000,"value":1}}
{"partition":"web","event":{"id":"b","key":"k","timestamp":-65000,"value":2}}
{"op":"deliver","partition":"web","event":{"id":"c","key":"k","timestamp":-61000,"value":3}}
{"op":"idle","partition":"mobile"}
{"op":"advance","partition":"web","watermark":-50000}
"#;
    let mut cmd = client(&["send", "-", "--batch", "2"]);
    cmd.env("STREAMFORGE_URL", &s.base);
    let r = run(cmd, Some(input)).ok();
    // mobile idle, web at -50000: W = -50000. fixed [-120000,-60000) holds
    // all three (the 1-minute windows), ready; session [-70000,-31000) is not
    // (end > W); sliding windows ending by -50000 do not exist here (ends
    // are multiples of 60000: -60000 holds all three).
    assert!(
        r.stdout.starts_with(
            "sent stdin: 3 deliveries in 2 batches, 1 advances, 1 idles; 2 changes, 0 late;"
        ),
        "{r:?}"
    );
    assert_eq!(
        sf(&s, &["changes"]).ok().stdout,
        "\
1 + views_5min_every_1min k [-360000,-60000) count=3 sum=6 min=1 max=3
2 + views_per_minute k [-120000,-60000) count=3 sum=6 min=1 max=3
"
    );
    assert_eq!(
        sf(&s, &["idle", "web"]).ok().stdout,
        "# watermark -50000, 0 changes, 0 finalized\n"
    );
    assert_eq!(
        sf(&s, &["watermark", "mobile", "-60000", "--json"])
            .ok()
            .stdout,
        "{\"changes\":[],\"watermark\":-50000,\"finalized\":[]}\n"
    );
}

#[test]
fn errors_print_the_detail_and_exit_1() {
    let dir = tempdir();
    let s = example_server(dir.path());

    // A problem answer: its detail and code on stderr, nothing on stdout.
    let r = sf(&s, &["watermark", "nope", "5"]).failed();
    assert_eq!(r.stdout, "");
    let detail = s.post("/watermarks", r#"{"partition":"nope","watermark":5}"#);
    let detail = detail.problem(422, "unknown_partition")["detail"]
        .as_str()
        .expect("detail")
        .to_string();
    assert_eq!(
        r.stderr,
        format!("streamforge: error: {detail} (422 unknown_partition)\n")
    );
    sf(&s, &["idle", "nope"]).failed();
    let r = sf(&s, &["checkpoint", "get", "7"]).failed();
    assert!(r.stderr.contains("(404 not_found)"), "{r:?}");
    let r = sf(&s, &["checkpoint", "restore", "7"]).failed();
    assert!(r.stderr.contains("(404 not_found)"), "{r:?}");

    // A rejected batch names the file line of the failing delivery; what came
    // before the batch stays applied, the batch does not.
    let file = dir.path().join("ops.ndjson");
    std::fs::write(
        &file,
        r#"{"op":"deliver","partition":"web","offset":0,"event":{"id":"v1","key":"alice","timestamp":5000,"value":12}}
{"op":"advance","partition":"web","watermark":1000}
{"op":"deliver","partition":"web","offset":1,"event":{"id":"v2","key":"bob","timestamp":20000,"value":30}}
{"op":"deliver","partition":"web","offset":5,"event":{"id":"v3","key":"bob","timestamp":20000,"value":30}}
"#,
    )
    .expect("write");
    let path = file.to_str().expect("utf-8 path");
    let r = sf(&s, &["send", path]).failed();
    assert!(
        r.stderr.starts_with("streamforge: error: line 4: ")
            && r.stderr.contains("(409 offset_conflict) at batch index 1")
            && r.stderr
                .contains("the batch of lines 3-4 was not applied; everything before line 3 was"),
        "{r:?}"
    );
    assert_eq!(r.stdout, "");
    let status = s.get("/status").json();
    assert_eq!(status["partitions"]["web"]["offset"], 0);
    assert_eq!(status["partitions"]["web"]["progress"], 1000);

    // A malformed line stops before it; what precedes it is sent.
    std::fs::write(
        &file,
        "{\"partition\":\"web\",\"offset\":1,\"event\":{\"id\":\"v2\",\"key\":\"bob\",\"timestamp\":20000,\"value\":30}}\n{\"op\":\"deliver\",\"partition\":\"web\"}\n",
    )
    .expect("write");
    let r = sf(&s, &["send", path]).failed();
    assert_eq!(
        r.stderr,
        format!("streamforge: error: {path} line 2: a delivery needs an \"event\"\n  everything before line 2 was sent\n")
    );
    assert_eq!(s.get("/status").json()["partitions"]["web"]["offset"], 1);

    // An invalid checkpoint file: verify says exactly why, and so does the
    // server on restore.
    let bad = dir.path().join("bad.json");
    s.post_empty("/checkpoints");
    let mut bytes = s
        .client
        .get(s.url("/checkpoints/1"))
        .send()
        .expect("get")
        .bytes()
        .expect("bytes")
        .to_vec();
    let at = bytes
        .windows(4)
        .position(|w| w == b"\"web")
        .expect("a partition name")
        + 1;
    bytes[at] = b'x';
    std::fs::write(&bad, &bytes).expect("write");
    let bad_s = bad.to_str().expect("utf-8 path");
    let r = run(client(&["verify", bad_s]), None).failed();
    assert!(
        r.stderr.starts_with(&format!(
            "streamforge: error: {bad_s} is not a valid checkpoint: digest mismatch"
        )),
        "{r:?}"
    );
    let r = sf(&s, &["checkpoint", "restore", "--file", bad_s]).failed();
    assert!(
        r.stderr.contains("digest mismatch") && r.stderr.contains("(422 invalid_checkpoint)"),
        "{r:?}"
    );
    let r = run(client(&["verify", "/nonexistent/ckpt.json"]), None).failed();
    assert!(
        r.stderr.contains("cannot read /nonexistent/ckpt.json"),
        "{r:?}"
    );

    // No server there: said as such, and a send says nothing was sent.
    let url = closed_port_url();
    let r = run(client(&["status", "--url", &url]), None).failed();
    assert!(
        r.stderr.starts_with(&format!(
            "streamforge: error: cannot connect to {url}/status: "
        )) && r
            .stderr
            .contains("is `streamforge serve` running at that address (--url, STREAMFORGE_URL)?"),
        "{r:?}"
    );
    let r = run(client(&["send", EVENTS, "--url", &url]), None).failed();
    assert!(
        r.stderr.contains("cannot connect to") && r.stderr.contains("was not sent;"),
        "{r:?}"
    );
    assert!(!r.stderr.contains("may or may not"), "{r:?}");
}

#[test]
fn token_and_health() {
    let dir = tempdir();
    let s = start(
        &dir.path().join("db"),
        &["--pipeline", PIPELINE, "--token", "s3cret"],
    );
    let r = sf(&s, &["status"]).failed();
    assert!(
        r.stderr.contains("(401 unauthorized); give the service's token with --token or the STREAMFORGE_TOKEN environment variable"),
        "{r:?}"
    );
    sf(&s, &["status", "--token", "s3cret"]).ok();
    let mut cmd = client(&["changes"]);
    cmd.env("STREAMFORGE_URL", &s.base)
        .env("STREAMFORGE_TOKEN", "s3cret");
    run(cmd, None).ok();

    // health needs no token (Dockerfile HEALTHCHECK); 1 when nothing answers.
    assert_eq!(sf(&s, &["health"]).ok().stdout, "ok\n");
    let r = run(client(&["health", "--url", &closed_port_url()]), None).failed();
    assert!(
        r.stderr.starts_with("streamforge: error: unhealthy: "),
        "{r:?}"
    );
}

#[test]
fn docs_show_the_cli_output() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md"))
        .expect("docs/cli.md");
    assert!(
        doc.contains(EXPECTED_CHANGES),
        "docs/cli.md shows `streamforge changes` after sending the examples:\n{EXPECTED_CHANGES}"
    );
}

/// `streamforge nexmark` writes the operation format: the same flags, the
/// same bytes; consecutive offsets per partition; advances that never put
/// an event behind its partition's watermark; and `send` takes the file
/// as it is, ending with every partition (and so the global watermark) at
/// the end of the stream.
#[test]
fn nexmark_writes_an_operation_file_that_send_takes() {
    let args = [
        "nexmark", "--seed", "3", "--events", "3000", "--query", "q7",
    ];
    let a = run(client(&args), None).ok().stdout;
    assert_eq!(a, run(client(&args), None).ok().stdout, "deterministic");
    let other = run(
        client(&["nexmark", "--seed", "4", "--events", "3000"]),
        None,
    )
    .ok()
    .stdout;
    assert_ne!(a, other);
    let mut next = std::collections::BTreeMap::new();
    let mut progress = std::collections::BTreeMap::new();
    let (mut deliveries, mut last_w) = (0, 0);
    for line in a.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect(line);
        let p = v["partition"].as_str().unwrap().to_string();
        match v["op"].as_str() {
            Some("deliver") => {
                let o = next.entry(p.clone()).or_insert(0i64);
                assert_eq!(v["offset"].as_i64(), Some(*o), "{line}");
                *o += 1;
                let ts = v["event"]["timestamp"].as_i64().unwrap();
                assert!(ts >= *progress.get(&p).unwrap_or(&i64::MIN), "{line}");
                deliveries += 1;
            }
            Some("advance") => {
                last_w = v["watermark"].as_i64().unwrap();
                progress.insert(p, last_w);
            }
            _ => panic!("{line}"),
        }
    }
    // q7: every bid twice (under its auction and under "*"); 46 bids in 50
    assert_eq!(deliveries, 2 * 3000 * 46 / 50);
    assert_eq!(next.len(), 4);
    let dir = tempdir();
    let pipeline = concat!(env!("CARGO_MANIFEST_DIR"), "/pipelines/q7.json");
    let s = start(&dir.path().join("db"), &["--pipeline", pipeline]);
    let mut cmd = client(&["send", "-"]);
    cmd.env("STREAMFORGE_URL", &s.base);
    let r = run(cmd, Some(&a)).ok();
    assert!(
        r.stdout
            .starts_with(&format!("sent stdin: {deliveries} deliveries")),
        "{r:?}"
    );
    let status = s.get("/status").json();
    assert_eq!(status["watermark"], last_w);
    assert_eq!(status["late"], 0);
    // append mode: the same lines without offsets
    let b = run(client(&[&args[..], &["--append"]].concat()), None)
        .ok()
        .stdout;
    assert!(!b.contains("\"offset\""));
    assert_eq!(b.lines().count(), a.lines().count());
}

/// A file over four partitions whose advances all come after every
/// delivery (so no interleaving of the partitions makes an event late):
/// `--lanes 4` ends with exactly the state of the default in-order send,
/// and says the same counts. A rejected batch on one partition fails the
/// run with that partition and the file line named.
#[test]
fn send_lanes_send_partitions_side_by_side_with_the_same_result() {
    let dir = tempdir();
    let pipeline = dir.path().join("p.json");
    std::fs::write(
        &pipeline,
        r#"{"partitions":["p0","p1","p2","p3"],"windows":{"f":{"kind":"fixed","size":1000},"s":{"kind":"sliding","size":2000,"step":500},"g":{"kind":"session","gap":300}},"lateness":0}"#,
    )
    .unwrap();
    let mut file = String::new();
    let mut x = 12345u64;
    for i in 0..2400u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let p = x % 4;
        file += &format!(
            "{{\"op\":\"deliver\",\"partition\":\"p{p}\",\"event\":{{\"id\":\"e{i}\",\"key\":\"k{}\",\"timestamp\":{},\"value\":{}}}}}\n",
            (x >> 8) % 7,
            i * 10 + (x >> 16) % 300,
            (x >> 24) % 100
        );
    }
    for p in 0..4 {
        file += &format!("{{\"op\":\"advance\",\"partition\":\"p{p}\",\"watermark\":20000}}\n");
    }
    let path = dir.path().join("ops.ndjson");
    std::fs::write(&path, &file).unwrap();
    let path = path.to_str().unwrap();
    let mut outs = Vec::new();
    for lanes in ["1", "4"] {
        let s = start(
            &dir.path().join(format!("db{lanes}")),
            &["--pipeline", pipeline.to_str().unwrap()],
        );
        let r = sf(&s, &["send", path, "--batch", "100", "--lanes", lanes]).ok();
        // the counts but the batches (lanes cut batches per partition)
        let counts = r.stdout.split("; ").take(2).collect::<Vec<_>>().join("; ");
        let counts = match (counts.find(" in "), counts.find(" batches")) {
            (Some(a), Some(b)) => format!("{}{}", &counts[..a], &counts[b + 8..]),
            _ => counts,
        };
        outs.push((
            counts,
            sf(&s, &["results"]).ok().stdout,
            sf(&s, &["changes"]).ok().stdout,
            s.get("/status").json()["partitions"].clone(),
        ));
    }
    assert!(outs[0].0.contains("2400 deliveries"), "{:?}", outs[0].0);
    assert!(outs[0].1.lines().count() > 5, "{}", outs[0].1);
    assert!(outs[0].2.lines().count() > 100, "{}", outs[0].2);
    assert_eq!(outs[0].0, outs[1].0, "counts");
    assert!(outs[0].1 == outs[1].1, "results differ");
    assert!(outs[0].2 == outs[1].2, "changelogs differ");
    assert_eq!(outs[0].3, outs[1].3, "offsets and progress");

    // p2's third delivery re-sends offset 0 with another event: refused
    let bad = "\
{\"op\":\"deliver\",\"partition\":\"p1\",\"offset\":0,\"event\":{\"id\":\"a\",\"key\":\"k\",\"timestamp\":1,\"value\":1}}
{\"op\":\"deliver\",\"partition\":\"p2\",\"offset\":0,\"event\":{\"id\":\"b\",\"key\":\"k\",\"timestamp\":1,\"value\":1}}
{\"op\":\"deliver\",\"partition\":\"p2\",\"offset\":1,\"event\":{\"id\":\"c\",\"key\":\"k\",\"timestamp\":2,\"value\":1}}
{\"op\":\"deliver\",\"partition\":\"p2\",\"offset\":0,\"event\":{\"id\":\"d\",\"key\":\"k\",\"timestamp\":3,\"value\":1}}
";
    let s = start(
        &dir.path().join("db-bad"),
        &["--pipeline", pipeline.to_str().unwrap()],
    );
    let bad_path = dir.path().join("bad.ndjson");
    std::fs::write(&bad_path, bad).unwrap();
    let r = sf(&s, &["send", bad_path.to_str().unwrap(), "--lanes", "4"]).failed();
    assert!(r.stderr.contains("partition p2"), "{}", r.stderr);
    assert!(r.stderr.contains("line 4"), "{}", r.stderr);
    assert!(
        r.stderr.contains("of this partition before line"),
        "{}",
        r.stderr
    );
}

/// `changes --follow --also URL` follows two instances at once, each with
/// its own cursor: every change of both arrives once, named by its instance
/// (as text and as JSON); `--also` without `--follow` is refused.
#[test]
fn follow_also_merges_the_streams_of_several_instances() {
    let dir = tempdir();
    let a = start(&dir.path().join("a.db"), &["--pipeline", PIPELINE]);
    let b = start(&dir.path().join("b.db"), &["--pipeline", PIPELINE]);
    let text = Follower::start(&a, &["changes", "--follow", "--also", &b.base]);
    let json = Follower::start(&a, &["changes", "--follow", "--json", "--also", &b.base]);
    let deliver = |s: &Server, key: &str, ts: i64, v: i64| {
        s.ok(
            "/events",
            &format!(r#"{{"partition":"web","event":{{"id":"{key}{ts}","key":"{key}","timestamp":{ts},"value":{v}}}}}"#),
        );
    };
    deliver(&a, "alice", 1_000, 5);
    deliver(&b, "bob", 2_000, 7);
    for s in [&a, &b] {
        s.ok("/watermarks", r#"{"partition":"web","watermark":400000}"#);
        s.ok(
            "/watermarks",
            r#"{"partition":"mobile","watermark":400000}"#,
        );
    }
    let want_a = sf(&a, &["changes"]).ok().stdout;
    let want_b = sf(&b, &["changes"]).ok().stdout;
    let (na, nb) = (want_a.lines().count(), want_b.lines().count());
    assert!(na > 0 && nb > 0);
    let mut got: Vec<String> = text.take(na + nb).lines().map(str::to_string).collect();
    got.sort();
    let mut want: Vec<String> = want_a
        .lines()
        .map(|l| format!("{}  {l}", a.base))
        .chain(want_b.lines().map(|l| format!("{}  {l}", b.base)))
        .collect();
    want.sort();
    assert_eq!(got, want);
    // JSON: the API's change object with the instance first
    let mut seen = std::collections::BTreeMap::new();
    for line in json.take(na + nb).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        assert!(line.starts_with("{\"instance\":"), "{line}");
        assert!(
            v["seq"].as_u64().is_some() && v["result"].is_object(),
            "{line}"
        );
        *seen
            .entry(v["instance"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    assert_eq!(seen[&a.base], na);
    assert_eq!(seen[&b.base], nb);
    let refused = sf(&a, &["changes", "--also", &b.base]).failed();
    assert!(
        refused.stderr.contains("--also needs --follow"),
        "{refused:?}"
    );
}

/// `late --follow` marks a restore that rewinds the late output on stdout
/// too, in its place (plain: a `# rewind` line; `--json`: a `rewind`
/// object), as `changes --follow` does.
#[test]
fn late_follow_marks_a_rewind_on_stdout() {
    let dir = tempdir();
    let s = example_server(dir.path());
    let r = s.post_empty("/checkpoints");
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_u64().unwrap();
    let plain = Follower::start(&s, &["late", "--follow"]);
    let json = Follower::start(&s, &["late", "--follow", "--json"]);
    sf(&s, &["send", EVENTS]).ok();
    let late = "1 v7 alice timestamp=40000 value=3 watermark=120000\n";
    assert_eq!(plain.take(1), late);
    let first = json.take(1);
    assert!(first.contains("\"seq\":1"), "{first}");
    let r = s.post_empty(&format!("/checkpoints/{id}/restore"));
    assert_eq!(r.status, 200, "{}", r.body);
    plain.rewound(1, 0);
    assert_eq!(json.take(1), "{\"rewind\":{\"epoch\":1,\"after\":0}}\n");
    // the late record again, in the new epoch
    sf(&s, &["send", EVENTS]).ok();
    assert_eq!(plain.take(1), late);
}
