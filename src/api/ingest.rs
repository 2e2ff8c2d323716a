//! The mutating calls of the processing API: `POST /events`,
//! `POST /watermarks` and `POST /partitions/{partition}/idle`.
//!
//! Each parses its request on a blocking thread (outside the engines lock,
//! so parsing of concurrent requests runs on every core), the deliveries
//! borrowing their strings from the body, then calls the service there. The
//! answer embeds the service's encoded changes (the very bytes that were
//! stored) instead of serializing them again.

use axum::http::{header, StatusCode};
use axum::response::Response;

use super::dto;
use super::error::{ApiError, Code};
use super::extract::{self, NotInCluster, PartitionName, Svc, WriteCall};
use super::routes::{blocking, json_response};
use super::AppState;
use crate::service::ingest_thread::{Called, IngestError};
use crate::service::parse::{Framing, ParseError};
use crate::service::{IngestAnswer, Prefer, TickAnswer};
use axum::extract::State;

use crate::canonical::writer::{int, opt_int, string};
use crate::engine::{write_json_array, WriteJson};

/// The answer of a mutating call, with `Preference-Applied` when the
/// minimal form was asked for.
fn answer(prefer: Prefer, body: Vec<u8>) -> Response {
    let mut r = json_response(StatusCode::OK, body);
    if prefer == Prefer::Minimal {
        r.headers_mut().insert(
            "preference-applied",
            header::HeaderValue::from_static("return=minimal"),
        );
    }
    r
}

/// `{"changes":[..],"late":[..],"watermark":W,"offsets":{..}}` (the field
/// order and bytes of serializing `dto::IngestResponse`); with
/// [`Prefer::Minimal`], `changes` and `late` are counts.
fn ingest_body(a: &IngestAnswer, prefer: Prefer) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.changes.len() + a.late.len() + 128);
    out.extend_from_slice(b"{\"changes\":");
    match prefer {
        Prefer::Full => out.extend_from_slice(&a.changes),
        Prefer::Minimal => int(&mut out, a.change_count as u64),
    }
    out.extend_from_slice(b",\"late\":");
    match prefer {
        Prefer::Full => out.extend_from_slice(&a.late),
        Prefer::Minimal => int(&mut out, a.late_count as u64),
    }
    out.extend_from_slice(b",\"watermark\":");
    opt_int(&mut out, a.watermark);
    out.extend_from_slice(b",\"offsets\":{");
    for (i, (p, c)) in a.offsets.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(&mut out, p);
        out.push(b':');
        int(&mut out, *c);
    }
    out.extend_from_slice(b"}}");
    out
}

/// `{"changes":[..],"watermark":W,"finalized":[..]}` (as `dto::TickResponse`);
/// with [`Prefer::Minimal`], `changes` and `finalized` are counts.
fn tick_body(a: &TickAnswer, prefer: Prefer) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.changes.len() + 64 + a.finalized.len() * 80);
    out.extend_from_slice(b"{\"changes\":");
    match prefer {
        Prefer::Full => out.extend_from_slice(&a.changes),
        Prefer::Minimal => int(&mut out, a.change_count as u64),
    }
    out.extend_from_slice(b",\"watermark\":");
    opt_int(&mut out, a.watermark);
    out.extend_from_slice(b",\"finalized\":");
    match prefer {
        Prefer::Full => write_json_array(&mut out, &a.finalized),
        Prefer::Minimal => int(&mut out, a.finalized_count as u64),
    }
    out.push(b'}');
    out
}

/// `POST /events` with `--kafka`: the events go to the topic (each to the
/// partition of its key; a delivery's `partition` and `offset` are the
/// broker's to choose), answered 202 once the broker acknowledged them.
async fn produce(
    producer: &crate::kafka::Producer,
    body: &[u8],
    framing: Framing,
) -> Result<Response, ApiError> {
    let events: Vec<crate::kafka::Outgoing> = extract::deliveries(body, framing)?
        .items
        .into_iter()
        .map(|d| {
            let e = crate::engine::Event {
                id: d.event.id.into_owned(),
                key: d.event.key.into_owned(),
                timestamp: d.event.timestamp,
                value: d.event.value,
            };
            let mut value = Vec::with_capacity(64 + e.id.len() + e.key.len());
            e.write_json(&mut value);
            crate::kafka::Outgoing { key: e.key, value }
        })
        .collect();
    let placed = producer.produce(events).await.map_err(|e| {
        ApiError::new(
            Code::Unavailable,
            format!("the broker did not acknowledge the events (nothing or part of them may be in the topic): {e}"),
        )
    })?;
    let mut out = Vec::with_capacity(32 + placed.len() * 32);
    out.extend_from_slice(b"{\"topic\":");
    string(&mut out, producer.topic());
    out.extend_from_slice(b",\"records\":[");
    for (i, (p, o)) in placed.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"partition\":\"p");
        out.extend_from_slice(p.to_string().as_bytes());
        out.extend_from_slice(b"\",\"offset\":");
        int(&mut out, *o);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    Ok(json_response(StatusCode::ACCEPTED, out))
}

