//! Child server processes that never outlive the test process.
//!
//! Every server is spawned together with a tiny `sh` watchdog that polls the
//! test process once a second: if the test process disappears without running
//! its destructors (SIGKILL, abort, a static never dropped), the watchdog kills
//! the server and removes its temp dir. Normal shutdown goes through
//! [`ManagedProcess::kill`] / `Drop`, which also reaps the watchdog.
//! Signals are sent with the `kill` utility so this crate stays libc-free.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// What to run; kept so the same server can be started again (`restart`).
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// stdout and stderr are appended here.
    pub log: PathBuf,
    /// Removed by the watchdog if the test process dies without cleaning up.
    pub cleanup_dir: Option<PathBuf>,
}

impl ProcessSpec {
    pub fn new(program: impl Into<PathBuf>, log: impl Into<PathBuf>) -> ProcessSpec {
        ProcessSpec {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            log: log.into(),
            cleanup_dir: None,
        }
    }

    pub fn arg(mut self, a: impl Into<OsString>) -> ProcessSpec {
        self.args.push(a.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, it: I) -> ProcessSpec {
        self.args.extend(it.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, k: impl Into<OsString>, v: impl Into<OsString>) -> ProcessSpec {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn cleanup_dir(mut self, dir: impl Into<PathBuf>) -> ProcessSpec {
        self.cleanup_dir = Some(dir.into());
        self
    }
}

/// A running (or stopped) server process.
#[derive(Debug)]
pub struct ProcessGuard {
    spec: ProcessSpec,
    child: Option<Child>,
    watchdog: Option<Child>,
}

const WATCHDOG: &str = r#"trap '' INT HUP
parent=$1; child=$2; dir=$3
while kill -0 "$parent" 2>/dev/null; do
  kill -0 "$child" 2>/dev/null || exit 0
  sleep 1
done
kill -KILL "$child" 2>/dev/null
[ -n "$dir" ] && rm -rf -- "$dir"
exit 0"#;

impl ProcessGuard {
    pub fn spawn(spec: ProcessSpec) -> io::Result<ProcessGuard> {
        let mut guard = ProcessGuard {
            spec,
            child: None,
            watchdog: None,
        };
        guard.start()?;
        Ok(guard)
    }

    fn start(&mut self) -> io::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.spec.log)?;
        let mut cmd = Command::new(&self.spec.program);
        cmd.args(&self.spec.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        for (k, v) in &self.spec.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot start {}: {e}", self.spec.program.display()),
            )
        })?;
        let dir = self
            .spec
            .cleanup_dir
            .as_ref()
            .map(|d| d.as_os_str().to_owned())
            .unwrap_or_default();
        // The watchdog is best effort: without `sh` the server still works,
        // it just is not reaped if the test process is SIGKILLed.
        self.watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("edgelock-devtools-watchdog")
            .arg(std::process::id().to_string())
            .arg(child.id().to_string())
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        self.child = Some(child);
        Ok(())
    }

    pub fn spec(&self) -> &ProcessSpec {
        &self.spec
    }

    /// OS process id while the process has been started and not yet reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Sends a signal by name (`STOP`, `CONT`, `TERM`, ...).
    pub fn signal(&self, name: &str) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "process not running"))?;
        send_signal(pid, name)
    }

    /// Freezes the process (SIGSTOP): its sockets stay open but nothing answers.
    pub fn pause(&self) -> io::Result<()> {
        self.signal("STOP")
    }

    pub fn resume(&self) -> io::Result<()> {
        self.signal("CONT")
    }

    /// SIGKILL and reap. Idempotent.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.reap_watchdog();
    }

    /// SIGTERM, then SIGKILL if still running after `grace`.
    pub fn terminate(&mut self, grace: Duration) {
        if let Some(child) = self.child.as_mut() {
            let _ = send_signal(child.id(), "CONT");
            let _ = send_signal(child.id(), "TERM");
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if !matches!(child.try_wait(), Ok(None)) {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill();
    }

    /// Kills the process (if running) and starts the same command again.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.start()
    }

    fn reap_watchdog(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }

    /// The last `max` bytes of the process log, for error messages.
    pub fn log_tail(&self, max: u64) -> String {
        log_tail(&self.spec.log, max)
    }

    /// Polls `ready` every 25 ms until it returns true, the process exits, or
    /// `timeout` passes. Errors carry the log tail.
    pub fn wait_ready(
        &mut self,
        what: &str,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if ready() {
                return Ok(());
            }
            if !self.is_running() {
                return Err(io::Error::other(format!(
                    "{what} exited before it was ready; log tail:\n{}",
                    self.log_tail(2000)
                )));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{what} not ready after {timeout:?}; log tail:\n{}",
                        self.log_tail(2000)
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `kill -<name> <pid>` through the `kill` utility.
pub fn send_signal(pid: u32, name: &str) -> io::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "kill -{name} {pid} failed: {status}"
        )))
    }
}

pub(crate) fn log_tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TempDir;

    #[test]
    fn pause_resume_kill_and_restart_a_real_process() {
        let dir = TempDir::new("proc").unwrap();
        let spec = ProcessSpec::new("sleep", dir.path().join("log")).arg("30");
        let mut p = ProcessGuard::spawn(spec).unwrap();
        let pid = p.pid().unwrap();
        let state = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            stat.rsplit(") ").next().unwrap().chars().next().unwrap()
        };
        p.pause().unwrap();
        // Signal delivery is asynchronous.
        let deadline = Instant::now() + Duration::from_secs(2);
        while state() != 'T' && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(state(), 'T', "stopped after SIGSTOP");
        p.resume().unwrap();
        assert!(p.is_running());
        p.restart().unwrap();
        let pid2 = p.pid().unwrap();
        assert_ne!(pid, pid2);
        p.kill();
        assert!(!p.is_running());
        assert!(p.pid().is_none());
    }

    #[test]
    fn wait_ready_reports_early_exit_with_log() {
        let dir = TempDir::new("proc").unwrap();
        let spec = ProcessSpec::new("sh", dir.path().join("log"))
            .arg("-c")
            .arg("echo boom-from-child; exit 3");
        let mut p = ProcessGuard::spawn(spec).unwrap();
        let err = p
            .wait_ready("sh", Duration::from_secs(5), || false)
            .unwrap_err();
        assert!(err.to_string().contains("boom-from-child"), "{err}");
    }
}
