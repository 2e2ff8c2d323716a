//! The `"sources"` and `"watermarks"` of a pipeline file, validated with the
//! JSON path of every mistake (all of them, not the first): the file split
//! and validated here, a source's declaration in `source.rs` (its
//! `signature` in `signature.rs`), the validated types in `types.rs`.

mod checks;
mod signature;
mod source;
mod types;

use serde_json::Value;

use self::checks::{object, unknown};
use self::source::source;
use crate::engine::Pipeline;
use crate::service::strategy::Strategy;

pub use self::checks::list;
pub use self::types::{
    Field, Filter, Inbound, Secrets, SecretsFrom, Signature, Source, Target, Unit,
};

/// A pipeline file's engine part and its inbound part.
type Split = (Vec<u8>, Option<Value>, Option<Value>);

/// Splits a pipeline file into the engine's part (the bytes
/// `Pipeline::from_json` reads: the file itself when it declares no
/// sources or watermarks) and its inbound part, still unvalidated.
pub fn split_pipeline(bytes: &[u8]) -> Result<Split, String> {
    // A file that is not a JSON object is the engine's to refuse.
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(bytes) else {
        return Ok((bytes.to_vec(), None, None));
    };
    let sources = map.remove("sources");
    let watermarks = map.remove("watermarks");
    if sources.is_none() && watermarks.is_none() {
        return Ok((bytes.to_vec(), None, None));
    }
    // serde_json keeps the last of duplicate keys: the file is refused for
    // them as the engine refuses them in a file without sources.
    crate::canonical::strict::parse(bytes)?;
    let rest = serde_json::to_vec(&Value::Object(map)).map_err(|e| e.to_string())?;
    Ok((rest, sources, watermarks))
}

/// A pipeline file: the engine's pipeline and the inbound sources and
/// watermark strategies declared beside it (docs/webhooks.md), every
/// mistake of the latter named by its JSON path.
pub fn pipeline_file(bytes: &[u8], secrets: Secrets) -> Result<(Pipeline, Inbound), String> {
    let (engine, sources, watermarks) = split_pipeline(bytes)?;
    let pipeline = Pipeline::from_json(&engine).map_err(|e| e.to_string())?;
    let inbound = validate(sources, watermarks, pipeline.partitions(), secrets)
        .map_err(|errs| errs.join("\n"))?;
    Ok((pipeline, inbound))
}

/// Validates `"sources"` and `"watermarks"` against the pipeline's
/// `partitions`. Every mistake is one line `PATH: what is wrong`.
pub fn validate(
    sources: Option<Value>,
    watermarks: Option<Value>,
    partitions: &[String],
    secrets: Secrets,
) -> Result<Inbound, Vec<String>> {
    let mut errs = Vec::new();
    let mut inbound = Inbound::default();
    if let Some(v) = &sources {
        match v {
            Value::Object(m) => {
                if m.is_empty() {
                    errs.push("sources: declares no source (remove it, or add one)".into());
                }
                for (name, decl) in m {
                    let path = format!("sources.{name}");
                    if name.is_empty()
                        || !name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                    {
                        errs.push(format!(
                            "{path}: a source name is 1 or more of A-Z a-z 0-9 _ - (it is a path segment of /ingest/{{source}})"
                        ));
                        continue;
                    }
                    if let Some(s) = source(name, decl, &path, partitions, secrets, &mut errs) {
                        inbound.sources.insert(name.clone(), s);
                    }
                }
            }
            _ => errs.push("sources: expected an object of sources by name".into()),
        }
    }
    if let Some(v) = &watermarks {
        match v {
            Value::Object(m) => {
                for (p, decl) in m {
                    let path = format!("watermarks.{p}");
                    if !partitions.contains(p) {
                        errs.push(format!(
                            "{path}: {p:?} is not a partition of the pipeline (its partitions: {})",
                            list(partitions)
                        ));
                        continue;
                    }
                    if let Some(s) = strategy(decl, &path, &mut errs) {
                        inbound.watermarks.insert(p.clone(), s);
                    }
                }
            }
            _ => errs.push("watermarks: expected an object of strategies by partition".into()),
        }
    }
    inbound.declared_sources = sources;
    inbound.declared_watermarks = watermarks;
    if errs.is_empty() {
        Ok(inbound)
    } else {
        Err(errs)
    }
}

fn strategy(decl: &Value, path: &str, errs: &mut Vec<String>) -> Option<Strategy> {
    let m = object(decl, path, errs)?;
    let before = errs.len();
    unknown(m, &["max_out_of_orderness", "idle_after"], path, errs);
    let bound = m.get("max_out_of_orderness").and_then(|v| match v.as_i64() {
        Some(b) if b >= 0 => Some(b),
        _ => {
            errs.push(format!(
                "{path}.max_out_of_orderness: expected an integer >= 0 (milliseconds, in the events' time unit), got {v}"
            ));
            None
        }
    });
    let idle = m.get("idle_after").and_then(|v| match v.as_u64() {
        Some(ms) if ms > 0 => Some(ms),
        _ => {
            errs.push(format!(
                "{path}.idle_after: expected an integer > 0 (milliseconds of wall clock), got {v}"
            ));
            None
        }
    });
    if !m.contains_key("max_out_of_orderness") && !m.contains_key("idle_after") {
        errs.push(format!(
            "{path}: declares neither max_out_of_orderness nor idle_after"
        ));
    }
    (errs.len() == before).then_some(Strategy {
        max_out_of_orderness: bound,
        idle_after_ms: idle,
    })
}

#[cfg(test)]
mod tests;
