//! The documented walkthroughs, run as written: the section `## A first
//! walkthrough` of `README.md`, and the sections `## Walkthrough: page
//! views`, `## Walkthrough: patterns` and `## Walkthrough: webhooks` of
//! `docs/tutorial.md` (see [`WALKTHROUGHS`]). Each is a sequence of fenced
//! blocks:
//! - a ```sh block with `cargo run ... -- serve ...` (re)starts the server
//!   with those flags (after `kill %1`, the running one is stopped with
//!   SIGTERM first); the test binds 127.0.0.1:0 instead of 8080. Its
//!   `export NAME=value` lines set that variable for the server and for
//!   every later command (as in the reader's shell), and `NAME=value`
//!   words before `cargo run` set it for the server only;
//! - every other ```sh block is a command, run by bash with `B` and
//!   `STREAMFORGE_URL` set to the server's address and the tested
//!   `streamforge` binary first on the `PATH`, and must be followed by its
//!   claimed output (it runs in the repository's root, so `examples/...`
//!   names the shipped files): a ```json block (compared byte for byte with what the
//!   command prints, after removing the whitespace outside JSON strings that
//!   wraps it for reading) or a ```text block (compared exactly, except the
//!   timing of a `send` summary line, `; 0.01 s, 2000 events/s`, which is
//!   only checked for its shape).
//!
//! Paths under `/tmp/` in the walkthroughs are mapped into a fresh temporary
//! directory, so runs never share files. The test also checks that the
//! example files parse, that the page-views walkthrough sends exactly the
//! operations of `examples/pageviews.ndjson`, in its order, and that every
//! pattern event the patterns walkthrough pushes successfully is a line of
//! `examples/payments.ndjson`, in the file's order. The webhooks
//! walkthrough signs its requests as Stripe does, with the current time,
//! and reads pages with `jq`; the test checks the example pipeline files
//! of docs/webhooks.md and that the page shows each of them as it is. It
//! needs `bash` and `curl`, and for the webhooks walkthrough `openssl` and
//! `jq`.

use crate::support::server;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use server::{start_env, tempdir, wait_until, Server, DEADLINE};
use streamforge::engine::{Delivery, Pipeline};
use streamforge::inbound::config::{pipeline_file, Secrets};
use streamforge::inbound::signature::Scheme;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One fenced block: its info string and its text.
#[derive(Debug)]
struct Block {
    lang: String,
    text: String,
}

/// The walkthroughs this file runs: the file (from the repository's root)
/// and the heading of its section, which ends at the next heading.
const README_FIRST: (&str, &str) = ("README.md", "## A first walkthrough");
const PAGE_VIEWS: (&str, &str) = ("docs/tutorial.md", "## Walkthrough: page views");
const PATTERNS: (&str, &str) = ("docs/tutorial.md", "## Walkthrough: patterns");
const WEBHOOKS: (&str, &str) = ("docs/tutorial.md", "## Walkthrough: webhooks");
/// Every walkthrough a test below runs.
const WALKTHROUGHS: [(&str, &str); 4] = [README_FIRST, PAGE_VIEWS, PATTERNS, WEBHOOKS];

fn walkthrough((file, heading): (&str, &str)) -> Vec<Block> {
    let doc = std::fs::read_to_string(format!("{ROOT}/{file}")).expect(file);
    let from = doc
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("{file} has a '{heading}' section"));
    let section = &doc[from + 1..];
    let section = match section[4..].find("\n#") {
        Some(end) => &section[..end + 4],
        None => section,
    };
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        let Some(lang) = line.strip_prefix("```") else {
            continue;
        };
        let mut text = String::new();
        for l in lines.by_ref() {
            if l == "```" {
                break;
            }
            text.push_str(l);
            text.push('\n');
        }
        blocks.push(Block {
            lang: lang.trim().to_string(),
            text,
        });
    }
    blocks
}

