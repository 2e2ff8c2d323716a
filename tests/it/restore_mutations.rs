//! Mutated checkpoints against the real binary: no envelope, however
//! damaged or crafted, makes `POST /restore` answer a 5xx or stops the
//! server, and a crafted state it accepts keeps working.
//!
//! Two valid checkpoints are built over HTTP (a pipeline of three partitions
//! and four window kinds: fixed, sliding, session and stream-time, with
//! lateness; deliveries on every partition, duplicates across partitions,
//! identical redeliveries, late events, watermark advances, idle
//! partitions, then `POST /checkpoints` and `GET /checkpoints/{id}` for the
//! envelope bytes). From them, a seeded generator (SplitMix64, no new
//! crates) makes at least 10,000 envelopes:
//! - bytes of the envelope flipped or replaced, and truncations (the
//!   checksum left as it was); the envelopes built from a state are
//!   version 2 (with its digest) for half of those whose JSON tree writes
//!   them back exactly, version 1 (its checksum) for the others, so every
//!   "checksum recomputed" below is a digest for some of them;
//! - bytes of the state replaced, with the checksum recomputed;
//! - top-level parts mixed between the two states (e.g. the `sources` of
//!   one with the `windows` of the other), sub-trees swapped at the same
//!   path or moved to another, with the checksum recomputed;
//! - integers replaced (count, sum, min, max, start, end, sequence,
//!   watermark, progress, max_timestamp, timestamps, values, late
//!   watermarks) by neighbours, window-sized steps, other integers of the
//!   state and extremes up to and beyond i128, with the checksum recomputed;
//! - lists edited (an element removed, repeated, moved, taken from the
//!   other state; a list emptied or reversed: offsets, rows, late records,
//!   event tuples), strings and object keys replaced (ids, keys, window and
//!   partition names), with the checksum recomputed;
//! - envelope-level variants (reformatted, reordered, wrong version or
//!   format, unknown or duplicate fields, upper-case checksum).
//!
//! Each is sent to `POST /restore` on one keep-alive connection; every answer
//! must be `200` with the documented `{"sequence","late","watermark"}` body
//! (docs/api.md) or `422 invalid_checkpoint` as a problem, never a 5xx.
//! After each accepted crafted envelope the restored state is exercised
//! (an ingest on every partition, an advance, an idle, `/results`; every
//! tenth time, a checkpoint of it that must restore again): every answer is
//! a 2xx or a 4xx problem. The rejections must come from every part of
//! validation (parser, checksum, pipeline, clock, sources, windows,
//! changelog, late records), so the mutations are known to reach them.
//! `/healthz` and `/status` are checked every 250 cases and at the end,
//! with the process still running and its log free of panics. The run
//! prints its time and what was accepted and rejected, by mutation and by
//! rule.

use crate::support::server;

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;
use server::*;
use streamforge::engine::sha256_hex;

const PIPELINE: &str = r#"{"partitions":["p0","p1","p2"],"windows":{"fixed":{"kind":"fixed","size":10},"slide":{"kind":"sliding","size":10,"step":4},"sess":{"kind":"session","gap":3},"stream":{"kind":"stream_time","size":8}},"lateness":2}"#;

/// How many mutated envelopes are sent (at least 10,000).
const CASES: usize = 10_500;

const PREFIX: &str = r#"{"format":"streamforge-checkpoint","sha256":""#;
const SUFFIX: &str = r#","version":1}"#;
const PREFIX_2: &str = r#"{"digest":""#;
const SUFFIX_2: &str = r#","version":2}"#;

/// The envelope of `state` with its digest: version 2 for half of the
/// states (by length) that are JSON whose tree writes them back exactly
/// (so the tree's digest is the state's), version 1 (its checksum over the
/// text) for the others.
fn envelope(state: &str) -> Vec<u8> {
    if state.len().is_multiple_of(2) {
        if let Ok(tree) = serde_json::from_str::<Value>(state) {
            let chained = tree["late"].is_array()
                && tree["sources"]
                    .as_object()
                    .is_some_and(|m| m.values().all(Value::is_array));
            if chained && serde_json::to_string(&tree).ok().as_deref() == Some(state) {
                return envelope_2(state, &crate::support::engine::digest_of(&tree));
            }
        }
    }
    format!(
        "{PREFIX}{}\",\"state\":{state}{SUFFIX}",
        sha256_hex(state.as_bytes())
    )
    .into_bytes()
}

