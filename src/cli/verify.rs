//! `streamforge verify FILE`: validates a checkpoint envelope offline with the
//! engine's own restore (version 2 or 1: its digest or checksum, and every
//! rule of docs/checkpoint.md, on the embedded pipeline) and prints what it
//! holds, or exactly why it is invalid.
//! `streamforge patterns verify FILE [--patterns DOC]`: the same for a pattern
//! checkpoint, whose envelope holds its patterns but is restored only against
//! the document of the service that took it (docs/patterns.md, "Checkpoints").

use std::path::Path;

use anyhow::Context as _;

use super::text::{name, opt, table};
use crate::engine::{Processor, WindowDef};
use crate::patterns::{Document, Engine};

/// A valid envelope's `digest` (version 2) and `sha256` (version 1, and
/// pattern envelopes) fields; its state is skipped.
#[derive(serde::Deserialize, Default)]
struct Checksums {
    #[serde(default)]
    digest: Option<String>,
    #[serde(default)]
    sha256: Option<String>,
}

fn checksums(bytes: &[u8]) -> Checksums {
    serde_json::from_slice(bytes).unwrap_or_default()
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
        "valid pattern checkpoint {} ({} bytes, digest {})\n",
        path.display(),
        bytes.len(),
        checksums(&bytes).sha256.unwrap_or_default()
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
    // Valid: version 2 carries a digest, version 1 a checksum.
    let (version, checksum) = match checksums(&bytes) {
        Checksums {
            digest: Some(d), ..
        } => (2, format!("digest {d}")),
        Checksums { sha256, .. } => (1, format!("sha256 {}", sha256.unwrap_or_default())),
    };
    let pipeline = p.pipeline();
    let mut out = String::new();
    out.push_str(&format!(
        "valid checkpoint {} ({} bytes, version {version}, {checksum})\n",
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