/// The JSON text without the whitespace outside strings.
fn minify(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
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

/// The text between `-d '` and the next `'`, if any.
fn data_arg(cmd: &str) -> Option<&str> {
    let at = cmd.find("-d '")? + 4;
    let len = cmd[at..].find('\'')?;
    Some(&cmd[at..at + len])
}

/// The operations a walkthrough command sends, in the format of the examples
/// file (`{"op": ..., ...}`).
fn operations(cmd: &str) -> Vec<Value> {
    let with_op = |op: &str, body: &str| {
        let mut v: Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("walkthrough body is not JSON ({e}): {body}"));
        v.as_object_mut()
            .expect("object")
            .insert("op".into(), Value::from(op));
        v
    };
    if cmd.contains("$B/events") {
        let mut bodies: Vec<&str> = cmd.lines().filter(|l| l.starts_with('{')).collect();
        bodies.extend(data_arg(cmd));
        bodies.iter().map(|b| with_op("deliver", b)).collect()
    } else if cmd.contains("$B/watermarks") {
        vec![with_op("advance", data_arg(cmd).expect("-d body"))]
    } else if let Some(at) = cmd.find("$B/partitions/") {
        let rest = &cmd[at + "$B/partitions/".len()..];
        let p = rest.split('/').next().expect("partition");
        vec![with_op("idle", &format!("{{\"partition\":\"{p}\"}}"))]
    } else {
        Vec::new()
    }
}

/// The `NAME=value` assignments among `words` (a shell variable name, `=`,
/// a value without quotes).
fn assignments<'a>(words: impl Iterator<Item = &'a str>) -> Vec<(String, String)> {
    words
        .map(|w| {
            let (name, value) = w
                .split_once('=')
                .unwrap_or_else(|| panic!("NAME=value expected, got {w:?}"));
            assert!(
                !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !value.contains(['\'', '"', '$']),
                "a plain NAME=value: {w:?}"
            );
            (name.to_string(), value.to_string())
        })
        .collect()
}

/// The variables a walkthrough `serve` block exports (`export NAME=value`
/// lines): the server and every later command get them.
fn exports(block: &str) -> Vec<(String, String)> {
    assignments(
        block
            .lines()
            .filter_map(|l| l.trim().strip_prefix("export "))
            .flat_map(str::split_whitespace),
    )
}

/// `serve` flags of a walkthrough `cargo run` line: the test's pipeline path and
/// database, without the address; and the variables set for the server
/// alone (`NAME=value cargo run ...`).
fn serve_flags(
    block: &str,
    tmp: &Path,
) -> (std::path::PathBuf, Vec<String>, Vec<(String, String)>) {
    let line = block
        .lines()
        .find(|l| l.contains("cargo run"))
        .expect("cargo run line");
    let (before, args) = line
        .split_once(" -- ")
        .expect("cargo run --release -- serve ...");
    let env = assignments(
        before
            .split_once("cargo run")
            .expect("cargo run")
            .0
            .split_whitespace(),
    );
    let mut words = args.split_whitespace().filter(|w| *w != "&");
    assert_eq!(words.next(), Some("serve"), "{line}");
    let mut db = None;
    let mut flags = Vec::new();
    while let Some(w) = words.next() {
        let value = words
            .next()
            .unwrap_or_else(|| panic!("{w} needs a value: {line}"));
        match w {
            "--db" => db = Some(tmp.join(value.strip_prefix("/tmp/").expect("db under /tmp/"))),
            "--pipeline" | "--patterns" => {
                let path = format!("{ROOT}/{value}");
                assert!(Path::new(&path).is_file(), "{path} exists");
                flags.extend([w.to_string(), path]);
            }
            _ => flags.extend([w.to_string(), value.to_string()]),
        }
    }
    (db.expect("--db"), flags, env)
}

