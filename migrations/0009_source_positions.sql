-- 0009: positions of the Kafka source (`serve --kafka`, docs/cluster.md)
-- in topics whose records are applied idempotently, so that a restart reads
-- on from where it was instead of from the topic's start: the watermark
-- topic (`{topic}-watermarks`). The consumed partitions' offsets are not
-- here: they are the engine's own (its command log and checkpoints).
CREATE TABLE source_positions (
    name TEXT PRIMARY KEY NOT NULL,
    next INTEGER NOT NULL
);
