//! HTTP bench helpers shared by the benches that drive `streamforge serve`
//! (`benches/http.rs`, `patterns_http.rs`, `growth.rs`, `send.rs`, `cluster.rs`,
//! `webhooks.rs`, each including this file with `#[path]`):
//! a minimal keep-alive HTTP/1.1 client (no client library in the measured
//! path) and the binary's path; starting the server and reading `/proc`
//! come from the `streamforge-testkit` crate, which the tests use too.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Conn {
    addr: String,
    stream: BufReader<TcpStream>,
    pub body: Vec<u8>,
}

impl Conn {
    pub fn new(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).ok();
        Conn {
            addr: addr.to_string(),
            stream: BufReader::with_capacity(1 << 16, s),
            body: Vec::new(),
        }
    }

    /// Sends one request and reads the answer; returns the status.
    pub fn call(&mut self, method: &str, path: &str, ctype: &str, body: &[u8]) -> u16 {
        self.call_with(method, path, ctype, "", body)
    }

    /// [`Conn::call`] with extra header lines (each ending in `\r\n`).
    pub fn call_with(
        &mut self,
        method: &str,
        path: &str,
        ctype: &str,
        headers: &str,
        body: &[u8],
    ) -> u16 {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n{headers}\r\n",
            self.addr,
            body.len()
        );
        // One write, as curl and wrk send a small request: the head and
        // the body in one segment (two writes would cost the server a
        // second wake-up and read per request).
        let mut req = head.into_bytes();
        req.extend_from_slice(body);
        self.stream.get_mut().write_all(&req).expect("write");
        let mut line = String::new();
        let (status, len, _) = self.read_head(&mut line);
        // 204 and 304 answers have no body (and no content-length).
        let len = match status {
            204 | 304 => len.unwrap_or(0),
            _ => len.expect("the server answers with content-length"),
        };
        self.body.resize(len as usize, 0);
        self.stream.read_exact(&mut self.body).expect("body");
        status
    }

    /// Reads an answer's status line and headers: the status, its
    /// `content-length` and whether its body is chunked.
    fn read_head(&mut self, line: &mut String) -> (u16, Option<u64>, bool) {
        line.clear();
        self.stream.read_line(line).expect("status line");
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        let (mut len, mut chunked) = (None, false);
        loop {
            line.clear();
            self.stream.read_line(line).expect("header");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse::<u64>().ok();
                } else if k.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = v.to_ascii_lowercase().contains("chunked");
                }
            }
        }
        (status, len, chunked)
    }

    /// Sends `GET path` and copies the answer's body to `out` as it arrives
    /// (a `content-length` or a chunked body; nothing of it is held in
    /// memory here); returns the status and the body's length.
    pub fn download(&mut self, path: &str, out: &mut impl Write) -> (u16, u64) {
        let head = format!("GET {path} HTTP/1.1\r\nhost: {}\r\n\r\n", self.addr);
        self.stream
            .get_mut()
            .write_all(head.as_bytes())
            .expect("write");
        let mut line = String::new();
        let (status, len, chunked) = self.read_head(&mut line);
        if !chunked {
            let len = len.unwrap_or(0);
            let n = std::io::copy(&mut (&mut self.stream).take(len), out).expect("body");
            assert_eq!(n, len, "the connection ended inside the body");
            return (status, n);
        }
        let mut total = 0;
        loop {
            line.clear();
            self.stream.read_line(&mut line).expect("chunk size");
            let hex = line.trim_end().split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(hex, 16)
                .unwrap_or_else(|_| panic!("bad chunk size line {line:?}"));
            if size == 0 {
                // trailers, up to the empty line
                loop {
                    line.clear();
                    self.stream.read_line(&mut line).expect("trailer");
                    if line.trim_end().is_empty() {
                        break;
                    }
                }
                return (status, total);
            }
            let n = std::io::copy(&mut (&mut self.stream).take(size), out).expect("chunk");
            assert_eq!(n, size, "the connection ended inside a chunk");
            total += n;
            line.clear();
            self.stream.read_line(&mut line).expect("chunk end");
        }
    }
}

#[allow(unused_imports)] // each bench uses some of them
pub use streamforge_testkit::{box_ticks, clk_tck, cpu_seconds, get_status, proc_io, proc_kib};

pub fn binary() -> PathBuf {
    std::env::var("STREAMFORGE_BIN").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/streamforge"),
        PathBuf::from,
    )
}

/// A `streamforge serve` child process on a database.
pub struct Server {
    pub child: std::process::Child,
    pub addr: String,
    pub db: PathBuf,
    /// Spawn to `/readyz` 200.
    pub ready_after: std::time::Duration,
}

impl Server {
    /// Starts the release binary on `db` with `args` after the address and
    /// database, and waits until `/readyz` answers 200.
    pub fn start(db: &Path, args: &[&std::ffi::OsStr]) -> Server {
        let mut all = args.to_vec();
        all.extend([
            std::ffi::OsStr::new("--max-body-bytes"),
            std::ffi::OsStr::new("268435456"),
        ]);
        Server::start_bin(&binary(), db, &all)
    }

    /// [`Server::start`] of the binary `bin`, with `args` only (no
    /// `--max-body-bytes`: the server's defaults otherwise).
    pub fn start_bin(bin: &Path, db: &Path, args: &[&std::ffi::OsStr]) -> Server {
        use std::process::Stdio;
        let spawned = streamforge_testkit::spawn_serve(
            bin,
            db,
            args,
            |cmd| {
                // the server's log filter: BENCH_LOG (e.g.
                // "warn,streamforge_store=info"), else warnings only
                cmd.env(
                    "RUST_LOG",
                    std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".into()),
                )
                // the deployment setting of the Dockerfile (docs/deploy.md):
                // two malloc arenas keep freed request buffers from piling up
                // per thread; override with MALLOC_ARENA_MAX in the environment
                .env(
                    "MALLOC_ARENA_MAX",
                    std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "2".into()),
                )
                .stderr(Stdio::inherit());
            },
            std::time::Duration::from_secs(600),
        )
        .unwrap_or_else(|e| panic!("streamforge serve did not become ready: {e:?} (build it with cargo build --release)"));
        Server {
            ready_after: spawned.ready_after,
            child: spawned.child,
            addr: spawned.addr,
            db: db.to_path_buf(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL and reap.
    pub fn kill9(mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }

    /// SIGTERM; the server must exit 0.
    pub fn terminate(mut self) {
        Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill -TERM");
        let st = self.child.wait().expect("wait");
        assert!(st.success(), "server exit {st:?}");
    }

    /// The database's bytes on disk (with the WAL and shared memory).
    pub fn disk_bytes(&self) -> u64 {
        ["", "-wal", "-shm"]
            .iter()
            .filter_map(|s| {
                let mut p = self.db.clone().into_os_string();
                p.push(s);
                std::fs::metadata(p).ok().map(|m| m.len())
            })
            .sum()
    }
}

/// The benchmark workload's pipeline over partitions `p0..p{P-1}`: fixed
/// 10 s, sliding 10 s / 2 s and session 1 s windows, lateness 0.
pub fn pipeline_json(partitions: usize) -> String {
    let parts: Vec<String> = (0..partitions).map(|p| format!("\"p{p}\"")).collect();
    format!(
        r#"{{"partitions":[{}],"windows":{{"fixed_10s":{{"kind":"fixed","size":10000}},"sliding_10s_2s":{{"kind":"sliding","size":10000,"step":2000}},"session_1s":{{"kind":"session","gap":1000}}}},"lateness":0}}"#,
        parts.join(",")
    )
}

/// The median of some figures (the upper one of an even count).
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}
