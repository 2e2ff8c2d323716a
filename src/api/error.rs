//! The one API error type, rendered as RFC 9457 problem details.
//!
//! The status ↔ `code` mapping of the error table in docs/api.md is written once, in
//! [`Code`]. Bodies are `{"type", "title", "status", "code", "detail",
//! "index"}` in that order; `index` only for batch requests.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::engine::Rejection;
use crate::service::ServiceError;

/// The `code`s of docs/api.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 400: malformed JSON, wrong types, missing or unknown fields, integer
    /// outside i64, malformed query numbers.
    BadRequest,
    /// 401: a token is configured and the request lacks it.
    Unauthorized,
    /// 404: unknown route or checkpoint id.
    NotFound,
    /// 409: the offset rules of docs/semantics.md.
    OffsetConflict,
    /// 409: an event id known with another identity.
    IdentityConflict,
    /// 409: a pattern event at or before the pattern watermark.
    LateEvent,
    /// 409: a pattern advance below the pattern watermark.
    WatermarkRegression,
    /// 409: a sink with that name exists.
    SinkExists,
    /// 409: a call with the same `Idempotency-Key` is still in progress.
    IdempotencyKeyInUse,
    /// 422: an `Idempotency-Key` already used for another request.
    IdempotencyKeyReused,
    /// 410: the records asked for were pruned by the retention policy.
    Pruned,
    /// 413: body over the configured limit.
    PayloadTooLarge,
    /// 422: partition not in the pipeline.
    UnknownPartition,
    /// 422: restore of an unusable checkpoint.
    InvalidCheckpoint,
    /// 422: well-formed but unusable (limit out of range, empty batch, ...).
    InvalidRequest,
    /// 422: a pattern limit reached by an advance (nothing committed).
    LimitExceeded,
    /// 503: storage failure or recovery in progress; nothing was applied.
    Unavailable,
    /// 401: a webhook source's signature header is absent.
    SignatureMissing,
    /// 401: a webhook source's signature header cannot be read.
    SignatureMalformed,
    /// 401: no signature matches the source's secrets.
    SignatureMismatch,
    /// 401: the signed timestamp is outside the source's tolerance.
    SignatureStale,
    /// 415: a webhook body that is neither JSON nor NDJSON.
    UnsupportedMediaType,
    /// 422: a webhook payload that does not fit its source's mapping.
    MappingFailed,
}

