//! The dashboard at `GET /`, end to end in headless Chromium.
//!
//! The browser is driven over WebDriver (`chromedriver`, Debian's
//! `chromium-driver`) with the blocking reqwest client the other
//! real-process tests use: a dozen JSON commands, no extra crate. The
//! page's state is read back from the DOM as text lines such as
//! `tumbling_10s sensor-a [30000,40000) c=3 s=15 revisable`, polled until a
//! condition holds or the deadline passes (no fixed sleeps).
//!
//! The pattern part reads the same way: each match or timeout as one line
//! such as `matched rising_payments key acct-1 09:00:01..09:00:03 by
//! 09:10:01 | login: login@09:00:01 ok: true | pay: ...`, built from what
//! the page shows (type in words, stage names, kinds, times, fields).
//!
//! The tests skip, saying so on stderr, only when `chromium` or
//! `chromedriver` is not installed; `.ci/run` installs both. The screenshot,
//! taken on the shipped `pipelines/default.json` with epoch-millisecond
//! times, goes to `target/dashboard.png` (and to `docs/dashboard.png` with
//! `STREAMFORGE_UPDATE_SCREENSHOT=1`); one of the pattern part with its
//! output goes to `target/dashboard-patterns.png` (and paged back to its
//! first record, after the end of the input, to
//! `target/dashboard-patterns-paged.png`), one of a page reading two
//! instances to `target/dashboard-instances.png`.

use crate::support::server;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use server::*;

/// Windows, sessions and a lateness that keeps recent windows correctable.
const PIPELINE: &str = r#"{
  "partitions": ["p0", "p1"],
  "windows": {
    "tumbling_10s": {"kind": "fixed", "size": 10000},
    "session_3s": {"kind": "session", "gap": 3000}
  },
  "lateness": 10000
}"#;

const TOKEN: &str = "dash-secret";

/// The key under which WebDriver returns an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The result table as text lines (live and struck-through rows).
const ROWS_JS: &str = r#"
return [...document.querySelectorAll('#results tbody tr[data-state]')].map(tr => {
  const c = (n) => tr.querySelector('[data-col=' + n + ']').textContent;
  return `${tr.dataset.window} ${tr.dataset.key} [${tr.dataset.start},${tr.dataset.end}) c=${c('count')} s=${c('sum')} ${tr.dataset.state}`;
});"#;

/// The pattern output as text lines, newest first, from what the page
/// shows: type, pattern, key, times, then each stage with its events.
const PATTERNS_JS: &str = r#"
return [...document.querySelectorAll('#p-list article.pm')].map(a => {
  const t = (n) => a.querySelector('.pm-times [data-col=' + n + ']').textContent;
  const stages = [];
  for (const tr of a.querySelectorAll('table.caps tr')) {
    let ev = 'none';
    if (!tr.classList.contains('none')) {
      const c = (n) => tr.querySelector('[data-col=' + n + ']').textContent;
      ev = c('kind') + '@' + c('time') + (c('fields') ? ' ' + c('fields') : '');
    }
    if (tr.classList.contains('first')) stages.push({ s: tr.querySelector('.stage').textContent, evs: [ev] });
    else stages[stages.length - 1].evs.push(ev);
  }
  return `${a.querySelector('.tag').textContent} ${a.querySelector('.pm-pattern').textContent} ` +
    `${a.querySelector('.pm-key').textContent} ${t('start')}..${t('end')} by ${t('deadline')}` +
    stages.map(x => ` | ${x.s}: ${x.evs.join('; ')}`).join('');
});"#;

/// The pattern output as `seq type id` lines, newest first (data attributes).
const PATTERN_IDS_JS: &str = r#"
return [...document.querySelectorAll('#p-list article.pm')]
  .map(a => `${a.dataset.seq} ${a.dataset.type} ${a.dataset.id}`);"#;

fn find_program(name: &str, env: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `target/`, next to the binary under test.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_streamforge"))
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// Standard base64 (WebDriver screenshots), without a crate for it.
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let digits: Vec<u8> = s
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= val(*c) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// A chromedriver process with one headless Chromium session.
struct Browser {
    driver: Option<Child>,
    url: String,
    session: String,
    http: Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// `None` when Chromium or chromedriver is not installed.
    fn start() -> Option<Browser> {
        let chromium = find_program("chromium", "STREAMFORGE_CHROMIUM")?;
        let chromedriver = find_program("chromedriver", "STREAMFORGE_CHROMEDRIVER")?;
        let profile = tempdir();
        let port = streamforge_testkit::free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .arg(format!(
                "--log-path={}",
                profile.path().join("chromedriver.log").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let http = Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let mut b = Browser {
            driver: Some(driver),
            url: format!("http://127.0.0.1:{port}"),
            session: String::new(),
            http,
            _profile: profile,
        };
        wait_until("chromedriver ready", DEADLINE, || {
            let r = b.http.get(format!("{}/status", b.url)).send().ok()?;
            let v: Value = r.json().ok()?;
            v["value"]["ready"].as_bool().filter(|r| *r)
        });
        let data_dir = b._profile.path().join("profile");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium.to_string_lossy(),
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    "--hide-scrollbars",
                    "--force-device-scale-factor=1",
                    "--window-size=1440,1080",
                    format!("--user-data-dir={}", data_dir.display()),
                ]
            }
        }}});
        let v = b.send(reqwest::Method::POST, "/session", Some(caps));
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_string();
        Some(b)
    }

    fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let rb = self
            .http
            .request(method.clone(), format!("{}{path}", self.url));
        let rb = match body {
            Some(b) => rb.json(&b),
            None => rb,
        };
        let r = rb.send().unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = r.status();
        let v: Value = r.json().expect("WebDriver answers JSON");
        assert!(status.is_success(), "{method} {path}: {status} {v}");
        v["value"].clone()
    }

    fn cmd(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let path = format!("/session/{}{path}", self.session);
        self.send(method, &path, Some(body))
    }

    fn goto(&self, url: &str) {
        self.cmd(reqwest::Method::POST, "/url", json!({ "url": url }));
    }

    fn eval(&self, script: &str) -> Value {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            json!({"script": script, "args": []}),
        )
    }

    fn find(&self, css: &str) -> String {
        let v = self.cmd(
            reqwest::Method::POST,
            "/element",
            json!({"using": "css selector", "value": css}),
        );
        v[ELEMENT].as_str().expect("element id").to_string()
    }

    /// Clicks the element; finds it again if a re-render replaced it
    /// between finding and clicking.
    fn click(&self, css: &str) {
        let end = Instant::now() + DEADLINE;
        loop {
            let id = self.find(css);
            let path = format!("/session/{}/element/{id}/click", self.session);
            let r = self
                .http
                .post(format!("{}{path}", self.url))
                .json(&json!({}))
                .send()
                .unwrap_or_else(|e| panic!("click {css}: {e}"));
            let status = r.status();
            let v: Value = r.json().expect("WebDriver answers JSON");
            if status.is_success() {
                return;
            }
            let stale = v["value"]["error"] == json!("stale element reference");
            assert!(stale && Instant::now() < end, "click {css}: {status} {v}");
        }
    }

    fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css);
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            json!({ "text": text }),
        );
    }

    /// Resizes the browser window (the viewport follows).
    fn set_window_size(&self, width: u32, height: u32) {
        self.cmd(
            reqwest::Method::POST,
            "/window/rect",
            json!({ "width": width, "height": height }),
        );
    }

    fn screenshot(&self) -> Vec<u8> {
        let path = format!("/session/{}/screenshot", self.session);
        let v = self.send(reqwest::Method::GET, &path, None);
        base64_decode(v.as_str().expect("base64 PNG"))
    }

    /// The result table, one text line per row.
    fn rows(&self) -> Vec<String> {
        serde_json::from_value(self.eval(ROWS_JS)).expect("rows")
    }

    /// The pattern output, one text line per match or timeout.
    fn pattern_lines(&self) -> Vec<String> {
        serde_json::from_value(self.eval(PATTERNS_JS)).expect("pattern lines")
    }

    /// The pattern output as `seq type id`, newest first.
    fn pattern_ids(&self) -> Vec<String> {
        serde_json::from_value(self.eval(PATTERN_IDS_JS)).expect("pattern ids")
    }

    /// Waits until the pattern output shows exactly `want` (newest first).
    fn wait_patterns(&self, what: &str, want: &[&str]) {
        self.wait(what, |b| b.pattern_lines() == want);
    }

    /// Polls `cond` over the page until it holds; on timeout saves a
    /// screenshot and fails with the table as it was.
    fn wait(&self, what: &str, mut cond: impl FnMut(&Browser) -> bool) {
        let end = Instant::now() + DEADLINE;
        loop {
            if cond(self) {
                return;
            }
            if Instant::now() > end {
                let png = target_dir().join("dashboard-failure.png");
                let _ = std::fs::write(&png, self.screenshot());
                let conn = self.eval("return document.getElementById('conn').textContent");
                panic!(
                    "timed out waiting for {what}\nconnection: {conn}\nrows:\n{}\npattern output:\n{}\n\
                     (screenshot: {})",
                    self.rows().join("\n"),
                    self.pattern_lines().join("\n"),
                    png.display()
                );
            }
            std::thread::sleep(Duration::from_millis(40));
        }
    }

    /// Waits until every line of `want` is in the table.
    fn wait_rows(&self, what: &str, want: &[&str]) {
        self.wait(what, |b| {
            let rows = b.rows();
            want.iter().all(|w| rows.iter().any(|r| r == w))
        });
    }

    /// Answers the token dialog and waits for the live stream.
    fn log_in(&self) {
        self.wait("the token dialog", |b| {
            b.eval("return document.getElementById('auth').open") == json!(true)
        });
        self.type_into("#token", TOKEN);
        self.click("#auth-submit");
        self.wait("the live stream", |b| {
            b.eval("return document.getElementById('conn').dataset.state") == json!("live")
        });
    }

    fn text(&self, css: &str) -> String {
        let v = self.eval(&format!(
            "const e = document.querySelector({}); return e ? e.textContent : null",
            json!(css)
        ));
        v.as_str().unwrap_or_default().to_string()
    }

    /// An attribute of the first element matching `css` ("" if none).
    fn attr(&self, css: &str, name: &str) -> String {
        let v = self.eval(&format!(
            "const e = document.querySelector({}); return e ? e.getAttribute({}) : null",
            json!(css),
            json!(name)
        ));
        v.as_str().unwrap_or_default().to_string()
    }

    /// Fails if the visible text still uses a word a user would not know.
    fn assert_no_jargon(&self) {
        let text = self
            .eval("return document.body.innerText.toLowerCase()")
            .as_str()
            .expect("page text")
            .to_string();
        for word in JARGON {
            assert!(
                !text.contains(word),
                "the page still says {word:?}:\n{text}"
            );
        }
    }
}

