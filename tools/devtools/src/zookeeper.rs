//! ZooKeeper servers for tests: Debian's `zookeeper` 3.8 (a JVM), standalone
//! ([`ZooKeeperServer`], `ZooKeeperServerMain`) or a quorum
//! ([`ZooKeeperEnsemble`], `QuorumPeerMain`), on loopback with short ticks.
//!
//! Every server gets a generated `zoo.cfg` in its own temp dir, binds its
//! client port on 127.0.0.1 only, runs without the Jetty admin server (it
//! would take port 8080 in every server and collide) and checks containers
//! every 100 ms, so Curator's container parents vanish within a test.
//! Readiness is a real session handshake (`ConnectRequest` answered by a
//! `ConnectResponse` with a positive timeout, then `closeSession`): a port
//! that accepts is not enough, a quorum member refuses clients until it has
//! joined a leader.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::port::{free_port, free_ports};
use crate::process::{ProcessGuard, ProcessSpec};
use crate::tempdir::TempDir;

/// Debian's ZooKeeper server jar. Its manifest's `Class-Path` names every
/// dependency (jute, netty, metrics, ...), so only a logger is added.
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

/// SLF4J API and the simple binding (logs to stderr, so into the server's
/// log file). Deliberately not `/usr/share/java/*`: that directory holds six
/// SLF4J bindings, the JVM picks one by directory order (NOP on this
/// machine) and the log would stay empty.
pub const SLF4J_JARS: [&str; 2] = [
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-simple.jar",
];

/// The `java` launcher (Debian's `default-jdk-headless`).
pub const JAVA_BIN: &str = "java";

/// JVM start can take seconds on a loaded 2-core machine (three servers and
/// a few Curator JVMs at once): never give up before this.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One handshake probe; short, the readiness loop repeats it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Options shared by [`ZooKeeperServer::start_with`] and
/// [`ZooKeeperEnsemble::start_with`].
#[derive(Debug, Clone)]
pub struct ZooKeeperOptions {
    /// `tickTime` in ms (default 200). The server clamps session timeouts
    /// into `[2, 20] × tickTime`, so 200 gives sessions of 400 ms … 4 s.
    pub tick_time_ms: u32,
    /// Fixed client port of a standalone server (default: a free one).
    pub port: Option<u16>,
    /// Extra `zoo.cfg` lines as `(key, value)`; unknown keys become
    /// `zookeeper.<key>` system properties (ZooKeeper's own rule).
    pub config: Vec<(String, String)>,
    /// Extra JVM arguments, placed before the main class.
    pub jvm_args: Vec<String>,
}

impl Default for ZooKeeperOptions {
    fn default() -> Self {
        ZooKeeperOptions {
            tick_time_ms: 200,
            port: None,
            config: Vec::new(),
            jvm_args: Vec::new(),
        }
    }
}

/// What a server answered to a new-session `ConnectRequest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZkHandshake {
    /// The negotiated session timeout (the request clamped into the
    /// server's bounds).
    pub timeout_ms: i32,
    pub session_id: i64,
}

/// Opens a new session on `addr` and closes it again: the readiness probe,
/// also handy in tests (`timeout_ms` shows the server's clamping).
pub fn zk_handshake(
    addr: &str,
    requested_timeout_ms: i32,
    io_timeout: Duration,
) -> io::Result<ZkHandshake> {
    let mut stream = connect(addr, io_timeout)?;
    stream.write_all(&connect_request(requested_timeout_ms))?;
    let body = read_frame(&mut stream)?;
    let answer = parse_connect_response(&body)?;
    // closeSession (xid 1, op -11) so the probe's session does not linger
    // until it expires; its reply does not matter.
    let mut close = 8i32.to_be_bytes().to_vec();
    close.extend_from_slice(&1i32.to_be_bytes());
    close.extend_from_slice(&(-11i32).to_be_bytes());
    let _ = stream
        .write_all(&close)
        .and_then(|()| read_frame(&mut stream));
    Ok(answer)
}

