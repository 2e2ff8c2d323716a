-- 0013: checkpoint format version 2 (docs/checkpoint.md, docs/storage.md).
--
-- (1) A checkpoint's `digest`: the version 2 envelope's own `digest` field
-- (window engine), or the pattern envelope's `sha256` field; what
-- listings and `POST /checkpoints` answer and the download's ETag. Every
-- checkpoint carries it from the moment it exists. (`sha256` and
-- `state_sha256`, the whole file's checksum and the version 1 state's,
-- are no longer written.) NULL: a checkpoint stored before this
-- migration, until the upgrade below computes it.
ALTER TABLE checkpoints ADD COLUMN digest TEXT;

-- (2) A checksum of each stored history block (the 64-bit checksum of its
-- bytes as stored), checked whenever the block is read. NULL: stored
-- before this migration, until the upgrade below computes it.
ALTER TABLE segment_blocks ADD COLUMN sum INTEGER;

-- (3) The digest chain of the history: for each full chunk of 4,096 items
-- of a partition's deliveries (or of the late records), its leaf (the
-- SHA-256 of the chunk as a JSON array) and the chain value after it,
-- stored with the segment that holds the chunk's last item (`chunk` =
-- the chunk's number in its array). A digest is computed from the last
-- one and the items after it; whoever reads a segment's text checks it
-- against them.
CREATE TABLE segment_chunks (
    segment INTEGER NOT NULL REFERENCES segments (id) ON DELETE CASCADE,
    chunk   INTEGER NOT NULL,
    leaf    BLOB NOT NULL,
    chain   BLOB NOT NULL,
    PRIMARY KEY (segment, chunk)
) WITHOUT ROWID;

-- (4) Work left for the binary after the schema change, one row per kind
-- (deleted once done; an interrupted upgrade runs again at the next
-- open): 'checkpoint_format_2' computes (1), (2) and (3) for what was
-- stored before, and rewrites window checkpoints stored whole (before
-- 0008) as version 2 envelopes.
CREATE TABLE pending_upgrades (
    name TEXT PRIMARY KEY
) WITHOUT ROWID;
INSERT INTO pending_upgrades (name) VALUES ('checkpoint_format_2');