impl Code {
    /// The HTTP status of this code.
    pub fn status(self) -> StatusCode {
        match self {
            Code::BadRequest => StatusCode::BAD_REQUEST,
            Code::Unauthorized => StatusCode::UNAUTHORIZED,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::OffsetConflict
            | Code::IdentityConflict
            | Code::LateEvent
            | Code::WatermarkRegression
            | Code::SinkExists
            | Code::IdempotencyKeyInUse => StatusCode::CONFLICT,
            Code::Pruned => StatusCode::GONE,
            Code::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Code::UnknownPartition
            | Code::InvalidCheckpoint
            | Code::InvalidRequest
            | Code::LimitExceeded
            | Code::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::SignatureMissing
            | Code::SignatureMalformed
            | Code::SignatureMismatch
            | Code::SignatureStale => StatusCode::UNAUTHORIZED,
            Code::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::MappingFailed => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }

    /// The stable machine-readable string.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::BadRequest => "bad_request",
            Code::Unauthorized => "unauthorized",
            Code::NotFound => "not_found",
            Code::OffsetConflict => "offset_conflict",
            Code::IdentityConflict => "identity_conflict",
            Code::LateEvent => "late_event",
            Code::WatermarkRegression => "watermark_regression",
            Code::SinkExists => "sink_exists",
            Code::IdempotencyKeyInUse => "idempotency_key_in_use",
            Code::IdempotencyKeyReused => "idempotency_key_reused",
            Code::Pruned => "pruned",
            Code::PayloadTooLarge => "payload_too_large",
            Code::UnknownPartition => "unknown_partition",
            Code::InvalidCheckpoint => "invalid_checkpoint",
            Code::InvalidRequest => "invalid_request",
            Code::LimitExceeded => "limit_exceeded",
            Code::Unavailable => "unavailable",
            Code::SignatureMissing => "signature_missing",
            Code::SignatureMalformed => "signature_malformed",
            Code::SignatureMismatch => "signature_mismatch",
            Code::SignatureStale => "signature_stale",
            Code::UnsupportedMediaType => "unsupported_media_type",
            Code::MappingFailed => "mapping_failed",
        }
    }

    /// The problem `title` (the status's reason phrase).
    pub fn title(self) -> &'static str {
        match self {
            Code::BadRequest => "Bad Request",
            Code::Unauthorized => "Unauthorized",
            Code::NotFound => "Not Found",
            Code::OffsetConflict
            | Code::IdentityConflict
            | Code::LateEvent
            | Code::WatermarkRegression
            | Code::SinkExists
            | Code::IdempotencyKeyInUse => "Conflict",
            Code::Pruned => "Gone",
            Code::PayloadTooLarge => "Payload Too Large",
            Code::UnknownPartition
            | Code::InvalidCheckpoint
            | Code::InvalidRequest
            | Code::LimitExceeded
            | Code::IdempotencyKeyReused => "Unprocessable Content",
            Code::Unavailable => "Service Unavailable",
            Code::SignatureMissing
            | Code::SignatureMalformed
            | Code::SignatureMismatch
            | Code::SignatureStale => "Unauthorized",
            Code::UnsupportedMediaType => "Unsupported Media Type",
            Code::MappingFailed => "Unprocessable Content",
        }
    }
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// What kind.
    pub code: Code,
    /// The human-readable detail (never internal secrets).
    pub detail: String,
    /// First failing delivery of a batch request.
    pub index: Option<usize>,
    /// `pruned`: the earliest sequence still held.
    pub earliest: Option<u64>,
}

impl ApiError {
    /// An error without index.
    pub fn new(code: Code, detail: impl Into<String>) -> ApiError {
        ApiError {
            code,
            detail: detail.into(),
            index: None,
            earliest: None,
        }
    }

    /// `bad_request`.
    pub fn bad_request(detail: impl Into<String>) -> ApiError {
        ApiError::new(Code::BadRequest, detail)
    }

    /// `invalid_request`.
    pub fn invalid_request(detail: impl Into<String>) -> ApiError {
        ApiError::new(Code::InvalidRequest, detail)
    }

    /// Sets the batch index.
    pub fn at(mut self, index: Option<usize>) -> ApiError {
        self.index = index;
        self
    }

    /// Maps an engine rejection.
    pub fn from_rejection(r: &Rejection) -> ApiError {
        let code = match r {
            Rejection::UnknownPartition(_) => Code::UnknownPartition,
            Rejection::OffsetConflict(_) => Code::OffsetConflict,
            Rejection::IdentityConflict(_) => Code::IdentityConflict,
            Rejection::InvalidCheckpoint(_) => Code::InvalidCheckpoint,
            _ => match r.code() {
                "unknown_partition" => Code::UnknownPartition,
                "offset_conflict" => Code::OffsetConflict,
                "identity_conflict" => Code::IdentityConflict,
                "invalid_checkpoint" => Code::InvalidCheckpoint,
                "invalid_request" => Code::InvalidRequest,
                "unavailable" => Code::Unavailable,
                _ => Code::BadRequest,
            },
        };
        ApiError::new(code, r.detail())
    }

