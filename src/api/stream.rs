//! `GET /changes/stream` (and `GET /patterns/output/stream`, the same for
//! the pattern output): server-sent events, one per change (`id:
//! <epoch>:<seq>`, `data: <Change JSON>`), starting after `Last-Event-ID`
//! (which wins; `15` alone means epoch 0) or `after` (with `epoch`, when the
//! client knows it); a comment heartbeat every 15 s. The pattern output's
//! stream takes the filters of its pages (`pattern=`, `key=`, see
//! `filter`): only the records they keep are sent, ids and rewinds as
//! without them.
//!
//! Restores: when the stream's epoch is older than the service's (a restore
//! happened while it was open, or the client resumes from an older epoch),
//! the stream sends `event: rewind` with `id: <epoch>:<R>` and `data:
//! {"epoch": E, "after": R}`, then continues with the changes after `R` of
//! the new epoch (the page rules of `GET /changes?epoch=`). A position
//! beyond the head of the current epoch continues from the head. A shutdown
//! ends the stream; so does a position that the retention policy pruned
//! meanwhile.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use tokio::sync::watch;

use super::error::ApiError;
use super::extract::{QueryParams, Svc};
use super::filter::OutputFilter;
use super::routes::blocking;
use super::AppState;
use crate::service::{Heads, Service};
use crate::store::{Page, Stream};

/// Rows fetched per page while catching up.
const PAGE: u32 = 1000;
/// Heartbeat period.
const HEARTBEAT: Duration = Duration::from_secs(15);

struct Cursor {
    svc: Arc<Service>,
    rx: watch::Receiver<Heads>,
    stream: Stream,
    epoch: u64,
    after: u64,
    buf: VecDeque<Event>,
    /// The records to send (`pattern=`, `key=`); the others are passed
    /// over, ids and rewinds unchanged.
    filter: Option<OutputFilter>,
}

impl Cursor {
    /// Queues the page's events: a rewind first when it was rewound, then
    /// its records (those the filter keeps). Moves the cursor past them all.
    fn take(&mut self, page: Page) {
        if let Some(r) = page.rewound_to {
            self.buf.push_back(
                Event::default()
                    .event("rewind")
                    .id(format!("{}:{r}", page.epoch))
                    .data(format!("{{\"epoch\":{},\"after\":{r}}}", page.epoch)),
            );
        }
        self.epoch = page.epoch;
        self.after = page.after;
        for (seq, json) in page.rows {
            self.after = seq;
            if self.filter.as_ref().is_some_and(|f| !f.keeps(&json)) {
                continue;
            }
            self.buf.push_back(
                Event::default()
                    .id(format!("{}:{seq}", page.epoch))
                    .data(json),
            );
        }
    }
}

/// A `Last-Event-ID`: `<epoch>:<seq>`, or `<seq>` (epoch 0), each part
/// ASCII digits only (the document's pattern `^(([0-9]+:)?[0-9]+)?$`: no
/// sign, which `u64::from_str` would take) and within `u64`.
fn last_event_id(s: &str) -> Option<(u64, u64)> {
    fn number(s: &str) -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    }
    match s.split_once(':') {
        Some((e, q)) => Some((number(e)?, number(q)?)),
        None => Some((0, number(s)?)),
    }
}

/// Where a stream starts: `after` and `epoch` from the query, overridden
/// by a `Last-Event-ID` (a reconnecting `EventSource` sends it).
pub struct StreamStart {
    after: u64,
    epoch: Option<u64>,
}

impl FromRequestParts<AppState> for StreamStart {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        let q = QueryParams::from_request_parts(parts, st).await?;
        let headers = &parts.headers;
        let mut after = q.int("after", 0, 0, i64::MAX)? as u64;
        let mut epoch = match q.get("epoch")? {
            Some(_) => Some(q.int("epoch", 0, 0, i64::MAX)? as u64),
            None => None,
        };
        if let Some(v) = headers.get("last-event-id") {
            let bad = || {
                ApiError::bad_request(
                    "Last-Event-ID must be <epoch>:<sequence> (or a sequence alone, in epoch 0)",
                )
            };
            let s = v.to_str().map_err(|_| bad())?.trim();
            // A blank value is no position (the SSE last event ID buffer is
            // empty until an event with an id arrives), as without the header.
            if !s.is_empty() {
                let (e, seq) = last_event_id(s).ok_or_else(bad)?;
                epoch = Some(e);
                after = seq;
            }
        }
        Ok(StreamStart { after, epoch })
    }
}

