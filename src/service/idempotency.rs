//! `Idempotency-Key` on the pattern engine's pushes and advances (the
//! Stripe convention): a keyed call's answer is stored in the same commit as
//! the call; a retry with the same key and the same request gets that answer
//! back and applies nothing; the same key with another request is refused.
//!
//! Two calls with one key never run at once: a key is claimed (in memory)
//! from its lookup to its commit, and a second call meanwhile is refused
//! (409 `idempotency_key_in_use`: whether the first one commits is not
//! known yet). The window engine's routes need no keys: offsets and event ids
//! make their retries safe already.

use std::collections::HashSet;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::store::{KeyAt, KeyRow};

use super::{Service, ServiceError};

/// Longest key accepted (Stripe's limit).
pub const MAX_KEY_LEN: usize = 255;

/// A keyed request: the key, its route and the hash of what identifies it.
#[derive(Debug, Clone)]
pub struct KeyedRequest {
    key: String,
    route: &'static str,
    sha256: [u8; 32],
}

impl KeyedRequest {
    /// `key` (already checked by [`check_key`]) for a call of `route`
    /// whose request is identified by `parts` (its framing and body).
    pub fn new(key: String, route: &'static str, parts: &[&[u8]]) -> KeyedRequest {
        let mut h = Sha256::new();
        h.update(route.as_bytes());
        for p in parts {
            h.update((p.len() as u64).to_be_bytes());
            h.update(p);
        }
        KeyedRequest {
            key,
            route,
            sha256: h.finalize().into(),
        }
    }

    /// The row stored with the call's commit.
    pub(super) fn row<'a>(&'a self, response: &'a [u8], at: KeyAt) -> KeyRow<'a> {
        KeyRow {
            key: &self.key,
            route: self.route,
            request_sha256: &self.sha256,
            response,
            at,
        }
    }
}

/// Why a header value is not a usable key, if it is not: 1 to 255
/// printable ASCII characters (no spaces or controls).
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_LEN} characters, not {}",
            key.len()
        ));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(
            "Idempotency-Key must be printable ASCII without spaces (a UUID, or a name and a \
             number)"
                .into(),
        );
    }
    Ok(())
}

/// A call's answer: applied now, or the stored answer of an earlier call
/// with the same key.
#[derive(Debug)]
pub enum Keyed<T> {
    /// Applied by this call.
    Applied(T),
    /// A retry: the first call's answer body, nothing applied.
    Replayed(Vec<u8>),
}

/// The keys of calls between their lookup and their commit.
#[derive(Debug, Default)]
pub(super) struct InFlight(Mutex<HashSet<String>>);

/// A claimed key: released when dropped (after the call's commit, or its
/// failure).
pub(super) struct Claim<'a> {
    set: &'a InFlight,
    key: String,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.set
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

impl Service {
    /// Claims `req`'s key (none without a key), or finds its stored answer.
    /// `Ok(Err(body))`: a retry of the same request, answered with `body`.
    pub(super) fn claim_key<'a>(
        &'a self,
        req: Option<&KeyedRequest>,
    ) -> Result<Result<Option<Claim<'a>>, Vec<u8>>, ServiceError> {
        let Some(req) = req else {
            return Ok(Ok(None));
        };
        let set = &self.commits.keys;
        if !set
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(req.key.clone())
        {
            return Err(ServiceError::KeyInUse(format!(
                "a call with Idempotency-Key {:?} is still in progress; retry when it has been \
                 answered",
                req.key
            )));
        }
        let claim = Claim {
            set,
            key: req.key.clone(),
        };
        let Some(stored) = self.with_reader(|r| r.idempotency_key(&req.key))? else {
            return Ok(Ok(Some(claim)));
        };
        if stored.route != req.route || stored.request_sha256 != req.sha256 {
            return Err(ServiceError::KeyReused(format!(
                "Idempotency-Key {:?} was used for another request ({}{}); a key names one \
                 request: use a new key for a new request",
                req.key,
                stored.route,
                if stored.route == req.route {
                    " with another body"
                } else {
                    ""
                }
            )));
        }
        crate::service::Metrics::inc(&self.env.metrics.idempotent_replays, 1);
        Ok(Err(stored.response))
    }
}
