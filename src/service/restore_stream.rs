//! A restore by body of an envelope too large to hold: read as it streams,
//! staged in the store, checked, and put in place in one transaction only
//! once every rule and the digest (or a version 1 checksum) pass (a refused one changes nothing).
//!
//! 1. The envelope is parsed as it arrives (`engine::checkpoint::stream`):
//!    its small parts are kept, its history is written as it comes into
//!    *staged* segments (per `sources` name and for `late`, in the
//!    envelope's own text), a few MB at a time.
//! 2. The staged deliveries are read back partition by partition into a
//!    processor that checks them as a restore does (offsets, identities,
//!    `clock.max_timestamp`), flushing its history into staged segments as
//!    it grows; the late records are checked against it (and their staged
//!    segments become the late output as they are).
//! 3. The digest (version 2) is computed from the chains of the restored
//!    history, hashed as it was flushed; the checksum of a version 1
//!    envelope over the state's canonical bytes, assembled from what was
//!    staged.
//! 4. The restored state is stored as a hidden checkpoint and restored by
//!    its id: one transaction, as any restore.
//!
//! Memory holds the live state (windows, visible rows, clock), a few MB
//! of staged text and at most [`FLUSH_EVERY`] restored deliveries. The
//! staged segments nobody names afterwards are deleted (a crash leaves
//! them for the next start to delete).

use std::io::Read;
use std::sync::Arc;

use crate::engine::checkpoint::chain::{Chain, ChunkRec};
use crate::engine::checkpoint::stream::{self, StageSink};
use crate::engine::checkpoint::{HashOut, LiveParts, Restorer};
use crate::engine::history::{HistoryStore, NewSegment, SegId, SegKind, SegRef};
use crate::engine::late::LateOutput;
use crate::engine::{Event, Processor, Rejection};
use crate::store::{EngineId, Reader, Restored, RestoredLate};

use super::checkpoint::SEGMENT_ITEMS;
use super::order::{self, Held};
use super::stored_parts::StoredParts;
use super::{RestoreAnswer, Service, ServiceError};

/// Restored deliveries held in memory before they are flushed.
const FLUSH_EVERY: u64 = 1 << 18;

/// Bytes of staged text per staged segment.
const STAGE_BYTES: usize = 4 << 20;

fn invalid(detail: String) -> ServiceError {
    let detail = if detail.is_empty() {
        "the checkpoint cannot be restored".to_string()
    } else {
        detail
    };
    ServiceError::Rejected(Rejection::InvalidCheckpoint(detail))
}

/// One staged list of items (a partition's deliveries, or the late
/// records), written in segments as it grows.
#[derive(Default)]
struct Staged {
    segs: Vec<SegRef>,
    text: Vec<u8>,
    count: u64,
    total: u64,
    /// The late records' digest chain (their staged segments become the
    /// restored late output, stored with their chunk records).
    chain: Chain,
    /// The chunks the staged text completes.
    chunks: Vec<ChunkRec>,
}

/// Step 1's sink: the history into staged segments.
struct Stage<'a> {
    svc: &'a Service,
    /// Lent by the restore, which holds the checkpoint slot.
    at: &'a mut Held<order::Checkpointing>,
    /// `sources` in the envelope's order: name and its staged segments.
    sources: Vec<(String, Staged)>,
    late: Staged,
    /// A storage failure (reported as such, not as a refused envelope).
    failed: Option<ServiceError>,
}

