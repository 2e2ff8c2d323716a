-- 0004: restores are counted (epochs), checkpoints know who made them, and
-- the output pages may be pruned.
--
-- (1) One row per output stream per restore. A database's epoch for a stream
-- is the number of restores that cut it back (max(epoch), 0 when none);
-- `cut` is the sequence the restore cut the stream back to (for 'changes'
-- the checkpoint's change sequence, for 'late' its number of late records).
-- A reader that held the stream at epoch E up to S rewinds to
-- min(S, every cut of an epoch above E). Restores made before this
-- migration are not counted: such a database starts at epoch 0.
CREATE TABLE restores (
    stream TEXT NOT NULL,
    epoch  INTEGER NOT NULL,
    cut    INTEGER NOT NULL,
    PRIMARY KEY (stream, epoch)
) WITHOUT ROWID;

-- (2) 'user' for a checkpoint a client asked for (kept until deleted),
-- 'auto' for the automatic and shutdown checkpoints (only the newest few
-- are kept). Checkpoints stored before this migration count as 'user':
-- nothing that may have been asked for is ever deleted behind its owner.
ALTER TABLE checkpoints ADD COLUMN origin TEXT NOT NULL DEFAULT 'user';

-- (3) Retention of the output pages: the records of a stream with
-- sequences up to `through` were pruned (a page that starts in that range
-- is refused with the earliest sequence still held).
CREATE TABLE pruned (
    stream  TEXT PRIMARY KEY,
    through INTEGER NOT NULL
) WITHOUT ROWID;
