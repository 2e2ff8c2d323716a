//! The README's walkthrough, run as written.
//!
//! The section `### Walkthrough: page views` is a sequence of fenced blocks:
//! - a ```sh block with `cargo run ... -- serve ...` (re)starts the server
//!   with those flags (after `kill %1`, the running one is stopped with
//!   SIGTERM first); the test binds 127.0.0.1:0 instead of 8080;
//! - every other ```sh block is a command, run by bash with `B` set to the
//!   server's address, and must be followed by its claimed output: a ```json
//!   block (compared byte for byte with what the command prints, after
//!   removing the whitespace outside JSON strings that wraps it for reading)
//!   or a ```text block (compared exactly).
//!
//! Paths under `/tmp/` in the README are mapped into a fresh temporary
//! directory, so runs never share files. The test also checks that the
//! example files parse and that the walkthrough sends exactly the operations
//! of `examples/pageviews.ndjson`, in its order. It needs `bash` and `curl`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{start, tempdir, wait_until, Server, DEADLINE};
use serde_json::Value;
use streamforge::engine::{Delivery, Pipeline};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One fenced block: its info string and its text.
#[derive(Debug)]
struct Block {
    lang: String,
    text: String,
}

fn walkthrough() -> Vec<Block> {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).expect("README.md");
    let from = readme
        .find("\n### Walkthrough: page views\n")
        .expect("README has a '### Walkthrough: page views' section");
    let section = &readme[from + 1..];
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

/// The operations a README command sends, in the format of the examples
/// file (`{"op": ..., ...}`).
fn operations(cmd: &str) -> Vec<Value> {
    let with_op = |op: &str, body: &str| {
        let mut v: Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("README body is not JSON ({e}): {body}"));
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

/// `serve` flags of a README `cargo run` line: the test's pipeline path and
/// database, without the address.
fn serve_flags(block: &str, tmp: &Path) -> (std::path::PathBuf, Vec<String>) {
    let line = block
        .lines()
        .find(|l| l.contains("cargo run"))
        .expect("cargo run line");
    let args = line
        .split_once(" -- ")
        .expect("cargo run --release -- serve ...")
        .1;
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
            "--pipeline" => {
                let path = format!("{ROOT}/{value}");
                assert!(Path::new(&path).is_file(), "{path} exists");
                flags.extend([w.to_string(), path]);
            }
            _ => flags.extend([w.to_string(), value.to_string()]),
        }
    }
    (db.expect("--db"), flags)
}

/// Runs a README command with bash; its stdout.
fn run(cmd: &str, s: &Server, tmp: &Path) -> String {
    let script = format!(
        "set -euo pipefail\n{}",
        cmd.replace("/tmp/", &format!("{}/", tmp.display()))
    );
    let child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("B", &s.base)
        .current_dir(tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = wait_until("README command", DEADLINE, || rx.try_recv().ok())
        .expect("README command output");
    assert!(
        out.status.success(),
        "README command failed ({}): {cmd}\nstderr: {}",
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
            let d: Delivery = serde_json::from_value(line.clone())
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

#[test]
fn walkthrough_outputs_are_what_the_server_returns() {
    assert!(
        Command::new("curl")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "the README walkthrough test needs curl (apt-get install curl)"
    );
    let blocks = walkthrough();
    let dir = tempdir();
    let tmp = dir.path();
    let mut server: Option<Server> = None;
    let mut sent = Vec::new();
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
            let (db, flags) = serve_flags(&b.text, tmp);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            server = Some(start(&db, &flags));
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
        let got = run(&b.text, s, tmp);
        if claim.lang == "json" {
            assert_eq!(got, minify(&claim.text), "output of: {}", b.text);
        } else {
            let want = claim.text.replace("/tmp/", &format!("{}/", tmp.display()));
            assert_eq!(got, want, "output of: {}", b.text);
        }
        sent.extend(operations(&b.text));
        checked += 1;
        i += 2;
    }
    assert!(checked >= 14, "only {checked} claims checked");
    assert_eq!(
        sent,
        example_operations(),
        "the walkthrough sends the operations of examples/pageviews.ndjson, in order"
    );
}

#[test]
fn minify_keeps_strings() {
    assert_eq!(
        minify("{ \"a b\" : [1, 2],\n \"c\":\"\\\" x\" }"),
        "{\"a b\":[1,2],\"c\":\"\\\" x\"}"
    );
}
