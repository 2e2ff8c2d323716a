//! The inbound webhook sources (docs/webhooks.md): `POST /ingest/{source}`
//! takes a producer's payload as it is, and `GET /ingest/{source}/rejected`
//! pages through the payloads a source refused.
//!
//! A request is checked in this order: the source exists (404), the body
//! is within `--max-body-bytes` (413), the signature (401, nothing kept:
//! anybody can send an unsigned request), the content type (415), the
//! mapping (400 for a body that is not JSON, 422 for an item that does not
//! fit). A refusal after the signature is kept on the rejected page with
//! the request's headers (less secrets) and its reason. A mapped request
//! goes down the one write path as the equivalent `POST /events` (append
//! mode) or `POST /patterns/events` call: a 2xx means it is durable.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use serde::Serialize;

use super::error::{ApiError, Code};
use super::extract::{essence, is_ndjson, QueryParams};
use super::routes::{blocking, json_response, to_json};
use super::AppState;
use crate::engine::{DeliveryRef, EventRef};
use crate::inbound::mapping::{self, Events, MapError};
use crate::inbound::signature::Failure;
use crate::inbound::{Inbound, Source, Target};
use crate::service::ingest_thread::{Called, IngestError};
use crate::service::parse::{self, Framing};
use crate::service::{IngestAnswer, Keyed, KeyedRequest, Prefer, Service, ServiceError};
use crate::store::RejectedStore;
use std::borrow::Cow;

/// What the inbound routes share.
pub struct InboundState {
    /// The sources and strategies of the pipeline file.
    pub config: Arc<Inbound>,
    /// Rejected records kept per source.
    pub keep_rejected: u64,
    /// The rejected pages (opened on first use, once the service is).
    rejected: OnceLock<Arc<RejectedStore>>,
    /// Each source's counters.
    counts: BTreeMap<String, Counters>,
    /// The service, once recovered (the rejected pages' database).
    service: Arc<OnceLock<Arc<Service>>>,
}

/// The labels of [`EVENTS`] and [`SIGNATURES`], by counter index.
const STATUSES: [&str; 4] = ["new", "duplicate", "late", "filtered"];
const REASONS: [&str; 4] = ["missing", "malformed", "mismatch", "stale"];

/// One source's counters (no allocation or lock on the accepted path).
#[derive(Default)]
struct Counters {
    events: [AtomicU64; 4],
    signatures: [AtomicU64; 4],
    /// By problem code (refusals are rare).
    rejected: Mutex<BTreeMap<&'static str, u64>>,
}

impl std::fmt::Debug for InboundState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundState")
            .field("sources", &self.config.sources.keys().collect::<Vec<_>>())
            .finish()
    }
}

const EVENTS: &str = "streamforge_ingest_events_total";
const REJECTED: &str = "streamforge_ingest_rejected_total";
const SIGNATURES: &str = "streamforge_ingest_signature_failures_total";

impl InboundState {
    /// The state of the sources of `config`.
    pub fn new(
        config: Arc<Inbound>,
        keep_rejected: u64,
        service: Arc<OnceLock<Arc<Service>>>,
    ) -> InboundState {
        InboundState {
            counts: config
                .sources
                .keys()
                .map(|name| (name.clone(), Counters::default()))
                .collect(),
            config,
            keep_rejected: keep_rejected.max(1),
            rejected: OnceLock::new(),
            service,
        }
    }

    /// Whether `POST path` goes to a signed source: its signature is its
    /// authentication, so it does not need the bearer token.
    pub fn signed(&self, path: &str) -> bool {
        path.strip_prefix("/ingest/")
            .and_then(|name| self.config.sources.get(name))
            .is_some_and(|s| s.signature.is_some())
    }

