//! HTTP bench helpers shared by the benches that drive `streamforge serve`
//! (`benches/http.rs`, `benches/patterns_http.rs`): a minimal keep-alive
//! HTTP/1.1 client (no client library in the measured path), the binary's
//! path, and the server process's CPU and memory from `/proc`.

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
        let s = self.stream.get_mut();
        s.write_all(head.as_bytes()).expect("write");
        s.write_all(body).expect("write");
        let mut line = String::new();
        self.stream.read_line(&mut line).expect("status line");
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        let mut len = None;
        loop {
            line.clear();
            self.stream.read_line(&mut line).expect("header");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse::<usize>().ok();
                }
            }
        }
        // 204 and 304 answers have no body (and no content-length).
        let len = match status {
            204 | 304 => len.unwrap_or(0),
            _ => len.expect("the server answers with content-length"),
        };
        self.body.resize(len, 0);
        self.stream.read_exact(&mut self.body).expect("body");
        status
    }
}

pub fn get_status(addr: &str, path: &str) -> Option<u16> {
    let s = TcpStream::connect(addr).ok()?;
    let mut c = Conn {
        addr: addr.to_string(),
        stream: BufReader::new(s),
        body: Vec::new(),
    };
    let head = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    c.stream.get_mut().write_all(head.as_bytes()).ok()?;
    let mut line = String::new();
    c.stream.read_line(&mut line).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub fn binary() -> PathBuf {
    std::env::var("STREAMFORGE_BIN").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/streamforge"),
        PathBuf::from,
    )
}

pub fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// User + system CPU seconds of a process.
pub fn cpu_seconds(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command name: state is field 3, utime 14, stime 15.
    let t = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (t(14) + t(15)) / clk_tck()
}

/// A `/proc/PID/status` field in bytes (`VmRSS`, `VmHWM`).
pub fn proc_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
        * 1024
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
        use std::process::Stdio;
        use std::time::{Duration, Instant};
        let t = Instant::now();
        let mut child = Command::new(binary())
            .args(["serve", "--addr", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(args)
            .args(["--max-body-bytes", "268435456"])
            .env("RUST_LOG", "warn")
            // the deployment setting of the Dockerfile (README "Docker"):
            // two malloc arenas keep freed request buffers from piling up
            // per thread; override with MALLOC_ARENA_MAX in the environment
            .env(
                "MALLOC_ARENA_MAX",
                std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "2".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start streamforge (build it with cargo build --release)");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("listening line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        while get_status(&addr, "/readyz") != Some(200) {
            assert!(
                t.elapsed() < Duration::from_secs(600),
                "server not ready in 600 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        Server {
            ready_after: t.elapsed(),
            child,
            addr,
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
