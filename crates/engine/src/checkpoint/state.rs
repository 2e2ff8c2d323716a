//! The checkpoint document (docs/checkpoint.md, format version 2 or 1) as typed
//! structs, and its canonical writer.
//!
//! Parsing is strict: unknown or missing keys, duplicate keys, floats or
//! booleans where integers belong are all errors (serde's derive rejects
//! unknown and duplicate fields; [`UniqueMap`] rejects duplicate map keys;
//! `required` makes nullable fields mandatory). Writing is canonical: keys in
//! code-point order, no whitespace. Taking a checkpoint writes the large parts
//! (sources, windows, visible rows) straight from the processor (a
//! [`StateWriter`]) instead of copying them into documents first.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};

use crate::WindowDef;
use streamforge_canonical::writer::{int, key, opt_int, string};
use streamforge_canonical::UniqueMap;

pub(crate) use crate::segment_text::EventDoc;

/// The envelope, of either version: a version 2 envelope has exactly
/// `digest`, `format`, `state` and `version`, a version 1 envelope
/// `format`, `sha256`, `state` and `version` (checked once the version is
/// known: [`EnvelopeDoc::check_keys`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeDoc<'a> {
    /// Version 2: the digest (docs/checkpoint.md, "The digest").
    #[serde(default, deserialize_with = "present")]
    pub digest: Option<String>,
    /// Must be `streamforge-checkpoint`.
    pub format: String,
    /// Version 1: lowercase hex SHA-256 of the canonical state bytes.
    #[serde(default, deserialize_with = "present")]
    pub sha256: Option<String>,
    /// The state.
    #[serde(borrow)]
    pub state: StateDoc<'a>,
    /// The integer 2 or 1.
    pub version: u64,
}

/// A key that may be absent (`None`) but, when present, is a string (a
/// `null` is not an absent key).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    String::deserialize(d).map(Some)
}

/// The format name of an envelope.
pub const FORMAT: &str = "streamforge-checkpoint";

/// Checks an envelope's format, version and version-specific key
/// (`digest` for version 2, `sha256` for version 1), and returns the
/// checksum it carries.
pub fn check_envelope<'a>(
    format: &str,
    version: u64,
    digest: Option<&'a str>,
    sha256: Option<&'a str>,
) -> Result<&'a str, String> {
    if format != FORMAT {
        return Err(format!("unknown checkpoint format {format:?}"));
    }
    let (want, other) = match version {
        2 => ("digest", "sha256"),
        1 => ("sha256", "digest"),
        v => {
            return Err(format!(
                "unsupported checkpoint version {v} (versions 2 and 1 are known)"
            ))
        }
    };
    let (mine, theirs) = if version == 2 {
        (digest, sha256)
    } else {
        (sha256, digest)
    };
    let keys = if version == 2 {
        "`digest`, `format`, `state` and `version`"
    } else {
        "`format`, `sha256`, `state` and `version`"
    };
    if theirs.is_some() {
        return Err(format!(
            "malformed checkpoint envelope: unknown field `{other}` (a version {version} \
             envelope has exactly {keys})"
        ));
    }
    mine.ok_or_else(|| {
        format!(
            "malformed checkpoint envelope: missing field `{want}` (a version {version} \
             envelope has exactly {keys})"
        )
    })
}

/// The state `S`, as parsed. Taking a checkpoint never builds one: it
/// writes the large parts straight from the processor (see [`StateWriter`]),
/// so a parsed state holds parsed parts only.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateDoc<'a> {
    /// The pipeline (partitions in any order when parsed).
    pub pipeline: PipelineDoc,
    /// Watermark state and stream time.
    pub clock: ClockDoc,
    /// Delivered events per partition.
    #[serde(borrow)]
    pub sources: UniqueMap<Vec<EventDoc<'a>>>,
    /// The live index, in address order.
    #[serde(borrow)]
    pub windows: Vec<ResultDoc<'a>>,
    /// Sequence and visible rows.
    #[serde(borrow)]
    pub changelog: ChangelogDoc<'a>,
    /// Late records.
    #[serde(borrow)]
    pub late: Vec<(EventDoc<'a>, i64)>,
}

