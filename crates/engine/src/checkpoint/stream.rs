//! Reading an envelope as it streams (a restore of an envelope too large
//! to hold): the same strict parse as [`super::restore`] (exactly the
//! envelope's and the state's keys, no duplicates, the same record types),
//! in the document's own key order, with the history handed item by item
//! to a [`StageSink`] instead of being collected. What it returns is the
//! small rest; the checks that need all of it (names, identities, the
//! checksum) are the caller's, once everything is staged.

use crate::segment_text::to_event;
use std::fmt;
use std::io::Read;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

use super::state::{ChangelogDoc, ClockDoc, EventDoc, PipelineDoc, ResultDoc};
use crate::event::Event;

/// Where the history of a streamed envelope goes, in document order.
pub trait StageSink {
    /// The next late record.
    fn late(&mut self, event: Event, watermark: i64) -> Result<(), String>;
    /// The next delivery of partition `name` (a partition's deliveries
    /// come one after another, in offset order).
    fn source(&mut self, name: &str, event: Event) -> Result<(), String>;
}

/// The envelope without its history.
pub struct Streamed {
    /// `format`.
    pub format: String,
    /// `version`.
    pub version: u64,
    /// `digest` (version 2).
    pub digest: Option<String>,
    /// `sha256` (version 1).
    pub sha256: Option<String>,
    /// `state.pipeline`.
    pub pipeline: PipelineDoc,
    /// `state.clock`.
    pub clock: ClockDoc,
    /// `state.changelog`.
    pub changelog: ChangelogDoc<'static>,
    /// `state.windows`.
    pub windows: Vec<ResultDoc<'static>>,
    /// The names `state.sources` gives, in its order.
    pub source_names: Vec<String>,
}

/// Reads an envelope from `reader`, handing its history to `sink`.
pub fn read<R: Read>(reader: R, sink: &mut dyn StageSink) -> Result<Streamed, String> {
    let mut de = serde_json::Deserializer::from_reader(reader);
    let out = EnvelopeSeed { sink }
        .deserialize(&mut de)
        .map_err(|e| format!("malformed checkpoint envelope: {e}"))?;
    de.end()
        .map_err(|e| format!("malformed checkpoint envelope: {e}"))?;
    Ok(out)
}

fn sink_error<E: serde::de::Error>(e: String) -> E {
    // The sink's message is the restore's; marked so that it is not
    // reported as a malformed envelope.
    E::custom(format!("{SINK}{e}"))
}

/// The prefix of a sink's error inside a serde error.
pub const SINK: &str = "\u{1}";

/// The message of a [`read`] error: a sink's own, or the parse error.
pub fn message(e: String) -> String {
    match e.find(SINK) {
        Some(at) => {
            let rest = &e[at + SINK.len()..];
            // serde_json appends " at line L column C".
            match rest.rfind(" at line ") {
                Some(cut) => rest[..cut].to_string(),
                None => rest.to_string(),
            }
        }
        None => e,
    }
}

fn take<T, E: serde::de::Error>(
    slot: &mut Option<T>,
    value: T,
    name: &'static str,
) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(value);
    Ok(())
}

struct EnvelopeSeed<'s> {
    sink: &'s mut dyn StageSink,
}

impl DeserializeSeed<'static> for EnvelopeSeed<'_> {
    type Value = Streamed;
    fn deserialize<D: Deserializer<'static>>(self, d: D) -> Result<Streamed, D::Error> {
        d.deserialize_map(self)
    }
}

const ENVELOPE: &[&str] = &["digest", "format", "sha256", "state", "version"];
const STATE: &[&str] = &[
    "changelog",
    "clock",
    "late",
    "pipeline",
    "sources",
    "windows",
];

/// What a state holds besides its history.
struct State {
    pipeline: PipelineDoc,
    clock: ClockDoc,
    changelog: ChangelogDoc<'static>,
    windows: Vec<ResultDoc<'static>>,
    source_names: Vec<String>,
}

impl Visitor<'static> for EnvelopeSeed<'_> {
    type Value = Streamed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct EnvelopeDoc")
    }

    fn visit_map<A: MapAccess<'static>>(self, mut map: A) -> Result<Streamed, A::Error> {
        let (mut format, mut version, mut sha256, mut state) = (None, None, None, None);
        let mut digest = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "format" => take(&mut format, map.next_value::<String>()?, "format")?,
                "version" => take(&mut version, map.next_value::<u64>()?, "version")?,
                "sha256" => take(&mut sha256, map.next_value::<String>()?, "sha256")?,
                "digest" => take(&mut digest, map.next_value::<String>()?, "digest")?,
                "state" => {
                    if state.is_some() {
                        return Err(A::Error::duplicate_field("state"));
                    }
                    state = Some(map.next_value_seed(StateSeed {
                        sink: &mut *self.sink,
                    })?);
                }
                other => return Err(A::Error::unknown_field(other, ENVELOPE)),
            }
        }
        let state = state.ok_or_else(|| A::Error::missing_field("state"))?;
        Ok(Streamed {
            format: format.ok_or_else(|| A::Error::missing_field("format"))?,
            version: version.ok_or_else(|| A::Error::missing_field("version"))?,
            digest,
            sha256,
            pipeline: state.pipeline,
            clock: state.clock,
            changelog: state.changelog,
            windows: state.windows,
            source_names: state.source_names,
        })
    }
}

