//! Request parsing: deliveries (single object, JSON array, NDJSON), JSON
//! bodies with unknown fields rejected, and query strings. Every failure is
//! an [`ApiError`]; nothing here panics on any input.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::error::{ApiError, Code};
use crate::canonical::strict;
use crate::service::parse::{self, Framing, ParseError};
use crate::service::{Prefer, Service};

use super::AppState;

/// What every write handler starts from: the body within
/// `--max-body-bytes` (413 beyond it), the service (503 while it
/// recovers), its framing (NDJSON by its `Content-Type`, else JSON) and the
/// answer the caller prefers (`Prefer: return=minimal`). The body is read
/// first, so an oversized body is 413 even while the service recovers.
pub struct WriteCall {
    /// The service.
    pub svc: Arc<Service>,
    /// The body as received.
    pub body: Bytes,
    /// NDJSON when the `Content-Type` names it, else JSON.
    pub framing: Framing,
    /// Records or counts in the answer.
    pub prefer: Prefer,
}

impl FromRequest<AppState> for WriteCall {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &AppState) -> Result<Self, ApiError> {
        let framing = if is_ndjson(
            req.headers()
                .get(header::CONTENT_TYPE)
                // A Content-Type that is not visible ASCII is not NDJSON's.
                .and_then(|v| v.to_str().ok()),
        ) {
            Framing::Ndjson
        } else {
            Framing::Json
        };
        let prefer = prefer_of(req.headers());
        let body = Bytes::from_request(req, st)
            .await
            .map_err(|r| body_error(r, st.max_body_bytes))?;
        let svc = st.service()?;
        Ok(WriteCall {
            svc,
            body,
            framing,
            prefer,
        })
    }
}

/// The calls that set watermarks or idleness, refused with `--kafka`
/// (422 `invalid_request`): there, watermarks and idleness come from the
/// consumed partitions and the watermark topic, not from calls.
pub struct NotInCluster;

impl FromRequestParts<AppState> for NotInCluster {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        match st.producer.get() {
            Some(p) => Err(ApiError::new(
                Code::InvalidRequest,
                format!(
                    "this instance consumes the topic {:?}: its watermarks come from the events \
                     (--max-out-of-orderness, --idle-after) and the topic {:?}-watermarks, where \
                     producers may write explicit ones",
                    p.topic(),
                    p.topic()
                ),
            )),
            None => Ok(NotInCluster),
        }
    }
}

/// The `Idempotency-Key` header of a pattern push or advance, if sent: 1 to
/// 255 printable ASCII characters, else 400 `bad_request`.
pub struct IdempotencyKey(pub Option<String>);

impl FromRequestParts<AppState> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        let Some(v) = parts.headers.get("idempotency-key") else {
            return Ok(IdempotencyKey(None));
        };
        let key = v.to_str().map_err(|_| {
            ApiError::bad_request("Idempotency-Key must be printable ASCII without spaces")
        })?;
        crate::service::check_key(key).map_err(ApiError::bad_request)?;
        Ok(IdempotencyKey(Some(key.to_string())))
    }
}

/// The service, for a handler: 503 `unavailable` while it recovers. Listed
/// after the extractors that validate the request (axum runs them in
/// order), so a bad request is answered as such whatever the service's
/// state.
pub struct Svc(pub Arc<Service>);

impl FromRequestParts<AppState> for Svc {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        st.service().map(Svc)
    }
}

impl FromRequestParts<AppState> for QueryParams {
    type Rejection = ApiError;

    /// The query string's parameters as given; a malformed one is 400.
    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        Query::<Vec<(String, String)>>::from_request_parts(parts, st)
            .await
            .map(|Query(v)| QueryParams(v))
            .map_err(|e| ApiError::bad_request(format!("malformed query string: {e}")))
    }
}

impl FromRequestParts<AppState> for PageQuery {
    type Rejection = ApiError;

    /// `after`, `limit`, `wait_ms` and `epoch`, range-checked.
    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        PageQuery::parse(&QueryParams::from_request_parts(parts, st).await?)
    }
}

/// A checkpoint id from the path: anything but an integer is an unknown
/// checkpoint (404).
pub struct CheckpointId(pub i64);