/// Writes a large part of the state (sources, live buckets, visible rows).
pub type PartWriter<'s> = &'s dyn Fn(&mut Vec<u8>);

/// What the canonical writer needs of a state: the small parts as
/// documents and the large ones as functions that write them, from a parsed
/// [`StateDoc`] (for its checksum) or straight from a processor (taking a
/// checkpoint), so both are written by the same code.
pub struct StateWriter<'s> {
    /// The pipeline.
    pub pipeline: &'s PipelineDoc,
    /// The clock.
    pub clock: &'s ClockDoc,
    /// Late records.
    pub late: &'s [(EventDoc<'s>, i64)],
    /// `changelog.sequence`.
    pub sequence: u64,
    /// Writes `sources`.
    pub sources: PartWriter<'s>,
    /// Writes `windows`.
    pub windows: PartWriter<'s>,
    /// Writes `changelog.visible`.
    pub visible: PartWriter<'s>,
}

fn required<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Option::<i64>::deserialize(d)
}

/// `{"lateness", "partitions", "windows"}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineDoc {
    /// Lateness.
    pub lateness: i64,
    /// Partition names.
    pub partitions: Vec<String>,
    /// Window definitions by name.
    pub windows: UniqueMap<WindowDef>,
}

/// `{"max_timestamp", "partitions", "watermark"}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockDoc {
    /// Largest unique timestamp.
    #[serde(deserialize_with = "required")]
    pub max_timestamp: Option<i64>,
    /// Per-partition progress and idleness.
    pub partitions: UniqueMap<PartitionClockDoc>,
    /// Global watermark.
    #[serde(deserialize_with = "required")]
    pub watermark: Option<i64>,
}

/// `{"idle", "progress"}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionClockDoc {
    /// Idle flag.
    pub idle: bool,
    /// Reported progress.
    #[serde(deserialize_with = "required")]
    pub progress: Option<i64>,
}

/// A Result object.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct ResultDoc<'a> {
    /// Count.
    pub count: u64,
    /// End.
    pub end: i128,
    /// Key.
    #[serde(borrow)]
    pub key: Cow<'a, str>,
    /// Max.
    pub max: i64,
    /// Min.
    pub min: i64,
    /// Start.
    pub start: i128,
    /// Sum.
    pub sum: i128,
    /// Window name.
    #[serde(borrow)]
    pub window: Cow<'a, str>,
}

/// `{"sequence", "visible"}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangelogDoc<'a> {
    /// Last emitted seq.
    pub sequence: u64,
    /// Visible rows, in address order.
    #[serde(borrow)]
    pub visible: Vec<ResultDoc<'a>>,
}

/// Writes `[id,key,timestamp,value]`.
pub use crate::segment_text::write_event;

/// Writes a Result object with sorted keys.
#[allow(clippy::too_many_arguments)]
pub fn write_result(
    buf: &mut Vec<u8>,
    window: &str,
    k: &str,
    start: i128,
    end: i128,
    count: u64,
    sum: i128,
    min: i64,
    max: i64,
) {
    buf.extend_from_slice(b"{\"count\":");
    int(buf, count);
    buf.extend_from_slice(b",\"end\":");
    int(buf, end);
    buf.extend_from_slice(b",\"key\":");
    string(buf, k);
    buf.extend_from_slice(b",\"max\":");
    int(buf, max);
    buf.extend_from_slice(b",\"min\":");
    int(buf, min);
    buf.extend_from_slice(b",\"start\":");
    int(buf, start);
    buf.extend_from_slice(b",\"sum\":");
    int(buf, sum);
    buf.extend_from_slice(b",\"window\":");
    string(buf, window);
    buf.push(b'}');
}

pub fn write_rows(buf: &mut Vec<u8>, rows: &[ResultDoc<'_>]) {
    buf.push(b'[');
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        write_result(
            buf, &r.window, &r.key, r.start, r.end, r.count, r.sum, r.min, r.max,
        );
    }
    buf.push(b']');
}

