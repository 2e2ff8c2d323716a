//! Checkpoints: the canonical envelope and strict restore.
//!
//! The envelope is the canonical JSON (keys sorted by code point, no
//! whitespace, integers only) of
//! `{"format": "streamforge-patterns-checkpoint", "sha256": H, "state": S,
//! "version": 1}` with `H` the lower-case hex SHA-256 of the canonical
//! bytes of `S`:
//!
//! ```text
//! S = {"buffer":       [Event, ...]      buffered events, by ordinal
//!      "captured":     [Event, ...]      every event a branch or wait holds, by ordinal
//!      "next_ordinal": N,
//!      "patterns":     [Pattern, ...]    by name, defaults written out
//!      "sequence":     S,                last output seq (0 before any)
//!      "states":       [State, ...]      by (pattern, key), none empty
//!      "watermark":    W}                -1 before the first advance
//! Event   = {"fields": [[name, Value], ...] (as pushed), "id", "key", "kind",
//!            "ordinal", "time"}
//! Value   = integer | {"decimal": "text"} | {"double": "<16 hex digits of the bits>"}
//!           | string | true | false
//! State   = {"branches": [Branch, ...], "key", "pattern", "waits": [Wait, ...]}
//! Branch  = {"captures": [[ordinal, ...] per stage], "deadline": D, "stage": s}
//! Wait    = {"captures": [[ordinal, ...] per stage], "deadline": D}
//! ```
//!
//! Branches are sorted by (selection key, stage), waits by selection key.
//! The same state always gives the same bytes, whatever order the engine
//! holds things in.

mod restore;
mod tree;

use std::collections::BTreeMap;

use crate::branch::{Branch, Caps, Node};
use crate::document::write_patterns;
use crate::engine::Engine;
use crate::event::Event;
use crate::selection::order;
use crate::value::{self, Syntax};
use streamforge_canonical::sha256_hex;
use streamforge_canonical::writer::{int, string};

pub(crate) use restore::restore;

/// The envelope's format name.
pub const FORMAT: &str = "streamforge-patterns-checkpoint";

/// Writes an event of the state.
pub(crate) fn write_event(buf: &mut Vec<u8>, ordinal: u64, e: &Event) {
    buf.extend_from_slice(b"{\"fields\":[");
    for (i, (name, v)) in e.fields_ref().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.push(b'[');
        string(buf, &String::from_utf8_lossy(name));
        buf.push(b',');
        value::write_ref(buf, v, Syntax::State);
        buf.push(b']');
    }
    buf.extend_from_slice(b"],\"id\":");
    string(buf, e.id());
    buf.extend_from_slice(b",\"key\":");
    string(buf, e.key());
    buf.extend_from_slice(b",\"kind\":");
    string(buf, e.kind());
    buf.extend_from_slice(b",\"ordinal\":");
    int(buf, ordinal);
    buf.extend_from_slice(b",\"time\":");
    int(buf, e.time);
    buf.push(b'}');
}

fn write_captures(buf: &mut Vec<u8>, caps: &Caps, stages: usize) {
    let nodes = caps.in_order();
    buf.push(b'[');
    let mut at = 0;
    for stage in 0..stages {
        if stage > 0 {
            buf.push(b',');
        }
        buf.push(b'[');
        let mut first = true;
        while let Some(n) = nodes.get(at).filter(|n| usize::from(n.stage) == stage) {
            if !first {
                buf.push(b',');
            }
            first = false;
            int(buf, n.ordinal);
            at += 1;
        }
        buf.push(b']');
    }
    buf.push(b']');
}

