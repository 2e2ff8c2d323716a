//! The documentation is self-contained and stays so.
//!
//! - No file of the repository (README, docs, examples, sources and crates, benches,
//!   tests, `openapi.yaml`, `Cargo.toml`) sends the reader to files outside
//!   it: no path into the sibling `shared` directory, and none of the
//!   outside contracts by file name (the `SPEC`, `API` and `PATTERNS`
//!   Markdown files; the names are spelled out in [`forbidden`] only).
//! - `docs/pipeline.md` documents every window kind the pipeline parser
//!   accepts, with every field of each kind.
//! - Every relative link in `README.md` and `docs/*.md` points to a file of
//!   the repository (and, with `#anchor`, to a heading of that file).
//! - `streamforge --help`, `serve --help` and `send --help` name no outside
//!   file.
//! - `benches/gen_workload.py` runs (when `python3` is installed) and writes
//!   the operation format the docs describe.
//! - `openapi.yaml` is OpenAPI 3.2 throughout (no 3.0-only keyword, which
//!   3.1+ tools silently ignore), and each event stream is described item
//!   by item: `itemSchema`, every event's `data` a JSON string with its
//!   `contentSchema`, and the shared `Last-Event-ID` parameter.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// What may not appear: built from pieces, so this file does not match itself.
fn forbidden() -> Vec<String> {
    let mut v = vec![format!("..{}", "/shared")];
    for name in ["SPEC", "API", "PATTERNS"] {
        v.push(format!("{name}.md"));
    }
    v
}

/// Where a forbidden name occurs in `text` as a name of its own (not as the
/// tail of a longer name, like `OPEN` + the API file): the 1-based line
/// numbers.
fn occurrences(text: &str, needle: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut from = 0;
        while let Some(at) = line[from..].find(needle) {
            let start = from + at;
            let before = line[..start].chars().next_back();
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                lines.push(n + 1);
                break;
            }
            from = start + needle.len();
        }
    }
    lines
}

/// The scanned paths: tracked files (`git ls-files`), or every file under
/// them when this is not a git checkout.
fn scanned_files() -> Vec<PathBuf> {
    const PATHS: &[&str] = &[
        "README.md",
        "docs",
        "examples",
        "src",
        "crates",
        "benches",
        "tests",
        "openapi.yaml",
        "Cargo.toml",
    ];
    let git = Command::new("git")
        .args(["ls-files", "-z", "--"])
        .args(PATHS)
        .current_dir(ROOT)
        .output();
    if let Ok(out) = git {
        if out.status.success() && !out.stdout.is_empty() {
            let mut files: Vec<PathBuf> = out
                .stdout
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| Path::new(ROOT).join(String::from_utf8_lossy(p).as_ref()))
                .collect();
            // This file, even before it is committed.
            files.push(Path::new(ROOT).join("tests/it/docs.rs"));
            files.sort();
            files.dedup();
            return files;
        }
    }
    fn walk(p: &Path, out: &mut Vec<PathBuf>) {
        if p.is_dir() {
            for e in std::fs::read_dir(p).expect("readable directory") {
                walk(&e.expect("directory entry").path(), out);
            }
        } else if p.is_file() {
            out.push(p.to_path_buf());
        }
    }
    let mut files = Vec::new();
    for p in PATHS {
        walk(&Path::new(ROOT).join(p), &mut files);
    }
    files
}