/// Runs a walkthrough command with bash, with the variables `env` set; its
/// stdout.
fn run(cmd: &str, s: &Server, tmp: &Path, env: &[(String, String)]) -> String {
    let script = format!(
        "set -euo pipefail\n{}",
        cmd.replace("/tmp/", &format!("{}/", tmp.display()))
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_streamforge"))
        .parent()
        .expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("B", &s.base)
        .env("STREAMFORGE_URL", &s.base)
        .env_remove("STREAMFORGE_TOKEN")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PATH", path)
        // relative paths (examples/...) are the repository's, as in the walkthroughs
        .current_dir(ROOT)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = wait_until("walkthrough command", DEADLINE, || rx.try_recv().ok())
        .expect("walkthrough command output");
    assert!(
        out.status.success(),
        "walkthrough command failed ({}): {cmd}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn example_files_parse() {
    let pipeline =
        std::fs::read(format!("{ROOT}/examples/pageviews.pipeline.json")).expect("pipeline");
    let p = Pipeline::from_json(&pipeline).expect("the example pipeline is valid");
    assert_eq!(p.partitions(), ["mobile", "web"]);
    for (n, line) in example_operations().iter().enumerate() {
        let mut line = line.clone();
        let obj = line.as_object_mut().expect("object");
        if obj.remove("op") == Some(Value::from("deliver")) {
            let text = line.to_string();
            let d: Delivery = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("line {}: not a delivery ({e})", n + 1));
            assert!(p.partition_index(&d.partition).is_some(), "line {}", n + 1);
        }
    }
}

/// `examples/pageviews.ndjson` as values, bare deliveries given `"op":"deliver"`.
fn example_operations() -> Vec<Value> {
    let text =
        std::fs::read_to_string(format!("{ROOT}/examples/pageviews.ndjson")).expect("events");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            let obj = v.as_object_mut().expect("object");
            if !obj.contains_key("op") {
                obj.insert("op".into(), Value::from("deliver"));
            }
            let op = obj["op"].as_str().expect("op").to_string();
            assert!(["deliver", "advance", "idle"].contains(&op.as_str()), "{l}");
            v
        })
        .collect()
}

/// A send summary's timing (`; 0.01 s, 2000 events/s` at the end of a
/// line) replaced by `; T s, N events/s`; other text unchanged.
fn without_timing(text: &str) -> String {
    text.lines()
        .map(|l| {
            let Some(body) = l.strip_suffix(" events/s") else {
                return l.to_string();
            };
            let Some(at) = body.rfind("; ") else {
                return l.to_string();
            };
            let tail = &body[at + 2..];
            let shaped = tail.split_once(" s, ").is_some_and(|(secs, rate)| {
                secs.split_once('.').is_some_and(|(a, b)| {
                    !a.is_empty()
                        && b.len() == 2
                        && (a.to_string() + b).bytes().all(|c| c.is_ascii_digit())
                }) && !rate.is_empty()
                    && rate.bytes().all(|c| c.is_ascii_digit())
            });
            if shaped {
                format!("{}; T s, N events/s", &body[..at])
            } else {
                l.to_string()
            }
        })
        .map(|l| l + "\n")
        .collect()
}

fn curl_available() {
    needs("curl", "--version", "curl");
}

/// Fails, saying what to install, unless `tool arg` runs.
fn needs(tool: &str, arg: &str, package: &str) {
    assert!(
        Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "the walkthrough test needs {tool} (apt-get install {package})"
    );
}

/// Runs the walkthrough `which` (file, heading); returns the number of
/// claims checked and each command with its claimed output.
fn run_walkthrough(which: (&str, &str)) -> (usize, Vec<(String, String)>) {
    curl_available();
    let blocks = walkthrough(which);
    let dir = tempdir();
    let tmp = dir.path();
    let mut server: Option<Server> = None;
    // What the serve blocks exported so far, as the reader's shell has it.
    let mut exported: Vec<(String, String)> = Vec::new();
    let mut commands = Vec::new();
    let mut checked = 0;
    let mut i = 0;
    while i < blocks.len() {
        let b = &blocks[i];
        assert_eq!(
            b.lang, "sh",
            "unexpected block (a claim without its command?): {b:?}"
        );
        if b.text.contains("cargo run") {
            if b.text.contains("kill %1") {
                let mut s = server.take().expect("a running server to stop");
                assert!(s.terminate().success(), "graceful shutdown");
            }
            assert!(server.is_none(), "one server at a time: {}", b.text);
            exported.extend(exports(&b.text));
            let (db, flags, own) = serve_flags(&b.text, tmp);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> = exported
                .iter()
                .chain(&own)
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            server = Some(start_env(&db, &flags, &env));
            i += 1;
            continue;
        }
        let s = server
            .as_ref()
            .expect("the walkthrough starts the server first");
        let claim = blocks
            .get(i + 1)
            .filter(|c| c.lang == "json" || c.lang == "text")
            .unwrap_or_else(|| panic!("no claimed output after: {}", b.text));
        let got = run(&b.text, s, tmp, &exported);
        if claim.lang == "json" {
            assert_eq!(got, minify(&claim.text), "output of: {}", b.text);
        } else {
            let want = claim.text.replace("/tmp/", &format!("{}/", tmp.display()));
            assert_eq!(
                without_timing(&got),
                without_timing(&want),
                "output of: {}",
                b.text
            );
        }
        commands.push((b.text.clone(), claim.text.clone()));
        checked += 1;
        i += 2;
    }
    (checked, commands)
}

