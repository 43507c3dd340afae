//! `testenv`: starts real backends and keeps them up for Node tests, the demo
//! and benchmarks.
//!
//! Usage: testenv [--etcd N] [--redis N] [--webdis] [--gateway]
//!                [--token TOKEN | --no-auth] [--cors | --no-cors] [--lease-checkpoint]
//!                [--fenced] [--zookeeper [--curator]]
//!
//! Prints one JSON line with every URL, port and pid to stdout once all
//! servers answer, then runs until stdin is closed or it gets SIGTERM /
//! SIGINT / SIGHUP, and then stops everything (temp dirs removed).
//! etcd gets `--cors '*'` unless `--no-cors`; webdis and the gateways always
//! answer CORS. Gateways require `--token` (or `EDGELOCK_TESTENV_TOKEN`); if
//! neither is given a random token is generated and printed as `"token"`.
//! `--fenced` also starts a fenced resource (`fenced_url` in the JSON line).
//! `--zookeeper` starts a standalone ZooKeeper (tickTime 200: sessions of
//! 400 ms … 4 s; `zookeeper_connect` and `zookeeper_pid`); `--curator` also
//! compiles the Curator peer and prints the command that starts one
//! (`curator_command`: append CONNECT and SESSION_MS; commands on stdin,
//! see tools/devtools/java/CuratorPeer.java).

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use edgelock_devtools::curator::peer_command;
use edgelock_devtools::{Env, EtcdOptions, FencedResource, ZooKeeperServer};

const USAGE: &str = "usage: testenv [--etcd N] [--redis N] [--webdis] [--gateway] [--token T | --no-auth] [--cors | --no-cors] [--lease-checkpoint] [--fenced] [--zookeeper [--curator]]";

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: i32) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

extern "C" {
    // From the C library std already links; no crate needed for three calls.
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
}

fn install_signal_handlers() {
    const SIGHUP: i32 = 1;
    const SIGINT: i32 = 2;
    const SIGTERM: i32 = 15;
    for sig in [SIGHUP, SIGINT, SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            signal(sig, on_signal);
        }
    }
}

fn random_token() -> String {
    let mut buf = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !ok {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        buf = (nanos ^ u128::from(std::process::id())).to_le_bytes();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_count(v: Option<String>, flag: &str) -> Result<usize, String> {
    v.and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{flag} needs a number"))
}

fn main() -> ExitCode {
    let mut builder = Env::builder();
    let mut etcd_opts = EtcdOptions::default();
    let mut token = std::env::var("EDGELOCK_TESTENV_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let mut no_auth = false;
    let mut fenced = false;
    let mut zookeeper = false;
    let mut curator = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let r: Result<(), String> = match a.as_str() {
            "--etcd" => {
                parse_count(args.next(), "--etcd").map(|n| builder = builder.clone().etcd(n))
            }
            "--redis" => {
                parse_count(args.next(), "--redis").map(|n| builder = builder.clone().redis(n))
            }
            "--webdis" => {
                builder = builder.webdis(true);
                Ok(())
            }
            "--gateway" => {
                builder = builder.gateway(true);
                Ok(())
            }
            "--token" => args
                .next()
                .map(|t| token = Some(t))
                .ok_or_else(|| "--token needs a value".to_string()),
            "--no-auth" => {
                no_auth = true;
                Ok(())
            }
            "--cors" | "--no-cors" => {
                etcd_opts.cors = a == "--cors";
                Ok(())
            }
            "--fenced" => {
                fenced = true;
                Ok(())
            }
            "--zookeeper" | "--curator" => {
                zookeeper = true;
                curator |= a == "--curator";
                Ok(())
            }
            "--lease-checkpoint" => {
                etcd_opts.lease_checkpoint = true;
                Ok(())
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(e) = r {
            eprintln!("testenv: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    install_signal_handlers();
    let generated = token.is_none() && !no_auth;
    let token = if no_auth {
        String::new()
    } else {
        token.unwrap_or_else(random_token)
    };
    let env = match builder.etcd_options(etcd_opts).token(token.clone()).start() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("testenv: {e}");
            return ExitCode::FAILURE;
        }
    };
    let fenced = match fenced.then(FencedResource::start).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("testenv: fenced resource: {e}");
            return ExitCode::FAILURE;
        }
    };
    let zk = match zookeeper.then(ZooKeeperServer::start).transpose() {
        Ok(z) => z,
        Err(e) => {
            eprintln!("testenv: zookeeper: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut line = env.describe();
    if let Some(f) = &fenced {
        line["fenced_url"] = serde_json::Value::String(f.url());
    }
    if let Some(z) = &zk {
        line["zookeeper_connect"] = serde_json::Value::String(z.connect_string());
        line["zookeeper_pid"] = serde_json::json!(z.pid());
    }
    if curator {
        match peer_command() {
            Ok(cmd) => line["curator_command"] = serde_json::json!(cmd),
            Err(e) => {
                eprintln!("testenv: curator peer: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if generated && !env.gateways.is_empty() {
        line["token"] = serde_json::Value::String(token);
    }
    let mut out = std::io::stdout();
    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    std::thread::spawn(|| {
        let mut sink = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        STOP.store(true, Ordering::SeqCst);
    });
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(zk);
    drop(fenced);
    drop(env);
    ExitCode::SUCCESS
}
