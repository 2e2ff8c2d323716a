//! `streamforge verify FILE`: validates a checkpoint envelope offline with the
//! engine's own restore (every rule of docs/checkpoint.md, on the embedded
//! pipeline) and prints what it holds, or exactly why it is invalid.
//! `streamforge patterns verify FILE [--patterns DOC]`: the same for a pattern
//! checkpoint, whose envelope holds its patterns but is restored only against
//! the document of the service that took it (docs/patterns.md, "Checkpoints").

use std::path::Path;

use anyhow::Context as _;
use sha2::{Digest, Sha256};

use super::text::{name, opt, table};
use crate::engine::{Processor, WindowDef};
use crate::patterns::{Document, Engine};

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a valid pattern checkpoint holds, as printed by `patterns verify`;
/// `doc` is the patterns document (default: the embedded demo document).
pub fn describe_patterns(path: &Path, doc: Option<&Path>) -> anyhow::Result<String> {
    let (document, from) = match doc {
        Some(d) => (
            super::input::load_document(d)?,
            format!("--patterns {}", d.display()),
        ),
        None => (
            Document::from_json(crate::config::DEFAULT_PATTERNS.as_bytes())
                .map_err(|e| anyhow::anyhow!("the embedded patterns: {e}"))?,
            "the embedded demo document; --patterns DOC for another".to_string(),
        ),
    };
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let engine = Engine::restore(&bytes, &document).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a valid pattern checkpoint for these patterns ({from}): {e}",
            path.display()
        )
    })?;
    let status = engine.status();
    let mut out = String::new();
    out.push_str(&format!(
        "valid pattern checkpoint {} ({} bytes, sha256 {})\n",
        path.display(),
        bytes.len(),
        sha256_hex(&bytes)
    ));
    let names: Vec<String> = document.pattern_names().iter().map(|n| name(n)).collect();
    out.push_str(&format!("patterns: {} ({from})\n", names.join(", ")));
    out.push_str(&format!("watermark: {}\n", status.watermark));
    out.push_str(&format!("buffered: {}\n", status.buffered));
    out.push_str(&format!("next ordinal: {}\n", status.next_ordinal));
    out.push_str(&format!("sequence: {}\n", status.sequence));
    let mut rows = vec![vec![
        "  pattern".to_string(),
        "keys".into(),
        "branches".into(),
        "waits".into(),
    ]];
    for (n, p) in &status.patterns {
        rows.push(vec![
            format!("  {}", name(n)),
            p.keys.to_string(),
            p.branches.to_string(),
            p.waits.to_string(),
        ]);
    }
    out.push_str(&table(&rows));
    Ok(out)
}

/// What a valid checkpoint holds, as printed by `verify`.
pub fn describe(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let p = Processor::from_checkpoint(&bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a valid checkpoint: {}",
            path.display(),
            e.detail()
        )
    })?;
    let digest = sha256_hex(&bytes);
    let pipeline = p.pipeline();
    let mut out = String::new();
    out.push_str(&format!(
        "valid checkpoint {} ({} bytes, sha256 {digest})\n",
        path.display(),
        bytes.len()
    ));
    let parts: Vec<String> = pipeline.partitions().iter().map(|s| name(s)).collect();
    out.push_str(&format!(
        "pipeline: partitions {}; lateness {}\n",
        parts.join(", "),
        pipeline.lateness()
    ));
    for (w, def) in pipeline.windows() {
        let def = match *def {
            WindowDef::Fixed { size } => format!("fixed size {size}"),
            WindowDef::Sliding { size, step } => format!("sliding size {size} step {step}"),
            WindowDef::Session { gap } => format!("session gap {gap}"),
            WindowDef::StreamTime { size } => format!("stream_time size {size}"),
        };
        out.push_str(&format!("  window {}: {def}\n", name(w)));
    }
    out.push_str(&format!("watermark: {}\n", opt(p.watermark())));
    out.push_str(&format!("sequence: {}\n", p.sequence()));
    out.push_str(&format!("live buckets: {}\n", p.live_buckets()));
    out.push_str(&format!("visible rows: {}\n", p.results(None, None).len()));
    out.push_str(&format!("late records: {}\n", p.late_len()));
    let mut rows = vec![vec![
        "  partition".to_string(),
        "offset".into(),
        "progress".into(),
        "idle".into(),
    ]];
    for s in p.partitions() {
        rows.push(vec![
            format!("  {}", name(&s.name)),
            s.offset.to_string(),
            opt(s.progress),
            if s.idle { "yes" } else { "no" }.into(),
        ]);
    }
    out.push_str(&table(&rows));
    Ok(out)
}
