//! The pipeline: partitions, named windows and allowed lateness.
//!
//! docs/pipeline.md: partitions are a non-empty list of unique, non-empty names;
//! windows a non-empty map of unique, non-empty names to definitions (`fixed`
//! size > 0, `sliding` size > 0 and step > 0 with at most 10,000 windows per
//! event, `session` gap > 0, `stream_time` size > 0); lateness >= 0. Two
//! pipelines are equivalent when they have the same set of partitions, the same
//! map of window names to definitions and the same lateness: declaration order
//! never matters, so a `Pipeline` keeps partitions sorted and windows in a
//! `BTreeMap`, and equivalence is plain equality.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use streamforge_canonical::UniqueMap;

/// Most windows a sliding definition may put one event into.
pub const MAX_SLIDING_WINDOWS_PER_EVENT: i128 = 10_000;

/// A window definition. Serializes as `{"kind": "...", ...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WindowDef {
    /// Tumbling windows `[floor(t/size)*size, +size)`.
    Fixed {
        /// Width (> 0).
        size: i64,
    },
    /// Hopping windows: every `[start, start+size)` containing `t` whose start
    /// is a multiple of `step`.
    Sliding {
        /// Width (> 0).
        size: i64,
        /// Distance between starts (> 0).
        step: i64,
    },
    /// Sessions per key that merge when they intersect or touch.
    Session {
        /// Inactivity gap (> 0); each event starts `[t, t+gap)`.
        gap: i64,
    },
    /// Tumbling windows chosen by stream time instead of event time.
    StreamTime {
        /// Width (> 0).
        size: i64,
    },
}

impl WindowDef {
    /// Checks the definition's own bounds.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            WindowDef::Fixed { size } | WindowDef::StreamTime { size } if size <= 0 => {
                Err(format!("size must be > 0, got {size}"))
            }
            WindowDef::Sliding { size, step } => {
                if size <= 0 {
                    return Err(format!("size must be > 0, got {size}"));
                }
                if step <= 0 {
                    return Err(format!("step must be > 0, got {step}"));
                }
                let per_event = (size as i128 + step as i128 - 1) / step as i128;
                if per_event > MAX_SLIDING_WINDOWS_PER_EVENT {
                    return Err(format!(
                        "sliding size {size} / step {step} puts one event into {per_event} windows (at most {MAX_SLIDING_WINDOWS_PER_EVENT})"
                    ));
                }
                Ok(())
            }
            WindowDef::Session { gap } if gap <= 0 => Err(format!("gap must be > 0, got {gap}")),
            _ => Ok(()),
        }
    }
}

/// A validated pipeline in canonical form (partitions sorted, windows by name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pipeline {
    partitions: Vec<String>,
    windows: BTreeMap<String, WindowDef>,
    lateness: i64,
}

/// Why a pipeline is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineError(pub String);

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid pipeline: {}", self.0)
    }
}

impl std::error::Error for PipelineError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PipelineDoc {
    partitions: Vec<String>,
    windows: UniqueMap<WindowDef>,
    lateness: i64,
}

impl Pipeline {
    /// Validates and canonicalizes a pipeline.
    pub fn new(
        partitions: Vec<String>,
        windows: Vec<(String, WindowDef)>,
        lateness: i64,
    ) -> Result<Pipeline, PipelineError> {
        if partitions.is_empty() {
            return Err(PipelineError("partitions must be a non-empty list".into()));
        }
        let mut sorted = partitions;
        sorted.sort();
        for pair in sorted.windows(2) {
            if pair[0] == pair[1] {
                return Err(PipelineError(format!("duplicate partition {:?}", pair[0])));
            }
        }
        if sorted.iter().any(String::is_empty) {
            return Err(PipelineError("partition names must be non-empty".into()));
        }
        if windows.is_empty() {
            return Err(PipelineError("windows must be a non-empty map".into()));
        }
        let mut map = BTreeMap::new();
        for (name, def) in windows {
            if name.is_empty() {
                return Err(PipelineError("window names must be non-empty".into()));
            }
            def.validate()
                .map_err(|e| PipelineError(format!("window {name:?}: {e}")))?;
            if map.insert(name.clone(), def).is_some() {
                return Err(PipelineError(format!("duplicate window {name:?}")));
            }
        }
        if lateness < 0 {
            return Err(PipelineError(format!(
                "lateness must be >= 0, got {lateness}"
            )));
        }
        Ok(Pipeline {
            partitions: sorted,
            windows: map,
            lateness,
        })
    }

    /// Parses `{"partitions": [...], "windows": {...}, "lateness": L}`
    /// (duplicate keys and unknown fields rejected) and validates it.
    pub fn from_json(bytes: &[u8]) -> Result<Pipeline, PipelineError> {
        let doc: PipelineDoc =
            serde_json::from_slice(bytes).map_err(|e| PipelineError(e.to_string()))?;
        Pipeline::new(doc.partitions, doc.windows.0, doc.lateness)
    }

