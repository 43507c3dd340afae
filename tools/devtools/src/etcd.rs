//! etcd servers and clusters (Debian's etcd 3.4 by default, or the binary
//! `EDGELOCK_ETCD_BIN` names, such as etcd 3.5; JSON gateway on /v3/).

use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::http1::http_request;
use crate::port::free_ports;
use crate::process::{ProcessGuard, ProcessSpec};
use crate::tempdir::TempDir;

/// Debian's etcd (3.4.23 on Debian 12).
pub const ETCD_BIN: &str = "/usr/bin/etcd";

/// The etcd binary the servers run: `$EDGELOCK_ETCD_BIN` when set (the test
/// suite points it at etcd 3.5, installed by `scripts/etcd35.sh`), else
/// [`ETCD_BIN`].
pub fn etcd_bin() -> String {
    std::env::var("EDGELOCK_ETCD_BIN")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ETCD_BIN.to_string())
}

/// Options for [`EtcdServer::start_with`] / [`EtcdCluster::start_with`].
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// `--cors '*'` (default on: browser tests call etcd directly). Off sets
    /// an allow-list that matches no origin (etcd 3.4's own default is `*`).
    pub cors: bool,
    /// `--experimental-enable-lease-checkpoint` (lease TTLs survive leader changes).
    pub lease_checkpoint: bool,
    /// `--heartbeat-interval` / `--election-timeout` in ms (etcd defaults 100/1000).
    pub heartbeat_ms: Option<u64>,
    pub election_ms: Option<u64>,
    /// Extra etcd flags.
    pub extra_args: Vec<String>,
    /// How long to wait for `POST /v3/kv/range` to answer.
    pub start_timeout: Duration,
    /// Serve clients over https (see [`EtcdTls`]).
    pub tls: Option<EtcdTls>,
}

/// TLS on etcd's client port (the JSON gateway shares it): `--cert-file`,
/// `--key-file`, and with `client_ca_file` `--client-cert-auth
/// --trusted-ca-file` (clients must present a certificate that CA signed).
///
/// Such a member also listens on a second, plain-http client port on
/// loopback ([`EtcdServer::probe_url`]): devtools has no TLS client, and its
/// readiness and status checks go there. Tests use [`EtcdServer::url`].
#[derive(Debug, Clone)]
pub struct EtcdTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_ca_file: Option<PathBuf>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            cors: true,
            lease_checkpoint: false,
            heartbeat_ms: None,
            election_ms: None,
            extra_args: Vec::new(),
            start_timeout: Duration::from_secs(15),
            tls: None,
        }
    }
}

/// One etcd member process with its data dir. Killed and removed on drop.
#[derive(Debug)]
pub struct EtcdServer {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// With TLS: the extra plain-http client port (readiness, status).
    probe_port: Option<u16>,
    proc: ProcessGuard,
    dir: TempDir,
}

/// What `POST /v3/maintenance/status` reports (ids are decimal strings, as
/// the JSON gateway prints uint64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdStatus {
    pub member_id: String,
    pub leader: String,
    pub raft_term: u64,
}

struct MemberPlan {
    name: String,
    client_port: u16,
    peer_port: u16,
    probe_port: Option<u16>,
}

fn peer_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

fn client_url(port: u16, tls: bool) -> String {
    format!("{}://127.0.0.1:{port}", if tls { "https" } else { "http" })
}

