//! `webdis` (Debian 0.1.9) in front of a [`RedisServer`].
//!
//! Facts about this webdis build (checked by the tests in this crate):
//! - config is a JSON file given as the only argument; `daemonize: false`
//!   keeps it in the foreground; `"acl": [{"enabled": ["*"]}]` allows every
//!   command webdis itself permits (MULTI/EXEC/WATCH are refused with 403 by
//!   webdis regardless of the ACL; EVAL/EVALSHA/SCRIPT work);
//! - every reply (including 403/503 and `OPTIONS` preflights, which get
//!   `200` with an empty body) carries `Access-Control-Allow-Origin: *`,
//!   `Access-Control-Allow-Methods: GET,POST,PUT,OPTIONS` and
//!   `Access-Control-Allow-Headers: X-Requested-With, Content-Type, Authorization`
//!   — a fixed list: a browser may only send those request headers;
//! - JSON output cannot carry non-UTF-8 values (a GET of such a value yields
//!   `{}`); the `.raw` suffix returns the RESP bytes unchanged;
//! - with Redis down it answers `503 Service Unavailable`.

use std::io;
use std::time::Duration;

use crate::http1::http_request;
use crate::port::free_port;
use crate::process::{ProcessGuard, ProcessSpec};
use crate::redis::RedisServer;
use crate::tempdir::TempDir;

pub const WEBDIS_BIN: &str = "/usr/bin/webdis";

/// A webdis process; killed (and its temp dir removed) on drop.
#[derive(Debug)]
pub struct Webdis {
    port: u16,
    redis_port: u16,
    proc: ProcessGuard,
    dir: TempDir,
}

/// The webdis.json this crate writes.
pub fn webdis_config(http_port: u16, redis_port: u16, logfile: &str) -> serde_json::Value {
    serde_json::json!({
        "redis_host": "127.0.0.1",
        "redis_port": redis_port,
        "redis_auth": null,
        "http_host": "127.0.0.1",
        "http_port": http_port,
        "threads": 2,
        "pool_size": 4,
        "daemonize": false,
        "database": 0,
        "acl": [ { "enabled": ["*"] } ],
        "verbosity": 1,
        "logfile": logfile,
    })
}

impl Webdis {
    pub fn start(redis: &RedisServer) -> io::Result<Webdis> {
        Webdis::start_for_port(redis.port())
    }

    /// Webdis in front of a Redis on 127.0.0.1:`redis_port`.
    pub fn start_for_port(redis_port: u16) -> io::Result<Webdis> {
        let mut last = None;
        for _ in 0..3 {
            match Webdis::try_start(redis_port) {
                Ok(w) => return Ok(w),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("webdis did not start")))
    }

    fn try_start(redis_port: u16) -> io::Result<Webdis> {
        let port = free_port()?;
        let dir = TempDir::new(&format!("webdis-{port}"))?;
        let logfile = dir.path().join("webdis.log");
        let config = dir.path().join("webdis.json");
        let json = webdis_config(port, redis_port, &logfile.to_string_lossy());
        std::fs::write(
            &config,
            serde_json::to_vec_pretty(&json).map_err(io::Error::other)?,
        )?;
        let spec = ProcessSpec::new(WEBDIS_BIN, dir.path().join("webdis.out"))
            .arg(&config)
            .cleanup_dir(dir.path());
        let mut proc = ProcessGuard::spawn(spec)?;
        let url = format!("http://127.0.0.1:{port}/PING");
        proc.wait_ready("webdis", Duration::from_secs(10), || {
            http_request("GET", &url, &[], b"", Duration::from_millis(500))
                .is_ok_and(|r| r.status == 200 && r.text().contains("PONG"))
        })?;
        Ok(Webdis {
            port,
            redis_port,
            proc,
            dir,
        })
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn redis_port(&self) -> u16 {
        self.redis_port
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    pub fn config_path(&self) -> std::path::PathBuf {
        self.dir.path().join("webdis.json")
    }

    pub fn pause(&self) -> io::Result<()> {
        self.proc.pause()
    }

    pub fn resume(&self) -> io::Result<()> {
        self.proc.resume()
    }

    pub fn kill(&mut self) {
        self.proc.kill();
    }
}
