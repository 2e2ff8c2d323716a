//! Webhook sinks (migration 0006, docs/sinks.md): their rows, the batches
//! formed and not yet acknowledged, and what restores and retention do for
//! them.
//!
//! Durability: a sink writes often (every batch formed, every batch
//! acknowledged), so its transactions do not wait for the disk on their own
//! (`synchronous = NORMAL`): they survive a crash of the process at once,
//! and a power loss from the next commit that syncs the WAL (every
//! [`Writer::append`] does: it syncs the WAL file, and with it every frame
//! written before its own). A batch is sent only once such a commit
//! followed the one that recorded it ([`Writer::appends`], or
//! [`Writer::sink_sync`] when no call is being committed).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::chunk::chunk_rows_in;
use super::error::{Error, Op, Result};
use super::{EngineId, Reader, Stream, Writer};

/// A stored sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkRow {
    /// Never reused.
    pub id: i64,
    /// Its unique name.
    pub name: String,
    /// Random hex: the prefix of its batches' Idempotency-Keys.
    pub uid: String,
    /// The output stream it delivers.
    pub stream: Stream,
    /// The configuration as validated at creation (JSON).
    pub config: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// The last sequence acknowledged (or skipped by its filter)...
    pub cursor: u64,
    /// ... in this epoch of the stream.
    pub epoch: u64,
    /// Batches formed so far (the number of the newest).
    pub batches: u64,
    /// `changes`: the watermark the newest batch carried.
    pub watermark: Option<i64>,
}

/// A batch formed and not yet acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRow {
    /// Its number (1, 2, ... per sink).
    pub batch: u64,
    /// The epoch of the stream its sequences belong to.
    pub epoch: u64,
    /// It covers the sequences `first ..= last` (none when `first > last`).
    pub first: u64,
    /// See `first`.
    pub last: u64,
    /// A reset first: the receiver cuts back to this sequence.
    pub reset_after: Option<u64>,
    /// `changes` resets: the visible rows (a JSON array).
    pub snapshot: Option<String>,
    /// `changes`: the watermark it carries.
    pub watermark: Option<i64>,
    /// Its range's records (unfiltered, a JSON array), kept when a restore
    /// was about to rewrite them; `None`: read them from the stream.
    pub frozen: Option<String>,
}

fn u(v: i64) -> u64 {
    v.max(0) as u64
}

fn i(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::Corrupt(format!("value {v} exceeds i64")))
}

fn stream_of(name: &str) -> Result<Stream> {
    match name {
        "changes" => Ok(Stream::Changes),
        "late" => Ok(Stream::Late),
        "patterns" => Ok(Stream::Patterns),
        other => Err(Error::Corrupt(format!(
            "a sink of an unknown stream {other:?}"
        ))),
    }
}

const SINK_COLUMNS: &str =
    "id, name, uid, stream, config, created_at, cursor, epoch, batches, watermark";

fn sink_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(SinkRow, String)> {
    Ok((
        SinkRow {
            id: r.get(0)?,
            name: r.get(1)?,
            uid: r.get(2)?,
            stream: Stream::Changes,
            config: r.get(4)?,
            created_at: r.get(5)?,
            cursor: u(r.get(6)?),
            epoch: u(r.get(7)?),
            batches: u(r.get(8)?),
            watermark: r.get(9)?,
        },
        r.get(3)?,
    ))
}

fn sinks(conn: &Connection) -> Result<Vec<SinkRow>> {
    let mut st = conn
        .prepare_cached(&format!("SELECT {SINK_COLUMNS} FROM sinks ORDER BY name"))
        .op("prepare SELECT sinks")?;
    let rows = st
        .query_map([], sink_row)
        .op("SELECT sinks")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .op("SELECT sinks (rows)")?;
    rows.into_iter()
        .map(|(mut s, stream)| {
            s.stream = stream_of(&stream)?;
            Ok(s)
        })
        .collect()
}

fn batches(conn: &Connection, sink: i64) -> Result<Vec<BatchRow>> {
    let mut st = conn
        .prepare_cached(
            "SELECT batch, epoch, first, last, reset_after, snapshot, watermark, frozen
             FROM sink_batches WHERE sink = ?1 ORDER BY batch",
        )
        .op("prepare SELECT sink_batches")?;
    let rows = st
        .query_map([sink], |r| {
            Ok(BatchRow {
                batch: u(r.get(0)?),
                epoch: u(r.get(1)?),
                first: u(r.get(2)?),
                last: u(r.get(3)?),
                reset_after: r.get::<_, Option<i64>>(4)?.map(u),
                snapshot: r.get(5)?,
                watermark: r.get(6)?,
                frozen: r.get(7)?,
            })
        })
        .op("SELECT sink_batches")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .op("SELECT sink_batches (rows)")?;
    Ok(rows)
}