    fn count(&self, metric: &'static str, source: &str, label: &'static str, by: u64) {
        let Some(c) = self.counts.get(source) else {
            return;
        };
        if by == 0 {
            return;
        }
        let slot = |labels: &[&str; 4], counters: &[AtomicU64; 4]| {
            if let Some(i) = labels.iter().position(|l| *l == label) {
                counters[i].fetch_add(by, Ordering::Relaxed);
            }
        };
        match metric {
            EVENTS => slot(&STATUSES, &c.events),
            SIGNATURES => slot(&REASONS, &c.signatures),
            _ => {
                *c.rejected
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(label)
                    .or_default() += by
            }
        }
    }

    fn store(&self, svc: &Service) -> Result<Arc<RejectedStore>, ApiError> {
        if let Some(s) = self.rejected.get() {
            return Ok(s.clone());
        }
        let s = RejectedStore::open(svc.db_path()).map_err(|e| {
            ApiError::new(
                Code::Unavailable,
                format!("cannot open the rejected pages: {e}"),
            )
        })?;
        Ok(self.rejected.get_or_init(|| Arc::new(s)).clone())
    }

    /// The `/metrics` lines of the sources (nothing without sources).
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        if self.config.sources.is_empty() {
            return String::new();
        }
        let mut out = String::new();
        for (metric, label, help) in [
            (EVENTS, "status", "Webhook items by what became of them (new, duplicate, late, filtered)."),
            (REJECTED, "code", "Webhook requests refused after their signature check, kept on the rejected page, by problem code."),
            (SIGNATURES, "reason", "Webhook requests refused for their signature (missing, malformed, mismatch, stale)."),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
            for (source, c) in &self.counts {
                let mut lines: Vec<(&str, u64)> = match metric {
                    EVENTS => STATUSES
                        .iter()
                        .zip(&c.events)
                        .map(|(l, n)| (*l, n.load(Ordering::Relaxed)))
                        .collect(),
                    SIGNATURES => REASONS
                        .iter()
                        .zip(&c.signatures)
                        .map(|(l, n)| (*l, n.load(Ordering::Relaxed)))
                        .collect(),
                    _ => c
                        .rejected
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .map(|(l, n)| (*l, *n))
                        .collect(),
                };
                lines.sort();
                for (l, n) in lines.into_iter().filter(|(_, n)| *n > 0) {
                    let _ = writeln!(out, "{metric}{{source=\"{source}\",{label}=\"{l}\"}} {n}");
                }
            }
        }
        if self.rejected.get().is_none() {
            // Opened here too, so that the dropped counts are there from
            // the start (they are durable).
            if let Some(svc) = self.service.get() {
                let _ = self.store(svc);
            }
        }
        if let Some(store) = self.rejected.get() {
            let name = "streamforge_ingest_rejected_dropped_total";
            let _ = writeln!(
                out,
                "# HELP {name} Rejected records dropped from a source's page by --keep-rejected.\n# TYPE {name} counter"
            );
            for (source, n) in store.dropped().unwrap_or_default() {
                let _ = writeln!(out, "{name}{{source=\"{source}\"}} {n}");
            }
        }
        out
    }
}

/// The current Unix time in seconds (signature timestamps).
#[allow(clippy::disallowed_methods)] // the signature schemes' tolerance is wall clock
fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A refused request as the rejected page keeps it.
#[derive(Serialize)]
struct RejectedRecord<'a> {
    received_at: String,
    code: &'static str,
    detail: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<usize>,
    headers: BTreeMap<String, String>,
    body: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
    body_bytes: usize,
}

/// Headers that carry credentials or signatures, never kept (the ids and
/// timestamps of the signature schemes are kept: a re-send needs them).
fn secret_header(name: &str, source: &Source) -> bool {
    matches!(
        name,
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    ) || name.contains("signature")
        || source.signature.as_ref().is_some_and(|s| match &s.scheme {
            crate::inbound::signature::Scheme::Hmac(h) => h.header.eq_ignore_ascii_case(name),
            _ => false,
        })
}

