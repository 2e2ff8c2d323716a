//! The command log, the pipeline and patterns rows, and the recovery
//! bases; the output pages are read in `pages`.
//!
//! Acknowledged mutating calls of both engines are stored by ONE
//! transaction ([`Writer::append`], a group commit of one or more requests):
//! per request its command row (its engine, kind and the request body as
//! received), one row holding all of its changes (a binary chunk, [`chunk`];
//! rendered to JSON for pages) and its records (late records, or pattern
//! output). A restore is one transaction too ([`Writer::restore`]).

use rusqlite::types::{Value, ValueRef};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::chunk::{self, chunk_rows_in, text_rows};
use super::error::{Error, Op, Result};
use super::pages::{epoch_of, pruned_through, seq_i64, Stream};
use super::{EngineId, Reader, Writer};

/// The recovery base: the state to restore and its change sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    /// The state.
    pub state: BaseState,
    /// Its change sequence (the changelog head never goes below it).
    pub sequence: u64,
}

/// What a recovery base holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseState {
    /// A checkpoint envelope (the pattern engine's; a window engine
    /// checkpoint stored whole, or restored from a client's body).
    Envelope(Vec<u8>),
    /// A window engine checkpoint stored incrementally.
    Window(super::StoredWindow),
}

/// The late records a restore puts in the late pages.
#[derive(Debug, Clone, Copy)]
pub enum RestoredLate<'a> {
    /// `(seq, compact JSON)`.
    Records(&'a [(u64, String)]),
    /// Read from these late segments (as `seq` 1, 2, ... in order).
    Segments(&'a [streamforge_engine::history::SegRef]),
}

impl Writer {
    /// The stored pipeline JSON, if the database has been initialized.
    pub fn pipeline(&self) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT json FROM pipeline WHERE id = 1", [], |r| r.get(0))
            .optional()
            .op("SELECT pipeline")
    }

    /// Stores the pipeline of a fresh database.
    pub fn set_pipeline(&mut self, json: &str) -> Result<()> {
        self.conn
            .execute("INSERT INTO pipeline (id, json) VALUES (1, ?1)", [json])
            .op("INSERT pipeline")
            .map(drop)
    }

    /// The stored pattern document, if the database has one.
    pub fn patterns(&self) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT json FROM patterns WHERE id = 1", [], |r| r.get(0))
            .optional()
            .op("SELECT patterns")
    }

    /// The pattern document in force: the last one put in force by a
    /// logged change, else the one stored first.
    pub fn current_patterns(&self) -> Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT coalesce(current, json) FROM patterns WHERE id = 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .op("SELECT patterns (current)")
    }

    /// Stores the pattern document of a database that had none.
    pub fn set_patterns(&mut self, json: &str) -> Result<()> {
        self.conn
            .execute("INSERT INTO patterns (id, json) VALUES (1, ?1)", [json])
            .op("INSERT patterns")
            .map(drop)
    }

    /// Appends acknowledged commands (a group commit: several requests) with
    /// their changes and late records, in ONE transaction.
    pub fn append(&mut self, rows: &[CommandRow<'_>]) -> Result<()> {
        self.append_or_fail(rows, false)
    }

    /// [`Writer::append`], or with `fail` every row is written and the
    /// transaction is then rolled back instead of committed, as a storage
    /// failure at COMMIT would (the chaos suite's injected failure, see
    /// `service::faults`).
    pub fn append_or_fail(&mut self, rows: &[CommandRow<'_>], fail: bool) -> Result<()> {
        // BEGIN and COMMIT as cached statements: a single-event call commits
        // alone, and `Connection::transaction` compiles both anew each time.
        let tx = Immediate::begin(&self.conn)?;
        {
            let mut cmd =
                tx.0.prepare_cached(
                    "INSERT INTO commands (engine, kind, body, encoding) VALUES (?1, ?2, ?3, ?4)",
                )
                .op("prepare INSERT commands")?;
            // Prepared (looked up in the statement cache) only when a row
            // has changes: a single event before its watermark has none,
            // and the lookup is a few percent of such a call's CPU.
            let mut chg = None;
            for r in rows {
                cmd.execute(params![r.engine.name(), r.kind, r.body, r.encoding])
                    .op("INSERT commands")?;
                if let Some((first, last, body)) = r.changes {
                    let st = match &mut chg {
                        Some(st) => st,
                        None => chg.insert(
                            tx.0.prepare_cached(
                                "INSERT INTO changes (seq, body, last_seq) VALUES (?1, ?2, ?3)",
                            )
                            .op("prepare INSERT changes")?,
                        ),
                    };
                    st.execute(params![seq_i64(first)?, body, seq_i64(last)?])
                        .op("INSERT changes")?;
                }
                if let Some(key) = &r.key {
                    super::idempotency_keys::insert(tx.0, key, self.keep_keys)?;
                }
                if let Some(doc) = r.document {
                    tx.0.prepare_cached("UPDATE patterns SET current = ?1 WHERE id = 1")
                        .op("prepare UPDATE patterns")?
                        .execute([doc])
                        .op("UPDATE patterns (a change)")?;
                }
                let (stream, records) = r.records;
                if records.is_empty() {
                    continue;
                }
                let mut rec =
                    tx.0.prepare_cached(stream.insert_sql())
                        .op("prepare INSERT records")?;
                for (seq, body) in records {
                    rec.execute(params![seq_i64(*seq)?, body])
                        .op("INSERT records")?;
                }
            }
        }
        if fail {
            drop(tx);
            return Err(Error::Injected("the commit of a group of calls"));
        }
        tx.commit()?;
        self.appends
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Number of logged commands since the recovery base.
    pub fn command_count(&self) -> Result<u64> {
        self.conn
            .query_row("SELECT count(*) FROM commands", [], |r| r.get::<_, i64>(0))
            .op("SELECT count(*) FROM commands")
            .map(|n| n.max(0) as u64)
    }

    /// The largest stored sequence of a stream (0 when empty).
    pub fn max_seq(&self, stream: Stream) -> Result<u64> {
        self.conn
            .query_row(stream.max_sql(), [], |r| r.get::<_, i64>(0))
            .op("SELECT the head of a stream")
            .map(|s| s.max(0) as u64)
    }

    /// An engine's recovery base, if any.
    pub fn base(&self, engine: EngineId) -> Result<Option<Base>> {
        let row: Option<(Option<Vec<u8>>, Option<i64>, i64)> = self
            .conn
            .query_row(
                "SELECT envelope, checkpoint_id, sequence FROM recovery_bases WHERE engine = ?1",
                [engine.name()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .op("SELECT recovery_bases")?;
        let Some((inline, checkpoint_id, sequence)) = row else {
            return Ok(None);
        };
        let state = match (inline, checkpoint_id) {
            (Some(e), _) => BaseState::Envelope(e),
            (None, Some(id)) => match super::window_checkpoints::window_row(&self.conn, id, 0)? {
                Some(row) => BaseState::Window(row.state),
                None => BaseState::Envelope(
                    super::checkpoints::envelope_by_id(&self.conn, id)?.ok_or_else(|| {
                        Error::Corrupt(format!(
                            "the recovery base names checkpoint {id}, which is missing"
                        ))
                    })?,
                ),
            },
            (None, None) => {
                return Err(Error::Corrupt(
                    "the recovery base has neither an envelope nor a checkpoint".into(),
                ))
            }
        };
        Ok(Some(Base {
            state,
            sequence: sequence.max(0) as u64,
        }))
    }

    /// An engine's epoch: the restores that cut its streams back (the
    /// window engine's changes and late output are cut back together, so
    /// they share it).
    pub fn epoch(&self, engine: EngineId) -> Result<u64> {
        epoch_of(&self.conn, engine.stream())
    }

    /// Makes a restored envelope an engine's recovery base, in one
    /// transaction: the engine's command log is cleared, its output after
    /// the checkpoint is deleted (window engine: changes after `sequence`,
    /// and the late table becomes exactly `late`; pattern engine: output
    /// after `sequence`), and its streams enter the next epoch (returned),
    /// with their cut-back points recorded.
    pub fn restore(&mut self, r: &Restored<'_>) -> Result<u64> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (restore)")?;
        let seq = seq_i64(r.sequence)?;
        // Batches formed for sinks keep the records they will send again.
        super::sinks::freeze(&tx, r.engine)?;
        let main = r.engine.stream();
        let epoch = epoch_of(&tx, main)? + 1;
        let mut cuts = vec![(main, seq)];
        if r.engine == EngineId::Window {
            let late = match r.late {
                RestoredLate::Records(l) => l.len() as u64,
                RestoredLate::Segments(s) => s.iter().map(|s| s.count).sum(),
            };
            cuts.push((Stream::Late, seq_i64(late)?));
        }
        {
            let mut st = tx
                .prepare_cached("INSERT INTO restores (stream, epoch, cut) VALUES (?1, ?2, ?3)")
                .op("prepare INSERT restores")?;
            for (stream, cut) in &cuts {
                st.execute(params![stream.name(), seq_i64(epoch)?, cut])
                    .op("INSERT restores")?;
            }
        }
        // Pruned records before the cut stay pruned; the ones after it are
        // gone and will be issued again. The late output is rewritten whole.
        tx.execute(
            "UPDATE pruned SET through = min(through, ?1) WHERE stream = ?2",
            params![seq, main.name()],
        )
        .op("UPDATE pruned (restore)")?;
        if r.engine == EngineId::Window {
            tx.execute("DELETE FROM pruned WHERE stream = 'late'", [])
                .op("DELETE FROM pruned (restore)")?;
        }
        set_recovery_base(&tx, r, seq)?;
        tx.execute("DELETE FROM commands WHERE engine = ?1", [r.engine.name()])
            .op("DELETE FROM commands")?;
        match r.engine {
            EngineId::Window => cut_changes(&tx, r.sequence)?,
            EngineId::Patterns => {
                tx.execute("DELETE FROM pattern_output WHERE seq > ?1", [seq])
                    .op("DELETE FROM pattern_output WHERE seq > ?")?;
                if let Some((next_ordinal, watermark)) = r.keys_through {
                    super::idempotency_keys::restore(&tx, next_ordinal, watermark)?;
                }
            }
        }
        if r.engine == EngineId::Window {
            restore_late(&tx, r.late)?;
        }
        super::segments::collect(&tx)?;
        tx.commit().op("COMMIT (restore)")?;
        Ok(epoch)
    }
    /// Retention of the output pages: deletes the changes up to
    /// `changes_through` (whole chunks only: a chunk that ends later is
    /// kept) and the late records up to `late_through`, and records what
    /// was pruned. Callers pass bounds at or below the recovery base, so a
    /// replay never needs what is pruned. Returns what is pruned now.
    pub fn prune(&mut self, changes_through: u64, late_through: u64) -> Result<(u64, u64)> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (prune)")?;
        // Never a record a sink has still to read (docs/sinks.md).
        let changes_through = changes_through.min(super::sinks::hold(&tx, Stream::Changes)?);
        let late_through = late_through.min(super::sinks::hold(&tx, Stream::Late)?);
        let c: Option<i64> = tx
            .query_row(
                "SELECT max(coalesce(last_seq, seq)) FROM changes WHERE coalesce(last_seq, seq) <= ?1",
                [seq_i64(changes_through)?],
                |r| r.get(0),
            )
            .op("SELECT prunable changes")?;
        if let Some(c) = c {
            tx.execute(
                "DELETE FROM changes WHERE coalesce(last_seq, seq) <= ?1",
                [c],
            )
            .op("DELETE FROM changes (prune)")?;
            tx.execute(
                "INSERT INTO pruned (stream, through) VALUES ('changes', ?1)
                 ON CONFLICT (stream) DO UPDATE SET through = max(through, excluded.through)",
                [c],
            )
            .op("INSERT pruned (changes)")?;
        }
        let l: Option<i64> = tx
            .query_row(
                "SELECT max(seq) FROM late WHERE seq <= ?1",
                [seq_i64(late_through)?],
                |r| r.get(0),
            )
            .op("SELECT prunable late")?;
        if let Some(l) = l {
            tx.execute("DELETE FROM late WHERE seq <= ?1", [l])
                .op("DELETE FROM late (prune)")?;
            tx.execute(
                "INSERT INTO pruned (stream, through) VALUES ('late', ?1)
                 ON CONFLICT (stream) DO UPDATE SET through = max(through, excluded.through)",
                [l],
            )
            .op("INSERT pruned (late)")?;
        }
        let out = (
            pruned_through(&tx, Stream::Changes)?,
            pruned_through(&tx, Stream::Late)?,
        );
        tx.commit().op("COMMIT (prune)")?;
        Ok(out)
    }
}

/// The engine's recovery base after a restore: the checkpoint by id, or
/// the envelope itself when the checkpoint is gone or has no id.
fn set_recovery_base(tx: &rusqlite::Transaction<'_>, r: &Restored<'_>, seq: i64) -> Result<()> {
    // A restore by id whose checkpoint was deleted since it was read (an
    // automatic one rotated out meanwhile) keeps the envelope it read.
    let by_id = match r.checkpoint_id {
        Some(id) => tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM checkpoints WHERE id = ?1)",
                [id],
                |row| row.get::<_, bool>(0),
            )
            .op("SELECT checkpoints (restore)")?
            .then_some(id),
        None => None,
    };
    match (by_id, r.envelope) {
        (Some(id), _) => tx.execute(
            "INSERT OR REPLACE INTO recovery_bases (engine, checkpoint_id, envelope, sequence)
             VALUES (?1, ?2, NULL, ?3)",
            params![r.engine.name(), id, seq],
        ),
        (None, None) => {
            return Err(Error::Corrupt(format!(
                "checkpoint {:?} was deleted while it was being restored",
                r.checkpoint_id
            )))
        }
        (None, Some(envelope)) => tx.execute(
            "INSERT OR REPLACE INTO recovery_bases (engine, checkpoint_id, envelope, sequence)
             VALUES (?1, NULL, ?2, ?3)",
            params![r.engine.name(), envelope, seq],
        ),
    }
    .op("INSERT OR REPLACE recovery_bases")?;
    Ok(())
}

/// The late table after a restore: exactly the checkpoint's late records,
/// given as they are or read from the late segments it names.
fn restore_late(tx: &rusqlite::Transaction<'_>, late: RestoredLate<'_>) -> Result<()> {
    tx.execute("DELETE FROM late", []).op("DELETE FROM late")?;
    let mut st = tx
        .prepare_cached("INSERT INTO late (seq, body) VALUES (?1, ?2)")
        .op("prepare INSERT late")?;
    match late {
        RestoredLate::Records(records) => {
            for (s, body) in records {
                st.execute(params![seq_i64(*s)?, body]).op("INSERT late")?;
            }
        }
        RestoredLate::Segments(segs) => {
            let mut seq = 0u64;
            for seg in segs {
                super::segments::for_each_block(tx, seg.id, |text| {
                    for (a, b) in super::segments::item_ranges(text)? {
                        let (event, watermark) =
                            streamforge_engine::segment_text::parse_late(&text[a..b])
                                .map_err(|m| Error::Corrupt(format!("segment {}: {m}", seg.id)))?;
                        seq += 1;
                        let mut body = Vec::with_capacity(96);
                        streamforge_engine::WriteJson::write_json(
                            &streamforge_engine::LateRecord {
                                seq,
                                event,
                                watermark,
                            },
                            &mut body,
                        );
                        let body = String::from_utf8(body)
                            .map_err(|_| Error::Corrupt("a late record is not UTF-8".into()))?;
                        st.execute(params![seq_i64(seq)?, body]).op("INSERT late")?;
                    }
                    Ok(())
                })?;
            }
        }
    }
    Ok(())
}

/// Cuts the changelog back to `sequence` inside a restore's transaction:
/// later chunks go, a chunk that straddles it keeps its prefix.
fn cut_changes(tx: &rusqlite::Transaction<'_>, sequence: u64) -> Result<()> {
    let seq = seq_i64(sequence)?;
    tx.execute("DELETE FROM changes WHERE seq > ?1", [seq])
        .op("DELETE FROM changes WHERE seq > ?")?;
    // A chunk that straddles the restored sequence keeps its prefix.
    let straddling: Option<(i64, Vec<u8>, bool)> = tx
        .query_row(
            "SELECT seq, body FROM changes WHERE seq <= ?1 AND coalesce(last_seq, seq) > ?1",
            [seq],
            |r| {
                let body = r.get_ref(1)?;
                let binary = matches!(body, ValueRef::Blob(_));
                Ok((r.get(0)?, body.as_bytes()?.to_vec(), binary))
            },
        )
        .optional()
        .op("SELECT the straddling chunk")?;
    if let Some((first, body, binary)) = straddling {
        let first_seq = first.max(0) as u64;
        let kept = if binary {
            let mut changes = chunk::decode(first_seq, &body)
                .map_err(|e| Error::Corrupt(format!("change chunk at {first}: {e}")))?;
            changes.retain(|c| c.seq <= sequence);
            Value::Blob(chunk::encode(&changes))
        } else {
            let rows = text_rows(first_seq, &String::from_utf8_lossy(&body))?;
            let kept: Vec<String> = rows
                .into_iter()
                .filter(|(s, _)| *s <= sequence)
                .map(|(_, c)| c)
                .collect();
            Value::Text(format!("[{}]", kept.join(",")))
        };
        tx.execute(
            "UPDATE changes SET body = ?1, last_seq = ?2 WHERE seq = ?3",
            params![kept, seq, first],
        )
        .op("UPDATE the straddling chunk")?;
    }
    Ok(())
}

/// The reads recovery needs, on the writing connection and on readers (the
/// pipelined replay reads commands and verifies chunks on connections of its
/// own).
macro_rules! replay_reads {
    ($t:ty) => {
        impl $t {
            /// Calls `f(engine, kind, body)` for every logged command, in log
            /// order.
            pub fn for_each_command<E: From<Error>>(
                &self,
                mut f: impl FnMut(EngineId, &str, Vec<u8>) -> std::result::Result<(), E>,
            ) -> std::result::Result<(), E> {
                let mut st = self
                    .conn
                    .prepare("SELECT engine, kind, body, encoding FROM commands ORDER BY id")
                    .op("prepare SELECT commands")?;
                let mut rows = st.query([]).op("SELECT commands")?;
                while let Some(row) = rows.next().op("SELECT commands (next)")? {
                    let engine = match row.get_ref(0).op("commands.engine")?.as_str() {
                        Ok("window") => EngineId::Window,
                        Ok("patterns") => EngineId::Patterns,
                        other => {
                            return Err(Error::Corrupt(format!(
                                "a logged command of an unknown engine: {other:?}"
                            ))
                            .into())
                        }
                    };
                    let kind: String = row.get(1).op("commands.kind")?;
                    let body: Vec<u8> = row.get(2).op("commands.body")?;
                    let encoding: i64 = row.get(3).op("commands.encoding")?;
                    f(engine, &kind, super::body::unpack(encoding, body)?)?;
                }
                Ok(())
            }

            /// The stored chunk that starts at change `seq`: its last sequence and
            /// its body as stored (a binary chunk, or for rows of schema versions
            /// 1 and 2 a JSON array or one JSON change).
            pub fn chunk_at(&self, seq: u64) -> Result<Option<(u64, Vec<u8>)>> {
                self.conn
                    .prepare_cached("SELECT coalesce(last_seq, seq), body FROM changes WHERE seq = ?1")
                    .op("prepare SELECT change chunk")?
                    .query_row([seq_i64(seq)?], |r| {
                        Ok((
                            r.get::<_, i64>(0)?.max(0) as u64,
                            r.get_ref(1)?.as_bytes()?.to_vec(),
                        ))
                    })
                    .optional()
                    .op("SELECT change chunk")
            }

            /// The stored changes with sequences `first..=last`, split out of their
            /// chunks, in order (missing ones are absent).
            pub fn changes_between(&self, first: u64, last: u64) -> Result<Vec<(u64, String)>> {
                let mut out = Vec::new();
                let mut st = self
                    .conn
                    .prepare_cached(
                        "SELECT seq, body FROM changes WHERE seq <= ?2 AND coalesce(last_seq, seq) >= ?1
                         ORDER BY seq",
                    )
                    .op("prepare SELECT changes between")?;
                let mut rows = st
                    .query(params![seq_i64(first)?, seq_i64(last)?])
                    .op("SELECT changes between")?;
                while let Some(row) = rows.next().op("SELECT changes between (next)")? {
                    let seq: i64 = row.get(0).op("changes.seq")?;
                    let body = row.get_ref(1).op("changes.body")?;
                    chunk_rows_in(seq.max(0) as u64, body, first..=last, |s, c| {
                        out.push((s, c.to_string()))
                    })?;
                }
                Ok(out)
            }

            /// The stored record with sequence `seq` of a record stream (late
            /// records, pattern output), as JSON.
            pub fn record_at(&self, stream: Stream, seq: u64) -> Result<Option<String>> {
                self.conn
                    .prepare_cached(stream.select_one_sql())
                    .op("prepare SELECT record")?
                    .query_row([seq_i64(seq)?], |r| r.get(0))
                    .optional()
                    .op("SELECT record")
            }
        }
    };
}

replay_reads!(Writer);
replay_reads!(Reader);

/// One acknowledged command as [`Writer::append`] stores it.
#[derive(Debug, Clone, Copy)]
pub struct CommandRow<'a> {
    /// The engine it was applied to.
    pub engine: EngineId,
    /// Its kind within the engine (`deliveries`, `advance`, ...).
    pub kind: &'a str,
    /// The command's stored form (deliveries in binary, watermarks in a
    /// compact JSON form, pattern pushes as received): see [`super::body`].
    pub body: &'a [u8],
    /// How `body` is stored ([`super::body::RAW`] or [`super::body::LZ4`]).
    pub encoding: i64,
    /// First and last change sequence and the binary chunk of the changes
    /// ([`chunk::encode`]).
    pub changes: Option<(u64, u64, &'a [u8])>,
    /// Records of a record stream (late records, pattern output): the
    /// stream, and each record's sequence and compact JSON.
    pub records: (Stream, &'a [(u64, String)]),
    /// The answer of a call made with an idempotency key.
    pub key: Option<super::idempotency_keys::KeyRow<'a>>,
    /// The pattern document a change put in force (it becomes the
    /// database's current one in the same transaction).
    pub document: Option<&'a str>,
}

/// A restore as [`Writer::restore`] stores it.
#[derive(Debug, Clone, Copy)]
pub struct Restored<'a> {
    /// The engine restored.
    pub engine: EngineId,
    /// The stored checkpoint restored (by id), or none (by body: the
    /// envelope is kept inline as the recovery base).
    pub checkpoint_id: Option<i64>,
    /// The envelope (none: a window checkpoint stored incrementally,
    /// restored by id; then it must still be there).
    pub envelope: Option<&'a [u8]>,
    /// The checkpoint's sequence of the engine's stream.
    pub sequence: u64,
    /// Window engine: the checkpoint's late records.
    pub late: RestoredLate<'a>,
    /// Pattern engine: the checkpoint's next ordinal and watermark (the
    /// idempotency keys of calls past them are forgotten).
    pub keys_through: Option<(u64, i64)>,
}

/// The append's transaction (`BEGIN IMMEDIATE`), rolled back when dropped
/// uncommitted, like `rusqlite::Transaction`, with both statements cached.
struct Immediate<'c>(&'c Connection);

impl<'c> Immediate<'c> {
    fn begin(conn: &'c Connection) -> Result<Immediate<'c>> {
        conn.prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut s| s.execute([]))
            .op("BEGIN IMMEDIATE (append)")?;
        Ok(Immediate(conn))
    }

    fn commit(self) -> Result<()> {
        let done = self
            .0
            .prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]))
            .op("COMMIT (append)");
        // A failed COMMIT leaves the transaction open: `drop` rolls it back.
        if done.is_ok() {
            std::mem::forget(self);
        }
        done.map(drop)
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        if !self.0.is_autocommit() {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

#[cfg(test)]
mod tests;
