-- 0005: one write path for two engines, the window engine ('window') and the
-- pattern engine ('patterns'): one command log, one group commit, one
-- recovery, with a recovery base and checkpoints of its own per engine.
--
-- (1) Every logged command and every stored checkpoint names its engine
-- (everything written before this migration is the window engine's). A
-- checkpoint of one engine removes only that engine's commands it covers.
ALTER TABLE commands ADD COLUMN engine TEXT NOT NULL DEFAULT 'window';
ALTER TABLE checkpoints ADD COLUMN engine TEXT NOT NULL DEFAULT 'window';

-- (2) One recovery base per engine (was: one row for the window engine).
CREATE TABLE recovery_bases (
    engine        TEXT PRIMARY KEY,
    checkpoint_id INTEGER REFERENCES checkpoints (id),
    envelope      BLOB,
    sequence      INTEGER NOT NULL,
    CHECK ((checkpoint_id IS NULL) <> (envelope IS NULL))
);
INSERT INTO recovery_bases (engine, checkpoint_id, envelope, sequence)
    SELECT 'window', checkpoint_id, envelope, sequence FROM recovery_base;
DROP TABLE recovery_base;

-- (3) The pattern engine's output stream, one row per record (compact JSON),
-- and the pattern document the database serves (one row, as loaded).
CREATE TABLE pattern_output (
    seq  INTEGER PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE patterns (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    json TEXT NOT NULL
);
