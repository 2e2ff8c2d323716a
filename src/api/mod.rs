//! The HTTP API of docs/api.md: routing, auth, CORS, limits, and the mapping of
//! service's answers to JSON bodies and problem+json errors.
//!
//! - [`routes`]: the handlers; each parses its request, then runs the service
//!   call inside `spawn_blocking` (the service takes a std mutex and may wait
//!   for an fsync).
//! - [`ingest`]: the handlers of the write path (events, watermarks, idle).
//! - `stream`: `GET /changes/stream` and `GET /patterns/output/stream`
//!   (server-sent events).
//! - [`patterns`]: the pattern engine's routes (`/patterns/...`).
//! - [`sinks`]: the webhook sinks' routes (`/sinks...`, docs/sinks.md).
//! - `dashboard`: `GET /`, the live dashboard page (public; the data it
//!   reads is not).
//! - [`extract`]: body and query parsing (deliveries, NDJSON, pages).
//! - `filter`: the `pattern=` / `key=` filters of the pattern output.
//! - [`dto`]: response bodies in docs/api.md field order.
//! - [`error`]: [`ApiError`] and the status ↔ `code` table.
//!
//! This module never touches SQLite or engine internals: it calls the
//! service and converts the engine's types.

mod dashboard;
pub mod dto;
pub mod error;
pub mod extract;
mod filter;
pub mod inbound;
pub mod ingest;
pub mod patterns;
pub mod routes;
pub mod sinks;
mod stream;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::service::{Metrics, Service};
use crate::sinks::Sinks;
pub use error::{ApiError, Code};

/// What every handler can reach: one `Arc`, so that the extractors and
/// middleware that take it per request clone one pointer.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The fields of [`AppState`].
pub struct Shared {
    /// The service, set once recovery has finished.
    pub service: Arc<OnceLock<Arc<Service>>>,
    /// The webhook sinks, set with the service.
    pub sinks: Arc<OnceLock<Arc<Sinks>>>,
    /// With `--kafka`: where `POST /events` writes (set once consuming).
    pub producer: Arc<OnceLock<Arc<crate::kafka::Producer>>>,
    /// Request metrics (available before the service is).
    pub metrics: Arc<Metrics>,
    /// Required bearer token, if any.
    pub token: Option<Arc<str>>,
    /// The body limit (named in 413 answers).
    pub max_body_bytes: usize,
    /// The limit of a restored envelope's body.
    pub max_restore_bytes: u64,
    /// The inbound webhook sources (docs/webhooks.md).
    pub inbound: Arc<inbound::InboundState>,
    /// The ingest thread of small `POST /events` calls (started with the
    /// first one; None if it could not start).
    pub ingest: Arc<OnceLock<Option<crate::service::ingest_thread::IngestQueue>>>,
}

impl AppState {
    /// The ingest thread's queue (started on first use).
    pub fn ingest_queue(
        &self,
        svc: &Arc<Service>,
    ) -> Option<&crate::service::ingest_thread::IngestQueue> {
        self.ingest
            .get_or_init(|| match svc.start_ingest_thread() {
                Ok(q) => Some(q),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the ingest thread: every call takes the blocking pool");
                    None
                }
            })
            .as_ref()
    }

    /// The service, or 503 while recovery is still running.
    pub fn service(&self) -> Result<Arc<Service>, ApiError> {
        self.service
            .get()
            .cloned()
            .ok_or_else(|| ApiError::new(Code::Unavailable, "the service is recovering"))
    }
}

/// Router settings.
#[derive(Debug, Clone, Default)]
pub struct ApiConfig {
    /// Required bearer token.
    pub token: Option<String>,
    /// Allowed CORS origins (`*` for any).
    pub cors_origins: Vec<String>,
    /// Largest accepted body.
    pub max_body_bytes: usize,
    /// The limit of `POST /restore` bodies (streamed beyond
    /// `max_body_bytes`).
    pub max_restore_bytes: u64,
    /// The inbound webhook sources and watermark strategies of the
    /// pipeline file.
    pub inbound: Arc<crate::inbound::Inbound>,
    /// Rejected webhook payloads kept per source.
    pub keep_rejected: u64,
}

