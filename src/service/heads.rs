//! The heads readers wait on: the output sequences, the epochs and the
//! watermark after the last commit.

/// Sequences the readers wait on, published after every commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Heads {
    /// Latest change sequence.
    pub changes: u64,
    /// Latest late-record sequence.
    pub late: u64,
    /// Latest pattern output sequence.
    pub patterns: u64,
    /// The window engine's durable epoch: its restores so far (open
    /// streams rewind on it).
    pub epoch: u64,
    /// The pattern engine's epoch.
    pub patterns_epoch: u64,
    /// The window engine's global watermark after the last committed call
    /// (`changes` sinks carry it).
    pub watermark: Option<i64>,
    /// Set when the server begins a graceful shutdown.
    pub shutdown: bool,
}

impl Heads {
    /// Whether `now` has other output heads.
    pub(super) fn output_differs(&self, now: &Heads) -> bool {
        (self.changes, self.late, self.patterns, self.watermark)
            != (now.changes, now.late, now.patterns, now.watermark)
    }

    /// Takes the output heads of `now`.
    pub(super) fn take_output(&mut self, now: &Heads) {
        self.changes = now.changes;
        self.late = now.late;
        self.patterns = now.patterns;
        self.watermark = now.watermark;
    }
}
