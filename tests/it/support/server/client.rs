//! Running the `streamforge` client binary in tests: a finished run with
//! its exit code and output, a long-running `--follow` with its lines on
//! channels, and small helpers. Shared by tests/it/cli.rs and
//! tests/it/cli_patterns.rs.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use super::{wait_until, Server, DEADLINE};

/// A finished client run.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(self) -> Run {
        assert_eq!(self.code, 0, "client failed: {self:?}");
        self
    }

    pub fn failed(self) -> Run {
        assert_eq!(self.code, 1, "client should fail with 1: {self:?}");
        self
    }
}

/// The client binary with no ambient configuration.
pub fn client(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_streamforge"));
    cmd.args(args)
        .env_remove("STREAMFORGE_URL")
        .env_remove("STREAMFORGE_TOKEN");
    cmd
}

/// Runs the client against `s` (through `STREAMFORGE_URL`) to completion,
/// within the deadline.
pub fn sf(s: &Server, args: &[&str]) -> Run {
    let mut cmd = client(args);
    cmd.env("STREAMFORGE_URL", &s.base);
    run(cmd, None)
}

pub fn run(mut cmd: Command, stdin: Option<&str>) -> Run {
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    if let Some(input) = stdin {
        let mut w = child.stdin.take().expect("stdin");
        w.write_all(input.as_bytes()).expect("write stdin");
    }
    let out = reader(child.stdout.take().expect("stdout"));
    let err = reader(child.stderr.take().expect("stderr"));
    let status = wait_until("client exit", DEADLINE, || child.try_wait().ok().flatten());
    Run {
        code: status.code().unwrap_or(-1),
        stdout: out.recv_timeout(DEADLINE).expect("stdout"),
        stderr: err.recv_timeout(DEADLINE).expect("stderr"),
    }
}

pub fn reader(mut r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    rx
}

/// A long-running `--follow` command, its stdout and stderr lines on channels.
pub struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
    notes: mpsc::Receiver<String>,
}

impl Follower {
    /// Starts `args` (e.g. `changes --follow`) against `s`.
    pub fn start(s: &Server, args: &[&str]) -> Follower {
        let mut cmd = client(args);
        let mut child = cmd
            .env("STREAMFORGE_URL", &s.base)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn follower");
        let lines = line_reader(child.stdout.take().expect("stdout"));
        let notes = line_reader(child.stderr.take().expect("stderr"));
        Follower {
            child,
            lines,
            notes,
        }
    }

    /// Waits for the note that a restore rewound the stream to `after` in
    /// `epoch` (the changes made from now on reach it): on stderr, and as
    /// the next line on stdout, the marker a pipe reading stdout sees, right
    /// after the lines taken before it and before the ones taken after it.
    pub fn rewound(&self, epoch: u64, after: u64) {
        let note = self.notes.recv_timeout(DEADLINE).expect("a note on stderr");
        assert_eq!(
            note,
            format!(
                "streamforge: the service was restored to an earlier checkpoint (epoch {epoch}): \
                 everything printed after sequence {after} is void; reading again from {after}"
            )
        );
        assert_eq!(
            self.take(1),
            format!(
                "# rewind: epoch {epoch}, cut back to sequence {after}: \
                 the lines printed after {after} are void\n"
            ),
            "the rewind marker on stdout, in its place"
        );
    }

    /// The next `n` lines, within the deadline.
    pub fn take(&self, n: usize) -> String {
        let mut out = String::new();
        for _ in 0..n {
            let line = self
                .lines
                .recv_timeout(DEADLINE)
                .unwrap_or_else(|_| panic!("follower printed only:\n{out}"));
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn line_reader(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// A URL where nothing listens (a port bound and released).
pub fn closed_port_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}
