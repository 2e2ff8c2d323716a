//! Work a migration leaves for the binary (`pending_upgrades`): what SQL
//! cannot compute. Each kind runs at open until it is done, in short
//! transactions, and may run again after an interruption (it only fills
//! what is still missing).
//!
//! `checkpoint_format_2` (migration 0013): a checksum for each history
//! block, the chunk records (leaf and chain value) of the history, and the
//! `digest` of each checkpoint stored before; a window checkpoint stored
//! whole (before 0008, a version 1 envelope) is rewritten as the version 2
//! envelope of the same state. It reads the stored history once.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::error::{Error, Op, Result};
use super::segments::{block_sum, for_each_block, insert_chunks, BLOCK_ITEMS};
use streamforge_engine::checkpoint::chain::{self, Chain, Hash};
use streamforge_engine::checkpoint::LiveParts;
use streamforge_engine::history::SegId;

/// Runs the pending upgrades.
pub(super) fn run(conn: &mut Connection) -> Result<()> {
    let pending: Vec<String> = {
        let mut st = conn
            .prepare("SELECT name FROM pending_upgrades ORDER BY name")
            .op("prepare SELECT pending_upgrades")?;
        let rows = st
            .query_map([], |r| r.get(0))
            .op("SELECT pending_upgrades")?;
        rows.collect::<std::result::Result<_, _>>()
            .op("SELECT pending_upgrades (row)")?
    };
    for name in pending {
        match name.as_str() {
            "checkpoint_format_2" => format_2(conn)?,
            other => {
                return Err(Error::Corrupt(format!(
                    "the database asks for an unknown upgrade {other:?}"
                )))
            }
        }
        conn.execute("DELETE FROM pending_upgrades WHERE name = ?1", [&name])
            .op("DELETE pending_upgrades")?;
        tracing::info!(upgrade = %name, "database upgrade done");
    }
    Ok(())
}

/// Blocks checksummed per transaction.
const BLOCKS_PER_TX: usize = 1024;

fn format_2(conn: &mut Connection) -> Result<()> {
    // 1. Every block's checksum.
    let mut after = 0i64;
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (upgrade: block checksums)")?;
        let rows: Vec<(i64, i64)> = {
            let mut st = tx
                .prepare(
                    "SELECT id, data FROM segment_blocks WHERE id > ?1 AND sum IS NULL
                     ORDER BY id LIMIT ?2",
                )
                .op("prepare SELECT segment_blocks (upgrade)")?;
            let rows = st
                .query_map(params![after, BLOCKS_PER_TX as i64], |r| {
                    let data = r.get_ref(1)?.as_blob()?;
                    Ok((r.get(0)?, block_sum(data)))
                })
                .op("SELECT segment_blocks (upgrade)")?;
            rows.collect::<std::result::Result<_, _>>()
                .op("SELECT segment_blocks (upgrade, row)")?
        };
        for (id, sum) in &rows {
            tx.execute(
                "UPDATE segment_blocks SET sum = ?2 WHERE id = ?1",
                params![id, sum],
            )
            .op("UPDATE segment_blocks (upgrade)")?;
        }
        tx.commit().op("COMMIT (upgrade: block checksums)")?;
        match rows.last() {
            Some((id, _)) => after = *id,
            None => break,
        }
    }
    // 2. Every checkpoint's digest, oldest first (their segments' chains
    // are shared: each segment is read once).
    let todo: Vec<(i64, String, bool)> = {
        let mut st = conn
            .prepare(
                "SELECT id, engine, live IS NOT NULL FROM checkpoints WHERE digest IS NULL
                 ORDER BY id",
            )
            .op("prepare SELECT checkpoints (upgrade)")?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .op("SELECT checkpoints (upgrade)")?;
        rows.collect::<std::result::Result<_, _>>()
            .op("SELECT checkpoints (upgrade, row)")?
    };
    let mut chains: HashMap<SegId, Chain> = HashMap::new();
    for (id, engine, incremental) in todo {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .op("BEGIN IMMEDIATE (upgrade: checkpoint)")?;
        if incremental {
            let digest = window_digest(&tx, id, &mut chains)?;
            tx.execute(
                "UPDATE checkpoints SET digest = ?2 WHERE id = ?1",
                params![id, digest],
            )
            .op("UPDATE checkpoints (upgrade)")?;
        } else {
            let envelope = super::checkpoints::envelope_by_id(&tx, id)?
                .ok_or_else(|| Error::Corrupt(format!("checkpoint {id} is missing")))?;
            if engine == "patterns" {
                let digest = streamforge_patterns::envelope_digest(&envelope).ok_or_else(|| {
                    Error::Corrupt(format!(
                        "checkpoint {id}: its envelope does not start as a pattern envelope"
                    ))
                })?;
                tx.execute(
                    "UPDATE checkpoints SET digest = ?2 WHERE id = ?1",
                    params![id, digest],
                )
                .op("UPDATE checkpoints (upgrade)")?;
            } else {
                let v2 = streamforge_engine::checkpoint::upgrade_v1(&envelope)
                    .map_err(|e| Error::Corrupt(format!("checkpoint {id}: {e}")))?;
                let digest = String::from_utf8_lossy(
                    &v2[streamforge_engine::checkpoint::ENVELOPE_PREFIX.len()..][..64],
                )
                .into_owned();
                let staging: Option<i64> = tx
                    .query_row(
                        "SELECT pieces_from FROM checkpoints WHERE id = ?1",
                        [id],
                        |r| r.get(0),
                    )
                    .optional()
                    .op("SELECT checkpoints.pieces_from (upgrade)")?
                    .flatten();
                tx.execute(
                    "UPDATE checkpoints SET envelope = ?2, pieces_from = NULL, bytes = ?3,
                       digest = ?4 WHERE id = ?1",
                    params![id, &v2, v2.len() as i64, digest],
                )
                .op("UPDATE checkpoints (upgrade: version 2)")?;
                if let Some(staging) = staging {
                    tx.execute(
                        "DELETE FROM checkpoint_pieces WHERE staging = ?1",
                        [staging],
                    )
                    .op("DELETE checkpoint_pieces (upgrade)")?;
                }
            }
        }
        tx.commit().op("COMMIT (upgrade: checkpoint)")?;
    }
    Ok(())
}

