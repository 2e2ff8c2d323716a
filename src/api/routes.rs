//! Handlers. Each parses its request (outside the engines lock), runs the
//! service call in `spawn_blocking`, and renders the typed answer.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::dto::{self, page_body};
use super::error::{ApiError, Code};
use super::extract::{CheckpointId, PageQuery, QueryParams, Svc};
use super::AppState;
use std::io::Read as _;

use crate::service::Download;
use crate::service::{RestoreSource, Service};
use crate::store::{EngineId, Page, Stream};

/// The OpenAPI document, served verbatim.
pub const OPENAPI_YAML: &str = include_str!("../../openapi.yaml");

/// Runs a blocking service call off the async workers.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|_| {
        Err(ApiError::new(
            Code::Unavailable,
            "internal failure; nothing was applied",
        ))
    })
}

pub(super) fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub(crate) fn to_json<T: Serialize>(v: &T) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(v)
        .map_err(|e| ApiError::new(Code::Unavailable, format!("cannot encode the answer: {e}")))
}

/// `window` and `key` of `GET /results` (each at most once).
pub struct ResultsQuery {
    window: Option<String>,
    key: Option<String>,
}

impl axum::extract::FromRequestParts<AppState> for ResultsQuery {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &AppState,
    ) -> Result<Self, ApiError> {
        let q = QueryParams::from_request_parts(parts, st).await?;
        Ok(ResultsQuery {
            window: q.get("window")?.map(str::to_string),
            key: q.get("key")?.map(str::to_string),
        })
    }
}

/// Waits (up to `wait_ms`) for a page with rows: the long poll of
/// `/changes` and `/late`, woken by the service's head notifications. A
/// rewound page (asked for in an older epoch) is answered at once.
pub(super) async fn long_poll(
    svc: Arc<Service>,
    stream: Stream,
    q: PageQuery,
) -> Result<Page, ApiError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(q.wait_ms);
    let mut rx = svc.subscribe();
    loop {
        let stop = rx.borrow_and_update().shutdown;
        let s = svc.clone();
        let page = blocking(move || {
            s.page(stream, q.after, q.limit, q.epoch)
                .map_err(ApiError::from)
        })
        .await?;
        if !page.rows.is_empty() || page.rewound_to.is_some() || q.wait_ms == 0 || stop {
            return Ok(page);
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => continue,
            _ => return Ok(page),
        }
    }
}

/// `GET /changes`.
pub async fn get_changes(q: PageQuery, Svc(svc): Svc) -> Result<Response, ApiError> {
    let page = long_poll(svc, Stream::Changes, q).await?;
    Ok(json_response(StatusCode::OK, page_body("changes", &page)))
}

/// `GET /late`.
pub async fn get_late(q: PageQuery, Svc(svc): Svc) -> Result<Response, ApiError> {
    let page = long_poll(svc, Stream::Late, q).await?;
    Ok(json_response(StatusCode::OK, page_body("late", &page)))
}

/// `GET /results?window=W&key=K`.
pub async fn get_results(q: ResultsQuery, Svc(svc): Svc) -> Result<Response, ApiError> {
    let ResultsQuery { window, key } = q;
    blocking(move || {
        let r = svc.results(window.as_deref(), key.as_deref())?;
        to_json(&dto::ResultsResponse {
            results: &r.rows,
            watermark: r.watermark,
            sequence: r.sequence,
            epoch: r.epoch,
        })
    })
    .await
    .map(|b| json_response(StatusCode::OK, b))
}

/// `GET /status`.
pub async fn get_status(Svc(svc): Svc) -> Result<Response, ApiError> {
    blocking(move || to_json(&dto::StatusResponse::new(&svc.status()?)))
        .await
        .map(|b| json_response(StatusCode::OK, b))
}

