//! Checkpoints: the canonical version-2 envelope and strict restore.
//!
//! docs/checkpoint.md: a checkpoint is the canonical JSON of
//! `{"digest": D, "format": "streamforge-checkpoint", "state": S, "version": 2}`
//! with `D` the digest of `S` ([`chain`]: the history enters it through a
//! hash chain over fixed chunks, so a service produces it from stored
//! chain values). It is deterministic (sorted keys and names, address
//! order; no hash-map order leaks), independent of later mutation (it is a
//! byte string), and restore verifies the digest against the *parsed*
//! state, so insignificant whitespace does not matter; version 1
//! envelopes (`"sha256": H`, the SHA-256 of the canonical bytes of `S`)
//! are still restored. Restore then validates every rule
//! docs/checkpoint.md lists (see [`restore`]) and names what is wrong.

mod api;
pub mod chain;
mod restore;
mod state;
pub mod stream;

use super::aggregate::Agg;
use super::changelog::address_cmp;
use super::history::{HistoryStore, StoreFault};
use super::live::BucketRef;
use super::processor::Processor;
use state::{write_changelog, write_clock, write_pipeline, write_result, PartitionClockDoc};
pub use state::{ClockDoc, PipelineDoc};
use streamforge_canonical::writer as canonical;
use streamforge_canonical::UniqueMap;

pub use restore::{check_clock_doc, restore, resume, Restorer};
pub use state::{check_envelope, ChangelogDoc, ResultDoc, FORMAT};
use streamforge_canonical::sha256_hex;

/// Appends a pipeline document's canonical object, its partitions sorted
/// or as listed.
pub fn write_pipeline_doc(buf: &mut Vec<u8>, doc: &PipelineDoc, sort_partitions: bool) {
    write_pipeline(buf, doc, sort_partitions)
}

/// Where envelope bytes go: a buffer, a hasher, a stream.
pub trait Out {
    /// Appends bytes.
    fn put(&mut self, bytes: &[u8]) -> Result<(), StoreFault>;
}

impl Out for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), StoreFault> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

/// SHA-256 of what is put.
#[derive(Default)]
pub struct HashOut(pub sha2::Sha256, pub u64);

impl Out for HashOut {
    fn put(&mut self, bytes: &[u8]) -> Result<(), StoreFault> {
        use sha2::Digest as _;
        self.0.update(bytes);
        self.1 += bytes.len() as u64;
        Ok(())
    }
}

impl HashOut {
    /// The lowercase hex digest and the number of bytes hashed.
    pub fn finish(self) -> (String, u64) {
        use sha2::Digest as _;
        let digest = self.0.finalize();
        let mut hex = String::with_capacity(64);
        for b in digest {
            hex.push(char::from(b"0123456789abcdef"[(b >> 4) as usize]));
            hex.push(char::from(b"0123456789abcdef"[(b & 15) as usize]));
        }
        (hex, self.1)
    }
}

/// The history parts of a state's canonical text: the late records and
/// each partition's deliveries, as comma-separated items.
pub trait HistoryParts {
    /// Writes the late items.
    fn late(&self, out: &mut dyn Out) -> Result<(), StoreFault>;
    /// Writes the sources items of partition `p` (the pipeline's sorted order).
    fn sources(&self, p: usize, out: &mut dyn Out) -> Result<(), StoreFault>;
}

/// The canonical text of a state without its history: what a checkpoint
/// writes whole every time (live buckets, visible rows, clock, pipeline),
/// in the envelope's exact bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveParts {
    /// `{"sequence":N,"visible":[...]}`.
    pub changelog: Vec<u8>,
    /// The clock object.
    pub clock: Vec<u8>,
    /// The pipeline object.
    pub pipeline: Vec<u8>,
    /// The `windows` array (the live index).
    pub windows: Vec<u8>,
    /// The partitions, sorted (the keys of `sources`).
    pub partitions: Vec<String>,
}