struct StateSeed<'s> {
    sink: &'s mut dyn StageSink,
}

impl DeserializeSeed<'static> for StateSeed<'_> {
    type Value = State;
    fn deserialize<D: Deserializer<'static>>(self, d: D) -> Result<State, D::Error> {
        d.deserialize_map(self)
    }
}

impl Visitor<'static> for StateSeed<'_> {
    type Value = State;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct StateDoc")
    }

    fn visit_map<A: MapAccess<'static>>(self, mut map: A) -> Result<State, A::Error> {
        let (mut pipeline, mut clock, mut changelog, mut windows) = (None, None, None, None);
        let (mut late, mut sources) = (false, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "pipeline" => take(&mut pipeline, map.next_value::<PipelineDoc>()?, "pipeline")?,
                "clock" => take(&mut clock, map.next_value::<ClockDoc>()?, "clock")?,
                "changelog" => take(
                    &mut changelog,
                    map.next_value::<ChangelogDoc<'static>>()?,
                    "changelog",
                )?,
                "windows" => take(
                    &mut windows,
                    map.next_value::<Vec<ResultDoc<'static>>>()?,
                    "windows",
                )?,
                "late" => {
                    if late {
                        return Err(A::Error::duplicate_field("late"));
                    }
                    late = true;
                    map.next_value_seed(LateSeed {
                        sink: &mut *self.sink,
                    })?;
                }
                "sources" => {
                    if sources.is_some() {
                        return Err(A::Error::duplicate_field("sources"));
                    }
                    sources = Some(map.next_value_seed(SourcesSeed {
                        sink: &mut *self.sink,
                    })?);
                }
                other => return Err(A::Error::unknown_field(other, STATE)),
            }
        }
        if !late {
            return Err(A::Error::missing_field("late"));
        }
        Ok(State {
            pipeline: pipeline.ok_or_else(|| A::Error::missing_field("pipeline"))?,
            clock: clock.ok_or_else(|| A::Error::missing_field("clock"))?,
            changelog: changelog.ok_or_else(|| A::Error::missing_field("changelog"))?,
            windows: windows.ok_or_else(|| A::Error::missing_field("windows"))?,
            source_names: sources.ok_or_else(|| A::Error::missing_field("sources"))?,
        })
    }
}

struct LateSeed<'s> {
    sink: &'s mut dyn StageSink,
}

impl DeserializeSeed<'static> for LateSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'static>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl Visitor<'static> for LateSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'static>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some((e, w)) = seq.next_element::<(EventDoc<'static>, i64)>()? {
            self.sink.late(to_event(e), w).map_err(sink_error)?;
        }
        Ok(())
    }
}

struct SourcesSeed<'s> {
    sink: &'s mut dyn StageSink,
}

impl DeserializeSeed<'static> for SourcesSeed<'_> {
    type Value = Vec<String>;
    fn deserialize<D: Deserializer<'static>>(self, d: D) -> Result<Vec<String>, D::Error> {
        d.deserialize_map(self)
    }
}

impl Visitor<'static> for SourcesSeed<'_> {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'static>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
        let mut names: Vec<String> = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            if names.contains(&name) {
                return Err(A::Error::custom(format!("duplicate key {name:?}")));
            }
            map.next_value_seed(EventsSeed {
                name: &name,
                sink: &mut *self.sink,
            })?;
            names.push(name);
        }
        Ok(names)
    }
}

struct EventsSeed<'s> {
    name: &'s str,
    sink: &'s mut dyn StageSink,
}

impl DeserializeSeed<'static> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'static>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl Visitor<'static> for EventsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'static>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(e) = seq.next_element::<EventDoc<'static>>()? {
            self.sink
                .source(self.name, to_event(e))
                .map_err(sink_error)?;
        }
        Ok(())
    }
}

/// A reader that finds, as the bytes pass, the first `\u` escape with an
/// upper-case hex digit (see `streamforge_canonical::escape`), at its byte
/// offset in the whole stream.
pub struct EscapeScan<R> {
    inner: R,
    at: u64,
    in_string: bool,
    /// After a backslash in a string: 0 none; 1 the backslash; 2 `\u`
    /// then counting the hex digits (2..=5).
    escape: u8,
    escape_at: u64,
    /// The first offending escape's offset.
    pub found: Option<u64>,
}

impl<R: Read> EscapeScan<R> {
    /// Scans what `inner` gives.
    pub fn new(inner: R) -> EscapeScan<R> {
        EscapeScan {
            inner,
            at: 0,
            in_string: false,
            escape: 0,
            escape_at: 0,
            found: None,
        }
    }