/// Labels the page used to show, replaced by plain words ("sets W" is now
/// "sets the watermark", "revisable" is "may change", and so on).
const JARGON: &[&str] = &[
    "sets w",
    "changelog",
    "bucket",
    "revisable",
    "retracted",
    "progress",
    "lateness",
    "seq",
    "bearer",
    "timestamp",
    "per window start",
];

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self
                .http
                .delete(format!("{}/session/{}", self.url, self.session))
                .send();
        }
        if let Some(mut c) = self.driver.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A JSON array of deliveries, each `(partition, offset, id, key, ts, value)`.
fn batch(items: &[(&str, i64, &str, &str, i64, i64)]) -> String {
    let parts: Vec<String> = items
        .iter()
        .map(|(p, o, id, k, ts, v)| delivery(p, Some(*o), id, k, *ts, *v))
        .collect();
    format!("[{}]", parts.join(","))
}

/// The browser, or None when `chromium` and `chromedriver` are not on PATH:
/// the test says SKIPPED and passes, unless `CI` is set (`.ci/run` installs
/// them), where it fails.
fn browser(test: &str) -> Option<Browser> {
    server::require_tool(
        test,
        Browser::start().ok_or_else(|| {
            "`chromium` and `chromedriver` must be on PATH \
             (Debian: apt-get install -y chromium chromium-driver)"
                .to_string()
        }),
    )
}

