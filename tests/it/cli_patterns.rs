//! `streamforge patterns ...` end to end: the real binary as server and as
//! client, on `examples/payments.patterns.json` and `examples/payments.ndjson`.

use crate::support::server;

use std::path::Path;

use server::client::{client, closed_port_url, run, sf, Follower, Run};
use server::{start, tempdir, try_start, Server};

const DOC: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/payments.patterns.json"
);
const EVENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/payments.ndjson");

/// What `streamforge patterns output` prints after `patterns send
/// examples/payments.ndjson`, derived from docs/patterns.md by hand.
///
/// Ordinals in push order: 1 a1 alice login ok@1000, 2 a2 pay 20@2000,
/// 3 a3 pay 15@3000, 4 c1 carol add_to_cart@2500, 5 a4 pay 18@4000, 6 d1 dave
/// add_to_cart@3500; (advance 5000) 7 b1 bob login ok@6000, 8 b2 browse@6500,
/// 9 d2 dave checkout@9000, 10 b3 bob pay 50@7000, 11-13 e1-e3 erin login
/// failed@10000-12000, 14 c2 carol browse@12500, 15 e4 failed@13000, 16 e5
/// erin login ok@14000, 17 b4 browse@15000; (advance 20000) 18 g1 gina
/// add_to_cart@21000, 19 b5 bob pay 45@25000, 20 c3 browse@26000, 21 g2 gina
/// checkout@51000; (advance 40000) 22 b6 browse@41000; finish.
///
/// 1. rising_payments (skip_past_last), alice: after pay 20 the branches
///    wait to repeat `pay` [1/2] and for `bigger_pay` [1/2/]; pay 15 is not
///    bigger than 20 ([1/2/] keeps waiting, skip_next) but is a second `pay`
///    ([1/2.3], [1/2.3/]); pay 18 is bigger than the last `pay` capture of
///    [1/2.3/] (15), not of [1/2/] (20): match 1/2.3/5 at 4000. skip_past_last
///    removes every other branch of alice (they start at #1).
/// 2. failed_logins (three failures with skip_any, then a success;
///    skip_to_next_start): at e5 four assignments complete, 11.12.13,
///    11.12.15, 11.13.15 and 12.13.15 (then /16); sorted, 11.12.13 is
///    selected and removes the others starting at #11; 12.13.15 follows.
/// 3. abandoned_cart: dave's checkout cancels his wait; carol's wait expires
///    at its deadline 32500 (advance 40000): an absence match whose end is
///    the deadline. gina's checkout at 51000, exactly her deadline, is still
///    observed and cancels hers (finish).
/// 4. finish: bob's login and pay 50 never saw a bigger pay (45 < 50): his
///    branches [7/10] and [7/10.19] time out at 66000, one timeout per
///    assignment, fewer captures first; erin's failure branches not removed
///    by the skip ([13], [13.15] at 72000, [15] at 73000) and her successful
///    login's rising_payments branch (74000, nothing paid) time out.
const EXPECTED_OUTPUT: &str = "\
1 match rising_payments alice [1000..4000] login=#1 pay=#2,#3 bigger_pay=#5
2 match failed_logins erin [10000..14000] failures=#11,#12,#13 success=#16
3 match failed_logins erin [11000..14000] failures=#12,#13,#15 success=#16
4 match abandoned_cart carol [2500..32500] cart=#4
5 timeout rising_payments bob [6000..66000] login=#7 pay=#10 bigger_pay=-
6 timeout rising_payments bob [6000..66000] login=#7 pay=#10,#19 bigger_pay=-
7 timeout failed_logins erin [12000..72000] failures=#13 success=-
8 timeout failed_logins erin [12000..72000] failures=#13,#15 success=-
9 timeout failed_logins erin [13000..73000] failures=#15 success=-
10 timeout rising_payments erin [14000..74000] login=#16 pay=- bigger_pay=-
";

/// `patterns check examples/payments.patterns.json`.
const EXPECTED_CHECK: &str = "\
examples/payments.patterns.json: valid, 3 patterns
pattern abandoned_cart: within 30000, skip no_skip, absence yes
  stage  min  max  contiguity  forbidden
  cart   1    1    skip_next   no