/// The digest of incremental window checkpoint `id`, its segments' chunk
/// records stored on the way; `chains` holds the chain after each segment
/// read so far.
fn window_digest(conn: &Connection, id: i64, chains: &mut HashMap<SegId, Chain>) -> Result<String> {
    let corrupt = |m: String| Error::Corrupt(format!("checkpoint {id}: {m}"));
    let row = super::window_checkpoints::window_row(conn, id, 0)?
        .ok_or_else(|| corrupt("not a window checkpoint".into()))?;
    let live = LiveParts::decode(&row.state.live).map_err(corrupt)?;
    let mut values: Vec<Hash> = Vec::with_capacity(row.state.flushed.sources.len());
    let lists = row
        .state
        .flushed
        .sources
        .iter()
        .chain(std::iter::once(&row.state.flushed.late));
    for list in lists {
        let mut c = Chain::new();
        for seg in list.iter().filter(|s| s.count > 0) {
            if let Some(known) = chains.get(&seg.id) {
                if known.len() == seg.first + seg.count {
                    c = known.clone();
                    continue;
                }
            }
            if c.len() != seg.first {
                return Err(corrupt(format!(
                    "segment {} starts at item {}, after {} items",
                    seg.id,
                    seg.first,
                    c.len()
                )));
            }
            let mut done = Vec::new();
            let mut left = seg.count;
            for_each_block(conn, seg.id, |text| {
                let n = left.min(BLOCK_ITEMS);
                left -= n;
                c.push_run(text, n, &mut done)
                    .map_err(|m| Error::Corrupt(format!("segment {}: {m}", seg.id)))
            })?;
            if left != 0 || c.len() != seg.first + seg.count {
                return Err(corrupt(format!(
                    "segment {} holds fewer items than its {}",
                    seg.id, seg.count
                )));
            }
            insert_chunks(conn, i64::try_from(seg.id).unwrap_or(i64::MAX), &done)?;
            chains.insert(seg.id, c.clone());
        }
        values.push(c.value());
    }
    let late = values.pop().unwrap_or(chain::ZERO);
    Ok(chain::digest(&live, &values, &late))
}
