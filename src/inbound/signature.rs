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
mod tests {
    use super::*;
    use sha2::Digest as _;

    // ---- an independent HMAC-SHA256 (RFC 2104), from sha2 directly ----

    fn reference_hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
        const BLOCK: usize = 64;
        let mut k = [0u8; BLOCK];
        if key.len() > BLOCK {
            k[..32].copy_from_slice(&sha2::Sha256::digest(key));
        } else {
            k[..key.len()].copy_from_slice(key);
        }
        let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
        let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
        let mut inner = sha2::Sha256::new();
        inner.update(&ipad);
        inner.update(data);
        let inner = inner.finalize();
        let mut outer = sha2::Sha256::new();
        outer.update(&opad);
        outer.update(inner);
        outer.finalize().into()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn verifier(scheme: Scheme, secrets: &[&str]) -> Verifier {
        Verifier {
            secrets: secrets
                .iter()
                .map(|s| Secret::parse(&scheme, s).unwrap())
                .collect(),
            scheme,
            tolerance_s: DEFAULT_TOLERANCE_S,
        }
    }

    // ---- Standard Webhooks ----

    /// The published test vector of the Standard Webhooks spec repository
    /// (libraries/go/webhook_test.go `TestWebhookSign`, and the php, rust...
    /// libraries' equivalents).
    const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SW_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SW_TS: i64 = 1614265330;
    const SW_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SW_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn sw_headers(sig: &str, ts: i64) -> HeaderMap {
        headers(&[
            ("webhook-id", SW_ID),
            ("webhook-timestamp", &ts.to_string()),
            ("webhook-signature", sig),
        ])
    }

    /// A valid `v1,<base64>` for the vector's id under `key` at `ts`.
    fn sw_sign(key: &[u8], ts: i64, body: &[u8]) -> String {
        let mut content = format!("{SW_ID}.{ts}.").into_bytes();
        content.extend_from_slice(body);
        format!("v1,{}", b64(&reference_hmac(key, &content)))
    }

    #[test]
    fn standard_webhooks_published_vector() {
        let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
        assert_eq!(
            v.verify(&sw_headers(SW_SIG, SW_TS), SW_BODY, SW_TS),
            Ok(Some(SW_TS))
        );
        // The independent HMAC agrees with the published value.
        let key = Secret::parse(&Scheme::StandardWebhooks, SW_SECRET)
            .unwrap()
            .0;
        assert_eq!(sw_sign(&key, SW_TS, SW_BODY), SW_SIG);
        // The secret without its whsec_ prefix is the same key.
        let bare = verifier(
            Scheme::StandardWebhooks,
            &["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        );
        assert_eq!(
            bare.verify(&sw_headers(SW_SIG, SW_TS), SW_BODY, SW_TS),
            Ok(Some(SW_TS))
        );
    }

    #[test]
    fn standard_webhooks_rust_library_vector() {
        // libraries/rust/src/lib.rs `test_sign` of the spec repository.
        let v = verifier(
            Scheme::StandardWebhooks,
            &["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"],
        );
        let h = headers(&[
            ("webhook-id", "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk"),
            ("webhook-timestamp", "1649367553"),
            (
                "webhook-signature",
                "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
            ),
        ]);
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        assert_eq!(v.verify(&h, body, 1649367553), Ok(Some(1649367553)));
    }

    #[test]
    fn svix_aliases() {
        let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
        let h = headers(&[
            ("svix-id", SW_ID),
            ("svix-timestamp", "1614265330"),
            ("svix-signature", SW_SIG),
        ]);
        assert_eq!(v.verify(&h, SW_BODY, SW_TS), Ok(Some(SW_TS)));
        // A mix of the two families is not a complete set of either.
        let h = headers(&[
            ("webhook-id", SW_ID),
            ("svix-timestamp", "1614265330"),
            ("webhook-signature", SW_SIG),
        ]);
        assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Missing));
    }