/// Every route the router serves, as `(method, path template)`; the openapi
/// test checks each is documented and served, and another that each
/// `.route(..)` of [`router`] is here (tests/it/api_contract.rs).
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/events"),
    ("post", "/watermarks"),
    ("post", "/watermarks/batch"),
    ("post", "/batch"),
    ("post", "/partitions/{partition}/idle"),
    ("get", "/changes"),
    ("get", "/changes/stream"),
    ("get", "/late"),
    ("get", "/results"),
    ("get", "/status"),
    ("get", "/pipeline"),
    ("post", "/checkpoints"),
    ("get", "/checkpoints"),
    ("get", "/checkpoints/{id}"),
    ("delete", "/checkpoints/{id}"),
    ("post", "/checkpoints/{id}/restore"),
    ("post", "/restore"),
    ("post", "/patterns/events"),
    ("post", "/patterns/advance"),
    ("post", "/patterns/finish"),
    ("get", "/patterns"),
    ("put", "/patterns"),
    ("get", "/patterns/output"),
    ("get", "/patterns/output/stream"),
    ("get", "/patterns/status"),
    ("post", "/patterns/checkpoints"),
    ("get", "/patterns/checkpoints"),
    ("get", "/patterns/checkpoints/{id}"),
    ("delete", "/patterns/checkpoints/{id}"),
    ("post", "/patterns/checkpoints/{id}/restore"),
    ("post", "/patterns/restore"),
    ("post", "/ingest/{source}"),
    ("get", "/ingest/{source}/rejected"),
    ("post", "/sinks"),
    ("get", "/sinks"),
    ("get", "/sinks/{name}"),
    ("delete", "/sinks/{name}"),
    ("get", "/metrics"),
    ("get", "/openapi.yaml"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/"),
];

/// Builds the application.
pub fn router(
    service: Arc<OnceLock<Arc<Service>>>,
    sinks: Arc<OnceLock<Arc<Sinks>>>,
    producer: Arc<OnceLock<Arc<crate::kafka::Producer>>>,
    metrics: Arc<Metrics>,
    cfg: &ApiConfig,
) -> Router {
    let state = AppState(Arc::new(Shared {
        service: service.clone(),
        sinks,
        producer,
        metrics,
        token: cfg
            .token
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(Arc::from),
        max_body_bytes: cfg.max_body_bytes,
        max_restore_bytes: cfg.max_restore_bytes,
        inbound: Arc::new(inbound::InboundState::new(
            cfg.inbound.clone(),
            cfg.keep_rejected,
            service.clone(),
        )),
        ingest: Arc::new(OnceLock::new()),
    }));
    if !cfg.inbound.sources.is_empty() {
        let st = state.inbound.clone();
        state.metrics.add_section(Arc::new(move || st.render()));
    }
    let app = Router::new()
        .route("/events", post(ingest::post_events))
        .route("/watermarks", post(ingest::post_watermarks))
        .route("/watermarks/batch", post(ingest::post_watermarks_batch))
        .route("/batch", post(ingest::post_batch))
        .route("/partitions/{partition}/idle", post(ingest::post_idle))
        .route("/changes", get(routes::get_changes))
        .route("/changes/stream", get(stream::get_stream))
        .route("/late", get(routes::get_late))
        .route("/results", get(routes::get_results))
        .route("/status", get(routes::get_status))
        .route("/pipeline", get(routes::get_pipeline))
        .route(
            "/checkpoints",
            post(routes::post_checkpoint).get(routes::list_checkpoints),
        )
        .route(
            "/checkpoints/{id}",
            get(routes::get_checkpoint).delete(routes::delete_checkpoint),
        )
        .route("/checkpoints/{id}/restore", post(routes::restore_by_id))
        .route("/restore", post(routes::restore_body))
        .route(
            "/patterns",
            get(patterns::get_document).put(patterns::put_document),
        )
        .route("/patterns/events", post(patterns::post_events))
        .route("/patterns/advance", post(patterns::post_advance))
        .route("/patterns/finish", post(patterns::post_finish))
        .route("/patterns/output", get(patterns::get_output))
        .route("/patterns/output/stream", get(stream::get_pattern_stream))
        .route("/patterns/status", get(patterns::get_status))
        .route(
            "/patterns/checkpoints",
            post(patterns::post_checkpoint).get(patterns::list_checkpoints),
        )
        .route(
            "/patterns/checkpoints/{id}",
            get(patterns::get_checkpoint).delete(patterns::delete_checkpoint),
        )
        .route(
            "/patterns/checkpoints/{id}/restore",
            post(patterns::restore_by_id),
        )
        .route("/patterns/restore", post(patterns::restore_body))
        .route("/ingest/{source}", post(inbound::post_ingest))
        .route("/ingest/{source}/rejected", get(inbound::get_rejected))
        .route("/sinks", post(sinks::post_sink).get(sinks::list_sinks))
        .route(
            "/sinks/{name}",
            get(sinks::get_sink).delete(sinks::delete_sink),
        )
        .route("/metrics", get(routes::get_metrics))
        .route("/openapi.yaml", get(routes::get_openapi))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/", get(dashboard::get_dashboard))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(cfg.max_body_bytes));
    // Without a token every request passes: no layer to pass through
    // (a middleware costs every request a boxed future and a clone).
    let app = match state.token {
        Some(_) => app.layer(middleware::from_fn_with_state(state.clone(), auth)),
        None => app,
    }
    .with_state(state.clone());
    let app = match cors(&cfg.cors_origins) {
        Some(c) => app.layer(c),
        None => app,
    };
    app.layer(middleware::from_fn_with_state(state, observe))
}

