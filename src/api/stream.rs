//! `GET /changes/stream`: server-sent events, one per change (`id: <seq>`,
//! `data: <Change JSON>`), starting after `Last-Event-ID` (which wins) or
//! `after`; a comment heartbeat every 15 s. A restore or a shutdown ends the
//! stream; a reconnect whose position is beyond the head continues from the
//! head.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use tokio::sync::watch;

use super::error::ApiError;
use super::extract::QueryParams;
use super::routes::blocking;
use super::AppState;
use crate::service::{Heads, Service};

/// Rows fetched per page while catching up.
const PAGE: u32 = 1000;
/// Heartbeat period.
const HEARTBEAT: Duration = Duration::from_secs(15);

struct Cursor {
    svc: Arc<Service>,
    rx: watch::Receiver<Heads>,
    epoch: u64,
    after: u64,
    buf: VecDeque<(u64, String)>,
}

/// `GET /changes/stream`.
pub async fn get_stream(
    State(st): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let q = q
        .map(|Query(v)| QueryParams(v))
        .map_err(|e| ApiError::bad_request(format!("malformed query string: {e}")))?;
    let mut after = q.int("after", 0, 0, i64::MAX)? as u64;
    if let Some(v) = headers.get("last-event-id") {
        let s = v
            .to_str()
            .map_err(|_| ApiError::bad_request("Last-Event-ID must be a sequence number"))?
            .trim();
        if !s.is_empty() {
            after = s
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request("Last-Event-ID must be a sequence number"))?;
        }
    }
    let svc = st.service()?;
    let mut rx = svc.subscribe();
    let heads = *rx.borrow_and_update();
    // A position beyond the head (after a restore cut it back) continues
    // from the head.
    let s = svc.clone();
    let head = blocking(move || s.changes_page(0, 1).map_err(ApiError::from))
        .await?
        .head;
    let cursor = Cursor {
        svc,
        rx,
        epoch: heads.epoch,
        after: after.min(head),
        buf: VecDeque::new(),
    };
    let events = stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some((seq, json)) = c.buf.pop_front() {
                let ev = Event::default().id(seq.to_string()).data(json);
                return Some((Ok::<Event, Infallible>(ev), c));
            }
            let h = *c.rx.borrow_and_update();
            if h.epoch != c.epoch || h.shutdown {
                return None;
            }
            let s = c.svc.clone();
            let after = c.after;
            let page = blocking(move || s.changes_page(after, PAGE).map_err(ApiError::from))
                .await
                .ok()?;
            if let Some((last, _)) = page.rows.last() {
                c.after = *last;
                c.buf.extend(page.rows);
                continue;
            }
            c.rx.changed().await.ok()?;
        }
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT).text("heartbeat"))
        .into_response())
}