impl Stage<'_> {
    fn put(&mut self, kind: SegKind, which: Option<usize>) -> Result<(), String> {
        let staged = match which {
            Some(i) => match self.sources.get_mut(i) {
                Some((_, s)) => s,
                None => return Ok(()),
            },
            None => &mut self.late,
        };
        if staged.count == 0 {
            return Ok(());
        }
        let stored = self.svc.writer(self.at).put_segment_as(
            kind,
            staged.count,
            &staged.text,
            &[],
            &staged.chunks,
            true,
        );
        match stored {
            Ok(id) => {
                staged.segs.push(SegRef {
                    id,
                    first: staged.total,
                    count: staged.count,
                    bytes: staged.text.len() as u64,
                });
                self.svc.wal_written(staged.text.len());
                staged.total += staged.count;
                staged.count = 0;
                staged.text.clear();
                staged.chunks.clear();
                Ok(())
            }
            Err(e) => {
                self.failed = Some(e.into());
                Err("storage failed".into())
            }
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        self.put(SegKind::Late, None)?;
        for i in 0..self.sources.len() {
            self.put(SegKind::Sources, Some(i))?;
        }
        Ok(())
    }
}

impl StageSink for Stage<'_> {
    fn late(&mut self, e: Event, watermark: i64) -> Result<(), String> {
        let s = &mut self.late;
        if s.count > 0 {
            s.text.push(b',');
        }
        let start = s.text.len();
        crate::engine::segment_text::write_late(
            &mut s.text,
            &e.id,
            &e.key,
            e.timestamp,
            e.value,
            watermark,
        );
        s.chunks.extend(s.chain.push(&s.text[start..]));
        s.count += 1;
        if s.text.len() >= STAGE_BYTES {
            self.put(SegKind::Late, None)?;
        }
        Ok(())
    }

    fn source(&mut self, name: &str, e: Event) -> Result<(), String> {
        if self.sources.last().is_none_or(|(n, _)| n != name) {
            if let Some(i) = self.sources.len().checked_sub(1) {
                self.put(SegKind::Sources, Some(i))?;
            }
            self.sources.push((name.to_string(), Staged::default()));
        }
        let i = self.sources.len() - 1;
        let Some((_, s)) = self.sources.get_mut(i) else {
            return Ok(());
        };
        if s.count > 0 {
            s.text.push(b',');
        }
        crate::engine::segment_text::write_event(&mut s.text, &e.id, &e.key, e.timestamp, e.value);
        s.count += 1;
        if s.text.len() >= STAGE_BYTES {
            self.put(SegKind::Sources, Some(i))?;
        }
        Ok(())
    }
}

impl Service {
    /// `POST /restore` of an envelope read from `body` as it streams (see
    /// the module docs).
    pub fn restore_stream(&self, body: impl Read) -> Result<RestoreAnswer, ServiceError> {
        let at = &mut Held::entry();
        let out = {
            let mut slot = self.checkpointing(at);
            let at = slot.held();
            let out = self.restore_streamed(at, body);
            // Staged segments that the restored state does not name go
            // (all of them when it was refused).
            let cleaned = self.writer(at).end_staging();
            let out = out?;
            if let Err(e) = cleaned {
                tracing::warn!(error = %e, "deleting a restore's staged history failed (the next start deletes it)");
            }
            out
        };
        Ok(out)
    }

