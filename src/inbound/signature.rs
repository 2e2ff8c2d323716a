//! Signatures of inbound webhooks, verified exactly as the producers sign
//! them: Standard Webhooks (and Svix, which sends the same scheme under
//! `svix-*` header names), Stripe, GitHub and a configurable plain
//! HMAC-SHA256 of the body.
//!
//! Everything here is pure except [`load_secrets`], and nothing panics on
//! any input: headers and bodies are attacker-controlled. MACs are compared
//! in constant time ([`hmac::Mac::verify_slice`]), every provided signature
//! against every secret, without stopping at the first match. The MAC is
//! checked before the timestamp, so that a forged request learns nothing
//! about the clock: [`Failure::Stale`] is reported only for a correct MAC
//! with a timestamp outside the tolerance.

use std::env::VarError;
use std::fmt;
use std::path::Path;

use axum::http::{HeaderMap, HeaderValue};
use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The tolerance both Standard Webhooks and Stripe recommend between a
/// signature's timestamp and the receiver's clock, in seconds, both ways.
pub const DEFAULT_TOLERANCE_S: u64 = 300;

/// The standard base64 alphabet, padding optional (some producers strip it).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The Standard Webhooks header names: id, timestamp, signature.
const WEBHOOK_HEADERS: [&str; 3] = ["webhook-id", "webhook-timestamp", "webhook-signature"];
/// The same headers as Svix names them.
const SVIX_HEADERS: [&str; 3] = ["svix-id", "svix-timestamp", "svix-signature"];
/// Stripe's header (lowercase, as `HeaderMap` stores names).
const STRIPE_HEADER: &str = "stripe-signature";
/// GitHub's SHA-256 header (the SHA-1 `X-Hub-Signature` is not accepted).
const GITHUB_HEADER: &str = "x-hub-signature-256";
/// The prefix of GitHub's header value.
const GITHUB_PREFIX: &str = "sha256=";
/// The prefix of a Standard Webhooks secret as producers show it.
const WHSEC_PREFIX: &str = "whsec_";
/// The length of an HMAC-SHA256 tag.
const TAG_LEN: usize = 32;

/// Which producer's scheme.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub enum Scheme {
    /// Standard Webhooks (standardwebhooks.com), as Svix and others send it:
    /// `webhook-id`, `webhook-timestamp` and `webhook-signature` (or the
    /// `svix-*` names), HMAC-SHA256 of `{id}.{timestamp}.{body}` in base64,
    /// keyed with the base64-decoded `whsec_` secret.
    StandardWebhooks,
    /// Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]`,
    /// HMAC-SHA256 of `{t}.{body}` keyed with the whole `whsec_...` text.
    Stripe,
    /// GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the body.
    GitHub,
    /// A plain HMAC-SHA256 of the body in a header of one's choosing.
    Hmac(HmacScheme),
}

/// A plain HMAC-SHA256 of the raw body, carried in one header.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct HmacScheme {
    /// Header holding the signature, e.g. "X-Signature" (case-insensitive lookup).
    pub header: String,
    /// Hex or Base64 (standard alphabet, padding optional) encoding of the HMAC-SHA256 of the raw body.
    pub encoding: Encoding,
    /// Optional prefix before the encoded MAC in the header value, e.g. "sha256=" (may be empty).
    #[serde(default)]
    pub prefix: String,
}

/// How a [`HmacScheme`] header encodes the MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub enum Encoding {
    /// Hexadecimal, either case.
    Hex,
    /// Base64, standard alphabet, padding optional.
    Base64,
}

impl Encoding {
    /// The encoding's name in sentences.
    fn name(self) -> &'static str {
        match self {
            Encoding::Hex => "hex",
            Encoding::Base64 => "base64",
        }
    }
}

