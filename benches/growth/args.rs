//! The bench's flags (`--events`, `--partitions`, ...) and the server
//! binary they name.

use std::path::PathBuf;
use std::process::Command;

use super::http_support::binary;

const USAGE: &str = "usage: cargo bench --bench growth -- [--events N] [--partitions P] \
[--keys K] [--batch B] [--out FILE] [--bin PATH] [--kill-during-merge[=MIN_ENTRIES]]";

pub struct Args {
    pub events: u64,
    pub partitions: usize,
    pub keys: u64,
    pub batch: usize,
    pub out: Option<PathBuf>,
    pub bin: Option<PathBuf>,
    /// `--kill-during-merge[=N]`: each `kill -9` waits for an id-index
    /// merge of at least N entries (default 1,000,000) to be running.
    pub kill_during_merge: Option<u64>,
}

pub fn parse_args() -> Args {
    let mut a = Args {
        events: 50_000_000,
        partitions: 1,
        keys: 1000,
        batch: 1000,
        out: None,
        bin: None,
        kill_during_merge: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        // `cargo bench` passes `--bench`.
        if arg == "--bench" {
            continue;
        }
        if let Some(rest) = arg.strip_prefix("--kill-during-merge") {
            a.kill_during_merge = Some(match rest.strip_prefix('=') {
                Some(n) => n.replace('_', "").parse().unwrap_or_else(|_| {
                    panic!("--kill-during-merge: not a number: {n:?}\n{USAGE}")
                }),
                None if rest.is_empty() => 1_000_000,
                None => panic!("unknown flag {arg}\n{USAGE}"),
            });
            continue;
        }
        if arg == "--help" || arg == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .unwrap_or_else(|| panic!("{flag} needs a value\n{USAGE}"))
        };
        let num = |v: String| -> u64 {
            v.replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("{flag}: not a number: {v:?}\n{USAGE}"))
        };
        match flag.as_str() {
            "--events" => a.events = num(value()),
            "--partitions" => a.partitions = num(value()) as usize,
            "--keys" => a.keys = num(value()),
            "--batch" => a.batch = num(value()) as usize,
            "--out" => a.out = Some(PathBuf::from(value())),
            "--bin" => a.bin = Some(PathBuf::from(value())),
            _ => panic!("unknown argument {arg:?}\n{USAGE}"),
        }
    }
    assert!(
        a.events >= 10,
        "--events must be at least 10 (one per tenth)"
    );
    assert!(a.partitions >= 1, "--partitions must be at least 1");
    assert!(a.keys >= 1, "--keys must be at least 1");
    assert!(a.batch >= 1, "--batch must be at least 1");
    a
}

/// `--bin`, else `STREAMFORGE_BIN` or the release binary, which is built
/// when missing.
pub fn server_binary(a: &Args) -> PathBuf {
    if let Some(b) = &a.bin {
        return b.clone();
    }
    let bin = binary();
    if !bin.exists() && std::env::var_os("STREAMFORGE_BIN").is_none() {
        println!(
            "{} is missing: cargo build --release --bin streamforge",
            bin.display()
        );
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--release", "--bin", "streamforge"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build --release");
        assert!(status.success(), "cargo build --release failed");
    }
    bin
}
