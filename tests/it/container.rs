//! The container image: the Dockerfile built and run with podman (a drop-in
//! for docker for these commands), checked as a user would, with the
//! Docker commands of the README and docs/deploy.md.
//!
//! The image is the Dockerfile's runtime stage as users get it, with the
//! build stage replaced by the binary under test (`--build-context
//! build=DIR`, DIR holding `usr/local/bin/streamforge`): no Rust toolchain
//! image is pulled. Its base is `localhost/debian:bookworm-slim`, made
//! without a registry (`.ci/run` makes it once):
//!
//! ```sh
//! debootstrap --variant=minbase bookworm ROOTFS
//! tar -C ROOTFS -c . | podman import - localhost/debian:bookworm-slim
//! ```
//!
//! and given to the build with `--build-context
//! debian:bookworm-slim=docker-image://localhost/debian:bookworm-slim`.
//!
//! Checked: `/readyz` from the host through the published port; the server
//! is PID 1 (so `docker stop`'s SIGTERM reaches it) and runs as uid 10001;
//! the `HEALTHCHECK` reports healthy; events posted, the container stopped
//! (SIGTERM: exit code 0, the stop and the final checkpoint logged) and a new
//! container on the same volume serves the same `/results` with nothing to
//! replay; a second container on that volume refused by the database lock,
//! its message in its log; a mounted pipeline used and `STREAMFORGE_TOKEN`
//! enforced (also for the client in the image, which reads it).
//!
//! Every `docker` command of the README's Docker section and of
//! docs/deploy.md is run here (the plain build aside: it builds the Rust
//! stage; and deploy.md's copy of the volume into a tarball), with `docker`
//! read as `podman`, and names, ports and the image tag made unique to the
//! run.
//!
//! The engine's settings come from `CONTAINERS_CONF` when set, else from a
//! file written here with what sandboxes like CI's need (no systemd, no
//! ulimits to raise): `[containers] default_ulimits = []`, `[engine]
//! cgroup_manager = "cgroupfs"` and `runtime = "runc"`; builds use
//! `BUILDAH_ISOLATION=chroot` and `BUILDAH_FORMAT=docker` (the OCI format has
//! no `HEALTHCHECK`) unless set.
//!
//! Without podman or the base image the test says so and passes, except
//! under CI (`CI` set), where it fails: `.ci/run` installs podman, runc and
//! debootstrap and makes the base image.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use streamforge_testkit::{free_port, get_status};

use crate::support::server::client::{client, closed_port_url, run};
use crate::support::server::{start, tempdir};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The base image the tests build on.
const BASE: &str = "localhost/debian:bookworm-slim";

/// The documented Docker commands, as the docs spell them ([`DOCKER_DOCS`]).
/// `BUILD` and `BACKUP` are not run (the build stage needs the Rust image;
/// the backup, a `debian:bookworm-slim` from a registry); every other one is.
const BUILD: &str = "docker build -t streamforge .";
const BACKUP: &str = "docker run --rm -v streamforge-data:/data:ro -v \"$PWD\":/backup debian:bookworm-slim tar -C /data -cf /backup/streamforge-data.tar .";
/// The documented commands this file does not run.
const NOT_RUN: &[&str] = &[BUILD, BACKUP];
const BUILD_PREBUILT: &str = "docker build --build-context build=bin -t streamforge .";
const RUN: &str = "docker run -d --name streamforge -p 8080:8080 -v streamforge-data:/data --stop-timeout 60 streamforge";
const EXEC_STATUS: &str = "docker exec streamforge streamforge status";
const HEALTH: &str = "docker inspect --format '{{.State.Health.Status}}' streamforge";
const STOP: &str = "docker stop streamforge";
const LOGS: &str = "docker logs streamforge";
const RM: &str = "docker rm streamforge";
const RUN_SECOND: &str = "docker run --name streamforge-2 -v streamforge-data:/data streamforge";
const LOGS_SECOND: &str = "docker logs streamforge-2";
const RM_SECOND: &str = "docker rm streamforge-2";
const RUN_PAGEVIEWS: &str = "docker run -d --name pageviews -p 8081:8080 -v pageviews-data:/data -v $PWD/examples:/examples:ro -e STREAMFORGE_PIPELINE=/examples/pageviews.pipeline.json -e STREAMFORGE_TOKEN --stop-timeout 60 streamforge";
const EXEC_PAGEVIEWS_STATUS: &str = "docker exec pageviews streamforge status";

