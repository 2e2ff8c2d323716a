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

/// `sha256=<hex HMAC-SHA256 of the body with the secret as key>`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    // HMAC takes keys of any length; this never fails.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in tag {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

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
pub fn frozen_rows(frozen: &str) -> Vec<&str> {
    serde_json::from_str::<Vec<&serde_json::value::RawValue>>(frozen)
        .map(|v| v.into_iter().map(|r| r.get()).collect())
        .unwrap_or_default()
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The body of a batch (docs/sinks.md, "The request"): its fields in this
/// order: `sink`, `sink_id`, `batch`, `stream`, `epoch`, `first`, `last`,
/// `reset` (only a reset), `records`, and for `changes` `watermark` and
/// `lateness`.
pub fn render(id: &Ident<'_>, b: &BatchRow, records: &[&str]) -> Vec<u8> {
    let size = 256
        + records.iter().map(|r| r.len() + 1).sum::<usize>()
        + b.snapshot.as_ref().map_or(0, String::len);
    let mut out = String::with_capacity(size);
    out.push_str("{\"sink\":");
    out.push_str(&json_str(id.name));
    out.push_str(",\"sink_id\":");
    out.push_str(&json_str(id.uid));
    out.push_str(&format!(
        ",\"batch\":{},\"stream\":\"{}\",\"epoch\":{},\"first\":{},\"last\":{}",
        b.batch,
        id.stream.name(),
        b.epoch,
        b.first,
        b.last
    ));
    if let Some(after) = b.reset_after {
        out.push_str(&format!(",\"reset\":{{\"after\":{after}"));
        if id.stream == Stream::Changes {
            out.push_str(",\"rows\":");
            out.push_str(b.snapshot.as_deref().unwrap_or("[]"));
        }
        out.push('}');
    }
    out.push_str(",\"records\":[");
    for (n, r) in records.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(r);
    }
    out.push(']');
    if id.stream == Stream::Changes {
        match b.watermark {
            Some(w) => out.push_str(&format!(",\"watermark\":{w}")),
            None => out.push_str(",\"watermark\":null"),
        }
        out.push_str(&format!(",\"lateness\":{}", id.lateness));
    }
    out.push('}');
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_matches_rfc_4231_case_2() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?"
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
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
            String::from_utf8(render(&id, &b, &[])).unwrap(),
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
            String::from_utf8(render(&id, &b, &[r#"{"seq":1}"#, r#"{"seq":2}"#])).unwrap(),
            r#"{"sink":"wh","sink_id":"u1","batch":3,"stream":"patterns","epoch":1,"first":1,"last":2,"records":[{"seq":1},{"seq":2}]}"#
        );
    }
}
