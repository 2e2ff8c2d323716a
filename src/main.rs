//! The `streamforge` binary: `serve` and the client subcommands ([`streamforge::cli`]).

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use streamforge::config::ServeArgs;
use streamforge::server::{self, Config};

/// Exact, continuously corrected event-time windowed aggregates over HTTP.
#[derive(Debug, Parser)]
#[command(name = "streamforge", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP service.
    Serve(ServeArgs),
    #[command(flatten)]
    Client(streamforge::cli::ClientCommand),
}

/// jemalloc: per-thread caches that suit calls handed between threads (a
/// body read on an HTTP task, applied and freed on the ingest thread),
/// where glibc's malloc takes its slow path (BENCHMARKS.md, issue 35).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let args = match cli.command {
        Command::Serve(args) => args,
        Command::Client(cmd) => return exit(streamforge::cli::run(cmd)),
    };
    // Access lines are batched (`streamforge::logs`); without the flusher
    // thread every line is written at once.
    let logs = streamforge::logs::Logs::stderr();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        // colours only for a person at a terminal, never in log files
        .with_ansi(std::io::stderr().is_terminal());
    match &logs {
        Ok(logs) => {
            subscriber.with_writer(logs.clone()).init();
            logs.flush_on_panic();
            if !std::io::stderr().is_terminal() {
                logs.take_access_lines();
            }
        }
        Err(e) => {
            subscriber.with_writer(std::io::stderr).init();
            tracing::warn!(error = %e, "cannot start the log flusher; access lines are written one by one");
        }
    }
    let result = serve(args);
    if let Ok(logs) = &logs {
        logs.flush();
    }
    exit(result)
}

fn exit(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("streamforge: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = Config::from_args(&args).map_err(anyhow::Error::msg)?;
    // Calls run their locked section on the blocking pool; a small pool is
    // plenty (group commit batches whoever waits) and bounds the number of
    // malloc arenas that keep freed request buffers resident.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(8)
        .build()?;
    // The SIGTERM handler first: as a container's PID 1 the server gets a
    // signal only once it handles it (the kernel drops it before), and
    // `docker stop` would then wait for its timeout and kill.
    let shutdown = {
        let _in_runtime = rt.enter();
        shutdown_signal()
    };
    // One database, one process: the lock comes before anything reads or
    // writes the database, and is held until this process ends.
    let mut lock = streamforge::store::DbLock::acquire(&config.service.db)?;
    // A database that would be refused is refused before anything listens.
    streamforge::service::Service::preflight(&config.service)?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.addr))?;
        let addr = listener.local_addr()?;
        lock.record_address(&addr.to_string()).map_err(|e| {
            anyhow::anyhow!("cannot write the lock file {}: {e}", lock.path().display())
        })?;
        println!("listening on {addr}");
        flush_stdout();
        server::run(listener, config, shutdown).await?;
        drop(lock);
        Ok(())
    })
}

/// Flushes the start-up lines (`listening on`, `ready`) that scripts wait
/// for; a stdout that cannot be written to is logged, not fatal (the
/// server still serves, and /readyz says when it is ready).
fn flush_stdout() {
    use std::io::Write as _;
    if let Err(e) = std::io::stdout().flush() {
        tracing::warn!(error = %e, "cannot write to stdout");
    }
}

/// Completes on SIGINT or SIGTERM. The SIGTERM handler is installed when
/// this is called (inside the runtime), not when the future is first polled.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    async move {
        let ctrl_c = async {
            if let Err(e) = tokio::signal::ctrl_c().await {
                // No Ctrl-C handler: SIGTERM still stops the server.
                tracing::warn!(error = %e, "cannot listen for Ctrl-C; stop the server with SIGTERM");
                std::future::pending::<()>().await;
            }
        };
        #[cfg(unix)]
        let term = async move {
            match term {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            () = ctrl_c => {},
            () = term => {},
        }
    }
}