    #[test]
    fn standard_webhooks_missing_each_header() {
        let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
        for name in WEBHOOK_HEADERS {
            let mut h = sw_headers(SW_SIG, SW_TS);
            h.remove(name);
            assert_eq!(
                v.verify(&h, SW_BODY, SW_TS),
                Err(Failure::Missing),
                "{name}"
            );
        }
        assert_eq!(
            v.verify(&HeaderMap::new(), SW_BODY, SW_TS),
            Err(Failure::Missing)
        );
    }

    #[test]
    fn standard_webhooks_malformed() {
        let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
        let at = |ts: &str, sig: &str| {
            headers(&[
                ("webhook-id", SW_ID),
                ("webhook-timestamp", ts),
                ("webhook-signature", sig),
            ])
        };
        for (ts, sig) in [
            ("16142653x0", SW_SIG),
            ("", SW_SIG),
            ("-1614265330", SW_SIG),
            ("+1614265330", SW_SIG),
            ("1614265330.5", SW_SIG),
            ("99999999999999999999999", SW_SIG),
            ("1614265330", ""),
            ("1614265330", "v1,not*base64!"),
            ("1614265330", "v1,bm9wZQ=="), // base64, but 4 bytes, not 32
            ("1614265330", "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
            // only other versions: v1a is ed25519, v2 unknown; never HMAC
            (
                "1614265330",
                "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            ),
        ] {
            assert_eq!(
                v.verify(&at(ts, sig), SW_BODY, SW_TS),
                Err(Failure::Malformed),
                "{ts:?} {sig:?}"
            );
        }
        let mut h = sw_headers(SW_SIG, SW_TS);
        h.insert("webhook-id", HeaderValue::from_static(""));
        assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Malformed));
        let mut h = sw_headers(SW_SIG, SW_TS);
        h.insert("webhook-id", HeaderValue::from_bytes(b"msg_\xe9").unwrap());
        assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Malformed));
    }

    #[test]
    fn standard_webhooks_mismatch() {
        let v = verifier(
            Scheme::StandardWebhooks,
            &["whsec_dGhlIG90aGVyIHNlY3JldCBlbnRpcmVseQ=="],
        );
        assert_eq!(
            v.verify(&sw_headers(SW_SIG, SW_TS), SW_BODY, SW_TS),
            Err(Failure::Mismatch)
        );
        let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
        let mut body = SW_BODY.to_vec();
        body[9] ^= 1;
        assert_eq!(
            v.verify(&sw_headers(SW_SIG, SW_TS), &body, SW_TS),
            Err(Failure::Mismatch)
        );
        // The id and the timestamp are signed too.
        let mut h = sw_headers(SW_SIG, SW_TS + 1);
        assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Mismatch));
        h = sw_headers(SW_SIG, SW_TS);
        h.insert("webhook-id", HeaderValue::from_static("msg_other"));
        assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Mismatch));
        // No secret at all matches nothing.
        let none = Verifier {
            scheme: Scheme::StandardWebhooks,
            secrets: vec![],
            tolerance_s: DEFAULT_TOLERANCE_S,
        };
        assert_eq!(
            none.verify(&sw_headers(SW_SIG, SW_TS), SW_BODY, SW_TS),
            Err(Failure::Mismatch)
        );
    }

    #[test]
    fn standard_webhooks_stale_both_ways_after_the_mac() {
        let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
        let h = sw_headers(SW_SIG, SW_TS);
        assert_eq!(
            v.verify(&h, SW_BODY, SW_TS + 412),
            Err(Failure::Stale {
                skew_s: 412,
                tolerance_s: 300
            })
        );
        assert_eq!(
            v.verify(&h, SW_BODY, SW_TS - 301),
            Err(Failure::Stale {
                skew_s: -301,
                tolerance_s: 300
            })
        );
        // The bounds are inclusive.
        assert_eq!(v.verify(&h, SW_BODY, SW_TS + 300), Ok(Some(SW_TS)));
        assert_eq!(v.verify(&h, SW_BODY, SW_TS - 300), Ok(Some(SW_TS)));
        // A forged request hears "mismatch" whatever its timestamp.
        let forged = sw_headers("v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", SW_TS);
        assert_eq!(
            v.verify(&forged, SW_BODY, SW_TS + 100_000),
            Err(Failure::Mismatch)
        );
        // Extreme clocks do not overflow.
        let far = Verifier {
            tolerance_s: 0,
            ..v.clone()
        };
        assert!(matches!(
            far.verify(&h, SW_BODY, i64::MIN),
            Err(Failure::Stale {
                skew_s: i64::MIN,
                ..
            })
        ));
    }

    #[test]
    fn standard_webhooks_rotation_and_several_signatures() {
        // Rotation: the second secret is the one that signed.
        let v = verifier(
            Scheme::StandardWebhooks,
            &["whsec_dGhlIG90aGVyIHNlY3JldCBlbnRpcmVseQ==", SW_SECRET],
        );
        assert_eq!(
            v.verify(&sw_headers(SW_SIG, SW_TS), SW_BODY, SW_TS),
            Ok(Some(SW_TS))
        );
        // Several signatures, one good among junk, bad base64, other versions.
        let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
        let multi = format!(
            "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1,bm9wZQ== v1,%%% \
             v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg== \
             {SW_SIG}  v2,xyz"
        );
        assert_eq!(
            v.verify(&sw_headers(&multi, SW_TS), SW_BODY, SW_TS),
            Ok(Some(SW_TS))
        );
        // A correct MAC under an unknown version is not accepted.
        let v2 = SW_SIG.replacen("v1,", "v2,", 1);
        let both = format!("{v2} v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=");
        assert_eq!(
            v.verify(&sw_headers(&both, SW_TS), SW_BODY, SW_TS),
            Err(Failure::Mismatch)
        );
        // Base64 without padding is accepted.
        let unpadded = SW_SIG.trim_end_matches('=');
        assert_eq!(
            v.verify(&sw_headers(unpadded, SW_TS), SW_BODY, SW_TS),
            Ok(Some(SW_TS))
        );
    }

    #[test]
    fn the_first_of_several_header_values_counts() {
        let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
        let mut h = sw_headers(SW_SIG, SW_TS);
        h.append("webhook-signature", HeaderValue::from_static("garbage"));
        assert_eq!(v.verify(&h, SW_BODY, SW_TS), Ok(Some(SW_TS)));
        let mut h = sw_headers("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", SW_TS);
        h.append("webhook-signature", HeaderValue::from_static(SW_SIG));
        assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Mismatch));
    }

    // ---- Stripe ----

    const STRIPE_SECRET: &str = "whsec_test_5eCretForStripeSigning";
    const STRIPE_TS: i64 = 1492774577;
    const STRIPE_BODY: &[u8] = br#"{"id":"evt_1","object":"event","type":"charge.succeeded"}"#;

    /// The hex `v1` Stripe sends, from the independent HMAC: the key is the
    /// whole secret text, whsec_ included.
    fn stripe_sign(secret: &str, ts: i64, body: &[u8]) -> String {
        let mut payload = format!("{ts}.").into_bytes();
        payload.extend_from_slice(body);
        hex(&reference_hmac(secret.as_bytes(), &payload))
    }

    fn stripe_headers(value: &str) -> HeaderMap {
        headers(&[("Stripe-Signature", value)])
    }

    #[test]
    fn stripe_independent_vector() {
        let v = verifier(Scheme::Stripe, &[STRIPE_SECRET]);
        let sig = stripe_sign(STRIPE_SECRET, STRIPE_TS, STRIPE_BODY);
        // Test mode also sends a (fake) v0, ignored.
        let header = format!(
            "t={STRIPE_TS},v1={sig},v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"
        );
        assert_eq!(
            v.verify(&stripe_headers(&header), STRIPE_BODY, STRIPE_TS),
            Ok(Some(STRIPE_TS))
        );
        // Upper-case hex decodes the same.
        let upper = format!("t={STRIPE_TS},v1={}", sig.to_uppercase());
        assert_eq!(
            v.verify(&stripe_headers(&upper), STRIPE_BODY, STRIPE_TS),
            Ok(Some(STRIPE_TS))
        );
        // Keying with the base64-decoded part (the Standard Webhooks way) is wrong for Stripe.
        let decoded = BASE64
            .decode("test5eCretForStripeSigning")
            .unwrap_or_default();
        let mut payload = format!("{STRIPE_TS}.").into_bytes();
        payload.extend_from_slice(STRIPE_BODY);
        let wrong = format!(
            "t={STRIPE_TS},v1={}",
            hex(&reference_hmac(&decoded, &payload))
        );
        assert_eq!(
            v.verify(&stripe_headers(&wrong), STRIPE_BODY, STRIPE_TS),
            Err(Failure::Mismatch)
        );
    }

    #[test]
    fn stripe_missing_and_malformed() {
        let v = verifier(Scheme::Stripe, &[STRIPE_SECRET]);
        assert_eq!(
            v.verify(&HeaderMap::new(), STRIPE_BODY, STRIPE_TS),
            Err(Failure::Missing)
        );
        let sig = stripe_sign(STRIPE_SECRET, STRIPE_TS, STRIPE_BODY);
        for value in [
            String::new(),
            format!("v1={sig}"),                         // no t=
            format!("t=14927745x7,v1={sig}"),            // non-numeric t
            format!("t=,v1={sig}"),                      // empty t
            format!("t=-1492774577,v1={sig}"),           // signed t
            format!("t={STRIPE_TS}"),                    // no v1
            format!("t={STRIPE_TS},v0={sig}"),           // v0 only: ignored
            format!("t={STRIPE_TS},v2={sig}"),           // unknown scheme only
            format!("t={STRIPE_TS},v1=zz{}", &sig[2..]), // bad hex
            format!("t={STRIPE_TS},v1={}", &sig[1..]),   // odd length
            format!("t={STRIPE_TS},v1={}", &sig[2..]),   // 31 bytes
            format!("t={STRIPE_TS};v1={sig}"),           // wrong separator
        ] {
            assert_eq!(
                v.verify(&stripe_headers(&value), STRIPE_BODY, STRIPE_TS),
                Err(Failure::Malformed),
                "{value:?}"
            );
        }
        let h = {
            let mut h = HeaderMap::new();
            h.insert(
                "stripe-signature",
                HeaderValue::from_bytes(b"t=1492774577,v1=\xff\xfe").unwrap(),
            );
            h
        };
        assert_eq!(
            v.verify(&h, STRIPE_BODY, STRIPE_TS),
            Err(Failure::Malformed)
        );
    }

    #[test]
    fn stripe_mismatch_stale_rotation_several() {
        let v = verifier(Scheme::Stripe, &[STRIPE_SECRET]);
        let sig = stripe_sign(STRIPE_SECRET, STRIPE_TS, STRIPE_BODY);
        let good = format!("t={STRIPE_TS},v1={sig}");
        // Wrong secret.
        let other = stripe_sign("whsec_another", STRIPE_TS, STRIPE_BODY);
        assert_eq!(
            v.verify(
                &stripe_headers(&format!("t={STRIPE_TS},v1={other}")),
                STRIPE_BODY,
                STRIPE_TS
            ),
            Err(Failure::Mismatch)
        );
        // Body changed by one byte.
        let mut body = STRIPE_BODY.to_vec();
        *body.last_mut().unwrap() = b' ';
        assert_eq!(
            v.verify(&stripe_headers(&good), &body, STRIPE_TS),
            Err(Failure::Mismatch)
        );
        // The timestamp is signed.
        let shifted = format!("t={},v1={sig}", STRIPE_TS + 1);
        assert_eq!(
            v.verify(&stripe_headers(&shifted), STRIPE_BODY, STRIPE_TS),
            Err(Failure::Mismatch)
        );
        // Stale both ways, with the skew.
        assert_eq!(
            v.verify(&stripe_headers(&good), STRIPE_BODY, STRIPE_TS + 412),
            Err(Failure::Stale {
                skew_s: 412,
                tolerance_s: 300
            })
        );
        assert_eq!(
            v.verify(&stripe_headers(&good), STRIPE_BODY, STRIPE_TS - 1000),
            Err(Failure::Stale {
                skew_s: -1000,
                tolerance_s: 300
            })
        );
        // Rotation: the second secret signed.
        let rotated = verifier(Scheme::Stripe, &["whsec_old", STRIPE_SECRET]);
        assert_eq!(
            rotated.verify(&stripe_headers(&good), STRIPE_BODY, STRIPE_TS),
            Ok(Some(STRIPE_TS))
        );
        // Several v1 (Stripe signs with each active secret), one matches;
        // spaces around items and unknown keys are tolerated.
        let several = format!("t={STRIPE_TS}, v1={other}, v1=nothex, v1={sig}, foo=bar, v0={sig}");
        assert_eq!(
            v.verify(&stripe_headers(&several), STRIPE_BODY, STRIPE_TS),
            Ok(Some(STRIPE_TS))
        );
        // The first t counts.
        let two_t = format!("t={STRIPE_TS},t=1,v1={sig}");
        assert_eq!(
            v.verify(&stripe_headers(&two_t), STRIPE_BODY, STRIPE_TS),
            Ok(Some(STRIPE_TS))
        );
    }

    // ---- GitHub ----

    /// GitHub's documented example ("Validating webhook deliveries").
    const GH_SECRET: &str = "It's a Secret to Everybody";
    const GH_BODY: &[u8] = b"Hello, World!";
    const GH_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn github_documented_example() {
        let v = verifier(Scheme::GitHub, &[GH_SECRET]);
        let h = headers(&[("X-Hub-Signature-256", GH_SIG)]);
        assert_eq!(v.verify(&h, GH_BODY, 0), Ok(None));
        assert_eq!(
            format!(
                "sha256={}",
                hex(&reference_hmac(GH_SECRET.as_bytes(), GH_BODY))
            ),
            GH_SIG
        );
        let upper = format!("sha256={}", GH_SIG[7..].to_uppercase());
        assert_eq!(
            v.verify(&headers(&[("x-hub-signature-256", &upper)]), GH_BODY, 0),
            Ok(None)
        );
    }

    #[test]
    fn github_failures() {
        let v = verifier(Scheme::GitHub, &[GH_SECRET]);
        // The SHA-1 header is not accepted.
        let sha1 = headers(&[(
            "X-Hub-Signature",
            "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59",
        )]);
        assert_eq!(v.verify(&sha1, GH_BODY, 0), Err(Failure::Missing));
        for value in [
            "",
            &GH_SIG[7..], // no prefix
            "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1g",
            "sha256=",
        ] {
            assert_eq!(
                v.verify(&headers(&[("X-Hub-Signature-256", value)]), GH_BODY, 0),
                Err(Failure::Malformed),
                "{value:?}"
            );
        }
        let wrong = verifier(Scheme::GitHub, &["It's a Secret to Nobody"]);
        let h = headers(&[("X-Hub-Signature-256", GH_SIG)]);
        assert_eq!(wrong.verify(&h, GH_BODY, 0), Err(Failure::Mismatch));
        assert_eq!(v.verify(&h, b"Hello, World?", 0), Err(Failure::Mismatch));
        let rotated = verifier(Scheme::GitHub, &["old one", GH_SECRET]);
        assert_eq!(rotated.verify(&h, GH_BODY, 0), Ok(None));
    }

    // ---- plain HMAC ----

    fn hmac_scheme(encoding: Encoding, prefix: &str) -> Scheme {
        Scheme::Hmac(HmacScheme {
            header: "X-Signature".to_string(),
            encoding,
            prefix: prefix.to_string(),
        })
    }

    #[test]
    fn hmac_hex_and_base64() {
        let body = b"{\"n\":1}";
        let tag = reference_hmac(b"k3y", body);
        let hex_v = verifier(hmac_scheme(Encoding::Hex, ""), &["k3y"]);
        assert_eq!(
            hex_v.verify(&headers(&[("x-signature", &hex(&tag))]), body, 0),
            Ok(None)
        );
        let prefixed = verifier(hmac_scheme(Encoding::Hex, "sha256="), &["k3y"]);
        let value = format!("sha256={}", hex(&tag));
        assert_eq!(
            prefixed.verify(&headers(&[("X-SIGNATURE", &value)]), body, 0),
            Ok(None)
        );
        assert_eq!(
            prefixed.verify(&headers(&[("X-Signature", &hex(&tag))]), body, 0),
            Err(Failure::Malformed)
        );
        let b64_v = verifier(hmac_scheme(Encoding::Base64, ""), &["k3y"]);
        let padded = b64(&tag);
        let unpadded = padded.trim_end_matches('=').to_string();
        for value in [&padded, &unpadded] {
            assert_eq!(
                b64_v.verify(&headers(&[("X-Signature", value)]), body, 0),
                Ok(None)
            );
        }
        // Hex where base64 is expected is malformed (64 hex digits decode to 48 bytes).
        assert_eq!(
            b64_v.verify(&headers(&[("X-Signature", &hex(&tag))]), body, 0),
            Err(Failure::Malformed)
        );
        assert_eq!(
            b64_v.verify(&headers(&[("X-Signature", &padded)]), b"{\"n\":2}", 0),
            Err(Failure::Mismatch)
        );
        assert_eq!(
            b64_v.verify(&headers(&[("X-Other", &padded)]), body, 0),
            Err(Failure::Missing)
        );
        // A header name that cannot exist is simply missing.
        let odd = verifier(
            Scheme::Hmac(HmacScheme {
                header: "bad header\n".to_string(),
                encoding: Encoding::Hex,
                prefix: String::new(),
            }),
            &["k3y"],
        );
        assert_eq!(
            odd.verify(&HeaderMap::new(), body, 0),
            Err(Failure::Missing)
        );
    }

    // ---- no panics on garbage ----

    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn bytes(&mut self, alphabet: Option<&[u8]>) -> Vec<u8> {
            let len = (self.next() % 90) as usize;
            (0..len)
                .map(|_| match alphabet {
                    Some(a) => a[(self.next() % a.len() as u64) as usize],
                    None => self.next() as u8,
                })
                .collect()
        }
    }

    #[test]
    fn garbage_never_panics() {
        let schemes = [
            verifier(Scheme::StandardWebhooks, &[SW_SECRET]),
            verifier(Scheme::Stripe, &[STRIPE_SECRET]),
            verifier(Scheme::GitHub, &[GH_SECRET]),
            verifier(hmac_scheme(Encoding::Hex, "sha256="), &["k"]),
            verifier(hmac_scheme(Encoding::Base64, ""), &["k"]),
        ];
        let names = [
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
            "svix-id",
            "svix-timestamp",
            "svix-signature",
            "stripe-signature",
            "x-hub-signature-256",
            "x-signature",
        ];
        let structured: &[u8] = b"tv1a0=,. \t+/whsec_sha256=ABCdef0123456789-9\xc3\xa9";
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let mut seen = std::collections::BTreeSet::new();
        for round in 0..3000u32 {
            let mut h = HeaderMap::new();
            for name in names {
                if rng.next().is_multiple_of(4) {
                    continue;
                }
                let mut bytes = if round.is_multiple_of(2) {
                    rng.bytes(Some(structured))
                } else {
                    rng.bytes(None)
                };
                // Keep what a header value may hold (obs-text included).
                bytes.retain(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f));
                h.append(name, HeaderValue::from_bytes(&bytes).unwrap());
            }
            let body = rng.bytes(None);
            let now = rng.next() as i64;
            for v in &schemes {
                if let Err(f) = v.verify(&h, &body, now) {
                    assert!(!f.detail(&v.scheme).is_empty());
                    seen.insert(f.reason());
                }
            }
        }
        assert!(
            seen.contains("missing") && seen.contains("malformed"),
            "{seen:?}"
        );
    }

    // ---- secrets ----

    #[test]
    fn secret_parse_per_scheme() {
        let sw = Secret::parse(
            &Scheme::StandardWebhooks,
            "  whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
        )
        .unwrap();
        let bare = Secret::parse(
            &Scheme::StandardWebhooks,
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )
        .unwrap();
        assert_eq!(sw.0, bare.0);
        assert_eq!(sw.0.len(), 24);
        let err = Secret::parse(&Scheme::StandardWebhooks, "whsec_not*base64").unwrap_err();
        assert!(!err.contains("not*base64"), "{err}");
        assert!(Secret::parse(&Scheme::StandardWebhooks, "whsec_").is_err());
        for scheme in [
            Scheme::StandardWebhooks,
            Scheme::Stripe,
            Scheme::GitHub,
            hmac_scheme(Encoding::Hex, ""),
        ] {
            assert!(Secret::parse(&scheme, "").is_err());
            assert!(Secret::parse(&scheme, " \t\n").is_err());
        }
        assert_eq!(
            Secret::parse(&Scheme::Stripe, " whsec_abc ").unwrap().0,
            b"whsec_abc"
        );
        assert_eq!(
            Secret::parse(&Scheme::GitHub, GH_SECRET).unwrap().0,
            GH_SECRET.as_bytes()
        );
        assert_eq!(
            Secret::parse(&hmac_scheme(Encoding::Base64, ""), "whsec_abc")
                .unwrap()
                .0,
            b"whsec_abc"
        );
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let s = Secret::parse(&Scheme::GitHub, "hunter2").unwrap();
        assert_eq!(format!("{s:?}"), "Secret(..)");
        let v = verifier(Scheme::GitHub, &["hunter2"]);
        let shown = format!("{v:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("104, 117"),
            "{shown}"
        );
    }

    #[test]
    fn secrets_from_environment_text() {
        let origin = Origin::Env("STREAMFORGE_TEST_SECRETS");
        let got = from_text(
            &Scheme::StandardWebhooks,
            &format!(
                " {SW_SECRET},whsec_dGhlIG90aGVyIHNlY3JldCBlbnRpcmVseQ==\n\tMfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,"
            ),
            &origin,
        )
        .unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0, got[2].0);
        let text = format!("{SW_SECRET} whsec_s3cr3t!");
        let err = from_text(&Scheme::StandardWebhooks, &text, &origin).unwrap_err();
        assert!(err.contains("STREAMFORGE_TEST_SECRETS"), "{err}");
        assert!(err.contains("secret 2"), "{err}");
        assert!(!err.contains("s3cr3t"), "{err}");
        let err = from_text(&Scheme::Stripe, " , \n", &origin).unwrap_err();
        assert!(err.contains("STREAMFORGE_TEST_SECRETS"), "{err}");
    }

    #[test]
    fn secrets_from_a_file() {
        let path = std::env::temp_dir().join(format!(
            "streamforge-signature-test-{}.secrets",
            std::process::id()
        ));
        std::fs::write(
            &path,
            "# current\nIt's a Secret to Everybody\r\n\n   \n  # previous, until Friday\n  old secret  \n",
        )
        .unwrap();
        let got = load_secrets(&Scheme::GitHub, None, Some(&path)).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, GH_SECRET.as_bytes());
        assert_eq!(got[1].0, b"old secret");
        // A whole line is one secret: the GitHub example (with spaces) verifies.
        let v = Verifier {
            scheme: Scheme::GitHub,
            secrets: got,
            tolerance_s: DEFAULT_TOLERANCE_S,
        };
        assert_eq!(
            v.verify(&headers(&[("X-Hub-Signature-256", GH_SIG)]), GH_BODY, 0),
            Ok(None)
        );

        std::fs::write(&path, "# nothing here\n\n").unwrap();
        let err = load_secrets(&Scheme::GitHub, None, Some(&path)).unwrap_err();
        assert!(err.contains(&path.display().to_string()), "{err}");

        std::fs::write(
            &path,
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\nwhsec_t0p*secret\n",
        )
        .unwrap();
        let err = load_secrets(&Scheme::StandardWebhooks, None, Some(&path)).unwrap_err();
        assert!(
            err.contains("line 2") && err.contains(&path.display().to_string()),
            "{err}"
        );
        assert!(!err.contains("t0p"), "{err}");

        std::fs::remove_file(&path).unwrap();
        let err = load_secrets(&Scheme::GitHub, None, Some(&path)).unwrap_err();
        assert!(err.contains(&path.display().to_string()), "{err}");
    }

    #[test]
    fn load_secrets_wants_exactly_one_source() {
        let var = "STREAMFORGE_SIGNATURE_TEST_NEVER_SET_7f3a";
        let err = load_secrets(&Scheme::Stripe, Some(var), None).unwrap_err();
        assert!(err.contains(var), "{err}");
        assert!(load_secrets(&Scheme::Stripe, None, None).is_err());
        let path = std::env::temp_dir().join("x");
        assert!(load_secrets(&Scheme::Stripe, Some(var), Some(&path)).is_err());
    }

    // ---- the rest of the API ----

    #[test]
    fn reasons_and_details() {
        let stale = Failure::Stale {
            skew_s: -412,
            tolerance_s: 300,
        };
        let all = [
            Failure::Missing,
            Failure::Malformed,
            stale.clone(),
            Failure::Mismatch,
        ];
        let reasons: Vec<_> = all.iter().map(Failure::reason).collect();
        assert_eq!(reasons, ["missing", "malformed", "stale", "mismatch"]);
        assert_eq!(
            Failure::Missing.detail(&Scheme::Stripe),
            "the Stripe-Signature header is missing"
        );
        assert_eq!(
            Failure::Mismatch.detail(&Scheme::Stripe),
            "no v1 signature in Stripe-Signature matches the source's secret(s)"
        );
        assert_eq!(
            stale.detail(&Scheme::StandardWebhooks),
            "the signature's timestamp is 412 s away from the server's clock (tolerance 300 s)"
        );
        assert_eq!(
            Failure::Missing.detail(&hmac_scheme(Encoding::Hex, "")),
            "the X-Signature header is missing"
        );
        assert!(Failure::Missing
            .detail(&Scheme::GitHub)
            .contains("X-Hub-Signature-256"));
        assert!(Failure::Malformed
            .detail(&Scheme::StandardWebhooks)
            .contains("webhook-signature"));
    }

    #[test]
    fn signature_header_names() {
        let names = |scheme: Scheme| verifier(scheme, &[]).signature_headers();
        assert_eq!(
            names(Scheme::StandardWebhooks),
            [
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "svix-id",
                "svix-timestamp",
                "svix-signature"
            ]
        );
        assert_eq!(names(Scheme::Stripe), ["stripe-signature"]);
        assert_eq!(names(Scheme::GitHub), ["x-hub-signature-256"]);
        assert_eq!(names(hmac_scheme(Encoding::Hex, "")), ["x-signature"]);
    }

    #[test]
    fn schemes_round_trip_through_serde() {
        for scheme in [
            Scheme::StandardWebhooks,
            Scheme::Stripe,
            Scheme::GitHub,
            hmac_scheme(Encoding::Base64, "sha256="),
        ] {
            let json = serde_json::to_string(&scheme).unwrap();
            assert_eq!(serde_json::from_str::<Scheme>(&json).unwrap(), scheme);
        }
        let hmac: Scheme =
            serde_json::from_str(r#"{"Hmac":{"header":"X-Sig","encoding":"Hex"}}"#).unwrap();
        assert_eq!(
            hmac,
            Scheme::Hmac(HmacScheme {
                header: "X-Sig".into(),
                encoding: Encoding::Hex,
                prefix: String::new()
            })
        );
    }

    #[test]
    fn rfc_4231_case_2_for_the_reference_hmac() {
        assert_eq!(
            hex(&reference_hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // RFC 4231 case 6: a key longer than the block is hashed first.
        assert_eq!(
            hex(&reference_hmac(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
        // And the crate's HMAC agrees with it.
        let mut mac = HmacSha256::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            mac.finalize().into_bytes().as_slice(),
            reference_hmac(b"Jefe", b"what do ya want for nothing?")
        );
    }
}