/// Where a reader of `stream` that stood at `cursor` in `epoch` stands in
/// the current epoch: `min(cursor, every cut of a later restore)` (the
/// rule of `Reader::page`).
fn rewound(conn: &Connection, stream: Stream, epoch: u64, cursor: u64) -> Result<u64> {
    let cut: Option<i64> = conn
        .prepare_cached("SELECT min(cut) FROM restores WHERE stream = ?1 AND epoch > ?2")
        .op("prepare SELECT cut (sinks)")?
        .query_row(params![stream.name(), i(epoch)?], |r| r.get(0))
        .op("SELECT cut (sinks)")?;
    Ok(cut.map_or(cursor, |c| cursor.min(u(c))))
}

/// The stored rows of `stream` with sequences `first ..= last`, as
/// `(seq, compact JSON)`, in order.
pub(super) fn rows_between(
    conn: &Connection,
    stream: Stream,
    first: u64,
    last: u64,
) -> Result<Vec<(u64, String)>> {
    let mut out = Vec::new();
    if first > last {
        return Ok(out);
    }
    match stream {
        Stream::Changes => {
            let mut st = conn
                .prepare_cached(
                    "SELECT seq, body FROM changes WHERE seq <= ?2 AND coalesce(last_seq, seq) >= ?1
                     ORDER BY seq",
                )
                .op("prepare SELECT changes (sinks)")?;
            let mut rows = st
                .query(params![i(first)?, i(last)?])
                .op("SELECT changes (sinks)")?;
            while let Some(row) = rows.next().op("SELECT changes (sinks, next)")? {
                let seq: i64 = row.get(0).op("changes.seq")?;
                let body: ValueRef<'_> = row.get_ref(1).op("changes.body")?;
                chunk_rows_in(u(seq), body, first..=last, |s, c| {
                    out.push((s, c.to_string()))
                })?;
            }
        }
        Stream::Late | Stream::Patterns => {
            let table = if stream == Stream::Late {
                "late"
            } else {
                "pattern_output"
            };
            let mut st = conn
                .prepare_cached(&format!(
                    "SELECT seq, body FROM {table} WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq"
                ))
                .op("prepare SELECT records (sinks)")?;
            let mut rows = st
                .query(params![i(first)?, i(last)?])
                .op("SELECT records (sinks)")?;
            while let Some(row) = rows.next().op("SELECT records (sinks, next)")? {
                let seq: i64 = row.get(0).op("records.seq")?;
                out.push((u(seq), row.get(1).op("records.body")?));
            }
        }
    }
    Ok(out)
}

