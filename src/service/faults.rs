//! Fault injection for the chaos suite (`tests/it/chaos.rs`): crashes and storage
//! failures at logical positions of the write path, which a test cannot
//! reach from outside the process at a reproducible point.
//!
//! Enabled only by the environment variable `STREAMFORGE_FAULTS`, read once
//! when the service opens its database; production never sets it, and
//! without it every hook is a comparison with `None`. Its value is a
//! comma-separated list of `name=N` (N >= 1, counted from the start of this
//! process):
//!
//! - `kill_after_commit=N`: right after the N-th group commit is durable
//!   and before any of its calls is answered, the process kills itself with
//!   SIGKILL (the callers see the connection drop: committed, never
//!   acknowledged).
//! - `fail_commit=N`: the N-th group commit writes its rows and then rolls
//!   back instead of committing, as a failing COMMIT would: its calls are
//!   answered 503 and the engines are rebuilt from the store.
//! - `kill_in_checkpoint=N`: during the N-th checkpoint stored in pieces
//!   or incrementally (automatic ones, and every window engine checkpoint),
//!   once its pieces or new history segments are written and before the
//!   transaction that links them and drops the commands it covers, the
//!   process kills itself with SIGKILL.
//! - `kill_after_checkpoint=N`: right after the N-th window engine
//!   checkpoint is linked (durable, the recovery base), before the engine
//!   lets go of the history it flushed and before the id index stores it.
//! - `kill_in_delete=N`: inside the N-th deletion of a window engine
//!   checkpoint (a client's DELETE, or the rotation of automatic ones),
//!   after its rows and the segments it alone named are deleted and before
//!   that transaction commits.
//!
//! An unknown name or a value that is not a positive integer refuses the
//! start, so a misspelt schedule never runs silently without its faults.

use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that enables the hooks.
pub const VAR: &str = "STREAMFORGE_FAULTS";

/// The schedule of one process, and its counters.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    kill_after_commit: Option<u64>,
    fail_commit: Option<u64>,
    kill_in_checkpoint: Option<u64>,
    kill_after_checkpoint: Option<u64>,
    kill_in_delete: Option<u64>,
    commits: AtomicU64,
    checkpoints: AtomicU64,
    linked: AtomicU64,
    deletes: AtomicU64,
}

impl Faults {
    /// The schedule from [`VAR`] (none when it is unset or empty).
    pub fn from_env() -> Result<Faults, String> {
        match std::env::var(VAR) {
            Ok(v) => Faults::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(Faults::default()),
            Err(e) => Err(format!("{VAR}: {e}")),
        }
    }

    fn parse(spec: &str) -> Result<Faults, String> {
        let mut f = Faults::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, n) = item
                .split_once('=')
                .ok_or_else(|| format!("{VAR}: {item:?} is not name=N"))?;
            let n: u64 = n
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{VAR}: {item:?}: N must be a positive integer"))?;
            let slot = match name {
                "kill_after_commit" => &mut f.kill_after_commit,
                "fail_commit" => &mut f.fail_commit,
                "kill_in_checkpoint" => &mut f.kill_in_checkpoint,
                "kill_after_checkpoint" => &mut f.kill_after_checkpoint,
                "kill_in_delete" => &mut f.kill_in_delete,
                other => return Err(format!("{VAR}: unknown fault {other:?}")),
            };
            *slot = Some(n);
        }
        Ok(f)
    }

    /// Whether any fault is scheduled.
    pub fn any(&self) -> bool {
        self.kill_after_commit.is_some()
            || self.fail_commit.is_some()
            || self.kill_in_checkpoint.is_some()
            || self.kill_after_checkpoint.is_some()
            || self.kill_in_delete.is_some()
    }

    /// A window engine checkpoint is linked: dies here when scheduled.
    pub fn checkpoint_linked(&self) {
        if self.kill_after_checkpoint.is_none() {
            return;
        }
        let n = self.linked.fetch_add(1, Ordering::SeqCst) + 1;
        if self.kill_after_checkpoint == Some(n) {
            die("kill_after_checkpoint");
        }
    }

    /// A checkpoint deletion is about to commit: dies here when scheduled.
    pub fn deleting(&self) {
        if self.kill_in_delete.is_none() {
            return;
        }
        let n = self.deletes.fetch_add(1, Ordering::SeqCst) + 1;
        if self.kill_in_delete == Some(n) {
            die("kill_in_delete");
        }
    }

    /// A group commit begins: its number, and whether it must fail.
    pub fn commit_begins(&self) -> (u64, bool) {
        if self.kill_after_commit.is_none() && self.fail_commit.is_none() {
            return (0, false);
        }
        let n = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        (n, self.fail_commit == Some(n))
    }

    /// Group commit `n` is durable: dies here when scheduled.
    pub fn committed(&self, n: u64) {
        if n > 0 && self.kill_after_commit == Some(n) {
            die("kill_after_commit");
        }
    }

    /// An automatic checkpoint's pieces are written: dies here when
    /// scheduled.
    pub fn checkpoint_pieces_written(&self) {
        if self.kill_in_checkpoint.is_none() {
            return;
        }
        let n = self.checkpoints.fetch_add(1, Ordering::SeqCst) + 1;
        if self.kill_in_checkpoint == Some(n) {
            die("kill_in_checkpoint");
        }
    }
}

/// SIGKILL to this process (`kill -KILL`, as the tests' own kills); abort
/// should that fail. Nothing after this point runs.
fn die(what: &str) -> ! {
    tracing::warn!(fault = what, "injected fault: SIGKILL");
    // If `kill` cannot run, the abort below ends the process anyway.
    let _ = std::process::Command::new("kill")
        .arg("-KILL")
        .arg(std::process::id().to_string())
        .status();
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_schedule_and_refuses_mistakes() {
        let f = Faults::parse("kill_after_commit=3, fail_commit=2").unwrap();
        assert_eq!(f.kill_after_commit, Some(3));
        assert_eq!(f.fail_commit, Some(2));
        assert!(f.any());
        assert!(!Faults::parse("").unwrap().any());
        assert!(Faults::parse("kill_after_comit=3").is_err());
        assert!(Faults::parse("fail_commit=0").is_err());
        assert!(Faults::parse("fail_commit").is_err());
        assert_eq!(f.commit_begins(), (1, false));
        assert_eq!(f.commit_begins(), (2, true));
        assert_eq!(f.commit_begins(), (3, false));
        let none = Faults::default();
        assert_eq!(none.commit_begins(), (0, false));
        none.committed(0);
        none.checkpoint_pieces_written();
    }
}