/// A key, already decoded into the bytes the HMAC uses. Its `Debug` never
/// shows the bytes.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// Builds the key bytes for a scheme from the secret text as the producer shows it:
    /// - StandardWebhooks: "whsec_" + base64 → the base64-decoded bytes (the text
    ///   without the whsec_ prefix is accepted as base64 too); invalid base64 → Err.
    /// - Stripe: the whole text ("whsec_..." included) as UTF-8 bytes (Stripe keys
    ///   the HMAC with the full secret string).
    /// - GitHub and Hmac: the text as UTF-8 bytes.
    ///
    /// Leading and trailing whitespace is trimmed; an empty secret is an error.
    /// Error messages never contain the secret.
    pub fn parse(scheme: &Scheme, text: &str) -> Result<Secret, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("the secret is empty".to_string());
        }
        let key = match scheme {
            Scheme::StandardWebhooks => {
                let encoded = text.strip_prefix(WHSEC_PREFIX).unwrap_or(text);
                // The decoder's error names the offending byte: never pass it on.
                let key = BASE64.decode(encoded).map_err(|_| {
                    "the secret is not valid base64 (a Standard Webhooks secret is \
                     `whsec_` followed by base64)"
                        .to_string()
                })?;
                if key.is_empty() {
                    return Err("the secret is empty".to_string());
                }
                key
            }
            Scheme::Stripe | Scheme::GitHub | Scheme::Hmac(_) => text.as_bytes().to_vec(),
        };
        Ok(Secret(key))
    }
}

/// Where [`from_text`] got its text: says how to split it and what errors name.
enum Origin<'a> {
    /// An environment variable: secrets separated by whitespace or commas.
    Env(&'a str),
    /// A file: one secret a line, blank lines and `#` lines skipped.
    File(&'a Path),
}

/// Loads the secrets for rotation: from the environment variable `env` (several separated by whitespace or commas)
/// or from the file `file` (one per line; blank lines and lines starting with '#' skipped). Exactly one of the two is Some.
/// Errors name the variable or file but NEVER print a secret. At least one secret required.
pub fn load_secrets(
    scheme: &Scheme,
    env: Option<&str>,
    file: Option<&Path>,
) -> Result<Vec<Secret>, String> {
    match (env, file) {
        (Some(var), None) => {
            // VarError's Display shows a non-UTF-8 value: build the message here.
            let text = std::env::var(var).map_err(|e| match e {
                VarError::NotPresent => format!("the environment variable {var} is not set"),
                VarError::NotUnicode(_) => {
                    format!("the environment variable {var} is not valid UTF-8")
                }
            })?;
            from_text(scheme, &text, &Origin::Env(var))
        }
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the secrets file {}: {e}", path.display()))?;
            from_text(scheme, &text, &Origin::File(path))
        }
        (Some(var), Some(path)) => Err(format!(
            "the secrets are given both in the environment variable {var} and in the file {}: \
             give exactly one",
            path.display()
        )),
        (None, None) => {
            Err("no secrets: give an environment variable or a file to read them from".to_string())
        }
    }
}

/// Parses the secrets of `text`, split as `origin` says; errors say where
/// (variable and position, or file and line), never what.
fn from_text(scheme: &Scheme, text: &str, origin: &Origin<'_>) -> Result<Vec<Secret>, String> {
    let items: Vec<(usize, &str)> = match origin {
        Origin::Env(_) => text
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|s| !s.is_empty())
            .enumerate()
            .map(|(i, s)| (i + 1, s))
            .collect(),
        Origin::File(_) => text
            .lines()
            .enumerate()
            .map(|(i, line)| (i + 1, line.trim()))
            .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
            .collect(),
    };
    let mut secrets = Vec::with_capacity(items.len());
    for (n, item) in items {
        let secret = Secret::parse(scheme, item).map_err(|e| match origin {
            Origin::Env(var) => format!("secret {n} in the environment variable {var}: {e}"),
            Origin::File(path) => format!("line {n} of the secrets file {}: {e}", path.display()),
        })?;
        secrets.push(secret);
    }
    if secrets.is_empty() {
        return Err(match origin {
            Origin::Env(var) => format!("the environment variable {var} holds no secret"),
            Origin::File(path) => format!(
                "the secrets file {} holds no secret (blank lines and lines starting with # \
                 are skipped)",
                path.display()
            ),
        });
    }
    Ok(secrets)
}