/// `GET /pipeline`.
pub async fn get_pipeline(State(st): State<AppState>, Svc(svc): Svc) -> Result<Response, ApiError> {
    // With inbound sources or watermark strategies, they follow the
    // engine's fields; without, the answer is the engine's pipeline alone.
    Ok(json_response(
        StatusCode::OK,
        st.inbound
            .config
            .pipeline_json(svc.pipeline().to_json())
            .into_bytes(),
    ))
}

/// Stores a checkpoint of `engine` (`POST /checkpoints`, `POST
/// /patterns/checkpoints`).
pub(super) async fn create_checkpoint(
    svc: Arc<Service>,
    engine: EngineId,
) -> Result<Response, ApiError> {
    blocking(move || {
        let m = svc.create_checkpoint(engine)?;
        to_json(&dto::CheckpointCreated {
            id: m.id,
            sequence: m.sequence,
            digest: &m.digest,
            bytes: m.bytes,
        })
    })
    .await
    .map(|b| json_response(StatusCode::CREATED, b))
}

/// Lists `engine`'s stored checkpoints, newest first.
pub(super) async fn checkpoint_list(
    svc: Arc<Service>,
    engine: EngineId,
) -> Result<Response, ApiError> {
    blocking(move || {
        let list = svc.checkpoints(engine)?;
        to_json(&dto::CheckpointList {
            checkpoints: list.iter().map(Into::into).collect(),
        })
    })
    .await
    .map(|b| json_response(StatusCode::OK, b))
}

/// The envelope bytes of one of `engine`'s checkpoints, exactly as stored,
/// with `ETag: "<digest>"`.
pub(super) async fn checkpoint_envelope(
    svc: Arc<Service>,
    id: i64,
    engine: EngineId,
) -> Result<Response, ApiError> {
    let download = {
        let svc = svc.clone();
        blocking(move || Ok(svc.checkpoint_download(engine, id)?)).await?
    };
    let (mut r, digest) = match download {
        Download::Bytes(b, digest) => (json_response(StatusCode::OK, b), digest),
        Download::Window(id, digest) => (stream_envelope(svc, id).await?, digest),
    };
    // `ETag: "<digest>"` (a digest is lowercase hex: always a valid value).
    if let Ok(v) = HeaderValue::from_str(&format!("\"{digest}\"")) {
        r.headers_mut().insert(header::ETAG, v);
    }
    Ok(r)
}

/// Bytes per chunk of a streamed envelope.
const CHUNK: usize = 1 << 20;

/// Sends a window checkpoint's envelope as it is assembled (from its live
/// parts and history segments, in one read snapshot) on a blocking thread,
/// a chunk at a time: memory stays at a few chunks whatever the
/// envelope's size. A failure once the answer has started ends the body
/// early (the client sees a short body against the announced length).
async fn stream_envelope(
    svc: std::sync::Arc<crate::service::Service>,
    id: i64,
) -> Result<Response, ApiError> {
    use crate::engine::checkpoint::Out;
    use crate::engine::history::StoreFault;
    type Item = Result<axum::body::Bytes, std::io::Error>;
    let (tx, rx) = tokio::sync::mpsc::channel::<Item>(4);
    let (len_tx, len_rx) = tokio::sync::oneshot::channel::<u64>();
    struct Chunks {
        tx: tokio::sync::mpsc::Sender<Item>,
        buf: Vec<u8>,
    }
    impl Out for Chunks {
        fn put(&mut self, b: &[u8]) -> Result<(), StoreFault> {
            self.buf.extend_from_slice(b);
            if self.buf.len() >= CHUNK {
                let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK + 64));
                self.tx
                    .blocking_send(Ok(chunk.into()))
                    .map_err(|_| StoreFault("the client went away".into()))?;
            }
            Ok(())
        }
    }
    let sending = tokio::task::spawn_blocking(move || {
        let mut out = Chunks {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK + 64),
        };
        let mut len_tx = Some(len_tx);
        let mut start = |bytes: u64| -> Result<(), StoreFault> {
            match len_tx.take() {
                Some(t) => t
                    .send(bytes)
                    .map_err(|_| StoreFault("the request was dropped".into())),
                None => Ok(()),
            }
        };
        let done = svc.send_window_envelope(id, &mut start, &mut out);
        let rest = std::mem::take(&mut out.buf);
        match done {
            Ok(()) => {
                // Err: the client went away; nothing to tell it.
                let _ = tx.blocking_send(Ok(rest.into()));
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, checkpoint = id, "sending a checkpoint failed");
                // Err: the client went away.
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                Err(e)
            }
        }
    });
    let bytes = match len_rx.await {
        Ok(b) => b,
        // It failed before it started: answer with why.
        Err(_) => {
            return match sending.await {
                Ok(Err(e)) => Err(ApiError::from(e)),
                _ => Err(ApiError::new(
                    Code::Unavailable,
                    "the checkpoint could not be read",
                )),
            }
        }
    };
    let body = axum::body::Body::from_stream(tokio_stream_of(rx));
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes));
    Ok(r)
}