/// Inside a restore's transaction, before `engine`'s streams are cut back:
/// every formed batch of a sink of those streams whose records are still
/// read from the stream keeps a copy of them, so it is sent again with the
/// same bytes after the restore rewrote them.
pub(super) fn freeze(tx: &rusqlite::Transaction<'_>, engine: EngineId) -> Result<()> {
    let streams: &[Stream] = match engine {
        EngineId::Window => &[Stream::Changes, Stream::Late],
        EngineId::Patterns => &[Stream::Patterns],
    };
    for stream in streams {
        let pending: Vec<(i64, i64, i64, i64)> = {
            let mut st = tx
                .prepare_cached(
                    "SELECT b.sink, b.batch, b.first, b.last FROM sink_batches b
                     JOIN sinks s ON s.id = b.sink
                     WHERE s.stream = ?1 AND b.frozen IS NULL AND b.first <= b.last",
                )
                .op("prepare SELECT pending sink batches")?;
            let rows = st
                .query_map([stream.name()], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .op("SELECT pending sink batches")?
                .collect::<rusqlite::Result<Vec<_>>>()
                .op("SELECT pending sink batches (rows)")?;
            rows
        };
        for (sink, batch, first, last) in pending {
            let rows = rows_between(tx, *stream, u(first), u(last))?;
            let mut json = String::from("[");
            for (n, (_, r)) in rows.iter().enumerate() {
                if n > 0 {
                    json.push(',');
                }
                json.push_str(r);
            }
            json.push(']');
            tx.execute(
                "UPDATE sink_batches SET frozen = ?1 WHERE sink = ?2 AND batch = ?3",
                params![json, sink, batch],
            )
            .op("UPDATE sink_batches SET frozen")?;
        }
    }
    Ok(())
}

/// The last sequence of `stream` that retention may prune without taking a
/// record from a sink: below where every sink of the stream reads next
/// (`u64::MAX` without sinks).
pub(super) fn hold(conn: &Connection, stream: Stream) -> Result<u64> {
    let mut st = conn
        .prepare_cached("SELECT cursor, epoch FROM sinks WHERE stream = ?1")
        .op("prepare SELECT sink cursors")?;
    let rows = st
        .query_map([stream.name()], |r| Ok((u(r.get(0)?), u(r.get(1)?))))
        .op("SELECT sink cursors")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .op("SELECT sink cursors (rows)")?;
    let mut hold = u64::MAX;
    for (cursor, epoch) in rows {
        hold = hold.min(rewound(conn, stream, epoch, cursor)?);
    }
    Ok(hold)
}

impl Writer {
    /// A counter of the commits that synced the WAL since the writer was
    /// opened ([`Writer::append`]); a sink's unsynced write is durable once
    /// it is above the value [`Writer::record_batches`] returned.
    pub fn appends(&self) -> Arc<AtomicU64> {
        self.appends.clone()
    }

    /// Runs `f` in one `IMMEDIATE` transaction that does not wait for the
    /// disk (see the module docs); the answer is the append counter after
    /// it.
    fn unsynced<R>(
        &mut self,
        what: &'static str,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<R>,
    ) -> Result<(R, u64)> {
        // Cached statements: a sink does this once per batch.
        let pragma = |conn: &rusqlite::Connection, sql: &str| {
            conn.prepare_cached(sql).and_then(|mut st| st.execute([]))
        };
        pragma(&self.conn, "PRAGMA synchronous = NORMAL")
            .op("PRAGMA synchronous = NORMAL (sinks)")?;
        let done = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .op(what)?;
            let r = f(&tx)?;
            tx.commit().op(what)?;
            Ok(r)
        })();
        let reset = pragma(
            &self.conn,
            &format!("PRAGMA synchronous = {}", super::SYNCHRONOUS),
        )
        .op("PRAGMA synchronous (after sinks)");
        let r = done?;
        reset?;
        Ok((r, self.appends.load(Ordering::SeqCst)))
    }

    /// Stores a new sink (a durable commit); `None` when the name is taken.
    #[allow(clippy::too_many_arguments)]
    pub fn create_sink(
        &mut self,
        name: &str,
        uid: &str,
        stream: Stream,
        config: &str,
        created_at: &str,
        cursor: u64,
        epoch: u64,
    ) -> Result<Option<i64>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (create sink)")?;
        let taken: bool = tx
            .query_row("SELECT count(*) FROM sinks WHERE name = ?1", [name], |r| {
                r.get::<_, i64>(0)
            })
            .op("SELECT sink name")?
            > 0;
        if taken {
            return Ok(None);
        }
        tx.execute(
            "INSERT INTO sinks (name, uid, stream, config, created_at, cursor, epoch)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                name,
                uid,
                stream.name(),
                config,
                created_at,
                i(cursor)?,
                i(epoch)?
            ],
        )
        .op("INSERT sinks")?;
        let id = tx.last_insert_rowid();
        tx.commit().op("COMMIT (create sink)")?;
        Ok(Some(id))
    }

    /// Deletes a sink and its batches (a durable commit); false when there
    /// is no such sink.
    pub fn delete_sink(&mut self, name: &str) -> Result<bool> {
        let n = self
            .conn
            .execute("DELETE FROM sinks WHERE name = ?1", [name])
            .op("DELETE FROM sinks")?;
        Ok(n > 0)
    }

    /// Every sink, by name.
    pub fn sinks(&self) -> Result<Vec<SinkRow>> {
        sinks(&self.conn)
    }

    /// A sink's formed batches, in order.
    pub fn sink_batches(&self, sink: i64) -> Result<Vec<BatchRow>> {
        batches(&self.conn, sink)
    }

    /// Records a round of formed batches of one sink (numbers after its
    /// `batches`), its new batch count and watermark, and, when the round
    /// formed no batch, a cursor moved past records its filter skipped.
    /// Does not wait for the disk: the answer is the append counter to
    /// wait past before sending ([`Writer::appends`]); `None` when a
    /// restore changed the stream's epoch since the round read it (nothing
    /// is recorded: the batches would name records that are gone).
    pub fn record_batches(
        &mut self,
        sink: i64,
        formed: &[BatchRow],
        batches_total: u64,
        watermark: Option<i64>,
        moved: Option<(u64, u64)>,
    ) -> Result<Option<u64>> {
        let (updated, synced) = self.unsynced("BEGIN IMMEDIATE (sink batches)", |tx| {
            let stream: String = tx
                .query_row("SELECT stream FROM sinks WHERE id = ?1", [sink], |r| {
                    r.get(0)
                })
                .optional()
                .op("SELECT sinks.stream")?
                .ok_or_else(|| Error::Corrupt(format!("sink {sink} was deleted")))?;
            let current: i64 = tx
                .query_row(
                    "SELECT coalesce(max(epoch), 0) FROM restores WHERE stream = ?1",
                    [&stream],
                    |r| r.get(0),
                )
                .op("SELECT epoch (sinks)")?;
            let epochs = formed.iter().map(|b| b.epoch).chain(moved.map(|(_, e)| e));
            for e in epochs {
                if i(e)? != current {
                    return Ok(None);
                }
            }
            let mut st = tx
                .prepare_cached(
                    "INSERT INTO sink_batches
                     (sink, batch, epoch, first, last, reset_after, snapshot, watermark, frozen)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .op("prepare INSERT sink_batches")?;
            for b in formed {
                st.execute(params![
                    sink,
                    i(b.batch)?,
                    i(b.epoch)?,
                    i(b.first)?,
                    i(b.last)?,
                    b.reset_after.map(i).transpose()?,
                    b.snapshot,
                    b.watermark,
                    b.frozen
                ])
                .op("INSERT sink_batches")?;
            }
            let n = match moved {
                Some((cursor, epoch)) => tx.execute(
                    "UPDATE sinks SET batches = ?2, watermark = ?3, cursor = ?4, epoch = ?5
                     WHERE id = ?1",
                    params![sink, i(batches_total)?, watermark, i(cursor)?, i(epoch)?],
                ),
                None => tx.execute(
                    "UPDATE sinks SET batches = ?2, watermark = ?3 WHERE id = ?1",
                    params![sink, i(batches_total)?, watermark],
                ),
            }
            .op("UPDATE sinks (formed)")?;
            Ok(Some(n))
        })?;
        match updated {
            None => Ok(None),
            Some(0) => Err(Error::Corrupt(format!("sink {sink} was deleted"))),
            Some(_) => Ok(Some(synced)),
        }
    }

    /// A batch was acknowledged: the cursor moves to its end and the batch
    /// is forgotten (does not wait for the disk: a lost acknowledgement
    /// only sends the batch again, with the same bytes).
    pub fn ack_batch(&mut self, sink: i64, batch: u64, cursor: u64, epoch: u64) -> Result<()> {
        self.unsynced("BEGIN IMMEDIATE (sink ack)", |tx| {
            tx.execute(
                "DELETE FROM sink_batches WHERE sink = ?1 AND batch = ?2",
                params![sink, i(batch)?],
            )
            .op("DELETE FROM sink_batches")?;
            tx.execute(
                "UPDATE sinks SET cursor = ?2, epoch = ?3 WHERE id = ?1",
                params![sink, i(cursor)?, i(epoch)?],
            )
            .op("UPDATE sinks (ack)")?;
            Ok(())
        })
        .map(drop)
    }

    /// A commit that syncs the WAL (and every unsynced sink write before
    /// it), for when no call is being committed.
    pub fn sink_sync(&mut self) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (sink sync)")?;
        // A write, so that the commit has a frame to sync.
        tx.execute(
            "UPDATE sinks SET batches = batches WHERE id = (SELECT min(id) FROM sinks)",
            [],
        )
        .op("UPDATE sinks (sync)")?;
        tx.commit().op("COMMIT (sink sync)")?;
        self.appends.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

impl Reader {
    /// Every sink, by name.
    pub fn sinks(&self) -> Result<Vec<SinkRow>> {
        sinks(&self.conn)
    }

    /// One sink by name.
    pub fn sink(&self, name: &str) -> Result<Option<SinkRow>> {
        let row = self
            .conn
            .prepare_cached(&format!("SELECT {SINK_COLUMNS} FROM sinks WHERE name = ?1"))
            .op("prepare SELECT sink")?
            .query_row([name], sink_row)
            .optional()
            .op("SELECT sink")?;
        row.map(|(mut s, stream)| {
            s.stream = stream_of(&stream)?;
            Ok(s)
        })
        .transpose()
    }

    /// A sink's formed batches, in order.
    pub fn sink_batches(&self, sink: i64) -> Result<Vec<BatchRow>> {
        batches(&self.conn, sink)
    }

    /// The stored rows of `stream` with sequences `first ..= last`.
    pub fn rows_between(
        &self,
        stream: Stream,
        first: u64,
        last: u64,
    ) -> Result<Vec<(u64, String)>> {
        rows_between(&self.conn, stream, first, last)
    }

    /// Where a sink at `cursor` of `epoch` stands in the current epoch.
    pub fn rewound(&self, stream: Stream, epoch: u64, cursor: u64) -> Result<u64> {
        rewound(&self.conn, stream, epoch, cursor)
    }
}
