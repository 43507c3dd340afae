//! `redis-server` processes for tests.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::port::free_port;
use crate::process::{ProcessGuard, ProcessSpec};
use crate::resp::{RespConn, RespValue};
use crate::tempdir::TempDir;

/// Debian's redis-server.
pub const REDIS_SERVER_BIN: &str = "/usr/bin/redis-server";

/// libfaketime preload libraries, multi-threaded variant first (redis runs
/// background threads).
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
];

/// glibc's malloc-debug shim. Debian's redis-server allocates with
/// libjemalloc, which calls clock_gettime() while libfaketime is still
/// initialising and redis never comes up ("Unexpected recursive calls to
/// clock_gettime()", libfaketime issue #130, unfixed). Preloading this shim
/// first serves malloc/free from glibc, so jemalloc stays idle until
/// libfaketime is ready.
const LIBC_MALLOC_DEBUG: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0",
    "/usr/lib/aarch64-linux-gnu/libc_malloc_debug.so.0",
];

/// Options for [`RedisServer::start_with`].
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// Fixed port (default: a free one).
    pub port: Option<u16>,
    /// Run under libfaketime with this initial spec, e.g. `"+10s"`,
    /// `"-2s"`, `"+0 x1.05"` (5% fast clock). See libfaketime's README for the
    /// format. Change it later with [`RedisServer::set_faketime`].
    pub faketime: Option<String>,
    /// Extra `redis-server` arguments, e.g. `["--maxmemory", "10mb"]`.
    pub extra_args: Vec<String>,
}

/// A `redis-server` on 127.0.0.1 without persistence, in its own temp dir.
/// Killed (and its dir removed) on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    proc: ProcessGuard,
    faketime_file: Option<PathBuf>,
    // Dropped last: the process must be gone before its dir is removed.
    dir: TempDir,
}

const START_TIMEOUT: Duration = Duration::from_secs(10);
const CMD_TIMEOUT: Duration = Duration::from_secs(5);

impl RedisServer {
    pub fn start() -> io::Result<RedisServer> {
        RedisServer::start_with(RedisOptions::default())
    }

    pub fn start_with(opts: RedisOptions) -> io::Result<RedisServer> {
        // A free port can be taken by someone else before redis binds it:
        // retry with a fresh one (only when the port was not fixed).
        let attempts = if opts.port.is_some() { 1 } else { 3 };
        let mut last = None;
        for _ in 0..attempts {
            match RedisServer::try_start(&opts) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    fn try_start(opts: &RedisOptions) -> io::Result<RedisServer> {
        let port = match opts.port {
            Some(p) => p,
            None => free_port()?,
        };
        let dir = TempDir::new(&format!("redis-{port}"))?;
        let mut spec = ProcessSpec::new(REDIS_SERVER_BIN, dir.path().join("redis.log"))
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir.path())
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .args(opts.extra_args.iter().cloned())
            .cleanup_dir(dir.path());
        let mut faketime_file = None;
        if let Some(ft) = &opts.faketime {
            let lib = LIBFAKETIME
                .iter()
                .find(|p| Path::new(p).exists())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        "libfaketime not found (apt-get install faketime)",
                    )
                })?;
            let malloc = LIBC_MALLOC_DEBUG
                .iter()
                .find(|p| Path::new(p).exists())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        "libc_malloc_debug.so.0 not found (glibc >= 2.34 needed)",
                    )
                })?;
            let file = dir.path().join("faketime.rc");
            std::fs::write(&file, format!("{ft}\n"))?;
            // Same mechanism as the `faketime` wrapper, but exec'ing redis
            // directly keeps the pid ours (SIGSTOP/SIGKILL reach redis itself);
            // the spec lives in a file so tests can change it while running.
            spec = spec
                .env("LD_PRELOAD", format!("{malloc} {lib}"))
                .env("FAKETIME_TIMESTAMP_FILE", &file)
                .env("FAKETIME_CACHE_DURATION", "1");
            faketime_file = Some(file);
        }
        let mut proc = ProcessGuard::spawn(spec)?;
        let addr = format!("127.0.0.1:{port}");
        proc.wait_ready("redis-server", START_TIMEOUT, || ping(&addr))?;
        Ok(RedisServer {
            port,
            proc,
            faketime_file,
            dir,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn is_running(&mut self) -> bool {
        self.proc.is_running()
    }

    /// SIGSTOP: connections stay open, nothing answers.
    pub fn pause(&self) -> io::Result<()> {
        self.proc.pause()
    }

    pub fn resume(&self) -> io::Result<()> {
        self.proc.resume()
    }

    /// SIGKILL; the data is gone (no persistence). `restart` brings it back empty.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// Kills redis and starts a fresh, empty one on the same port.
    pub fn restart(&mut self) -> io::Result<()> {
        self.proc.restart()?;
        let addr = self.addr();
        self.proc
            .wait_ready("redis-server (restart)", START_TIMEOUT, || ping(&addr))
    }

    /// Changes the libfaketime spec of a server started with `faketime`.
    /// Takes effect within about a second (libfaketime's cache duration).
    pub fn set_faketime(&self, spec: &str) -> io::Result<()> {
        let file = self.faketime_file.as_ref().ok_or_else(|| {
            io::Error::other("server was not started with RedisOptions::faketime")
        })?;
        std::fs::write(file, format!("{spec}\n"))
    }

    /// A new connection to this server.
    pub fn connect(&self) -> io::Result<RespConn> {
        RespConn::connect(self.addr(), CMD_TIMEOUT)
    }

    /// Runs one command on a fresh connection, e.g.
    /// `redis.redis_command(&[b"SCAN", b"0", b"COUNT", b"1000"])`.
    pub fn redis_command(&self, args: &[&[u8]]) -> io::Result<RespValue> {
        self.connect()?.command(args)
    }

    /// All keys (SCAN loop), sorted; for before/after comparisons in tests.
    pub fn all_keys(&self) -> io::Result<Vec<Vec<u8>>> {
        let mut conn = self.connect()?;
        let mut cursor = b"0".to_vec();
        let mut keys = Vec::new();
        loop {
            let reply = conn.command(&[&b"SCAN"[..], &cursor, b"COUNT", b"1000"])?;
            let parts = reply.as_array().unwrap_or(&[]);
            let (Some(next), Some(batch)) =
                (parts.first().and_then(RespValue::as_bytes), parts.get(1))
            else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unexpected SCAN reply {reply:?}"),
                ));
            };
            keys.extend(
                batch
                    .as_array()
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(|k| k.as_bytes().map(<[u8]>::to_vec)),
            );
            cursor = next.to_vec();
            if cursor == b"0" {
                break;
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

fn ping(addr: &str) -> bool {
    RespConn::connect(addr, Duration::from_millis(500))
        .and_then(|mut c| c.command(&["PING"]))
        .is_ok_and(|v| v == RespValue::Simple("PONG".into()))
}
