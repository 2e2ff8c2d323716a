//! The output streams (changes, late records, pattern output) and their
//! pages: a page is read in one snapshot, in the epoch asked for (rewound
//! after a restore), never inside the pruned range.

use rusqlite::types::{Value, ValueRef};
use rusqlite::{params, OptionalExtension};

use super::chunk::chunk_rows_in;
use super::error::{Error, Op, Result};
use super::{EngineId, Reader};

/// One page of stored JSON rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// `(seq, compact JSON)` in sequence order.
    pub rows: Vec<(u64, String)>,
    /// The latest sequence.
    pub head: u64,
    /// The stream's epoch (restores that cut it back so far).
    pub epoch: u64,
    /// The page was asked for in an older epoch: it starts after this
    /// sequence instead (see [`Reader::page`]).
    pub rewound_to: Option<u64>,
    /// The sequence the page starts after (`after`, or `rewound_to`).
    pub after: u64,
}

/// Why a page cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageRefusal {
    /// The request names an epoch the stream has not reached.
    FutureEpoch {
        /// The epoch asked for.
        asked: u64,
        /// The stream's epoch.
        current: u64,
    },
    /// The page would start inside the pruned range.
    Pruned {
        /// The sequence the page would start after.
        after: u64,
        /// The earliest sequence still held.
        earliest: u64,
    },
}

/// The output streams, as named in the `restores` and `pruned` tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The window engine's changelog.
    Changes,
    /// The window engine's late output.
    Late,
    /// The pattern engine's output (matches and timeouts).
    Patterns,
}

impl Stream {
    /// The stream's name in the tables.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Changes => "changes",
            Stream::Late => "late",
            Stream::Patterns => "patterns",
        }
    }

    /// The engine that writes it.
    pub fn engine(self) -> EngineId {
        match self {
            Stream::Changes | Stream::Late => EngineId::Window,
            Stream::Patterns => EngineId::Patterns,
        }
    }
}

/// The stream's epoch: the number of restores that cut it back.
pub(crate) fn epoch_of(conn: &rusqlite::Connection, stream: Stream) -> Result<u64> {
    conn.prepare_cached("SELECT coalesce(max(epoch), 0) FROM restores WHERE stream = ?1")
        .op("prepare SELECT epoch")?
        .query_row([stream.name()], |r| r.get::<_, i64>(0))
        .op("SELECT epoch")
        .map(|e| e.max(0) as u64)
}

/// The last pruned sequence of a stream (0 when nothing was pruned).
pub(crate) fn pruned_through(conn: &rusqlite::Connection, stream: Stream) -> Result<u64> {
    conn.prepare_cached("SELECT coalesce((SELECT through FROM pruned WHERE stream = ?1), 0)")
        .op("prepare SELECT pruned")?
        .query_row([stream.name()], |r| r.get::<_, i64>(0))
        .op("SELECT pruned")
        .map(|e| e.max(0) as u64)
}

pub(crate) fn seq_i64(seq: u64) -> Result<i64> {
    i64::try_from(seq).map_err(|_| Error::Corrupt(format!("sequence {seq} exceeds i64")))
}

impl Reader {
    /// A page of `stream`, read in one snapshot: the rows after `after` (at
    /// most `limit`), the head, and the epoch. With `epoch` older than the
    /// stream's, the page starts after `R = min(after, every cut of a later
    /// epoch)` instead and says so in `rewound_to`.
    pub fn page(
        &mut self,
        stream: Stream,
        after: u64,
        limit: u32,
        epoch: Option<u64>,
    ) -> Result<std::result::Result<Page, PageRefusal>> {
        let tx = self.conn.transaction().op("BEGIN (page)")?;
        let current = epoch_of(&tx, stream)?;
        let mut from = after;
        let mut rewound_to = None;
        match epoch {
            Some(asked) if asked > current => {
                return Ok(Err(PageRefusal::FutureEpoch { asked, current }));
            }
            Some(asked) if asked < current => {
                let cut: i64 = tx
                    .prepare_cached(
                        "SELECT min(cut) FROM restores WHERE stream = ?1 AND epoch > ?2",
                    )
                    .op("prepare SELECT cut")?
                    .query_row(params![stream.name(), seq_i64(asked)?], |r| r.get(0))
                    .op("SELECT cut")?;
                from = from.min(cut.max(0) as u64);
                rewound_to = Some(from);
            }
            _ => {}
        }
        let pruned = pruned_through(&tx, stream)?;
        if from < pruned {
            return Ok(Err(PageRefusal::Pruned {
                after: from,
                earliest: pruned + 1,
            }));
        }
        let rows = match stream {
            Stream::Changes => changes_rows(&tx, from, limit)?,
            Stream::Late | Stream::Patterns => {
                let mut st = tx
                    .prepare_cached(stream.page_sql())
                    .op("prepare page query")?;
                let mut out = Vec::new();
                let mut rows = st
                    .query(params![seq_i64(from)?, i64::from(limit)])
                    .op("page query")?;
                while let Some(row) = rows.next().op("page query (next)")? {
                    let seq: i64 = row.get(0).op("page seq")?;
                    out.push((seq.max(0) as u64, row.get(1).op("page body")?));
                }
                out
            }
        };
        let max: i64 = tx
            .query_row(stream.max_sql(), [], |r| r.get(0))
            .op("SELECT max(seq)")?;
        // A restore's (or pruning's) head never goes below its cut.
        let floor: i64 = match stream {
            Stream::Changes | Stream::Patterns => tx
                .query_row(
                    "SELECT coalesce((SELECT sequence FROM recovery_bases WHERE engine = ?1), 0)",
                    [stream.engine().name()],
                    |r| r.get(0),
                )
                .op("SELECT recovery_bases.sequence")?,
            Stream::Late => 0,
        };
        tx.commit().op("COMMIT (page)")?;
        Ok(Ok(Page {
            rows,
            head: max.max(floor).max(pruned as i64).max(0) as u64,
            epoch: current,
            rewound_to,
            after: from,
        }))
    }