#[test]
fn dashboard_in_headless_chromium() {
    let Some(browser) = browser("dashboard_in_headless_chromium") else {
        return;
    };
    let dir = tempdir();
    let pipeline = dir.path().join("pipeline.json");
    std::fs::write(&pipeline, PIPELINE).unwrap();
    let pipeline = pipeline.to_str().unwrap();
    // A second server only serves the page, to test `?server=` (CORS).
    let page = start(&dir.path().join("page.db"), &[]);
    let s = start(
        &dir.path().join("data.db"),
        &[
            "--pipeline",
            pipeline,
            "--token",
            TOKEN,
            "--cors-origin",
            &page.base,
        ],
    );

    // The page is public; it asks for the token, keeps it for the tab.
    browser.goto(&format!("{}/", s.base));
    browser.log_in();
    assert_eq!(
        browser.eval(&format!(
            "return sessionStorage.getItem({})",
            json!(format!("streamforge.token {}", s.base))
        )),
        json!(TOKEN)
    );

    // Events on both partitions, a watermark at 40 000, then one late event.
    s.ok(
        "/events",
        &batch(&[
            ("p0", 0, "a1", "sensor-a", 1000, 4),
            ("p0", 1, "a2", "sensor-a", 6000, 6),
            ("p0", 2, "a3", "sensor-a", 14000, 9),
            ("p0", 3, "a4", "sensor-a", 23000, 5),
            ("p0", 4, "a5", "sensor-a", 31000, 5),
            ("p0", 5, "a6", "sensor-a", 33000, 7),
            ("p0", 6, "a7", "sensor-a", 37000, 3),
            ("p1", 0, "b1", "sensor-b", 2000, 10),
            ("p1", 1, "b2", "sensor-b", 12000, -2),
            ("p1", 2, "b3", "sensor-b", 26000, 4),
            ("p1", 3, "b4", "sensor-b", 35000, 1),
            ("p1", 4, "a8", "sensor-a", 44000, 8),
        ]),
    );
    s.ok("/watermarks", r#"{"partition":"p0","watermark":40000}"#);
    s.ok("/watermarks", r#"{"partition":"p1","watermark":40000}"#);
    s.ok(
        "/events",
        &batch(&[("p1", 5, "late-1", "sensor-a", 500, 1)]),
    );
    browser.wait_rows(
        "the first results",
        &[
            "tumbling_10s sensor-a [0,10000) c=2 s=10 final",
            "tumbling_10s sensor-a [20000,30000) c=1 s=5 revisable",
            "tumbling_10s sensor-a [30000,40000) c=3 s=15 revisable",
            "session_3s sensor-a [31000,36000) c=2 s=12 revisable",
            "session_3s sensor-a [37000,40000) c=1 s=3 revisable",
            "tumbling_10s sensor-b [10000,20000) c=1 s=-2 final",
        ],
    );
    assert!(
        !browser.rows().iter().any(|r| r.contains("[40000,50000)")),
        "a window is shown before the watermark passed its end"
    );
    browser.wait("status and the late event", |b| {
        b.text("#s-watermark") == "40000"
            && b.text("#partitions tr[data-partition=p0] [data-col=offset]") == "6"
            && b.text("#partitions tr[data-partition=p1] [data-col=progress]") == "40000"
            && b.text("#s-late") == "1"
            && b.text("#late tbody tr[data-id=late-1]")
                .contains("sensor-a")
    });

    // Small times (not epoch milliseconds) stay numbers, with the same
    // number as tooltip; no date note; plain words only.
    let cell = "#results tr[data-window=tumbling_10s][data-key=sensor-a][data-start='30000']";
    assert_eq!(browser.text(&format!("{cell} [data-col=start]")), "30000");
    assert_eq!(
        browser.attr(&format!("{cell} [data-col=end]"), "title"),
        "40000"
    );
    assert_eq!(browser.text("#results-when"), "");
    let late_ts = "#late tbody tr[data-id=late-1] [data-col=timestamp]";
    assert_eq!(browser.text(late_ts), "500");
    assert_eq!(browser.attr(late_ts, "title"), "500");
    assert_eq!(browser.attr("#s-watermark", "title"), "40000");
    assert!(browser
        .text("#partitions tr[data-partition=p0]")
        .contains("sets the watermark"));
    browser.assert_no_jargon();

    // Key filter and sorting.
    browser.type_into("#f-key", "sensor-b");
    browser.wait("the key filter", |b| {
        let rows = b.rows();
        !rows.is_empty() && rows.iter().all(|r| r.contains(" sensor-b "))
    });
    browser.eval(
        "const f = document.getElementById('f-key'); f.value = '';
         f.dispatchEvent(new Event('input')); return null",
    );
    browser.click("#results th[data-col=sum]");
    browser.click("#results th[data-col=sum]");
    let sums: Vec<i64> = browser
        .rows()
        .iter()
        .map(|r| {
            r.split(" s=")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(sums.len() > 10, "{sums:?}");
    assert!(
        sums.windows(2).all(|w| w[0] >= w[1]),
        "sum descending: {sums:?}"
    );
    browser.click("#results th[data-col=window]");

    // The chart of the clicked row's window and key: one point per start.
    browser.click("#results tr[data-window=tumbling_10s][data-key=sensor-a][data-start='30000']");
    let chart_js = "return [...document.querySelectorAll('#chart circle.sum')]
        .map(c => c.dataset.start + ':' + c.dataset.sum).join(' ')";
    browser.wait("the chart", |b| {
        b.eval(chart_js) == json!("0:10 10000:9 20000:5 30000:15")
    });

    // A late correction within the lateness: the row is retracted (struck
    // through) and upserted with the new aggregate.
    s.ok("/events", &batch(&[("p0", 7, "a9", "sensor-a", 30500, -4)]));
    browser.wait_rows(
        "the correction",
        &[
            "tumbling_10s sensor-a [30000,40000) c=3 s=15 retracted",
            "tumbling_10s sensor-a [30000,40000) c=4 s=11 revisable",
            "session_3s sensor-a [31000,36000) c=2 s=12 retracted",
            "session_3s sensor-a [30500,36000) c=3 s=8 revisable",
        ],
    );
    browser.wait("the corrected chart", |b| {
        b.eval(chart_js) == json!("0:10 10000:9 20000:5 30000:11")
    });

    // A bridging event: two sessions are replaced by one.
    s.ok("/events", &batch(&[("p0", 8, "a10", "sensor-a", 35000, 2)]));
    browser.wait_rows(
        "the session merge",
        &[
            "session_3s sensor-a [30500,36000) c=3 s=8 retracted",
            "session_3s sensor-a [37000,40000) c=1 s=3 retracted",
            "session_3s sensor-a [30500,40000) c=5 s=13 revisable",
            "tumbling_10s sensor-a [30000,40000) c=5 s=13 revisable",
        ],
    );
    browser.assert_no_jargon();

    // The struck-through rows go away; one session remains.
    browser.wait("the retracted rows to go", |b| {
        let rows = b.rows();
        !rows.iter().any(|r| r.ends_with("retracted"))
            && rows
                .iter()
                .filter(|r| r.starts_with("session_3s sensor-a [3"))
                .count()
                == 1
    });

    // Webhook sinks: each one's state and how far behind it is.
    let rcv = receiver::Receiver::start(None, |_, _| receiver::Action::Ok);
    let closed = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    for (name, url) in [
        ("to-warehouse", format!("{}/w", rcv.base)),
        ("to-alerts", format!("http://{closed}/a")),
    ] {
        let body = json!({"name": name, "url": url, "stream": "changes", "start": "start"});
        let r = s.post("/sinks", &body.to_string());
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let seq = s.get("/status").json()["sequence"].as_u64().unwrap();
    let sinks_js = "return [...document.querySelectorAll('#sinks tbody tr')].map(tr =>
        tr.dataset.sink + ' ' + tr.querySelector('[data-col=state]').textContent + ' ' +
        tr.querySelector('[data-col=lag]').textContent)";
    browser.wait("the sinks' state and lag", |b| {
        let lines = b.eval(sinks_js);
        let lines: Vec<&str> = lines
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        lines.len() == 2
            && lines[0].starts_with("to-alerts retrying cannot connect")
            && lines[0].ends_with(&format!(" {seq}"))
            && lines[1] == "to-warehouse delivering 0"
    });
    assert_eq!(browser.text("#sinks-note"), "2 sinks, 1 behind");
    browser.assert_no_jargon();

    // The same view from another origin (`?server=`, CORS): a new tab
    // origin asks for the token again and replays the changelog quietly.
    browser.goto(&format!("{}/?server={}", page.base, s.base));
    browser.log_in();
    browser.wait_rows(
        "the replayed results",
        &[
            "session_3s sensor-a [30500,40000) c=5 s=13 revisable",
            "tumbling_10s sensor-a [30000,40000) c=5 s=13 revisable",
            "tumbling_10s sensor-a [0,10000) c=2 s=10 final",
        ],
    );
    assert!(
        !browser.rows().iter().any(|r| r.ends_with("retracted")),
        "a replay shows no retractions"
    );
    assert_eq!(browser.text("#s-watermark"), "40000");
}

#[test]
fn dashboard_page_is_public_and_self_contained() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &["--token", TOKEN]);
    let anon = Client::new();
    let r = anon.get(s.url("/")).send().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    assert!(r.headers().contains_key("content-security-policy"));
    let html = r.text().unwrap();
    assert!(html.starts_with("<!doctype html>"));
    // No external resources: everything is inline.
    for bad in ["<script src", "<link rel=\"stylesheet\"", "@import", "cdn"] {
        assert!(!html.contains(bad), "the page references {bad}");
    }
    // `server` may repeat (several instances); each must be an http(s) URL.
    let page = |q: &str| anon.get(s.url(&format!("/{q}"))).send().unwrap().status();
    assert_eq!(
        page("?server=http%3A%2F%2F127.0.0.1%3A9&server=https%3A%2F%2Fb.example%2Fapi"),
        200
    );
    assert_eq!(
        page("?server=http%3A%2F%2F127.0.0.1%3A9&server=ftp%3A%2F%2Fb"),
        400
    );
    assert_eq!(page("?server=http%3A%2F%2F127.0.0.1%3A9&server="), 400);
    // The data routes still need the token.
    assert_eq!(anon.get(s.url("/status")).send().unwrap().status(), 401);
    assert_eq!(anon.get(s.url("/index.html")).send().unwrap().status(), 401);
}

/// 2026-12-01 09:00:00.000 UTC in epoch milliseconds.
const T0: i64 = 1_796_115_600_000;

/// Sales of four shops, `(key, timestamp, value)` in time order: steady
/// traffic in Berlin and Lisbon, a burst in Oslo and one in Porto.
fn shop_events() -> Vec<(&'static str, i64, i64)> {
    let mut v = Vec::new();
    for i in 0..21 {
        v.push(("berlin", T0 + 2_750 * i + 125, 20 + (i * 37) % 50));
    }
    for i in 0..14 {
        v.push(("lisbon", T0 + 4_000 * i + 1_500, 10 + (i * 23) % 40));
    }
    for i in 0..6 {
        v.push(("oslo", T0 + 2_250 * i + 800, 5 + 3 * i));
    }
    for (ts, value) in [(12_300, 14), (15_050, 9), (19_900, 21)] {
        v.push(("porto", T0 + ts, value));
    }
    v.sort_by_key(|e| e.1);
    v
}

/// The shipped pipeline (`pipelines/default.json`: partitions p0..p3, three
/// windows, 1 s lateness) fed with realistic epoch-millisecond times: the
/// page shows UTC dates, switches to raw numbers and back (remembered), keeps
/// every exact number in a tooltip, and speaks plainly. Its screenshot is
/// docs/dashboard.md's.
#[test]
fn dashboard_shows_dates_on_the_shipped_pipeline() {
    let Some(browser) = browser("dashboard_shows_dates_on_the_shipped_pipeline") else {
        return;
    };
    let dir = tempdir();
    let pipeline = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/default.json");
    let s = start(
        &dir.path().join("data.db"),
        &["--pipeline", pipeline.to_str().unwrap(), "--token", TOKEN],
    );

    // History before the page opens (replayed without highlights): the
    // events spread round robin over p0..p3, two late ones, p2 goes idle
    // and p3 holds the watermark at 09:00:50.600.
    let events = shop_events();
    let mut next = [0i64; 4];
    let mut deliver = |items: &[(&str, i64, i64)], name: &dyn Fn(usize) -> String| {
        let parts: Vec<String> = items
            .iter()
            .enumerate()
            .map(|(i, (key, ts, value))| {
                let p = i % 4;
                next[p] += 1;
                delivery(
                    &format!("p{p}"),
                    Some(next[p] - 1),
                    &name(i),
                    key,
                    *ts,
                    *value,
                )
            })
            .collect();
        s.ok("/events", &format!("[{}]", parts.join(",")));
    };
    deliver(&events, &|i| format!("sale-{i}"));
    for (p, w) in [
        ("p0", 52_000),
        ("p1", 52_000),
        ("p2", 45_000),
        ("p3", 50_600),
    ] {
        s.ok(
            "/watermarks",
            &format!(r#"{{"partition":"{p}","watermark":{}}}"#, T0 + w),
        );
    }
    assert_eq!(s.post_empty("/partitions/p2/idle").status, 200);
    let watermark = T0 + 50_600;
    let late_ids = ["late-oslo", "late-lisbon"];
    deliver(
        &[("oslo", T0 + 21_250, 4), ("lisbon", T0 + 33_400, 12)],
        &|i| late_ids[i].to_string(),
    );

    // The fixed 10 s windows that the watermark passed, as the page must
    // show them: final once the watermark is more than 1 s past their end.
    let mut fixed = std::collections::BTreeMap::<(&str, i64), (i64, i64)>::new();
    for (key, ts, value) in &events {
        let e = fixed.entry((*key, ts - ts.rem_euclid(10_000))).or_default();
        e.0 += 1;
        e.1 += value;
    }
    let line = |key: &str, start: i64, (c, sum): (i64, i64)| {
        let end = start + 10_000;
        let state = if watermark > end + 1000 {
            "final"
        } else {
            "revisable"
        };
        format!("fixed_10s {key} [{start},{end}) c={c} s={sum} {state}")
    };
    let want: Vec<String> = fixed
        .iter()
        .filter(|((_, start), _)| start + 10_000 <= watermark)
        .map(|((key, start), agg)| line(key, *start, *agg))
        .collect();
    assert!(want.iter().any(|l| l.ends_with("revisable")), "{want:?}");

    let url = format!("{}/", s.base);
    browser.goto(&url);
    browser.log_in();
    let want_refs: Vec<&str> = want.iter().map(String::as_str).collect();
    browser.wait_rows("the shops' results", &want_refs);
    browser.wait("the status and the late events", |b| {
        b.text("#s-watermark") == "09:00:50.600"
            && b.text("#late tbody tr[data-id=late-lisbon]")
                .contains("lisbon")
    });

    // Dates: the shared date once beside the times, the times alone; the
    // exact number in every tooltip.
    let exact = |v: i64, date: &str| format!("{v} = {date} UTC");
    let berlin = |start: i64| {
        format!(
            "#results tr[data-window=fixed_10s][data-key=berlin][data-start='{}']",
            T0 + start
        )
    };
    // Session starts carry milliseconds, so every time in the table does.
    assert_eq!(browser.text("#results-when"), "UTC, 2026-12-01");
    let start_cell = format!("{} [data-col=start]", berlin(10_000));
    assert_eq!(browser.text(&start_cell), "09:00:10.000");
    assert_eq!(
        browser.attr(&start_cell, "title"),
        exact(T0 + 10_000, "2026-12-01 09:00:10.000")
    );
    let end_cell = format!("{} [data-col=end]", berlin(40_000));
    assert_eq!(browser.text(&end_cell), "09:00:50.000");
    assert_eq!(
        browser.attr(&end_cell, "title"),
        exact(T0 + 50_000, "2026-12-01 09:00:50.000")
    );
    // Only whole seconds shown: no milliseconds.
    browser.eval(
        "const f = document.getElementById('f-window'); f.value = 'fixed_10s';
         f.dispatchEvent(new Event('change')); return null",
    );
    browser.wait("whole seconds", |b| b.text(&start_cell) == "09:00:10");
    browser.eval(
        "const f = document.getElementById('f-window'); f.value = '';
         f.dispatchEvent(new Event('change')); return null",
    );
    browser.wait("the milliseconds back", |b| {
        b.text(&start_cell) == "09:00:10.000"
    });

    assert_eq!(browser.text("#s-watermark-sub"), "2026-12-01 (UTC)");
    assert_eq!(
        browser.attr("#s-watermark", "title"),
        exact(watermark, "2026-12-01 09:00:50.600")
    );
    assert_eq!(browser.text("#s-lateness"), "1 s");
    assert_eq!(browser.attr("#s-lateness", "title"), "1000 ms");
    let progress = |p: &str| format!("#partitions tr[data-partition={p}] [data-col=progress]");
    assert_eq!(browser.text(&progress("p3")), "09:00:50.600");
    assert_eq!(browser.text(&progress("p0")), "09:00:52.000");
    assert_eq!(
        browser.attr(&progress("p2"), "title"),
        exact(T0 + 45_000, "2026-12-01 09:00:45.000")
    );
    assert_eq!(browser.text("#partitions-when"), "UTC, 2026-12-01");
    assert!(browser
        .text("#partitions tr[data-partition=p3]")
        .contains("sets the watermark"));
    assert!(browser
        .text("#partitions tr[data-partition=p2]")
        .contains("idle"));
    let late_ts = "#late tbody tr[data-id=late-oslo] [data-col=timestamp]";
    assert_eq!(browser.text(late_ts), "09:00:21.250");
    assert_eq!(
        browser.attr(late_ts, "title"),
        exact(T0 + 21_250, "2026-12-01 09:00:21.250")
    );
    assert_eq!(
        browser.text("#late tbody tr[data-id=late-oslo] [data-col=watermark]"),
        "09:00:50.600"
    );
    // The chart (Berlin's fixed windows): times under the axis, the date in
    // its caption, exact numbers in the labels' tooltips.
    let first_label = "const t = document.querySelector('#chart text.xlabel');
        return t ? t.firstChild.nodeValue : null";
    browser.wait("the chart's time axis", |b| {
        b.eval(first_label) == json!("09:00:00")
    });
    assert_eq!(
        browser.text("#chart text.xlabel title"),
        exact(T0, "2026-12-01 09:00:00.000")
    );
    assert!(browser
        .text("#chart svg")
        .contains("window start (UTC, 2026-12-01)"));
    browser.assert_no_jargon();

    // Raw numbers, remembered across a reload, then dates again.
    let stored = "return localStorage.getItem('streamforge.times')";
    browser.click("#t-raw");
    browser.wait("raw numbers", |b| {
        b.text("#s-watermark") == watermark.to_string()
    });
    assert_eq!(browser.text(&start_cell), (T0 + 10_000).to_string());
    assert_eq!(
        browser.attr(&start_cell, "title"),
        exact(T0 + 10_000, "2026-12-01 09:00:10.000")
    );
    assert_eq!(browser.text(late_ts), (T0 + 21_250).to_string());
    assert_eq!(browser.text(&progress("p3")), watermark.to_string());
    assert_eq!(browser.text("#results-when"), "");
    assert_eq!(browser.text("#s-lateness"), "1000");
    assert_eq!(browser.attr("#t-raw", "aria-pressed"), "true");
    assert_eq!(browser.eval(stored), json!("raw"));
    browser.goto(&url);
    browser.wait("the live stream after a reload", |b| {
        b.eval("return document.getElementById('conn').dataset.state") == json!("live")
    });
    browser.wait_rows("the results after a reload", &want_refs);
    browser.wait("raw numbers after a reload", |b| {
        b.text("#s-watermark") == watermark.to_string()
            && b.text(&start_cell) == (T0 + 10_000).to_string()
    });
    assert_eq!(browser.attr("#t-raw", "aria-pressed"), "true");
    browser.click("#t-dates");
    browser.wait("dates again", |b| {
        b.text("#s-watermark") == "09:00:50.600" && b.text(&start_cell) == "09:00:10.000"
    });
    assert_eq!(browser.attr("#t-dates", "aria-pressed"), "true");
    assert_eq!(browser.eval(stored), json!("dates"));
    browser.assert_no_jargon();

    // A sale within the grace period corrects Berlin's last window: the old
    // row is struck through, the new one flashes. That is the screenshot,
    // tall enough for the pattern part's one line under the late events.
    browser.set_window_size(1440, 1180);
    browser.wait("the pattern part, quiet", |b| {
        b.attr("#patterns-card", "data-state") == "quiet"
            && b.text("#p-summary").starts_with("No pattern events yet")
    });
    let old = fixed[&("berlin", T0 + 40_000)];
    deliver(&[("berlin", T0 + 49_700, 30)], &|_| {
        "sale-late-berlin".into()
    });
    browser.wait_rows(
        "the correction",
        &[
            &line("berlin", T0 + 40_000, old).replace("revisable", "retracted"),
            &line("berlin", T0 + 40_000, (old.0 + 1, old.1 + 30)),
        ],
    );
    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let out = target_dir().join("dashboard.png");
    std::fs::write(&out, &png).unwrap();
    if std::env::var_os("STREAMFORGE_UPDATE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dashboard.png");
        std::fs::write(docs, &png).unwrap();
    }
    let _ = writeln!(std::io::stderr(), "screenshot: {}", out.display());
}

/// The result lines of a `GET /results` answer, without their state.
fn result_lines(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            format!(
                "{} {} [{},{}) c={} s={}",
                r["window"].as_str().unwrap(),
                r["key"].as_str().unwrap(),
                r["start"],
                r["end"],
                r["count"],
                r["sum"]
            )
        })
        .collect();
    out.sort();
    out
}