/// Checks inbound requests of one source: its scheme, its secrets (several
/// during a rotation; any may match) and the clock tolerance.
#[derive(Debug, Clone)]
pub struct Verifier {
    /// The producer's scheme.
    pub scheme: Scheme,
    /// The keys; a signature matching any of them is accepted.
    pub secrets: Vec<Secret>,
    /// How far, in seconds and both ways, a signed timestamp may be from the
    /// server's clock (Standard Webhooks and Stripe only); see
    /// [`DEFAULT_TOLERANCE_S`].
    pub tolerance_s: u64,
}

/// Why a request is refused. Each has a stable snake_case [`Failure::reason`]
/// used as a metrics label and in the problem detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The signature header(s) are absent (Standard Webhooks: `webhook-id`,
    /// `webhook-timestamp` or `webhook-signature`, and not all three `svix-*`
    /// aliases either; Stripe: `Stripe-Signature`; GitHub:
    /// `X-Hub-Signature-256`; Hmac: its header).
    #[error("the signature header is missing")]
    Missing,
    /// Present but unparseable: no `t=` in Stripe's header, a non-numeric
    /// timestamp, bad hex or base64, no (decodable) `v1` entry, a header value
    /// that is not visible ASCII, a missing prefix...
    #[error("the signature header is malformed")]
    Malformed,
    /// A correct MAC whose timestamp is outside the server's clock ± the
    /// tolerance (Standard Webhooks and Stripe only).
    #[error(
        "the signature's timestamp is {} s away from the server's clock (tolerance {tolerance_s} s)",
        .skew_s.unsigned_abs()
    )]
    Stale {
        /// The server's clock minus the signed timestamp, in seconds:
        /// positive for an old signature, negative for one from the future.
        skew_s: i64,
        /// The tolerance it exceeds, in seconds.
        tolerance_s: u64,
    },
    /// No signature in the header matches any secret.
    #[error("no signature matches the source's secret(s)")]
    Mismatch,
}

impl Failure {
    /// The stable snake_case label: "missing", "malformed", "stale" or "mismatch".
    pub fn reason(&self) -> &'static str {
        match self {
            Failure::Missing => "missing",
            Failure::Malformed => "malformed",
            Failure::Stale { .. } => "stale",
            Failure::Mismatch => "mismatch",
        }
    }

    /// A human sentence naming the header expected, for the problem detail.
    /// It never quotes the request's header values.
    pub fn detail(&self, scheme: &Scheme) -> String {
        match (self, scheme) {
            (
                Failure::Stale {
                    skew_s,
                    tolerance_s,
                },
                _,
            ) => format!(
                "the signature's timestamp is {} s away from the server's clock (tolerance \
                 {tolerance_s} s)",
                skew_s.unsigned_abs()
            ),
            (Failure::Missing, Scheme::StandardWebhooks) => {
                "the webhook-id, webhook-timestamp or webhook-signature header is missing \
                 (svix-id, svix-timestamp and svix-signature are accepted too)"
                    .to_string()
            }
            (Failure::Missing, Scheme::Stripe) => "the Stripe-Signature header is missing".into(),
            (Failure::Missing, Scheme::GitHub) => {
                "the X-Hub-Signature-256 header is missing".to_string()
            }
            (Failure::Missing, Scheme::Hmac(h)) => format!("the {} header is missing", h.header),
            (Failure::Malformed, Scheme::StandardWebhooks) => {
                "the webhook-id, webhook-timestamp or webhook-signature header is malformed \
                 (expected an id, a Unix timestamp in seconds and a space-separated list of \
                 v1,<base64 HMAC-SHA256>)"
                    .to_string()
            }
            (Failure::Malformed, Scheme::Stripe) => {
                "the Stripe-Signature header is malformed (expected t=<Unix seconds>,v1=<hex \
                 HMAC-SHA256>)"
                    .to_string()
            }
            (Failure::Malformed, Scheme::GitHub) => {
                "the X-Hub-Signature-256 header is malformed (expected sha256=<hex HMAC-SHA256>)"
                    .to_string()
            }
            (Failure::Malformed, Scheme::Hmac(h)) => format!(
                "the {} header is malformed (expected {}<{} HMAC-SHA256 of the body>)",
                h.header,
                h.prefix,
                h.encoding.name()
            ),
            (Failure::Mismatch, Scheme::StandardWebhooks) => {
                "no v1 signature in webhook-signature matches the source's secret(s)".to_string()
            }
            (Failure::Mismatch, Scheme::Stripe) => {
                "no v1 signature in Stripe-Signature matches the source's secret(s)".to_string()
            }
            (Failure::Mismatch, Scheme::GitHub) => {
                "the X-Hub-Signature-256 signature does not match the source's secret(s)"
                    .to_string()
            }
            (Failure::Mismatch, Scheme::Hmac(h)) => format!(
                "the {} signature does not match the source's secret(s)",
                h.header
            ),
        }
    }
}