impl LiveParts {
    /// The parts of `p`'s current state.
    pub fn of(p: &Processor) -> LiveParts {
        // Every live bucket with its aggregate, as the index holds them.
        let mut all: Vec<(BucketRef, &Agg)> = Vec::with_capacity(p.live.len());
        p.live.buckets(|b, agg| all.push((b, agg)));
        all.sort_unstable_by(|a, b| address_cmp(&p.keys, &a.0, &b.0));
        let w = p.clock.global.map(|w| w as i128);
        let visible: Vec<(BucketRef, &Agg)> = all
            .iter()
            .filter(|(b, _)| w.is_some_and(|w| b.end <= w) && p.changelog.is_visible(b))
            .copied()
            .collect();
        let partitions = p.pipeline.partitions();
        let pipeline = PipelineDoc {
            lateness: p.pipeline.lateness(),
            partitions: partitions.to_vec(),
            windows: UniqueMap(
                p.pipeline
                    .windows()
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect(),
            ),
        };
        let clock = ClockDoc {
            max_timestamp: p.clock.max_timestamp,
            partitions: UniqueMap(
                partitions
                    .iter()
                    .zip(p.clock.idle.iter().zip(&p.clock.progress))
                    .map(|(name, (&idle, &progress))| {
                        (name.clone(), PartitionClockDoc { idle, progress })
                    })
                    .collect(),
            ),
            watermark: p.clock.global,
        };
        let mut changelog = Vec::with_capacity(64 + visible.len() * 130);
        write_changelog(&mut changelog, p.changelog.sequence(), |b| {
            write_live_rows(p, &visible, b)
        });
        let mut clock_text = Vec::with_capacity(64 + partitions.len() * 48);
        write_clock(&mut clock_text, &clock);
        let mut pipeline_text = Vec::with_capacity(256);
        write_pipeline(&mut pipeline_text, &pipeline, true);
        let mut windows = Vec::with_capacity(2 + all.len() * 130);
        write_live_rows(p, &all, &mut windows);
        LiveParts {
            changelog,
            clock: clock_text,
            pipeline: pipeline_text,
            windows,
            partitions: partitions.to_vec(),
        }
    }

    /// The parts as one byte string (lengths as u64 LE before each part,
    /// then the partition names the same way).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            self.changelog.len() + self.clock.len() + self.pipeline.len() + self.windows.len() + 64,
        );
        for part in [&self.changelog, &self.clock, &self.pipeline, &self.windows] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(&(self.partitions.len() as u64).to_le_bytes());
        for name in &self.partitions {
            out.extend_from_slice(&(name.len() as u64).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
        }
        out
    }

    /// The parts back from [`LiveParts::encode`].
    pub fn decode(bytes: &[u8]) -> Result<LiveParts, String> {
        struct Cursor<'a>(&'a [u8]);
        impl<'a> Cursor<'a> {
            fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
                if n > self.0.len() {
                    return Err("the stored state is truncated".into());
                }
                let (a, b) = self.0.split_at(n);
                self.0 = b;
                Ok(a)
            }
            fn len(&mut self) -> Result<usize, String> {
                let b: [u8; 8] = self
                    .take(8)?
                    .try_into()
                    .map_err(|_| "the stored state is truncated".to_string())?;
                usize::try_from(u64::from_le_bytes(b))
                    .map_err(|_| "a stored length is out of range".to_string())
            }
            fn part(&mut self) -> Result<Vec<u8>, String> {
                let n = self.len()?;
                Ok(self.take(n)?.to_vec())
            }
        }
        let mut c = Cursor(bytes);
        let changelog = c.part()?;
        let clock = c.part()?;
        let pipeline = c.part()?;
        let windows = c.part()?;
        let count = c.len()?;
        let mut partitions = Vec::with_capacity(count.min(1 << 16));
        for _ in 0..count {
            let name = String::from_utf8(c.part()?)
                .map_err(|_| "a stored partition name is not UTF-8".to_string())?;
            partitions.push(name);
        }
        Ok(LiveParts {
            changelog,
            clock,
            pipeline,
            windows,
            partitions,
        })
    }

    /// The change sequence the parts record.
    pub fn sequence(&self) -> Result<u64, String> {
        #[derive(serde::Deserialize)]
        struct Seq {
            sequence: u64,
        }
        let mut de = serde_json::Deserializer::from_slice(&self.changelog);
        serde::Deserialize::deserialize(&mut de)
            .map(|s: Seq| s.sequence)
            .map_err(|e| format!("stored changelog: {e}"))
    }
}