impl FromRequestParts<AppState> for CheckpointId {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Response> {
        let Path(raw) = Path::<String>::from_request_parts(parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        raw.parse::<i64>().map(CheckpointId).map_err(|_| {
            ApiError::new(Code::NotFound, format!("no checkpoint with id {raw:?}")).into_response()
        })
    }
}

/// A partition name from the path (`/partitions/{partition}/idle`).
pub struct PartitionName(pub String);

impl FromRequestParts<AppState> for PartitionName {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, st)
            .await
            .map(|Path(p)| PartitionName(p))
            .map_err(|e| ApiError::bad_request(format!("bad partition in path: {e}")))
    }
}

impl FromRequestParts<AppState> for Prefer {
    type Rejection = std::convert::Infallible;

    /// The answer the caller prefers ([`prefer_of`]).
    async fn from_request_parts(
        parts: &mut Parts,
        _: &AppState,
    ) -> Result<Self, std::convert::Infallible> {
        Ok(prefer_of(&parts.headers))
    }
}

/// What the request prefers (RFC 7240): `Prefer: return=minimal` (in any
/// case, among other preferences) asks for counts instead of records.
pub fn prefer_of(headers: &HeaderMap) -> Prefer {
    let minimal = headers.get_all("prefer").iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',').any(|p| {
                let (k, val) = p.split_once('=').unwrap_or((p, ""));
                k.trim().eq_ignore_ascii_case("return")
                    && val.trim().trim_matches('"').eq_ignore_ascii_case("minimal")
            })
        })
    });
    if minimal {
        Prefer::Minimal
    } else {
        Prefer::Full
    }
}

/// Maps a body-reading failure: 413 for the size limit (`limit` bytes),
/// else 400.
pub fn body_error(r: BytesRejection, limit: usize) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            Code::PayloadTooLarge,
            format!(
                "the request body is larger than the limit of {limit} bytes; send smaller \
                 batches, or start the service with a larger --max-body-bytes \
                 (STREAMFORGE_MAX_BODY_BYTES)"
            ),
        )
    } else {
        ApiError::bad_request(format!("cannot read the request body: {r}"))
    }
}

/// Parses a JSON body into `T`, which must be a JSON object (described as
/// `what` in errors; unknown fields are rejected by `T`).
pub fn json<T: DeserializeOwned>(body: &[u8], what: &'static str) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    strict::object(&mut de, what)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| {
            ApiError::bad_request(format!("invalid JSON body{}", parse::located(body, &e)))
        })
}

/// A `Content-Type`'s media type without parameters, lowercased.
pub fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Whether a `Content-Type` names NDJSON (JSON Lines): `application/x-ndjson`,
/// `application/ndjson`, `application/jsonl`, `application/x-jsonl`,
/// `application/jsonlines`, `application/x-jsonlines` (any parameters).
pub fn is_ndjson(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else {
        return false;
    };
    matches!(
        essence(ct).as_str(),
        "application/x-ndjson"
            | "application/ndjson"
            | "application/jsonl"
            | "application/x-jsonl"
            | "application/jsonlines"
            | "application/x-jsonlines"
    )
}

/// Parses a `POST /events` body. The parser is the service's (the one
/// recovery replays the stored body with).
pub fn deliveries(body: &[u8], framing: Framing) -> Result<parse::Parsed<'_>, ApiError> {
    parse::deliveries(body, framing).map_err(parse_error)
}

/// A body's parse failure as the API answers it.
pub fn parse_error(e: ParseError) -> ApiError {
    match e {
        ParseError::Empty => ApiError::invalid_request("the batch is empty"),
        ParseError::Malformed { message, index } => ApiError::bad_request(message).at(index),
    }
}

/// What an advance object is called in errors.
pub const ADVANCE: &str = "a watermark object {\"partition\", \"watermark\"}";

/// The advances of a `POST /watermarks/batch` body, `(partition,
/// watermark)` in order: a JSON array of watermark objects, or NDJSON with
/// one per line (blank lines skipped; `index` counts advances, not lines).
/// Each item is read exactly as a `POST /watermarks` body.
pub fn advances(body: &[u8], framing: Framing) -> Result<Vec<(String, i64)>, ApiError> {
    let one = advance_item;
    let mut out = Vec::new();
    if framing == Framing::Ndjson {
        for line in body.split(|b| *b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            out.push(one(line, out.len())?);
        }
    } else {
        let items: Vec<&serde_json::value::RawValue> =
            serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!(
                    "invalid JSON body: expected an array of watermark objects: {e}"
                ))
            })?;
        for (i, item) in items.iter().enumerate() {
            out.push(one(item.get().as_bytes(), i)?);
        }
    }
    if out.is_empty() {
        return Err(ApiError::invalid_request("the batch is empty"));
    }
    Ok(out)
}

