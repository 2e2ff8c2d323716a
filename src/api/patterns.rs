//! The pattern engine's routes: `POST /patterns/events`, `/patterns/advance`,
//! `/patterns/finish`, `GET /patterns`, `/patterns/output` (and its stream,
//! in `stream`), `/patterns/status`, and its checkpoints and restores.
//! Same conventions as the window engine's routes: problem+json, `index` on
//! batch errors, a 2xx is durable, a rejection changes nothing.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use super::dto::page_body;
use super::error::ApiError;
use super::extract::{self, PageQuery, QueryParams, WriteCall};
use super::routes::{blocking, json_response, long_poll, to_json};
use super::AppState;
use crate::patterns::PatternStatus;
use crate::service::parse::{self, Framing, ParseError};
use crate::service::{AdvanceAnswer, RestoreSource};
use crate::store::{EngineId, Stream};

/// `POST /patterns/advance` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdvanceBody {
    #[serde(deserialize_with = "watermark_field")]
    watermark: i64,
}

fn watermark_field<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    crate::engine::strict::int_field(d, "watermark")
}

/// `POST /patterns/events` answer.
#[derive(Serialize)]
struct PushResponse {
    first: u64,
    last: u64,
    buffered: u64,
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

/// `{"output":[..],"watermark":W,"processed":n}` around the stored bytes.
fn advance_body(a: &AdvanceAnswer) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.output.len() + 64);
    out.extend_from_slice(b"{\"output\":");
    out.extend_from_slice(&a.output);
    out.extend_from_slice(
        format!(
            ",\"watermark\":{},\"processed\":{}}}",
            a.watermark, a.processed
        )
        .as_bytes(),
    );
    out
}

/// `POST /patterns/events`: one event, a JSON array, or NDJSON; atomic.
pub async fn post_events(call: WriteCall) -> Result<Response, ApiError> {
    let WriteCall {
        svc, body, ndjson, ..
    } = call;
    let framing = if ndjson {
        Framing::Ndjson
    } else {
        Framing::Json
    };
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
        let a = svc
            .pattern_push(&body, framing, parsed)
            .map_err(|e| ApiError::from_service(e, batch))?;
        to_json(&PushResponse {
            first: a.first,
            last: a.last,
            buffered: a.buffered,
        })
    })
    .await
    .map(|b| json_response(StatusCode::OK, b))
}

/// `POST /patterns/advance`.
pub async fn post_advance(call: WriteCall) -> Result<Response, ApiError> {
    let WriteCall { svc, body, .. } = call;
    blocking(move || {
        let req: AdvanceBody = extract::json(&body, "an advance object {\"watermark\"}")?;
        Ok(advance_body(&svc.pattern_advance(req.watermark)?))
    })
    .await
    .map(|b| json_response(StatusCode::OK, b))
}

/// `POST /patterns/finish` (no body).
pub async fn post_finish(State(st): State<AppState>) -> Result<Response, ApiError> {
    let svc = st.service()?;
    blocking(move || Ok(advance_body(&svc.pattern_finish()?)))
        .await
        .map(|b| json_response(StatusCode::OK, b))
}

/// `GET /patterns`: the document in force.
pub async fn get_document(State(st): State<AppState>) -> Result<Response, ApiError> {
    let svc = st.service()?;
    Ok(json_response(StatusCode::OK, svc.pattern_document()))
}

/// `GET /patterns/output?after=S&limit=N&wait_ms=T&epoch=E`.
pub async fn get_output(
    State(st): State<AppState>,
    q: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let q = q
        .map(|Query(v)| QueryParams(v))
        .map_err(|e| ApiError::bad_request(format!("malformed query string: {e}")))?;
    let q = PageQuery::parse(&q)?;
    let page = long_poll(st.service()?, Stream::Patterns, q).await?;
    Ok(json_response(StatusCode::OK, page_body("output", &page)))
}

/// `GET /patterns/status`.
pub async fn get_status(State(st): State<AppState>) -> Result<Response, ApiError> {
    let svc = st.service()?;
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
pub async fn post_checkpoint(st: State<AppState>) -> Result<Response, ApiError> {
    super::routes::create_checkpoint(st, EngineId::Patterns).await
}

/// `GET /patterns/checkpoints`.
pub async fn list_checkpoints(st: State<AppState>) -> Result<Response, ApiError> {
    super::routes::checkpoint_list(st, EngineId::Patterns).await
}

/// `GET /patterns/checkpoints/{id}`.
pub async fn get_checkpoint(st: State<AppState>, id: Path<String>) -> Result<Response, ApiError> {
    super::routes::checkpoint_envelope(st, id, EngineId::Patterns).await
}

/// `DELETE /patterns/checkpoints/{id}`.
pub async fn delete_checkpoint(
    st: State<AppState>,
    id: Path<String>,
) -> Result<Response, ApiError> {
    super::routes::checkpoint_delete(st, id, EngineId::Patterns).await
}

async fn restore(st: AppState, source: RestoreSource) -> Result<Response, ApiError> {
    let svc = st.service()?;
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
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = super::routes::checkpoint_id(&id)?;
    restore(st, RestoreSource::Id(id)).await
}

/// `POST /patterns/restore` with the envelope as body.
pub async fn restore_body(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|r| extract::body_error(r, st.max_body_bytes))?;
    restore(st, RestoreSource::Bytes(body.to_vec())).await
}
