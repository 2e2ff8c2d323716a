//! The inbound part of a pipeline file as validated: its sources (what each
//! maps, filters and checks) and watermark strategies.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::inbound::signature::{Scheme, Verifier};
use crate::service::strategy::Strategy;

/// Where a mapped value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    /// A JSON Pointer (RFC 6901) into the payload (or the batch item).
    Pointer(String),
    /// A request header (name lowercased).
    Header(String),
    /// A constant.
    Constant(Value),
}

/// How a timestamp is written by the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Unix seconds (an integer).
    S,
    /// Unix milliseconds.
    Ms,
    /// Unix microseconds.
    Us,
    /// Unix nanoseconds.
    Ns,
    /// RFC 3339 text (`2026-12-05T17:28:40.123Z`).
    Rfc3339,
}

impl Unit {
    /// The unit of a declaration's `"unit"`.
    pub(super) fn parse(s: &str) -> Option<Unit> {
        Some(match s {
            "s" => Unit::S,
            "ms" => Unit::Ms,
            "us" => Unit::Us,
            "ns" => Unit::Ns,
            "rfc3339" => Unit::Rfc3339,
            _ => return None,
        })
    }
}

/// Only payloads whose value at `from` equals `equals` are ingested.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// Where the value is read.
    pub from: Field,
    /// The value it must equal.
    pub equals: Value,
}

/// Which engine a source feeds, and the fields only that engine has.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// `POST /events` of the window engine, appended to `partition`.
    Window {
        /// The pipeline partition the events are appended to.
        partition: String,
        /// The event's value (an integer).
        value: Field,
    },
    /// `POST /patterns/events`.
    Patterns {
        /// The event's kind (a string).
        kind: Field,
        /// The event's fields, by name.
        fields: Vec<(String, Field)>,
    },
}

/// A source's signature check.
pub struct Signature {
    /// The check itself, with the secrets loaded (None: not loaded, as in
    /// `pipeline check`).
    pub verifier: Option<Verifier>,
    /// The scheme.
    pub scheme: Scheme,
    /// Where the secrets are read (never the secrets).
    pub secrets_from: SecretsFrom,
}

/// Where a source's secrets are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretsFrom {
    /// An environment variable.
    Env(String),
    /// A file.
    File(PathBuf),
}

impl SecretsFrom {
    /// Whether the variable is set or the file exists here.
    pub fn present(&self) -> bool {
        match self {
            SecretsFrom::Env(v) => std::env::var_os(v).is_some(),
            SecretsFrom::File(f) => f.exists(),
        }
    }
}

impl std::fmt::Display for SecretsFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretsFrom::Env(v) => write!(f, "the environment variable {v}"),
            SecretsFrom::File(p) => write!(f, "the file {}", p.display()),
        }
    }
}

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signature")
            .field("scheme", &self.scheme)
            .field("secrets_from", &self.secrets_from)
            .finish()
    }
}

/// One `POST /ingest/{name}` source.
#[derive(Debug)]
pub struct Source {
    /// Its name (the path segment).
    pub name: String,
    /// The engine it feeds.
    pub target: Target,
    /// The event id (the producer's delivery id: retries are duplicates).
    pub id: Field,
    /// The event key.
    pub key: Field,
    /// The event time.
    pub timestamp: Field,
    /// The unit of `timestamp`.
    pub unit: Unit,
    /// Every filter must hold, or the payload is answered `filtered`.
    pub filters: Vec<Filter>,
    /// The signature check; None: the source needs the bearer token (when
    /// one is set) instead.
    pub signature: Option<Signature>,
    /// The pointers it reads, as one pass over a payload reads them.
    pub projection: crate::inbound::projection::Projection,
}

/// The inbound configuration of a pipeline file.
#[derive(Debug, Default)]
pub struct Inbound {
    /// The sources, by name.
    pub sources: BTreeMap<String, Source>,
    /// The watermark strategies, by partition.
    pub watermarks: BTreeMap<String, Strategy>,
    /// `"sources"` as declared (for `GET /pipeline`; no secrets can be in it).
    pub declared_sources: Option<Value>,
    /// `"watermarks"` as declared.
    pub declared_watermarks: Option<Value>,
}

impl Inbound {
    /// Whether the file declared neither.
    pub fn is_empty(&self) -> bool {
        self.declared_sources.is_none() && self.declared_watermarks.is_none()
    }

    /// `GET /pipeline`: the engine's pipeline JSON with `"sources"` and
    /// `"watermarks"` added after its fields when declared (unchanged
    /// otherwise).
    pub fn pipeline_json(&self, engine_json: String) -> String {
        if self.is_empty() {
            return engine_json;
        }
        let mut out = engine_json;
        out.pop(); // the closing brace
        for (name, v) in [
            ("sources", &self.declared_sources),
            ("watermarks", &self.declared_watermarks),
        ] {
            if let Some(v) = v {
                out.push_str(&format!(",\"{name}\":{v}"));
            }
        }
        out.push('}');
        out
    }
}

/// How secrets are loaded while validating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// Read them (serve): a missing variable or file is a mistake.
    Load,
    /// Do not (pipeline check): only the declarations are checked.
    Skip,
}