#[test]
fn no_file_points_outside_the_repository() {
    let files = scanned_files();
    assert!(
        files.iter().any(|f| f.ends_with("src/lib.rs"))
            && files.iter().any(|f| f.ends_with("docs/api.md")),
        "the scan found the repository's files: {files:?}"
    );
    let mut found = Vec::new();
    for f in &files {
        let Ok(bytes) = std::fs::read(f) else {
            continue; // deleted in the work tree
        };
        let text = String::from_utf8_lossy(&bytes);
        for needle in forbidden() {
            for line in occurrences(&text, &needle) {
                let rel = f.strip_prefix(ROOT).unwrap_or(f);
                found.push(format!("{}:{line}: {needle}", rel.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "these point to files outside the repository; describe the matter in \
         the project's own docs (docs/*.md) and link those instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_recognizes_what_it_forbids() {
    let [shared, spec, api, patterns] = &forbidden()[..] else {
        panic!("four forbidden names")
    };
    let text =
        format!("see {shared}/SPEC\nread `{spec}`\n{api} and {patterns}\ndocs/api.md\nOPEN{api}");
    assert_eq!(occurrences(&text, shared), vec![1]);
    assert_eq!(occurrences(&text, spec), vec![2]);
    assert_eq!(occurrences(&text, api), vec![3]);
    assert_eq!(occurrences(&text, patterns), vec![3]);
}

/// The window kinds the pipeline parser accepts, each with its fields, as
/// the parser itself names them in its error messages.
fn window_kinds() -> Vec<(String, Vec<String>)> {
    fn err(def: &str) -> String {
        let doc = format!(r#"{{"partitions":["p"],"windows":{{"w":{def}}},"lateness":0}}"#);
        streamforge::engine::Pipeline::from_json(doc.as_bytes())
            .expect_err("rejected")
            .to_string()
    }
    /// The backquoted names after `marker` in a serde message
    /// ("expected one of `a`, `b`" or "expected `a`").
    fn names_after(msg: &str, marker: &str) -> Vec<String> {
        let tail = &msg[msg
            .find(marker)
            .unwrap_or_else(|| panic!("{marker:?} in {msg:?}"))..];
        let tail = tail.split(" at line").next().unwrap_or(tail);
        tail.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    }
    let kinds = names_after(&err(r#"{"kind":"?"}"#), "expected");
    kinds
        .into_iter()
        .map(|kind| {
            let msg = err(&format!(r#"{{"kind":"{kind}","?":1}}"#));
            let fields = names_after(&msg, "expected");
            (kind, fields)
        })
        .collect()
}

/// The text of `## ...`/`### ...` sections, by heading, outside code fences.
fn sections(md: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with('#') {
            out.push((
                line.trim_start_matches('#').trim().to_string(),
                String::new(),
            ));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

#[test]
fn pipeline_md_documents_every_window_kind_and_field() {
    let kinds = window_kinds();
    let names: BTreeSet<&str> = kinds.iter().map(|(k, _)| k.as_str()).collect();
    for known in ["fixed", "sliding", "session", "stream_time"] {
        assert!(names.contains(known), "parser kinds {names:?} lack {known}");
    }
    let md = std::fs::read_to_string(format!("{ROOT}/docs/pipeline.md")).expect("docs/pipeline.md");
    let sections = sections(&md);
    for (kind, fields) in &kinds {
        assert!(!fields.is_empty(), "{kind} has fields");
        let heading = format!("`{kind}`");
        let body = &sections
            .iter()
            .find(|(h, _)| *h == heading)
            .unwrap_or_else(|| panic!("docs/pipeline.md has a section `### {heading}`"))
            .1;
        assert!(
            body.contains(&format!(r#""kind": "{kind}""#)),
            "the `{kind}` section shows its definition, {{\"kind\": \"{kind}\", ...}}"
        );
        for field in fields {
            assert!(
                body.contains(&format!(r#""{field}": "#)),
                "the `{kind}` section shows its field {field:?}"
            );
        }
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| `{kind}` |")))
            .unwrap_or_else(|| panic!("the window kinds table has a row for {kind}"));
        for field in fields {
            assert!(
                row.contains(&format!("`{field}")),
                "the table row of {kind} names {field}: {row}"
            );
        }
    }
}

/// The GitHub anchor of a heading: lowercase, spaces to `-`, punctuation
/// other than `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The targets of the Markdown links and images of `md`, outside code
/// fences and code spans, with their line numbers.
fn links(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in md.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans.
        let text: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n + 1, after[..end].trim().to_string()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn relative_links_in_readme_and_docs_resolve() {
    let mut files = vec![PathBuf::from(format!("{ROOT}/README.md"))];
    for e in std::fs::read_dir(format!("{ROOT}/docs")).expect("docs/") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    assert!(files.len() >= 5, "README.md and docs/*.md: {files:?}");
    let mut broken = Vec::new();
    let mut checked = 0;
    for f in &files {
        let md = std::fs::read_to_string(f).expect("markdown");
        let rel = f.strip_prefix(ROOT).unwrap_or(f).display().to_string();
        for (line, target) in links(&md) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, frag) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                f.clone()
            } else {
                f.parent().expect("a directory").join(path)
            };
            if !file.exists() {
                broken.push(format!("{rel}:{line}: {target}: no such file"));
                continue;
            }
            let (Some(frag), true) = (frag, file.extension().is_some_and(|x| x == "md")) else {
                continue;
            };
            let target_md = std::fs::read_to_string(&file).expect("markdown");
            let anchors: BTreeSet<String> = sections(&target_md)
                .iter()
                .map(|(h, _)| anchor(h))
                .collect();
            if !anchors.contains(frag) {
                broken.push(format!("{rel}:{line}: {target}: no heading #{frag}"));
            }
        }
    }
    assert!(checked >= 10, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn help_texts_point_inside_the_repository() {
    let bin = env!("CARGO_BIN_EXE_streamforge");
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["send", "--help"],
        &["verify", "--help"],
        &["nexmark", "--help"],
    ] {
        let out = Command::new(bin).args(args).output().expect("runs");
        assert!(out.status.success(), "streamforge {args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage"), "streamforge {args:?}: {text}");
        for needle in forbidden() {
            assert!(
                occurrences(&text, &needle).is_empty(),
                "streamforge {args:?} names {needle}:\n{text}"
            );
        }
    }
    // every flag of `nexmark` is in the table of docs/cli.md
    let nexmark = Command::new(bin)
        .args(["nexmark", "--help"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&nexmark.stdout);
    let cli_doc = std::fs::read_to_string(Path::new(ROOT).join("docs/cli.md")).unwrap();
    let flags: Vec<&str> = text
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
        .filter(|w| *w != "--help")
        .collect();
    assert!(flags.len() >= 10, "{flags:?}");
    for f in flags {
        assert!(
            cli_doc.contains(&format!("`{f}`")),
            "docs/cli.md does not document `nexmark {f}`"
        );
    }
    let send = Command::new(bin)
        .args(["send", "--help"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&send.stdout);
    assert!(
        text.contains("benches/gen_workload.py"),
        "send --help names the generator in the repository:\n{text}"
    );
}

#[test]
fn the_workload_generator_runs() {
    let script = format!("{ROOT}/benches/gen_workload.py");
    assert!(Path::new(&script).is_file(), "{script}");
    let run = |args: &[&str]| Command::new("python3").arg(&script).args(args).output();
    let help = match run(&["--help"]) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipping the workload generator check: python3 is not available ({e})");
            return;
        }
    };
    assert!(help.status.success(), "gen_workload.py --help");
    let help = String::from_utf8_lossy(&help.stdout);
    for option in ["--events", "--keys", "--partitions", "--out"] {
        assert!(help.contains(option), "--help names {option}:\n{help}");
    }
    let args = [
        "--events",
        "20",
        "--keys",
        "3",
        "--partitions",
        "2",
        "--wm-every",
        "5",
        "--dup-rate",
        "0.2",
    ];
    let a = run(&args).expect("python3 runs");
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let b = run(&args).expect("python3 runs");
    assert_eq!(a.stdout, b.stdout, "the same arguments give the same file");
    let text = String::from_utf8(a.stdout).expect("UTF-8");
    let (mut deliveries, mut advances) = (0, 0);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("one JSON object per line");
        match v["op"].as_str() {
            Some("deliver") => {
                // The delivery without "op" is what POST /events takes.
                let mut d = v.clone();
                d.as_object_mut().expect("object").remove("op");
                let d = d.to_string();
                let d: streamforge::engine::Delivery =
                    serde_json::from_str(&d).expect("a Delivery");
                assert!(d.offset.is_some(), "{line}");
                deliveries += 1;
            }
            Some("advance") => {
                assert!(
                    v["partition"].is_string() && v["watermark"].is_i64(),
                    "{line}"
                );
                advances += 1;
            }
            other => panic!("unexpected op {other:?}: {line}"),
        }
    }
    assert_eq!((deliveries, advances), (20, 8), "{text}");
}

/// The lines under `lines[at]` that are indented deeper than it.
fn yaml_block<'a>(lines: &[&'a str], at: usize) -> Vec<&'a str> {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let own = indent(lines[at]);
    lines[at + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || indent(l) > own)
        .copied()
        .collect()
}

/// The position of the line `key:` at exactly `indent` spaces.
fn yaml_key(lines: &[&str], indent: usize, key: &str) -> Option<usize> {
    let want = format!("{}{key}:", " ".repeat(indent));
    lines
        .iter()
        .position(|l| *l == want || l.starts_with(&format!("{want} ")))
}

#[test]
fn openapi_is_3_2_and_describes_event_streams_item_by_item() {
    let yaml = std::fs::read_to_string(format!("{ROOT}/openapi.yaml")).expect("openapi.yaml");
    let lines: Vec<&str> = yaml.lines().collect();
    assert!(
        lines[0].starts_with("openapi: 3.2."),
        "openapi.yaml declares OpenAPI 3.2 (itemSchema is 3.2): {}",
        lines[0]
    );
    // 3.0's `nullable` is no keyword of JSON Schema 2020-12 (3.1+): a 3.2
    // tool ignores it, and the null it meant to allow becomes a violation.
    // A schema's `example` is deprecated there (`examples: [...]`).
    for (n, l) in lines.iter().enumerate() {
        for kw in ["nullable:", "example:"] {
            let hit = l.trim_start().starts_with(kw)
                || l.contains(&format!("{{{kw}"))
                || l.contains(&format!(" {kw}"));
            assert!(!hit, "openapi.yaml:{}: 3.0 keyword {kw} {l}", n + 1);
        }
    }
    let schemas = yaml_key(&lines, 2, "schemas").expect("components/schemas");
    let schema = |name: &str| -> Vec<&str> {
        let at = lines[schemas..]
            .iter()
            .position(|l| *l == format!("    {name}:"))
            .unwrap_or_else(|| panic!("components/schemas/{name}"));
        yaml_block(&lines, schemas + at)
    };
    let streams: Vec<&str> = streamforge::api::ROUTES
        .iter()
        .filter(|(_, p)| p.ends_with("/stream"))
        .map(|(m, p)| {
            assert_eq!(*m, "get", "{p}");
            *p
        })
        .collect();
    assert!(streams.len() >= 2, "{streams:?}");
    for path in streams {
        let at = yaml_key(&lines, 2, path).unwrap_or_else(|| panic!("{path} in openapi.yaml"));
        let block = yaml_block(&lines, at);
        assert!(
            block
                .iter()
                .any(|l| l.trim() == "- $ref: '#/components/parameters/lastEventId'"),
            "{path} takes the shared Last-Event-ID parameter"
        );
        let sse = block
            .iter()
            .position(|l| l.trim() == "text/event-stream:")
            .unwrap_or_else(|| panic!("{path} answers text/event-stream"));
        let media = yaml_block(&block, sse);
        let inner = media[0].len() - media[0].trim_start().len();
        let keys: Vec<&str> = media
            .iter()
            .filter(|l| l.len() - l.trim_start().len() == inner)
            .map(|l| l.trim())
            .collect();
        assert_eq!(
            keys,
            ["itemSchema:"],
            "{path}: the events are described one by one (itemSchema; a 3.2 `schema` would describe the whole stream)"
        );
        let refs: Vec<&str> = media
            .iter()
            .filter_map(|l| l.split("'#/components/schemas/").nth(1))
            .map(|r| r.split('\'').next().unwrap_or(r))
            .collect();
        assert!(
            refs.len() >= 2 && refs.contains(&"RewindEvent"),
            "{path}: oneOf the record's event and RewindEvent: {refs:?}"
        );
        for name in refs {
            let event = schema(name);
            let text = event.join("\n");
            assert!(
                text.contains("event: {const: "),
                "{name} tells its `event` type"
            );
            let data = event
                .iter()
                .position(|l| l.trim() == "data:")
                .unwrap_or_else(|| panic!("{name} describes `data`"));
            let data = yaml_block(&event, data)
                .iter()
                .map(|l| l.trim())
                .collect::<Vec<_>>();
            assert!(
                data.contains(&"type: string")
                    && data.contains(&"contentMediaType: application/json")
                    && data.iter().any(|l| l.starts_with("contentSchema: {$ref: ")),
                "{name}: `data` is a JSON string with its contentSchema: {data:?}"
            );
        }
    }
}