/// Every walkthrough is run by a test below (and has blocks to run).
#[test]
fn every_walkthrough_is_found() {
    for which in WALKTHROUGHS {
        let blocks = walkthrough(which);
        assert!(
            blocks.iter().filter(|b| b.lang == "sh").count() >= 2,
            "{which:?}: {blocks:?}"
        );
    }
}

#[test]
fn readme_walkthrough_outputs_are_what_the_server_returns() {
    let (checked, commands) = run_walkthrough(README_FIRST);
    assert!(checked >= 2, "only {checked} claims checked");
    assert!(
        commands
            .iter()
            .any(|(c, claim)| c.contains("$B/watermarks") && claim.contains("\"upsert\"")),
        "the README's walkthrough shows a request and the changes it answers"
    );
}

#[test]
fn walkthrough_outputs_are_what_the_server_returns() {
    let (checked, commands) = run_walkthrough(PAGE_VIEWS);
    let sent: Vec<Value> = commands.iter().flat_map(|(c, _)| operations(c)).collect();
    assert!(checked >= 14, "only {checked} claims checked");
    assert_eq!(
        sent,
        example_operations(),
        "the walkthrough sends the operations of examples/pageviews.ndjson, in order"
    );
}

/// The pattern events a walkthrough command pushes, as JSON values (none when
/// its claimed output is an error).
fn pattern_events(cmd: &str, claim: &str) -> Vec<Value> {
    if !cmd.contains("$B/patterns/events") || claim.contains("\"code\"") {
        return Vec::new();
    }
    let mut bodies: Vec<&str> = cmd.lines().filter(|l| l.starts_with('{')).collect();
    bodies.extend(data_arg(cmd));
    bodies
        .iter()
        .map(|b| {
            serde_json::from_str(b)
                .unwrap_or_else(|e| panic!("walkthrough event is not JSON ({e}): {b}"))
        })
        .collect()
}

/// The events of `examples/payments.ndjson` (bare or `"op":"push"`), in order.
fn payment_events() -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{ROOT}/examples/payments.ndjson")).expect("events");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            match v.get("op").and_then(Value::as_str) {
                None => Some(v),
                Some("push") => Some(v["event"].clone()),
                Some("advance" | "finish") => None,
                Some(other) => panic!("unknown op {other}: {l}"),
            }
        })
        .collect()
}

#[test]
fn patterns_walkthrough_outputs_are_what_the_server_returns() {
    let (checked, commands) = run_walkthrough(PATTERNS);
    assert!(checked >= 12, "only {checked} claims checked");
    // The counts of `patterns send` (events, batches, records, matches,
    // timeouts) are among the checked claims: the tutorial's numbers are
    // what the command prints against the server the walkthrough starts.
    assert!(
        commands.iter().any(|(c, claim)| {
            c.trim() == "streamforge patterns send examples/payments.ndjson"
                && claim.starts_with("sent examples/payments.ndjson: ")
                && claim.contains(" records (")
        }),
        "the walkthrough checks the summary of `patterns send examples/payments.ndjson`"
    );
    let pushed: Vec<Value> = commands
        .iter()
        .flat_map(|(c, claim)| pattern_events(c, claim))
        .collect();
    assert!(
        !pushed.is_empty(),
        "the walkthrough pushes events with curl"
    );
    let file = payment_events();
    let mut at = 0;
    for e in &pushed {
        at += file[at..]
            .iter()
            .position(|f| f == e)
            .unwrap_or_else(|| panic!("{e} is not a later event of examples/payments.ndjson"))
            + 1;
    }
}