/// Keeps a refused request on its source's page and counts it; returns the
/// error to answer (503 if it could not be kept: the producer retries).
fn reject(
    st: &InboundState,
    svc: &Service,
    source: &Source,
    headers: &HeaderMap,
    (body, body_bytes): (Option<&[u8]>, usize),
    err: ApiError,
    at: Option<&str>,
) -> ApiError {
    let mut kept = BTreeMap::new();
    for (name, value) in headers {
        if secret_header(name.as_str(), source) {
            continue;
        }
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        kept.entry(name.as_str().to_string())
            .and_modify(|e: &mut String| {
                e.push_str(", ");
                e.push_str(&v);
            })
            .or_insert(v);
    }
    let text = body.map(std::str::from_utf8);
    let record = RejectedRecord {
        received_at: crate::store::created_at_now(),
        code: err.code.as_str(),
        detail: &err.detail,
        at,
        index: err.index,
        headers: kept,
        body: text.and_then(Result::ok),
        body_base64: match (body, text) {
            (Some(b), Some(Err(_))) => {
                use base64::Engine as _;
                Some(base64::engine::general_purpose::STANDARD.encode(b))
            }
            _ => None,
        },
        body_bytes,
    };
    st.count(REJECTED, &source.name, err.code.as_str(), 1);
    let stored = serde_json::to_string(&record)
        .map_err(|e| e.to_string())
        .and_then(|json| {
            st.store(svc)
                .map_err(|e| e.detail)?
                .add(&source.name, &json, st.keep_rejected)
                .map_err(|e| e.to_string())
        });
    match stored {
        Ok(_) => err,
        Err(e) => ApiError::new(
            Code::Unavailable,
            format!(
                "{} (and it could not be kept on the rejected page: {e})",
                err.detail
            ),
        ),
    }
}

fn signature_error(f: &Failure, source: &Source) -> ApiError {
    let code = match f {
        Failure::Missing => Code::SignatureMissing,
        Failure::Malformed => Code::SignatureMalformed,
        Failure::Stale { .. } => Code::SignatureStale,
        Failure::Mismatch => Code::SignatureMismatch,
    };
    let scheme = source
        .signature
        .as_ref()
        .map(|s| &s.scheme)
        .expect("only signed sources are checked");
    ApiError::new(
        code,
        format!(
            "source {:?}: {}; nothing was applied",
            source.name,
            f.detail(scheme)
        ),
    )
}

/// The framing a `Content-Type` names: NDJSON's, or JSON's (also when
/// absent); None for any other type.
fn framing(headers: &HeaderMap) -> Option<Framing> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Some(Framing::Json);
    };
    let ct = ct.to_str().ok()?;
    if is_ndjson(Some(ct)) {
        return Some(Framing::Ndjson);
    }
    let essence = essence(ct);
    (essence == "application/json" || essence.ends_with("+json")).then_some(Framing::Json)
}

/// `POST /ingest/{source}`.
pub async fn post_ingest(
    State(st): State<AppState>,
    Path(name): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let inbound = st.inbound.clone();
    let Some(source) = inbound.config.sources.get(&name) else {
        return Err(ApiError::new(
            Code::NotFound,
            format!(
                "no source {name:?}{}",
                if inbound.config.sources.is_empty() {
                    " (the pipeline declares no \"sources\": see docs/webhooks.md)".to_string()
                } else {
                    format!(
                        " (the pipeline's sources: {})",
                        crate::inbound::config::list(
                            &inbound.config.sources.keys().cloned().collect::<Vec<_>>()
                        )
                    )
                }
            ),
        ));
    };
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let body = match axum::body::to_bytes(body, st.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => {
            let svc = st.service()?;
            let limit = st.max_body_bytes;
            if source.signature.is_some() {
                // Its signature cannot be checked without the body: an
                // unauthenticated request is not kept (anybody could fill
                // the page), only counted.
                inbound.count(REJECTED, &name, Code::PayloadTooLarge.as_str(), 1);
                return Err(ApiError::new(
                    Code::PayloadTooLarge,
                    format!(
                        "the request body is larger than the limit of {limit} bytes (start the \
                         service with a larger --max-body-bytes); nothing was applied"
                    ),
                ));
            }
            let err = ApiError::new(
                Code::PayloadTooLarge,
                format!(
                    "the request body is larger than the limit of {limit} bytes (start the \
                     service with a larger --max-body-bytes); the request is on the rejected page \
                     without its body"
                ),
            );
            let len = headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(0);
            return blocking(move || {
                let source = &inbound.config.sources[&name];
                Err(reject(
                    &inbound,
                    &svc,
                    source,
                    &headers,
                    (None, len),
                    err,
                    None,
                ))
            })
            .await;
        }
    };
    if let Some(sig) = &source.signature {
        if let Some(v) = &sig.verifier {
            if let Err(f) = v.verify(&headers, &body, now_s()) {
                inbound.count(SIGNATURES, &name, f.reason(), 1);
                return Err(signature_error(&f, source));
            }
        }
    }
    let svc = st.service()?;
    if let Some(r) = fast(&st, &svc, source, &headers, &body).await {
        return r;
    }
    blocking(move || {
        let source = &inbound.config.sources[&name];
        ingest(&inbound, &svc, source, &headers, &body)
    })
    .await
}

