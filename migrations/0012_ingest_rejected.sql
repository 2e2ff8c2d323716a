-- 0012: the dead-letter page of the inbound webhook sources
-- (docs/webhooks.md, GET /ingest/{source}/rejected): a payload a source
-- refused (its mapping failed, its body was too large, not UTF-8, of a
-- wrong content type, or its event id conflicts) is kept here with its
-- headers (signature headers and Authorization left out) and the reason,
-- so that the user can fix the mapping and send it again. Not engine
-- state: no checkpoint or restore touches it. `seq` numbers a source's
-- records from 1; the newest `serve --keep-rejected` are kept per source
-- and `dropped` counts the ones retention removed.
CREATE TABLE ingest_rejected (
    source   TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    record   TEXT NOT NULL,
    PRIMARY KEY (source, seq)
) WITHOUT ROWID;

CREATE TABLE ingest_rejected_heads (
    source   TEXT PRIMARY KEY,
    head     INTEGER NOT NULL,
    dropped  INTEGER NOT NULL
);