/// The canonical envelope of the engine's state.
pub(crate) fn take(e: &Engine) -> Vec<u8> {
    let mut s = Vec::with_capacity(4096);
    // buffered events
    s.extend_from_slice(b"{\"buffer\":[");
    for (i, p) in e.buffer.by_ordinal().into_iter().enumerate() {
        if i > 0 {
            s.push(b',');
        }
        write_event(&mut s, p.ordinal, &p.event);
    }
    // the live (pattern, key) states, by pattern name then key
    let mut live: Vec<(usize, u32)> = Vec::new();
    for (p, states) in e.states.iter().enumerate() {
        let start = live.len();
        for (k, st) in states.iter().enumerate() {
            if !st.is_empty() {
                live.push((p, k as u32));
            }
        }
        live[start..].sort_by(|a, b| e.keys.name(a.1).cmp(e.keys.name(b.1)));
    }
    // every captured event, once
    let mut captured: BTreeMap<u64, &Node> = BTreeMap::new();
    for &(p, k) in &live {
        let st = &e.states[p][k as usize];
        let all = st.branches.iter().map(|b| &b.caps).chain(st.waits.iter());
        for caps in all {
            for n in caps.nodes() {
                captured.entry(n.ordinal).or_insert(n);
            }
        }
    }
    s.extend_from_slice(b"],\"captured\":[");
    for (i, n) in captured.values().enumerate() {
        if i > 0 {
            s.push(b',');
        }
        write_event(&mut s, n.ordinal, &n.event);
    }
    s.extend_from_slice(b"],\"next_ordinal\":");
    int(&mut s, e.next_ordinal);
    s.extend_from_slice(b",\"patterns\":");
    write_patterns(&mut s, &e.doc.patterns, Syntax::State);
    s.extend_from_slice(b",\"sequence\":");
    int(&mut s, e.sequence);
    s.extend_from_slice(b",\"states\":[");
    for (i, &(p, k)) in live.iter().enumerate() {
        if i > 0 {
            s.push(b',');
        }
        let st = &e.states[p][k as usize];
        let pattern = &e.doc.patterns[p];
        let stages = pattern.stages.len();
        let mut branches: Vec<&Branch> = st.branches.iter().collect();
        branches.sort_by(|a, b| a.caps.cmp_key(&b.caps, stages).then(a.wait.cmp(&b.wait)));
        s.extend_from_slice(b"{\"branches\":[");
        for (j, Branch { wait, caps }) in branches.iter().enumerate() {
            if j > 0 {
                s.push(b',');
            }
            s.extend_from_slice(b"{\"captures\":");
            write_captures(&mut s, caps, stages);
            s.extend_from_slice(b",\"deadline\":");
            int(&mut s, caps.start + pattern.within);
            s.extend_from_slice(b",\"stage\":");
            int(&mut s, *wait);
            s.push(b'}');
        }
        s.extend_from_slice(b"],\"key\":");
        string(&mut s, e.keys.name(k));
        s.extend_from_slice(b",\"pattern\":");
        string(&mut s, &pattern.name);
        s.extend_from_slice(b",\"waits\":[");
        let mut waits = st.waits.to_vec();
        order(&mut waits, stages);
        for (j, caps) in waits.iter().enumerate() {
            if j > 0 {
                s.push(b',');
            }
            s.extend_from_slice(b"{\"captures\":");
            write_captures(&mut s, caps, stages);
            s.extend_from_slice(b",\"deadline\":");
            int(&mut s, caps.start + pattern.within);
            s.push(b'}');
        }
        s.extend_from_slice(b"]}");
    }
    s.extend_from_slice(b"],\"watermark\":");
    int(&mut s, e.watermark);
    s.push(b'}');
    envelope(&s)
}

/// The `sha256` field of an envelope as [`envelope`] writes it (right
/// after the format name), without reading the rest: the digest a stored
/// pattern checkpoint is listed with. `None` for anything else.
pub fn envelope_digest(envelope: &[u8]) -> Option<String> {
    let mut prefix = b"{\"format\":".to_vec();
    string(&mut prefix, FORMAT);
    prefix.extend_from_slice(b",\"sha256\":\"");
    let rest = envelope.strip_prefix(prefix.as_slice())?;
    let hex = rest.get(..64)?;
    (rest.get(64) == Some(&b'"')
        && hex
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)))
    .then(|| String::from_utf8_lossy(hex).into_owned())
}

/// Wraps canonical state bytes into the canonical envelope.
pub(crate) fn envelope(state: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(state.len() + 160);
    out.extend_from_slice(b"{\"format\":");
    string(&mut out, FORMAT);
    out.extend_from_slice(b",\"sha256\":");
    string(&mut out, &sha256_hex(state));
    out.extend_from_slice(b",\"state\":");
    out.extend_from_slice(state);
    out.extend_from_slice(b",\"version\":1}");
    out
}

impl crate::engine::Engine {
    /// The canonical checkpoint envelope.
    pub fn checkpoint(&self) -> Vec<u8> {
        take(self)
    }

    /// Restores an envelope whose patterns equal `doc`'s; `doc`'s limits
    /// are used. The error names the rule broken.
    pub fn restore(
        envelope: &[u8],
        doc: &crate::Document,
    ) -> Result<crate::engine::Engine, String> {
        restore(envelope, restore::Expect::Same(doc))
    }

    /// Restores an envelope with the patterns it holds, whatever they are,
    /// and `limits` (a service's recovery base, whose patterns may have
    /// changed since the service started). The error names the rule broken.
    pub fn restore_own(
        envelope: &[u8],
        limits: crate::Limits,
    ) -> Result<crate::engine::Engine, String> {
        restore(envelope, restore::Expect::Own(limits))
    }
}