/// Writes rows (address order) of `p`, each with its aggregate.
fn write_live_rows(p: &Processor, rows: &[(BucketRef, &Agg)], buf: &mut Vec<u8>) {
    buf.push(b'[');
    for (i, (b, agg)) in rows.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        write_result(
            buf,
            &p.names[b.window],
            p.keys.name(b.key),
            b.start,
            b.end,
            agg.count,
            agg.sum(),
            agg.min,
            agg.max,
        );
    }
    buf.push(b']');
}

/// Writes the canonical state: the live parts with the history between.
pub fn write_state(
    live: &LiveParts,
    history: &dyn HistoryParts,
    out: &mut dyn Out,
) -> Result<(), StoreFault> {
    out.put(b"{\"changelog\":")?;
    out.put(&live.changelog)?;
    out.put(b",\"clock\":")?;
    out.put(&live.clock)?;
    out.put(b",\"late\":[")?;
    history.late(out)?;
    out.put(b"],\"pipeline\":")?;
    out.put(&live.pipeline)?;
    out.put(b",\"sources\":{")?;
    let mut key = Vec::new();
    for (i, name) in live.partitions.iter().enumerate() {
        key.clear();
        if i > 0 {
            key.push(b',');
        }
        canonical::key(&mut key, name);
        key.push(b'[');
        out.put(&key)?;
        history.sources(i, out)?;
        out.put(b"]")?;
    }
    out.put(b"},\"windows\":")?;
    out.put(&live.windows)?;
    out.put(b"}")
}

/// The envelope's bytes before its digest.
pub const ENVELOPE_PREFIX: &[u8] = b"{\"digest\":\"";
/// Between the digest and the state.
pub const ENVELOPE_MIDDLE: &[u8] = b"\",\"format\":\"streamforge-checkpoint\",\"state\":";
/// After the state.
pub const ENVELOPE_SUFFIX: &[u8] = b",\"version\":2}";

/// Writes the envelope of a state whose digest is `digest` (lowercase
/// hex).
pub fn write_envelope(
    live: &LiveParts,
    history: &dyn HistoryParts,
    digest: &str,
    out: &mut dyn Out,
) -> Result<(), StoreFault> {
    out.put(ENVELOPE_PREFIX)?;
    out.put(digest.as_bytes())?;
    out.put(ENVELOPE_MIDDLE)?;
    write_state(live, history, out)?;
    out.put(ENVELOPE_SUFFIX)
}

/// The version-2 envelope of a version-1 one (same state): checked as a
/// restore parses and checks an envelope (not the state's rules), its
/// state rewritten canonically and its digest computed.
pub fn upgrade_v1(envelope: &[u8]) -> Result<Vec<u8>, String> {
    let doc: state::EnvelopeDoc<'_> = serde_json::from_slice(envelope)
        .map_err(|e| format!("malformed checkpoint envelope: {e}"))?;
    let claimed = state::check_envelope(
        &doc.format,
        doc.version,
        doc.digest.as_deref(),
        doc.sha256.as_deref(),
    )?;
    let canonical = doc.state.canonical();
    if doc.version == 1 && sha256_hex(&canonical) != claimed {
        return Err("checksum mismatch".into());
    }
    let digest = doc.state.digest(true);
    if doc.version == 2 && digest != claimed {
        return Err("digest mismatch".into());
    }
    let mut out = Vec::with_capacity(canonical.len() + 160);
    out.extend_from_slice(ENVELOPE_PREFIX);
    out.extend_from_slice(digest.as_bytes());
    out.extend_from_slice(ENVELOPE_MIDDLE);
    out.extend_from_slice(&canonical);
    out.extend_from_slice(ENVELOPE_SUFFIX);
    Ok(out)
}