pattern failed_logins: within 60000, skip skip_to_next_start, absence no
  stage     min  max  contiguity  forbidden
  failures  3    3    skip_any    no
  success   1    1    skip_any    no
pattern rising_payments: within 60000, skip skip_past_last, absence no
  stage       min  max  contiguity  forbidden
  login       1    1    skip_next   no
  pay         1    3    skip_next   no
  bigger_pay  1    1    skip_next   no
limits: max_results_per_advance 1000, active_states 1000
";

/// The status after the file's first part (up to `advance 20000`): carol's
/// cart wait; erin's failure branches [13], [13.15], [15]; bob's [7/10]
/// waiting for a pay or a bigger one (two branches) and erin's [16].
const STATUS_AT_20000: &str = "\
watermark     20000
buffered      0
next ordinal  18
sequence      3
epoch         EPOCH

pattern          keys  branches  waits
abandoned_cart   1     0         1
failed_logins    1     3         0
rising_payments  2     3         0
";

fn example_server(dir: &Path) -> Server {
    start(&dir.join("db"), &["--patterns", DOC])
}

/// The example file's lines `from..=to` (1-based), as one text.
fn lines(from: usize, to: usize) -> String {
    let text = std::fs::read_to_string(EVENTS).expect("events");
    text.lines()
        .skip(from - 1)
        .take(to + 1 - from)
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `patterns send -` with `input` on stdin.
fn send_stdin(s: &Server, input: &str, extra: &[&str]) -> Run {
    let mut cmd = client(&[&["patterns", "send", "-"], extra].concat());
    cmd.env("STREAMFORGE_URL", &s.base);
    run(cmd, Some(input))
}

/// The lines `from..=to` (1-based) of `EXPECTED_OUTPUT`.
fn expected(from: usize, to: usize) -> String {
    EXPECTED_OUTPUT
        .lines()
        .skip(from - 1)
        .take(to + 1 - from)
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn send_the_example_and_read_the_output() {
    let dir = tempdir();
    let s = example_server(dir.path());
    let sent = sf(&s, &["patterns", "send", EVENTS]).ok();
    assert!(
        sent.stdout.starts_with(&format!(
            "sent {EVENTS}: 22 events in 4 batches, 3 advances, 1 finish; \
             10 records (4 matches, 6 timeouts); "
        )),
        "{sent:?}"
    );
    assert!(sent.stdout.ends_with(" events/s\n"), "{sent:?}");
    assert_eq!(sent.stdout.lines().count(), 1, "{sent:?}");
    // stderr is not a terminal here: no progress bar.
    assert_eq!(sent.stderr, "", "{sent:?}");

    assert_eq!(sf(&s, &["patterns", "output"]).ok().stdout, EXPECTED_OUTPUT);
    // Small pages and --after give the same lines.
    assert_eq!(
        sf(&s, &["patterns", "output", "--after", "7", "--limit", "2"])
            .ok()
            .stdout,
        expected(8, 10)
    );
    // --json: the server's records, one per line, as the page holds them.
    #[derive(serde::Deserialize)]
    struct Page {
        output: Vec<Box<serde_json::value::RawValue>>,
    }
    let page: Page = serde_json::from_str(&s.get("/patterns/output?after=0").body).expect("a page");
    let want: String = page
        .output
        .iter()
        .map(|r| format!("{}\n", r.get()))
        .collect();
    assert_eq!(sf(&s, &["patterns", "output", "--json"]).ok().stdout, want);
    assert_eq!(
        sf(&s, &["patterns", "status"]).ok().stdout,
        "\
watermark     9007230790740991
buffered      0
next ordinal  23
sequence      10
epoch         0

pattern          keys  branches  waits
abandoned_cart   0     0         0
failed_logins    0     0         0
rising_payments  0     0         0
"
    );
    assert_eq!(
        sf(&s, &["patterns", "status", "--json"])
            .ok()
            .stdout
            .trim_end(),
        s.get("/patterns/status").body
    );
    // A second finish outputs nothing.
    assert_eq!(
        sf(&s, &["patterns", "finish"]).ok().stdout,
        "# watermark 9007230790740991, 0 records, processed 0\n"
    );

    // show: the document in force, indented; --json: as served.
    let served = s.get("/patterns").body;
    assert_eq!(
        sf(&s, &["patterns", "show", "--json"]).ok().stdout,
        format!("{served}\n")
    );
    let shown = sf(&s, &["patterns", "show"]).ok().stdout;
    assert!(
        shown.starts_with(
            "{\n  \"patterns\": [\n    {\n      \"name\": \"abandoned_cart\",\n      \"within\": 30000,\n"
        ),
        "{shown}"
    );
    assert!(shown.contains("\n          \"where\": {\"kind\": \"add_to_cart\"}\n"));
    assert!(shown.ends_with(
        "\n  \"limits\": {\"max_results_per_advance\": 1000, \"active_states\": 1000}\n}\n"
    ));
    assert!(shown.lines().all(|l| l.len() <= 80), "{shown}");
    assert_eq!(minify(&shown), served, "only whitespace was added");
}

/// The JSON text without the whitespace outside strings.
fn minify(json: &str) -> String {
    let mut out = String::new();
    let (mut in_str, mut escaped) = (false, false);
    for c in json.chars() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

#[test]
fn follow_checkpoint_verify_restore() {
    let dir = tempdir();
    let s = example_server(dir.path());
    // Started before anything is sent: it prints records as they come.
    let follower = Follower::start(&s, &["patterns", "output", "--follow"]);

    // The file up to `advance 20000` (line 19), in batches of 5.
    let first = send_stdin(&s, &lines(1, 19), &["--batch", "5"]).ok();
    assert!(
        first.stdout.starts_with(
            "sent stdin: 17 events in 5 batches, 2 advances, 0 finishes; \
             3 records (3 matches, 0 timeouts); "
        ),
        "{first:?}"
    );
    assert_eq!(follower.take(3), expected(1, 3));
    let status = STATUS_AT_20000.replace("EPOCH", "0");
    assert_eq!(sf(&s, &["patterns", "status"]).ok().stdout, status);

    // Checkpoint, download, verify offline.
    let created = sf(&s, &["patterns", "checkpoint", "create"]).ok().stdout;
    let fields: Vec<&str> = created.split_whitespace().collect();
    assert_eq!(
        fields[..4],
        ["checkpoint", "1:", "sequence", "3,"],
        "{created}"
    );
    let sha = fields[fields.len() - 1];
    let file = dir.path().join("patterns.ckpt");
    let file_s = file.to_str().expect("utf-8 path");
    let got = sf(&s, &["patterns", "checkpoint", "get", "1", "-o", file_s]).ok();
    let bytes = std::fs::read(&file).expect("checkpoint file");
    assert_eq!(
        got.stdout,
        format!("wrote checkpoint 1 to {file_s} ({} bytes)\n", bytes.len())
    );
    // A pattern checkpoint's digest is its envelope's `sha256` field.
    assert!(
        bytes.starts_with(
            format!(r#"{{"format":"streamforge-patterns-checkpoint","sha256":"{sha}","#).as_bytes()
        ),
        "the digest is the file's own"
    );
    assert_eq!(
        sf(&s, &["patterns", "checkpoint", "get", "1"])
            .ok()
            .stdout
            .as_bytes(),
        &bytes[..]
    );
    // The window engine's checkpoints are another list.
    let r = sf(&s, &["checkpoint", "get", "1"]).failed();
    assert!(r.stderr.contains("(404 not_found)"), "{r:?}");
    let list = sf(&s, &["patterns", "checkpoint", "list"]).ok().stdout;
    let rows: Vec<Vec<&str>> = list
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["id", "sequence", "bytes", "created_at", "digest"]);
    assert_eq!(rows.len(), 2, "{list}");
    assert_eq!(rows[1][..3], ["1", "3", &bytes.len().to_string()]);
    assert_eq!(rows[1][4], sha);

    let verified = run(
        client(&["patterns", "verify", file_s, "--patterns", DOC]),
        None,
    )
    .ok();
    assert_eq!(
        verified.stdout,
        format!(
            "\
valid pattern checkpoint {file_s} ({} bytes, digest {sha})
patterns: abandoned_cart, failed_logins, rising_payments (--patterns {DOC})
watermark: 20000
buffered: 0
next ordinal: 18
sequence: 3
  pattern          keys  branches  waits
  abandoned_cart   1     0         1
  failed_logins    1     3         0
  rising_payments  2     3         0
",
            bytes.len()
        )
    );

    // Past the checkpoint: the rest of the file but its finish, then
    // advance 40000 by hand: carol's absence match at her deadline.
    let rest = send_stdin(&s, &lines(20, 23), &[]).ok();
    assert!(
        rest.stdout
            .starts_with("sent stdin: 4 events in 1 batch, 0 advances, 0 finishes; 0 records (0 matches, 0 timeouts); "),
        "{rest:?}"
    );
    assert_eq!(
        sf(&s, &["patterns", "advance", "40000"]).ok().stdout,
        "4 match abandoned_cart carol [2500..32500] cart=#4\n# watermark 40000, 1 record, processed 3\n"
    );
    assert_eq!(follower.take(1), expected(4, 4));

    // Restore by id: back to sequence 3; the follower is told.
    assert_eq!(
        sf(&s, &["patterns", "checkpoint", "restore", "1"])
            .ok()
            .stdout,
        "restored: sequence 3, watermark 20000\n"
    );
    follower.rewound(1, 3);
    assert_eq!(sf(&s, &["patterns", "output"]).ok().stdout, expected(1, 3));
    assert_eq!(
        sf(&s, &["patterns", "status"]).ok().stdout,
        STATUS_AT_20000.replace("EPOCH", "1")
    );

    // The rest again, with its finish: the uninterrupted run's output, which
    // the follower prints from 4 on.
    send_stdin(&s, &lines(20, 26), &[]).ok();
    assert_eq!(sf(&s, &["patterns", "output"]).ok().stdout, EXPECTED_OUTPUT);
    assert_eq!(follower.take(7), expected(4, 10));

    // Restore from the file too; --json prints the server's answer.
    assert_eq!(
        sf(
            &s,
            &[
                "patterns",
                "checkpoint",
                "restore",
                "--file",
                file_s,
                "--json"
            ]
        )
        .ok()
        .stdout,
        "{\"sequence\":3,\"watermark\":20000}\n"
    );
    follower.rewound(2, 3);
    assert_eq!(
        sf(&s, &["patterns", "status", "--json"])
            .ok()
            .stdout
            .trim_end(),
        s.get("/patterns/status").body
    );
    assert_eq!(s.get("/patterns/status").json()["epoch"], 2);

    // Delete: gone from the list, and a second delete is a 404.
    assert_eq!(
        sf(&s, &["patterns", "checkpoint", "delete", "1"])
            .ok()
            .stdout,
        "deleted checkpoint 1\n"
    );
    assert_eq!(
        sf(&s, &["patterns", "checkpoint", "list"]).ok().stdout,
        "id  sequence  bytes  created_at  digest\n"
    );
    let r = sf(&s, &["patterns", "checkpoint", "delete", "1"]).failed();
    assert!(r.stderr.contains("(404 not_found)"), "{r:?}");
    let r = sf(&s, &["patterns", "checkpoint", "restore", "1"]).failed();
    assert!(r.stderr.contains("(404 not_found)"), "{r:?}");

    // Offline verification needs the checkpoint's own patterns: against the
    // embedded demo document it is refused, saying why.
    let r = run(client(&["patterns", "verify", file_s]), None).failed();
    assert!(
        r.stderr.starts_with(&format!(
            "streamforge: error: {file_s} is not a valid pattern checkpoint for these patterns \
             (the embedded demo document; --patterns DOC for another): state.patterns: "
        )),
        "{r:?}"
    );
    // A corrupted checkpoint: verify says exactly why, and so does the
    // server on restore.
    let mut bad = bytes.clone();
    let at = bad
        .windows(6)
        .position(|w| w == b"\"erin\"")
        .expect("a key")
        + 1;
    bad[at] = b'A';
    let bad_file = dir.path().join("bad.ckpt");
    std::fs::write(&bad_file, &bad).expect("write");
    let bad_s = bad_file.to_str().expect("utf-8 path");
    let r = run(
        client(&["patterns", "verify", bad_s, "--patterns", DOC]),
        None,
    )
    .failed();
    assert!(
        r.stderr.starts_with(&format!(
            "streamforge: error: {bad_s} is not a valid pattern checkpoint for these patterns \
             (--patterns {DOC}): "
        )) && r.stderr.contains("checksum"),
        "{r:?}"
    );
    assert_eq!(r.stdout, "");
    let r = sf(&s, &["patterns", "checkpoint", "restore", "--file", bad_s]).failed();
    assert!(
        r.stderr.contains("checksum") && r.stderr.contains("(422 invalid_checkpoint)"),
        "{r:?}"
    );
    let r = run(
        client(&[
            "patterns",
            "verify",
            "/nonexistent/p.ckpt",
            "--patterns",
            DOC,
        ]),
        None,
    )
    .failed();
    assert!(
        r.stderr.contains("cannot read /nonexistent/p.ckpt"),
        "{r:?}"
    );
}

#[test]
fn advance_and_finish_print_the_records() {
    let dir = tempdir();
    let s = example_server(dir.path());
    // The `"op":"push"` form, a bare event, and blank lines.
    let input = format!(
        "{{\"op\":\"push\",\"event\":{}}}\n\n{}",
        lines(1, 1).trim_end(),
        lines(2, 6)
    );
    let r = send_stdin(&s, &input, &["--batch", "2"]).ok();
    assert!(
        r.stdout.starts_with(
            "sent stdin: 6 events in 3 batches, 0 advances, 0 finishes; 0 records (0 matches, 0 timeouts); "
        ),
        "{r:?}"
    );
    assert_eq!(
        sf(&s, &["patterns", "advance", "5000"]).ok().stdout,
        format!(
            "{}# watermark 5000, 1 record, processed 6\n",
            expected(1, 1)
        )
    );
    // The same watermark again: nothing.
    assert_eq!(
        sf(&s, &["patterns", "advance", "5000", "--json"])
            .ok()
            .stdout,
        "{\"output\":[],\"watermark\":5000,\"processed\":0}\n"
    );
    // finish: carol's and dave's carts (no checkout was sent) at their
    // deadlines.
    assert_eq!(
        sf(&s, &["patterns", "finish"]).ok().stdout,
        "\
2 match abandoned_cart carol [2500..32500] cart=#4
3 match abandoned_cart dave [3500..33500] cart=#6
# watermark 9007230790740991, 2 records, processed 0
"
    );
    let json = sf(&s, &["patterns", "finish", "--json"]).ok().stdout;
    assert_eq!(
        json,
        "{\"output\":[],\"watermark\":9007230790740991,\"processed\":0}\n"
    );
}

#[test]
fn check_warns_of_conditions_that_can_never_be_true() {
    let dir = tempdir();
    let file = dir.path().join("never.json");
    std::fs::write(
        &file,
        r#"{"patterns": [
          {"name": "zeta", "within": 100, "stages": [{"name": "a", "where": {"kind": "a"}}]},
          {"name": "spend", "within": 1000, "stages": [
            {"name": "login", "where": {"all": [{"kind": "login"},
                {"field": "ok", "op": "ge", "value": true}]}},
            {"name": "big", "where": {"all": [{"kind": "pay"},
                {"field": "amount", "op": "gt", "value": 100},
                {"field": "amount", "op": "lt", "value": 200.5}]}}]}]}"#,
    )
    .expect("write");
    let file_s = file.to_str().expect("utf-8 path");
    // valid (exit 0, the usual summary); the warnings on stderr, each with
    // its path (the index the pattern has in the file)
    let r = run(client(&["patterns", "check", file_s]), None).ok();
    assert!(
        r.stdout
            .starts_with(&format!("{file_s}: valid, 2 patterns\n")),
        "{r:?}"
    );
    let warnings: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(warnings.len(), 2, "{r:?}");
    assert_eq!(
        warnings[0],
        format!(
            r#"streamforge: warning: {file_s}: patterns[1].stages[0].where.all[1]: "ge" against the Bool true is never true: a Bool supports only eq and ne (every other operator compares false); write {{"field":"ok","op":"eq","value":true}} (or "ne")"#
        )
    );
    assert!(
        warnings[1].starts_with(&format!(
            r#"streamforge: warning: {file_s}: patterns[1].stages[1].where: this "all" is never true: it compares field "amount" with an Integer (all[1]) and a Double (all[2])"#
        )),
        "{r:?}"
    );
    // the example documents have none
    for doc in [
        DOC,
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/pipelines/default.patterns.json"
        ),
    ] {
        let r = run(client(&["patterns", "check", doc]), None).ok();
        assert_eq!(r.stderr, "", "{doc}");
    }
}