/// The commands this file runs.
const RUN_HERE: &[&str] = &[
    BUILD_PREBUILT,
    RUN,
    EXEC_STATUS,
    HEALTH,
    STOP,
    LOGS,
    RM,
    RUN_SECOND,
    LOGS_SECOND,
    RM_SECOND,
    RUN_PAGEVIEWS,
    EXEC_PAGEVIEWS_STATUS,
];

/// How long one engine command may take (a build copies the binary into a
/// layer; a stop waits for the final checkpoint).
const COMMAND_DEADLINE: Duration = Duration::from_secs(180);
/// How long a container may take to answer `/readyz` 200, its health check
/// to report healthy, a refused container to exit.
const WAIT_DEADLINE: Duration = Duration::from_secs(60);

/// Where the Docker commands are documented: a file (from the repository's
/// root) and its section (`## NAME`), or the whole file (`None`).
const DOCKER_DOCS: &[(&str, Option<&str>)] =
    &[("README.md", Some("Docker")), ("docs/deploy.md", None)];

/// The `docker` lines of [`DOCKER_DOCS`]' ```sh blocks (comments cut off).
fn documented_docker_lines() -> Vec<String> {
    let mut text = String::new();
    for (file, section) in DOCKER_DOCS {
        let doc = std::fs::read_to_string(Path::new(ROOT).join(file)).expect(file);
        match section {
            Some(name) => text.push_str(
                doc.split("\n## ")
                    .find(|s| s.starts_with(&format!("{name}\n")))
                    .unwrap_or_else(|| panic!("{file} has a ## {name} section")),
            ),
            None => text.push_str(&doc),
        }
        text.push('\n');
    }
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_sh = !in_sh && line.trim() == "```sh";
            continue;
        }
        if in_sh && line.starts_with("docker ") {
            let cmd = line.split(" #").next().unwrap_or(line).trim_end();
            lines.push(cmd.to_string());
        }
    }
    lines
}

#[test]
fn readme_docker_commands_are_the_tests() {
    let lines = documented_docker_lines();
    let mut expected: Vec<&str> = RUN_HERE.to_vec();
    expected.extend(NOT_RUN);
    for want in &expected {
        assert!(
            lines.iter().any(|l| l == want),
            "{DOCKER_DOCS:?} show `{want}` (tests/it/container.rs runs it); they have:\n{}",
            lines.join("\n")
        );
    }
    for line in &lines {
        assert!(
            expected.contains(&line.as_str()),
            "{DOCKER_DOCS:?} show `{line}`, which tests/it/container.rs does not run"
        );
    }
    // The README keeps the first steps: build, run, stop.
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README.md");
    for want in [BUILD, RUN, STOP] {
        assert!(readme.contains(want), "README.md shows `{want}`");
    }
}

/// `streamforge health --ready` (the image's `HEALTHCHECK`) asks `/readyz`:
/// ok on a ready server, exit status 1 when nothing answers.
#[test]
fn health_ready_asks_readyz() {
    let dir = tempdir();
    let s = start(&dir.path().join("db"), &["--token", "s3cret"]);
    let mut ok = client(&["health", "--ready"]);
    ok.env("STREAMFORGE_URL", &s.base);
    assert_eq!(run(ok, None).ok().stdout, "ok\n", "no token needed");
    let r = run(
        client(&["health", "--ready", "--url", &closed_port_url()]),
        None,
    )
    .failed();
    assert!(
        r.stderr.starts_with("streamforge: error: not ready: "),
        "{r:?}"
    );
}

/// A finished engine command.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn ok(self, what: &str) -> Out {
        assert_eq!(self.code, 0, "{what} failed: {self:?}");
        self
    }
}

/// Reads a pipe to its end on a thread.
fn drain(mut r: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = r.read_to_end(&mut s);
        let _ = tx.send(String::from_utf8_lossy(&s).into_owned());
    });
    rx
}

