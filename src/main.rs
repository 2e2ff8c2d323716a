//! The `streamforge` binary: `serve` and the client subcommands.

fn main() {
    eprintln!("streamforge: the service arrives with the next change");
    std::process::exit(2);
}
