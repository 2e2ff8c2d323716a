-- 0014: a checkpoint names its history by the last segment of each list
-- (docs/storage.md, issue 36 point 3): the manifest no longer grows by a
-- row per segment per checkpoint.
--
-- (1) Each segment, once a checkpoint names it, knows its place in its
-- list: the list (`part`: the partition's index in the sorted list, -1 =
-- the late output), the offset of its first item (`first`; the late
-- output: its 0-based index) and the segment before it (`prev`, NULL for
-- the first). Lists only grow at their end and a segment is in one list,
-- so the segments form chains (a tree once a restore by id branches a
-- list off an older checkpoint). `refs`: how many point at it, the
-- checkpoints whose list ends with it and the segments after it; a
-- segment nobody points at (refs = 0) is free, and deleting it frees the
-- one before it in turn. Kept by the triggers below. `part` NULL: not
-- named yet (a checkpoint being written, or a restore's staging).
ALTER TABLE segments ADD COLUMN part INTEGER;
ALTER TABLE segments ADD COLUMN first INTEGER;
ALTER TABLE segments ADD COLUMN prev INTEGER;
ALTER TABLE segments ADD COLUMN refs INTEGER NOT NULL DEFAULT 0;

-- (2) A checkpoint's lists: one row per list it names (none for an empty
-- one), its last segment.
CREATE TABLE checkpoint_lists (
    checkpoint INTEGER NOT NULL REFERENCES checkpoints (id) ON DELETE CASCADE,
    part       INTEGER NOT NULL,
    last       INTEGER NOT NULL REFERENCES segments (id),
    PRIMARY KEY (checkpoint, part)
) WITHOUT ROWID;
CREATE INDEX checkpoint_lists_last ON checkpoint_lists (last);

-- (3) Upgrade: the lists of `checkpoint_segments` (one row per segment per
-- checkpoint) as chains, then the counts.
UPDATE segments SET
    part = (SELECT cs.part FROM checkpoint_segments cs WHERE cs.segment = segments.id LIMIT 1),
    first = (SELECT cs.first FROM checkpoint_segments cs WHERE cs.segment = segments.id LIMIT 1),
    prev = (SELECT p.segment FROM checkpoint_segments cs
              JOIN checkpoint_segments p
                ON p.checkpoint = cs.checkpoint AND p.part = cs.part AND p.ord = cs.ord - 1
             WHERE cs.segment = segments.id LIMIT 1)
WHERE id IN (SELECT segment FROM checkpoint_segments);
INSERT INTO checkpoint_lists (checkpoint, part, last)
SELECT cs.checkpoint, cs.part, cs.segment FROM checkpoint_segments cs
 WHERE cs.ord = (SELECT max(m.ord) FROM checkpoint_segments m
                  WHERE m.checkpoint = cs.checkpoint AND m.part = cs.part);
CREATE INDEX upgrade_segments_prev ON segments (prev);
UPDATE segments SET refs =
    (SELECT count(*) FROM checkpoint_lists l WHERE l.last = segments.id)
  + (SELECT count(*) FROM segments s WHERE s.prev = segments.id);
DROP INDEX upgrade_segments_prev;
DROP INDEX checkpoint_segments_segment;
DROP TABLE checkpoint_segments;

-- (4) The free segments, found without a scan.
CREATE INDEX segments_free ON segments (id) WHERE refs = 0;

-- (5) The counts, kept (foreign key actions fire triggers too: a deleted
-- checkpoint's lists go by cascade and count down).
CREATE TRIGGER checkpoint_lists_added AFTER INSERT ON checkpoint_lists
BEGIN
    UPDATE segments SET refs = refs + 1 WHERE id = NEW.last;
END;
CREATE TRIGGER checkpoint_lists_removed AFTER DELETE ON checkpoint_lists
BEGIN
    UPDATE segments SET refs = refs - 1 WHERE id = OLD.last;
END;
CREATE TRIGGER segments_linked AFTER UPDATE OF prev ON segments
WHEN OLD.prev IS NULL AND NEW.prev IS NOT NULL
BEGIN
    UPDATE segments SET refs = refs + 1 WHERE id = NEW.prev;
END;
CREATE TRIGGER segments_removed AFTER DELETE ON segments
WHEN OLD.prev IS NOT NULL
BEGIN
    UPDATE segments SET refs = refs - 1 WHERE id = OLD.prev;
END;