/// Checks a `--cors-origin` value: `*`, or an origin that can be sent as
/// a header value (a trailing `/` is ignored).
pub fn cors_origin(o: &str) -> Result<(), String> {
    if o == "*" {
        return Ok(());
    }
    HeaderValue::from_str(o.trim_end_matches('/'))
        .map(drop)
        .map_err(|e| format!("--cors-origin {o:?} is not a usable origin: {e}"))
}

fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        // Checked at start (`cors_origin`): every origin is a header value.
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::DELETE,
                Method::OPTIONS,
            ])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::HeaderName::from_static("last-event-id"),
                header::HeaderName::from_static("prefer"),
                header::HeaderName::from_static("idempotency-key"),
            ])
            .max_age(std::time::Duration::from_secs(600)),
    )
}

/// Routes open without a token (`/` is the dashboard page, which asks for
/// the token itself).
fn is_public(path: &str) -> bool {
    matches!(path, "/" | "/healthz" | "/readyz" | "/openapi.yaml")
}

/// Constant-time comparison of the presented token.
fn token_matches(given: &[u8], want: &[u8]) -> bool {
    given.len() == want.len()
        && given
            .iter()
            .zip(want)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(token) = st.token.as_deref() else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    if is_public(path) {
        return next.run(req).await;
    }
    // A signed webhook source's signature is its authentication (checked
    // by its handler): producers cannot send a bearer token.
    if req.method() == Method::POST && st.inbound.signed(path) {
        return next.run(req).await;
    }
    let header_ok = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer(v.as_bytes()))
        .is_some_and(|t| token_matches(t, token.as_bytes()));
    let query_ok = matches!(path, "/changes/stream" | "/patterns/output/stream")
        && req.uri().query().is_some_and(|q| {
            q.split('&').any(|kv| {
                kv.strip_prefix("access_token=")
                    .is_some_and(|t| token_matches(&percent_decode(t), token.as_bytes()))
            })
        });
    if header_ok || query_ok {
        next.run(req).await
    } else {
        ApiError::new(Code::Unauthorized, "a valid bearer token is required").into_response()
    }
}

/// The credentials of an `Authorization: Bearer <token>` header. The scheme
/// is case-insensitive (RFC 9110 section 11.1), spaces around the token are
/// not part of it.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    let creds = rest.strip_prefix(b" ")?;
    scheme
        .eq_ignore_ascii_case(b"bearer")
        .then(|| creds.trim_ascii())
}

/// Decodes `%XX` and `+` in a query value.
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                // Not `%XX` hex: the `%` is kept as it is (as browsers do).
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