/// Whether a batch item is an advance: a JSON object with a top-level
/// `watermark` field (a delivery has none).
pub fn is_advance(item: &[u8]) -> bool {
    use std::collections::HashMap;
    serde_json::from_slice::<HashMap<std::borrow::Cow<'_, str>, serde::de::IgnoredAny>>(item)
        .is_ok_and(|m| m.contains_key("watermark"))
}

/// The two parts of a `POST /batch` body: the deliveries, as the
/// `POST /events` body of the same framing that the command log stores
/// (borrowed for NDJSON, written again for a JSON array or a single
/// object), and the items after the last delivery, the advances, each
/// still to be read ([`advance_item`]). Blank NDJSON lines are skipped.
#[allow(clippy::type_complexity)]
pub fn batch_parts(
    body: &[u8],
    framing: Framing,
) -> Result<(std::borrow::Cow<'_, [u8]>, Vec<&[u8]>), ApiError> {
    let mut advances = Vec::new();
    if framing == Framing::Ndjson {
        // From the end, while the lines are advances.
        let mut cut = body.len();
        while cut > 0 {
            let start = memchr::memrchr(b'\n', &body[..cut]).map_or(0, |i| i + 1);
            let line = &body[start..cut];
            if !line.iter().all(u8::is_ascii_whitespace) {
                if !is_advance(line) {
                    break;
                }
                advances.push(line);
            }
            cut = start.saturating_sub(1);
        }
        advances.reverse();
        return Ok((std::borrow::Cow::Borrowed(&body[..cut]), advances));
    }
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let items: Vec<&serde_json::value::RawValue> = if first == Some(&b'[') {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "invalid JSON body{}: expected an array of deliveries and advances",
                parse::located(body, &e)
            ))
        })?
    } else {
        let one: &serde_json::value::RawValue = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("invalid JSON body{}", parse::located(body, &e)))
        })?;
        vec![one]
    };
    let split = items
        .iter()
        .rposition(|i| !is_advance(i.get().as_bytes()))
        .map_or(0, |i| i + 1);
    advances.extend(items[split..].iter().map(|i| i.get().as_bytes()));
    if split == 0 {
        return Ok((std::borrow::Cow::Borrowed(&[][..]), advances));
    }
    let mut deliveries = Vec::with_capacity(body.len() + 2);
    deliveries.push(b'[');
    for (i, item) in items[..split].iter().enumerate() {
        if i > 0 {
            deliveries.push(b',');
        }
        deliveries.extend_from_slice(item.get().as_bytes());
    }
    deliveries.push(b']');
    Ok((std::borrow::Cow::Owned(deliveries), advances))
}

/// One advance of a batch, read exactly as a `POST /watermarks` body;
/// errors name its `index`.
pub fn advance_item(item: &[u8], index: usize) -> Result<(String, i64), ApiError> {
    let w: crate::api::dto::WatermarkBody = json(item, ADVANCE).map_err(|e| e.at(Some(index)))?;
    Ok((w.partition, w.watermark))
}

/// Query parameters as given (duplicates rejected by the accessors).
pub struct QueryParams(pub Vec<(String, String)>);

impl QueryParams {
    /// The single value of `name`, if present; a repeated name is 400.
    pub fn get(&self, name: &str) -> Result<Option<&str>, ApiError> {
        let mut found = None;
        for (k, v) in &self.0 {
            if k == name {
                if found.is_some() {
                    return Err(ApiError::bad_request(format!(
                        "query parameter {name:?} is repeated"
                    )));
                }
                found = Some(v.as_str());
            }
        }
        Ok(found)
    }