/// A restore while the page is open: the service rewinds the stream, the
/// page drops what it held, shows exactly the restored `GET /results` and
/// late list, says so plainly, and goes on with the changes after it.
#[test]
fn dashboard_follows_a_restore() {
    let Some(browser) = browser("dashboard_follows_a_restore") else {
        return;
    };
    let dir = tempdir();
    let pipeline = dir.path().join("pipeline.json");
    std::fs::write(&pipeline, PIPELINE).unwrap();
    let s = start(
        &dir.path().join("data.db"),
        &["--pipeline", pipeline.to_str().unwrap(), "--token", TOKEN],
    );
    browser.goto(&format!("{}/", s.base));
    browser.log_in();

    // Before the checkpoint.
    s.ok(
        "/events",
        &batch(&[
            ("p0", 0, "a1", "sensor-a", 1000, 4),
            ("p0", 1, "a2", "sensor-a", 6000, 6),
            ("p1", 0, "b1", "sensor-b", 2000, 10),
        ]),
    );
    s.ok("/watermarks", r#"{"partition":"p0","watermark":20000}"#);
    s.ok("/watermarks", r#"{"partition":"p1","watermark":20000}"#);
    browser.wait_rows(
        "the first results",
        &[
            "tumbling_10s sensor-a [0,10000) c=2 s=10 revisable",
            "tumbling_10s sensor-b [0,10000) c=1 s=10 revisable",
        ],
    );
    let checkpoint: Value = serde_json::from_str(&s.post_empty("/checkpoints").body).unwrap();
    let id = checkpoint["id"].as_i64().expect("checkpoint id");

    // After it: new windows, finals, a late event.
    s.ok(
        "/events",
        &batch(&[
            ("p0", 2, "a3", "sensor-a", 12000, 9),
            ("p1", 1, "b2", "sensor-b", 15000, -2),
        ]),
    );
    s.ok("/watermarks", r#"{"partition":"p0","watermark":25000}"#);
    s.ok("/watermarks", r#"{"partition":"p1","watermark":25000}"#);
    s.ok(
        "/events",
        &batch(&[("p1", 2, "late-x", "sensor-b", 500, 1)]),
    );
    browser.wait_rows(
        "the results after the checkpoint",
        &[
            "tumbling_10s sensor-a [0,10000) c=2 s=10 final",
            "tumbling_10s sensor-a [10000,20000) c=1 s=9 revisable",
            "tumbling_10s sensor-b [10000,20000) c=1 s=-2 revisable",
        ],
    );
    browser.wait("the late event", |b| {
        b.text("#s-late") == "1"
            && b.text("#late tbody tr[data-id=late-x]")
                .contains("sensor-b")
    });
    assert!(browser.eval("return document.getElementById('notice').hidden") == json!(true));

    // The restore: the page shows exactly the restored results, no late
    // event, and a plain notice.
    let r = s.post_empty(&format!("/checkpoints/{id}/restore"));
    assert_eq!(r.status, 200, "{}", r.body);
    let restored = s.get("/results").json();
    let want = result_lines(&restored);
    assert!(!want.is_empty());
    let sequence = restored["sequence"]
        .as_u64()
        .expect("/results has its sequence");
    let shown = |b: &Browser| {
        let mut rows: Vec<String> = b
            .rows()
            .iter()
            .map(|r| r.rsplit_once(' ').unwrap().0.to_string())
            .collect();
        rows.sort();
        rows
    };
    browser.wait("exactly the restored results", |b| {
        shown(b) == want
            && b.text("#late tbody tr[data-id=late-x]").is_empty()
            && b.text("#s-late") == "0"
            && b.eval("return document.getElementById('notice').hidden") == json!(false)
    });
    let notice = browser.text("#notice-text");
    assert!(
        notice.contains(&format!(
            "The service was restored to an earlier checkpoint: results were re-read (now at change {sequence})."
        )),
        "{notice}"
    );
    assert!(
        !browser.rows().iter().any(|r| r.ends_with("retracted")),
        "{:?}",
        browser.rows()
    );
    assert_eq!(browser.text("#s-watermark"), "20000");

    // Changes after the restore show up as usual.
    s.ok("/events", &batch(&[("p0", 2, "a3b", "sensor-a", 13000, 7)]));
    s.ok("/watermarks", r#"{"partition":"p0","watermark":30000}"#);
    s.ok("/watermarks", r#"{"partition":"p1","watermark":30000}"#);
    browser.wait_rows(
        "the changes after the restore",
        &["tumbling_10s sensor-a [10000,20000) c=1 s=7 revisable"],
    );
    browser.wait("the page in step with the service", |b| {
        let want = result_lines(&s.get("/results").json());
        let rows = shown(b);
        want.iter().all(|w| rows.contains(w)) && b.text("#s-watermark") == "30000"
    });
    let voided = |rows: &[String]| {
        rows.iter()
            .any(|r| r.contains(" c=1 s=-2 ") || r.contains(" c=1 s=9 "))
    };
    assert!(!voided(&browser.rows()), "{:?}", browser.rows());

    // A page opened after the restore reads the same state (the changelog
    // of the new epoch), quietly.
    browser.goto(&format!("{}/", s.base));
    browser.wait("the live stream after a reload", |b| {
        b.eval("return document.getElementById('conn').dataset.state") == json!("live")
    });
    let want = result_lines(&s.get("/results").json());
    browser.wait("the restored state after a reload", |b| {
        let rows = shown(b);
        want.iter().all(|w| rows.contains(w)) && b.text("#s-watermark") == "30000"
    });
    assert!(!voided(&browser.rows()), "{:?}", browser.rows());
    assert_eq!(
        browser.eval("return document.getElementById('notice').hidden"),
        json!(true)
    );
}

/// A pattern event at `T0 + secs` seconds, with its fields as JSON.
fn pattern_event(id: &str, key: &str, kind: &str, secs: i64, fields: &str) -> String {
    format!(
        r#"{{"id":"{id}","key":"{key}","kind":"{kind}","time":{},"fields":{fields}}}"#,
        T0 + secs * 1000
    )
}

/// Pushes pattern events (one JSON array).
fn push_patterns(s: &Server, events: &[String]) {
    s.ok("/patterns/events", &format!("[{}]", events.join(",")));
}

/// Advances the pattern watermark to `T0 + secs` seconds.
fn advance_patterns(s: &Server, secs: i64) -> Value {
    let body = s.ok(
        "/patterns/advance",
        &format!(r#"{{"watermark":{}}}"#, T0 + secs * 1000),
    );
    serde_json::from_str(&body).unwrap()
}

/// `GET /patterns/output`, whole, as `seq type id` lines, newest first.
fn pattern_output_ids(s: &Server) -> Vec<String> {
    let v = s.get("/patterns/output?after=0&limit=10000").json();
    let mut out: Vec<String> = v["output"]
        .as_array()
        .expect("output")
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r["seq"],
                r["type"].as_str().unwrap(),
                r["id"].as_str().unwrap()
            )
        })
        .collect();
    out.reverse();
    out
}

/// Whether a cell's text is the number `v`.
fn shows_number(text: &str, v: &Value) -> bool {
    v.as_u64().is_some() && text.parse::<u64>().ok() == v.as_u64()
}

/// The page's per-pattern status agrees with `GET /patterns/status`.
fn pattern_status_shown(b: &Browser, s: &Server) -> bool {
    let st = s.get("/patterns/status").json();
    let doc = s.get("/patterns").json();
    let absence: Vec<&str> = doc["patterns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p.get("absence").is_some())
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    st["patterns"].as_object().unwrap().iter().all(|(name, p)| {
        let cell = |col: &str| {
            b.text(&format!(
                "#p-status tr[data-pattern={name}] [data-col={col}]"
            ))
        };
        // A pattern without absence has no waits: a dash.
        let waits = if absence.contains(&name.as_str()) {
            shows_number(&cell("waits"), &p["waits"])
        } else {
            cell("waits") == "—"
        };
        shows_number(&cell("keys"), &p["keys"])
            && shows_number(&cell("branches"), &p["branches"])
            && waits
    }) && shows_number(&b.text("#p-buffered"), &st["buffered"])
        && shows_number(&b.text("#p-total"), &st["sequence"])
}

/// The pattern engine's output on the shipped demo document
/// (`pipelines/default.patterns.json`, embedded): the part is one line
/// until events come; then matches and timeouts show up as they are found,
/// newest first and highlighted, each stage with its captured events; the
/// engine's status in words; the pattern and key filters; dates and raw
/// numbers; a reload shows the same, quietly.
#[test]
fn dashboard_shows_the_pattern_output() {
    let Some(browser) = browser("dashboard_shows_the_pattern_output") else {
        return;
    };
    let dir = tempdir();
    let s = start(&dir.path().join("data.db"), &["--token", TOKEN]);
    let url = format!("{}/", s.base);
    browser.goto(&url);
    browser.log_in();

    // Nothing yet: one line naming the patterns watched.
    browser.wait("the quiet pattern part", |b| {
        b.attr("#patterns-card", "data-state") == "quiet"
            && b.eval("return document.getElementById('patterns-card').hidden") == json!(false)
    });
    assert_eq!(
        browser.text("#p-summary"),
        "No pattern events yet: watching abandoned_cart, failed_logins_then_success and \
         rising_payments."
    );
    let height = browser.eval("return document.getElementById('patterns-card').offsetHeight");
    assert!(height.as_i64().unwrap() < 80, "not compact: {height}");

    // Payments (acct-1 rises, acct-2 does not), failed logins then a
    // success (acct-3), an abandoned cart and a bought one.
    push_patterns(
        &s,
        &[
            pattern_event("e1", "acct-1", "login", 1, r#"{"ok":true}"#),
            pattern_event("e2", "acct-1", "pay", 2, r#"{"amount":12}"#),
            pattern_event("e3", "acct-1", "pay", 3, r#"{"amount":40}"#),
            pattern_event("e4", "acct-2", "login", 4, r#"{"ok":true}"#),
            pattern_event("e5", "acct-2", "pay", 5, r#"{"amount":30}"#),
            pattern_event("f1", "acct-3", "login", 6, r#"{"ok":false}"#),
            pattern_event("f2", "acct-3", "login", 7, r#"{"ok":false}"#),
            pattern_event("f3", "acct-3", "login", 8, r#"{"ok":false}"#),
            pattern_event("f4", "acct-3", "login", 9, r#"{"ok":true}"#),
            pattern_event(
                "c1",
                "shopper-9",
                "add_to_cart",
                10,
                r#"{"item":"lamp","price":{"decimal":"49.90"}}"#,
            ),
            pattern_event("c2", "shopper-8", "add_to_cart", 11, r#"{"item":"mug"}"#),
            pattern_event("c3", "shopper-8", "checkout", 12, "{}"),
        ],
    );
    browser.wait("the waiting events", |b| {
        b.attr("#patterns-card", "data-state") == "active"
            && b.text("#p-buffered") == "12"
            && b.text("#p-watermark") == "—"
            && b.text("#p-list").contains("no matches or timeouts yet")
    });
    assert_eq!(browser.text("#p-watermark-sub"), "nothing processed yet");

    // Two matches, newest first, highlighted as they come.
    advance_patterns(&s, 20);
    let rising = "matched rising_payments key acct-1 09:00:01..09:00:03 by 09:10:01 \
        | login: login@09:00:01 ok: true | pay: pay@09:00:02 amount: 12 \
        | bigger_pay: pay@09:00:03 amount: 40";
    let failed = "matched failed_logins_then_success key acct-3 09:00:06..09:00:09 by 09:05:06 \
        | failures: login@09:00:06 ok: false; login@09:00:07 ok: false; login@09:00:08 ok: false \
        | success: login@09:00:09 ok: true";
    browser.wait_patterns("the first matches", &[failed, rising]);
    assert_eq!(
        browser.eval("return document.querySelectorAll('#p-list article.pm.fresh').length"),
        json!(2),
        "new matches are highlighted"
    );
    browser.wait("the pattern status", |b| {
        b.text("#p-watermark") == "09:00:20" && pattern_status_shown(b, &s)
    });
    assert_eq!(browser.text("#p-watermark-sub"), "2026-12-01 (UTC)");
    assert_eq!(browser.text("#patterns-when"), "UTC, 2026-12-01");
    assert_eq!(
        browser.attr("#p-watermark", "title"),
        format!("{} = 2026-12-01 09:00:20.000 UTC", T0 + 20_000)
    );
    // The status in words: what each pattern looks for, what is under way.
    let rising_row = browser.text("#p-status tr[data-pattern=rising_payments]");
    assert!(
        rising_row.contains("login, then pay (1 to 3 times), then bigger_pay, within 10 min"),
        "{rising_row}"
    );
    assert!(browser
        .text("#p-status tr[data-pattern=abandoned_cart]")
        .contains("cart, then no checkout, within 30 min"));
    assert_eq!(
        browser.text("#p-status tr[data-pattern=abandoned_cart] [data-col=waits]"),
        "1"
    );
    assert_ne!(
        browser.text("#p-status tr[data-pattern=rising_payments] [data-col=branches]"),
        "0"
    );
    let start_cell = "#p-list article[data-id='rising_payments:1/2/3'] [data-col=start]";
    assert_eq!(
        browser.attr(start_cell, "title"),
        format!(
            "the first captured event's time: {} = 2026-12-01 09:00:01.000 UTC",
            T0 + 1000
        )
    );
    browser.assert_no_jargon();

    // Past the deadlines of the unfinished ones: timeouts, in plain words.
    advance_patterns(&s, 700);
    let timeout_acct2 = "timed out rising_payments key acct-2 09:00:04..09:10:04 by 09:10:04 \
        | login: login@09:00:04 ok: true | pay: pay@09:00:05 amount: 30 | bigger_pay: none";
    let timeout_acct3 = "timed out failed_logins_then_success key acct-3 09:00:07..09:05:07 \
        by 09:05:07 | failures: login@09:00:07 ok: false; login@09:00:08 ok: false | success: none";
    browser.wait("the timeouts", |b| {
        let lines = b.pattern_lines();
        lines.len() == 10
            && lines.iter().any(|l| l == timeout_acct2)
            && lines.iter().any(|l| l == timeout_acct3)
            && lines[8..] == [failed, rising]
    });
    assert_eq!(browser.pattern_ids(), pattern_output_ids(&s));
    browser.wait("the status after the timeouts", |b| {
        b.text("#p-watermark") == "09:11:40" && pattern_status_shown(b, &s)
    });
    assert_eq!(
        browser.text("#p-count"),
        "2 matched · 8 timed out · newest first"
    );
    assert!(browser
        .text("#p-list article[data-type=timeout] .tag")
        .contains("timed out"));

    // Filters: by pattern, by key, both.
    let set_pattern = |name: &str| {
        browser.eval(&format!(
            "const f = document.getElementById('p-pattern'); f.value = {};
             f.dispatchEvent(new Event('change')); return null",
            json!(name)
        ));
    };
    let set_key = |key: &str| {
        browser.eval(&format!(
            "const f = document.getElementById('p-key'); f.value = {};
             f.dispatchEvent(new Event('input')); return null",
            json!(key)
        ));
    };
    set_pattern("failed_logins_then_success");
    browser.wait("the pattern filter", |b| {
        let lines = b.pattern_lines();
        lines.len() == 4
            && lines
                .iter()
                .all(|l| l.contains(" failed_logins_then_success key acct-3 "))
            && lines.last().map(String::as_str) == Some(failed)
    });
    assert_eq!(
        browser.text("#p-count"),
        "1 matched · 3 timed out · filtered from 10 · newest first"
    );
    set_pattern("");
    browser.type_into("#p-key", "ACCT-2");
    browser.wait_patterns("the key filter", &[timeout_acct2]);
    set_pattern("rising_payments");
    set_key("acct-3");
    browser.wait("both filters", |b| {
        let lines = b.pattern_lines();
        lines.len() == 4
            && lines
                .iter()
                .all(|l| l.starts_with("timed out rising_payments key acct-3 "))
    });
    set_pattern("abandoned_cart");
    browser.wait("a filter that leaves nothing", |b| {
        b.pattern_lines().is_empty()
            && b.text("#p-list") == "no matches or timeouts for this filter"
    });
    set_key("");
    set_pattern("");
    browser.wait("no filter", |b| b.pattern_lines().len() == 10);

    // The abandoned cart: a match at its deadline (nothing cancelled it).
    advance_patterns(&s, 2000);
    let abandoned = "matched abandoned_cart key shopper-9 09:00:10..09:30:10 by 09:30:10 \
        | cart: add_to_cart@09:00:10 item: lamp · price: 49.90";
    browser.wait("the abandoned cart", |b| {
        b.pattern_lines().first().map(String::as_str) == Some(abandoned)
            && pattern_status_shown(b, &s)
    });
    assert_eq!(
        browser.attr("#p-list article[data-pattern=abandoned_cart] .tag", "title"),
        "every stage was found, and no checkout came before the deadline"
    );

    // Raw numbers: times and durations as the numbers they are.
    browser.click("#t-raw");
    browser.wait("raw pattern times", |b| {
        b.text(start_cell) == (T0 + 1000).to_string()
            && b.text("#p-watermark") == (T0 + 2_000_000).to_string()
    });
    assert_eq!(browser.text("#patterns-when"), "");
    assert!(browser
        .text("#p-status tr[data-pattern=rising_payments]")
        .contains("within 600000 ms"));
    browser.click("#t-dates");
    browser.wait("dates again", |b| b.text(start_cell) == "09:00:01");
    browser.assert_no_jargon();
    browser.eval("document.getElementById('patterns-card').scrollIntoView(); return null");
    let png = browser.screenshot();
    std::fs::write(target_dir().join("dashboard-patterns.png"), &png).unwrap();

    // A reload reads the same output, without highlights or notice.
    browser.goto(&url);
    browser.wait("the live streams after a reload", |b| {
        b.eval("return document.getElementById('conn').dataset.state") == json!("live")
    });
    browser.wait("the pattern output after a reload", |b| {
        let lines = b.pattern_lines();
        lines.len() == 11 && lines[0] == abandoned && lines[9..] == [failed, rising]
    });
    assert_eq!(
        browser.eval("return document.querySelectorAll('#p-list article.pm.fresh').length"),
        json!(0)
    );
    assert_eq!(browser.pattern_ids(), pattern_output_ids(&s));
    assert_eq!(
        browser.eval("return document.getElementById('notice').hidden"),
        json!(true)
    );

    // The active part spans the page's width (wider than the results), and
    // with everything on one page there is nothing to page through.
    let widths = browser.eval(
        "return ['patterns-card', 'results-card'].map(id => document.getElementById(id).offsetWidth)",
    );
    assert!(
        widths[0].as_i64() > widths[1].as_i64(),
        "the pattern part is not full width: {widths}"
    );
    assert_eq!(
        browser.eval("return document.getElementById('p-pager').hidden"),
        json!(true)
    );

    // Many more records than a page (600 carts left behind), then the end
    // of the input: every wait matches, the watermark is FINAL, shown whole,
    // its number in the tooltip.
    let carts: Vec<String> = (0..600)
        .map(|i| {
            pattern_event(
                &format!("m{i}"),
                &format!("shopper-{i:03}"),
                "add_to_cart",
                2100 + i,
                "{}",
            )
        })
        .collect();
    push_patterns(&s, &carts);
    let r = s.post_empty("/patterns/finish");
    assert_eq!(r.status, 200, "{}", r.body);
    let st = s.get("/patterns/status").json();
    let head = st["sequence"].as_u64().expect("sequence");
    assert!(head > 500, "{st}");
    let newest = pattern_output_ids(&s)[0].clone();
    browser.wait("the end of the input", |b| {
        b.text("#p-watermark") == "FINAL"
            && b.text("#p-total") == head.to_string()
            && b.pattern_ids().first() == Some(&newest)
    });
    let final_watermark = st["watermark"].to_string();
    let title = browser.attr("#p-watermark", "title");
    assert!(title.contains(&final_watermark), "{title}");
    let uncut = "const e = document.getElementById('p-watermark');
        return e.scrollWidth <= e.clientWidth && e.getBoundingClientRect().right <=
          document.getElementById('patterns-card').getBoundingClientRect().right";
    assert_eq!(browser.eval(uncut), json!(true));
    browser.click("#t-raw");
    browser.wait("raw numbers", |b| b.text("#patterns-when").is_empty());
    assert_eq!(browser.text("#p-watermark"), "FINAL");
    assert_eq!(browser.eval(uncut), json!(true));
    browser.click("#t-dates");
    browser.wait("dates again", |b| {
        b.text("#patterns-when") == "UTC, 2026-12-01"
    });
    browser.assert_no_jargon();

    // "older" pages back, each page the server's own page of the output
    // before the one shown, down to the first record; "newer" pages forward
    // to the live list again.
    let seqs = |b: &Browser| -> Vec<u64> {
        b.pattern_ids()
            .iter()
            .map(|l| l.split(' ').next().unwrap().parse().unwrap())
            .collect()
    };
    let server_page = |after: u64, limit: usize| -> Vec<String> {
        let v = s
            .get(&format!("/patterns/output?after={after}&limit={limit}"))
            .json();
        let mut out: Vec<String> = v["output"]
            .as_array()
            .expect("output")
            .iter()
            .map(|r| {
                format!(
                    "{} {} {}",
                    r["seq"],
                    r["type"].as_str().unwrap(),
                    r["id"].as_str().unwrap()
                )
            })
            .collect();
        out.reverse();
        out
    };
    assert_eq!(
        browser.eval("return document.getElementById('p-pager').hidden"),
        json!(false)
    );
    let mut pages = 0;
    loop {
        let oldest = *seqs(&browser).last().expect("records shown");
        if oldest == 1 {
            break;
        }
        browser.click("#p-older");
        browser.wait("an older page", |b| {
            b.attr("#p-pager", "data-mode") == "page" && seqs(b).first() == Some(&(oldest - 1))
        });
        let ids = browser.pattern_ids();
        assert!(ids.len() <= 200, "{} on a page", ids.len());
        let after = oldest - 1 - ids.len() as u64;
        assert_eq!(ids, server_page(after, ids.len()));
        assert_eq!(
            browser.text("#p-page"),
            format!("records {} to {} of {head}", after + 1, oldest - 1)
        );
        pages += 1;
        assert!(pages < 10, "no end to the older pages");
    }
    assert!(pages >= 2, "{pages} pages");
    browser.eval("document.getElementById('patterns-card').scrollIntoView(); return null");
    let png = browser.screenshot();
    std::fs::write(target_dir().join("dashboard-patterns-paged.png"), &png).unwrap();
    assert_eq!(
        browser.eval("return document.getElementById('p-older').disabled"),
        json!(true)
    );
    browser.assert_no_jargon();
    let mut shown_newest = seqs(&browser)[0];
    while browser.attr("#p-pager", "data-mode") == "page" {
        browser.click("#p-newer");
        browser.wait("a newer page", |b| {
            seqs(b).first().is_some_and(|s| *s > shown_newest)
        });
        let shown = seqs(&browser);
        if browser.attr("#p-pager", "data-mode") == "page" {
            assert_eq!(
                shown.last(),
                Some(&(shown_newest + 1)),
                "a gap between pages"
            );
        }
        shown_newest = shown[0];
    }
    assert_eq!(shown_newest, head);
    assert_eq!(browser.pattern_ids()[0], newest);
}

/// A pattern restore while the page is open: the stream rewinds, the page
/// drops the records it held, shows exactly the restored output, says so
/// plainly, and goes on with the output after it.
#[test]
fn dashboard_follows_a_pattern_restore() {
    let Some(browser) = browser("dashboard_follows_a_pattern_restore") else {
        return;
    };
    let dir = tempdir();
    let s = start(&dir.path().join("data.db"), &["--token", TOKEN]);
    browser.goto(&format!("{}/", s.base));
    browser.log_in();

    // Before the checkpoint: one match.
    push_patterns(
        &s,
        &[
            pattern_event("e1", "acct-1", "login", 1, r#"{"ok":true}"#),
            pattern_event("e2", "acct-1", "pay", 2, r#"{"amount":12}"#),
            pattern_event("e3", "acct-1", "pay", 3, r#"{"amount":40}"#),
        ],
    );
    advance_patterns(&s, 10);
    browser.wait("the first match", |b| {
        b.pattern_ids() == ["1 match rising_payments:1/2/3"]
    });
    let r = s.post_empty("/patterns/checkpoints");
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_i64().expect("checkpoint id");

    // After it: another rising account, an abandoned cart, a buffered event.
    push_patterns(
        &s,
        &[
            pattern_event("e4", "acct-5", "login", 11, r#"{"ok":true}"#),
            pattern_event("e5", "acct-5", "pay", 12, r#"{"amount":5}"#),
            pattern_event("e6", "acct-5", "pay", 13, r#"{"amount":9}"#),
            pattern_event("c1", "shopper-1", "add_to_cart", 14, "{}"),
        ],
    );
    advance_patterns(&s, 2000);
    push_patterns(
        &s,
        &[pattern_event(
            "x1",
            "acct-9",
            "login",
            2001,
            r#"{"ok":true}"#,
        )],
    );
    browser.wait("the output after the checkpoint", |b| {
        b.pattern_ids()
            == [
                "3 match abandoned_cart:7",
                "2 match rising_payments:4/5/6",
                "1 match rising_payments:1/2/3",
            ]
            && b.text("#p-buffered") == "1"
    });
    assert_eq!(
        browser.eval("return document.getElementById('notice').hidden"),
        json!(true)
    );

    // The restore: exactly the restored output, the restored status, a
    // plain notice.
    let r = s.post_empty(&format!("/patterns/checkpoints/{id}/restore"));
    assert_eq!(r.status, 200, "{}", r.body);
    let want = pattern_output_ids(&s);
    assert_eq!(want, ["1 match rising_payments:1/2/3"]);
    browser.wait("exactly the restored output", |b| {
        b.pattern_ids() == want
            && b.text("#p-watermark") == "09:00:10"
            && b.text("#p-buffered") == "0"
            && b.text("#p-total") == "1"
            && b.eval("return document.getElementById('notice').hidden") == json!(false)
    });
    let notice = browser.text("#notice-text");
    assert!(
        notice.contains(
            "The pattern engine was restored to an earlier checkpoint: its matches and timeouts \
             were re-read (1 in all now)."
        ),
        "{notice}"
    );
    assert_eq!(
        browser.pattern_lines(),
        [
            "matched rising_payments key acct-1 09:00:01..09:00:03 by 09:10:01 \
          | login: login@09:00:01 ok: true | pay: pay@09:00:02 amount: 12 \
          | bigger_pay: pay@09:00:03 amount: 40"
        ]
    );
    browser.wait("the restored status", |b| pattern_status_shown(b, &s));
    browser.assert_no_jargon();

    // Output after the restore shows up as usual; the voided records stay
    // gone.
    push_patterns(
        &s,
        &[
            pattern_event("e7", "acct-6", "login", 15, r#"{"ok":true}"#),
            pattern_event("e8", "acct-6", "pay", 16, r#"{"amount":1}"#),
            pattern_event("e9", "acct-6", "pay", 17, r#"{"amount":2}"#),
        ],
    );
    advance_patterns(&s, 30);
    browser.wait("the output after the restore", |b| {
        b.pattern_ids()
            == [
                "2 match rising_payments:4/5/6",
                "1 match rising_payments:1/2/3",
            ]
            && b.text("#p-list article[data-seq='2'] .pm-key") == "key acct-6"
    });
    assert_eq!(browser.pattern_ids(), pattern_output_ids(&s));
    browser.wait("the status after the restore", |b| {
        pattern_status_shown(b, &s)
    });

    // A page opened after the restore reads the same output, quietly.
    browser.goto(&format!("{}/", s.base));
    browser.wait("the live streams after a reload", |b| {
        b.eval("return document.getElementById('conn').dataset.state") == json!("live")
    });
    browser.wait("the output after a reload", |b| {
        b.pattern_ids() == pattern_output_ids(&s)
    });
    assert!(!browser.text("#p-list").contains("shopper-1"));
    assert_eq!(
        browser.eval("return document.getElementById('notice').hidden"),
        json!(true)
    );
}

/// The result table as `instance label window key [start,end) c= s= state
/// #seq` lines (several instances: each row names its instance, by URL in
/// `data-instance` and by host:port in its first cell).
const INSTANCE_ROWS_JS: &str = r#"
return [...document.querySelectorAll('#results tbody tr[data-state]')].map(tr => {
  const c = (n) => tr.querySelector('[data-col=' + n + ']').textContent;
  return `${tr.dataset.instance} ${c('instance')} ${tr.dataset.window} ${tr.dataset.key} ` +
    `[${tr.dataset.start},${tr.dataset.end}) c=${c('count')} s=${c('sum')} ${tr.dataset.state} #${tr.dataset.seq}`;
});"#;

/// The rows of one instance that may still change, as the page shows them:
/// `window key [start,end) c= s=` (sorted), checking that each names its
/// instance. These are what its `GET /results` lists (it leaves out the
/// final ones, which the page keeps).
fn instance_rows(b: &Browser, base: &str) -> Vec<String> {
    instance_rows_exact(b, base)
        .iter()
        .filter(|r| !r.contains(" final #"))
        .map(|r| r.rsplitn(3, ' ').nth(2).unwrap().to_string())
        .collect()
}

/// The same with each row's state and the change it came from (`#seq`).
fn instance_rows_exact(b: &Browser, base: &str) -> Vec<String> {
    let lines: Vec<String> = serde_json::from_value(b.eval(INSTANCE_ROWS_JS)).expect("rows");
    let label = base.trim_start_matches("http://");
    let mut out: Vec<String> = lines
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("{base} ")))
        .map(|l| {
            let rest = l.strip_prefix(&format!("{label} ")).unwrap_or_else(|| {
                panic!("the row does not show its instance {label}: {l}");
            });
            rest.to_string()
        })
        .filter(|l| !l.contains(" retracted #"))
        .collect();
    out.sort();
    out
}

/// Two instances with disjoint keys, as in cluster mode (docs/cluster.md:
/// each its own database and API), read by one page served by the first
/// with `?server=A&server=B`: one token asked for each server, the table is
/// the union of both servers' `GET /results`, each row tagged with its
/// instance; the watermark shown is the lower one (each in the tooltip),
/// the counts summed; late events and pattern output merged and tagged. A
/// restore of one instance replaces its rows only; when one goes down the
/// pill shows it.
#[test]
fn dashboard_merges_several_instances() {
    let Some(browser) = browser("dashboard_merges_several_instances") else {
        return;
    };
    const TOKEN_B: &str = "dash-secret-b";
    let dir = tempdir();
    let pipeline = dir.path().join("pipeline.json");
    std::fs::write(&pipeline, PIPELINE).unwrap();
    let pipeline = pipeline.to_str().unwrap();
    let a = start(
        &dir.path().join("a.db"),
        &["--pipeline", pipeline, "--token", TOKEN],
    );
    // B lets pages served by A read it.
    let mut b = start(
        &dir.path().join("b.db"),
        &[
            "--pipeline",
            pipeline,
            "--token",
            TOKEN_B,
            "--cors-origin",
            &a.base,
        ],
    );
    browser.goto(&format!("{}/?server={}&server={}", a.base, a.base, b.base));

    // One token per server: the dialog names the server it asks for.
    let mut answered: Vec<String> = Vec::new();
    while answered.len() < 2 {
        browser.wait("a token dialog for another server", |br| {
            br.eval("return document.getElementById('auth').open") == json!(true)
                && !answered.contains(&br.attr("#auth", "data-instance"))
        });
        let asked = browser.attr("#auth", "data-instance");
        let token = if asked == a.base {
            TOKEN
        } else {
            assert_eq!(asked, b.base);
            TOKEN_B
        };
        assert!(
            browser.text("#auth-text").contains(&asked),
            "{}",
            browser.text("#auth-text")
        );
        browser.type_into("#token", token);
        browser.click("#auth-submit");
        answered.push(asked);
    }
    browser.wait("both instances live", |br| {
        br.eval("return document.getElementById('conn').dataset.state") == json!("live")
    });
    for (s, token) in [(&a, TOKEN), (&b, TOKEN_B)] {
        assert_eq!(
            browser.eval(&format!(
                "return sessionStorage.getItem({})",
                json!(format!("streamforge.token {}", s.base))
            )),
            json!(token)
        );
    }

    // Disjoint keys, both partitions, both windows; B's watermark is lower;
    // one late event each.
    let first = |key1: &str, key2: &str, id: &str, shift: i64| {
        let ids: Vec<String> = (0..6).map(|i| format!("{id}{i}")).collect();
        batch(&[
            ("p0", 0, &ids[0], key1, 1000 + shift, 4),
            ("p0", 1, &ids[1], key1, 6000, 6),
            ("p0", 2, &ids[2], key1, 14000 + shift, 9),
            ("p1", 0, &ids[3], key2, 2000, 10),
            ("p1", 1, &ids[4], key2, 12000 + shift, -2),
            ("p1", 2, &ids[5], key2, 26000, 4),
        ])
    };
    a.ok("/events", &first("alpha-1", "alpha-2", "a", 0));
    b.ok("/events", &first("beta-1", "beta-2", "b", 500));
    for (s, w) in [(&a, 40000), (&b, 30000)] {
        for p in ["p0", "p1"] {
            s.ok(
                "/watermarks",
                &format!(r#"{{"partition":"{p}","watermark":{w}}}"#),
            );
        }
    }
    a.ok("/events", &batch(&[("p0", 3, "late-a", "alpha-1", 500, 1)]));
    b.ok("/events", &batch(&[("p1", 3, "late-b", "beta-2", 700, 1)]));
    let in_step = |br: &Browser, s: &Server| {
        let want = result_lines(&s.get("/results").json());
        !want.is_empty() && instance_rows(br, &s.base) == want
    };
    browser.wait("both instances' rows, each as its GET /results", |br| {
        in_step(br, &a) && in_step(br, &b)
    });

    // The status: the lowest watermark (each in the tooltip), counts summed.
    let status = |s: &Server| s.get("/status").json();
    let num = |v: &Value| v.as_i64().expect("a number");
    browser.wait("the merged status", |br| {
        let (sa, sb) = (status(&a), status(&b));
        let low = num(&sa["watermark"]).min(num(&sb["watermark"]));
        br.text("#s-watermark") == low.to_string()
            && br.text("#s-late") == (num(&sa["late"]) + num(&sb["late"])).to_string()
            && br.text("#s-sequence") == (num(&sa["sequence"]) + num(&sb["sequence"])).to_string()
            && br.text("#s-buckets")
                == (num(&sa["live_buckets"]) + num(&sb["live_buckets"])).to_string()
    });
    let tip = browser.attr("#s-watermark", "title");
    for s in [&a, &b] {
        let line = format!(
            "{}: {}",
            s.base.trim_start_matches("http://"),
            status(s)["watermark"]
        );
        assert!(tip.contains(&line), "{tip:?} lacks {line:?}");
    }
    // Each instance's partitions, tagged.
    for s in [&a, &b] {
        let st = status(s);
        for p in ["p0", "p1"] {
            let cell = format!(
                "#partitions tr[data-partition={p}][data-instance='{}'] [data-col=offset]",
                s.base
            );
            assert_eq!(
                browser.text(&cell),
                st["partitions"][p]["offset"].to_string()
            );
        }
    }
    // The late events of both, tagged.
    for (s, id) in [(&a, "late-a"), (&b, "late-b")] {
        browser.wait("a late event, tagged", |br| {
            br.text(&format!(
                "#late tbody tr[data-id={id}][data-instance='{}'] [data-col=instance]",
                s.base
            )) == s.base.trim_start_matches("http://")
        });
    }
    browser.assert_no_jargon();

    // Pattern output from both engines, merged and tagged.
    push_patterns(
        &a,
        &[
            pattern_event("e1", "acct-1", "login", 1, r#"{"ok":true}"#),
            pattern_event("e2", "acct-1", "pay", 2, r#"{"amount":12}"#),
            pattern_event("e3", "acct-1", "pay", 3, r#"{"amount":40}"#),
        ],
    );
    push_patterns(
        &b,
        &[pattern_event(
            "c1",
            "shopper-2",
            "add_to_cart",
            4,
            r#"{"item":"mug"}"#,
        )],
    );
    advance_patterns(&a, 20);
    advance_patterns(&b, 4000);
    let tagged_js = "return [...document.querySelectorAll('#p-list article.pm')].map(a =>
        a.dataset.instance + ' ' + a.querySelector('.pm-inst').textContent + ' ' +
        a.dataset.seq + ' ' + a.dataset.type + ' ' + a.dataset.id)";
    browser.wait("both engines' output, tagged", |br| {
        let shown: Vec<String> = serde_json::from_value(br.eval(tagged_js)).unwrap_or_default();
        let mut want: Vec<String> = [&a, &b]
            .iter()
            .flat_map(|s| {
                let label = s.base.trim_start_matches("http://").to_string();
                pattern_output_ids(s)
                    .into_iter()
                    .map(move |l| format!("{} {label} {l}", s.base))
            })
            .collect();
        let mut shown_sorted = shown.clone();
        shown_sorted.sort();
        want.sort();
        want.len() == 2 && shown_sorted == want
    });
    let found = |s: &Server| num(&s.get("/patterns/status").json()["sequence"]);
    assert_eq!(
        browser.text("#p-total"),
        (found(&a) + found(&b)).to_string()
    );

    // A checkpoint of B, then more on both (new windows, a correction).
    let checkpoint: Value = serde_json::from_str(&b.post_empty("/checkpoints").body).unwrap();
    let id = checkpoint["id"].as_i64().expect("checkpoint id");
    // (each server's next offsets: A's late event was on p0, B's on p1)
    let second = |key1: &str, key2: &str, id: &str, (o0, o1): (i64, i64)| {
        let ids: Vec<String> = (0..3).map(|i| format!("{id}{i}")).collect();
        batch(&[
            ("p0", o0, &ids[0], key1, 44000, 3),
            ("p0", o0 + 1, &ids[1], key1, 36000, 5),
            ("p1", o1, &ids[2], key2, 47000, 8),
        ])
    };
    a.ok("/events", &second("alpha-1", "alpha-2", "a2-", (4, 3)));
    b.ok("/events", &second("beta-1", "beta-2", "b2-", (3, 4)));
    for (s, w) in [(&a, 60000), (&b, 55000)] {
        for p in ["p0", "p1"] {
            s.ok(
                "/watermarks",
                &format!(r#"{{"partition":"{p}","watermark":{w}}}"#),
            );
        }
    }
    browser.wait("both instances' rows after more events", |br| {
        in_step(br, &a) && in_step(br, &b)
    });
    browser.wait("the watermark after more events", |br| {
        br.text("#s-watermark") == "55000"
    });
    let a_rows = instance_rows_exact(&browser, &a.base);
    let b_rows = instance_rows(&browser, &b.base);
    assert!(browser.eval("return document.getElementById('notice').hidden") == json!(true));

    // B restored: its rows become its restored GET /results; A's stay as
    // they were, state and change number alike (not re-read).
    let r = b.post_empty(&format!("/checkpoints/{id}/restore"));
    assert_eq!(r.status, 200, "{}", r.body);
    let restored = result_lines(&b.get("/results").json());
    assert_ne!(restored, b_rows, "the restore changed nothing");
    browser.wait("B's restored rows, A's as they were", |br| {
        instance_rows(br, &b.base) == restored
            && instance_rows_exact(br, &a.base) == a_rows
            && br.eval("return document.getElementById('notice').hidden") == json!(false)
    });
    assert!(in_step(&browser, &a));
    let notice = browser.text("#notice-text");
    assert!(
        notice.starts_with(&format!(
            "The instance {} was restored to an earlier checkpoint",
            b.base.trim_start_matches("http://")
        )),
        "{notice}"
    );
    browser.wait("the watermark after the restore", |br| {
        let low = num(&status(&a)["watermark"]).min(num(&status(&b)["watermark"]));
        br.text("#s-watermark") == low.to_string()
    });
    assert!(browser
        .text("#late tbody tr[data-id=late-a]")
        .contains("alpha-1"));

    let png = browser.screenshot();
    std::fs::write(target_dir().join("dashboard-instances.png"), &png).unwrap();

    // B goes down: the pill shows the worse of the two.
    b.kill();
    browser.wait("the pill showing B down", |br| {
        br.eval("return document.getElementById('conn').dataset.state") != json!("live")
            && br.attr("#conn", "title").contains(&format!(
                "{} results: ",
                b.base.trim_start_matches("http://")
            ))
    });
    assert!(browser.attr("#conn", "title").contains(&format!(
        "{} results: live",
        a.base.trim_start_matches("http://")
    )));
}
