//! `streamforge verify FILE`: validates a checkpoint envelope offline with the
//! engine's own restore (every rule of docs/checkpoint.md, on the embedded
//! pipeline) and prints what it holds, or exactly why it is invalid.
//! `streamforge patterns verify FILE [--patterns DOC]`: the same for a pattern
//! checkpoint, whose envelope holds its patterns but is restored only against
//! the document of the service that took it (docs/patterns.md, "Checkpoints").

use std::fmt::Write as _;
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
            super::patterns::load_document(d)?,
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
    let _ = writeln!(
        out,
        "valid pattern checkpoint {} ({} bytes, sha256 {})",
        path.display(),
        bytes.len(),
        sha256_hex(&bytes)
    );
    let names: Vec<String> = document.pattern_names().iter().map(|n| name(n)).collect();
    let _ = writeln!(out, "patterns: {} ({from})", names.join(", "));
    let _ = writeln!(out, "watermark: {}", status.watermark);
    let _ = writeln!(out, "buffered: {}", status.buffered);
    let _ = writeln!(out, "next ordinal: {}", status.next_ordinal);
    let _ = writeln!(out, "sequence: {}", status.sequence);
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
    let _ = writeln!(
        out,
        "valid checkpoint {} ({} bytes, sha256 {digest})",
        path.display(),
        bytes.len()
    );
    let parts: Vec<String> = pipeline.partitions().iter().map(|s| name(s)).collect();
    let _ = writeln!(
        out,
        "pipeline: partitions {}; lateness {}",
        parts.join(", "),
        pipeline.lateness()
    );
    for (w, def) in pipeline.windows() {
        let def = match *def {
            WindowDef::Fixed { size } => format!("fixed size {size}"),
            WindowDef::Sliding { size, step } => format!("sliding size {size} step {step}"),
            WindowDef::Session { gap } => format!("session gap {gap}"),
            WindowDef::StreamTime { size } => format!("stream_time size {size}"),
        };
        let _ = writeln!(out, "  window {}: {def}", name(w));
    }
    let _ = writeln!(out, "watermark: {}", opt(p.watermark()));
    let _ = writeln!(out, "sequence: {}", p.sequence());
    let _ = writeln!(out, "live buckets: {}", p.live_buckets());
    let _ = writeln!(out, "visible rows: {}", p.results(None, None).len());
    let _ = writeln!(out, "late records: {}", p.late_len());
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
