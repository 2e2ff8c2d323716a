//! Idempotency keys of the pattern engine's pushes and advances
//! (migration 0010): the answer a keyed call got, stored in the same
//! transaction as the call, so that a retry with the same key gets it back
//! instead of applying the call again.

use rusqlite::{params, OptionalExtension, Transaction};

use crate::error::Op as _;
use crate::{Reader, Result};

/// A keyed call's answer as [`crate::Writer::append`] stores it.
#[derive(Debug, Clone, Copy)]
pub struct KeyRow<'a> {
    /// The `Idempotency-Key` header.
    pub key: &'a str,
    /// The route called (`POST /patterns/events`, ...): the same key on
    /// another route is another request.
    pub route: &'a str,
    /// SHA-256 of what identifies the request (its route and body).
    pub request_sha256: &'a [u8; 32],
    /// The answer's body (status 200).
    pub response: &'a [u8],
    /// Where the call leaves the engine, for restores: a push's last
    /// ordinal, or an advance's watermark.
    pub at: KeyAt,
}

/// Where a keyed call left the pattern engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAt {
    /// A push: the last ordinal it gave.
    Push { last_ordinal: u64 },
    /// An advance: the watermark after it.
    Advance { watermark: i64 },
}

/// A stored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    /// The route it was used on.
    pub route: String,
    /// SHA-256 of the request it answered.
    pub request_sha256: Vec<u8>,
    /// The answer's body.
    pub response: Vec<u8>,
}

/// Stores `row` in the append transaction `tx` and keeps only the newest
/// `keep` keys (0: keep every key).
pub(crate) fn insert(tx: &Transaction<'_>, row: &KeyRow<'_>, keep: u64) -> Result<()> {
    let (last_ordinal, watermark) = match row.at {
        KeyAt::Push { last_ordinal } => (Some(crate::pages::seq_i64(last_ordinal)?), None),
        KeyAt::Advance { watermark } => (None, Some(watermark)),
    };
    tx.prepare_cached(
        "INSERT INTO idempotency_keys (key, route, request_sha256, response, last_ordinal, watermark)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .op("prepare INSERT idempotency_keys")?
    .execute(params![
        row.key,
        row.route,
        &row.request_sha256[..],
        row.response,
        last_ordinal,
        watermark
    ])
    .op("INSERT idempotency_keys")?;
    if keep > 0 {
        let id = tx.last_insert_rowid();
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        tx.prepare_cached("DELETE FROM idempotency_keys WHERE id <= ?1")
            .op("prepare DELETE idempotency_keys")?
            .execute([id.saturating_sub(keep)])
            .op("DELETE idempotency_keys (retention)")?;
    }
    Ok(())
}

/// A pattern restore to a state with `next_ordinal` and `watermark`:
/// forgets the keys of calls that state does not hold.
pub(crate) fn restore(tx: &Transaction<'_>, next_ordinal: u64, watermark: i64) -> Result<()> {
    tx.execute(
        "DELETE FROM idempotency_keys WHERE last_ordinal >= ?1 OR watermark > ?2",
        params![crate::pages::seq_i64(next_ordinal)?, watermark],
    )
    .op("DELETE idempotency_keys (restore)")
    .map(drop)
}

impl Reader {
    /// The stored answer of `key`, if any.
    pub fn idempotency_key(&self, key: &str) -> Result<Option<StoredKey>> {
        self.conn
            .prepare_cached(
                "SELECT route, request_sha256, response FROM idempotency_keys WHERE key = ?1",
            )
            .op("prepare SELECT idempotency_keys")?
            .query_row([key], |r| {
                Ok(StoredKey {
                    route: r.get(0)?,
                    request_sha256: r.get(1)?,
                    response: r.get(2)?,
                })
            })
            .optional()
            .op("SELECT idempotency_keys")
    }
}
