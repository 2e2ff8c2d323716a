-- Large command bodies may be stored LZ4-compressed (src/store/body.rs):
-- 0 = the body as received, 1 = an LZ4 block behind its length (u32 LE).
-- Rows logged before this migration are as received.
ALTER TABLE commands ADD COLUMN encoding INTEGER NOT NULL DEFAULT 0;