    /// Maps a service error. `batch` says whether the request was a batch
    /// (then engine rejections carry `index`).
    pub fn from_service(e: ServiceError, batch: bool) -> ApiError {
        match e {
            ServiceError::Rejected(r) => ApiError::from_rejection(&r),
            ServiceError::BatchRejected(b) => {
                ApiError::from_rejection(&b.rejection).at(batch.then_some(b.index))
            }
            ServiceError::Unavailable(d) => ApiError::new(Code::Unavailable, d),
            ServiceError::NotFound(d) => ApiError::new(Code::NotFound, d),
            ServiceError::Invalid(d) => ApiError::new(Code::InvalidRequest, d),
            ServiceError::Patterns(r) => {
                use crate::patterns::Rejection as R;
                let code = match &r.rejection {
                    R::LateEvent { .. } => Code::LateEvent,
                    R::WatermarkRegression { .. } => Code::WatermarkRegression,
                    R::InvalidRequest(_) => Code::InvalidRequest,
                    R::LimitExceeded(_) => Code::LimitExceeded,
                };
                let mut detail = r.rejection.to_string();
                if let Some(hint) = finished_hint(&r.rejection) {
                    detail.push_str(hint);
                }
                ApiError::new(code, detail).at(r.index.filter(|_| batch))
            }
            ServiceError::KeyInUse(d) => ApiError::new(Code::IdempotencyKeyInUse, d),
            ServiceError::KeyReused(d) => ApiError::new(Code::IdempotencyKeyReused, d),
            ServiceError::Malformed { index, detail } => ApiError::bad_request(detail).at(index),
            ServiceError::Gone { detail, earliest } => ApiError {
                earliest: Some(earliest),
                ..ApiError::new(Code::Pruned, detail)
            },
        }
    }

    /// The problem+json body bytes: `type`, `title`, `status`, `code`,
    /// `detail`[, `index`][, `earliest`], written with the canonical
    /// writer (strings and integers: it cannot fail).
    pub fn body(&self) -> Vec<u8> {
        use crate::canonical::writer::{int, string};
        let mut out = Vec::with_capacity(96 + self.detail.len());
        out.extend_from_slice(b"{\"type\":\"about:blank\",\"title\":");
        string(&mut out, self.code.title());
        out.extend_from_slice(b",\"status\":");
        int(&mut out, self.code.status().as_u16());
        out.extend_from_slice(b",\"code\":");
        string(&mut out, self.code.as_str());
        out.extend_from_slice(b",\"detail\":");
        string(&mut out, &self.detail);
        if let Some(index) = self.index {
            out.extend_from_slice(b",\"index\":");
            int(&mut out, index as u64);
        }
        if let Some(earliest) = self.earliest {
            out.extend_from_slice(b",\"earliest\":");
            int(&mut out, earliest);
        }
        out.push(b'}');
        out
    }
}

/// The hint a refusal gets when the pattern engine is finished (its
/// watermark is the final one): nothing can be pushed or advanced any more,
/// and the detail says what to do instead.
fn finished_hint(r: &crate::patterns::Rejection) -> Option<&'static str> {
    use crate::patterns::{Rejection as R, FINAL_WATERMARK};
    match r {
        R::LateEvent { watermark, .. }
        | R::WatermarkRegression {
            current: watermark, ..
        } if *watermark == FINAL_WATERMARK => Some(
            "; the pattern engine is finished (POST /patterns/finish set its watermark to \
                 the final one): it takes no more events or advances. To go on, restore a \
                 checkpoint taken before the finish (POST /patterns/checkpoints/{id}/restore), \
                 or start the server on another --db",
        ),
        _ => None,
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        ApiError::from_service(e, false)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.code.status(), self.body()).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.code == Code::Unauthorized {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

#[cfg(test)]
mod body_tests {
    use super::*;
    use serde::Serialize;

    #[derive(Serialize)]
    struct Problem<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        title: &'static str,
        status: u16,
        code: &'static str,
        detail: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        index: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        earliest: Option<u64>,
    }

    #[test]
    fn problem_bodies_are_what_serde_json_writes() {
        for (code, detail, index, earliest) in [
            (Code::BadRequest, "a \"q\" \\ \u{1}é", None, None),
            (Code::OffsetConflict, "", Some(3usize), None),
            (Code::Pruned, "gone", None, Some(u64::MAX)),
            (Code::Unavailable, "x", Some(usize::MAX), Some(0)),
        ] {
            let e = ApiError {
                code,
                detail: detail.to_string(),
                index,
                earliest,
            };
            let p = Problem {
                kind: "about:blank",
                title: code.title(),
                status: code.status().as_u16(),
                code: code.as_str(),
                detail,
                index,
                earliest,
            };
            assert_eq!(e.body(), serde_json::to_vec(&p).unwrap());
        }
    }
}
