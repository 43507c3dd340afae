//! [`CuratorPeer`]: the real Apache Curator 5.4 (Debian's
//! `libcurator-recipes-java`) in a JVM, driven line by line from a test.
//!
//! The Java side is `tools/devtools/java/CuratorPeer.java` (its header lists
//! the commands). It is compiled at first use with `javac` into
//! `<tmp>/edgelock-devtools-curator-peer-<hash of the source>/`: once per
//! source version, shared by every test process; concurrent first uses each
//! compile into their own temp dir and rename it into place (the loser of
//! the rename uses the winner's classes). One JVM per peer; it exits when
//! its stdin closes, so it never outlives the test process.

use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::process::log_tail;
use crate::tempdir::{TempDir, TEMP_PREFIX};
use crate::zookeeper::{JAVA_BIN, SLF4J_JARS, START_TIMEOUT, ZOOKEEPER_JAR};

/// The Java source, compiled on first use.
pub const CURATOR_PEER_SOURCE: &str = include_str!("../java/CuratorPeer.java");

/// The jars the peer compiles and runs against (the Curator jars' manifests
/// name the same ones; listed so `javac` does not depend on that).
const CURATOR_JARS: [&str; 6] = [
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    ZOOKEEPER_JAR,
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
];

/// Added to a command's own wait (`MS`) when waiting for its answer.
const ANSWER_MARGIN: Duration = Duration::from_secs(30);

/// Session timeout the peer asks for (the test servers' tickTime 200 caps
/// sessions at 4 s anyway).
pub const CURATOR_SESSION_MS: u32 = 4000;

/// A node a peer holds: its full path and creation zxid (the fencing token
/// edgelock reports for the same node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldNode {
    pub path: String,
    pub czxid: i64,
}

impl HeldNode {
    /// The last path segment, e.g. `_c_<uuid>-lock-0000000003`.
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// One Curator client (one ZooKeeper session) in its own JVM.
#[derive(Debug)]
pub struct CuratorPeer {
    child: Child,
    stdin: Option<ChildStdin>,
    answers: Receiver<String>,
    session_id: String,
    log: PathBuf,
    // Holds the log; removed when the peer is dropped.
    _dir: TempDir,
}

impl CuratorPeer {
    /// Starts a peer connected to `connect` (a ZooKeeper connection string)
    /// and waits (up to 60 s) until its session is established.
    pub fn start(connect: &str) -> io::Result<CuratorPeer> {
        let classes = compiled_classes()?;
        let dir = TempDir::new("curator-peer")?;
        let log = dir.path().join("curator-peer.log");
        let mut child = spawn_jvm(&classes, connect, &log)?;
        let stdin = child.stdin.take();
        let answers = read_lines(
            child
                .stdout
                .take()
                .ok_or_else(|| io::Error::other("no stdout pipe"))?,
        );
        let mut peer = CuratorPeer {
            child,
            stdin,
            answers,
            session_id: String::new(),
            log,
            _dir: dir,
        };
        let ready = peer.next_answer("start", START_TIMEOUT)?;
        match ready.strip_prefix("READY ") {
            Some(id) => peer.session_id = id.to_string(),
            None => return Err(peer.failure("start", &ready)),
        }
        Ok(peer)
    }

    /// The peer's ZooKeeper session id, lowercase hex without `0x`.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last `max` bytes of the peer's log (Curator and ZooKeeper client
    /// logging, Java stack traces).
    pub fn log_tail(&self, max: u64) -> String {
        log_tail(&self.log, max)
    }