    // Over 120 lines: the restore's numbered steps (parse and stage, check, swap), kept in one place.
    fn restore_streamed(
        &self,
        held: &mut Held<order::Checkpointing>,
        body: impl Read,
    ) -> Result<RestoreAnswer, ServiceError> {
        let history: Arc<dyn HistoryStore> = self.setup.history.clone();
        // 1. Parse, staging the history.
        let mut scan = stream::EscapeScan::new(body);
        let mut stage = Stage {
            svc: self,
            at: held,
            sources: Vec::new(),
            late: Staged::default(),
            failed: None,
        };
        let read = stream::read(&mut scan, &mut stage);
        if let Some(e) = stage.failed.take() {
            return Err(e);
        }
        let doc = read.map_err(|e| invalid(stream::message(e)))?;
        stage.finish().map_err(invalid)?;
        if let Some(e) = stage.failed.take() {
            return Err(e);
        }
        // The staged segments; the token goes back to this restore.
        let Stage { sources, late, .. } = stage;
        let claimed = crate::engine::checkpoint::check_envelope(
            &doc.format,
            doc.version,
            doc.digest.as_deref(),
            doc.sha256.as_deref(),
        )
        .map_err(invalid)?
        .to_string();
        if let Some(at) = scan.found {
            return Err(invalid(crate::canonical::escape::uppercase_escape_error(
                usize::try_from(at).unwrap_or(usize::MAX),
            )));
        }
        // 2. The deliveries, partition by partition, into a checking
        // processor, flushed as it grows.
        let unsorted = doc.pipeline.partitions.windows(2).any(|w| w[0] > w[1]);
        let doc_pipeline = {
            let mut text = Vec::new();
            crate::engine::checkpoint::write_pipeline_doc(&mut text, &doc.pipeline, false);
            text
        };
        let mut r =
            Restorer::new(doc.pipeline, Some(&self.setup.pipeline), history).map_err(invalid)?;
        crate::engine::checkpoint::check_clock_doc(&doc.clock, r.processor().pipeline())
            .map_err(invalid)?;
        let names: Vec<String> = doc.source_names.clone();
        let at = r.partitions(&names).map_err(invalid)?;
        let reader = Reader::open(&self.env.db)?;
        let mut pushed = 0u64;
        for (name, p) in names.iter().zip(at) {
            // A partition with no deliveries staged nothing.
            let Some((_, staged)) = sources.iter().find(|(n, _)| n == name) else {
                continue;
            };
            for seg in &staged.segs {
                let mut failure = None;
                reader
                    .segment_blocks(seg.id, |text| {
                        for (a, b) in crate::store::segments::item_ranges(text)? {
                            let e = crate::engine::segment_text::parse_event(&text[a..b])
                                .map_err(crate::store::Error::Corrupt)?;
                            if let Err(m) = r.push(p, name, e) {
                                failure = Some(m);
                                return Err(crate::store::Error::Corrupt(String::new()));
                            }
                            pushed += 1;
                            if pushed.is_multiple_of(FLUSH_EVERY) {
                                self.flush_restoring(held, r.processor())
                                    .map_err(|e| crate::store::Error::Corrupt(e.to_string()))?;
                            }
                        }
                        Ok(())
                    })
                    .map_err(|e| match failure.take() {
                        Some(m) => invalid(m),
                        None => ServiceError::from(e),
                    })?;
            }
        }
        self.flush_restoring(held, r.processor())?;
        // The late records: checked against the history; their staged
        // segments are the late output as they are.
        let late_segs = late.segs.clone();
        let mut late_iter = LateItems {
            reader: &reader,
            segs: &late_segs,
            seg: 0,
            items: Vec::new(),
            next: 0,
        };
        let late_output =
            LateOutput::from_segments(late_segs.clone(), late.chain.clone()).map_err(invalid)?;
        let p = r
            .finish(
                &doc.clock,
                doc.changelog.sequence,
                &doc.changelog.visible,
                &doc.windows,
                late_output,
                &mut std::iter::from_fn(|| late_iter.next_item()),
                false,
            )
            .map_err(invalid)?;
        // 3. The digest (version 2: from the chains of the restored
        // history, which was hashed as it was flushed) or the checksum
        // (version 1: over the state's canonical bytes, read back), each
        // also accepted over the pipeline's partitions as listed when they
        // are not sorted.
        let live = LiveParts::of(&p);
        let flushed = p.flushed_history();
        let digest = crate::engine::checkpoint::digest_of(&p, &live);
        let as_listed = |live: &LiveParts| {
            let mut alt = live.clone();
            alt.pipeline = doc_pipeline.clone();
            alt
        };
        if doc.version == 2 {
            if digest != claimed
                && !(unsorted
                    && crate::engine::checkpoint::digest_of(&p, &as_listed(&live)) == claimed)
            {
                return Err(invalid(format!(
                    "digest mismatch: envelope says {claimed:?}, state hashes to {digest}"
                )));
            }
        } else {
            let hash = |live: &LiveParts| -> Result<String, ServiceError> {
                let mut h = HashOut::default();
                crate::engine::checkpoint::write_state(
                    live,
                    &StoredParts::new(&reader, &flushed),
                    &mut h,
                )
                .map_err(|e| {
                    ServiceError::Unavailable(format!("cannot read the staged history: {e}"))
                })?;
                Ok(h.finish().0)
            };
            let actual = hash(&live)?;
            if actual != claimed && !(unsorted && hash(&as_listed(&live))? == claimed) {
                return Err(invalid(format!(
                    "checksum mismatch: envelope says {claimed:?}, state hashes to {actual}"
                )));
            }
        }
        // 4. In place, as a restore by id of a hidden checkpoint.
        let out = RestoreAnswer {
            sequence: p.sequence(),
            late: p.late_len(),
            watermark: p.watermark(),
        };
        let bytes = crate::engine::checkpoint::envelope_len(&live, &flushed);
        let id = self.writer(held).store_hidden_window(
            &live.encode(),
            &flushed,
            bytes,
            &digest,
            out.sequence,
        )?;
        let processor = self.setup.sharded(p);
        self.restore_engine(
            held,
            &Restored {
                engine: EngineId::Window,
                checkpoint_id: Some(id),
                envelope: None,
                sequence: out.sequence,
                late: RestoredLate::Segments(&flushed.late),
                keys_through: None,
            },
            |_| Ok(()),
            |engines| engines.window = processor,
        )?;
        Ok(out)
    }

