-- 0008: the window engine's lifetime history on disk (docs/storage.md).
--
-- (1) History segments: immutable runs of the checkpoint envelope's own
-- canonical text, one partition's consecutive deliveries or consecutive
-- late records, in blocks of 512 items (each an LZ4 block behind its
-- length, src/store/segments.rs). Ids are never reused.
CREATE TABLE segments (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    kind   TEXT NOT NULL,    -- 'sources' or 'late'
    count  INTEGER NOT NULL, -- items
    bytes  INTEGER NOT NULL, -- length of its canonical text
    staged INTEGER NOT NULL DEFAULT 0 -- 1: written by a restore in progress
);
CREATE TABLE segment_blocks (
    id      INTEGER PRIMARY KEY,
    segment INTEGER NOT NULL REFERENCES segments (id) ON DELETE CASCADE,
    block   INTEGER NOT NULL,
    data    BLOB NOT NULL
);
CREATE UNIQUE INDEX segment_blocks_at ON segment_blocks (segment, block);

-- (2) A window engine checkpoint stored incrementally: its state without
-- history (`live`, LZ4: changelog, clock, pipeline and live buckets as
-- the envelope writes them) and the segments it names, in order per
-- partition (`part` = the partition's index in the sorted list; -1 = the
-- late output). Such a row has an empty `envelope`; its `sha256` is ''
-- until the envelope is first checksummed ("sealed"), then the envelope's
-- and `state_sha256` the state's. A segment is freed once no checkpoint
-- names it (the foreign key keeps a named one).
ALTER TABLE checkpoints ADD COLUMN live BLOB;
ALTER TABLE checkpoints ADD COLUMN state_sha256 TEXT;
CREATE TABLE checkpoint_segments (
    checkpoint INTEGER NOT NULL REFERENCES checkpoints (id) ON DELETE CASCADE,
    part       INTEGER NOT NULL,
    ord        INTEGER NOT NULL,
    segment    INTEGER NOT NULL REFERENCES segments (id),
    first      INTEGER NOT NULL,
    count      INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    PRIMARY KEY (checkpoint, part, ord)
) WITHOUT ROWID;
CREATE INDEX checkpoint_segments_segment ON checkpoint_segments (segment);

-- (3) The id index (src/store/ids.rs): where each unique event id of the
-- segments is, as an LSM tree of runs with a Bloom filter each.
CREATE TABLE id_index (
    one  INTEGER PRIMARY KEY CHECK (one = 1),
    mark INTEGER NOT NULL -- the last flushed mark (u64 as i64 bits)
) WITHOUT ROWID;
CREATE TABLE id_runs (
    run           INTEGER PRIMARY KEY, -- 1, 2, ...: each new run the next
    live          INTEGER NOT NULL,    -- 0: merged into a newer run, deleted next
    entries       INTEGER NOT NULL,
    parts         INTEGER NOT NULL,
    filter_blocks INTEGER NOT NULL,    -- 64-byte blocks of its Bloom filter
    filter_probes INTEGER NOT NULL,
    fences        BLOB NOT NULL        -- first hash of each part (u64 LE), checksum
);
CREATE TABLE id_parts (
    key  INTEGER PRIMARY KEY, -- run * 2^32 + part
    data BLOB NOT NULL
);
CREATE TABLE id_filters (
    key  INTEGER PRIMARY KEY, -- run * 2^32 + piece
    data BLOB NOT NULL
);
