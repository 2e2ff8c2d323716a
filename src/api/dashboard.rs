//! `GET /`: the live dashboard, one self-contained page (HTML, CSS and
//! JavaScript in `assets/dashboard.html`, embedded at build time; no CDN,
//! no build step, works offline).
//!
//! The page itself is public (it holds no data): it asks for the bearer
//! token when a data route answers 401 and keeps it in `sessionStorage`.
//! Every data route it reads (`/changes`, `/changes/stream`, `/results`,
//! `/status`, `/late`, `/pipeline`, and the pattern engine's `/patterns`,
//! `/patterns/output`, `/patterns/output/stream`, `/patterns/status`) still
//! requires the token. With `?server=URL` it reads
//! another origin's API, which that server must allow with `--cors-origin`.
//!
//! `server` may repeat (`?server=URL&server=URL2`): the page then reads
//! several instances of a cluster (docs/cluster.md), each with its own
//! streams and cursors (last sequence and epoch) and its own token (kept
//! per server URL), and merges them: the result table is the union of
//! their rows, each tagged with its instance (a restore of one instance
//! replaces only its rows); late events and pattern output are merged
//! newest first and tagged; the watermark shown is the lowest of theirs,
//! with each one's in the tooltip; counts are summed; the connection pill
//! shows the worst stream. Every `server` must be an http(s) URL (400
//! otherwise). With one server the page is as without several.

use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::extract::QueryParams;

/// The page, served verbatim.
pub const DASHBOARD_HTML: &str = include_str!("../../assets/dashboard.html");

/// The page's Content-Security-Policy: inline script and style only, no
/// frames, fetches and the event streams to any http(s) origin (`?server=`).
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; img-src data:; connect-src 'self' http: https:; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Whether `s` is an absolute `http(s)://host...` URL (`?server=`): it
/// starts with `http://` or `https://` as written (the document's pattern
/// `^https?://`; the URL parser alone would also take `HTTP://x` or a
/// leading space) and parses as a WHATWG URL with a host, as the page's
/// `new URL(...)` reads it (so an internationalized host is fine).
fn is_server_url(s: &str) -> bool {
    (s.starts_with("http://") || s.starts_with("https://"))
        && reqwest::Url::parse(s)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
}

/// `GET /` (`?server=URL`: read another server's API; repeated, read
/// several instances). Every `server` must be an http(s) URL.
pub async fn get_dashboard(q: QueryParams) -> Result<Response, ApiError> {
    for (_, server) in q.0.iter().filter(|(k, _)| k == "server") {
        if !is_server_url(server) {
            return Err(ApiError::bad_request(format!(
                "server must be an absolute http:// or https:// URL, got {server:?}"
            )));
        }
    }
    Ok(page())
}

fn page() -> Response {
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

#[cfg(test)]
mod tests {
    use super::is_server_url;

    #[test]
    fn server_must_be_an_http_url() {
        for ok in [
            "http://127.0.0.1:8080",
            "https://sf.example.com/",
            "http://[::1]:9/",
            "https://\u{cf}",
            "https://bücher.example/api",
        ] {
            assert!(is_server_url(ok), "{ok}");
        }
        for bad in [
            "",
            "127.0.0.1:8080",
            "javascript:alert(1)",
            "ftp://x/",
            "http://",
            "not a url",
            "not-a-uri",
            "HTTP://127.0.0.1:8080",
            " http://127.0.0.1:8080",
            "\thttp://127.0.0.1:8080",
            "//127.0.0.1:8080",
        ] {
            assert!(!is_server_url(bad), "{bad}");
        }
    }
}
