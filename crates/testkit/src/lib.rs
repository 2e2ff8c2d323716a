//! What the integration tests (`tests/it/support/server`) and the benches
//! (`benches/support/http.rs`) share, so neither keeps its own copy:
//!
//! - [`spawn_serve`]: starts `streamforge serve` on a free port (`--addr
//!   127.0.0.1:0`), reads the address from its `listening on ADDR` line and
//!   waits until `/readyz` answers 200, failing early (with the caller's
//!   log) when the process exits first;
//! - [`get_status`]: one HTTP/1.1 GET over a plain TCP connection (no
//!   client library, so it works in a bench's measured process);
//! - [`cpu_seconds`], [`proc_kib`], [`proc_io`]: a process's figures from
//!   `/proc`.
//!
//! Std only: waits are on conditions with deadlines, polled every few
//! milliseconds.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A started `streamforge serve`: the process and the address it listens
/// on, and how long spawn to ready took.
pub struct Spawned {
    /// The process (its stdout is drained by a thread).
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Spawn to `/readyz` 200.
    pub ready_after: Duration,
}

/// Why a server did not become ready.
#[derive(Debug)]
pub enum NotReady {
    /// The process exited first (its log says why).
    Exited,
    /// Not ready before the deadline.
    Deadline,
}

/// Starts `bin serve --addr 127.0.0.1:0 --db DB ARGS...` (`configure`
/// sets its environment and stderr), and waits until it listens and
/// `/readyz` answers 200, at most `deadline` in all.
pub fn spawn_serve(
    bin: &Path,
    db: &Path,
    args: &[&std::ffi::OsStr],
    configure: impl FnOnce(&mut Command),
    deadline: Duration,
) -> Result<Spawned, NotReady> {
    let t = Instant::now();
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--db"])
        .arg(db)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    configure(&mut cmd);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(addr) = line.strip_prefix("listening on ") {
                if !sent {
                    sent = tx.send(addr.trim().to_string()).is_ok();
                }
            }
        }
    });
    let addr = loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(a) => break a,
            Err(_) => {
                if let Ok(Some(_)) = child.try_wait() {
                    return Err(NotReady::Exited);
                }
                if t.elapsed() > deadline {
                    child.kill().ok();
                    child.wait().ok();
                    return Err(NotReady::Deadline);
                }
            }
        }
    };
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return Err(NotReady::Exited);
        }
        if get_status(&addr, "/readyz") == Some(200) {
            return Ok(Spawned {
                child,
                addr,
                ready_after: t.elapsed(),
            });
        }
        if t.elapsed() > deadline {
            child.kill().ok();
            child.wait().ok();
            return Err(NotReady::Deadline);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The status of `GET path` on `addr` (one connection, closed after),
/// `None` when there is no answer.
pub fn get_status(addr: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let head = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).ok()?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let status = line.split_whitespace().nth(1)?.parse().ok();
    // drain the rest so the server sees a clean close
    let _drained = r.read_to_end(&mut Vec::new());
    status
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`, else 100).
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

/// The whole machine's CPU time so far, from `/proc/stat`: `(idle,
/// total)` in clock ticks over every core, idle counting I/O wait (a core
/// with nothing to run). The share of a run the box spent idle is the
/// ratio of the two deltas around it.
pub fn box_ticks() -> (u64, u64) {
    stat_ticks(&std::fs::read_to_string("/proc/stat").unwrap_or_default())
}

/// [`box_ticks`] of a `/proc/stat` text.
fn stat_ticks(s: &str) -> (u64, u64) {
    let f: Vec<u64> = s
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is
    // already counted in user)
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    (idle, f.iter().take(8).sum())
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

/// A `/proc/PID/io` field (`write_bytes`: bytes the process caused to be
/// sent to the storage layer, counted when it dirties the page cache;
/// `wchar`: bytes passed to write calls).
pub fn proc_io(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A Kafka-protocol broker for the tests: `tansu` (0.6, SQLite storage) on
/// a free loopback port, its data in a file of the caller's directory, so a
/// restart on the same port keeps the topics.
pub struct Broker {
    child: Option<Child>,
    bin: std::path::PathBuf,
    db: std::path::PathBuf,
    port: u16,
}

/// Where the `tansu` binary is: `$TANSU`, else `tansu` on the `PATH`, else
/// `~/.cargo/bin/tansu`; `None` when there is none.
pub fn tansu_bin() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("TANSU") {
        return Some(p.into());
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("tansu"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let home = std::env::var_os("HOME")?;
        let p = Path::new(&home).join(".cargo/bin/tansu");
        p.is_file().then_some(p)
    })
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

impl Broker {
    /// Starts a broker whose data lives in `dir`, and waits (at most 60 s)
    /// until it accepts connections.
    pub fn start(bin: &Path, dir: &Path) -> Broker {
        let mut b = Broker {
            child: None,
            bin: bin.to_path_buf(),
            db: dir.join("broker.db"),
            port: free_port(),
        };
        b.restart();
        b
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's process id (0 when it is not running).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Kills the broker (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    /// Starts the broker again on the same port and data (after `kill`).
    pub fn restart(&mut self) {
        self.kill();
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let log = std::fs::File::create(self.db.with_extension("log"))
            .unwrap_or_else(|e| panic!("broker log: {e}"));
        let child = Command::new(&self.bin)
            .arg("broker")
            .arg("--kafka-listener-url")
            .arg(&url)
            .arg("--kafka-advertised-listener-url")
            .arg(&url)
            // a relative path, in the broker's working directory (an
            // absolute one loses its leading slash in tansu's URL parsing)
            .arg("--storage-engine")
            .arg("sqlite://broker.db")
            .current_dir(self.db.parent().expect("a directory"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        self.child = Some(child);
        let t = Instant::now();
        while TcpStream::connect(self.addr()).is_err() {
            if let Some(c) = &mut self.child {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!(
                        "the broker exited ({status}); its log: {}",
                        std::fs::read_to_string(self.db.with_extension("log")).unwrap_or_default()
                    );
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the broker did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_ticks_count_idle_and_iowait_of_the_all_cores_line() {
        let stat = "cpu  100 5 50 800 40 3 2 1 7 0\ncpu0 50 2 25 400 20 1 1 0 3 0\nintr 1 2\n";
        // idle 800 + iowait 40; total: the first eight fields (guest is
        // inside user already)
        assert_eq!(stat_ticks(stat), (840, 1001));
        assert_eq!(stat_ticks(""), (0, 0));
        let (idle, total) = box_ticks();
        assert!(total > 0 && idle <= total, "{idle} of {total}");
    }
}
