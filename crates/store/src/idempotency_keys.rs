//! Idempotency keys of the pattern engine's pushes and advances
//! (migration 0010): the answer a keyed call got, stored in the same
//! transaction as the call, so that a retry with the same key gets it back
//! instead of applying the call again.

use rusqlite::{params, Connection, OptionalExtension, Transaction};

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
    /// An advance: the watermark after it, and the sequences of its first
    /// and last output record (its stored answer has `"output":[]`: they
    /// are read back from the pattern output).
    Advance {
        watermark: i64,
        output: Option<(u64, u64)>,
    },
}

/// How a stored advance answer starts: its output records go in between.
const EMPTY_OUTPUT: &[u8] = b"{\"output\":[]";

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

/// Stores `row` in the append transaction open on `tx` and keeps only the newest
/// `keep` keys (0: keep every key).
pub(crate) fn insert(tx: &Connection, row: &KeyRow<'_>, keep: u64) -> Result<()> {
    let seq = |s: Option<u64>| s.map(crate::pages::seq_i64).transpose();
    let (last_ordinal, watermark, output) = match row.at {
        KeyAt::Push { last_ordinal } => (seq(Some(last_ordinal))?, None, None),
        KeyAt::Advance { watermark, output } => {
            if output.is_some() && !row.response.starts_with(EMPTY_OUTPUT) {
                return Err(crate::Error::Corrupt(
                    "an advance answer is stored with \"output\":[]".into(),
                ));
            }
            (None, Some(watermark), output)
        }
    };
    tx.prepare_cached(
        "INSERT INTO idempotency_keys
             (key, route, request_sha256, response, last_ordinal, watermark, output_from, output_to)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .op("prepare INSERT idempotency_keys")?
    .execute(params![
        row.key,
        row.route,
        &row.request_sha256[..],
        row.response,
        last_ordinal,
        watermark,
        seq(output.map(|o| o.0))?,
        seq(output.map(|o| o.1))?
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
    /// The stored answer of `key`, if any (an advance's with its output
    /// records put back), read in one snapshot.
    pub fn idempotency_key(&mut self, key: &str) -> Result<Option<StoredKey>> {
        let tx = self.conn.transaction().op("BEGIN (idempotency key)")?;
        let row = tx
            .prepare_cached(
                "SELECT route, request_sha256, response, output_from, output_to
                 FROM idempotency_keys WHERE key = ?1",
            )
            .op("prepare SELECT idempotency_keys")?
            .query_row([key], |r| {
                Ok((
                    StoredKey {
                        route: r.get(0)?,
                        request_sha256: r.get(1)?,
                        response: r.get(2)?,
                    },
                    r.get::<_, Option<i64>>(3)?.zip(r.get::<_, Option<i64>>(4)?),
                ))
            })
            .optional()
            .op("SELECT idempotency_keys")?;
        let Some((mut stored, output)) = row else {
            return Ok(None);
        };
        if let Some((from, to)) = output {
            let mut body = Vec::with_capacity(stored.response.len() + 512);
            body.extend_from_slice(&EMPTY_OUTPUT[..EMPTY_OUTPUT.len() - 1]);
            let mut st = tx
                .prepare_cached(
                    "SELECT seq, body FROM pattern_output WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq",
                )
                .op("prepare SELECT pattern_output (idempotency key)")?;
            let mut rows = st.query([from, to]).op("SELECT pattern_output")?;
            let mut next = from;
            while let Some(r) = rows.next().op("SELECT pattern_output")? {
                let seq: i64 = r.get(0).op("pattern_output.seq")?;
                let text: String = r.get(1).op("pattern_output.body")?;
                if seq != next {
                    break;
                }
                if seq > from {
                    body.push(b',');
                }
                body.extend_from_slice(text.as_bytes());
                next += 1;
            }
            if next != to + 1 {
                return Err(crate::Error::Corrupt(format!(
                    "the pattern output {from}..={to} of idempotency key {key:?} is no longer held"
                )));
            }
            body.push(b']');
            body.extend_from_slice(&stored.response[EMPTY_OUTPUT.len()..]);
            stored.response = body;
        }
        Ok(Some(stored))
    }
}
