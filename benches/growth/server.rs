//! The server under test and the bench's calls to it: start, events and
//! advances, `POST /checkpoints`, `/metrics`, and the clean shutdown.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde::Deserialize;

use super::http_support::{cpu_seconds, proc_io, Conn, Server};

/// The running server, killed (SIGKILL) if the bench ends early.
pub struct Running(pub Option<Server>);

impl Running {
    pub fn get(&self) -> &Server {
        self.0.as_ref().expect("a server")
    }

    pub fn take(&mut self) -> Server {
        self.0.take().expect("a server")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut s) = self.0.take() {
            s.child.kill().ok();
            s.child.wait().ok();
        }
    }
}

pub fn start(bin: &Path, db: &Path, pipeline: &Path) -> Server {
    Server::start_bin(bin, db, &["--pipeline".as_ref(), pipeline.as_os_str()])
}

const MINIMAL: &str = "prefer: return=minimal\r\n";

pub fn post_events(c: &mut Conn, body: &[u8]) {
    let st = c.call_with("POST", "/events", "application/x-ndjson", MINIMAL, body);
    assert!(
        st == 200,
        "POST /events: {st} {}",
        String::from_utf8_lossy(&c.body)
    );
}

pub fn post_watermark(c: &mut Conn, partition: usize, watermark: i64) {
    let body = format!(r#"{{"partition":"p{partition}","watermark":{watermark}}}"#);
    let st = c.call_with(
        "POST",
        "/watermarks",
        "application/json",
        MINIMAL,
        body.as_bytes(),
    );
    assert!(
        st == 200,
        "POST /watermarks: {st} {}",
        String::from_utf8_lossy(&c.body)
    );
}

#[derive(Deserialize)]
pub struct Created {
    pub id: i64,
    pub digest: String,
    pub bytes: u64,
}

/// One `POST /checkpoints` and what the server wrote for it.
pub struct Checkpoint {
    pub created: Created,
    pub secs: f64,
    pub write_bytes: u64,
    pub wchar: u64,
}

pub fn checkpoint(c: &mut Conn, pid: u32) -> Checkpoint {
    let (w0, c0) = (proc_io(pid, "write_bytes"), proc_io(pid, "wchar"));
    let t = Instant::now();
    let st = c.call("POST", "/checkpoints", "application/json", b"");
    let secs = t.elapsed().as_secs_f64();
    let (w1, c1) = (proc_io(pid, "write_bytes"), proc_io(pid, "wchar"));
    assert!(
        st == 201 || st == 200,
        "POST /checkpoints: {st} {}",
        String::from_utf8_lossy(&c.body)
    );
    let created: Created = serde_json::from_slice(&c.body).expect("the POST /checkpoints answer");
    Checkpoint {
        created,
        secs,
        write_bytes: w1.saturating_sub(w0),
        wchar: c1.saturating_sub(c0),
    }
}

/// A sample of the server's `/metrics` (0 when absent).
pub fn metric(c: &mut Conn, name: &str) -> f64 {
    let st = c.call("GET", "/metrics", "", b"");
    assert!(st == 200, "GET /metrics: {st}");
    let text = String::from_utf8_lossy(&c.body);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The clean shutdown: SIGTERM to exit, timed and printed; returns the
/// server CPU seconds of the whole run (`cpu_before`: the killed servers').
pub fn shutdown(server: &mut Running, cpu_before: f64) -> f64 {
    let mut s = server.take();
    let cpu_total = cpu_before + cpu_seconds(s.pid());
    let t = Instant::now();
    let term = Command::new("kill")
        .args(["-TERM", &s.pid().to_string()])
        .status()
        .is_ok_and(|st| st.success());
    let exit = if term {
        s.child
            .wait()
            .map_or_else(|e| e.to_string(), |st| st.to_string())
    } else {
        s.child.kill().ok();
        s.child.wait().ok();
        "SIGTERM failed; killed".into()
    };
    println!(
        "shutdown: SIGTERM to exit in {:.3} s ({exit}); server CPU {cpu_total:.1} s in all",
        t.elapsed().as_secs_f64()
    );
    cpu_total
}