#[test]
fn check_documents_offline() {
    let r = run(client(&["patterns", "check", DOC]), None).ok();
    assert_eq!(
        r.stdout,
        EXPECTED_CHECK.replace("examples/payments.patterns.json", DOC)
    );
    // Standard input, and the embedded demo document's file.
    let doc = std::fs::read_to_string(DOC).expect("document");
    let r = run(client(&["patterns", "check", "-"]), Some(&doc)).ok();
    assert!(r.stdout.starts_with("stdin: valid, 3 patterns\n"), "{r:?}");
    let demo = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/pipelines/default.patterns.json"
    );
    run(client(&["patterns", "check", demo]), None).ok();

    // Invalid: the message names the JSON path, as the server's does.
    let dir = tempdir();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"patterns": [{"name": "p", "within": 1000, "stages": [
            {"name": "login", "where": {"kind": "login"}},
            {"name": "x", "where": {"kind": "x"}},
            {"name": "big", "where": {"all": [{"kind": "pay"},
                {"field": "amount", "op": "gt", "capture": "pay", "capture_field": "amount"}]}},
            {"name": "pay", "where": {"kind": "pay"}}]}]}"#,
    )
    .expect("write");
    let bad_s = bad.to_str().expect("utf-8 path");
    let message = "patterns[0].stages[2].where.all[1]: capture \"pay\" is not an earlier stage";
    let r = run(client(&["patterns", "check", bad_s]), None).failed();
    assert_eq!(r.stdout, "");
    assert_eq!(
        r.stderr,
        format!("streamforge: error: {bad_s} is not a valid patterns document: {message}\n")
    );
    let refused = try_start(&dir.path().join("db"), &["--patterns", bad_s])
        .err()
        .expect("serve refuses the document");
    assert!(refused.contains(message), "{refused}");

    for (doc, message) in [
        (
            r#"{"patterns": [{"name": "p", "within": 10, "stages": [{"name": "a", "min": 2, "where": {"kind": "a"}}]}]}"#,
            "patterns[0].stages[0]: min 2 is greater than max 1",
        ),
        (
            r#"{"patterns": [{"name": "p", "within": 10, "stages": [{"name": "a", "where": {"any": [{"kind": "a"}, {"not": {"kind": ""}}]}}]}]}"#,
            "patterns[0].stages[0].where.any[1].not.kind: must be a non-empty string",
        ),
        (
            r#"{"patterns": [{"name": "p", "within": 10, "stages": [{"name": "a", "where": {"kind": "a"}}]}], "limits": {"active_states": 0}}"#,
            "limits.active_states: 0 is outside 1..=1000000",
        ),
    ] {
        let r = run(client(&["patterns", "check", "-"]), Some(doc)).failed();
        assert_eq!(
            r.stderr,
            format!("streamforge: error: stdin is not a valid patterns document: {message}\n")
        );
    }
    let r = run(
        client(&["patterns", "check", "-"]),
        Some("{\"patterns\": ["),
    )
    .failed();
    assert!(
        r.stderr
            .starts_with("streamforge: error: stdin is not a valid patterns document: "),
        "{r:?}"
    );
    let r = run(
        client(&["patterns", "check", "/nonexistent/doc.json"]),
        None,
    )
    .failed();
    assert!(
        r.stderr.contains("cannot read /nonexistent/doc.json"),
        "{r:?}"
    );
}