/// `GET /changes/stream`.
pub async fn get_stream(start: StreamStart, Svc(svc): Svc) -> Result<Response, ApiError> {
    stream_of(Stream::Changes, start, None, svc).await
}

/// `GET /patterns/output/stream`: the pattern output, with the same rules;
/// with `pattern=` / `key=`, only the records they keep (an unknown pattern
/// is 422 before the stream starts).
pub async fn get_pattern_stream(
    start: StreamStart,
    filter: OutputFilter,
    Svc(svc): Svc,
) -> Result<Response, ApiError> {
    let (filter, svc) = if filter.is_empty() {
        (None, svc)
    } else {
        // the names in force are read under the engines lock
        super::routes::blocking(move || filter.check(&svc).map(|()| (Some(filter), svc))).await?
    };
    stream_of(Stream::Patterns, start, filter, svc).await
}

async fn stream_of(
    stream: Stream,
    start: StreamStart,
    filter: Option<OutputFilter>,
    svc: Arc<Service>,
) -> Result<Response, ApiError> {
    let StreamStart { after, epoch } = start;
    let rx = svc.subscribe();
    // The first page: refuses a future epoch or a pruned position before
    // the stream starts (as problem+json), and learns the current epoch.
    let s = svc.clone();
    let first = blocking(move || {
        let page = s.page(stream, after, PAGE, epoch)?;
        // A position beyond the head of the current epoch continues from
        // the head.
        if page.rewound_to.is_none() && page.after > page.head {
            return Ok(s.page(stream, page.head, PAGE, None)?);
        }
        Ok(page)
    })
    .await?;
    let mut cursor = Cursor {
        svc,
        rx,
        stream,
        epoch: first.epoch,
        after: first.after,
        buf: VecDeque::new(),
        filter,
    };
    cursor.take(first);
    let events = stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(ev) = c.buf.pop_front() {
                return Some((Ok::<Event, Infallible>(ev), c));
            }
            if c.rx.borrow_and_update().shutdown {
                return None;
            }
            let (s, stream, after, epoch) = (c.svc.clone(), c.stream, c.after, c.epoch);
            let page = match blocking(move || {
                s.page(stream, after, PAGE, Some(epoch))
                    .map_err(ApiError::from)
            })
            .await
            {
                Ok(p) => p,
                Err(e) => {
                    // The next page cannot be read (storage failing, pruned
                    // meanwhile): the stream ends, saying why in the log;
                    // the client reconnects with its Last-Event-ID and gets
                    // the problem (or the rest of the stream) then.
                    tracing::warn!(
                        stream = stream.name(),
                        after,
                        code = e.code.as_str(),
                        error = %e.detail,
                        "stream ended: cannot read its next page"
                    );
                    return None;
                }
            };
            if page.rows.is_empty() && page.rewound_to.is_none() {
                // Err: the service's heads are gone (it is shutting down):
                // the stream ends.
                c.rx.changed().await.ok()?;
                continue;
            }
            c.take(page);
        }
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT).text("heartbeat"))
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::last_event_id;

    #[test]
    fn last_event_id_is_digits() {
        assert_eq!(last_event_id("2:15"), Some((2, 15)));
        assert_eq!(last_event_id("15"), Some((0, 15)));
        assert_eq!(last_event_id("0:0"), Some((0, 0)));
        for bad in [
            "+5",
            "1:+5",
            "+1:5",
            "-1",
            "1:",
            ":1",
            "1:2:3",
            "x:1",
            "0:y",
            " 1",
            "99999999999999999999",
        ] {
            assert_eq!(last_event_id(bad), None, "{bad:?}");
        }
    }
}
