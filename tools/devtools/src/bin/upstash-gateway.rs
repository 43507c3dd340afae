//! `upstash-gateway`: a local Upstash-REST-compatible HTTP gateway in front of
//! a running redis-server (see `edgelock_devtools::gateway` for the protocol).
//!
//! Usage: upstash-gateway --redis HOST:PORT [--listen ADDR] [--token TOKEN]
//!                        [--verbose] [--exit-on-eof]
//!
//! The token may also come from the `UPSTASH_GATEWAY_TOKEN` environment
//! variable (preferred: command lines are visible to other users). Without a
//! token every request is accepted. When listening, prints one JSON line
//! `{"url":"http://127.0.0.1:PORT","port":PORT}` to stdout. With
//! `--exit-on-eof` it exits when stdin is closed (so a parent that dies takes
//! the gateway with it).

use std::process::ExitCode;

use edgelock_devtools::{GatewayConfig, UpstashGateway};

const USAGE: &str = "usage: upstash-gateway --redis HOST:PORT [--listen ADDR] [--token TOKEN] [--verbose] [--exit-on-eof]";

fn main() -> ExitCode {
    let mut redis = None;
    let mut listen = None;
    let mut token = std::env::var("UPSTASH_GATEWAY_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let mut verbose = false;
    let mut exit_on_eof = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--redis" => redis = args.next(),
            "--listen" => listen = args.next(),
            "--token" => token = args.next(),
            "--verbose" => verbose = true,
            "--exit-on-eof" => exit_on_eof = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("upstash-gateway: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(redis) = redis else {
        eprintln!("upstash-gateway: --redis is required\n{USAGE}");
        return ExitCode::from(2);
    };
    let mut cfg = GatewayConfig::new(redis);
    if let Some(l) = listen {
        cfg.listen = l;
    }
    cfg.token = token;
    cfg.verbose = verbose;
    let gw = match UpstashGateway::start_with(cfg) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("upstash-gateway: cannot listen: {e}");
            return ExitCode::FAILURE;
        }
    };
    edgelock_devtools::serve_cli::announce_and_serve(gw.url(), gw.port(), exit_on_eof, gw, |s| {
        s.join()
    })
}
