-- 0006: webhook sinks (docs/sinks.md): receivers that the service calls
-- with the records of one output stream, in order, batch by batch.
--
-- (1) One row per sink: its configuration (the JSON the service validated
-- at creation; it never changes) and its delivery position. `cursor` is the
-- last sequence of `stream` the receiver acknowledged (or that a filter
-- skipped) in the stream's epoch `epoch`; `batches` the number of batches
-- formed so far (batch numbers are 1, 2, ...; with `uid`, the
-- Idempotency-Key); `watermark` the global watermark the newest batch of a
-- `changes` sink carried. The id is never reused (AUTOINCREMENT), so a sink
-- created again under a deleted one's name is a new sink.
CREATE TABLE sinks (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL UNIQUE,
    uid        TEXT NOT NULL,
    stream     TEXT NOT NULL,
    config     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    cursor     INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    batches    INTEGER NOT NULL DEFAULT 0,
    watermark  INTEGER
);

-- (2) Batches formed and not yet acknowledged, in `batch` order (the
-- receiver gets them in that order, one request at a time). A batch is
-- recorded here before it is first sent, so every attempt, also after a
-- restart, sends the same bytes. Its records are the ones of `stream`
-- with sequences `first ..= last` that the sink's filter keeps, read from
-- the stream when it is sent; `frozen` holds them instead (a JSON array)
-- once a restore was about to rewrite them. `reset_after` is the sequence
-- a reset cuts the receiver back to; `snapshot` the visible rows a reset of
-- a `changes` sink carries (a JSON array); `watermark` the global
-- watermark a `changes` batch carries (NULL: none yet).
CREATE TABLE sink_batches (
    sink          INTEGER NOT NULL REFERENCES sinks (id) ON DELETE CASCADE,
    batch         INTEGER NOT NULL,
    epoch         INTEGER NOT NULL,
    first         INTEGER NOT NULL,
    last          INTEGER NOT NULL,
    reset_after   INTEGER,
    snapshot      TEXT,
    watermark     INTEGER,
    frozen        TEXT,
    PRIMARY KEY (sink, batch)
) WITHOUT ROWID;
