//! Row keys and run ids.

use rusqlite::Connection;

use crate::error::{corrupt, Op, Result};

/// `key` of part or piece `n` of run `run`.
pub(crate) fn row_key(run: u64, n: usize) -> Result<i64> {
    let n = u32::try_from(n).map_err(|_| corrupt(format!("run {run}: part {n} is too large")))?;
    Ok(((run as i64) << 32) | i64::from(n))
}

/// Run ids fit 31 bits (so that `row_key` is a positive i64).
pub(crate) fn run_id(id: i64) -> Result<u64> {
    if (1..=i64::from(i32::MAX)).contains(&id) {
        Ok(id as u64)
    } else {
        Err(corrupt(format!("run id {id} out of range")))
    }
}

/// The id of a new run: above every run's, live or not.
pub(crate) fn next_run_id(conn: &Connection) -> Result<u64> {
    let id: i64 = conn
        .query_row("SELECT coalesce(max(run), 0) + 1 FROM id_runs", [], |r| {
            r.get(0)
        })
        .op("SELECT max(run) FROM id_runs")?;
    run_id(id)
}