/// A stream of a channel's items.
fn tokio_stream_of<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Deletes one of `engine`'s checkpoints: 204 No Content.
pub(super) async fn checkpoint_delete(
    svc: Arc<Service>,
    id: i64,
    engine: EngineId,
) -> Result<Response, ApiError> {
    blocking(move || Ok(svc.delete_checkpoint(engine, id)?)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /checkpoints`.
pub async fn post_checkpoint(Svc(svc): Svc) -> Result<Response, ApiError> {
    create_checkpoint(svc, EngineId::Window).await
}

/// `GET /checkpoints`.
pub async fn list_checkpoints(Svc(svc): Svc) -> Result<Response, ApiError> {
    checkpoint_list(svc, EngineId::Window).await
}

/// `GET /checkpoints/{id}`: the envelope bytes exactly as stored.
pub async fn get_checkpoint(
    CheckpointId(id): CheckpointId,
    Svc(svc): Svc,
) -> Result<Response, ApiError> {
    checkpoint_envelope(svc, id, EngineId::Window).await
}

/// `DELETE /checkpoints/{id}`: 204 No Content.
pub async fn delete_checkpoint(
    CheckpointId(id): CheckpointId,
    Svc(svc): Svc,
) -> Result<Response, ApiError> {
    checkpoint_delete(svc, id, EngineId::Window).await
}

fn restore_answer(o: &crate::service::RestoreAnswer) -> Result<Vec<u8>, ApiError> {
    to_json(&dto::RestoreResponse {
        sequence: o.sequence,
        late: o.late,
        watermark: o.watermark,
    })
}

/// `POST /checkpoints/{id}/restore`.
pub async fn restore_by_id(
    CheckpointId(id): CheckpointId,
    Svc(svc): Svc,
) -> Result<Response, ApiError> {
    blocking(move || restore_answer(&svc.restore(RestoreSource::Id(id))?))
        .await
        .map(|b| json_response(StatusCode::OK, b))
}

/// Bodies of `POST /restore` up to this size (and `--max-body-bytes`) are
/// restored whole in memory; larger ones as they stream.
const RESTORE_IN_MEMORY: usize = 16 << 20;

/// `POST /restore` with the envelope as body: whole in memory when it is
/// small, else read as it streams (staged on disk; see
/// `service::restore_stream`), up to `--max-restore-bytes`.
pub async fn restore_body(
    State(st): State<AppState>,
    Svc(svc): Svc,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    use futures_util::StreamExt as _;
    let in_memory = st.max_body_bytes.min(RESTORE_IN_MEMORY);
    let limit = match st.max_restore_bytes {
        0 => st.max_body_bytes as u64,
        n => n,
    };
    let too_large = move || {
        ApiError::new(
            Code::PayloadTooLarge,
            format!(
                "the checkpoint is larger than the limit of {limit} bytes; start the service \
                 with a larger --max-restore-bytes (STREAMFORGE_MAX_RESTORE_BYTES): envelopes \
                 beyond 16 MiB are restored as they stream, with memory bounded"
            ),
        )
    };
    let unreadable =
        |e: axum::Error| ApiError::bad_request(format!("cannot read the request body: {e}"));
    let mut chunks = body.into_data_stream();
    let mut head: Vec<u8> = Vec::new();
    let mut ended = false;
    let in_memory = in_memory.min(usize::try_from(limit).unwrap_or(usize::MAX));
    while head.len() <= in_memory {
        match chunks.next().await {
            Some(chunk) => head.extend_from_slice(&chunk.map_err(unreadable)?),
            None => {
                ended = true;
                break;
            }
        }
    }
    if ended {
        return blocking(move || restore_answer(&svc.restore(RestoreSource::Bytes(head))?))
            .await
            .map(|b| json_response(StatusCode::OK, b));
    }
    if head.len() as u64 > limit {
        return Err(too_large());
    }
    // The rest goes to the restore through a small channel as it is read
    // (backpressure: the client is read as fast as the restore stages).
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, String>>(8);
    let mut total = head.len() as u64;
    let pump = tokio::spawn(async move {
        while let Some(chunk) = chunks.next().await {
            let item = match chunk {
                Ok(c) => {
                    total += c.len() as u64;
                    if total > limit {
                        Err(format!("larger than the restore limit of {limit} bytes"))
                    } else {
                        Ok(c)
                    }
                }
                Err(e) => Err(format!("cannot read the request body: {e}")),
            };
            let stop = item.is_err();
            if tx.send(item).await.is_err() || stop {
                return total > limit;
            }
        }
        false
    });
    let reader = std::io::Cursor::new(head).chain(ChannelReader {
        rx,
        chunk: Bytes::new(),
    });
    let restored = blocking(move || Ok(svc.restore_stream(reader))).await?;
    // The pump ends once the body is read (or the restore stopped early).
    let over = pump.await.unwrap_or(false);
    match restored {
        Ok(o) => restore_answer(&o).map(|b| json_response(StatusCode::OK, b)),
        Err(_) if over => Err(too_large()),
        Err(e) => Err(ApiError::from(e)),
    }
}

/// A blocking reader of a body's chunks, sent by an async task.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, String>>,
    chunk: Bytes,
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(c)) => self.chunk = c,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        Ok(n)
    }
}

/// `GET /metrics` (Prometheus text format).
pub async fn get_metrics(State(st): State<AppState>) -> Response {
    let sinks = st.sinks.get().cloned();
    let text = match st.service.get().cloned() {
        Some(svc) => {
            let rendered = blocking(move || {
                let mut t = svc.metrics_text();
                if let Some(s) = sinks {
                    t.push_str(&s.metrics_text());
                }
                Ok(t)
            })
            .await;
            match rendered {
                Ok(t) => t,
                // A panic while rendering: a 503 problem, never an empty page.
                Err(e) => return e.into_response(),
            }
        }
        None => st.metrics.render(&[]),
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// `GET /openapi.yaml`.
pub async fn get_openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML).into_response()
}

/// `GET /healthz`: the process serves requests.
pub async fn healthz() -> Response {
    json_response(StatusCode::OK, br#"{"status":"ok"}"#.to_vec())
}

/// `GET /readyz`: recovery finished and the store is writable.
pub async fn readyz(Svc(svc): Svc) -> Result<Response, ApiError> {
    if svc.is_ready() {
        Ok(json_response(
            StatusCode::OK,
            br#"{"status":"ok"}"#.to_vec(),
        ))
    } else {
        Err(ApiError::new(
            Code::Unavailable,
            "storage failed and the state could not be rebuilt yet",
        ))
    }
}

/// Unknown route.
pub async fn not_found() -> ApiError {
    ApiError::new(Code::NotFound, "no such route")
}

/// A path that exists, with a method it does not take. docs/api.md names routes
/// by method and path ("POST /events") and its error table has no 405, so
/// this is an unknown route: 404 `not_found`.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(Code::NotFound, "no route for this method on this path")
}