/// The common case without a blocking-pool thread: a small payload of a
/// window source that maps is handed to the ingest thread as its `POST
/// /events` call. None when the request needs the full path (a refusal to
/// keep on the rejected page, a pattern source, a large body).
async fn fast(
    st: &AppState,
    svc: &Arc<Service>,
    source: &Source,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<Result<Response, ApiError>> {
    let Target::Window { partition, .. } = &source.target else {
        return None;
    };
    if body.len() > FAST_BODY {
        return None;
    }
    let mapped = mapping::map(source, headers, body, framing(headers)?).ok()?;
    let queue = st.ingest_queue(svc)?;
    let inbound = &st.inbound;
    let Events::Window(events) = &mapped.events else {
        return None;
    };
    let mut a = Accepted::of(source, &mapped);
    if events.is_empty() {
        inbound.count(EVENTS, &source.name, "filtered", mapped.filtered as u64);
        return Some(to_json(&a).map(|b| json_response(StatusCode::OK, b)));
    }
    let body = Box::new(mapping::deliveries_body(partition, events));
    let lone = crate::serve::open_connections() <= 1;
    let out = match queue
        .call(svc, body, Framing::Json, Prefer::Minimal, lone)
        .await
    {
        Called::Answered(Ok(out)) => out,
        // An identity conflict: the full path keeps it on the rejected
        // page (nothing was applied).
        Called::Answered(Err(IngestError::Service {
            error: ServiceError::BatchRejected(_),
            ..
        })) => return None,
        Called::Answered(Err(IngestError::Service { error, batch })) => {
            return Some(Err(ApiError::from_service(error, batch)))
        }
        Called::NotTaken => return None,
        Called::Answered(Err(IngestError::Parse(_))) | Called::Lost => {
            return Some(Err(ApiError::new(
                Code::Unavailable,
                "internal failure; nothing was applied",
            )))
        }
    };
    inbound.count(EVENTS, &source.name, "filtered", mapped.filtered as u64);
    window_counts(&mut a, events.len() as u64, &out, partition);
    Some(answered(inbound, source, a, !mapped.batch, &events[0].id))
}

/// Payloads up to this size take the ingest thread.
const FAST_BODY: usize = 16 * 1024;

/// The answer of an accepted request.
#[derive(Serialize)]
struct Accepted<'a> {
    source: &'a str,
    /// `new`, `duplicate`, `late` or `filtered` (one item); `accepted` (a batch).
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    items: usize,
    new: u64,
    duplicates: u64,
    late: u64,
    filtered: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    watermark: Option<Option<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ordinals: Option<[u64; 2]>,
}