#[test]
fn errors_name_the_line_and_the_detail() {
    let dir = tempdir();
    let f = example_server(dir.path());
    sf(&f, &["patterns", "advance", "5000"]).ok();

    // A late event: the batch is refused whole, and the error names the file
    // line of the failing event and says where to send from again. Batches
    // of 2: lines 1-2 are sent, line 3 (late) is refused.
    let file = dir.path().join("late.ndjson");
    std::fs::write(
        &file,
        "{\"id\":\"a\",\"key\":\"k\",\"kind\":\"login\",\"time\":6000}\n\
         {\"id\":\"b\",\"key\":\"k\",\"kind\":\"pay\",\"time\":7000}\n\
         {\"id\":\"c\",\"key\":\"k\",\"kind\":\"pay\",\"time\":5000}\n",
    )
    .expect("write");
    let path = file.to_str().expect("utf-8 path");
    let detail = f.post(
        "/patterns/events",
        r#"{"id":"c","key":"k","kind":"pay","time":5000}"#,
    );
    let detail = detail.problem(409, "late_event")["detail"]
        .as_str()
        .expect("detail")
        .to_string();
    assert_eq!(detail, "event time 5000 is not after the watermark 5000");
    let r = sf(&f, &["patterns", "send", path, "--batch", "2"]).failed();
    assert_eq!(r.stdout, "");
    assert_eq!(
        r.stderr,
        format!(
            "streamforge: error: line 3: {detail} (409 late_event) at batch index 0\n  \
             the event of line 3 was not applied; everything before line 3 was; fix the cause \
             and send the file again with --from-line 3 (with keys, a batch or advance already \
             applied is not applied twice)\n"
        )
    );
    // Lines 1 and 2 were sent (one batch), line 3 was not.
    assert_eq!(f.get("/patterns/status").json()["buffered"], 2);
    // In one batch: nothing of it is applied.
    let r = sf(&f, &["patterns", "send", path]).failed();
    assert!(
        r.stderr.starts_with(&format!(
            "streamforge: error: line 3: {detail} (409 late_event) at batch index 2\n  \
             the batch of lines 1-3 was not applied; everything before line 1 was; \
             fix the cause and send the file again with --from-line 1"
        )),
        "{r:?}"
    );
    assert_eq!(f.get("/patterns/status").json()["buffered"], 2);

    // A watermark regression names the advance's line.
    let r = send_stdin(
        &f,
        "{\"op\":\"advance\",\"watermark\":10000}\n{\"op\":\"advance\",\"watermark\":9000}\n",
        &[],
    )
    .failed();
    assert_eq!(
        r.stderr,
        "streamforge: error: line 2 (advance): watermark 9000 is below the current watermark \
         10000 (409 watermark_regression)\n"
    );
    let r = sf(&f, &["patterns", "advance", "4"]).failed();
    assert_eq!(
        r.stderr,
        "streamforge: error: watermark 4 is below the current watermark 10000 \
         (409 watermark_regression)\n"
    );

    // A line that is no operation stops the run before it; a bad event
    // names its field, as the server would.
    let r = send_stdin(
        &f,
        "{\"id\":\"d\",\"key\":\"k\",\"kind\":\"pay\",\"time\":11000}\n{\"op\":\"rewind\"}\n",
        &[],
    )
    .failed();
    assert_eq!(
        r.stderr,
        "streamforge: error: stdin line 2: unknown op \"rewind\" (push, advance or finish; or a bare event)\n  \
         everything before line 2 was sent\n"
    );
    assert_eq!(f.get("/patterns/status").json()["buffered"], 1);
    let r = send_stdin(
        &f,
        "{\"id\":\"e\",\"key\":\"k\",\"kind\":\"pay\",\"time\":12000,\"fields\":{\"a\":9223372036854775808}}\n",
        &[],
    )
    .failed();
    assert_eq!(
        r.stderr,
        "streamforge: error: stdin line 1: fields.a: integer 9223372036854775808 is outside the \
         64-bit signed range\n  everything before line 1 was sent\n"
    );

    // The window engine's checkpoints can be deleted too.
    let created = sf(&f, &["checkpoint", "create"]).ok().stdout;
    let id = created
        .strip_prefix("checkpoint ")
        .and_then(|r| r.split(':').next())
        .expect("an id")
        .to_string();
    assert_eq!(
        sf(&f, &["checkpoint", "delete", &id]).ok().stdout,
        format!("deleted checkpoint {id}\n")
    );
    assert_eq!(
        sf(&f, &["checkpoint", "list"]).ok().stdout,
        "id  sequence  bytes  created_at  digest\n"
    );
    let r = sf(&f, &["checkpoint", "delete", &id]).failed();
    assert!(r.stderr.contains("(404 not_found)"), "{r:?}");

    // No server there.
    let url = closed_port_url();
    let r = run(client(&["patterns", "send", EVENTS, "--url", &url]), None).failed();
    assert!(
        r.stderr.contains("cannot connect to") && r.stderr.contains("was not sent;"),
        "{r:?}"
    );
}

