//! A small blocking HTTP client for the API: base URL, bearer token, and
//! every non-2xx answer turned into a [`CallError`] that carries the
//! problem's `detail` (and `index` for batches).

use clap::Args;
use std::fmt;
use std::time::Duration;

use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;

use super::wire::Problem;

/// Where the service is.
#[derive(Debug, Clone, Args)]
pub struct Conn {
    /// Base URL of the service.
    #[arg(long, env = "STREAMFORGE_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Bearer token, when the service requires one.
    #[arg(long, env = "STREAMFORGE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// The server answered with an RFC 9457 problem.
    Problem(Problem),
    /// The server answered non-2xx without a readable problem.
    Status {
        /// HTTP status.
        status: u16,
        /// The body (possibly empty).
        body: String,
    },
    /// No connection to the service could be made: nothing was sent.
    Connect(String),
    /// The request was sent but got no answer (timeout, connection cut),
    /// or the answer was not what docs/api.md describes.
    Transport(String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Problem(p) => {
                let what = if p.detail.is_empty() {
                    &p.title
                } else {
                    &p.detail
                };
                write!(f, "{what} ({} {})", p.status, p.code)?;
                if let Some(i) = p.index {
                    write!(f, " at batch index {i}")?;
                }
                if p.status == 401 {
                    f.write_str(
                        "; give the service's token with --token or the STREAMFORGE_TOKEN \
                         environment variable",
                    )?;
                }
                Ok(())
            }
            CallError::Status { status, body } if body.trim().is_empty() => {
                write!(f, "HTTP {status}")
            }
            CallError::Status { status, body } => write!(f, "HTTP {status}: {}", body.trim()),
            CallError::Connect(e) | CallError::Transport(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for CallError {}

/// The API at one base URL.
pub struct Api {
    base: Url,
    token: Option<String>,
    client: Client,
    /// Sent as `Prefer` with every POST (`return=minimal`: counts instead
    /// of records in the answers of /events, /watermarks and idle).
    prefer: Option<&'static str>,
}

impl Api {
    /// A client for `conn`. `timeout` bounds each whole call (`None`: calls
    /// end on their own; long polls end within 30 s by the API's limit).
    pub fn new(conn: &Conn, timeout: Option<Duration>) -> anyhow::Result<Api> {
        let mut base = Url::parse(&conn.url)
            .map_err(|e| anyhow::anyhow!("invalid --url {:?}: {e}", conn.url))?;
        if base.cannot_be_a_base() {
            anyhow::bail!("invalid --url {:?}: not an http(s) base URL", conn.url);
        }
        // Paths are joined segment by segment below; a trailing slash would
        // leave an empty segment.
        if let Ok(mut segs) = base.path_segments_mut() {
            segs.pop_if_empty();
        }
        let client = Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(timeout)
            .build()?;
        Ok(Api {
            base,
            token: conn.token.clone().filter(|t| !t.is_empty()),
            client,
            prefer: None,
        })
    }

    /// Asks for minimal answers (`Prefer: return=minimal`) on every POST.
    pub fn minimal(mut self) -> Api {
        self.prefer = Some("return=minimal");
        self
    }

    /// The URL of `segments` (each percent-encoded) under the base.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segs) = url.path_segments_mut() {
            segs.extend(segments);
        }
        url
    }

    fn request(&self, method: Method, url: Url) -> RequestBuilder {
        let rb = self.client.request(method, url);
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// Sends and turns any non-2xx answer into a [`CallError`].
    pub fn send(&self, rb: RequestBuilder) -> Result<Response, CallError> {
        let resp = rb.send().map_err(|e| {
            let url = e.url().map_or(String::new(), |u| format!(" {u}"));
            if e.is_connect() {
                CallError::Connect(format!(
                    "cannot connect to{url}: {}; is `streamforge serve` running at that \
                     address (--url, STREAMFORGE_URL)?",
                    root_cause(&e)
                ))
            } else {
                CallError::Transport(format!("request to{url} failed: {}", root_cause(&e)))
            }
        })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let body = resp.text().map_err(|e| {
            CallError::Transport(format!(
                "HTTP {status} from {}, whose answer could not be read: {}",
                self.base,
                root_cause(&e)
            ))
        })?;
        Err(match serde_json::from_str::<Problem>(&body) {
            Ok(p) => CallError::Problem(p),
            Err(_) => CallError::Status { status, body },
        })
    }

    /// GET `segments` with a query; the body as text.
    pub fn get_text(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<String, CallError> {
        let rb = self.request(Method::GET, self.url(segments)).query(query);
        text(self.send(rb)?)
    }

    /// GET `segments` with a query, parsed as `T`.
    pub fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<T, CallError> {
        parse(&self.get_text(segments, query)?)
    }

    /// POST a body with a content type (`None`: no body); the answer as text.
    pub fn post_text(
        &self,
        segments: &[&str],
        content_type: &str,
        body: Option<Vec<u8>>,
    ) -> Result<String, CallError> {
        self.post_keyed(segments, content_type, body, None)
    }

    /// [`Api::post_text`] with an `Idempotency-Key` header (pattern pushes
    /// and advances): a retry with the same key and body is answered with
    /// the first answer, nothing applied twice. With a key, a call that got
    /// no answer (or found its key still in progress) is sent again, up to
    /// 5 times, 0.2 s to 3.2 s apart.
    pub fn post_keyed(
        &self,
        segments: &[&str],
        content_type: &str,
        body: Option<Vec<u8>>,
        key: Option<&str>,
    ) -> Result<String, CallError> {
        let Some(key) = key else {
            return self.post_once(segments, content_type, body, None);
        };
        let mut delay = Duration::from_millis(200);
        let mut tries = 1;
        loop {
            match self.post_once(segments, content_type, body.clone(), Some(key)) {
                Err(CallError::Transport(_)) if tries < 5 => {}
                Err(CallError::Problem(p)) if tries < 5 && p.code == "idempotency_key_in_use" => {}
                other => return other,
            }
            // a back-off between attempts, not a wait for a condition
            std::thread::sleep(delay);
            delay *= 2;
            tries += 1;
        }
    }

    fn post_once(
        &self,
        segments: &[&str],
        content_type: &str,
        body: Option<Vec<u8>>,
        key: Option<&str>,
    ) -> Result<String, CallError> {
        let mut rb = self.request(Method::POST, self.url(segments));
        if let Some(k) = key {
            rb = rb.header("idempotency-key", k);
        }
        if let Some(p) = self.prefer {
            rb = rb.header("prefer", p);
        }
        if let Some(body) = body {
            rb = rb.header(CONTENT_TYPE, content_type).body(body);
        }
        text(self.send(rb)?)
    }

    /// POST a file as the body, streamed from disk (a checkpoint of any
    /// size); the answer as text.
    pub fn post_file(
        &self,
        segments: &[&str],
        content_type: &str,
        file: std::fs::File,
        len: u64,
    ) -> Result<String, CallError> {
        let rb = self
            .request(Method::POST, self.url(segments))
            .header(CONTENT_TYPE, content_type)
            .body(reqwest::blocking::Body::sized(file, len));
        text(self.send(rb)?)
    }

    /// GET `segments` with a query and extra headers; the open response
    /// (server-sent events are read from it as they come).
    pub fn get_response(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
        headers: &[(&str, String)],
    ) -> Result<Response, CallError> {
        let mut rb = self.request(Method::GET, self.url(segments)).query(query);
        for (k, v) in headers {
            rb = rb.header(*k, v);
        }
        self.send(rb)
    }

    /// DELETE `segments` (the answer's body is not needed).
    pub fn delete(&self, segments: &[&str]) -> Result<(), CallError> {
        self.send(self.request(Method::DELETE, self.url(segments)))
            .map(drop)
    }

    /// GET `segments`; the body as bytes (checkpoint envelopes).
    pub fn get_bytes(&self, segments: &[&str]) -> Result<Vec<u8>, CallError> {
        let resp = self.send(self.request(Method::GET, self.url(segments)))?;
        resp.bytes()
            .map(|b| b.to_vec())
            .map_err(|e| CallError::Transport(format!("reading the answer: {}", root_cause(&e))))
    }
}

/// Parses an answer body as `T`.
pub fn parse<T: DeserializeOwned>(body: &str) -> Result<T, CallError> {
    serde_json::from_str(body)
        .map_err(|e| CallError::Transport(format!("unexpected answer ({e}): {}", clip(body))))
}

fn text(resp: Response) -> Result<String, CallError> {
    resp.text()
        .map_err(|e| CallError::Transport(format!("reading the answer: {}", root_cause(&e))))
}

/// The innermost cause of an error: reqwest's own message ("error sending
/// request") hides the useful part ("Connection refused").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    let mut msg = e.to_string();
    while let Some(next) = cur.source() {
        msg = next.to_string();
        cur = next;
    }
    msg
}

fn clip(s: &str) -> &str {
    match s.char_indices().nth(200) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
