-- 0010: Idempotency-Key on the pattern engine's pushes and advances
-- (docs/patterns.md "Safe retries"). A row is written in the same
-- transaction as the command it answered, so a key is durable exactly when
-- its call is. `id` orders the keys: retention keeps the newest ones
-- (`serve --idempotency-keys N`). A pattern restore deletes the keys whose
-- calls are not part of the restored state: pushes whose last ordinal is at
-- or past the checkpoint's next ordinal, advances to a watermark past the
-- checkpoint's. An advance's answer is stored without its output records
-- (`"output":[]`): they are the pattern output `output_from..=output_to`,
-- which no retention prunes and a restore cuts only past a watermark whose
-- keys it deletes.
CREATE TABLE idempotency_keys (
    id             INTEGER PRIMARY KEY,
    key            TEXT NOT NULL UNIQUE,
    route          TEXT NOT NULL,
    request_sha256 BLOB NOT NULL,
    response       BLOB NOT NULL,
    last_ordinal   INTEGER,
    watermark      INTEGER,
    output_from    INTEGER,
    output_to      INTEGER,
    CHECK ((last_ordinal IS NULL) <> (watermark IS NULL))
);
