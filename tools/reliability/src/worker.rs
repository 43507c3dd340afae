//! Clients in their own processes, so that a scenario can SIGSTOP / SIGCONT
//! or kill them: `reliability worker '<WorkerSpec JSON>'` runs the contender
//! loop and prints every op as a JSON line; [`WorkerProcess`] starts one and
//! collects its history.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use edgelock_devtools::process::send_signal;
use serde::{Deserialize, Serialize};

use crate::backend::BackendSpec;
use crate::history::{History, Op};
use crate::resource::ResourceClient;
use crate::workload::{contend, ContenderCfg};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub backend: BackendSpec,
    pub contender: ContenderCfg,
    pub resource_url: String,
    /// The loop stops after this long (or `contender.max_rounds`).
    pub duration_ms: u64,
}

/// The `worker` subcommand: runs until done, then closes its client.
pub fn worker_main(spec_json: &str) -> i32 {
    let spec: WorkerSpec = match serde_json::from_str(spec_json) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("reliability worker: bad spec: {e}");
            return 64;
        }
    };
    let client = match spec.backend.client() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("reliability worker: {e}");
            return 69;
        }
    };
    let history = History::echoing();
    let resource = ResourceClient::new(&spec.resource_url);
    let stop = AtomicBool::new(false);
    contend(
        &client,
        &spec.contender,
        &resource,
        &history,
        &stop,
        Instant::now() + Duration::from_millis(spec.duration_ms),
    );
    let _ = client.close();
    0
}

/// A running worker process. Killed on drop.
pub struct WorkerProcess {
    child: Child,
    history: History,
    reader: Option<JoinHandle<()>>,
}

impl WorkerProcess {
    pub fn spawn(spec: &WorkerSpec) -> std::io::Result<WorkerProcess> {
        let exe = std::env::current_exe()?;
        let json = serde_json::to_string(spec).map_err(std::io::Error::other)?;
        let mut child = Command::new(exe)
            .arg("worker")
            .arg(json)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        let history = History::new();
        let h = history.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(op) = serde_json::from_str::<Op>(&line) {
                    h.record(op);
                }
            }
        });
        Ok(WorkerProcess {
            child,
            history,
            reader: Some(reader),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    pub fn pause(&self) -> std::io::Result<()> {
        send_signal(self.pid(), "STOP")
    }

    pub fn resume(&self) -> std::io::Result<()> {
        send_signal(self.pid(), "CONT")
    }

    /// Waits up to `timeout` for the process to exit (killing it after) and
    /// for its output to be read; returns its history.
    pub fn finish(mut self, timeout: Duration) -> History {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.history.clone()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = send_signal(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