impl Verifier {
    /// Checks the request. `now_s` is the server's clock in Unix seconds (passed in for tests).
    /// On success returns the signed timestamp if the scheme has one (Some(t) for Standard Webhooks and Stripe), None otherwise.
    ///
    /// Order: [`Failure::Missing`], then [`Failure::Malformed`], then the MAC
    /// ([`Failure::Mismatch`]), then the timestamp ([`Failure::Stale`]). Of
    /// several values of one header, the first is used.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now_s: i64,
    ) -> Result<Option<i64>, Failure> {
        match &self.scheme {
            Scheme::StandardWebhooks => self.verify_standard(headers, body, now_s).map(Some),
            Scheme::Stripe => self.verify_stripe(headers, body, now_s).map(Some),
            Scheme::GitHub => self
                .verify_plain(headers, GITHUB_HEADER, Encoding::Hex, GITHUB_PREFIX, body)
                .map(|()| None),
            Scheme::Hmac(h) => self
                .verify_plain(
                    headers,
                    &h.header.to_ascii_lowercase(),
                    h.encoding,
                    &h.prefix,
                    body,
                )
                .map(|()| None),
        }
    }

    /// The header names this scheme reads, lowercase (for stripping
    /// secrets-bearing headers before storing a rejected request). Standard
    /// Webhooks lists the `svix-*` aliases too.
    pub fn signature_headers(&self) -> Vec<String> {
        match &self.scheme {
            Scheme::StandardWebhooks => WEBHOOK_HEADERS
                .iter()
                .chain(SVIX_HEADERS.iter())
                .map(|s| s.to_string())
                .collect(),
            Scheme::Stripe => vec![STRIPE_HEADER.to_string()],
            Scheme::GitHub => vec![GITHUB_HEADER.to_string()],
            Scheme::Hmac(h) => vec![h.header.to_ascii_lowercase()],
        }
    }

    /// Standard Webhooks: `{id}.{timestamp}.{body}`, base64 `v1` entries.
    fn verify_standard(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now_s: i64,
    ) -> Result<i64, Failure> {
        let (id, ts, sig) = [WEBHOOK_HEADERS, SVIX_HEADERS]
            .iter()
            .find_map(|[id, ts, sig]| {
                Some((headers.get(*id)?, headers.get(*ts)?, headers.get(*sig)?))
            })
            .ok_or(Failure::Missing)?;
        let id = text(id)?;
        if id.is_empty() {
            return Err(Failure::Malformed);
        }
        let ts = parse_timestamp(text(ts)?)?;
        // Other versions (v1a is ed25519) are ignored; a v1 entry that does
        // not decode to 32 bytes matches nothing.
        let mut candidates = Vec::new();
        for entry in text(sig)?.split([' ', '\t']).filter(|e| !e.is_empty()) {
            if let Some(("v1", encoded)) = entry.split_once(',') {
                candidates.extend(decode_tag(Encoding::Base64, encoded));
            }
        }
        if candidates.is_empty() {
            return Err(Failure::Malformed);
        }
        // The references sign the timestamp as the integer prints.
        let ts_text = ts.to_string();
        let parts: [&[u8]; 5] = [id.as_bytes(), b".", ts_text.as_bytes(), b".", body];
        self.check_mac(&parts, &candidates)?;
        self.check_time(ts, now_s)?;
        Ok(ts)
    }

    /// Stripe: `{t}.{body}`, hex `v1` entries; `v0` and unknown keys ignored.
    fn verify_stripe(&self, headers: &HeaderMap, body: &[u8], now_s: i64) -> Result<i64, Failure> {
        let value = text(headers.get(STRIPE_HEADER).ok_or(Failure::Missing)?)?;
        let mut t = None;
        let mut candidates = Vec::new();
        for item in value.split(',') {
            match trim(item).split_once('=') {
                // The first t counts, as in stripe-python.
                Some(("t", ts)) if t.is_none() => t = Some(ts),
                Some(("v1", hex)) => candidates.extend(decode_tag(Encoding::Hex, hex)),
                _ => {}
            }
        }
        let ts = parse_timestamp(t.ok_or(Failure::Malformed)?)?;
        if candidates.is_empty() {
            return Err(Failure::Malformed);
        }
        let ts_text = ts.to_string();
        let parts: [&[u8]; 3] = [ts_text.as_bytes(), b".", body];
        self.check_mac(&parts, &candidates)?;
        self.check_time(ts, now_s)?;
        Ok(ts)
    }

    /// GitHub and Hmac: one MAC of the body, after a prefix.
    fn verify_plain(
        &self,
        headers: &HeaderMap,
        name: &str,
        encoding: Encoding,
        prefix: &str,
        body: &[u8],
    ) -> Result<(), Failure> {
        let value = text(headers.get(name).ok_or(Failure::Missing)?)?;
        let encoded = strip_prefix_ignore_case(value, prefix).ok_or(Failure::Malformed)?;
        let tag = decode_tag(encoding, trim(encoded)).ok_or(Failure::Malformed)?;
        self.check_mac(&[body], &[tag])
    }

    /// Whether any candidate is the HMAC-SHA256 of the concatenated `parts`
    /// under any secret. Every candidate is compared, in constant time,
    /// against every secret's MAC, without stopping at a match.
    fn check_mac(&self, parts: &[&[u8]], candidates: &[[u8; TAG_LEN]]) -> Result<(), Failure> {
        let mut matched = false;
        for secret in &self.secrets {
            // HMAC takes keys of any length; should it ever refuse one, that
            // secret simply matches nothing.
            let Ok(mut mac) = HmacSha256::new_from_slice(&secret.0) else {
                continue;
            };
            for part in parts {
                mac.update(part);
            }
            for candidate in candidates {
                matched |= mac.clone().verify_slice(candidate).is_ok();
            }
        }
        if matched {
            Ok(())
        } else {
            Err(Failure::Mismatch)
        }
    }

    /// The tolerance check, after the MAC.
    fn check_time(&self, ts: i64, now_s: i64) -> Result<(), Failure> {
        let skew_s = now_s.saturating_sub(ts);
        if skew_s.unsigned_abs() > self.tolerance_s {
            Err(Failure::Stale {
                skew_s,
                tolerance_s: self.tolerance_s,
            })
        } else {
            Ok(())
        }
    }
}

/// A header value as text: visible ASCII only (else [`Failure::Malformed`]),
/// surrounding spaces and tabs trimmed.
fn text(value: &HeaderValue) -> Result<&str, Failure> {
    value.to_str().map(trim).map_err(|_| Failure::Malformed)
}

/// Trims spaces and tabs.
fn trim(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

/// A Unix timestamp in seconds: ASCII digits only, fitting an i64.
fn parse_timestamp(s: &str) -> Result<i64, Failure> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Failure::Malformed);
    }
    s.parse().map_err(|_| Failure::Malformed)
}

/// `s` without `prefix`, compared ASCII case-insensitively.
fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        s.get(prefix.len()..)
    } else {
        None
    }
}

/// An encoded HMAC-SHA256 tag, or None if it does not decode to 32 bytes.
fn decode_tag(encoding: Encoding, s: &str) -> Option<[u8; TAG_LEN]> {
    let bytes = match encoding {
        Encoding::Hex => decode_hex(s)?,
        Encoding::Base64 => BASE64.decode(s).ok()?,
    };
    bytes.try_into().ok()
}

/// Hex, either case.
fn decode_hex(s: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks_exact(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests;