/// Bodies up to this size go to the ingest thread.
const SMALL_BODY: usize = 16 * 1024;

/// `POST /events`.
pub async fn post_events(
    State(st): State<AppState>,
    call: WriteCall,
) -> Result<Response, ApiError> {
    let WriteCall {
        svc,
        body,
        framing,
        prefer,
    } = call;
    if let Some(producer) = st.producer.get().cloned() {
        return produce(&producer, &body, framing).await;
    }
    // A small body (one event, a few) goes to the ingest thread, handed
    // over once; a large one is parsed on a blocking thread, in parallel
    // with the others.
    if body.len() <= SMALL_BODY {
        if let Some(queue) = st.ingest_queue(&svc) {
            match queue
                .call(
                    &svc,
                    Box::new(body.clone()),
                    framing,
                    prefer,
                    crate::serve::open_connections() <= 1,
                )
                .await
            {
                Called::Answered(out) => {
                    return out
                        .map(|a| answer(prefer, ingest_body(&a, prefer)))
                        .map_err(|e| match e {
                            IngestError::Parse(e) => extract::parse_error(e),
                            IngestError::Service { error, batch } => {
                                ApiError::from_service(error, batch)
                            }
                        })
                }
                Called::Lost => {
                    return Err(ApiError::new(
                        Code::Unavailable,
                        "internal failure; nothing was applied",
                    ))
                }
                Called::NotTaken => {}
            }
        }
    }
    blocking(move || {
        let parsed = extract::deliveries(&body, framing)?;
        let batch = parsed.batch;
        let out = svc
            .ingest(parsed.items, prefer)
            .map_err(|e| ApiError::from_service(e, batch))?;
        Ok(ingest_body(&out, prefer))
    })
    .await
    .map(|b| answer(prefer, b))
}

/// `POST /watermarks`.
pub async fn post_watermarks(_: NotInCluster, call: WriteCall) -> Result<Response, ApiError> {
    let WriteCall {
        svc, body, prefer, ..
    } = call;
    blocking(move || {
        let req: dto::WatermarkBody = extract::json(&body, extract::ADVANCE)?;
        let out = svc.advance(&req.partition, req.watermark, prefer)?;
        Ok(tick_body(&out, prefer))
    })
    .await
    .map(|b| answer(prefer, b))
}

/// `POST /watermarks/batch`: several advances in one atomic call.
pub async fn post_watermarks_batch(_: NotInCluster, call: WriteCall) -> Result<Response, ApiError> {
    let WriteCall {
        svc,
        body,
        framing,
        prefer,
    } = call;
    blocking(move || {
        let advances = extract::advances(&body, framing)?;
        let out = svc
            .advance_all(&advances, prefer)
            .map_err(|e| ApiError::from_service(e, true))?;
        Ok(tick_body(&out, prefer))
    })
    .await
    .map(|b| answer(prefer, b))
}

/// `POST /batch`: deliveries, then the advances that close them, in one
/// atomic call (the service's `batch`). Always a batch: errors carry the
/// failing item's `index`, the deliveries counted first.
pub async fn post_batch(_: NotInCluster, call: WriteCall) -> Result<Response, ApiError> {
    let WriteCall {
        svc,
        body,
        framing,
        prefer,
    } = call;
    blocking(move || {
        let (raw, items) = extract::batch_parts(&body, framing)?;
        let deliveries = if raw.iter().all(u8::is_ascii_whitespace) {
            Vec::new()
        } else {
            crate::service::parse::deliveries(&raw, framing)
                .map_err(|e| advance_among_deliveries(&raw, framing, e))?
                .items
        };
        let n = deliveries.len();
        let advances = items
            .iter()
            .enumerate()
            .map(|(j, item)| extract::advance_item(item, n + j))
            .collect::<Result<Vec<_>, _>>()?;
        if n == 0 && advances.is_empty() {
            return Err(ApiError::invalid_request("the batch is empty"));
        }
        let out = svc
            .batch(deliveries, &advances, prefer)
            .map_err(|e| ApiError::from_service(e, true))?;
        let mut b = ingest_body(&out.ingest, prefer);
        b.pop();
        b.extend_from_slice(b",\"finalized\":");
        match prefer {
            Prefer::Full => write_json_array(&mut b, &out.finalized),
            Prefer::Minimal => int(&mut b, out.finalized_count as u64),
        }
        b.push(b'}');
        Ok(b)
    })
    .await
    .map(|b| answer(prefer, b))
}