/// The version 2 envelope of `state` with digest `digest`.
fn envelope_2(state: &str, digest: &str) -> Vec<u8> {
    format!(
        "{PREFIX_2}{digest}\",\"format\":\"streamforge-checkpoint\",\"state\":{state}{SUFFIX_2}"
    )
    .into_bytes()
}

/// The envelope of raw state bytes (not necessarily UTF-8) with their checksum.
fn envelope_bytes(state: &[u8]) -> Vec<u8> {
    let mut out = format!("{PREFIX}{}\",\"state\":", sha256_hex(state)).into_bytes();
    out.extend_from_slice(state);
    out.extend_from_slice(SUFFIX.as_bytes());
    out
}

/// A path into a JSON tree.
#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

fn paths(v: &Value, at: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    out.push(at.clone());
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(Seg::Index(i));
                paths(item, at, out);
                at.pop();
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                at.push(Seg::Key(k.clone()));
                paths(item, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn get<'a>(v: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, s| match s {
        Seg::Key(k) => v.get(k),
        Seg::Index(i) => v.get(*i),
    })
}

fn get_mut<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, s| match s {
        Seg::Key(k) => v.get_mut(k),
        Seg::Index(i) => v.get_mut(*i),
    })
}

/// One valid checkpoint, taken apart for mutation.
struct Ck {
    envelope: Vec<u8>,
    state: String,
    tree: Value,
    paths: Vec<Vec<Seg>>,
    /// Byte spans of the state's integer tokens.
    ints: Vec<(usize, usize)>,
    /// Paths of the non-empty arrays, the strings, the non-empty objects.
    lists: Vec<Vec<Seg>>,
    strings: Vec<Vec<Seg>>,
    objects: Vec<Vec<Seg>>,
    /// Every string value of the state.
    texts: Vec<String>,
}

