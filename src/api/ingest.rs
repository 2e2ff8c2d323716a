//! The mutating calls of the processing API: `POST /events`,
//! `POST /watermarks` and `POST /partitions/{partition}/idle`.
//!
//! Each parses its request on a blocking thread (outside the processor lock,
//! so parsing of concurrent requests runs on every core), the deliveries
//! borrowing their strings from the body, then calls the service there. The
//! answer embeds the service's encoded changes (the very bytes that were
//! stored) instead of serializing them again.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;

use super::dto;
use super::error::ApiError;
use super::extract;
use super::routes::{blocking, json_response};
use super::AppState;
use crate::service::parse::Framing;
use crate::service::{IngestAnswer, TickAnswer};

fn push_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    // Strings, integers and engine records: serialization cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

/// `{"changes":[..],"late":[..],"watermark":W,"offsets":{..}}` (the field
/// order and bytes of serializing `dto::IngestResponse`).
fn ingest_body(a: &IngestAnswer) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.changes.len() + a.late.len() + 128);
    out.extend_from_slice(b"{\"changes\":");
    out.extend_from_slice(&a.changes);
    out.extend_from_slice(b",\"late\":");
    out.extend_from_slice(&a.late);
    out.extend_from_slice(b",\"watermark\":");
    push_json(&mut out, &a.watermark);
    out.extend_from_slice(b",\"offsets\":{");
    for (i, (p, c)) in a.offsets.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_json(&mut out, p);
        out.push(b':');
        push_json(&mut out, c);
    }
    out.extend_from_slice(b"}}");
    out
}

/// `{"changes":[..],"watermark":W,"finalized":[..]}` (as `dto::TickResponse`).
fn tick_body(a: &TickAnswer) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.changes.len() + 64 + a.finalized.len() * 80);
    out.extend_from_slice(b"{\"changes\":");
    out.extend_from_slice(&a.changes);
    out.extend_from_slice(b",\"watermark\":");
    push_json(&mut out, &a.watermark);
    out.extend_from_slice(b",\"finalized\":");
    push_json(&mut out, &a.finalized);
    out.push(b'}');
    out
}

/// `POST /events`.
pub async fn post_events(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|r| extract::body_error(r, st.max_body_bytes))?;
    let svc = st.service()?;
    let ndjson = extract::is_ndjson(
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    );
    let framing = if ndjson {
        Framing::Ndjson
    } else {
        Framing::Json
    };
    blocking(move || {
        let parsed = extract::deliveries(&body, ndjson)?;
        let batch = parsed.batch;
        let out = svc
            .ingest(&body, framing, parsed.items)
            .map_err(|e| ApiError::from_service(e, batch))?;
        Ok(ingest_body(&out))
    })
    .await
    .map(|b| json_response(StatusCode::OK, b))
}

/// `POST /watermarks`.
pub async fn post_watermarks(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|r| extract::body_error(r, st.max_body_bytes))?;
    let svc = st.service()?;
    blocking(move || {
        let req: dto::WatermarkBody =
            extract::json(&body, "a watermark object {\"partition\", \"watermark\"}")?;
        let out = svc.advance(&req.partition, req.watermark)?;
        Ok(tick_body(&out))
    })
    .await
    .map(|b| json_response(StatusCode::OK, b))
}

/// `POST /partitions/{partition}/idle`.
pub async fn post_idle(
    State(st): State<AppState>,
    partition: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let Path(partition) =
        partition.map_err(|e| ApiError::bad_request(format!("bad partition in path: {e}")))?;
    let svc = st.service()?;
    blocking(move || Ok(tick_body(&svc.mark_idle(&partition)?)))
        .await
        .map(|b| json_response(StatusCode::OK, b))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::engine::{Address, Change, ChangeOp, WindowResult};

    fn change() -> Change {
        Change {
            seq: 7,
            op: ChangeOp::Upsert,
            result: WindowResult {
                window: "w\"x".into(),
                key: "k\u{e9}".into(),
                start: -(1i128 << 100),
                end: 10,
                count: 2,
                sum: 1i128 << 90,
                min: -5,
                max: i64::MAX,
            },
        }
    }

    #[test]
    fn answers_are_byte_identical_to_the_dto_serialization() {
        let changes = vec![change(), change()];
        let offsets = vec![("p\"0".to_string(), 3), ("p1".to_string(), -1)];
        let a = IngestAnswer {
            changes: serde_json::to_vec(&changes).unwrap(),
            late: b"[]".to_vec(),
            watermark: Some(-4),
            offsets: offsets.clone(),
        };
        let want = serde_json::to_vec(&dto::IngestResponse {
            changes: &changes,
            late: &[],
            watermark: Some(-4),
            offsets: &offsets,
        })
        .unwrap();
        assert_eq!(ingest_body(&a), want);
        let finalized = vec![Address {
            window: "w".into(),
            key: "k".into(),
            start: 0,
            end: 10,
        }];
        let t = TickAnswer {
            changes: b"[]".to_vec(),
            watermark: None,
            finalized: finalized.clone(),
        };
        let want = serde_json::to_vec(&dto::TickResponse {
            changes: &[],
            watermark: None,
            finalized: &finalized,
        })
        .unwrap();
        assert_eq!(tick_body(&t), want);
    }
}