    /// Every value of a repeatable parameter, in the order given.
    pub fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// An integer parameter: malformed → 400; outside `lo..=hi` → 422.
    pub fn int(&self, name: &str, default: i64, lo: i64, hi: i64) -> Result<i64, ApiError> {
        let Some(raw) = self.get(name)? else {
            return Ok(default);
        };
        let v: i64 = raw.parse().map_err(|_| {
            ApiError::bad_request(format!(
                "query parameter {name} must be an integer, got {raw:?}"
            ))
        })?;
        if v < lo || v > hi {
            return Err(ApiError::invalid_request(format!(
                "query parameter {name} must be in {lo}..={hi}, got {v}"
            )));
        }
        Ok(v)
    }
}

/// `after`, `limit` and `wait_ms` of the page routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageQuery {
    /// Start after this sequence.
    pub after: u64,
    /// Page size.
    pub limit: u32,
    /// Long-poll budget in milliseconds.
    pub wait_ms: u64,
    /// The epoch `after` belongs to, if the client says.
    pub epoch: Option<u64>,
}

impl PageQuery {
    /// Parses and range-checks the page parameters.
    pub fn parse(q: &QueryParams) -> Result<PageQuery, ApiError> {
        let after = q.int("after", 0, 0, i64::MAX)?;
        let limit = q.int("limit", 1000, 1, 10_000)?;
        let wait_ms = q.int("wait_ms", 0, 0, 30_000)?;
        let epoch = match q.get("epoch")? {
            Some(_) => Some(q.int("epoch", 0, 0, i64::MAX)? as u64),
            None => None,
        };
        Ok(PageQuery {
            after: after as u64,
            limit: limit as u32,
            wait_ms: wait_ms as u64,
            epoch,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_errors_name_the_element() {
        let body = br#"[{"partition":"p0","offset":0,"event":{"id":"a","key":"k","timestamp":1,"value":1}},
                        {"partition":"p0","offset":1,"event":{"id":"b","key":"k","timestamp":1.5,"value":1}}]"#;
        let e = deliveries(body, Framing::Json).unwrap_err();
        assert_eq!((e.code, e.index), (Code::BadRequest, Some(1)));
        let e = deliveries(b"{\"partition\":\"p0\"}", Framing::Json).unwrap_err();
        assert_eq!((e.code, e.index), (Code::BadRequest, None));
        let e = deliveries(b" [ ] ", Framing::Json).unwrap_err();
        assert_eq!(e.code, Code::InvalidRequest);
        let e = deliveries(b"\n", Framing::Ndjson).unwrap_err();
        assert_eq!(e.code, Code::InvalidRequest);
        let nd = b"{\"partition\":\"p0\",\"event\":{\"id\":\"a\",\"key\":\"k\",\"timestamp\":1,\"value\":1}}\n{\"partition\":\"p0\",\"x\":1}";
        let e = deliveries(nd, Framing::Ndjson).unwrap_err();
        assert_eq!(e.index, Some(1));
        let ok = deliveries(
            &nd[..=nd.iter().position(|b| *b == b'\n').unwrap()],
            Framing::Ndjson,
        )
        .unwrap();
        assert!(ok.batch && ok.items.len() == 1 && ok.items[0].offset.is_none());
    }

    #[test]
    fn page_query_ranges() {
        let q = |s: &[(&str, &str)]| {
            PageQuery::parse(&QueryParams(
                s.iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
            ))
        };
        assert_eq!(
            q(&[]).unwrap(),
            PageQuery {
                after: 0,
                limit: 1000,
                wait_ms: 0,
                epoch: None
            }
        );
        assert_eq!(q(&[("epoch", "3")]).unwrap().epoch, Some(3));
        assert_eq!(
            q(&[("epoch", "-1")]).unwrap_err().code,
            Code::InvalidRequest
        );
        assert_eq!(q(&[("epoch", "x")]).unwrap_err().code, Code::BadRequest);
        assert_eq!(q(&[("limit", "0")]).unwrap_err().code, Code::InvalidRequest);
        assert_eq!(
            q(&[("limit", "10001")]).unwrap_err().code,
            Code::InvalidRequest
        );
        assert_eq!(
            q(&[("wait_ms", "30001")]).unwrap_err().code,
            Code::InvalidRequest
        );
        assert_eq!(q(&[("after", "x")]).unwrap_err().code, Code::BadRequest);
        assert_eq!(q(&[("limit", "1.0")]).unwrap_err().code, Code::BadRequest);
        assert_eq!(
            q(&[("after", "99999999999999999999")]).unwrap_err().code,
            Code::BadRequest
        );
    }
}