// Over 120 lines: one arm per target engine, each mapping, applying and answering.
fn ingest(
    st: &InboundState,
    svc: &Service,
    source: &Source,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let keep = |err: ApiError, at: Option<&str>| {
        reject(st, svc, source, headers, (Some(body), body.len()), err, at)
    };
    let Some(framing) = framing(headers) else {
        let ct = String::from_utf8_lossy(
            headers
                .get(header::CONTENT_TYPE)
                .map_or(&b""[..], |v| v.as_bytes()),
        )
        .into_owned();
        return Err(keep(
            ApiError::new(
                Code::UnsupportedMediaType,
                format!(
                    "Content-Type {ct:?} is neither JSON (application/json) nor NDJSON \
                     (application/x-ndjson)"
                ),
            ),
            None,
        ));
    };
    let mapped = match mapping::map(source, headers, body, framing) {
        Ok(m) => m,
        Err(e) => {
            let err = map_error(source, &e);
            return Err(keep(err, Some(&e.at)));
        }
    };
    st.count(EVENTS, &source.name, "filtered", mapped.filtered as u64);
    let single = !mapped.batch;
    let mut a = Accepted::of(source, &mapped);
    if mapped.events.is_empty() {
        return to_json(&a).map(|b| json_response(StatusCode::OK, b));
    }
    let n = mapped.events.len() as u64;
    let first_id;
    match (&source.target, &mapped.events) {
        (Target::Window { partition, .. }, Events::Window(events)) => {
            let items: Vec<DeliveryRef<'_>> = events
                .iter()
                .map(|e| DeliveryRef {
                    partition: Cow::Borrowed(partition.as_str()),
                    offset: None,
                    event: EventRef {
                        id: Cow::Borrowed(e.id.as_str()),
                        key: Cow::Borrowed(e.key.as_str()),
                        timestamp: e.timestamp,
                        value: e.value,
                    },
                })
                .collect();
            let out = match svc.ingest(items, Prefer::Minimal) {
                Ok(out) => out,
                Err(ServiceError::BatchRejected(r)) => {
                    // Append mode, a partition of the pipeline: only the
                    // identity can be refused.
                    let err = ApiError::new(
                        Code::MappingFailed,
                        format!(
                            "{}: two different payloads were mapped to the same event id; \
                             check the source's \"id\" (nothing was applied)",
                            r.rejection
                        ),
                    )
                    .at(mapped.batch.then_some(r.index));
                    return Err(keep(err, None));
                }
                Err(e) => return Err(ApiError::from_service(e, mapped.batch)),
            };
            window_counts(&mut a, n, &out, partition);
            first_id = events[0].id.clone();
        }
        (Target::Patterns { .. }, Events::Patterns(events)) => {
            let raw = mapping::pattern_events_body(events);
            let batch = parse::pattern_events(&raw, Framing::Json).map_err(|e| {
                ApiError::new(Code::Unavailable, format!("internal mapping error: {e}"))
            })?;
            if let Some((index, why)) = &batch.malformed {
                let err = ApiError::new(Code::MappingFailed, format!("not a pattern event: {why}"))
                    .at(index.filter(|_| mapped.batch));
                return Err(keep(err, None));
            }
            // The producer's delivery ids make the call's Idempotency-Key:
            // a redelivered webhook is answered, not pushed again.
            let key = {
                use sha2::{Digest, Sha256};
                let mut h = Sha256::new();
                for e in events {
                    h.update((e.id.len() as u64).to_be_bytes());
                    h.update(e.id.as_bytes());
                }
                let d = h.finalize();
                let hex: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
                format!("ingest:{}:{hex}", source.name)
            };
            let keyed = KeyedRequest::new(key, "POST /ingest/{source}", &[&raw]);
            match svc.pattern_push(&raw, Framing::Json, batch, Some(&keyed)) {
                Ok(Keyed::Applied(p)) => {
                    a.new = n;
                    a.ordinals = Some([p.first, p.last]);
                }
                Ok(Keyed::Replayed(_)) => a.duplicates = n,
                Err(ServiceError::KeyReused(_)) => {
                    let err = ApiError::new(
                        Code::MappingFailed,
                        "these event ids were already pushed with other content: two different \
                         payloads were mapped to the same ids; check the source's \"id\" \
                         (nothing was applied)",
                    );
                    return Err(keep(err, None));
                }
                Err(e) => {
                    let err = ApiError::from_service(e, mapped.batch);
                    if err.code == Code::Unavailable || err.code == Code::IdempotencyKeyInUse {
                        return Err(err);
                    }
                    return Err(keep(err, None));
                }
            }
            first_id = events[0].id.clone();
        }
        _ => unreachable!("events are made for the source's target"),
    }
    answered(st, source, a, single, &first_id)
}