// Request latency for /metrics and the access log: the api's one monotonic
// clock read.
#[allow(clippy::disallowed_methods)]
async fn observe(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().cloned();
    // The path only: a query may carry `access_token`, and bodies are data.
    // Copied only when the access log is on.
    let log = tracing::enabled!(target: "streamforge::access", tracing::Level::INFO);
    let seen = log.then(|| (req.method().clone(), req.uri().path().to_string()));
    let started = Instant::now();
    let resp = next.run(req).await;
    let seconds = started.elapsed().as_secs_f64();
    let status = resp.status().as_u16();
    st.metrics.observe_request(
        route.as_ref().map_or("unmatched", MatchedPath::as_str),
        status,
        seconds,
    );
    if let Some((method, path)) = seen {
        let ms = (seconds * 1000.0 * 1000.0).round() / 1000.0;
        // The same line, formatted directly (`logs::access_line`) when the
        // log takes it so.
        if !crate::logs::access_line(method.as_str(), &path, status, ms) {
            tracing::info!(
                target: "streamforge::access",
                %method,
                path = %path,
                status,
                ms,
                "request"
            );
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt as _;

    /// Answers `req` with a router whose service is still recovering.
    async fn while_recovering(req: Request<Body>) -> (u16, String) {
        let cfg = ApiConfig {
            max_body_bytes: 64,
            ..ApiConfig::default()
        };
        let app = router(
            Arc::new(OnceLock::new()),
            Arc::new(OnceLock::new()),
            Arc::new(OnceLock::new()),
            Arc::new(Metrics::default()),
            &cfg,
        );
        let res = app.oneshot(req).await.unwrap();
        let status = res.status().as_u16();
        let body = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn get(uri: &str) -> Request<Body> {
        Request::get(uri).body(Body::empty()).unwrap()
    }

    /// The extractors that validate a request run before the one that asks
    /// for the service: a bad request is answered as such (400/404/413/422)
    /// while the service recovers, and a good one is 503.
    #[tokio::test]
    async fn a_bad_request_is_refused_as_such_while_the_service_recovers() {
        let long = "x".repeat(65);
        for (req, want, code) in [
            (get("/changes?limit=0"), 422, "invalid_request"),
            (get("/late?after=x"), 400, "bad_request"),
            (
                get("/patterns/output?wait_ms=30001"),
                422,
                "invalid_request",
            ),
            (get("/results?key=a&key=b"), 400, "bad_request"),
            (get("/checkpoints/abc"), 404, "not_found"),
            (get("/patterns/checkpoints/1x"), 404, "not_found"),
            (
                Request::get("/changes/stream")
                    .header("last-event-id", "-1")
                    .body(Body::empty())
                    .unwrap(),
                400,
                "bad_request",
            ),
            (
                Request::post("/events")
                    .body(Body::from(long.clone()))
                    .unwrap(),
                413,
                "payload_too_large",
            ),
            (
                Request::post("/patterns/restore")
                    .body(Body::from(long))
                    .unwrap(),
                413,
                "payload_too_large",
            ),
            (get("/changes"), 503, "unavailable"),
            (get("/results"), 503, "unavailable"),
            (get("/checkpoints/7"), 503, "unavailable"),
            (get("/changes/stream"), 503, "unavailable"),
            (get("/sinks"), 503, "unavailable"),
            (
                Request::post("/partitions/p0/idle")
                    .body(Body::empty())
                    .unwrap(),
                503,
                "unavailable",
            ),
        ] {
            let uri = req.uri().to_string();
            let (status, body) = while_recovering(req).await;
            assert_eq!(status, want, "{uri}: {body}");
            assert!(
                body.contains(&format!("\"code\":\"{code}\"")),
                "{uri}: {body}"
            );
        }
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for h in ["Bearer t", "bearer t", "BEARER t", "bEaReR  t "] {
            assert_eq!(bearer(h.as_bytes()), Some(&b"t"[..]), "{h}");
        }
        for h in ["Bearer", "Bearert", "Basic t", "Bearer\tt", ""] {
            assert_eq!(bearer(h.as_bytes()), None, "{h}");
        }
    }
}