/// Sends a four-letter word (e.g. `srvr`, which the generated `zoo.cfg`
/// whitelists) and returns the whole answer.
pub fn zk_four_letter_word(addr: &str, word: &str, io_timeout: Duration) -> io::Result<String> {
    let mut stream = connect(addr, io_timeout)?;
    stream.write_all(word.as_bytes())?;
    let mut out = String::new();
    stream.read_to_string(&mut out)?;
    Ok(out)
}

/// The `Mode:` line of `srvr`: `standalone`, `leader` or `follower`.
pub fn zk_mode(addr: &str, io_timeout: Duration) -> io::Result<String> {
    let srvr = zk_four_letter_word(addr, "srvr", io_timeout)?;
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_string())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("no Mode in srvr answer {srvr:?}"),
            )
        })
}

fn connect(addr: &str, io_timeout: Duration) -> io::Result<TcpStream> {
    let sock: SocketAddr = addr
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: {e}")))?;
    let stream = TcpStream::connect_timeout(&sock, io_timeout)?;
    stream.set_read_timeout(Some(io_timeout))?;
    stream.set_write_timeout(Some(io_timeout))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// `[len][protocolVersion 0][lastZxidSeen 0][timeOut][sessionId 0][passwd: 16 zero bytes][readOnly false]`
/// (45 bytes after the length, as the Java client sends for a new session).
fn connect_request(timeout_ms: i32) -> Vec<u8> {
    let mut body = Vec::with_capacity(45);
    body.extend_from_slice(&0i32.to_be_bytes());
    body.extend_from_slice(&0i64.to_be_bytes());
    body.extend_from_slice(&timeout_ms.to_be_bytes());
    body.extend_from_slice(&0i64.to_be_bytes());
    body.extend_from_slice(&16i32.to_be_bytes());
    body.extend_from_slice(&[0u8; 16]);
    body.push(0);
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

fn read_frame(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    if !(0..=1 << 20).contains(&len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad frame length {len}"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    stream.read_exact(&mut body)?;
    Ok(body)
}

/// `ConnectResponse { int protocolVersion; int timeOut; long sessionId; buffer passwd; }`
/// (+ readOnly, ignored). A timeout ≤ 0 means the server refused the session.
fn parse_connect_response(body: &[u8]) -> io::Result<ZkHandshake> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("short ConnectResponse {body:?}"),
        )
    };
    let timeout_ms = i32::from_be_bytes(
        body.get(4..8)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let session_id = i64::from_be_bytes(
        body.get(8..16)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    if timeout_ms <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "server refused the session (timeOut <= 0)",
        ));
    }
    Ok(ZkHandshake {
        timeout_ms,
        session_id,
    })
}

fn server_ready(addr: &str) -> bool {
    zk_handshake(addr, 4000, PROBE_TIMEOUT).is_ok()
}

/// `java … -cp zookeeper.jar:slf4j <main> <zoo.cfg>`, log in `dir/zookeeper.log`.
fn server_spec(main_class: &str, dir: &Path, cfg: &Path, opts: &ZooKeeperOptions) -> ProcessSpec {
    let classpath = [ZOOKEEPER_JAR, SLF4J_JARS[0], SLF4J_JARS[1]].join(":");
    ProcessSpec::new(JAVA_BIN, dir.join("zookeeper.log"))
        .args([
            "-Dzookeeper.admin.enableServer=false",
            "-Dznode.container.checkIntervalMs=100",
            // Small heap, one GC thread: up to three servers and several
            // Curator JVMs share two cores in the tests.
            "-Xmx256m",
            "-XX:+UseSerialGC",
            // No /tmp/hsperfdata_<user>/<pid> file (left behind by every
            // SIGKILLed JVM otherwise).
            "-XX:-UsePerfData",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        ])
        .args(opts.jvm_args.iter().cloned())
        .args(["-cp", &classpath, main_class])
        .arg(cfg)
        .cleanup_dir(dir)
}