    /// Flushes a processor being restored (not the service's) into staged
    /// segments, its ids into the id index.
    fn flush_restoring(
        &self,
        at: &mut Held<order::Checkpointing>,
        p: &mut Processor,
    ) -> Result<(), ServiceError> {
        let snap = p.snapshot();
        let mut stored: Vec<(NewSegment, SegId)> = Vec::new();
        snap.each_tail_segment(SEGMENT_ITEMS, &mut |mut seg| {
            if seg.kind != SegKind::Sources {
                return Ok(());
            }
            let id = self.writer(at).put_segment_as(
                seg.kind,
                seg.count,
                &seg.text,
                &seg.ends,
                &seg.chunks,
                true,
            )?;
            self.wal_written(seg.text.len());
            seg.text = Vec::new();
            stored.push((seg, id));
            Ok::<(), ServiceError>(())
        })?;
        let ids: Vec<(SegId, &[(u64, u64)])> = stored
            .iter()
            .map(|(s, id)| (*id, s.ids.as_slice()))
            .collect();
        self.setup.history.add_ids(&ids)?;
        p.flushed(&snap, &stored);
        self.flush_ids(at, self.setup.history.last_segment(), false);
        Ok(())
    }
}

/// The staged late records, read back in order.
struct LateItems<'a> {
    reader: &'a Reader,
    segs: &'a [SegRef],
    seg: usize,
    items: Vec<(Event, i64)>,
    next: usize,
}

impl LateItems<'_> {
    fn next_item(&mut self) -> Option<Result<(Event, i64), String>> {
        while self.next >= self.items.len() {
            let seg = self.segs.get(self.seg)?;
            self.seg += 1;
            self.next = 0;
            let mut items = Vec::new();
            let read = self.reader.segment_blocks(seg.id, |text| {
                for (a, b) in crate::store::segments::item_ranges(text)? {
                    items.push(
                        crate::engine::segment_text::parse_late(&text[a..b])
                            .map_err(crate::store::Error::Corrupt)?,
                    );
                }
                Ok(())
            });
            if let Err(e) = read {
                return Some(Err(format!("cannot read the staged late records: {e}")));
            }
            self.items = items;
        }
        let item = self.items.get(self.next).cloned();
        self.next += 1;
        item.map(Ok)
    }
}