    /// Changes with `seq > after`, at most `limit`, and the changelog head
    /// (never below the recovery base's sequence), in the current epoch.
    #[cfg(test)]
    pub fn changes_page(&mut self, after: u64, limit: u32) -> Result<Page> {
        self.page(Stream::Changes, after, limit, None)?
            .map_err(|r| Error::Corrupt(format!("page refused: {r:?}")))
    }

    /// Late records with `seq > after`, at most `limit`, and the late head.
    #[cfg(test)]
    pub fn late_page(&mut self, after: u64, limit: u32) -> Result<Page> {
        self.page(Stream::Late, after, limit, None)?
            .map_err(|r| Error::Corrupt(format!("page refused: {r:?}")))
    }
}

/// The latest change sequence (0 when empty).
const CHANGES_HEAD_SQL: &str =
    "SELECT coalesce((SELECT coalesce(last_seq, seq) FROM changes ORDER BY seq DESC LIMIT 1), 0)";

/// Changes with `seq > after`, at most `limit`, split out of their chunks.
fn changes_rows(conn: &rusqlite::Connection, after: u64, limit: u32) -> Result<Vec<(u64, String)>> {
    let limit = limit as usize;
    let mut out = Vec::new();
    let take = |first: i64, body: ValueRef<'_>, out: &mut Vec<(u64, String)>| -> Result<()> {
        // A chunk's sequences are consecutive from `first`; chunks need not
        // be (a restore beyond the stored head leaves a gap before the
        // next change). From the next sequence wanted, or the chunk's first
        // if that is later, as many as fit.
        let room = (limit - out.len().min(limit)) as u64;
        let next = out.last().map_or(after, |(s, _)| *s).saturating_add(1);
        let from = next.max(first.max(0) as u64);
        let want = from..=from.saturating_add(room).saturating_sub(1);
        chunk_rows_in(first.max(0) as u64, body, want, |s, c| {
            out.push((s, c.to_string()))
        })
    };
    // The chunk holding `after + 1`, if it starts at or before `after`.
    let holding: Option<(i64, Value)> = conn
        .prepare_cached(
            "SELECT seq, body FROM changes WHERE seq <= ?1 AND coalesce(last_seq, seq) > ?1
             ORDER BY seq DESC LIMIT 1",
        )
        .op("prepare page query (holding chunk)")?
        .query_row([seq_i64(after)?], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .op("page query (holding chunk)")?;
    if let Some((first, body)) = holding {
        take(first, (&body).into(), &mut out)?;
    }
    let mut st = conn
        .prepare_cached("SELECT seq, body FROM changes WHERE seq > ?1 ORDER BY seq LIMIT ?2")
        .op("prepare page query")?;
    let mut rows = st
        .query(params![seq_i64(after)?, limit as i64])
        .op("page query")?;
    while out.len() < limit {
        let Some(row) = rows.next().op("page query (next)")? else {
            break;
        };
        let first: i64 = row.get(0).op("page seq")?;
        let body = row.get_ref(1).op("page body")?;
        take(first, body, &mut out)?;
    }
    Ok(out)
}

impl Stream {
    pub(crate) fn max_sql(self) -> &'static str {
        match self {
            Stream::Changes => CHANGES_HEAD_SQL,
            Stream::Late => "SELECT coalesce(max(seq), 0) FROM late",
            Stream::Patterns => "SELECT coalesce(max(seq), 0) FROM pattern_output",
        }
    }

    pub(crate) fn insert_sql(self) -> &'static str {
        match self {
            // changes are stored in chunks, never as records
            Stream::Changes | Stream::Late => "INSERT INTO late (seq, body) VALUES (?1, ?2)",
            Stream::Patterns => "INSERT INTO pattern_output (seq, body) VALUES (?1, ?2)",
        }
    }

    pub(crate) fn select_one_sql(self) -> &'static str {
        match self {
            Stream::Changes | Stream::Late => "SELECT body FROM late WHERE seq = ?1",
            Stream::Patterns => "SELECT body FROM pattern_output WHERE seq = ?1",
        }
    }

    pub(crate) fn page_sql(self) -> &'static str {
        match self {
            Stream::Changes | Stream::Late => {
                "SELECT seq, body FROM late WHERE seq > ?1 ORDER BY seq LIMIT ?2"
            }
            Stream::Patterns => {
                "SELECT seq, body FROM pattern_output WHERE seq > ?1 ORDER BY seq LIMIT ?2"
            }
        }
    }
}
