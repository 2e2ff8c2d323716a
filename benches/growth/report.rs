//! Where the figures go: stdout, and JSON lines with `--out`.

use std::io::{BufWriter, Write};

/// Bytes as MB (10^6 bytes).
pub fn mb(b: f64) -> f64 {
    b / 1e6
}

/// Prints to stdout and, with `--out`, writes JSON lines.
pub struct Report {
    pub out: Option<BufWriter<std::fs::File>>,
}

impl Report {
    pub fn json(&mut self, v: serde_json::Value) {
        if let Some(f) = &mut self.out {
            serde_json::to_writer(&mut *f, &v).expect("write --out");
            f.write_all(b"\n").expect("write --out");
            f.flush().expect("write --out");
        }
    }
}