/// Waits for `child` at most `deadline`; kills it (and fails) after that.
fn finish(mut child: Child, what: &str, deadline: Duration) -> Out {
    let out = drain(child.stdout.take().expect("stdout is piped"));
    let err = drain(child.stderr.take().expect("stderr is piped"));
    let end = Instant::now() + deadline;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: no exit within {deadline:?}; stderr: {}",
                err.recv_timeout(Duration::from_secs(5)).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Out {
        code: status.code().unwrap_or(-1),
        stdout: out
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_default(),
        stderr: err
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_default(),
    }
}

/// Splits a command line into words: blanks separate, single quotes group.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quote in {line}");
    if any {
        out.push(cur);
    }
    out
}

/// podman, set up for this machine, and what a run made (removed when
/// dropped).
struct Podman {
    conf: Option<PathBuf>,
    /// Unique to this run: added to every container and volume name and
    /// the image tag.
    suffix: String,
    /// Documented host port -> this run's.
    ports: BTreeMap<String, u16>,
    /// The build context standing for the build stage.
    bin: PathBuf,
    containers: Vec<String>,
    volumes: Vec<String>,
    image: Option<String>,
    _dir: tempfile::TempDir,
}

/// Whether podman can run here: `None` (with a line saying why) when it
/// cannot outside CI; under CI a missing piece fails the test.
fn podman() -> Option<Podman> {
    let missing = |what: &str| -> Option<Podman> {
        crate::support::server::require_tool(
            "container",
            Err(format!(
                "{what} (.ci/run installs podman, runc and debootstrap and makes the base image)"
            )),
        )
    };
    let dir = tempdir();
    let conf = if std::env::var_os("CONTAINERS_CONF").is_some() {
        None
    } else {
        let path = dir.path().join("containers.conf");
        std::fs::write(
            &path,
            "[containers]\ndefault_ulimits = []\n\n[engine]\ncgroup_manager = \"cgroupfs\"\nruntime = \"runc\"\n",
        )
        .expect("containers.conf");
        Some(path)
    };
    let p = Podman {
        conf,
        suffix: format!(
            "t{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ),
        ports: BTreeMap::new(),
        bin: dir.path().join("bin"),
        containers: Vec::new(),
        volumes: Vec::new(),
        image: None,
        _dir: dir,
    };
    match p.cmd(&["--version"]).output() {
        Ok(o) if o.status.success() => {}
        _ => return missing("no podman (apt-get install podman runc)"),
    }
    if p.run(&["image", "exists", BASE]).code != 0 {
        return missing(&format!("no base image {BASE}"));
    }
    // The build stage: the binary under test.
    let dest = p.bin.join("usr/local/bin");
    std::fs::create_dir_all(&dest).expect("bin dir");
    let exe = Path::new(env!("CARGO_BIN_EXE_streamforge"));
    if std::fs::hard_link(exe, dest.join("streamforge")).is_err() {
        std::fs::copy(exe, dest.join("streamforge")).expect("copy the binary");
    }
    Some(p)
}

impl Podman {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("podman");
        c.args(args)
            .current_dir(ROOT)
            .env_remove("STREAMFORGE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(conf) = &self.conf {
            c.env("CONTAINERS_CONF", conf);
        }
        for (k, v) in [
            ("BUILDAH_ISOLATION", "chroot"),
            ("BUILDAH_FORMAT", "docker"),
        ] {
            if std::env::var_os(k).is_none() {
                c.env(k, v);
            }
        }
        c
    }

    /// Runs a podman command to its end (deadline).
    fn run(&self, args: &[&str]) -> Out {
        self.run_env(args, &[])
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        self.run_within(args, env, COMMAND_DEADLINE)
    }

    fn run_within(&self, args: &[&str], env: &[(&str, &str)], deadline: Duration) -> Out {
        let mut c = self.cmd(args);
        c.envs(env.iter().copied());
        let child = c.spawn().expect("spawn podman");
        finish(child, &format!("podman {}", args.join(" ")), deadline)
    }

    fn name(&self, readme: &str) -> String {
        format!("{readme}-{}", self.suffix)
    }

    fn image_tag(&self) -> String {
        format!("localhost/streamforge-test:{}", self.suffix)
    }

    /// This run's host port for a documented port.
    fn port(&mut self, readme: &str) -> u16 {
        *self
            .ports
            .entry(readme.to_string())
            .or_insert_with(free_port)
    }

    /// A documented command as this run runs it: `podman`, its names, ports,
    /// image and paths (every other word as the docs spell it).
    fn render(&mut self, line: &str) -> Vec<String> {
        let w = words(line);
        assert_eq!(w[0], "docker", "{line}");
        let sub = w[1].clone();
        let mut out = vec![sub.clone()];
        let mut positional = 0;
        let mut i = 2;
        while i < w.len() {
            let word = &w[i];
            i += 1;
            if positional > 0 || !word.starts_with('-') {
                let mapped = match (positional, sub.as_str()) {
                    (0, "run") => {
                        self.image = Some(self.image_tag());
                        self.image_tag()
                    }
                    (0, "build") => word.clone(),
                    (0, _) => self.name(word),
                    _ => word.clone(),
                };
                positional += 1;
                out.push(mapped);
                continue;
            }
            out.push(word.clone());
            let takes_value = matches!(
                word.as_str(),
                "--name"
                    | "-p"
                    | "-v"
                    | "-e"
                    | "--format"
                    | "-t"
                    | "--build-context"
                    | "--stop-timeout"
            );
            if !takes_value {
                continue;
            }
            let value = &w[i];
            i += 1;
            let mapped = match word.as_str() {
                "--name" => {
                    let n = self.name(value);
                    self.containers.push(n.clone());
                    n
                }
                "-p" => {
                    let (host, inner) = value.split_once(':').expect("HOST:PORT");
                    format!("{}:{inner}", self.port(host))
                }
                "-v" => {
                    let (src, dst) = value.split_once(':').expect("SRC:DST");
                    if let Some(rest) = src.strip_prefix("$PWD") {
                        format!("{ROOT}{rest}:{dst}")
                    } else {
                        let v = self.name(src);
                        self.volumes.push(v.clone());
                        format!("{v}:{dst}")
                    }
                }
                "-t" => {
                    self.image = Some(self.image_tag());
                    self.image_tag()
                }
                "--build-context" => match value.split_once('=') {
                    Some(("build", _)) => format!("build={}", self.bin.display()),
                    _ => value.clone(),
                },
                _ => value.clone(),
            };
            out.push(mapped);
        }
        out
    }

    /// Runs a documented command (deadline).
    fn readme(&mut self, line: &str) -> Out {
        self.readme_env(line, &[])
    }

    fn readme_env(&mut self, line: &str, env: &[(&str, &str)]) -> Out {
        self.readme_within(line, env, COMMAND_DEADLINE)
    }

    fn readme_within(&mut self, line: &str, env: &[(&str, &str)], deadline: Duration) -> Out {
        let args = self.render(line);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run_within(&args, env, deadline)
    }

    fn logs(&self, name: &str) -> String {
        let o = self.run(&["logs", name]);
        format!("{}{}", o.stdout, o.stderr)
    }

    fn inspect(&self, name: &str, format: &str) -> String {
        self.run(&["inspect", "--format", format, name])
            .ok("podman inspect")
            .stdout
            .trim()
            .to_string()
    }

    /// Waits until the container behind documented port `port` answers
    /// `/readyz` 200 from the host; fails early, with its log, if it exits.
    fn wait_ready(&mut self, name: &str, port: &str) -> String {
        let addr = format!("127.0.0.1:{}", self.port(port));
        let end = Instant::now() + WAIT_DEADLINE;
        let mut checked = Instant::now();
        loop {
            if get_status(&addr, "/readyz") == Some(200) {
                return format!("http://{addr}");
            }
            if checked.elapsed() > Duration::from_secs(1) {
                checked = Instant::now();
                let state = self.inspect(name, "{{.State.Status}}");
                assert!(
                    state == "running" || state == "created",
                    "container {name} is {state}; its log:\n{}",
                    self.logs(name)
                );
            }
            assert!(
                Instant::now() < end,
                "container {name}: /readyz on {addr} not 200 within {WAIT_DEADLINE:?}; its log:\n{}",
                self.logs(name)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = self.cmd(&["rm", "-f", "-t", "0", c]).output();
        }
        for v in &self.volumes {
            let _ = self.cmd(&["volume", "rm", "-f", v]).output();
        }
        if let Some(i) = &self.image {
            let _ = self.cmd(&["rmi", "-f", i]).output();
        }
    }
}

/// The `Uid:` line of `/proc/1/status` in the container, and PID 1's name.
fn pid1(p: &Podman, name: &str) -> (String, String) {
    let status = p
        .run(&["exec", name, "cat", "/proc/1/status"])
        .ok("podman exec cat /proc/1/status")
        .stdout;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .expect("Uid line")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let comm = p
        .run(&["exec", name, "cat", "/proc/1/comm"])
        .ok("podman exec cat /proc/1/comm")
        .stdout
        .trim()
        .to_string();
    (uid, comm)
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// The image as the docs run it: ready from the host, PID 1 as uid
/// 10001, healthy; state kept across a SIGTERM stop on the volume; a
/// second container on the volume refused; a mounted pipeline and the
/// token.
#[test]
fn image_runs_as_the_readme_says() {
    let Some(mut p) = podman() else { return };
    let t0 = Instant::now();
    let http = http();

    // Build: the runtime stage, the binary under test as the build stage.
    let mut build = p.render(BUILD_PREBUILT);
    build.insert(
        1,
        format!("--build-context=debian:bookworm-slim=docker-image://{BASE}"),
    );
    let build: Vec<&str> = build.iter().map(String::as_str).collect();
    p.run(&build).ok("podman build");
    let built = t0.elapsed();

    // Small: the base, the binary, a user (nothing of the build context).
    let size = |image: &str| -> u64 {
        let o = p.run(&["image", "inspect", "--format", "{{.Size}}", image]);
        o.ok("podman image inspect")
            .stdout
            .trim()
            .parse()
            .expect("size")
    };
    let binary = std::fs::metadata(env!("CARGO_BIN_EXE_streamforge"))
        .expect("binary")
        .len();
    let added = size(&p.image_tag()).saturating_sub(size(BASE));
    assert!(
        added < binary + 2_000_000,
        "the image adds {added} bytes to its base, the binary is {binary}"
    );

    // Run; ready from the host through the published port.
    let main = p.name("streamforge");
    p.readme(RUN).ok("podman run");
    let base = p.wait_ready(&main, "8080");

    // The server is PID 1 (SIGTERM reaches it) and not root.
    let (uid, comm) = pid1(&p, &main);
    assert_eq!(comm, "streamforge", "PID 1 is the server");
    assert_eq!(
        uid, "10001 10001 10001 10001",
        "the server runs as uid 10001 (real, effective, saved, filesystem), not root"
    );

    // The client in the image reaches it.
    let status = p.readme(EXEC_STATUS).ok("podman exec streamforge status");
    assert!(status.stdout.contains("watermark"), "{status:?}");

    // The HEALTHCHECK reports healthy (podman runs health checks from
    // systemd timers, which sandboxes lack: run it now).
    let end = Instant::now() + WAIT_DEADLINE;
    loop {
        let h = p.run(&["healthcheck", "run", &main]);
        if h.code == 0 {
            break;
        }
        assert!(
            Instant::now() < end,
            "the HEALTHCHECK did not report healthy within {WAIT_DEADLINE:?}: {h:?}; its log:\n{}",
            p.logs(&main)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        p.readme(HEALTH).ok("podman inspect").stdout.trim(),
        "healthy"
    );

    // Events, and a watermark that emits windows but finalizes not all of
    // them (the default pipeline: 10 s windows, lateness 1 s): results.
    let events = (0..40)
        .map(|i| {
            format!(
                r#"{{"partition":"p{}","offset":{},"event":{{"id":"e{i}","key":"k{}","timestamp":{},"value":{i}}}}}"#,
                i % 4,
                i / 4,
                i % 3,
                1_000 * i
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let r = http
        .post(format!("{base}/events"))
        .header("content-type", "application/x-ndjson")
        .body(events)
        .send()
        .expect("POST /events");
    assert_eq!(r.status(), 200, "{:?}", r.text());
    let marks = (0..4)
        .map(|i| format!(r#"{{"partition":"p{i}","watermark":40500}}"#))
        .collect::<Vec<_>>()
        .join(",");
    let r = http
        .post(format!("{base}/watermarks/batch"))
        .body(format!("[{marks}]"))
        .send()
        .expect("POST /watermarks/batch");
    assert_eq!(r.status(), 200, "{:?}", r.text());
    let results = http
        .get(format!("{base}/results"))
        .send()
        .expect("GET /results")
        .text()
        .expect("body");
    let v: serde_json::Value = serde_json::from_str(&results).expect("JSON");
    assert!(
        v["results"].as_array().is_some_and(|a| !a.is_empty()),
        "{results}"
    );

    // docker stop: SIGTERM; a clean exit, logged, with a final checkpoint.
    p.readme(STOP).ok("podman stop");
    assert_eq!(
        p.inspect(&main, "{{.State.ExitCode}}"),
        "0",
        "a clean exit on SIGTERM (137 would be the SIGKILL after the stop timeout); its log:\n{}",
        p.logs(&main)
    );
    let log = p.readme(LOGS).ok("podman logs");
    let log = format!("{}{}", log.stdout, log.stderr);
    assert!(
        log.contains("shutting down") && log.contains("final checkpoint stored"),
        "the stop and the final checkpoint are logged:\n{log}"
    );
    p.readme(RM).ok("podman rm");

    // A new container on the same volume: the same results, nothing replayed.
    p.readme(RUN).ok("podman run (again)");
    let base = p.wait_ready(&main, "8080");
    let again = http
        .get(format!("{base}/results"))
        .send()
        .expect("GET /results")
        .text()
        .expect("body");
    assert_eq!(
        again, results,
        "a new container on the same volume serves the same /results"
    );
    let log = p.logs(&main);
    assert!(
        log.contains("ready: replayed 0 logged calls"),
        "the final checkpoint covered every call:\n{log}"
    );

    // A second container on the volume: refused by the database lock.
    let refused = p.readme_within(RUN_SECOND, &[], WAIT_DEADLINE);
    assert_eq!(
        refused.code, 1,
        "a second container on the same volume exits with status 1: {refused:?}"
    );
    let log = p.readme(LOGS_SECOND).ok("podman logs");
    let log = format!("{}{}", log.stdout, log.stderr);
    assert!(
        log.contains("database /data/streamforge.db is in use by another streamforge process"),
        "the lock's message is in the container's log:\n{log}"
    );
    p.readme(RM_SECOND).ok("podman rm");
    assert_eq!(
        get_status(&base.replace("http://", ""), "/readyz"),
        Some(200),
        "the first one still serves"
    );

    // A mounted pipeline and a token.
    let token = format!("tok-{}", p.suffix);
    let pv = p.name("pageviews");
    p.readme_env(RUN_PAGEVIEWS, &[("STREAMFORGE_TOKEN", &token)])
        .ok("podman run (pageviews)");
    let pv_base = p.wait_ready(&pv, "8081");
    let r = http
        .get(format!("{pv_base}/pipeline"))
        .send()
        .expect("GET /pipeline");
    assert_eq!(r.status(), 401, "the token is required: {:?}", r.text());
    let r = http
        .get(format!("{pv_base}/pipeline"))
        .bearer_auth(&token)
        .send()
        .expect("GET /pipeline");
    assert_eq!(r.status(), 200);
    let pipeline: serde_json::Value = r.json().expect("JSON");
    assert_eq!(
        pipeline["partitions"],
        serde_json::json!(["mobile", "web"]),
        "the mounted pipeline is used: {pipeline}"
    );
    let status = p
        .readme(EXEC_PAGEVIEWS_STATUS)
        .ok("podman exec streamforge status (token from the container's environment)");
    assert!(status.stdout.contains("mobile"), "{status:?}");

    eprintln!(
        "container test: image built in {:.1} s ({added} bytes on its base, for a binary of {binary}), all in {:.1} s",
        built.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