#[test]
fn token_required() {
    let dir = tempdir();
    let s = start(
        &dir.path().join("db"),
        &["--patterns", DOC, "--token", "s3cret"],
    );
    let hint = "(401 unauthorized); give the service's token with --token or the \
                STREAMFORGE_TOKEN environment variable";
    for args in [
        &["patterns", "status"][..],
        &["patterns", "output"],
        &["patterns", "output", "--follow"],
        &["patterns", "advance", "1"],
        &["patterns", "send", EVENTS],
        &["patterns", "checkpoint", "list"],
    ] {
        let r = sf(&s, args).failed();
        assert!(r.stderr.contains(hint), "{args:?}: {r:?}");
    }
    let r = sf(&s, &["patterns", "send", EVENTS]).failed();
    assert!(
        r.stderr
            .contains("\n  the batch of lines 1-6 was not applied; everything before line 1 was;"),
        "{r:?}"
    );
    assert_eq!(
        sf(&s, &["patterns", "advance", "1", "--token", "s3cret"])
            .ok()
            .stdout,
        "# watermark 1, 0 records, processed 0\n"
    );
}

#[test]
fn docs_show_the_pattern_output() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/tutorial.md"))
        .expect("docs/tutorial.md");
    assert!(
        doc.contains(EXPECTED_OUTPUT),
        "the patterns walkthrough of docs/tutorial.md shows `streamforge patterns output` after \
         sending the example:\n{EXPECTED_OUTPUT}"
    );
}

/// The commands of a `--help` text (the names under `Commands:`, without
/// `help`), each with its summary.
fn help_commands(text: &str) -> Vec<(String, String)> {
    text.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| {
            let (name, about) = l.trim().split_once(' ')?;
            (name != "help").then(|| (name.to_string(), about.trim().to_string()))
        })
        .collect()
}

/// `streamforge --help` lists `patterns`, and its line names every
/// command `streamforge patterns --help` has.
#[test]
fn top_level_help_lists_the_patterns_commands() {
    let help = |args: &[&str]| run(client(args), None).ok().stdout;
    let top = help_commands(&help(&["--help"]));
    let (_, about) = top
        .iter()
        .find(|(name, _)| name == "patterns")
        .unwrap_or_else(|| panic!("no patterns command in streamforge --help: {top:?}"));
    let sub = help_commands(&help(&["patterns", "--help"]));
    assert!(sub.len() >= 9, "{sub:?}");
    let named: Vec<&str> = about
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
        .collect();
    for (name, _) in &sub {
        assert!(
            named.contains(&name.as_str()),
            "streamforge --help's patterns line does not name `{name}`: {about}"
        );
    }
}