impl Ck {
    fn new(bytes: Vec<u8>) -> Ck {
        let text = String::from_utf8(bytes.clone()).expect("UTF-8 envelope");
        let start = text.find(r#""state":"#).expect("state") + r#""state":"#.len();
        assert!(
            text.starts_with(PREFIX_2) && text.ends_with(SUFFIX_2),
            "{text}"
        );
        let state = text[start..text.len() - SUFFIX_2.len()].to_string();
        let tree: Value = serde_json::from_str(&state).expect("state JSON");
        assert_eq!(
            envelope_2(&state, &crate::support::engine::digest_of(&tree)),
            bytes,
            "the envelope is canonical"
        );
        // serde_json writes objects with sorted keys and no whitespace: the
        // canonical form, so a mutated tree is hashed as restore hashes it.
        assert_eq!(
            tree.to_string(),
            state,
            "the state re-serializes canonically"
        );
        let mut all = Vec::new();
        paths(&tree, &mut Vec::new(), &mut all);
        let sb = state.as_bytes();
        let mut ints = Vec::new();
        let mut i = 0;
        while i < sb.len() {
            let c = sb[i];
            let prev = if i == 0 { b' ' } else { sb[i - 1] };
            if (c.is_ascii_digit() || c == b'-') && matches!(prev, b':' | b',' | b'[') {
                let s = i;
                i += 1;
                while i < sb.len() && sb[i].is_ascii_digit() {
                    i += 1;
                }
                ints.push((s, i));
            } else if c == b'"' {
                // skip the string (its digits are not integers)
                i += 1;
                while i < sb.len() && sb[i] != b'"' {
                    i += if sb[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            } else {
                i += 1;
            }
        }
        let select = |f: &dyn Fn(&Value) -> bool| -> Vec<Vec<Seg>> {
            all.iter()
                .filter(|p| get(&tree, p).is_some_and(f))
                .cloned()
                .collect()
        };
        let lists = select(&|v| v.as_array().is_some_and(|a| !a.is_empty()));
        let strings = select(&Value::is_string);
        let objects = select(&|v| v.as_object().is_some_and(|m| !m.is_empty()));
        let texts = strings
            .iter()
            .filter_map(|p| Some(get(&tree, p)?.as_str()?.to_string()))
            .collect();
        Ck {
            envelope: bytes,
            state,
            tree,
            paths: all,
            ints,
            lists,
            strings,
            objects,
            texts,
        }
    }

    /// A random path: uniform over all nodes, or a walk from the root that
    /// stops early (so whole parts are picked often enough).
    fn pick(&self, rng: &mut Rng) -> Vec<Seg> {
        if rng.below(2) == 0 {
            return self.paths[rng.below(self.paths.len() as u64) as usize].clone();
        }
        let mut path = Vec::new();
        let mut v = &self.tree;
        loop {
            let children: Vec<Seg> = match v {
                Value::Array(items) => (0..items.len()).map(Seg::Index).collect(),
                Value::Object(map) => map.keys().map(|k| Seg::Key(k.clone())).collect(),
                _ => Vec::new(),
            };
            if children.is_empty() || (!path.is_empty() && rng.below(3) == 0) {
                return path;
            }
            let s = children[rng.below(children.len() as u64) as usize].clone();
            v = get(v, std::slice::from_ref(&s)).expect("child");
            path.push(s);
        }
    }
}

/// The state keys of version 1.
const PARTS: [&str; 6] = [
    "changelog",
    "clock",
    "late",
    "pipeline",
    "sources",
    "windows",
];

/// A replacement for the integer token `old`.
fn new_integer(rng: &mut Rng, old: &str, others: &[&str]) -> String {
    let n: i128 = old.parse().unwrap_or(0);
    let steps = [1i128, 2, 3, 4, 8, 10];
    match rng.below(12) {
        0..=3 => {
            let d = steps[rng.below(steps.len() as u64) as usize];
            if rng.below(2) == 0 {
                (n + d).to_string()
            } else {
                (n - d).to_string()
            }
        }
        4 => ["0", "-1", "1"][rng.below(3) as usize].to_string(),
        5 => (-n).to_string(),
        6 => n.saturating_mul(2).to_string(),
        7 => (n / 2).to_string(),
        8 | 9 => others[rng.below(others.len() as u64) as usize].to_string(),
        _ => {
            let extremes = [
                "9223372036854775807",
                "-9223372036854775808",
                "9223372036854775808",
                "-9223372036854775809",
                "18446744073709551615",
                "18446744073709551616",
                "9223372032559808511",
                "9223372032559808512",
                "1267650600228229401496703205376",
                "1267650600228229401496703205377",
                "-1267650600228229401496703205376",
                "-1267650600228229401496703205377",
                "170141183460469231731687303715884105727",
                "-170141183460469231731687303715884105728",
                "170141183460469231731687303715884105728",
                "99999999999999999999999999999999999999999",
                "4294967295",
                "4294967296",
                "65535",
                "65536",
            ];
            extremes[rng.below(extremes.len() as u64) as usize].to_string()
        }
    }
}

/// A replacement string: another one of the state, or a variant.
fn new_string(rng: &mut Rng, old: &str, others: &[String]) -> String {
    match rng.below(7) {
        0..=2 => others[rng.below(others.len() as u64) as usize].clone(),
        3 => String::new(),
        4 => format!("{old}x"),
        5 => old.to_uppercase(),
        _ => ["p3", "k9", "e999", "\u{0}", "é", "\\", "w"][rng.below(7) as usize].to_string(),
    }
}

/// The next mutated envelope: its kind (for messages) and its bytes.
fn mutation(rng: &mut Rng, cks: &[Ck; 2]) -> (&'static str, Vec<u8>) {
    let which = rng.below(2) as usize;
    let (base, other) = (&cks[which], &cks[1 - which]);
    match rng.below(100) {
        // a byte of the envelope flipped or replaced (checksum as it was)
        0..=11 => {
            let mut b = base.envelope.clone();
            let i = rng.below(b.len() as u64) as usize;
            if rng.below(2) == 0 {
                b[i] ^= 1 << rng.below(8);
            } else {
                b[i] = rng.below(256) as u8;
            }
            ("envelope byte", b)
        }
        // a truncation
        12..=17 => {
            let b = &base.envelope;
            let to = rng.below(b.len() as u64) as usize;
            ("truncation", b[..to].to_vec())
        }
        // a byte of the state replaced, checksum recomputed
        18..=29 => {
            let mut b = base.state.clone().into_bytes();
            let i = rng.below(b.len() as u64) as usize;
            let set = b"{}[],:\"0123456789-aenrtuflsz\\ ";
            b[i] = match rng.below(3) {
                0 => set[rng.below(set.len() as u64) as usize],
                1 => b[i] ^ (1 << rng.below(7)),
                _ => rng.below(256) as u8,
            };
            ("state byte", envelope_bytes(&b))
        }
        // top-level parts mixed between the two states
        30..=34 => {
            let mut tree = base.tree.clone();
            let mut mixed = false;
            for part in PARTS {
                if rng.below(2) == 0 {
                    tree[part] = other.tree[part].clone();
                    mixed = true;
                }
            }
            if !mixed {
                let part = PARTS[rng.below(PARTS.len() as u64) as usize];
                tree[part] = other.tree[part].clone();
            }
            ("parts mixed", envelope(&tree.to_string()))
        }
        // a sub-tree replaced by the other state's at the same path
        35..=46 => {
            let mut tree = base.tree.clone();
            let path = base.pick(rng);
            let with = match get(&other.tree, &path) {
                Some(v) if path.is_empty() || v != get(&base.tree, &path).unwrap() => v.clone(),
                _ => get(&other.tree, &other.pick(rng)).unwrap().clone(),
            };
            *get_mut(&mut tree, &path).unwrap() = with;
            ("sub-tree swapped", envelope(&tree.to_string()))
        }
        // a sub-tree moved to another path (of either state)
        47..=51 => {
            let mut tree = base.tree.clone();
            let path = base.pick(rng);
            let from = if rng.below(2) == 0 { base } else { other };
            let with = get(&from.tree, &from.pick(rng)).unwrap().clone();
            *get_mut(&mut tree, &path).unwrap() = with;
            ("sub-tree moved", envelope(&tree.to_string()))
        }
        // an integer token replaced, checksum recomputed
        52..=76 => {
            let s = &base.state;
            let others: Vec<&str> = base.ints.iter().map(|&(a, b)| &s[a..b]).collect();
            let (a, b) = base.ints[rng.below(base.ints.len() as u64) as usize];
            let mut state = s.clone();
            let mut x = new_integer(rng, &s[a..b], &others);
            // sometimes a second one (e.g. count and sum together)
            if rng.below(4) == 0 {
                let (c, d) = base.ints[rng.below(base.ints.len() as u64) as usize];
                if d <= a {
                    let y = new_integer(rng, &s[c..d], &others);
                    state.replace_range(a..b, &x);
                    state.replace_range(c..d, &y);
                    return ("two integers", envelope(&state));
                }
                if c >= b {
                    let y = new_integer(rng, &s[c..d], &others);
                    state.replace_range(c..d, &y);
                    state.replace_range(a..b, &x);
                    return ("two integers", envelope(&state));
                }
            }
            if x == s[a..b] {
                x = format!("{x}0");
            }
            state.replace_range(a..b, &x);
            ("integer", envelope(&state))
        }
        // a list edited
        77..=91 => {
            let path = &base.lists[rng.below(base.lists.len() as u64) as usize];
            let mut tree = base.tree.clone();
            let extra = get(&other.tree, path)
                .and_then(Value::as_array)
                .and_then(|a| a.get(rng.below(a.len().max(1) as u64) as usize))
                .cloned();
            let list = get_mut(&mut tree, path).unwrap().as_array_mut().unwrap();
            let n = list.len();
            let i = rng.below(n as u64) as usize;
            let j = rng.below(n as u64) as usize;
            match rng.below(7) {
                0 | 1 => {
                    list.remove(i);
                }
                2 => {
                    let x = list[i].clone();
                    list.insert(j, x);
                }
                3 => list.swap(i, j),
                4 => match extra {
                    Some(x) => list.insert(j, x),
                    None => list.truncate(i),
                },
                5 => list.clear(),
                _ => list.reverse(),
            }
            ("list edited", envelope(&tree.to_string()))
        }
        // a string or an object key replaced
        92..=96 => {
            let strings = &base.texts;
            let mut tree = base.tree.clone();
            if rng.below(3) == 0 {
                let path = &base.objects[rng.below(base.objects.len() as u64) as usize];
                let map = get_mut(&mut tree, path).unwrap().as_object_mut().unwrap();
                let keys: Vec<String> = map.keys().cloned().collect();
                let k = &keys[rng.below(keys.len() as u64) as usize];
                let v = map.remove(k).unwrap();
                map.insert(new_string(rng, k, strings), v);
                return ("key renamed", envelope(&tree.to_string()));
            }
            let path = &base.strings[rng.below(base.strings.len() as u64) as usize];
            let node = get_mut(&mut tree, path).unwrap();
            let old = node.as_str().unwrap().to_string();
            *node = Value::String(new_string(rng, &old, strings));
            ("string", envelope(&tree.to_string()))
        }
        // the envelope itself
        _ => {
            let sha = sha256_hex(base.state.as_bytes());
            let s = &base.state;
            let b = match rng.below(12) {
                0 => {
                    let v: Value = serde_json::from_slice(&base.envelope).unwrap();
                    serde_json::to_vec_pretty(&v).unwrap()
                }
                1 => format!(
                    r#"{{"version":1,"state":{s},"sha256":"{sha}","format":"streamforge-checkpoint"}}"#
                )
                .into_bytes(),
                2 => format!(
                    r#"{{"format":"streamforge-checkpoint","sha256":"{}","state":{s},"version":1}}"#,
                    sha.to_uppercase()
                )
                .into_bytes(),
                3 => format!(
                    r#"{{"format":"streamforge-checkpoint","sha256":"{sha}","state":{s},"version":2}}"#
                )
                .into_bytes(),
                4 => format!(
                    r#"{{"format":"streamforge-checkpoint","sha256":"{sha}","state":{s},"version":"1"}}"#
                )
                .into_bytes(),
                5 => format!(
                    r#"{{"format":"streamforge-checkpoint","sha256":"{sha}","state":{s},"version":1.0}}"#
                )
                .into_bytes(),
                6 => format!(
                    r#"{{"format":"streamforge-patterns-checkpoint","sha256":"{sha}","state":{s},"version":1}}"#
                )
                .into_bytes(),
                7 => format!(
                    r#"{{"format":"streamforge-checkpoint","sha256":"{sha}","state":{s},"version":1,"extra":0}}"#
                )
                .into_bytes(),
                8 => format!(r#"{{"format":"streamforge-checkpoint","sha256":"{sha}","version":1}}"#)
                    .into_bytes(),
                9 => {
                    // a state key repeated (same checksum text)
                    let dup = s.replacen("{\"changelog\"", "{\"late\":[],\"changelog\"", 1);
                    envelope(&dup)
                }
                10 => format!(" \n{}\t", String::from_utf8_lossy(&base.envelope)).into_bytes(),
                _ => {
                    let spaced = s.replace(',', " , ").replace(':', " :\n");
                    format!(
                        r#"{{"format":"streamforge-checkpoint","sha256":"{sha}","state":{spaced},"version":1}}"#
                    )
                    .into_bytes()
                }
            };
            ("envelope", b)
        }
    }
}

/// A POST with raw bytes: status, content type, body.
fn post_bytes(s: &Server, path: &str, body: Vec<u8>) -> (u16, String, String) {
    let r = s
        .client
        .post(s.url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .unwrap_or_else(|e| panic!("POST {path}: {e} (server log: {})", s.stderr()));
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (status, ct, r.text().expect("body"))
}

/// A 2xx, or a 4xx problem: never a 5xx.
fn no_failure(what: &str, r: &Resp) {
    assert!(r.status < 500, "{what}: {} {}", r.status, r.body);
    if r.status >= 400 {
        assert_eq!(
            r.content_type, "application/problem+json",
            "{what}: {}",
            r.body
        );
    }
}

/// Whether the server process is still running (not exited, not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

fn healthy(s: &Server, at: usize) {
    assert!(alive(s.pid()), "server exited at case {at}: {}", s.stderr());
    assert_eq!(s.get("/healthz").status, 200, "healthz at case {at}");
    let st = s.get("/status");
    assert_eq!(st.status, 200, "status at case {at}: {}", st.body);
}

/// Builds the two checkpoints: returns their envelopes.
fn build_checkpoints(s: &Server) -> [Vec<u8>; 2] {
    let batch = |items: &[(&str, i64, &str, &str, i64, i64)]| {
        let items: Vec<String> = items
            .iter()
            .map(|&(p, o, id, k, ts, v)| delivery(p, Some(o), id, k, ts, v))
            .collect();
        s.ok("/events", &format!("[{}]", items.join(",")));
    };
    let advance = |p: &str, w: i64| {
        s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":{w}}}"#),
        );
    };
    let idle = |p: &str| {
        let r = s.post_empty(&format!("/partitions/{p}/idle"));
        assert_eq!(r.status, 200, "{}", r.body);
    };
    let checkpoint = || {
        let r = s.post_empty("/checkpoints");
        assert_eq!(r.status, 201, "{}", r.body);
        let id = r.json()["id"].as_i64().unwrap();
        let r = s
            .client
            .get(s.url(&format!("/checkpoints/{id}")))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.bytes().unwrap().to_vec()
    };

    batch(&[
        ("p0", 0, "e1", "k1", 1, 5),
        ("p0", 1, "e2", "k2", 3, -2),
        ("p0", 2, "e3", "k1", 12, 7),
        ("p1", 0, "e4", "k3", 4, 1),
        ("p1", 1, "e5", "k1", 2, 10),
        ("p2", 0, "e6", "k2", 20, 3),
    ]);
    // a duplicate on another partition, an identical redelivery
    batch(&[("p1", 2, "e1", "k1", 1, 5), ("p0", 0, "e1", "k1", 1, 5)]);
    advance("p0", 15);
    advance("p1", 15);
    advance("p2", 15);
    // e7 is late (5 + 2 < 15), e8 not, e9 joins k1's session at 12
    batch(&[
        ("p2", 1, "e7", "k1", 5, 4),
        ("p2", 2, "e8", "k2", 13, -6),
        ("p0", 3, "e9", "k1", 14, 1000),
    ]);
    idle("p2");
    advance("p0", 22);
    advance("p1", 18);
    batch(&[
        ("p0", 4, "e10", "k4", 19, 0),
        ("p1", 3, "e11", "k1", 24, -1000),
        ("p1", 4, "e12", "k2", 30, 123456),
        ("p0", 5, "e13", "k3", 17, 9),
        ("p2", 3, "e2", "k2", 3, -2),
    ]);
    let a = checkpoint();

    advance("p2", 10);
    batch(&[
        ("p0", 6, "e14", "k1", 33, 2),
        ("p1", 5, "e15", "k1", 35, 3),
        ("p2", 4, "e16", "k5", 16, -4),
        ("p2", 5, "e14", "k1", 33, 2),
    ]);
    advance("p0", 40);
    advance("p1", 41);
    advance("p2", 39);
    // late against 39: e17 (10 + 2 < 39); e18 within lateness
    batch(&[
        ("p0", 7, "e17", "k2", 10, 8),
        ("p1", 6, "e18", "k3", 38, 11),
        ("p1", 7, "e19", "k4", 50, -7),
    ]);
    idle("p0");
    advance("p1", 47);
    batch(&[
        ("p2", 6, "e20", "k1", 44, 6),
        ("p2", 7, "e19", "k4", 50, -7),
    ]);
    let b = checkpoint();
    assert_ne!(a, b);
    [a, b]
}

/// Uses a state restored from a crafted envelope: an ingest on every
/// partition, an advance, an idle and a read answer a 2xx or a 4xx problem;
/// with `round_trip`, the state's own checkpoint must restore.
fn exercise(s: &Server, case: usize, round_trip: bool) {
    let events = format!(
        "[{},{},{}]",
        delivery("p0", None, &format!("x{case}a"), "k1", 36, 1),
        delivery("p1", None, &format!("x{case}b"), "k2", 11, -3),
        delivery("p2", None, &format!("x{case}c"), "k9", 60, 7),
    );
    no_failure("ingest", &s.post("/events", &events));
    no_failure(
        "advance",
        &s.post("/watermarks", r#"{"partition":"p1","watermark":55}"#),
    );
    no_failure("idle", &s.post_empty("/partitions/p2/idle"));
    let r = s.get("/results");
    assert_eq!(r.status, 200, "results after case {case}: {}", r.body);
    if round_trip {
        let r = s.post_empty("/checkpoints");
        assert_eq!(r.status, 201, "checkpoint after case {case}: {}", r.body);
        let id = r.json()["id"].as_i64().unwrap();
        let r = s.post_empty(&format!("/checkpoints/{id}/restore"));
        assert_eq!(
            r.status, 200,
            "own checkpoint after case {case}: {}",
            r.body
        );
    }
}

/// The rule family of a restore's `detail` (docs/checkpoint.md, "Restore").
fn family(detail: &str) -> &'static str {
    const FAMILIES: [&str; 13] = [
        "malformed",
        "unknown checkpoint format",
        "unsupported checkpoint version",
        "checksum mismatch",
        "digest mismatch",
        "state.pipeline",
        "incompatible pipeline",
        "clock.",
        "sources",
        "windows[",
        "changelog",
        "late[",
        "a string escape",
    ];
    FAMILIES
        .into_iter()
        .find(|f| detail.starts_with(f))
        .unwrap_or("other")
}

#[test]
fn mutated_checkpoints_never_fail_the_server() {
    let dir = tempdir();
    let pipeline = dir.path().join("pipeline.json");
    std::fs::write(&pipeline, PIPELINE).unwrap();
    let db = dir.path().join("restore.db");
    let s = start(
        &db,
        &[
            "--pipeline",
            pipeline.to_str().unwrap(),
            "--shards",
            "2",
            "--checkpoint-every",
            "0",
        ],
    );
    let [a, b] = build_checkpoints(&s);
    let cks = [Ck::new(a), Ck::new(b)];
    for ck in &cks {
        let (status, _, body) = post_bytes(&s, "/restore", ck.envelope.clone());
        assert_eq!(status, 200, "the valid checkpoint restores: {body}");
    }

    let began = Instant::now();
    let mut rng = Rng(0x0c4e_c4b0_1d5e_ed22);
    let (mut accepted, mut rejected, mut round_trips) = (0usize, 0usize, 0usize);
    let mut kinds: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut families: BTreeMap<&str, usize> = BTreeMap::new();
    for case in 0..CASES {
        let (kind, body) = mutation(&mut rng, &cks);
        let unchanged = cks.iter().any(|ck| ck.envelope == body);
        let (status, ct, answer) = post_bytes(&s, "/restore", body.clone());
        let tally = kinds.entry(kind).or_default();
        match status {
            200 => {
                let v: Value = serde_json::from_str(&answer).unwrap_or_else(|e| {
                    panic!("case {case} ({kind}): 200 without JSON ({e}): {answer}")
                });
                let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
                assert_eq!(keys, ["late", "sequence", "watermark"], "{answer}");
                assert_eq!(ct, "application/json");
                accepted += 1;
                tally.0 += 1;
                if !unchanged {
                    let round_trip = accepted % 10 == 0;
                    round_trips += usize::from(round_trip);
                    exercise(&s, case, round_trip);
                }
            }
            422 => {
                assert_eq!(ct, "application/problem+json", "case {case}: {answer}");
                let v: Value = serde_json::from_str(&answer).expect("problem JSON");
                assert_eq!(v["code"], "invalid_checkpoint", "case {case}: {answer}");
                let detail = v["detail"].as_str().unwrap_or_default();
                assert!(!detail.is_empty(), "case {case}: {answer}");
                *families.entry(family(detail)).or_default() += 1;
                rejected += 1;
                tally.1 += 1;
            }
            _ => panic!(
                "case {case} ({kind}): {status} {answer}\nenvelope: {}",
                String::from_utf8_lossy(&body)
            ),
        }
        if case % 250 == 249 {
            healthy(&s, case);
        }
    }
    healthy(&s, CASES);
    // the service still takes a valid checkpoint and processes on
    let (status, _, body) = post_bytes(&s, "/restore", cks[1].envelope.clone());
    assert_eq!(status, 200, "{body}");
    exercise(&s, CASES, true);
    let log = s.stderr();
    assert!(!log.contains("panicked"), "server log: {log}");
    let took = began.elapsed();
    eprintln!(
        "{CASES} mutated checkpoints in {took:.1?}: {accepted} accepted ({round_trips} round trips), {rejected} rejected\nby mutation (accepted, rejected): {kinds:?}\nrejections by rule: {families:?}"
    );
    assert_eq!(accepted + rejected, CASES);
    assert!(accepted > 100 && rejected > 5000, "{accepted} / {rejected}");
    // The mutations reach every part of validation, not just the parser
    // and the checksum.
    for f in [
        "malformed",
        "checksum mismatch",
        "digest mismatch",
        "state.pipeline",
        "incompatible pipeline",
        "clock.",
        "sources",
        "windows[",
        "changelog",
        "late[",
    ] {
        assert!(
            families.get(f).is_some_and(|&n| n > 0),
            "no {f:?} rejection: {families:?}"
        );
    }
}

/// A restore by body larger than `--max-body-bytes` is read as it streams
/// (staged on disk, checked, put in place at once). It must decide like
/// the whole-body restore: the same mutated checkpoints accepted (with the
/// same answers and the same state after) and refused (`invalid_checkpoint`,
/// nothing changed). Server W restores in memory, server S streams every
/// body (its body limit is 64 bytes, its restore limit 100 MB).
#[test]
fn streamed_restores_decide_as_whole_ones() {
    let dir = tempdir();
    let pipeline = dir.path().join("pipeline.json");
    std::fs::write(&pipeline, PIPELINE).unwrap();
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "--pipeline",
            pipeline.to_str().unwrap(),
            "--checkpoint-every",
            "0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let wa = args(&[]);
    let sa = args(&["--max-body-bytes", "64", "--max-restore-bytes", "100000000"]);
    let w = start(
        &dir.path().join("w.db"),
        &wa.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let s = start(
        &dir.path().join("s.db"),
        &sa.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let [a, b] = build_checkpoints(&w);
    let cks = [Ck::new(a), Ck::new(b)];
    let state = |x: &Server| (x.get("/status").body, x.get("/results").body);
    let mut rng = Rng(0x5eed_5742_ea4d);
    let (mut accepted, mut rejected) = (0, 0);
    for case in 0..1200 {
        let body = if case < 2 {
            cks[case].envelope.clone()
        } else {
            mutation(&mut rng, &cks).1
        };
        let (ws, _, wb) = post_bytes(&w, "/restore", body.clone());
        let (ss, sct, sb) = post_bytes(&s, "/restore", body.clone());
        assert_eq!(
            ws,
            ss,
            "case {case}: whole {ws} {wb} / streamed {ss} {sb}\nenvelope: {}",
            String::from_utf8_lossy(&body)
        );
        match ss {
            200 => {
                accepted += 1;
                assert_eq!(wb, sb, "case {case}: answers");
                assert_eq!(state(&w), state(&s), "case {case}: state after");
            }
            422 => {
                rejected += 1;
                assert_eq!(sct, "application/problem+json");
                let v: Value = serde_json::from_str(&sb).expect("problem JSON");
                assert_eq!(v["code"], "invalid_checkpoint", "case {case}: {sb}");
                assert!(!v["detail"].as_str().unwrap_or_default().is_empty());
                assert_eq!(state(&w), state(&s), "case {case}: a refusal changed state");
            }
            other => panic!("case {case}: {other} {sb}"),
        }
    }
    assert!(accepted > 10 && rejected > 500, "{accepted} / {rejected}");
    // Both checkpoint alike (S takes no other calls: its body limit is
    // 64 bytes).
    let cp = |x: &Server| {
        let id = x.post_empty("/checkpoints").json()["id"].as_i64().unwrap();
        x.get(&format!("/checkpoints/{id}")).body
    };
    assert_eq!(cp(&w), cp(&s));
    assert!(!s.stderr().contains("panicked"));
}