impl<'a> Accepted<'a> {
    /// The answer of `mapped` before anything is applied: a single payload
    /// is `filtered` until its event is.
    fn of(source: &'a Source, mapped: &mapping::Mapped) -> Accepted<'a> {
        Accepted {
            source: &source.name,
            status: if mapped.batch { "accepted" } else { "filtered" },
            id: None,
            items: mapped.items,
            new: 0,
            duplicates: 0,
            late: 0,
            filtered: mapped.filtered,
            partition: None,
            offset: None,
            watermark: None,
            ordinals: None,
        }
    }
}

/// A window source's counts from its ingest's answer.
fn window_counts<'a>(a: &mut Accepted<'a>, n: u64, out: &IngestAnswer, partition: &'a str) {
    a.duplicates = out.duplicates;
    a.late = out.late_count as u64;
    a.new = n - a.duplicates - a.late;
    a.partition = Some(partition);
    a.offset = out.offsets.first().map(|(_, o)| *o);
    a.watermark = Some(out.watermark);
}

/// Counts an accepted request and writes its answer.
fn answered<'a>(
    st: &InboundState,
    source: &Source,
    mut a: Accepted<'a>,
    single: bool,
    first_id: &'a str,
) -> Result<Response, ApiError> {
    st.count(EVENTS, &source.name, "new", a.new);
    st.count(EVENTS, &source.name, "duplicate", a.duplicates);
    st.count(EVENTS, &source.name, "late", a.late);
    if single {
        a.status = if a.duplicates > 0 {
            "duplicate"
        } else if a.late > 0 {
            "late"
        } else {
            "new"
        };
        a.id = Some(first_id);
    }
    to_json(&a).map(|b| json_response(StatusCode::OK, b))
}

fn map_error(source: &Source, e: &MapError) -> ApiError {
    let (code, detail) = if e.malformed {
        (Code::BadRequest, e.to_string())
    } else {
        (
            Code::MappingFailed,
            format!("{e} (source {:?}; nothing was applied)", source.name),
        )
    };
    ApiError::new(code, detail).at(e.index)
}

/// `GET /ingest/{source}/rejected?after=S&limit=N`.
pub async fn get_rejected(
    State(st): State<AppState>,
    Path(name): Path<String>,
    q: QueryParams,
) -> Result<Response, ApiError> {
    let after = q.int("after", 0, 0, i64::MAX)? as u64;
    let limit = q.int("limit", 100, 1, 1000)? as u32;
    let inbound = st.inbound.clone();
    if !inbound.config.sources.contains_key(&name) {
        return Err(ApiError::new(Code::NotFound, format!("no source {name:?}")));
    }
    let svc = st.service()?;
    blocking(move || {
        let page = inbound
            .store(&svc)?
            .page(&name, after, limit)
            .map_err(|e| ApiError::new(Code::Unavailable, e.to_string()))?;
        let mut out =
            Vec::with_capacity(64 + page.records.iter().map(|r| r.1.len() + 16).sum::<usize>());
        out.extend_from_slice(b"{\"rejected\":[");
        for (i, (seq, record)) in page.records.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(format!("{{\"seq\":{seq},").as_bytes());
            out.extend_from_slice(record.as_bytes().get(1..).unwrap_or(b"}"));
        }
        let next = page.records.last().map_or(after, |r| r.0);
        out.extend_from_slice(
            format!(
                "],\"next\":{next},\"head\":{},\"earliest\":{},\"dropped\":{}}}",
                page.head, page.earliest, page.dropped
            )
            .as_bytes(),
        );
        Ok(json_response(StatusCode::OK, out))
    })
    .await
}
