-- 0011: the pattern document can change while the service runs
-- (`PUT /patterns`, a logged command of kind `document`). `json` stays the
-- document a fresh pattern engine starts with (the command log replays the
-- changes made after it); `current` is the document in force, with its
-- limits, written in the same transaction as the change (NULL: `json`).
-- A restart compares `--patterns` with `current`.
ALTER TABLE patterns ADD COLUMN current TEXT;
