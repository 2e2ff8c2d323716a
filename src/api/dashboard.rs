//! `GET /`: the live dashboard, one self-contained page (HTML, CSS and
//! JavaScript in `assets/dashboard.html`, embedded at build time; no CDN,
//! no build step, works offline).
//!
//! The page itself is public (it holds no data): it asks for the bearer
//! token when a data route answers 401 and keeps it in `sessionStorage`.
//! Every data route it reads (`/changes/stream`, `/status`, `/late`,
//! `/pipeline`) still requires the token. With `?server=URL` it reads
//! another origin's API, which that server must allow with `--cors-origin`.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The page, served verbatim.
pub const DASHBOARD_HTML: &str = include_str!("../../assets/dashboard.html");

/// The page's Content-Security-Policy: inline script and style only, no
/// frames, fetches and the event stream to any http(s) origin (`?server=`).
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; img-src data:; connect-src 'self' http: https:; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /`.
pub async fn get_dashboard() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        DASHBOARD_HTML,
    )
        .into_response()
}
