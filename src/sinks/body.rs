//! The request a batch is sent as: its body (a pure function of the sink,
//! the stored batch row and the records, so that every attempt, also after
//! a restart, sends the same bytes), its Idempotency-Key and its signature.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::store::{BatchRow, Stream};

use super::spec::Filter;

/// What the body names of its sink.
#[derive(Debug, Clone, Copy)]
pub struct Ident<'a> {
    /// The sink's name.
    pub name: &'a str,
    /// Its uid (the Idempotency-Key prefix).
    pub uid: &'a str,
    /// Its stream.
    pub stream: Stream,
    /// The pipeline's lateness (`changes` bodies carry it).
    pub lateness: i64,
}

/// The Idempotency-Key of a sink's batch.
pub fn idempotency_key(uid: &str, batch: u64) -> String {
    format!("{uid}-{batch}")
}

/// `sha256=<hex HMAC-SHA256 of the body with the secret as key>`. HMAC
/// takes keys of any length, so the key setup cannot fail today; should a
/// future `hmac` refuse a key, the error stops the sink (never an empty or
/// missing signature).
pub fn signature(secret: &str, body: &[u8]) -> Result<String, Unreadable> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .map_err(|e| Unreadable(format!("cannot set up the HMAC-SHA256 signature: {e}")))?;
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in tag {
        out.push_str(&format!("{b:02x}"));
    }
    Ok(out)
}

/// A stored batch that cannot be sent as it was recorded (its frozen
/// records do not parse, a reset of a `changes` sink has no rows, the
/// signature cannot be made): the sink stops with this message and never
/// moves its cursor past the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable(pub String);

/// The records of a batch: the rows its filter keeps, in order.
pub fn keep<'a>(
    stream: Stream,
    filter: Option<&Filter>,
    rows: impl Iterator<Item = &'a str>,
) -> Vec<&'a str> {
    match filter {
        None => rows.collect(),
        Some(f) => rows.filter(|r| f.keeps(stream, r)).collect(),
    }
}

/// The records of a frozen batch (a JSON array of the range's records).
pub fn frozen_rows(batch: u64, frozen: &str) -> Result<Vec<&str>, Unreadable> {
    serde_json::from_str::<Vec<&serde_json::value::RawValue>>(frozen)
        .map(|v| v.into_iter().map(|r| r.get()).collect())
        .map_err(|e| {
            Unreadable(format!(
                "stored batch {batch} is unreadable (its frozen records are not a JSON array: {e})"
            ))
        })
}

/// The body of a batch (docs/sinks.md, "The request"): its fields in this
/// order: `sink`, `sink_id`, `batch`, `stream`, `epoch`, `first`, `last`,
/// `reset` (only a reset), `records`, and for `changes` `watermark` and
/// `lateness`.
pub fn render(id: &Ident<'_>, b: &BatchRow, records: &[&str]) -> Result<Vec<u8>, Unreadable> {
    let size = 256
        + records.iter().map(|r| r.len() + 1).sum::<usize>()
        + b.snapshot.as_ref().map_or(0, String::len);
    // Strings through the canonical writer (serde_json's escaping; it
    // cannot fail).
    use crate::canonical::writer::string;
    let mut out: Vec<u8> = Vec::with_capacity(size);
    out.extend_from_slice(b"{\"sink\":");
    string(&mut out, id.name);
    out.extend_from_slice(b",\"sink_id\":");
    string(&mut out, id.uid);
    out.extend_from_slice(
        format!(
            ",\"batch\":{},\"stream\":\"{}\",\"epoch\":{},\"first\":{},\"last\":{}",
            b.batch,
            id.stream.name(),
            b.epoch,
            b.first,
            b.last
        )
        .as_bytes(),
    );
    if let Some(after) = b.reset_after {
        out.extend_from_slice(format!(",\"reset\":{{\"after\":{after}").as_bytes());
        if id.stream == Stream::Changes {
            let rows = b.snapshot.as_deref().ok_or_else(|| {
                Unreadable(format!(
                    "stored batch {} is unreadable (a reset of a changes sink without its rows)",
                    b.batch
                ))
            })?;
            out.extend_from_slice(b",\"rows\":");
            out.extend_from_slice(rows.as_bytes());
        }
        out.push(b'}');
    }
    out.extend_from_slice(b",\"records\":[");
    for (n, r) in records.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(r.as_bytes());
    }
    out.push(b']');
    if id.stream == Stream::Changes {
        match b.watermark {
            Some(w) => out.extend_from_slice(format!(",\"watermark\":{w}").as_bytes()),
            None => out.extend_from_slice(b",\"watermark\":null"),
        }
        out.extend_from_slice(format!(",\"lateness\":{}", id.lateness).as_bytes());
    }
    out.push(b'}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_matches_rfc_4231_case_2() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?"
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?").unwrap(),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn bodies_are_rendered_in_field_order() {
        let id = Ident {
            name: "wh",
            uid: "u1",
            stream: Stream::Changes,
            lateness: 5,
        };
        let b = BatchRow {
            batch: 3,
            epoch: 1,
            first: 11,
            last: 10,
            reset_after: Some(10),
            snapshot: Some("[]".into()),
            watermark: Some(20),
            frozen: None,
        };
        assert_eq!(
            String::from_utf8(render(&id, &b, &[]).unwrap()).unwrap(),
            r#"{"sink":"wh","sink_id":"u1","batch":3,"stream":"changes","epoch":1,"first":11,"last":10,"reset":{"after":10,"rows":[]},"records":[],"watermark":20,"lateness":5}"#
        );
        let id = Ident {
            stream: Stream::Patterns,
            ..id
        };
        let b = BatchRow {
            reset_after: None,
            first: 1,
            last: 2,
            ..b
        };
        assert_eq!(
            String::from_utf8(render(&id, &b, &[r#"{"seq":1}"#, r#"{"seq":2}"#]).unwrap()).unwrap(),
            r#"{"sink":"wh","sink_id":"u1","batch":3,"stream":"patterns","epoch":1,"first":1,"last":2,"records":[{"seq":1},{"seq":2}]}"#
        );
    }
}