fn write_sources(b: &mut Vec<u8>, map: &UniqueMap<Vec<EventDoc<'_>>>) {
    b.push(b'{');
    for (i, (name, events)) in sorted(map).into_iter().enumerate() {
        if i > 0 {
            b.push(b',');
        }
        key(b, name);
        b.push(b'[');
        for (j, (id, k, ts, v)) in events.iter().enumerate() {
            if j > 0 {
                b.push(b',');
            }
            write_event(b, id, k, *ts, *v);
        }
        b.push(b']');
    }
    b.push(b'}');
}

fn write_window_def(buf: &mut Vec<u8>, def: &WindowDef) {
    match *def {
        WindowDef::Fixed { size } => {
            buf.extend_from_slice(b"{\"kind\":\"fixed\",\"size\":");
            int(buf, size);
        }
        WindowDef::Sliding { size, step } => {
            buf.extend_from_slice(b"{\"kind\":\"sliding\",\"size\":");
            int(buf, size);
            buf.extend_from_slice(b",\"step\":");
            int(buf, step);
        }
        WindowDef::Session { gap } => {
            buf.extend_from_slice(b"{\"gap\":");
            int(buf, gap);
            buf.extend_from_slice(b",\"kind\":\"session\"");
        }
        WindowDef::StreamTime { size } => {
            buf.extend_from_slice(b"{\"kind\":\"stream_time\",\"size\":");
            int(buf, size);
        }
    }
    buf.push(b'}');
}

/// Sorted view of a name map (keys compare by code point = byte order).
fn sorted<V>(map: &UniqueMap<V>) -> Vec<&(String, V)> {
    let mut v: Vec<&(String, V)> = map.0.iter().collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

impl StateDoc<'_> {
    /// The state without its history, as the envelope writes it (the
    /// pipeline's partition list sorted, or as parsed), with the names of
    /// `sources` sorted.
    pub fn live_parts(&self, sort_partitions: bool) -> super::LiveParts {
        let mut changelog = Vec::with_capacity(64 + self.changelog.visible.len() * 130);
        write_changelog(&mut changelog, self.changelog.sequence, |b| {
            write_rows(b, &self.changelog.visible)
        });
        let mut clock = Vec::with_capacity(128);
        write_clock(&mut clock, &self.clock);
        let mut pipeline = Vec::with_capacity(256);
        write_pipeline(&mut pipeline, &self.pipeline, sort_partitions);
        let mut windows = Vec::with_capacity(2 + self.windows.len() * 130);
        write_rows(&mut windows, &self.windows);
        super::LiveParts {
            changelog,
            clock,
            pipeline,
            windows,
            partitions: sorted(&self.sources)
                .into_iter()
                .map(|(name, _)| name.clone())
                .collect(),
        }
    }

    /// The chains of `sources` (by sorted name) and of `late`.
    pub fn chains(&self) -> (Vec<super::chain::Hash>, super::chain::Hash) {
        let mut buf = Vec::with_capacity(128);
        let sources = sorted(&self.sources)
            .into_iter()
            .map(|(_, events)| {
                let mut c = super::chain::Chain::new();
                for (id, k, ts, v) in events {
                    buf.clear();
                    write_event(&mut buf, id, k, *ts, *v);
                    c.push(&buf);
                }
                c.value()
            })
            .collect();
        let mut late = super::chain::Chain::new();
        for ((id, k, ts, v), w) in &self.late {
            buf.clear();
            crate::segment_text::write_late(&mut buf, id, k, *ts, *v, *w);
            late.push(&buf);
        }
        (sources, late.value())
    }

    /// The digest of this state (version 2), the pipeline's partition list
    /// sorted or as parsed.
    pub fn digest(&self, sort_partitions: bool) -> String {
        let (sources, late) = self.chains();
        super::chain::digest(&self.live_parts(sort_partitions), &sources, &late)
    }

    /// The canonical bytes of this state.
    pub fn canonical(&self) -> Vec<u8> {
        self.canonical_with(true)
    }

    /// The canonical bytes, with the pipeline's partition list sorted or (for
    /// checksums written over a document that keeps its declared order) as
    /// parsed.
    pub fn canonical_with(&self, sort_partitions: bool) -> Vec<u8> {
        let mut buf = Vec::with_capacity(1 << 12);
        let sources = |b: &mut Vec<u8>| write_sources(b, &self.sources);
        let windows = |b: &mut Vec<u8>| write_rows(b, &self.windows);
        let visible = |b: &mut Vec<u8>| write_rows(b, &self.changelog.visible);
        StateWriter {
            pipeline: &self.pipeline,
            clock: &self.clock,
            late: &self.late,
            sequence: self.changelog.sequence,
            sources: &sources,
            windows: &windows,
            visible: &visible,
        }
        .write_canonical(&mut buf, sort_partitions);
        buf
    }
}

