//! `edgelock run`: hold the lock (or re-enter the caller's), run the command
//! under it, stop the command if the lock is lost, release when it exits.
//! `elect` runs its command the same way ([`run_holding`]).

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use edgelock::core::{AcquireOptions, LockHandle, LockKind, Wait};
use edgelock::native::{Client, Lock};
use edgelock::LockError;

use crate::args::Options;
use crate::connect::connect;
use crate::{
    limit_of, mode_name, Exit, EX_BUSY, EX_CANNOT_EXECUTE, EX_LOST, EX_NOT_FOUND, EX_SOFTWARE,
};

/// How long a command may take to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);
/// How often the child is polled while waiting for it or for the lock's loss.
const POLL: Duration = Duration::from_millis(50);

pub(crate) fn cmd_run(o: &Options) -> Result<i32, Exit> {
    let client = connect(o)?;
    let result = hold_and_run(&client, o);
    let _ = client.close(); // revokes the session lease; errors leave it to expire
    result
}

/// The wait `--try` / `--wait` ask for.
pub(crate) fn wait_of(o: &Options) -> Wait {
    match (o.try_only, o.wait_ms) {
        (true, _) => Wait::Try,
        (false, Some(ms)) => Wait::For(ms),
        (false, None) => Wait::Forever,
    }
}

/// The variable `run` exports the exclusive lock's handle in (a credential:
/// only in the command's environment, never printed).
const HANDLE_VAR: &str = "EDGELOCK_LOCK_HANDLE";

/// A nested `run` of the lock its caller holds: the handle that
/// [`HANDLE_VAR`] carries, if it names NAME on this client's backend.
fn inherited_handle(client: &Client, o: &Options) -> Option<LockHandle> {
    if o.kind != LockKind::Exclusive {
        return None;
    }
    let json = std::env::var(HANDLE_VAR).ok()?;
    let handle = LockHandle::from_json(&json).ok()?;
    (handle.name == o.name
        && handle.kind == LockKind::Exclusive
        && handle.backend.as_str() == client.backend())
    .then_some(handle)
}

fn hold_and_run(client: &Client, o: &Options) -> Result<i32, Exit> {
    if let Some(handle) = inherited_handle(client, o) {
        // Our caller holds NAME: re-enter through its handle instead of
        // waiting forever on ourselves. One more hold, counted on the
        // backend; our release at the end takes it away again.
        match client.reenter(&handle) {
            Ok(lock) => {
                eprintln!(
                    "edgelock: re-entered {} token={}",
                    o.name,
                    lock.fencing_token()
                );
                return run_holding(lock, o, &[]);
            }
            // A stale handle (its hold is gone): take the lock as usual.
            // Anything else (no quorum reachable, a handle of another
            // prefix) is an error rather than a wait on ourselves.
            Err(e @ LockError::Lost { .. }) => {
                eprintln!(
                    "edgelock: {HANDLE_VAR} does not hold {} here ({e}); acquiring it",
                    o.name
                )
            }
            Err(e) => return Err(Exit::lock(&e)),
        }
    }
    let wait = wait_of(o);
    let lock =
        match client.acquire_kind(&o.name, o.kind, AcquireOptions { wait, ttl_ms: None }, None) {
            Ok(Some(lock)) => lock,
            Ok(None) if limit_of(o.kind).is_some() => {
                return Err(Exit {
                    code: EX_BUSY,
                    message: format!("every permit of {:?} is taken", o.name),
                })
            }
            Ok(None) => {
                return Err(Exit {
                    code: EX_BUSY,
                    message: format!("lock {:?} is held by someone else", o.name),
                })
            }
            Err(e) => return Err(Exit::lock(&e)),
        };
    // The token stays last on the line: scripts read it after `token=`.
    let held = match (lock.kind(), lock.slot()) {
        (LockKind::Permits { limit }, Some(slot)) => format!(" slot={slot}/{limit}"),
        (LockKind::Exclusive, _) => String::new(),
        (kind, _) => format!(" {}", mode_name(kind)),
    };
    eprintln!(
        "edgelock: acquired {}{held} token={}",
        o.name,
        lock.fencing_token()
    );
    run_holding(lock, o, &[])
}