/// A batch's deliveries that do not parse: when the failing item is an
/// advance followed by a delivery, says so (422); else the parse error.
fn advance_among_deliveries(raw: &[u8], framing: Framing, e: ParseError) -> ApiError {
    let index = match &e {
        ParseError::Malformed {
            index: Some(index), ..
        } => *index,
        _ => return extract::parse_error(e),
    };
    let item: Option<Vec<u8>> = match framing {
        Framing::Ndjson => raw
            .split(|b| *b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .nth(index)
            .map(<[u8]>::to_vec),
        Framing::Json => serde_json::from_slice::<Vec<&serde_json::value::RawValue>>(raw)
            .ok()
            .and_then(|items| items.get(index).map(|i| i.get().as_bytes().to_vec())),
    };
    if item.is_some_and(|i| extract::is_advance(&i)) {
        return ApiError::invalid_request(format!(
            "item {index} is an advance, and a delivery follows it: a batch's advances come after all its deliveries"
        ))
        .at(Some(index));
    }
    extract::parse_error(e)
}

/// `POST /partitions/{partition}/idle`.
pub async fn post_idle(
    PartitionName(partition): PartitionName,
    Svc(svc): Svc,
    prefer: Prefer,
    _: NotInCluster,
) -> Result<Response, ApiError> {
    blocking(move || Ok(tick_body(&svc.mark_idle(&partition, prefer)?, prefer)))
        .await
        .map(|b| answer(prefer, b))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::api::extract::prefer_of;
    use crate::engine::{Address, Change, ChangeOp, WindowResult};
    use axum::http::HeaderMap;

    fn change() -> Change {
        Change {
            seq: 7,
            op: ChangeOp::Upsert,
            result: WindowResult {
                window: "w\"x".into(),
                key: "k\u{e9}".into(),
                start: -(1i128 << 100),
                end: 10,
                count: 2,
                sum: 1i128 << 90,
                min: -5,
                max: i64::MAX,
            },
        }
    }

    #[test]
    fn answers_are_byte_identical_to_the_dto_serialization() {
        let changes = vec![change(), change()];
        let offsets = vec![("p\"0".to_string(), 3), ("p1".to_string(), -1)];
        let a = IngestAnswer {
            changes: serde_json::to_vec(&changes).unwrap(),
            change_count: 2,
            late: b"[]".to_vec(),
            late_count: 0,
            duplicates: 0,
            watermark: Some(-4),
            offsets: offsets.clone(),
        };
        let want = serde_json::to_vec(&dto::IngestResponse {
            changes: &changes,
            late: &[],
            watermark: Some(-4),
            offsets: &offsets,
        })
        .unwrap();
        assert_eq!(ingest_body(&a, Prefer::Full), want);
        assert_eq!(
            String::from_utf8(ingest_body(&a, Prefer::Minimal)).unwrap(),
            r#"{"changes":2,"late":0,"watermark":-4,"offsets":{"p\"0":3,"p1":-1}}"#
        );
        let finalized = vec![Address {
            window: "w".into(),
            key: "k".into(),
            start: 0,
            end: 10,
        }];
        let t = TickAnswer {
            changes: b"[]".to_vec(),
            change_count: 0,
            watermark: None,
            finalized: finalized.clone(),
            finalized_count: finalized.len(),
        };
        let want = serde_json::to_vec(&dto::TickResponse {
            changes: &[],
            watermark: None,
            finalized: &finalized,
        })
        .unwrap();
        assert_eq!(tick_body(&t, Prefer::Full), want);
        assert_eq!(
            String::from_utf8(tick_body(&t, Prefer::Minimal)).unwrap(),
            r#"{"changes":0,"watermark":null,"finalized":1}"#
        );
    }

    #[test]
    fn prefer_return_minimal_among_other_preferences() {
        let h = |v: &[&str]| {
            let mut m = HeaderMap::new();
            for x in v {
                m.append("prefer", x.parse().unwrap());
            }
            prefer_of(&m)
        };
        assert_eq!(h(&[]), Prefer::Full);
        assert_eq!(h(&["return=minimal"]), Prefer::Minimal);
        assert_eq!(h(&["respond-async, Return = \"minimal\""]), Prefer::Minimal);
        assert_eq!(h(&["wait=5", "return=minimal"]), Prefer::Minimal);
        assert_eq!(h(&["return=representation"]), Prefer::Full);
        assert_eq!(h(&["minimal"]), Prefer::Full);
    }
}
