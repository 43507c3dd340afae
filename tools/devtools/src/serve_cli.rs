//! The shared tail of the server binaries (`upstash-gateway`, `fenced-resource`):
//! announce where the server listens, then run until stdin closes or forever.

use std::io::{Read, Write};
use std::process::ExitCode;

/// Prints `{"url":…,"port":…}` on stdout, then with `exit_on_eof` returns when
/// stdin is closed (dropping `server`, which stops it), else calls `join`.
pub fn announce_and_serve<S>(
    url: String,
    port: u16,
    exit_on_eof: bool,
    server: S,
    join: impl FnOnce(S),
) -> ExitCode {
    let line = serde_json::json!({ "url": url, "port": port });
    let mut out = std::io::stdout();
    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    if exit_on_eof {
        let mut sink = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        drop(server);
    } else {
        join(server);
    }
    ExitCode::SUCCESS
}