/// The payloads a walkthrough command posts (its `body='...'` lines), as
/// written.
fn posted_texts(cmd: &str) -> Vec<&str> {
    cmd.lines()
        .filter_map(|l| l.strip_prefix("body='")?.strip_suffix('\''))
        .collect()
}

/// [`posted_texts`], parsed.
fn posted_bodies(cmd: &str) -> Vec<Value> {
    posted_texts(cmd)
        .into_iter()
        .map(|b| {
            serde_json::from_str(b)
                .unwrap_or_else(|e| panic!("walkthrough body is not JSON ({e}): {b}"))
        })
        .collect()
}

/// What a claimed answer of `POST /ingest/{source}` says: the `status` of
/// an answer, the `code` of a problem, or the text of a text claim.
fn outcome(claim: &str) -> String {
    match serde_json::from_str::<Value>(&minify(claim)) {
        Ok(v) => v
            .get("code")
            .or_else(|| v.get("status"))
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("an answer or a problem: {claim}"))
            .to_string(),
        Err(_) => claim.trim().to_string(),
    }
}

#[test]
fn webhooks_walkthrough_outputs_are_what_the_server_returns() {
    needs("openssl", "version", "openssl");
    needs("jq", "--version", "jq");
    let (checked, commands) = run_walkthrough(WEBHOOKS);
    assert!(checked >= 12, "only {checked} claims checked");

    // The file is the one the section describes: a Stripe source, signed,
    // its secret from the environment, and a derived watermark.
    let file = std::fs::read(format!("{ROOT}/examples/webhooks.pipeline.json")).expect("file");
    let (pipeline, inbound) =
        pipeline_file(&file, Secrets::Skip).expect("a valid pipeline file with sources");
    assert_eq!(pipeline.partitions(), ["payments"]);
    let stripe = &inbound.sources["stripe"];
    let sig = stripe.signature.as_ref().expect("a signed source");
    assert_eq!(sig.scheme, Scheme::Stripe);
    assert_eq!(
        sig.secrets_from.to_string(),
        "the environment variable STRIPE_WEBHOOK_SECRET"
    );
    assert_eq!(
        inbound.watermarks["payments"].max_out_of_orderness,
        Some(300_000)
    );

    // Each request is signed as it is sent (the server takes 300 s either
    // way), while the events' own times are fixed in their bodies: the
    // answers are the same on every run.
    let posts: Vec<&(String, String)> = commands
        .iter()
        .filter(|(c, _)| c.contains("$B/ingest/stripe -H"))
        .collect();
    for (c, _) in &posts {
        assert!(
            c.contains("Stripe-Signature: t=$t,v1=$v1") && c.contains("$(date +%s)"),
            "signed now: {c}"
        );
        for body in posted_bodies(c) {
            assert!(body["created"].is_i64(), "a fixed event time: {body}");
        }
    }
    let outcomes: Vec<String> = posts.iter().map(|(_, claim)| outcome(claim)).collect();
    assert_eq!(
        outcomes,
        [
            "new",
            "duplicate",
            "signature_mismatch",
            "401 signature_stale",
            "filtered",
            "mapping_failed",
            "new",
            "new"
        ],
        "what the walkthrough shows, in order"
    );
    // The retry is the same payload as the first delivery.
    assert_eq!(posted_bodies(&posts[0].0), posted_bodies(&posts[1].0));

    // The refused payload is on the rejected page as it was sent.
    let refused = posted_texts(&posts[5].0).remove(0);
    let (_, page) = commands
        .iter()
        .find(|(c, _)| {
            c.trim_start()
                .starts_with("curl -s $B/ingest/stripe/rejected |")
        })
        .expect("the walkthrough reads the rejected page");
    assert_eq!(
        page.trim(),
        format!("1 mapping_failed /data/object/amount {refused}"),
        "the page keeps the body byte for byte"
    );

    // No watermark client: the first day was published because the last
    // event's time moved the partition's watermark past its end.
    assert!(
        !commands
            .iter()
            .any(|(c, _)| c.contains("$B/watermarks") || c.contains("$B/partitions/")),
        "the walkthrough posts no watermark"
    );
    let last: Value = serde_json::from_str(&minify(&posts[7].1)).expect("answer");
    let (_, changes) = commands
        .iter()
        .find(|(c, _)| c.trim() == "curl -s $B/changes")
        .expect("the walkthrough reads the changelog");
    let changes: Value = serde_json::from_str(&minify(changes)).expect("a page");
    let first = &changes["changes"][0];
    assert_eq!(first["op"], "upsert");
    let end = first["result"]["end"].as_i64().expect("end");
    assert!(
        last["watermark"].as_i64().is_some_and(|w| w >= end),
        "the derived watermark {} is past the window's end {end}",
        last["watermark"]
    );
    assert_eq!(
        (&first["result"]["count"], &first["result"]["sum"]),
        (&Value::from(2), &Value::from(4499)),
        "the retry counted once, the re-sent payload counted"
    );
}

