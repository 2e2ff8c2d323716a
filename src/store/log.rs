//! The command log, the changelog and late pages, the pipeline row and the
//! recovery base.
//!
//! An acknowledged mutating call is ONE transaction ([`Writer::append`]): its
//! command row (the request, compact), its changes and its late records. A
//! restore is one transaction too ([`Writer::restore`]).

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::error::{Error, Op, Result};
use super::{Reader, Writer};
use crate::engine::{Change, LateRecord};

/// The recovery base: the envelope to restore and its change sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    /// The checkpoint envelope bytes.
    pub envelope: Vec<u8>,
    /// Its change sequence (the changelog head never goes below it).
    pub sequence: u64,
}

/// One page of stored JSON rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// `(seq, compact JSON)` in sequence order.
    pub rows: Vec<(u64, String)>,
    /// The latest sequence.
    pub head: u64,
}

fn seq_i64(seq: u64) -> Result<i64> {
    i64::try_from(seq).map_err(|_| Error::Corrupt(format!("sequence {seq} exceeds i64")))
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Corrupt(format!("serialize: {e}")))
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

    /// Appends one acknowledged command with its changes and late records,
    /// in one transaction.
    pub fn append(
        &mut self,
        kind: &str,
        body: &[u8],
        changes: &[Change],
        late: &[LateRecord],
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (append)")?;
        tx.prepare_cached("INSERT INTO commands (kind, body) VALUES (?1, ?2)")
            .op("prepare INSERT commands")?
            .execute(params![kind, body])
            .op("INSERT commands")?;
        if !changes.is_empty() {
            let mut st = tx
                .prepare_cached("INSERT INTO changes (seq, body) VALUES (?1, ?2)")
                .op("prepare INSERT changes")?;
            for c in changes {
                st.execute(params![seq_i64(c.seq)?, to_json(c)?])
                    .op("INSERT changes")?;
            }
        }
        if !late.is_empty() {
            let mut st = tx
                .prepare_cached("INSERT INTO late (seq, body) VALUES (?1, ?2)")
                .op("prepare INSERT late")?;
            for l in late {
                st.execute(params![seq_i64(l.seq)?, to_json(l)?])
                    .op("INSERT late")?;
            }
        }
        tx.commit().op("COMMIT (append)")
    }

    /// Number of logged commands since the recovery base.
    pub fn command_count(&self) -> Result<u64> {
        self.conn
            .query_row("SELECT count(*) FROM commands", [], |r| r.get::<_, i64>(0))
            .op("SELECT count(*) FROM commands")
            .map(|n| n.max(0) as u64)
    }

    /// Calls `f(kind, body)` for every logged command, in log order.
    pub fn for_each_command<E: From<Error>>(
        &self,
        mut f: impl FnMut(&str, &[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut st = self
            .conn
            .prepare("SELECT kind, body FROM commands ORDER BY id")
            .op("prepare SELECT commands")?;
        let mut rows = st.query([]).op("SELECT commands")?;
        while let Some(row) = rows.next().op("SELECT commands (next)")? {
            let kind: String = row.get(0).op("commands.kind")?;
            let body: Vec<u8> = row.get(1).op("commands.body")?;
            f(&kind, &body)?;
        }
        Ok(())
    }

    /// The stored change with sequence `seq`, as JSON.
    pub fn change_at(&self, seq: u64) -> Result<Option<String>> {
        self.conn
            .prepare_cached("SELECT body FROM changes WHERE seq = ?1")
            .op("prepare SELECT change")?
            .query_row([seq_i64(seq)?], |r| r.get(0))
            .optional()
            .op("SELECT change")
    }

    /// The stored late record with sequence `seq`, as JSON.
    pub fn late_at(&self, seq: u64) -> Result<Option<String>> {
        self.conn
            .prepare_cached("SELECT body FROM late WHERE seq = ?1")
            .op("prepare SELECT late")?
            .query_row([seq_i64(seq)?], |r| r.get(0))
            .optional()
            .op("SELECT late")
    }

    /// The largest stored change and late sequences (0 when empty).
    pub fn max_seqs(&self) -> Result<(u64, u64)> {
        let c: i64 = self
            .conn
            .query_row("SELECT coalesce(max(seq), 0) FROM changes", [], |r| {
                r.get(0)
            })
            .op("SELECT max(seq) FROM changes")?;
        let l: i64 = self
            .conn
            .query_row("SELECT coalesce(max(seq), 0) FROM late", [], |r| r.get(0))
            .op("SELECT max(seq) FROM late")?;
        Ok((c.max(0) as u64, l.max(0) as u64))
    }

    /// The recovery base, if any.
    pub fn base(&self) -> Result<Option<Base>> {
        self.conn
            .query_row(
                "SELECT coalesce(b.envelope, c.envelope), b.sequence
                   FROM recovery_base b LEFT JOIN checkpoints c ON c.id = b.checkpoint_id
                  WHERE b.id = 1",
                [],
                |r| {
                    Ok(Base {
                        envelope: r.get(0)?,
                        sequence: r.get::<_, i64>(1)?.max(0) as u64,
                    })
                },
            )
            .optional()
            .op("SELECT recovery_base")
    }

    /// Makes a restored envelope the recovery base, in one transaction: the
    /// command log is cleared, changes after `sequence` are deleted and the
    /// late table becomes exactly `late`. `checkpoint_id` names a stored
    /// checkpoint (restore by id); otherwise the envelope is kept inline.
    pub fn restore(
        &mut self,
        checkpoint_id: Option<i64>,
        envelope: &[u8],
        sequence: u64,
        late: &[LateRecord],
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (restore)")?;
        let seq = seq_i64(sequence)?;
        match checkpoint_id {
            Some(id) => tx.execute(
                "INSERT OR REPLACE INTO recovery_base (id, checkpoint_id, envelope, sequence)
                 VALUES (1, ?1, NULL, ?2)",
                params![id, seq],
            ),
            None => tx.execute(
                "INSERT OR REPLACE INTO recovery_base (id, checkpoint_id, envelope, sequence)
                 VALUES (1, NULL, ?1, ?2)",
                params![envelope, seq],
            ),
        }
        .op("INSERT OR REPLACE recovery_base")?;
        tx.execute("DELETE FROM commands", [])
            .op("DELETE FROM commands")?;
        tx.execute("DELETE FROM changes WHERE seq > ?1", [seq])
            .op("DELETE FROM changes WHERE seq > ?")?;
        tx.execute("DELETE FROM late", []).op("DELETE FROM late")?;
        {
            let mut st = tx
                .prepare_cached("INSERT INTO late (seq, body) VALUES (?1, ?2)")
                .op("prepare INSERT late")?;
            for l in late {
                st.execute(params![seq_i64(l.seq)?, to_json(l)?])
                    .op("INSERT late")?;
            }
        }
        tx.commit().op("COMMIT (restore)")
    }
}

impl Reader {
    fn page(&mut self, table: Table, after: u64, limit: u32, base_floor: bool) -> Result<Page> {
        let tx = self.conn.transaction().op("BEGIN (page)")?;
        let rows = {
            let mut st = tx
                .prepare_cached(table.page_sql())
                .op("prepare page query")?;
            let mut out = Vec::new();
            let mut rows = st
                .query(params![seq_i64(after)?, i64::from(limit)])
                .op("page query")?;
            while let Some(row) = rows.next().op("page query (next)")? {
                let seq: i64 = row.get(0).op("page seq")?;
                out.push((seq.max(0) as u64, row.get(1).op("page body")?));
            }
            out
        };
        let max: i64 = tx
            .query_row(table.max_sql(), [], |r| r.get(0))
            .op("SELECT max(seq)")?;
        let floor: i64 = if base_floor {
            tx.query_row(
                "SELECT coalesce((SELECT sequence FROM recovery_base WHERE id = 1), 0)",
                [],
                |r| r.get(0),
            )
            .op("SELECT recovery_base.sequence")?
        } else {
            0
        };
        tx.commit().op("COMMIT (page)")?;
        Ok(Page {
            rows,
            head: max.max(floor).max(0) as u64,
        })
    }

    /// Changes with `seq > after`, at most `limit`, and the changelog head
    /// (never below the recovery base's sequence), read in one snapshot.
    pub fn changes_page(&mut self, after: u64, limit: u32) -> Result<Page> {
        self.page(Table::Changes, after, limit, true)
    }

    /// Late records with `seq > after`, at most `limit`, and the late head.
    pub fn late_page(&mut self, after: u64, limit: u32) -> Result<Page> {
        self.page(Table::Late, after, limit, false)
    }
}

#[derive(Clone, Copy)]
enum Table {
    Changes,
    Late,
}

impl Table {
    fn page_sql(self) -> &'static str {
        match self {
            Table::Changes => "SELECT seq, body FROM changes WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            Table::Late => "SELECT seq, body FROM late WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        }
    }
    fn max_sql(self) -> &'static str {
        match self {
            Table::Changes => "SELECT coalesce(max(seq), 0) FROM changes",
            Table::Late => "SELECT coalesce(max(seq), 0) FROM late",
        }
    }
}