/// Runs the command while `lock` is held (`extra_env` on top of the lock's
/// own variables), stops it if the lock is lost, and releases the lock
/// when it exits.
pub(crate) fn run_holding(
    lock: Lock,
    o: &Options,
    extra_env: &[(&str, String)],
) -> Result<i32, Exit> {
    let (program, args) = match o.command.split_first() {
        Some(split) => split,
        None => return Err(Exit::usage("missing command")),
    };
    let spawned = Command::new(program)
        .args(args)
        .envs(extra_env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("EDGELOCK_FENCING_TOKEN", lock.fencing_token().to_string())
        .env("EDGELOCK_LOCK_NAME", &o.name)
        .env("EDGELOCK_LOCK_MODE", mode_name(lock.kind()))
        .envs(lock.slot().map(|slot| ("EDGELOCK_SLOT", slot.to_string())))
        .envs(limit_of(lock.kind()).map(|limit| ("EDGELOCK_LOCK_LIMIT", limit.to_string())))
        .envs(
            (lock.kind() == LockKind::Exclusive)
                .then(|| serde_json::to_string(lock.handle()).ok())
                .flatten()
                .map(|json| (HANDLE_VAR, json)),
        )
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = lock.release();
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => EX_NOT_FOUND,
                std::io::ErrorKind::PermissionDenied => EX_CANNOT_EXECUTE,
                _ => EX_SOFTWARE,
            };
            return Err(Exit {
                code,
                message: format!("cannot run {program:?}: {e}"),
            });
        }
    };
    match supervise(&mut child, &lock) {
        Supervised::Exited(status) => finish(lock, status, &o.name),
        Supervised::Lost(reason) => {
            stop_child(&mut child);
            Err(Exit { code: EX_LOST, message: format!("lock {:?} was lost while the command ran ({reason}); the command was terminated", o.name) })
        }
        Supervised::WaitFailed(e) => {
            stop_child(&mut child);
            let _ = lock.release();
            Err(Exit {
                code: EX_SOFTWARE,
                message: format!("cannot wait for the command: {e}"),
            })
        }
    }
}

enum Supervised {
    Exited(ExitStatus),
    Lost(String),
    WaitFailed(std::io::Error),
}

/// Waits for the child to exit or the lock to be lost, whichever comes first.
fn supervise(child: &mut Child, lock: &Lock) -> Supervised {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Supervised::Exited(status),
            Ok(None) => {}
            Err(e) => return Supervised::WaitFailed(e),
        }
        // Doubles as the poll interval's sleep, and wakes at once on loss.
        if let Some(reason) = lock.wait_lost(Some(POLL)) {
            return Supervised::Lost(reason.to_string());
        }
    }
}

/// SIGTERM through the `kill` utility (std has no signal API), then SIGKILL
/// (`Child::kill`) if the command has not exited within `TERM_GRACE`.
fn stop_child(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let t = Instant::now();
    while t.elapsed() < TERM_GRACE {
        if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
            return;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn finish(lock: Lock, status: ExitStatus, name: &str) -> Result<i32, Exit> {
    let code = exit_status_code(status);
    match lock.release() {
        Ok(true) => Ok(code),
        Ok(false) => Err(Exit {
            code: EX_LOST,
            message: format!(
                "lock {name:?} was lost before the command finished (command exit code {code})"
            ),
        }),
        Err(e) => {
            // The command ran under the lock; the session close (or lease
            // expiry) still frees it.
            eprintln!("edgelock: warning: releasing lock {name:?} failed: {e}");
            Ok(code)
        }
    }
}

fn exit_status_code(status: ExitStatus) -> i32 {
    if let Some(c) = status.code() {
        return c;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return 128 + sig;
        }
    }
    EX_SOFTWARE
}
