//! The built Worker (build/, `scripts/build-worker.sh`) in workerd through
//! Miniflare, for Rust tests and the reliability tool: [`WorkerdHost`] runs
//! `tools/devtools/workerd-host.mjs` with Node (Miniflare from
//! tests/worker/node_modules) on a free loopback port, its Durable Object
//! and D1 storage in a temp dir that outlives restarts and is removed on
//! drop.

use std::io;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{http_request, TempDir};

/// The API token the workerd host's Worker is given (its lock service's
/// front and job routes expect `Authorization: Bearer <this>`).
pub const WORKER_TOKEN: &str = "reliability-worker-token-0123456789";

/// The built Worker (build/) in workerd through Miniflare
/// (`tools/devtools/workerd-host.mjs`, Node with tests/worker's
/// node_modules): the lock service's Durable Object behind the Worker's
/// front `POST /lock/v1/<op>?name=`, and the job coordinator on the D1
/// backend (`POST /jobs/:name/run`) whose job writes to `fenced_url`. Its
/// storage lives in a temporary directory that [`WorkerdHost::restart`]
/// keeps (the same port, the same locks); removed on drop.
pub struct WorkerdHost {
    child: Option<std::process::Child>,
    url: String,
    dir: TempDir,
    fenced_url: Option<String>,
}

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl WorkerdHost {
    pub fn start(fenced_url: Option<&str>) -> io::Result<WorkerdHost> {
        let dir = TempDir::new("workerd")?;
        let mut host = WorkerdHost {
            child: None,
            url: String::new(),
            dir,
            fenced_url: fenced_url.map(str::to_string),
        };
        host.spawn(None)?;
        Ok(host)
    }

    /// `http://127.0.0.1:<port>` (the front is `<url>/lock/v1/<op>`).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The lock service's front, for `BackendSpec::Durable`.
    pub fn front_url(&self) -> String {
        format!("{}/lock", self.url)
    }

    fn spawn(&mut self, port: Option<u16>) -> io::Result<()> {
        use std::io::BufRead as _;
        use std::process::{Command, Stdio};
        let root = repo_root();
        let mut opts = json!({
            "persistDir": self.dir.path().to_string_lossy(),
            "token": WORKER_TOKEN,
            "fencedUrl": self.fenced_url,
        });
        if let Some(p) = port {
            opts["port"] = json!(p);
        }
        let mut child = Command::new("node")
            .arg(root.join("tools/devtools/workerd-host.mjs"))
            .arg(opts.to_string())
            .current_dir(&root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("RELIABILITY_LOG_ERRORS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .map_err(|e| io::Error::other(format!("node tools/devtools/workerd-host.mjs: {e}")))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first);
            // Keep draining so the host never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(Ok(l))) => l,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::other(format!(
                    "workerd host did not start (build/ and tests/worker/node_modules built?): {other:?}"
                )));
            }
        };
        let v: Value = serde_json::from_str(&line).map_err(io::Error::other)?;
        self.url = v
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| io::Error::other(format!("workerd host said {line}")))?
            .trim_end_matches('/')
            .to_string();
        self.child = Some(child);
        Ok(())
    }

    /// Stops workerd (Miniflare disposed), keeping its storage.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Closing stdin asks the host to dispose Miniflare and exit.
            drop(child.stdin.take());
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }

    /// Stops workerd and starts it again on the same storage and port.
    pub fn restart(&mut self) -> io::Result<()> {
        let port = self
            .url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok());
        self.stop();
        self.spawn(port)
    }

    /// `POST <url><path>` with the bearer token and a JSON body.
    pub fn post(&self, path: &str, body: &Value, timeout: Duration) -> io::Result<(u16, Value)> {
        let auth = format!("Bearer {WORKER_TOKEN}");
        let r = http_request(
            "POST",
            &format!("{}{path}", self.url),
            &[
                ("content-type", "application/json"),
                ("authorization", &auth),
            ],
            body.to_string().as_bytes(),
            timeout,
        )?;
        let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        Ok((r.status, v))
    }

    /// Whether the lock service says `name` is held (`None`: no answer).
    pub fn held(&self, name: &str) -> Option<bool> {
        WorkerdHost::probe(&self.url)(name)
    }

    /// [`WorkerdHost::held`] for the host at `url`, as a closure that owns
    /// what it needs.
    pub fn probe(url: &str) -> impl Fn(&str) -> Option<bool> {
        let url = url.to_string();
        move |name: &str| {
            let auth = format!("Bearer {WORKER_TOKEN}");
            let r = http_request(
                "POST",
                &format!("{url}/lock/v1/inspect?name={name}"),
                &[
                    ("content-type", "application/json"),
                    ("authorization", &auth),
                ],
                b"{}",
                Duration::from_secs(3),
            )
            .ok()?;
            let v: Value = serde_json::from_slice(&r.body).ok()?;
            (r.status == 200).then(|| v.get("held").and_then(Value::as_bool))?
        }
    }
}

impl Drop for WorkerdHost {
    fn drop(&mut self) {
        // Stopped before its TempDir (the storage) is removed.
        self.stop();
    }
}