    fn scan(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match self.escape {
                0 => match b {
                    b'"' => self.in_string = !self.in_string,
                    b'\\' if self.in_string => {
                        self.escape = 1;
                        self.escape_at = self.at;
                    }
                    _ => {}
                },
                1 => self.escape = if b == b'u' { 2 } else { 0 },
                n => {
                    if b.is_ascii_uppercase() && self.found.is_none() {
                        self.found = Some(self.escape_at);
                    }
                    self.escape = if n >= 5 { 0 } else { n + 1 };
                }
            }
            self.at += 1;
        }
    }
}

impl<R: Read> Read for EscapeScan<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.scan(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect {
        late: Vec<(Event, i64)>,
        sources: Vec<(String, Event)>,
    }

    impl StageSink for Collect {
        fn late(&mut self, event: Event, watermark: i64) -> Result<(), String> {
            self.late.push((event, watermark));
            Ok(())
        }
        fn source(&mut self, name: &str, event: Event) -> Result<(), String> {
            if event.id == "refuse" {
                return Err("sources: refused".into());
            }
            self.sources.push((name.to_string(), event));
            Ok(())
        }
    }

    const STATE: &str = r#"{"windows":[],"sources":{"b":[["e2","k",3,4]],"a":[["e1","k",1,2]]},"pipeline":{"lateness":0,"partitions":["b","a"],"windows":{"w":{"kind":"fixed","size":10}}},"late":[[["e1","k",1,2],5]],"clock":{"max_timestamp":3,"partitions":{"a":{"idle":false,"progress":null},"b":{"idle":false,"progress":null}},"watermark":null},"changelog":{"sequence":0,"visible":[]}}"#;

    #[test]
    fn any_key_order_is_read_and_the_history_handed_over() {
        let env = format!(r#"{{"version":1,"state":{STATE},"sha256":"x","format":"f"}}"#);
        let mut c = Collect::default();
        let s = read(env.as_bytes(), &mut c).unwrap();
        assert_eq!(
            (s.format.as_str(), s.version, s.sha256.as_deref(), s.digest),
            ("f", 1, Some("x"), None)
        );
        assert_eq!(s.source_names, ["b", "a"]);
        assert_eq!(c.sources.len(), 2);
        assert_eq!(c.late[0].1, 5);
        assert_eq!(s.pipeline.partitions, ["b", "a"]);
    }

    #[test]
    fn strictness_is_the_in_memory_parser_s() {
        for bad in [
            format!(r#"{{"version":1,"state":{STATE},"sha256":"x","format":"f","x":1}}"#),
            format!(r#"{{"version":1,"state":{STATE},"sha256":"x"}}"#),
            format!(r#"{{"version":2,"state":{STATE},"digest":"x","digest":"x","format":"f"}}"#),
            format!(r#"{{"version":1,"version":1,"state":{STATE},"sha256":"x","format":"f"}}"#),
            format!(r#"{{"version":1.0,"state":{STATE},"sha256":"x","format":"f"}}"#),
            format!(
                r#"{{"version":1,"state":{},"sha256":"x","format":"f"}}"#,
                STATE.replace("[\"e2\",\"k\",3,4]", "[\"e2\",\"k\",3.0,4]")
            ),
            format!(
                r#"{{"version":1,"state":{},"sha256":"x","format":"f"}}"#,
                STATE.replace("\"a\":[[", "\"b\":[[")
            ),
            format!(r#"{{"version":1,"state":{STATE},"sha256":"x","format":"f"}} x"#),
        ] {
            assert!(
                read(bad.as_bytes(), &mut Collect::default()).is_err(),
                "{bad}"
            );
        }
        let refused = format!(
            r#"{{"version":1,"state":{},"sha256":"x","format":"f"}}"#,
            STATE.replace("\"e2\"", "\"refuse\"")
        );
        let e = read(refused.as_bytes(), &mut Collect::default())
            .map(drop)
            .unwrap_err();
        assert_eq!(message(e), "sources: refused");
    }

    #[test]
    fn upper_case_escapes_are_found_across_reads() {
        for (json, want) in [
            (&br#"{"a":"\u001f"}"#[..], None),
            (br#"{"a":"\u001F"}"#, Some(6)),
            (br#"{"a":"\\u001F"}"#, None),
            (br#"{"a":"\\\u00AB"}"#, Some(8)),
            (br#"{"\u00Ab":1}"#, Some(2)),
        ] {
            // one byte per read: escapes split across reads
            struct Trickle<'a>(&'a [u8]);
            impl Read for Trickle<'_> {
                fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                    let Some((&b, rest)) = self.0.split_first() else {
                        return Ok(0);
                    };
                    buf[0] = b;
                    self.0 = rest;
                    Ok(1)
                }
            }
            let mut s = EscapeScan::new(Trickle(json));
            std::io::copy(&mut s, &mut std::io::sink()).unwrap();
            assert_eq!(s.found, want, "{}", String::from_utf8_lossy(json));
            assert_eq!(
                streamforge_canonical::escape::uppercase_escape(json).map(|x| x as u64),
                want
            );
        }
    }
}
