-- 0003: (1) the changes of a command are stored as a binary chunk (a BLOB in
-- changes.body, src/store/chunk.rs; about 1/7 of its JSON), rendered to JSON
-- when a page is read. TEXT rows written by versions 1 and 2 are read as
-- before. Older binaries cannot read the new rows: hence a new version.
-- (2) A checkpoint envelope may be stored in pieces, each written by a
-- short transaction of its own before the checkpoint row, so that commits of
-- acknowledged calls are not held behind one long write of a whole
-- (tens of MB) envelope. Such a checkpoint row names its first piece in
-- `pieces_from` and holds an empty `envelope`; its envelope is the pieces with
-- `staging = pieces_from` concatenated in `id` order. Pieces that no
-- checkpoint row names (a crash while they were being stored) are deleted
-- when the database is opened.
CREATE TABLE checkpoint_pieces (
    id      INTEGER PRIMARY KEY,
    staging INTEGER NOT NULL,
    bytes   BLOB NOT NULL
);
CREATE INDEX checkpoint_pieces_staging ON checkpoint_pieces (staging, id);
ALTER TABLE checkpoints ADD COLUMN pieces_from INTEGER;
