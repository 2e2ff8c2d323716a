//! The `signature` of a source's declaration: its scheme, tolerance and
//! where its secrets are read (loaded, when asked, into the verifier of
//! `inbound/signature.rs`).

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::checks::{object, unknown};
use super::types::{Secrets, SecretsFrom, Signature};
use crate::inbound::signature::{load_secrets, Encoding, HmacScheme, Scheme, Verifier};

/// A source's `signature` at `path`, every mistake in `errs`.
pub(super) fn signature(
    v: &Value,
    path: &str,
    secrets: Secrets,
    errs: &mut Vec<String>,
) -> Option<Signature> {
    let m = object(v, path, errs)?;
    let before = errs.len();
    let scheme_name = m.get("scheme").and_then(Value::as_str).unwrap_or("");
    // Only the schemes that sign a timestamp have a tolerance.
    let known: &[&str] = match scheme_name {
        "hmac" => &[
            "scheme",
            "secret_env",
            "secret_file",
            "header",
            "encoding",
            "prefix",
        ],
        "github" => &["scheme", "secret_env", "secret_file"],
        _ => &["scheme", "secret_env", "secret_file", "tolerance_s"],
    };
    for k in m.keys() {
        if k == "secret" || k == "secrets" {
            errs.push(format!(
                "{path}.{k}: secrets never go in the pipeline file (it is shown by GET /pipeline): name an environment variable (secret_env) or a file (secret_file)"
            ));
        }
    }
    unknown(m, known, path, errs);
    let scheme = scheme(m, scheme_name, path, errs);
    let tolerance_s = match m.get("tolerance_s") {
        None => 300,
        Some(v) => match v.as_u64() {
            Some(t) if t > 0 => t,
            _ => {
                errs.push(format!(
                    "{path}.tolerance_s: expected an integer > 0 (seconds), got {v}"
                ));
                0
            }
        },
    };
    let env = m.get("secret_env");
    let file = m.get("secret_file");
    let origin = match (env, file) {
        (Some(Value::String(e)), None) if !e.is_empty() => Some((Some(e.clone()), None)),
        (None, Some(Value::String(f))) if !f.is_empty() => Some((None, Some(PathBuf::from(f)))),
        _ => {
            errs.push(format!(
                "{path}: exactly one of secret_env (an environment variable holding the secret) and secret_file (a file holding it), each a non-empty string"
            ));
            None
        }
    };
    if errs.len() != before {
        return None;
    }
    let (scheme, (env, file)) = (scheme?, origin?);
    let secrets_from = match (&env, &file) {
        (Some(e), _) => SecretsFrom::Env(e.clone()),
        (_, Some(f)) => SecretsFrom::File(f.clone()),
        _ => return None,
    };
    let verifier = match secrets {
        Secrets::Skip => None,
        Secrets::Load => match load_secrets(&scheme, env.as_deref(), file.as_deref()) {
            Ok(keys) => Some(Verifier {
                scheme: scheme.clone(),
                secrets: keys,
                tolerance_s,
            }),
            Err(e) => {
                errs.push(format!("{path}: {e}"));
                return None;
            }
        },
    };
    Some(Signature {
        verifier,
        scheme,
        secrets_from,
    })
}

/// The scheme a `signature` declaration names (`scheme_name`: its
/// `"scheme"`, or "").
fn scheme(
    m: &Map<String, Value>,
    scheme_name: &str,
    path: &str,
    errs: &mut Vec<String>,
) -> Option<Scheme> {
    match scheme_name {
        "standard_webhooks" => Some(Scheme::StandardWebhooks),
        "stripe" => Some(Scheme::Stripe),
        "github" => Some(Scheme::GitHub),
        "hmac" => hmac_scheme(m, path, errs),
        _ => {
            errs.push(format!(
                "{path}.scheme: expected one of standard_webhooks, stripe, github, hmac, got {}",
                m.get("scheme")
                    .map_or("nothing".to_string(), Value::to_string)
            ));
            None
        }
    }
}

/// A plain HMAC's header, encoding and prefix.
fn hmac_scheme(m: &Map<String, Value>, path: &str, errs: &mut Vec<String>) -> Option<Scheme> {
    let header = match m.get("header") {
        Some(Value::String(h)) if axum::http::HeaderName::from_bytes(h.as_bytes()).is_ok() => {
            Some(h.to_ascii_lowercase())
        }
        other => {
            errs.push(format!(
                "{path}.header: expected the name of the header holding the signature, got {}",
                other.map_or("nothing".to_string(), Value::to_string)
            ));
            None
        }
    };
    let encoding = match m.get("encoding").and_then(Value::as_str) {
        Some("hex") | None => Some(Encoding::Hex),
        Some("base64") => Some(Encoding::Base64),
        Some(other) => {
            errs.push(format!(
                "{path}.encoding: expected \"hex\" or \"base64\", got {other:?}"
            ));
            None
        }
    };
    let prefix = match m.get("prefix") {
        None => Some(String::new()),
        Some(Value::String(p)) => Some(p.clone()),
        Some(other) => {
            errs.push(format!("{path}.prefix: expected a string, got {other}"));
            None
        }
    };
    match (header, encoding, prefix) {
        (Some(header), Some(encoding), Some(prefix)) => Some(Scheme::Hmac(HmacScheme {
            header,
            encoding,
            prefix,
        })),
        _ => None,
    }
}
