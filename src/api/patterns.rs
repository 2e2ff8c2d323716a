//! The pattern engine's routes: `POST /patterns/events`, `/patterns/advance`,
//! `/patterns/finish`, `GET /patterns` (`?diagnostics=true`), `/patterns/output` (and its stream,
//! in `stream`), `/patterns/status`, and its checkpoints and restores.
//! Same conventions as the window engine's routes: problem+json, `index` on
//! batch errors, a 2xx is durable, a rejection changes nothing.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use super::dto::{page_body, page_body_next};
use super::error::ApiError;
use super::extract::{self, CheckpointId, IdempotencyKey, PageQuery, QueryParams, Svc, WriteCall};
use super::filter::OutputFilter;
use super::routes::{blocking, json_response, long_poll, to_json};
use super::AppState;
use crate::patterns::PatternStatus;
use crate::service::parse::{self, ParseError};
use crate::service::{AdvanceAnswer, Keyed, KeyedRequest, PushAnswer, RestoreSource, Service};
use crate::store::{EngineId, Stream};
use std::sync::Arc;

/// `POST /patterns/advance` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdvanceBody {
    #[serde(deserialize_with = "watermark_field")]
    watermark: i64,
}

fn watermark_field<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    crate::canonical::strict::int_field(d, "watermark")
}

/// `GET /patterns/status` answer.
#[derive(Serialize)]
struct StatusResponse<'a> {
    watermark: i64,
    buffered: u64,
    next_ordinal: u64,
    sequence: u64,
    epoch: u64,
    #[serde(serialize_with = "per_pattern")]
    patterns: &'a [(String, PatternStatus)],
}

fn per_pattern<S: Serializer>(ps: &&[(String, PatternStatus)], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct One {
        keys: u64,
        branches: u64,
        waits: u64,
    }
    let mut m = s.serialize_map(Some(ps.len()))?;
    for (name, p) in ps.iter() {
        m.serialize_entry(
            name,
            &One {
                keys: p.keys,
                branches: p.branches,
                waits: p.waits,
            },
        )?;
    }
    m.end()
}

/// `POST /patterns/restore` answer.
#[derive(Serialize)]
struct RestoreResponse {
    sequence: u64,
    watermark: i64,
}

/// A keyed call's answer: 200 with the body, and `Idempotent-Replayed:
/// true` when it is the stored answer of an earlier call.
fn keyed_response<T>(k: Keyed<T>, body: impl FnOnce(&T) -> Vec<u8>) -> Response {
    match k {
        Keyed::Applied(a) => json_response(StatusCode::OK, body(&a)),
        Keyed::Replayed(stored) => {
            let mut r = json_response(StatusCode::OK, stored);
            r.headers_mut().insert(
                "idempotent-replayed",
                axum::http::HeaderValue::from_static("true"),
            );
            r
        }
    }
}

/// `POST /patterns/events`: one event, a JSON array, or NDJSON; atomic.
pub async fn post_events(
    IdempotencyKey(key): IdempotencyKey,
    call: WriteCall,
) -> Result<Response, ApiError> {
    let WriteCall {
        svc, body, framing, ..
    } = call;
    blocking(move || {
        let parsed = match parse::pattern_events(&body, framing) {
            Ok(p) => p,
            Err(ParseError::Empty) => {
                return Err(ApiError::invalid_request("the batch is empty"));
            }
            Err(ParseError::Malformed { message, index }) => {
                return Err(ApiError::bad_request(message).at(index));
            }
        };
        let batch = parsed.batch;
        // The request is its framing and body as sent.
        let key = key.map(|k| {
            KeyedRequest::new(
                k,
                "POST /patterns/events",
                &[framing.kind().as_bytes(), &body],
            )
        });
        let a = svc
            .pattern_push(&body, framing, parsed, key.as_ref())
            .map_err(|e| ApiError::from_service(e, batch))?;
        Ok(keyed_response(a, PushAnswer::json))
    })
    .await
}

/// `POST /patterns/advance`.
pub async fn post_advance(
    IdempotencyKey(key): IdempotencyKey,
    call: WriteCall,
) -> Result<Response, ApiError> {
    let WriteCall { svc, body, .. } = call;
    blocking(move || {
        let req: AdvanceBody = extract::json(&body, "an advance object {\"watermark\"}")?;
        // The request is its watermark (however the body was spelled).
        let key = key.map(|k| {
            KeyedRequest::new(k, "POST /patterns/advance", &[&req.watermark.to_be_bytes()])
        });
        let a = svc.pattern_advance(req.watermark, key.as_ref())?;
        Ok(keyed_response(a, AdvanceAnswer::json))
    })
    .await
}

/// `POST /patterns/finish` (no body).
pub async fn post_finish(Svc(svc): Svc) -> Result<Response, ApiError> {
    blocking(move || Ok(svc.pattern_finish()?.json()))
        .await
        .map(|b| json_response(StatusCode::OK, b))
}

/// `GET /patterns`: the document in force; with `diagnostics=true`, plus
/// the engine's type mismatch counters (`type_mismatches`).
pub async fn get_document(q: QueryParams, Svc(svc): Svc) -> Result<Response, ApiError> {
    let diagnostics = match q.get("diagnostics")? {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "query parameter diagnostics must be true or false, got {other:?}"
            )))
        }
    };
    // read under the engines lock
    blocking(move || {
        Ok(if diagnostics {
            svc.pattern_document_diagnostics()?
        } else {
            svc.pattern_document()?
        })
    })
    .await
    .map(|b| json_response(StatusCode::OK, b))
}

