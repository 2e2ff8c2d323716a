//! The id index's tables.

/// The id index's tables (see the crate docs). Every statement is
/// `CREATE TABLE IF NOT EXISTS`.
pub const SCHEMA: &str = "\
CREATE TABLE IF NOT EXISTS id_index (
    one  INTEGER PRIMARY KEY CHECK (one = 1),
    mark INTEGER NOT NULL -- the last flushed mark (u64 as i64 bits)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS id_runs (
    run           INTEGER PRIMARY KEY, -- 1, 2, ...: each new run the next
    live          INTEGER NOT NULL,    -- 0: merged into a newer run, deleted next
    entries       INTEGER NOT NULL,
    parts         INTEGER NOT NULL,
    filter_blocks INTEGER NOT NULL,    -- 64-byte blocks of its Bloom filter
    filter_probes INTEGER NOT NULL,
    fences        BLOB NOT NULL        -- first hash of each part (u64 LE), checksum
);
CREATE TABLE IF NOT EXISTS id_parts (
    key  INTEGER PRIMARY KEY, -- run * 2^32 + part
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS id_filters (
    key  INTEGER PRIMARY KEY, -- run * 2^32 + piece
    data BLOB NOT NULL
);
";
