//! The webhook sinks' routes (docs/api.md, "Sinks"; docs/sinks.md): create,
//! list, show, delete. Answers are the sinks' views, secrets masked.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, Code};
use super::extract;
use super::routes::{blocking, json_response};
use super::AppState;
use crate::sinks::{SinkError, Sinks};

impl From<SinkError> for ApiError {
    fn from(e: SinkError) -> Self {
        match e {
            SinkError::BadRequest(d) => ApiError::new(Code::BadRequest, d),
            SinkError::Invalid(d) => ApiError::new(Code::InvalidRequest, d),
            SinkError::Exists(d) => ApiError::new(Code::SinkExists, d),
            SinkError::NotFound(d) => ApiError::new(Code::NotFound, d),
            SinkError::Unavailable(d) => ApiError::new(Code::Unavailable, d),
        }
    }
}

/// The sinks, for a handler: 503 while the service recovers.
pub struct SinkSet(std::sync::Arc<Sinks>);

impl axum::extract::FromRequestParts<AppState> for SinkSet {
    type Rejection = ApiError;

    async fn from_request_parts(
        _: &mut axum::http::request::Parts,
        st: &AppState,
    ) -> Result<Self, ApiError> {
        sinks(st).map(SinkSet)
    }
}

fn sinks(st: &AppState) -> Result<std::sync::Arc<Sinks>, ApiError> {
    st.service()?;
    st.sinks
        .get()
        .cloned()
        .ok_or_else(|| ApiError::new(Code::Unavailable, "the service is recovering"))
}

/// `POST /sinks`: 201 with the new sink.
pub async fn post_sink(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    // The body first (an oversized one is 413 even while recovering).
    let body = body.map_err(|r| extract::body_error(r, st.max_body_bytes))?;
    let sinks = sinks(&st)?;
    let view = blocking(move || Ok(sinks.create(&body)?)).await?;
    Ok(json_response(StatusCode::CREATED, view.json.into_bytes()))
}

/// `GET /sinks`: `{"sinks":[...]}`, by name.
pub async fn list_sinks(SinkSet(sinks): SinkSet) -> Result<Response, ApiError> {
    let list = blocking(move || Ok(sinks.list()?)).await?;
    let mut out = String::from("{\"sinks\":[");
    for (i, v) in list.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&v.json);
    }
    out.push_str("]}");
    Ok(json_response(StatusCode::OK, out.into_bytes()))
}

/// `GET /sinks/{name}`.
pub async fn get_sink(
    Path(name): Path<String>,
    SinkSet(sinks): SinkSet,
) -> Result<Response, ApiError> {
    let view = blocking(move || Ok(sinks.get(&name)?)).await?;
    Ok(json_response(StatusCode::OK, view.json.into_bytes()))
}

/// `DELETE /sinks/{name}`: 204.
pub async fn delete_sink(
    Path(name): Path<String>,
    SinkSet(sinks): SinkSet,
) -> Result<Response, ApiError> {
    blocking(move || Ok(sinks.delete(&name)?)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