/// The pipeline files of docs/webhooks.md are valid as `serve` reads them
/// (secrets not read), and the page shows each as it is.
#[test]
fn webhook_example_files_parse_and_are_shown_in_docs() {
    let page =
        std::fs::read_to_string(format!("{ROOT}/docs/webhooks.md")).expect("docs/webhooks.md");
    for (file, sources) in [
        ("examples/webhooks.pipeline.json", &["stripe"][..]),
        ("examples/github.pipeline.json", &["github"]),
        (
            "examples/stripe.pipeline.json",
            &["stripe", "stripe_patterns"],
        ),
        (
            "examples/standard-webhooks.pipeline.json",
            &["shop_eu", "shop_us"],
        ),
    ] {
        let text = std::fs::read_to_string(format!("{ROOT}/{file}")).expect(file);
        let (_, inbound) =
            pipeline_file(text.as_bytes(), Secrets::Skip).unwrap_or_else(|e| panic!("{file}: {e}"));
        let names: Vec<&str> = inbound.sources.keys().map(String::as_str).collect();
        assert_eq!(names, sources, "{file}");
        assert!(
            inbound.sources.values().all(|s| s.signature.is_some()),
            "{file}: every source is signed"
        );
        assert!(
            !inbound.watermarks.is_empty(),
            "{file}: a watermark strategy"
        );
        assert!(
            page.contains(text.trim_end()),
            "docs/webhooks.md shows {file} as it is"
        );
    }
    let text =
        std::fs::read_to_string(format!("{ROOT}/examples/stripe.patterns.json")).expect("document");
    let doc =
        streamforge::patterns::Document::from_json(text.as_bytes()).expect("a valid document");
    assert_eq!(doc.pattern_names(), ["paid_after_failures"]);
    assert!(
        page.contains(text.trim_end()),
        "docs/webhooks.md shows examples/stripe.patterns.json as it is"
    );
}

#[test]
fn pattern_example_files_parse() {
    let doc = std::fs::read(format!("{ROOT}/examples/payments.patterns.json")).expect("document");
    let doc = streamforge::patterns::Document::from_json(&doc).expect("a valid document");
    assert_eq!(
        doc.pattern_names(),
        ["abandoned_cart", "failed_logins", "rising_payments"]
    );
    for e in payment_events() {
        streamforge::patterns::parse_event(e.to_string().as_bytes())
            .unwrap_or_else(|err| panic!("{e}: {err}"));
    }
}

#[test]
fn send_timing_is_normalized_only_in_its_shape() {
    assert_eq!(
        without_timing("sent f: 3 events; 0.01 s, 250 events/s\nx; 1 s, 2 events/s\n"),
        "sent f: 3 events; T s, N events/s\nx; 1 s, 2 events/s\n"
    );
}

#[test]
fn minify_keeps_strings() {
    assert_eq!(
        minify("{ \"a b\" : [1, 2],\n \"c\":\"\\\" x\" }"),
        "{\"a b\":[1,2],\"c\":\"\\\" x\"}"
    );
}