    /// The `GET /pipeline` shape, `{"partitions": [...], "windows": {...}, "lateness": L}`:
    /// exactly what `serde_json` writes for this struct (field order, each
    /// definition with its `kind` first), written here so that it cannot
    /// fail.
    pub fn to_json(&self) -> String {
        use streamforge_canonical::writer::{int, key, string};
        let mut b = Vec::with_capacity(128);
        b.extend_from_slice(b"{\"partitions\":[");
        for (i, p) in self.partitions.iter().enumerate() {
            if i > 0 {
                b.push(b',');
            }
            string(&mut b, p);
        }
        b.extend_from_slice(b"],\"windows\":{");
        for (i, (name, def)) in self.windows.iter().enumerate() {
            if i > 0 {
                b.push(b',');
            }
            key(&mut b, name);
            match *def {
                WindowDef::Fixed { size } => {
                    b.extend_from_slice(b"{\"kind\":\"fixed\",\"size\":");
                    int(&mut b, size);
                }
                WindowDef::Sliding { size, step } => {
                    b.extend_from_slice(b"{\"kind\":\"sliding\",\"size\":");
                    int(&mut b, size);
                    b.extend_from_slice(b",\"step\":");
                    int(&mut b, step);
                }
                WindowDef::Session { gap } => {
                    b.extend_from_slice(b"{\"kind\":\"session\",\"gap\":");
                    int(&mut b, gap);
                }
                WindowDef::StreamTime { size } => {
                    b.extend_from_slice(b"{\"kind\":\"stream_time\",\"size\":");
                    int(&mut b, size);
                }
            }
            b.push(b'}');
        }
        b.extend_from_slice(b"},\"lateness\":");
        int(&mut b, self.lateness);
        b.push(b'}');
        // Only `str`s and ASCII were written: the lossy path is never taken.
        String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// Partition names, sorted.
    pub fn partitions(&self) -> &[String] {
        &self.partitions
    }

    /// Window definitions by name.
    pub fn windows(&self) -> &BTreeMap<String, WindowDef> {
        &self.windows
    }

    /// Allowed lateness.
    pub fn lateness(&self) -> i64 {
        self.lateness
    }

    /// Index of a partition in `partitions()`.
    pub fn partition_index(&self, name: &str) -> Option<usize> {
        // Err of a search: not a partition (None).
        self.partitions
            .binary_search_by(|p| p.as_str().cmp(name))
            .ok()
    }

    /// Equivalence (docs/pipeline.md): same partition set, same window map, same lateness.
    pub fn equivalent(&self, other: &Pipeline) -> bool {
        self == other
    }
}

impl fmt::Display for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reordered_declarations_are_equivalent() {
        let a = Pipeline::from_json(br#"{"partitions":["b","a"],"windows":{"x":{"kind":"fixed","size":10},"s":{"kind":"session","gap":5}},"lateness":3}"#).unwrap();
        let b = Pipeline::from_json(br#"{"lateness":3,"windows":{"s":{"gap":5,"kind":"session"},"x":{"size":10,"kind":"fixed"}},"partitions":["a","b"]}"#).unwrap();
        assert!(a.equivalent(&b));
        assert_eq!(a.to_json(), b.to_json());
    }

    #[test]
    fn to_json_is_what_serde_json_writes() {
        let names = ["a", "é\u{7f}\u{2028}😀", "q\"\\\n\t\u{1}\u{1f}", "z z"];
        let windows = vec![
            (names[1].to_string(), WindowDef::Fixed { size: i64::MAX }),
            (
                names[2].to_string(),
                WindowDef::Sliding { size: 10, step: 3 },
            ),
            (names[3].to_string(), WindowDef::Session { gap: 1 }),
            (names[0].to_string(), WindowDef::StreamTime { size: 7 }),
        ];
        let p = Pipeline::new(
            names.iter().map(|n| n.to_string()).collect(),
            windows,
            i64::MAX,
        )
        .unwrap();
        assert_eq!(p.to_json(), serde_json::to_string(&p).unwrap());
    }

    #[test]
    fn invalid_pipelines_are_rejected_with_reason() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"partitions":[],"windows":{"w":{"kind":"fixed","size":1}},"lateness":0}"#,
                "non-empty",
            ),
            (
                r#"{"partitions":["a","a"],"windows":{"w":{"kind":"fixed","size":1}},"lateness":0}"#,
                "duplicate partition",
            ),
            (
                r#"{"partitions":[""],"windows":{"w":{"kind":"fixed","size":1}},"lateness":0}"#,
                "non-empty",
            ),
            (
                r#"{"partitions":["a"],"windows":{},"lateness":0}"#,
                "non-empty map",
            ),
            (
                r#"{"partitions":["a"],"windows":{"w":{"kind":"fixed","size":0}},"lateness":0}"#,
                "size must be > 0",
            ),
            (
                r#"{"partitions":["a"],"windows":{"w":{"kind":"sliding","size":10,"step":0}},"lateness":0}"#,
                "step must be > 0",
            ),
            (
                r#"{"partitions":["a"],"windows":{"w":{"kind":"sliding","size":10001,"step":1}},"lateness":0}"#,
                "10001 windows",
            ),
            (
                r#"{"partitions":["a"],"windows":{"w":{"kind":"session","gap":-1}},"lateness":0}"#,
                "gap must be > 0",
            ),
            (
                r#"{"partitions":["a"],"windows":{"w":{"kind":"fixed","size":1}},"lateness":-1}"#,
                "lateness",
            ),
            (
                r#"{"partitions":["a"],"windows":{"w":{"kind":"fixed","size":1},"w":{"kind":"fixed","size":2}},"lateness":0}"#,
                "duplicate key",
            ),
            (
                r#"{"partitions":["a"],"windows":{"w":{"kind":"fixed","size":1}},"lateness":0,"x":1}"#,
                "unknown field",
            ),
            (
                r#"{"partitions":["a"],"windows":{"w":{"kind":"hopping","size":1}},"lateness":0}"#,
                "unknown variant",
            ),
        ];
        for (doc, needle) in cases {
            let err = Pipeline::from_json(doc.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(needle), "{doc}: {err}");
        }
        Pipeline::from_json(br#"{"partitions":["a"],"windows":{"w":{"kind":"sliding","size":10000,"step":1}},"lateness":0}"#).unwrap();
    }
}