/// The length of the envelope of `live` with the history `flushed`
/// (computed from the segments' lengths, without reading them).
pub fn envelope_len(live: &LiveParts, flushed: &crate::sources::Flushed) -> u64 {
    fn joined(segs: &[super::history::SegRef]) -> u64 {
        let n = segs.iter().filter(|s| s.count > 0).count() as u64;
        segs.iter().map(|s| s.bytes).sum::<u64>() + n.saturating_sub(1)
    }
    let mut n = (ENVELOPE_PREFIX.len() + 64 + ENVELOPE_MIDDLE.len() + ENVELOPE_SUFFIX.len()) as u64;
    n += (b"{\"changelog\":".len()
        + b",\"clock\":".len()
        + b",\"late\":[".len()
        + b"],\"pipeline\":".len()
        + b",\"sources\":{".len()
        + b"},\"windows\":".len()
        + 1) as u64;
    n +=
        (live.changelog.len() + live.clock.len() + live.pipeline.len() + live.windows.len()) as u64;
    n += joined(&flushed.late);
    let mut key = Vec::new();
    for (i, name) in live.partitions.iter().enumerate() {
        key.clear();
        canonical::key(&mut key, name);
        n += key.len() as u64 + 2 + u64::from(i > 0);
        n += flushed.sources.get(i).map_or(0, |s| joined(s));
    }
    n
}

/// A processor's history as [`HistoryParts`] (flushed segments through its
/// store, then its tail).
struct Own<'a>(&'a Processor);

impl HistoryParts for Own<'_> {
    fn late(&self, out: &mut dyn Out) -> Result<(), StoreFault> {
        let mut buf = Vec::new();
        self.0.late.write(self.0.sources.store(), &mut buf)?;
        out.put(&buf)
    }

    fn sources(&self, p: usize, out: &mut dyn Out) -> Result<(), StoreFault> {
        let mut buf = Vec::new();
        self.0.sources.write_partition(p, &self.0.keys, &mut buf)?;
        out.put(&buf)
    }
}

/// The digest (version 2) of the processor's current state: from the
/// chains of its flushed history and its tail, without reading the
/// flushed history.
pub fn digest_of(p: &Processor, live: &LiveParts) -> String {
    let sources: Vec<chain::Hash> = (0..p.pipeline.partitions().len())
        .map(|i| p.sources.chain_value(i, &p.keys))
        .collect();
    chain::digest(live, &sources, &p.late.chain_value())
}

/// The canonical envelope of the processor's current state.
pub fn take(p: &Processor) -> Result<Vec<u8>, StoreFault> {
    let live = LiveParts::of(p);
    let digest = digest_of(p, &live);
    let mut out = Vec::with_capacity(4096);
    write_envelope(&live, &Own(p), &digest, &mut out)?;
    Ok(out)
}

/// The history segments a processor holds, for [`HistoryParts`] over a
/// stored checkpoint (the store reads them back).
pub fn store_history_parts<'a>(
    store: &'a dyn HistoryStore,
    flushed: &'a crate::sources::Flushed,
) -> impl HistoryParts + 'a {
    Stored { store, flushed }
}

struct Stored<'a> {
    store: &'a dyn HistoryStore,
    flushed: &'a crate::sources::Flushed,
}

fn segs_text(
    store: &dyn HistoryStore,
    segs: &[super::history::SegRef],
    out: &mut dyn Out,
) -> Result<(), StoreFault> {
    let mut first = true;
    let mut buf = Vec::new();
    for s in segs.iter().filter(|s| s.count > 0) {
        buf.clear();
        if !first {
            buf.push(b',');
        }
        first = false;
        store.text(s.id, &mut buf)?;
        out.put(&buf)?;
    }
    Ok(())
}

impl HistoryParts for Stored<'_> {
    fn late(&self, out: &mut dyn Out) -> Result<(), StoreFault> {
        segs_text(self.store, &self.flushed.late, out)
    }

    fn sources(&self, p: usize, out: &mut dyn Out) -> Result<(), StoreFault> {
        segs_text(
            self.store,
            self.flushed.sources.get(p).map_or(&[], Vec::as_slice),
            out,
        )
    }
}