/// `PUT /patterns` answer: what the change did, by pattern name.
#[derive(Serialize)]
struct ChangeResponse<'a> {
    kept: &'a [String],
    started: &'a [String],
    removed: &'a [String],
    /// Conditions of the new document that can never be true (as `patterns
    /// check` warns): `PATH: why`.
    warnings: Vec<String>,
}

/// `PUT /patterns`: a new document (as `--patterns` takes it), validated as
/// at startup and put in force as one logged command: unchanged patterns
/// keep their state, new and changed ones start empty, removed ones stop
/// (their past output stays). Not JSON: 400; an invalid document: 422
/// `invalid_request` naming the rule and path.
pub async fn put_document(call: WriteCall) -> Result<Response, ApiError> {
    let WriteCall { svc, body, .. } = call;
    blocking(move || {
        if serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err() {
            return Err(ApiError::bad_request(
                "the body must be a patterns document (JSON)",
            ));
        }
        let doc = crate::patterns::Document::from_json(&body)
            .map_err(|e| ApiError::invalid_request(e.to_string()))?;
        let warnings: Vec<String> = doc.warnings().iter().map(|w| w.to_string()).collect();
        for w in &warnings {
            tracing::warn!("PUT /patterns: {w}");
        }
        let c = svc.put_patterns(doc)?;
        to_json(&ChangeResponse {
            kept: &c.kept,
            started: &c.started,
            removed: &c.removed,
            warnings,
        })
    })
    .await
    .map(|b| json_response(StatusCode::OK, b))
}

/// `GET /patterns/output?after=S&limit=N&wait_ms=T&epoch=E` (and
/// `pattern=`, `key=`: `limit` counts the records scanned, `next` passes
/// them all, a long poll answers once anything new was scanned).
pub async fn get_output(
    q: PageQuery,
    filter: OutputFilter,
    Svc(svc): Svc,
) -> Result<Response, ApiError> {
    if filter.is_empty() {
        let page = long_poll(svc, Stream::Patterns, q).await?;
        return Ok(json_response(StatusCode::OK, page_body("output", &page)));
    }
    // the names in force are read under the engines lock
    let (filter, svc) = blocking(move || filter.check(&svc).map(|()| (filter, svc))).await?;
    let mut page = long_poll(svc, Stream::Patterns, q).await?;
    let next = filter.retain(&mut page);
    Ok(json_response(
        StatusCode::OK,
        page_body_next("output", &page, next),
    ))
}

/// `GET /patterns/status`.
pub async fn get_status(Svc(svc): Svc) -> Result<Response, ApiError> {
    blocking(move || {
        let s = svc.pattern_status()?;
        to_json(&StatusResponse {
            watermark: s.engine.watermark,
            buffered: s.engine.buffered,
            next_ordinal: s.engine.next_ordinal,
            sequence: s.engine.sequence,
            epoch: s.epoch,
            patterns: &s.engine.patterns,
        })
    })
    .await
    .map(|b| json_response(StatusCode::OK, b))
}

/// `POST /patterns/checkpoints`.
pub async fn post_checkpoint(Svc(svc): Svc) -> Result<Response, ApiError> {
    super::routes::create_checkpoint(svc, EngineId::Patterns).await
}

/// `GET /patterns/checkpoints`.
pub async fn list_checkpoints(Svc(svc): Svc) -> Result<Response, ApiError> {
    super::routes::checkpoint_list(svc, EngineId::Patterns).await
}

/// `GET /patterns/checkpoints/{id}`.
pub async fn get_checkpoint(
    CheckpointId(id): CheckpointId,
    Svc(svc): Svc,
) -> Result<Response, ApiError> {
    super::routes::checkpoint_envelope(svc, id, EngineId::Patterns).await
}

/// `DELETE /patterns/checkpoints/{id}`.
pub async fn delete_checkpoint(
    CheckpointId(id): CheckpointId,
    Svc(svc): Svc,
) -> Result<Response, ApiError> {
    super::routes::checkpoint_delete(svc, id, EngineId::Patterns).await
}

async fn restore(svc: Arc<Service>, source: RestoreSource) -> Result<Response, ApiError> {
    blocking(move || {
        let r = svc.restore_patterns(source)?;
        to_json(&RestoreResponse {
            sequence: r.sequence,
            watermark: r.watermark,
        })
    })
    .await
    .map(|b| json_response(StatusCode::OK, b))
}

/// `POST /patterns/checkpoints/{id}/restore`.
pub async fn restore_by_id(
    CheckpointId(id): CheckpointId,
    Svc(svc): Svc,
) -> Result<Response, ApiError> {
    restore(svc, RestoreSource::Id(id)).await
}

/// `POST /patterns/restore` with the envelope as body.
pub async fn restore_body(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    // The body first (an oversized one is 413 even while recovering), so
    // the service is asked for here rather than by an extractor.
    let body = body.map_err(|r| extract::body_error(r, st.max_body_bytes))?;
    restore(st.service()?, RestoreSource::Bytes(body.to_vec())).await
}