    /// Sends one command line and returns the raw answer line (`OK …`,
    /// `NO`, `ERR …`), waiting at most `timeout` for it.
    pub fn command_timeout(&mut self, line: &str, timeout: Duration) -> io::Result<String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io::Error::other("peer closed"))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| {
                let msg = format!("cannot send {line:?}: {e}");
                self.failure(line, &msg)
            })?;
        self.next_answer(line, timeout)
    }

    /// [`CuratorPeer::command_timeout`] with a 30 s bound.
    pub fn command(&mut self, line: &str) -> io::Result<String> {
        self.command_timeout(line, ANSWER_MARGIN)
    }

    /// Runs a command whose answer is `OK [rest]` or `NO`: `Some(rest)` /
    /// `None`; `ERR` and anything else become an error carrying the log tail.
    pub fn query(&mut self, line: &str, timeout: Duration) -> io::Result<Option<String>> {
        let answer = self.command_timeout(line, timeout)?;
        if answer == "OK" {
            return Ok(Some(String::new()));
        }
        if let Some(rest) = answer.strip_prefix("OK ") {
            return Ok(Some(rest.to_string()));
        }
        if answer == "NO" {
            return Ok(None);
        }
        Err(self.failure(line, &answer))
    }

    /// A command that must answer `OK`.
    fn expect_ok(&mut self, line: &str) -> io::Result<()> {
        match self.query(line, ANSWER_MARGIN)? {
            Some(_) => Ok(()),
            None => Err(self.failure(line, "NO")),
        }
    }

    /// An acquire-like command answering `OK <path> <czxid>` or `NO`.
    fn acquire(&mut self, line: &str, wait_ms: i64) -> io::Result<Option<HeldNode>> {
        let timeout = Duration::from_millis(wait_ms.max(0) as u64) + ANSWER_MARGIN;
        let Some(rest) = self.query(line, timeout)? else {
            return Ok(None);
        };
        let parsed = rest.split_once(' ').and_then(|(path, czxid)| {
            Some(HeldNode {
                path: path.to_string(),
                czxid: czxid.parse().ok()?,
            })
        });
        parsed.map(Some).ok_or_else(|| self.failure(line, &rest))
    }

    /// `InterProcessMutex::acquire`: `wait_ms` 0 tries once, negative waits
    /// forever. `None` when not acquired in time.
    pub fn mutex_acquire(&mut self, path: &str, wait_ms: i64) -> io::Result<Option<HeldNode>> {
        self.acquire(&format!("mutex-acquire {path} {wait_ms}"), wait_ms)
    }

    pub fn mutex_release(&mut self, path: &str) -> io::Result<()> {
        self.expect_ok(&format!("mutex-release {path}"))
    }

    /// One lease of an `InterProcessSemaphoreV2` with `max` leases on `path`.
    pub fn sem_acquire(
        &mut self,
        path: &str,
        max: u32,
        wait_ms: i64,
    ) -> io::Result<Option<HeldNode>> {
        self.acquire(&format!("sem-acquire {path} {max} {wait_ms}"), wait_ms)
    }

    /// Returns this peer's newest lease on `path`.
    pub fn sem_release(&mut self, path: &str) -> io::Result<()> {
        self.expect_ok(&format!("sem-release {path}"))
    }

    /// `InterProcessReadWriteLock::readLock().acquire`.
    pub fn read_acquire(&mut self, path: &str, wait_ms: i64) -> io::Result<Option<HeldNode>> {
        self.acquire(&format!("read-acquire {path} {wait_ms}"), wait_ms)
    }

    pub fn read_release(&mut self, path: &str) -> io::Result<()> {
        self.expect_ok(&format!("read-release {path}"))
    }

    /// `InterProcessReadWriteLock::writeLock().acquire`.
    pub fn write_acquire(&mut self, path: &str, wait_ms: i64) -> io::Result<Option<HeldNode>> {
        self.acquire(&format!("write-acquire {path} {wait_ms}"), wait_ms)
    }

    pub fn write_release(&mut self, path: &str) -> io::Result<()> {
        self.expect_ok(&format!("write-release {path}"))
    }

    /// `InterProcessMultiLock` over `paths` (acquired in this order).
    pub fn multi_acquire(&mut self, paths: &[&str], wait_ms: i64) -> io::Result<bool> {
        let line = format!("multi-acquire {} {wait_ms}", paths.join(","));
        let timeout = Duration::from_millis(wait_ms.max(0) as u64) + ANSWER_MARGIN;
        Ok(self.query(&line, timeout)?.is_some())
    }

    pub fn multi_release(&mut self, paths: &[&str]) -> io::Result<()> {
        self.expect_ok(&format!("multi-release {}", paths.join(",")))
    }

    /// Starts a `LeaderLatch` on `path` with participant id `id` (no spaces).
    pub fn latch_start(&mut self, path: &str, id: &str) -> io::Result<()> {
        self.expect_ok(&format!("latch-start {path} {id}"))
    }

    /// Whether this peer's latch leads, after waiting up to `wait_ms` for it.
    pub fn latch_has(&mut self, path: &str, wait_ms: u64) -> io::Result<bool> {
        let timeout = Duration::from_millis(wait_ms) + ANSWER_MARGIN;
        Ok(self
            .query(&format!("latch-has {path} {wait_ms}"), timeout)?
            .is_some())
    }

    /// Curator's `getLeader().getId()` for `path` (read fresh from the
    /// leader node's data); `None` when nobody leads.
    pub fn latch_leader(&mut self, path: &str) -> io::Result<Option<String>> {
        self.query(&format!("latch-leader {path}"), ANSWER_MARGIN)
    }

    /// This peer's own latch node (`None` before it is created).
    pub fn latch_node(&mut self, path: &str) -> io::Result<Option<HeldNode>> {
        self.acquire(&format!("latch-node {path}"), 0)
    }

    pub fn latch_close(&mut self, path: &str) -> io::Result<()> {
        self.expect_ok(&format!("latch-close {path}"))
    }

    /// The children of `path`, sorted; `None` when `path` does not exist.
    pub fn children(&mut self, path: &str) -> io::Result<Option<Vec<String>>> {
        Ok(self
            .query(&format!("children {path}"), ANSWER_MARGIN)?
            .map(|names| names.split_whitespace().map(str::to_string).collect()))
    }

    /// The data of `path` as UTF-8; `None` when it does not exist.
    pub fn data(&mut self, path: &str) -> io::Result<Option<String>> {
        self.query(&format!("data {path}"), ANSWER_MARGIN)
    }

    /// `(czxid, ephemeralOwner as hex)` of `path`; `None` when it does not exist.
    pub fn stat(&mut self, path: &str) -> io::Result<Option<(i64, String)>> {
        let Some(rest) = self.query(&format!("stat {path}"), ANSWER_MARGIN)? else {
            return Ok(None);
        };
        let parsed = rest
            .split_once(' ')
            .and_then(|(czxid, owner)| Some((czxid.parse().ok()?, owner.to_string())));
        parsed.map(Some).ok_or_else(|| self.failure("stat", &rest))
    }

    /// `rounds` uncontended acquire+release cycles of Curator's
    /// InterProcessMutex on `path`, timed inside the JVM (the first call
    /// also warms the JIT: benchmark the second).
    pub fn bench_mutex(&mut self, path: &str, rounds: u32) -> io::Result<Duration> {
        let line = format!("bench-mutex {path} {rounds}");
        let answer = self
            .query(&line, Duration::from_secs(600))?
            .unwrap_or_default();
        let nanos = answer.split_once(' ').and_then(|(_, ns)| ns.parse().ok());
        nanos
            .map(Duration::from_nanos)
            .ok_or_else(|| self.failure(&line, &answer))
    }

    /// Closes the Curator client (its session ends, its ephemeral nodes go)
    /// and waits for the JVM to exit.
    pub fn close(mut self) -> io::Result<()> {
        self.expect_ok("close")?;
        self.shut_down();
        Ok(())
    }

    fn next_answer(&mut self, what: &str, timeout: Duration) -> io::Result<String> {
        match self.answers.recv_timeout(timeout) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => {
                Err(self.failure(what, &format!("no answer within {timeout:?}")))
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.failure(what, "the JVM exited")),
        }
    }

    fn failure(&self, what: &str, answer: &str) -> io::Error {
        io::Error::other(format!(
            "CuratorPeer {what:?}: {answer}; peer log tail:\n{}",
            self.log_tail(3000)
        ))
    }

    /// Closes stdin (the peer exits at EOF), waits up to 3 s, then kills.
    fn shut_down(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for CuratorPeer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// The command line of a peer JVM before its arguments (`CONNECT
/// SESSION_MS`): `java … -cp … CuratorPeer`, compiling the class if needed.
/// For drivers in other languages (`testenv --curator`: the JavaScript tests).
pub fn peer_command() -> io::Result<Vec<String>> {
    let classes = compiled_classes()?;
    let mut line = vec![JAVA_BIN.to_string()];
    line.extend(jvm_args(&classes));
    Ok(line)
}

/// The JVM's arguments up to and including the main class.
fn jvm_args(classes: &Path) -> Vec<String> {
    let mut classpath = vec![classes.display().to_string()];
    classpath.extend(
        CURATOR_JARS
            .iter()
            .chain(SLF4J_JARS.iter())
            .map(|j| j.to_string()),
    );
    [
        "-Xmx128m",
        "-XX:+UseSerialGC",
        "-XX:-UsePerfData",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        "-cp",
        &classpath.join(":"),
        "CuratorPeer",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

fn spawn_jvm(classes: &Path, connect: &str, log: &Path) -> io::Result<Child> {
    Command::new(JAVA_BIN)
        .args(jvm_args(classes))
        .arg(connect)
        .arg(CURATOR_SESSION_MS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot start {JAVA_BIN} (CuratorPeer): {e}"),
            )
        })
}

/// Forwards the peer's stdout lines to a channel (so reads can time out).
fn read_lines(stdout: impl io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The directory holding `CuratorPeer.class`, compiling it if needed.
pub fn compiled_classes() -> io::Result<PathBuf> {
    // One javac per process (peers start in parallel threads); other
    // processes are handled by the atomic rename below.
    static COMPILING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = COMPILING.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = std::env::temp_dir().join(format!(
        "{TEMP_PREFIX}curator-peer-{:016x}",
        fnv1a(CURATOR_PEER_SOURCE.as_bytes())
    ));
    if dir.join("CuratorPeer.class").is_file() {
        return Ok(dir);
    }
    let build = TempDir::new("curator-peer-build")?;
    let classes = build.path().join("classes");
    javac(build.path(), &classes)?;
    // Atomic publish: a rename onto a directory another process published
    // meanwhile fails, and that one is just as good.
    if let Err(e) = std::fs::rename(&classes, &dir) {
        if !dir.join("CuratorPeer.class").is_file() {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot publish {}: {e}", dir.display()),
            ));
        }
    }
    Ok(dir)
}

/// Writes the source into `build` and compiles it into `classes`.
fn javac(build: &Path, classes: &Path) -> io::Result<()> {
    let source = build.join("CuratorPeer.java");
    std::fs::write(&source, CURATOR_PEER_SOURCE)?;
    let out = Command::new("javac")
        .args([
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-cp",
            &CURATOR_JARS.join(":"),
        ])
        .arg("-d")
        .arg(classes)
        .arg(&source)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run javac (default-jdk-headless): {e}"),
            )
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "javac CuratorPeer.java failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// FNV-1a, 64 bit: a cache key stable across Rust versions (unlike
/// `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::{fnv1a, HeldNode};

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn held_node_name_is_the_last_segment() {
        let n = HeldNode {
            path: "/edgelock/m/_c_x-lock-0000000001".into(),
            czxid: 5,
        };
        assert_eq!(n.name(), "_c_x-lock-0000000001");
    }
}
