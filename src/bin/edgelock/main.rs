//! `edgelock`: run a command while holding a distributed lock (or leading an
//! election), or show who holds (or leads) one, on any backend the library
//! speaks from the command line: etcd, Redis (redis://, Upstash REST, Webdis),
//! Redlock, and the edgelock Worker's Durable Object lock service.
//!
//! `args` parses the command line (clap) into checked [`Options`],
//! `connect` turns them into a client, and `run`, `status` and `election`
//! are the commands. `help` holds the `--help` texts.

use std::io::Write;

use edgelock::core::LockKind;
use edgelock::LockError;

use crate::args::Cmd;

mod args;
mod connect;
mod election;
mod help;
mod run;
mod status;

const EX_USAGE: i32 = 64;
const EX_UNAVAILABLE: i32 = 69;
const EX_SOFTWARE: i32 = 70;
const EX_BUSY: i32 = 73;
const EX_WAIT_TIMEOUT: i32 = 74;
const EX_LOST: i32 = 75;
const EX_CANNOT_EXECUTE: i32 = 126;
const EX_NOT_FOUND: i32 = 127;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = run_cli(&args);
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// An error that ends the program with a message and an exit code (code 0:
/// a text asked for, such as `--help`, printed to stdout).
struct Exit {
    code: i32,
    message: String,
}

impl Exit {
    fn usage(message: impl Into<String>) -> Exit {
        Exit {
            code: EX_USAGE,
            message: format!("{}\nRun `edgelock --help` for usage.", message.into()),
        }
    }
    fn lock(e: &LockError) -> Exit {
        Exit {
            code: exit_code(e),
            message: e.to_string(),
        }
    }
}

fn exit_code(e: &LockError) -> i32 {
    match e {
        LockError::InvalidArgument { .. } => EX_USAGE,
        LockError::Transport { .. } | LockError::Backend { .. } | LockError::NoQuorum { .. } => {
            EX_UNAVAILABLE
        }
        LockError::Timeout { .. } => EX_WAIT_TIMEOUT,
        LockError::Lost { .. } => EX_LOST,
        _ => EX_SOFTWARE,
    }
}

fn run_cli(args: &[String]) -> i32 {
    let result = args::parse(args).and_then(|o| match o.cmd {
        Cmd::Run => run::cmd_run(&o),
        Cmd::Status => status::cmd_status(&o),
        Cmd::Elect => election::cmd_elect(&o),
        Cmd::Leader => election::cmd_leader(&o),
    });
    match result {
        Ok(code) => code,
        Err(e) if e.code == 0 => {
            print!("{}", e.message);
            0
        }
        Err(e) => {
            eprintln!("edgelock: {}", e.message);
            e.code
        }
    }
}

/// A kind's name as handles, `status` and EDGELOCK_LOCK_MODE spell it.
fn mode_name(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Permits { .. } => "permit",
        other => other.as_str(),
    }
}

fn limit_of(kind: LockKind) -> Option<u32> {
    match kind {
        LockKind::Permits { limit } => Some(limit),
        _ => None,
    }
}
