//! `fenced-resource`: a tiny HTTP resource that checks fencing tokens (see
//! `edgelock_devtools::fenced` for its API). For demos and tests of what a
//! lock protects.
//!
//! Usage: fenced-resource [--listen ADDR] [--exit-on-eof]
//!
//! Prints one JSON line `{"url":"http://127.0.0.1:PORT","port":PORT}` once
//! listening. With `--exit-on-eof` it exits when stdin is closed (so a parent
//! that dies takes it along).

use std::process::ExitCode;

use edgelock_devtools::FencedResource;

const USAGE: &str = "usage: fenced-resource [--listen ADDR] [--exit-on-eof]";

fn main() -> ExitCode {
    let mut listen = "127.0.0.1:0".to_string();
    let mut exit_on_eof = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => match args.next() {
                Some(l) => listen = l,
                None => {
                    eprintln!("fenced-resource: --listen needs an address\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "--exit-on-eof" => exit_on_eof = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("fenced-resource: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let res = match FencedResource::start_on(&listen) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fenced-resource: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    edgelock_devtools::serve_cli::announce_and_serve(res.url(), res.port(), exit_on_eof, res, |s| {
        s.join()
    })
}
