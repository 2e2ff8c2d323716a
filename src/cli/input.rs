//! Reading the CLI's input files: a path, or standard input for `-`, and
//! the patterns documents that `patterns check` and `verify --patterns`
//! read.

use std::path::Path;

use anyhow::Context as _;

use crate::patterns::Document;

/// Reads a file, or standard input for `-`.
fn read_input(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut buf)
            .context("cannot read standard input")?;
        return Ok(buf);
    }
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Reads and validates a patterns document.
pub(super) fn load_document(path: &Path) -> anyhow::Result<Document> {
    let bytes = read_input(path)?;
    Document::from_json(&bytes)
        .map_err(|e| anyhow::anyhow!("{} is not a valid patterns document: {e}", shown_path(path)))
}

pub(super) fn shown_path(path: &Path) -> String {
    if path == Path::new("-") {
        "stdin".into()
    } else {
        path.display().to_string()
    }
}