fn spawn_member(
    plan: &MemberPlan,
    initial_cluster: &str,
    token: &str,
    opts: &EtcdOptions,
) -> io::Result<EtcdServer> {
    let dir = TempDir::new(&format!("etcd-{}", plan.client_port))?;
    let client = client_url(plan.client_port, opts.tls.is_some());
    let listen = match plan.probe_port {
        Some(probe) => format!("{client},{}", peer_url(probe)),
        None => client.clone(),
    };
    let peer = peer_url(plan.peer_port);
    let mut spec = ProcessSpec::new(etcd_bin(), dir.path().join("etcd.log"))
        .args(["--name", &plan.name])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args([
            "--listen-client-urls",
            &listen,
            "--advertise-client-urls",
            &client,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args([
            "--initial-cluster",
            initial_cluster,
            "--initial-cluster-state",
            "new",
        ])
        .args(["--initial-cluster-token", token])
        .args([
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
            "--log-level",
            "warn",
        ])
        .cleanup_dir(dir.path());
    // etcd 3.4 defaults to `--cors '*'` already; "off" needs an origin
    // that never matches (it rejects an empty list).
    spec = spec.args([
        "--cors",
        if opts.cors {
            "*"
        } else {
            "http://cors-disabled.invalid:1"
        },
    ]);
    if opts.lease_checkpoint {
        spec = spec.arg("--experimental-enable-lease-checkpoint=true");
    }
    if let Some(h) = opts.heartbeat_ms {
        spec = spec.args(["--heartbeat-interval".to_string(), h.to_string()]);
    }
    if let Some(e) = opts.election_ms {
        spec = spec.args(["--election-timeout".to_string(), e.to_string()]);
    }
    if let Some(tls) = &opts.tls {
        spec = spec
            .arg("--cert-file")
            .arg(&tls.cert_file)
            .arg("--key-file")
            .arg(&tls.key_file);
        if let Some(ca) = &tls.client_ca_file {
            spec = spec
                .arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(ca);
        }
    }
    spec = spec.args(opts.extra_args.iter().cloned());
    let proc = ProcessGuard::spawn(spec)?;
    Ok(EtcdServer {
        name: plan.name.clone(),
        client_port: plan.client_port,
        peer_port: plan.peer_port,
        probe_port: plan.probe_port,
        proc,
        dir,
    })
}

fn kv_range_answers(url: &str) -> bool {
    http_request(
        "POST",
        &format!("{url}/v3/kv/range"),
        &[("Content-Type", "application/json")],
        br#"{"key":"AA=="}"#,
        Duration::from_millis(1000),
    )
    .is_ok_and(|r| r.status == 200)
}

fn cluster_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("edgelock-devtools-{}-{nanos}", std::process::id())
}

/// Starts `n` members and waits until every one answers a (linearizable) read.
fn start_members(n: usize, opts: &EtcdOptions) -> io::Result<Vec<EtcdServer>> {
    let per = if opts.tls.is_some() { 3 } else { 2 };
    let ports = free_ports(per * n)?;
    let plans: Vec<MemberPlan> = (0..n)
        .map(|i| MemberPlan {
            name: format!("m{i}"),
            client_port: ports[per * i],
            peer_port: ports[per * i + 1],
            probe_port: (per == 3).then(|| ports[per * i + 2]),
        })
        .collect();
    let initial: Vec<String> = plans
        .iter()
        .map(|p| format!("{}={}", p.name, peer_url(p.peer_port)))
        .collect();
    let initial = initial.join(",");
    let token = cluster_token();
    let mut members = Vec::with_capacity(n);
    for p in &plans {
        members.push(spawn_member(p, &initial, &token, opts)?);
    }
    for m in &mut members {
        let url = m.probe_url();
        m.proc.wait_ready(
            &format!("etcd member {}", m.name),
            opts.start_timeout,
            || kv_range_answers(&url),
        )?;
    }
    Ok(members)
}

fn start_with_retries(n: usize, opts: &EtcdOptions) -> io::Result<Vec<EtcdServer>> {
    let mut last = None;
    for _ in 0..3 {
        match start_members(n, opts) {
            Ok(m) => return Ok(m),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("etcd did not start")))
}

impl EtcdServer {
    /// A single-member etcd on free loopback ports, CORS enabled.
    pub fn start() -> io::Result<EtcdServer> {
        EtcdServer::start_with(EtcdOptions::default())
    }

    pub fn start_with(opts: EtcdOptions) -> io::Result<EtcdServer> {
        let mut members = start_with_retries(1, &opts)?;
        members
            .pop()
            .ok_or_else(|| io::Error::other("no etcd member"))
    }

    /// Client URL, `http://127.0.0.1:<client port>` (`https://` with TLS).
    pub fn url(&self) -> String {
        client_url(self.client_port, self.probe_port.is_some())
    }

    /// A plain-http client URL: [`EtcdServer::url`], or with TLS the extra
    /// plain listener (see [`EtcdTls`]).
    pub fn probe_url(&self) -> String {
        peer_url(self.probe_port.unwrap_or(self.client_port))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    pub fn data_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    pub fn log_path(&self) -> &Path {
        &self.proc.spec().log
    }

    pub fn is_running(&mut self) -> bool {
        self.proc.is_running()
    }

    /// SIGSTOP: the member stops answering (clients and peers time out).
    pub fn pause(&self) -> io::Result<()> {
        self.proc.pause()
    }

    pub fn resume(&self) -> io::Result<()> {
        self.proc.resume()
    }

    /// SIGKILL; the data dir is kept so [`EtcdServer::restart`] can rejoin.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// Kills (if running) and starts the member again with its data dir.
    /// Does not wait for readiness: in a cluster the member needs peers.
    pub fn restart(&mut self) -> io::Result<()> {
        self.proc.restart()
    }

    /// Waits until this member answers a linearizable read.
    pub fn wait_ready(&mut self, timeout: Duration) -> io::Result<()> {
        let url = self.probe_url();
        let name = format!("etcd member {}", self.name);
        self.proc
            .wait_ready(&name, timeout, || kv_range_answers(&url))
    }

    /// `POST /v3/maintenance/status` on this member.
    pub fn status(&self, timeout: Duration) -> io::Result<EtcdStatus> {
        let r = http_request(
            "POST",
            &format!("{}/v3/maintenance/status", self.probe_url()),
            &[("Content-Type", "application/json")],
            b"{}",
            timeout,
        )?;
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("status reply: {what}: {}", r.text()),
            )
        };
        if r.status != 200 {
            return Err(bad("HTTP status"));
        }
        let v = r.json().map_err(|_| bad("not JSON"))?;
        let s = |v: &serde_json::Value| -> Option<String> {
            match v {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        let member_id = v
            .pointer("/header/member_id")
            .and_then(s)
            .ok_or_else(|| bad("no member_id"))?;
        let leader = v
            .get("leader")
            .and_then(s)
            .ok_or_else(|| bad("no leader"))?;
        let raft_term = v
            .get("raftTerm")
            .and_then(s)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        Ok(EtcdStatus {
            member_id,
            leader,
            raft_term,
        })
    }
}

/// `n` etcd members forming one cluster; each has its own ports and data dir.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl EtcdCluster {
    pub fn start(n: usize) -> io::Result<EtcdCluster> {
        EtcdCluster::start_with(n, EtcdOptions::default())
    }

    pub fn start_with(n: usize, opts: EtcdOptions) -> io::Result<EtcdCluster> {
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an etcd cluster needs at least one member",
            ));
        }
        Ok(EtcdCluster {
            members: start_with_retries(n, &opts)?,
        })
    }

    /// Client URLs of all members, in member order.
    pub fn urls(&self) -> Vec<String> {
        self.members.iter().map(EtcdServer::url).collect()
    }

    pub fn members(&self) -> &[EtcdServer] {
        &self.members
    }

    pub fn member(&self, i: usize) -> Option<&EtcdServer> {
        self.members.get(i)
    }

    pub fn member_mut(&mut self, i: usize) -> Option<&mut EtcdServer> {
        self.members.get_mut(i)
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Index of the current leader, asking each member (1 s timeout each, so
    /// paused members do not block). `None` if nobody reports a known leader.
    pub fn leader(&self) -> Option<usize> {
        let statuses: Vec<Option<EtcdStatus>> = self
            .members
            .iter()
            .map(|m| m.status(Duration::from_secs(1)).ok())
            .collect();
        let leader_id = statuses
            .iter()
            .flatten()
            .map(|s| s.leader.clone())
            .find(|l| l != "0")?;
        statuses
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.member_id == leader_id))
    }

    /// Polls [`EtcdCluster::leader`] until one is reported or `timeout` passes.
    pub fn wait_for_leader(&self, timeout: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader() {
                return Ok(l);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no etcd leader"));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}