/// The `zoo.cfg` lines every server gets.
fn base_config(
    data_dir: &Path,
    client_port: u16,
    opts: &ZooKeeperOptions,
) -> Vec<(String, String)> {
    let mut lines: Vec<(String, String)> = [
        ("tickTime", opts.tick_time_ms.to_string()),
        ("dataDir", data_dir.display().to_string()),
        ("clientPort", client_port.to_string()),
        ("clientPortAddress", "127.0.0.1".to_string()),
        // Unlimited connections per IP: every test client comes from 127.0.0.1.
        ("maxClientCnxns", "0".to_string()),
        ("4lw.commands.whitelist", "srvr".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    lines.extend(opts.config.iter().cloned());
    lines
}

fn write_config(path: &Path, lines: &[(String, String)]) -> io::Result<()> {
    let text: String = lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(path, text)
}

/// Whether a failed start is worth retrying with fresh ports: the process
/// exited (typically "Address already in use"), as opposed to a timeout.
fn retryable(err: &io::Error) -> bool {
    err.kind() != io::ErrorKind::TimedOut
}

/// A standalone ZooKeeper (`ZooKeeperServerMain`) on 127.0.0.1 in its own
/// temp dir; killed (and the dir removed) on drop.
#[derive(Debug)]
pub struct ZooKeeperServer {
    port: u16,
    proc: ProcessGuard,
    // Dropped last: the process must be gone before its dir is removed.
    dir: TempDir,
}

impl ZooKeeperServer {
    /// tickTime 200 ms on a free port.
    pub fn start() -> io::Result<ZooKeeperServer> {
        ZooKeeperServer::start_with(ZooKeeperOptions::default())
    }

    pub fn start_with(opts: ZooKeeperOptions) -> io::Result<ZooKeeperServer> {
        // A free port can be taken before the JVM binds it: retry with a
        // fresh one (only when the port was not fixed).
        let attempts = if opts.port.is_some() { 1 } else { 3 };
        let mut last = None;
        for _ in 0..attempts {
            match ZooKeeperServer::try_start(&opts) {
                Ok(s) => return Ok(s),
                Err(e) if retryable(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("zookeeper did not start")))
    }

    fn try_start(opts: &ZooKeeperOptions) -> io::Result<ZooKeeperServer> {
        let port = match opts.port {
            Some(p) => p,
            None => free_port()?,
        };
        let dir = TempDir::new(&format!("zookeeper-{port}"))?;
        let cfg = dir.path().join("zoo.cfg");
        write_config(&cfg, &base_config(&dir.path().join("data"), port, opts))?;
        let spec = server_spec(
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            dir.path(),
            &cfg,
            opts,
        );
        let mut server = ZooKeeperServer {
            port,
            proc: ProcessGuard::spawn(spec)?,
            dir,
        };
        server.wait_ready(START_TIMEOUT)?;
        Ok(server)
    }

    /// Waits until a session handshake succeeds (errors carry the log tail).
    pub fn wait_ready(&mut self, timeout: Duration) -> io::Result<()> {
        let addr = self.addr();
        self.proc
            .wait_ready("zookeeper", timeout, || server_ready(&addr))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The connection string a ZooKeeper client takes (`127.0.0.1:<port>`).
    pub fn connect_string(&self) -> String {
        self.addr()
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("zookeeper.log")
    }

    /// The last `max` bytes of the server log, for failure messages.
    pub fn log_tail(&self, max: u64) -> String {
        self.proc.log_tail(max)
    }

    pub fn is_running(&mut self) -> bool {
        self.proc.is_running()
    }

    /// SIGSTOP: connections stay open, nothing answers, sessions are not
    /// expired meanwhile (the server's clock stops with it).
    pub fn pause(&self) -> io::Result<()> {
        self.proc.pause()
    }

    pub fn resume(&self) -> io::Result<()> {
        self.proc.resume()
    }

    /// SIGKILL. Idempotent; [`ZooKeeperServer::restart`] brings it back.
    pub fn stop(&mut self) {
        self.proc.kill();
    }

    /// Kills the server (if running) and starts it again on the same port
    /// with the same data dir: znodes and sessions survive (sessions expire
    /// unless their clients reconnect within the timeout).
    pub fn restart(&mut self) -> io::Result<()> {
        self.proc.restart()?;
        self.wait_ready(START_TIMEOUT)
    }

    /// `srvr`'s mode (`standalone` here).
    pub fn mode(&self) -> io::Result<String> {
        zk_mode(&self.addr(), PROBE_TIMEOUT)
    }

    /// A session handshake against this server.
    pub fn handshake(&self, requested_timeout_ms: i32) -> io::Result<ZkHandshake> {
        zk_handshake(&self.addr(), requested_timeout_ms, PROBE_TIMEOUT)
    }
}

/// One member of a [`ZooKeeperEnsemble`].
#[derive(Debug)]
struct Member {
    client_port: u16,
    proc: ProcessGuard,
}

impl Member {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }
}

/// `n` ZooKeeper servers forming one quorum (`QuorumPeerMain`), each with
/// its own client/peer/election ports and data dir (with its `myid`).
/// Member `i` (0-based) has `myid` `i + 1`. Killed on drop.
#[derive(Debug)]
pub struct ZooKeeperEnsemble {
    members: Vec<Member>,
    // Dropped last: the processes must be gone before the dir is removed.
    dir: TempDir,
}

impl ZooKeeperEnsemble {
    /// `n` members, tickTime 200 ms.
    pub fn start(n: usize) -> io::Result<ZooKeeperEnsemble> {
        ZooKeeperEnsemble::start_with(n, ZooKeeperOptions::default())
    }

    pub fn start_with(n: usize, opts: ZooKeeperOptions) -> io::Result<ZooKeeperEnsemble> {
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an ensemble needs at least one server",
            ));
        }
        let mut last = None;
        for _ in 0..2 {
            match ZooKeeperEnsemble::try_start(n, &opts) {
                Ok(e) => return Ok(e),
                Err(e) if retryable(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("zookeeper ensemble did not start")))
    }

    fn try_start(n: usize, opts: &ZooKeeperOptions) -> io::Result<ZooKeeperEnsemble> {
        // Ports [client, peer, election] per member.
        let ports = free_ports(3 * n)?;
        let dir = TempDir::new(&format!("zookeeper-ensemble-{}", ports[0]))?;
        let servers: Vec<(String, String)> = (0..n)
            .map(|i| {
                let (peer, election) = (ports[3 * i + 1], ports[3 * i + 2]);
                (
                    format!("server.{}", i + 1),
                    format!("127.0.0.1:{peer}:{election}"),
                )
            })
            .collect();
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            members.push(spawn_member(dir.path(), i, ports[3 * i], &servers, opts)?);
        }
        let mut ensemble = ZooKeeperEnsemble { members, dir };
        for i in 0..n {
            ensemble.wait_member_ready(i, START_TIMEOUT)?;
        }
        Ok(ensemble)
    }

    fn wait_member_ready(&mut self, i: usize, timeout: Duration) -> io::Result<()> {
        let m = self.member(i)?;
        let addr = m.addr();
        let what = format!("zookeeper member {i} (myid {})", i + 1);
        self.members[i]
            .proc
            .wait_ready(&what, timeout, || server_ready(&addr))
    }

    fn member(&self, i: usize) -> io::Result<&Member> {
        self.members
            .get(i)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no member {i}")))
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// `127.0.0.1:a,127.0.0.1:b,…` of every member, in member order.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(Member::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `127.0.0.1:<client port>` of member `i` alone.
    pub fn member_connect_string(&self, i: usize) -> String {
        self.members[i].addr()
    }

    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].client_port
    }

    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].proc.pid()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `max` bytes of member `i`'s log.
    pub fn log_tail(&self, i: usize, max: u64) -> String {
        self.members[i].proc.log_tail(max)
    }

    pub fn is_running(&mut self, i: usize) -> bool {
        self.members[i].proc.is_running()
    }

    /// SIGKILL member `i` (idempotent).
    pub fn kill(&mut self, i: usize) {
        self.members[i].proc.kill();
    }

    /// Starts a killed member again (same ports, same data) and waits until
    /// it serves clients, i.e. has rejoined a quorum.
    pub fn start_again(&mut self, i: usize) -> io::Result<()> {
        self.members[i].proc.restart()?;
        self.wait_member_ready(i, START_TIMEOUT)
    }

    /// SIGSTOP member `i`.
    pub fn pause(&self, i: usize) -> io::Result<()> {
        self.members[i].proc.pause()
    }

    pub fn resume(&self, i: usize) -> io::Result<()> {
        self.members[i].proc.resume()
    }

    /// Index of the member whose `srvr` says `Mode: leader` (1 s per
    /// member, so paused or killed members do not block); `None` when no
    /// member claims it.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            zk_mode(&m.addr(), Duration::from_secs(1)).is_ok_and(|mode| mode == "leader")
        })
    }

    /// Polls [`ZooKeeperEnsemble::leader`] until one is reported or `timeout` passes.
    pub fn wait_for_leader(&self, timeout: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader() {
                return Ok(l);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no zookeeper leader",
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Writes member `i`'s `zoo.cfg` and `myid` under `root/zk<i+1>` and starts it.
fn spawn_member(
    root: &Path,
    i: usize,
    client_port: u16,
    servers: &[(String, String)],
    opts: &ZooKeeperOptions,
) -> io::Result<Member> {
    let dir = root.join(format!("zk{}", i + 1));
    let data = dir.join("data");
    std::fs::create_dir_all(&data)?;
    std::fs::write(data.join("myid"), format!("{}\n", i + 1))?;
    let mut lines = base_config(&data, client_port, opts);
    // In ticks: 10 s to join and sync, 4 s of follower silence tolerated
    // (generous: JVMs on a loaded machine pause).
    lines.push(("initLimit".to_string(), "50".to_string()));
    lines.push(("syncLimit".to_string(), "20".to_string()));
    lines.extend(servers.iter().cloned());
    let cfg = dir.join("zoo.cfg");
    write_config(&cfg, &lines)?;
    let mut spec = server_spec(
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        &dir,
        &cfg,
        opts,
    );
    // The watchdog removes the whole ensemble dir, not only this member's.
    spec.cleanup_dir = Some(root.to_path_buf());
    Ok(Member {
        client_port,
        proc: ProcessGuard::spawn(spec)?,
    })
}

#[cfg(test)]
mod tests {
    use super::{connect_request, parse_connect_response};

    #[test]
    fn connect_request_is_the_java_clients_45_bytes() {
        let frame = connect_request(4000);
        assert_eq!(frame.len(), 49);
        assert_eq!(&frame[..4], &45i32.to_be_bytes());
        assert_eq!(&frame[16..20], &4000i32.to_be_bytes());
        assert_eq!(&frame[28..32], &16i32.to_be_bytes());
    }

    #[test]
    fn connect_response_with_zero_timeout_is_a_refusal() {
        let mut body = vec![0u8; 4];
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&7i64.to_be_bytes());
        assert!(parse_connect_response(&body).is_err());
        body[4..8].copy_from_slice(&400i32.to_be_bytes());
        let ok = parse_connect_response(&body).unwrap();
        assert_eq!((ok.timeout_ms, ok.session_id), (400, 7));
        assert!(parse_connect_response(&body[..10]).is_err());
    }
}
