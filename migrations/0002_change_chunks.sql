-- 0002: the changelog is stored in chunks: one row per command that produced
-- changes, `seq` its first change's sequence, `last_seq` its last, `body` the
-- JSON array of its changes (compact, exactly as the answer carries them).
-- Rows written before this migration hold one change each (a JSON object,
-- `last_seq` NULL: the chunk of that one change). Readers split chunks.
-- The command log also gains the kind 'ndjson' (the raw NDJSON body of a
-- POST /events), which older binaries cannot replay: hence a new version.
ALTER TABLE changes ADD COLUMN last_seq INTEGER;