/// Appends the clock object.
pub fn write_clock(b: &mut Vec<u8>, clock: &ClockDoc) {
    b.extend_from_slice(b"{\"max_timestamp\":");
    opt_int(b, clock.max_timestamp);
    b.extend_from_slice(b",\"partitions\":{");
    for (i, (name, p)) in sorted(&clock.partitions).into_iter().enumerate() {
        if i > 0 {
            b.push(b',');
        }
        key(b, name);
        b.extend_from_slice(if p.idle {
            b"{\"idle\":true,\"progress\":"
        } else {
            b"{\"idle\":false,\"progress\":"
        });
        opt_int(b, p.progress);
        b.push(b'}');
    }
    b.extend_from_slice(b"},\"watermark\":");
    opt_int(b, clock.watermark);
    b.push(b'}');
}

/// Appends the pipeline object, its partition list sorted or as parsed.
pub fn write_pipeline(b: &mut Vec<u8>, pipeline: &PipelineDoc, sort_partitions: bool) {
    b.extend_from_slice(b"{\"lateness\":");
    int(b, pipeline.lateness);
    b.extend_from_slice(b",\"partitions\":[");
    let mut parts: Vec<&String> = pipeline.partitions.iter().collect();
    if sort_partitions {
        parts.sort();
    }
    for (i, p) in parts.into_iter().enumerate() {
        if i > 0 {
            b.push(b',');
        }
        string(b, p);
    }
    b.extend_from_slice(b"],\"windows\":{");
    for (i, (name, def)) in sorted(&pipeline.windows).into_iter().enumerate() {
        if i > 0 {
            b.push(b',');
        }
        key(b, name);
        write_window_def(b, def);
    }
    b.extend_from_slice(b"}}");
}

/// Appends the changelog object: `{"sequence":N,"visible":...}`.
pub fn write_changelog(b: &mut Vec<u8>, sequence: u64, visible: impl FnOnce(&mut Vec<u8>)) {
    b.extend_from_slice(b"{\"sequence\":");
    int(b, sequence);
    b.extend_from_slice(b",\"visible\":");
    visible(b);
    b.push(b'}');
}

impl StateWriter<'_> {
    /// Appends the canonical bytes to `buf`.
    pub fn write_canonical(&self, buf: &mut Vec<u8>, sort_partitions: bool) {
        let b = buf;
        b.extend_from_slice(b"{\"changelog\":");
        write_changelog(b, self.sequence, |b| (self.visible)(b));
        b.extend_from_slice(b",\"clock\":");
        write_clock(b, self.clock);
        b.extend_from_slice(b",\"late\":[");
        for (i, ((id, k, ts, v), w)) in self.late.iter().enumerate() {
            if i > 0 {
                b.push(b',');
            }
            b.push(b'[');
            write_event(b, id, k, *ts, *v);
            b.push(b',');
            int(b, *w);
            b.push(b']');
        }
        b.extend_from_slice(b"],\"pipeline\":");
        write_pipeline(b, self.pipeline, sort_partitions);
        b.extend_from_slice(b",\"sources\":");
        (self.sources)(b);
        b.extend_from_slice(b",\"windows\":");
        (self.windows)(b);
        b.push(b'}');
    }
}
