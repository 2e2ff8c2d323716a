-- 0001: the initial schema. Never edit an applied migration; add 0002_*.sql.

-- The pipeline this database serves (one row). Stored as its canonical JSON.
CREATE TABLE pipeline (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    json TEXT NOT NULL
);

-- The command log: every acknowledged mutating call since the recovery base,
-- one row per request. `kind` is 'events', 'advance' or 'idle'; `body` the
-- compact JSON of the request (deliveries as sent, offsets omitted in append
-- mode, so a replay in id order reproduces the same state).
CREATE TABLE commands (
    id   INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    body BLOB NOT NULL
);

-- The changelog pages: one row per change, the Change as compact JSON.
CREATE TABLE changes (
    seq  INTEGER PRIMARY KEY,
    body TEXT NOT NULL
);

-- The late output pages: one row per late record, as compact JSON.
CREATE TABLE late (
    seq  INTEGER PRIMARY KEY,
    body TEXT NOT NULL
);

-- Stored checkpoints: the envelope bytes exactly as served. Never deleted.
CREATE TABLE checkpoints (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    sequence   INTEGER NOT NULL,
    sha256     TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    envelope   BLOB NOT NULL
);

-- The recovery base (at most one row): the latest checkpoint taken or the
-- latest restore. Recovery restores it and replays `commands` after it.
-- A checkpoint base points at its row; a restore by body keeps the envelope.
-- `sequence` is the base's change sequence: the changelog head never goes
-- below it.
CREATE TABLE recovery_base (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    checkpoint_id INTEGER REFERENCES checkpoints (id),
    envelope      BLOB,
    sequence      INTEGER NOT NULL,
    CHECK ((checkpoint_id IS NULL) <> (envelope IS NULL))
);
