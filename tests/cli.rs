//! The `edgelock` CLI against a real etcd (Debian's etcd-server), started by
//! each test through `edgelock-devtools` on free loopback ports with a temp
//! data dir, and killed on drop.
#![cfg(feature = "native")]

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine;
use edgelock::native::http::{CancelHandle, HttpClient, Request};
use edgelock_devtools::{
    CuratorPeer, EtcdServer, RedisServer, UpstashGateway, Webdis, ZooKeeperServer,
};

const BIN: &str = env!("CARGO_BIN_EXE_edgelock");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// What a command wrote to `path` once it wrote a whole line (polled: the
/// command runs in another process, started whenever the machine gets to it).
fn written_line(path: &std::path::Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = std::fs::read_to_string(path)
            .ok()
            .filter(|s| s.ends_with('\n'))
        {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "nothing written to {} in 30 s",
            path.display()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// A throwaway single-node etcd on loopback (the devtools harness kills it
/// and removes its data dir on drop).
struct Etcd(EtcdServer);

impl Etcd {
    fn start() -> Etcd {
        Etcd(EtcdServer::start().expect("start etcd (apt install etcd-server)"))
    }

    fn url(&self) -> String {
        self.0.url()
    }

    /// A raw gateway call; None unless HTTP 200.
    fn call(&self, path: &str, body: &str) -> Option<serde_json::Value> {
        let url = format!("{}{path}", self.url());
        let req = Request {
            method: "POST",
            url: &url,
            headers: &[],
            body: body.as_bytes(),
            timeout: Some(Duration::from_secs(2)),
        };
        let resp = HttpClient::new().send(&req, &CancelHandle::new()).ok()?;
        (resp.status == 200)
            .then(|| serde_json::from_slice(&resp.body).ok())
            .flatten()
    }

    /// Deletes every key of lock `name` behind its holders' backs.
    fn delete_lock_keys(&self, name: &str) {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let body = serde_json::json!({"key": b64(&format!("edgelock/{name}/")), "range_end": b64(&format!("edgelock/{name}0"))});
        let v = self
            .call("/v3/kv/deleterange", &body.to_string())
            .expect("deleterange");
        assert_eq!(v["deleted"].as_str(), Some("1"), "{v}");
    }
}

fn edgelock(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).stdin(Stdio::null());
    c
}

fn output(args: &[&str]) -> Output {
    edgelock(args).output().expect("run edgelock")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Spawns `edgelock run` and waits until it reports the lock acquired; returns
/// the child and its fencing token.
fn spawn_holder(args: &[&str]) -> (Child, u64) {
    let mut child = edgelock(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn edgelock");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("read stderr");
    let token = line
        .trim()
        .rsplit_once("token=")
        .and_then(|(_, t)| t.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first stderr line {line:?}"));
    // Keep draining stderr so the child never blocks on a full pipe.
    thread::spawn(move || {
        let _ = err.read_to_end(&mut Vec::new());
    });
    (child, token)
}

#[test]
fn run_exports_the_fencing_token_and_propagates_exit_codes() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let out = output(&[
        "run",
        "--etcd",
        &url,
        "job",
        "--",
        "sh",
        "-c",
        "echo \"token=$EDGELOCK_FENCING_TOKEN name=$EDGELOCK_LOCK_NAME\"",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let token: u64 = stdout
        .trim()
        .strip_prefix("token=")
        .and_then(|r| r.strip_suffix(" name=job"))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("unexpected stdout {stdout:?}"));
    assert!(token > 0);
    assert_eq!(
        text(&out.stderr).lines().next(),
        Some(format!("edgelock: acquired job token={token}").as_str())
    );

    let out = output(&[
        "run",
        "--etcd",
        &url,
        "job",
        "--",
        "sh",
        "-c",
        "echo $EDGELOCK_FENCING_TOKEN; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7));
    let second: u64 = text(&out.stdout).trim().parse().expect("token");
    assert!(
        second > token,
        "fencing tokens increase: {token} then {second}"
    );

    let out = output(&["run", "--etcd", &url, "job", "--", "/nonexistent/cmd"]);
    assert_eq!(out.status.code(), Some(127));
    // The lock was released each time: a --try succeeds at once.
    let out = output(&["run", "--etcd", &url, "--try", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn concurrent_runs_never_overlap() {
    let etcd = Etcd::start();
    let url = etcd.url();
    assert_runs_never_overlap(&["--etcd", &url], &[]);
}

#[test]
fn concurrent_runs_never_overlap_on_redlock_and_on_one_upstash_node() {
    let redis: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start().expect("redis-server"))
        .collect();
    let webdis: Vec<Webdis> = redis
        .iter()
        .map(|r| Webdis::start(r).expect("webdis"))
        .collect();
    let nodes = webdis
        .iter()
        .map(|w| format!("webdis+{}", w.url()))
        .collect::<Vec<_>>()
        .join(",");
    assert_runs_never_overlap(&["--redis", &nodes], &[]);
    let gateway = UpstashGateway::start(&redis[0], "cli-test-token").expect("gateway");
    let node = format!("upstash+{}", gateway.url());
    assert_runs_never_overlap(
        &["--redis", &node],
        &[("EDGELOCK_REDIS_TOKEN", "cli-test-token")],
    );
    assert_runs_never_overlap(
        &["--redis", &node, "--fair"],
        &[("EDGELOCK_REDIS_TOKEN", "cli-test-token")],
    );
    // --fair is a single-node lock.
    let out = output(&["run", "--redis", &nodes, "--fair", "n", "--", "true"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    // Without the token the gateway's node is refused before any request.
    let out = edgelock(&["status", "--redis", &node, "n"])
        .env_remove("EDGELOCK_REDIS_TOKEN")
        .env_remove("UPSTASH_REDIS_REST_TOKEN")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
}

/// `--redis redis://…` against redis-servers with a password: one node
/// (its password from redis-cli's variable, from edgelock's, or from the
/// URL) and a Redlock mixing redis:// and Webdis nodes; a wrong password
/// fails without being shown.
#[test]
fn concurrent_runs_never_overlap_over_redis_urls_with_a_password() {
    let redis: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start().expect("redis-server"))
        .collect();
    let webdis = Webdis::start(&redis[2]).expect("webdis");
    // Set after the start: the devtools readiness check pings without one.
    for r in &redis[..2] {
        r.redis_command(&[b"CONFIG", b"SET", b"requirepass", b"cli-pw-789"])
            .expect("CONFIG SET requirepass");
    }
    let url = |i: usize| format!("redis://127.0.0.1:{}", redis[i].port());
    let one = url(0);
    assert_runs_never_overlap(&["--redis", &one], &[("REDISCLI_AUTH", "cli-pw-789")]);
    let mixed = format!("{},{},webdis+{}", url(0), url(1), webdis.url());
    assert_runs_never_overlap(
        &["--redis", &mixed],
        &[("EDGELOCK_REDIS_PASSWORD", "cli-pw-789")],
    );
    let in_url = format!("redis://:cli-pw-789@127.0.0.1:{}/2", redis[1].port());
    let out = edgelock(&["status", "--redis", &in_url, "n"])
        .env("REDISCLI_AUTH", "not-this-one")
        .output()
        .expect("run edgelock");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let wrong = format!("redis://:wrong-pw-000@127.0.0.1:{}", redis[0].port());
    let out = output(&["run", "--redis", &wrong, "--try", "n", "--", "true"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(!stderr.contains("wrong-pw-000"), "{stderr}");
    // Refused by the server (BACKEND, as an Upstash 401): exit 69, and
    // the message says so.
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("refused authentication"), "{stderr}");
}

/// Three `edgelock run`s of a job that logs its start and end: sorted by
/// time, the log must read start/end pairs with strictly increasing tokens.
fn assert_runs_never_overlap(backend: &[&str], env: &[(&str, &str)]) {
    let log = std::env::temp_dir().join(format!(
        "edgelock-cli-overlap-{}-{}",
        std::process::id(),
        free_port()
    ));
    let _ = std::fs::remove_file(&log);
    let script = format!(
        "echo \"start $(date +%s%N) $EDGELOCK_FENCING_TOKEN\" >> {p}; sleep 0.4; echo \"end $(date +%s%N) $EDGELOCK_FENCING_TOKEN\" >> {p}",
        p = log.display()
    );
    let runs: Vec<Child> = (0..3)
        .map(|_| {
            let mut args = vec!["run"];
            args.extend_from_slice(backend);
            args.extend_from_slice(&["--wait", "30000", "shared", "--", "sh", "-c", &script]);
            let mut cmd = edgelock(&args);
            cmd.envs(env.iter().copied());
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for mut r in runs {
        assert_eq!(r.wait().expect("wait").code(), Some(0));
    }
    let content = std::fs::read_to_string(&log).expect("log");
    let _ = std::fs::remove_file(&log);
    let events: Vec<(String, u128, u64)> = content
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].to_string(),
                f[1].parse().expect("time"),
                f[2].parse().expect("token"),
            )
        })
        .collect();
    assert_eq!(events.len(), 6, "{content}");
    // Sorted by time, the log must read start/end pairs of one token each,
    // with strictly increasing tokens.
    let mut sorted = events.clone();
    sorted.sort_by_key(|e| e.1);
    let mut last_token = 0;
    for pair in sorted.chunks(2) {
        assert_eq!(
            (pair[0].0.as_str(), pair[1].0.as_str()),
            ("start", "end"),
            "overlap in {content}"
        );
        assert_eq!(pair[0].2, pair[1].2, "overlap in {content}");
        assert!(pair[0].2 > last_token, "tokens must increase: {content}");
        last_token = pair[0].2;
    }
}

#[test]
fn try_wait_and_status_while_held() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let (mut holder, token) = spawn_holder(&[
        "run", "--etcd", &url, "--ttl", "2000", "busy", "--", "sleep", "60",
    ]);

    let out = output(&["run", "--etcd", &url, "--try", "busy", "--", "true"]);
    assert_eq!(out.status.code(), Some(73), "{}", text(&out.stderr));

    let t = Instant::now();
    let out = output(&["run", "--etcd", &url, "--wait", "300", "busy", "--", "true"]);
    assert_eq!(out.status.code(), Some(74), "{}", text(&out.stderr));
    assert!(t.elapsed() >= Duration::from_millis(299)); // the clock has whole-ms resolution

    // A waiter queues behind the holder; status lists both.
    let mut waiter = edgelock(&["run", "--etcd", &url, "busy", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut status = serde_json::Value::Null;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let out = output(&["status", "--etcd", &url, "--json", "busy"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        status = serde_json::from_slice(&out.stdout).expect("json");
        if status["waiters"].as_array().is_some_and(|w| w.len() == 1) {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["fencingToken"], token.to_string(), "{status}");
    assert_eq!(
        status["waiters"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
    let holder_key = status["holder"].as_str().expect("holder").to_string();
    assert!(holder_key.starts_with("edgelock/busy/"), "{holder_key}");

    let out = output(&["status", "--etcd", &url, "busy"]);
    let plain = text(&out.stdout);
    assert!(
        plain.contains(&format!("holder: {holder_key}\n")),
        "{plain}"
    );
    assert!(
        plain.contains(&format!("fencing_token: {token}\n")),
        "{plain}"
    );
    assert_eq!(
        plain.matches("waiter: edgelock/busy/").count(),
        1,
        "{plain}"
    );

    // The holder dies without releasing (SIGKILL): the waiter gets the lock
    // once the holder's session lease (2 s) expires.
    let _ = holder.kill();
    let _ = holder.wait();
    let t = Instant::now();
    assert_eq!(waiter.wait().expect("wait").code(), Some(0));
    assert!(t.elapsed() < Duration::from_secs(20));
}

/// `run --shared` on etcd: two readers run at once with
/// `EDGELOCK_LOCK_MODE=shared`, an exclusive `--try` is busy (73) while they
/// hold, and `status --json` lists both with mode `shared`.
#[test]
fn shared_runs_hold_together_on_etcd_and_exclude_a_writer() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let dir = std::env::temp_dir().join(format!(
        "edgelock-cli-shared-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut readers = Vec::new();
    for i in 0..2 {
        let script = format!(
            "echo \"$EDGELOCK_LOCK_MODE $EDGELOCK_FENCING_TOKEN\" > {}; sleep 60",
            dir.join(format!("r{i}")).display()
        );
        readers.push(spawn_holder(&[
            "run", "--etcd", &url, "--shared", "--ttl", "3000", "--wait", "10000", "cfg", "--",
            "sh", "-c", &script,
        ]));
    }
    for (i, (_, token)) in readers.iter().enumerate() {
        let f = dir.join(format!("r{i}"));
        let seen = written_line(&f);
        assert_eq!(seen.trim(), format!("shared {token}"), "reader {i}");
    }
    let out = output(&["run", "--etcd", &url, "--try", "cfg", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(73),
        "a writer while readers hold: {}",
        text(&out.stderr)
    );
    let out = output(&["status", "--etcd", &url, "--json", "cfg"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let modes: Vec<&str> = status["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .filter_map(|h| h["mode"].as_str())
        .collect();
    assert_eq!(modes, ["shared", "shared"], "{status}");
    for (mut r, _) in readers {
        let _ = r.kill();
        let _ = r.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn losing_the_lock_kills_the_command_and_exits_75() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let marker = std::env::temp_dir().join(format!(
        "edgelock-cli-lost-{}-{}",
        std::process::id(),
        free_port()
    ));
    let script = format!("sleep 20; touch {}", marker.display());
    let (mut run, _) = spawn_holder(&[
        "run", "--etcd", &url, "--ttl", "2000", "lost", "--", "sh", "-c", &script,
    ]);
    etcd.delete_lock_keys("lost");
    let t = Instant::now();
    let status = run.wait().expect("wait");
    assert_eq!(status.code(), Some(75));
    assert!(t.elapsed() < Duration::from_secs(12), "{:?}", t.elapsed());
    assert!(!marker.exists(), "the command must have been killed");
}

#[test]
fn usage_and_backend_errors_have_their_exit_codes() {
    let dead = format!("http://127.0.0.1:{}", free_port());
    assert_eq!(
        output(&["run", "--etcd", &dead, "n", "--", "true"])
            .status
            .code(),
        Some(69)
    );
    assert_eq!(
        output(&["status", "--etcd", &dead, "n"]).status.code(),
        Some(69)
    );
    assert_eq!(
        output(&["run", "--etcd", &dead, "n"]).status.code(),
        Some(64)
    );
    assert_eq!(output(&["run", "n", "--", "true"]).status.code(), Some(64));
    assert_eq!(
        output(&["run", "--etcd", &dead, "--try", "--wait", "5", "n", "--", "true"])
            .status
            .code(),
        Some(64)
    );
    assert_eq!(
        output(&["run", "--etcd", &dead, "--bogus", "n", "--", "true"])
            .status
            .code(),
        Some(64)
    );
    assert_eq!(
        output(&["run", "--etcd", "ftp://x", "n", "--", "true"])
            .status
            .code(),
        Some(64)
    );
    // https is supported (tests/native_tls.rs); a TLS file that cannot be read is a usage error.
    assert_eq!(
        output(&[
            "run",
            "--etcd",
            "https://x",
            "--ca-file",
            "/nonexistent.pem",
            "n",
            "--",
            "true"
        ])
        .status
        .code(),
        Some(64)
    );
    assert_eq!(
        output(&[
            "run",
            "--etcd",
            "https://x",
            "--key",
            "/k.pem",
            "n",
            "--",
            "true"
        ])
        .status
        .code(),
        Some(64)
    );
    assert_eq!(
        output(&["run", "--etcd", &dead, "--ttl", "10", "n", "--", "true"])
            .status
            .code(),
        Some(64)
    );
    assert_eq!(output(&["frobnicate"]).status.code(), Some(64));
    let out = output(&["status", "--redis", "http://127.0.0.1:1", "n"]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "a bare URL is an Upstash node, which needs a token"
    );
    assert!(text(&out.stderr).contains("token"), "{}", text(&out.stderr));
    let out = output(&["status", "--redis", "ftp://127.0.0.1:1", "n"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        text(&out.stderr).contains("redis://HOST") && text(&out.stderr).contains("webdis+http://"),
        "{}",
        text(&out.stderr)
    );
    let dead_node = format!("webdis+{dead}");
    assert_eq!(
        output(&["run", "--redis", &dead_node, "--try", "n", "--", "true"])
            .status
            .code(),
        Some(69)
    );
    let help = output(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("EXIT CODES"));
    assert!(text(&help.stdout).contains("--limit N"));
}

/// `redis://` URLs are read before anything is sent; a bad one is a usage
/// error whose message never holds the password.
#[test]
fn redis_urls_are_checked_before_any_request_without_their_password() {
    let refused = |args: &[&str], env: &[(&str, &str)], says: &str| {
        let out = edgelock(args)
            .env_remove("REDISCLI_AUTH")
            .env_remove("EDGELOCK_REDIS_PASSWORD")
            .envs(env.iter().copied())
            .output()
            .expect("run edgelock");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{args:?}: {stderr}");
    };
    let run = |url: &'static str| ["run", "--redis", url, "--try", "n", "--", "true"];
    refused(&run("redis://:hunter2@127.0.0.1:99999"), &[], "port");
    refused(&run("rediss://u:hunter2@/0"), &[], "needs a host");
    refused(&run("redis://:hunter2@h/x"), &[], "database");
    refused(&run("redis://:hunter2%zz@h"), &[], "%-escape");
    // One bad node of a Redlock is enough.
    refused(&run("http://a,redis://:hunter2@h:0"), &[], "port");
    let mut twice = run("redis://:hunter2@127.0.0.1:1").to_vec();
    twice.splice(1..1, ["--token", "other"]);
    refused(&twice, &[], "once");
    // A password variable gives way to the URL's own (as in redis-cli), and
    // a status is refused like a run.
    let out = edgelock(&["status", "--redis", "redis://:hunter2@127.0.0.1:1", "n"])
        .env("REDISCLI_AUTH", "from-env")
        .env("EDGELOCK_REDIS_PASSWORD", "from-env-too")
        .output()
        .expect("run edgelock");
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains("once") && !stderr.contains("hunter2") && !stderr.contains("from-env"),
        "{stderr}"
    );
    refused(
        &["status", "--redis", "redis://:hunter2@h:0", "n"],
        &[("REDISCLI_AUTH", "x")],
        "port",
    );
    let help = output(&["--help"]);
    assert!(text(&help.stdout).contains("redis://[USER[:PASSWORD]@]HOST"));
    assert!(text(&help.stdout).contains("REDISCLI_AUTH"));
}

#[test]
fn lock_kind_flags_are_checked_before_any_request() {
    // A dead endpoint: 64 (not 69) proves nothing was sent.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let dead_node = format!("webdis+{dead}");
    for backend in [["--etcd", dead.as_str()], ["--redis", dead_node.as_str()]] {
        for bad in [
            &["--limit", "0"][..],
            &["--limit", "x"],
            &["--limit", "-1"],
            &["--limit", "1.5"],
            &["--limit", "101"],
            &["--limit"],
            &["--limit", "3", "--shared"],
            &["--shared", "--limit=2"],
        ] {
            let mut args = vec!["run", backend[0], backend[1]];
            args.extend_from_slice(bad);
            args.extend_from_slice(&["n", "--", "true"]);
            let out = output(&args);
            assert_eq!(
                out.status.code(),
                Some(64),
                "{args:?}: {}",
                text(&out.stderr)
            );
            assert!(
                text(&out.stderr).contains("--limit"),
                "{args:?}: {}",
                text(&out.stderr)
            );
        }
        // The fair queue is for exclusive holders only.
        if backend[0] == "--redis" {
            let out = output(&[
                "run", backend[0], backend[1], "--fair", "--limit", "2", "n", "--", "true",
            ]);
            assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
            assert!(
                text(&out.stderr).contains("--fair applies to the exclusive lock"),
                "{}",
                text(&out.stderr)
            );
        }
        // `status` takes no kind.
        assert_eq!(
            output(&["status", backend[0], backend[1], "--limit", "3", "n"])
                .status
                .code(),
            Some(64)
        );
        assert_eq!(
            output(&["status", backend[0], backend[1], "--shared", "n"])
                .status
                .code(),
            Some(64)
        );
        // etcd and one Redis node grant read-write locks: `--shared` is a
        // valid request, here to a dead endpoint (unreachable: 69 on Redis).
        let out = output(&["run", backend[0], backend[1], "--shared", "n", "--", "true"]);
        assert_ne!(out.status.code(), Some(64), "{}", text(&out.stderr));
        assert!(
            !text(&out.stderr).contains("does not offer shared locks"),
            "{}",
            text(&out.stderr)
        );
        if backend[0] == "--redis" {
            assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
        }
    }
}

/// `edgelock run --limit 3` holders: the first stderr line names the slot;
/// CMD writes `$EDGELOCK_SLOT $EDGELOCK_LOCK_MODE $EDGELOCK_LOCK_LIMIT
/// $EDGELOCK_FENCING_TOKEN` to `out` and sleeps.
fn spawn_permit(
    backend: &[&str],
    env: &[(&str, &str)],
    name: &str,
    out: &std::path::Path,
) -> (Child, u32, u64) {
    let script = format!(
        "echo \"$EDGELOCK_SLOT $EDGELOCK_LOCK_MODE $EDGELOCK_LOCK_LIMIT $EDGELOCK_FENCING_TOKEN\" > {}; sleep 60",
        out.display()
    );
    let mut args = vec!["run"];
    args.extend_from_slice(backend);
    args.extend_from_slice(&[
        "--limit", "3", "--ttl", "3000", "--wait", "60000", name, "--", "sh", "-c", &script,
    ]);
    let mut child = edgelock(&args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn edgelock");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("read stderr");
    // `edgelock: acquired NAME slot=S/3 token=T`
    let parsed = line
        .trim()
        .strip_prefix(&format!("edgelock: acquired {name} slot="))
        .and_then(|rest| {
            let (slot, token) = rest.split_once("/3 token=")?;
            Some((slot.parse().ok()?, token.parse().ok()?))
        });
    let (slot, token) = parsed.unwrap_or_else(|| panic!("unexpected first stderr line {line:?}"));
    thread::spawn(move || {
        let _ = err.read_to_end(&mut Vec::new());
    });
    (child, slot, token)
}

/// Three concurrent `run --limit 3` hold distinct `EDGELOCK_SLOT`s, a fourth
/// `--try` is refused (73), and `status` lists the three permits with their
/// slots and the limit (text and JSON).
fn assert_permits(backend: &[&str], env: &[(&str, &str)]) {
    let name = format!("sem-{}", free_port());
    let dir = std::env::temp_dir().join(format!(
        "edgelock-cli-permits-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut holders = Vec::new();
    for i in 0..3 {
        holders.push(spawn_permit(
            backend,
            env,
            &name,
            &dir.join(format!("run{i}")),
        ));
    }
    let mut slots: Vec<u32> = holders.iter().map(|h| h.1).collect();
    slots.sort();
    assert_eq!(slots, [0, 1, 2], "distinct slots");
    // What CMD saw in its environment.
    for (i, (_, slot, token)) in holders.iter().enumerate() {
        let f = dir.join(format!("run{i}"));
        let seen = written_line(&f);
        assert_eq!(seen.trim(), format!("{slot} permit 3 {token}"), "run {i}");
    }

    let mut args = vec!["run"];
    args.extend_from_slice(backend);
    args.extend_from_slice(&["--limit", "3", "--try", &name, "--", "true"]);
    let out = edgelock(&args)
        .envs(env.iter().copied())
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(73),
        "a 4th permit: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("every permit"),
        "{}",
        text(&out.stderr)
    );

    let mut args = vec!["status"];
    args.extend_from_slice(backend);
    args.extend_from_slice(&["--json", &name]);
    let out = edgelock(&args)
        .envs(env.iter().copied())
        .output()
        .expect("status");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["limit"], 3, "{status}");
    let listed = status["holders"].as_array().expect("holders");
    assert_eq!(listed.len(), 3, "{status}");
    let mut listed_slots: Vec<u64> = listed
        .iter()
        .map(|h| h["slot"].as_u64().expect("slot"))
        .collect();
    listed_slots.sort();
    assert_eq!(listed_slots, [0, 1, 2], "{status}");
    assert!(
        listed
            .iter()
            .all(|h| h["mode"] == "permit" && h["limit"] == 3),
        "{status}"
    );

    args.retain(|a| *a != "--json");
    let out = edgelock(&args)
        .envs(env.iter().copied())
        .output()
        .expect("status");
    let plain = text(&out.stdout);
    assert!(plain.contains("limit: 3\n"), "{plain}");
    for slot in 0..3 {
        // `hold: mode=permit slot=S [token=T] [id=ID]` (Redis tells neither token nor id).
        let line = format!("hold: mode=permit slot={slot}");
        let n = plain
            .lines()
            .filter(|l| *l == line || l.starts_with(&format!("{line} ")))
            .count();
        assert_eq!(n, 1, "{plain}");
    }

    // A holder that ends gives its slot back: the next run gets that slot.
    let (mut gone, freed, _) = holders.remove(1);
    let _ = gone.kill();
    let _ = gone.wait();
    let (mut next, slot, _) = spawn_permit(backend, env, &name, &dir.join("next"));
    assert_eq!(slot, freed, "the freed slot is reused");
    for (mut h, _, _) in holders {
        let _ = h.kill();
        let _ = h.wait();
    }
    let _ = next.kill();
    let _ = next.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn permits_on_etcd_give_concurrent_runs_distinct_slots() {
    let etcd = Etcd::start();
    let url = etcd.url();
    assert_permits(&["--etcd", &url], &[]);
}

#[test]
fn permits_on_redis_give_concurrent_runs_distinct_slots() {
    let redis: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start().expect("redis-server"))
        .collect();
    let gateway = UpstashGateway::start(&redis[0], "cli-test-token").expect("gateway");
    let node = format!("upstash+{}", gateway.url());
    assert_permits(
        &["--redis", &node],
        &[("EDGELOCK_REDIS_TOKEN", "cli-test-token")],
    );
    let webdis: Vec<Webdis> = redis
        .iter()
        .map(|r| Webdis::start(r).expect("webdis"))
        .collect();
    assert_permits(&["--redis", &format!("webdis+{}", webdis[1].url())], &[]);
    let nodes = webdis
        .iter()
        .map(|w| format!("webdis+{}", w.url()))
        .collect::<Vec<_>>()
        .join(",");
    assert_permits(&["--redis", &nodes], &[]);
}

/// `run --shared` on one Redis node: two readers run side by side (each
/// sees `EDGELOCK_LOCK_MODE=shared`), an exclusive `--try` is refused (73)
/// while they do, and `status` lists them as shared holders.
#[test]
fn shared_runs_overlap_on_one_redis_node_and_exclude_a_writer() {
    let redis = RedisServer::start().expect("redis-server");
    let webdis = Webdis::start(&redis).expect("webdis");
    let node = format!("webdis+{}", webdis.url());
    let dir = std::env::temp_dir().join(format!(
        "edgelock-cli-shared-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // Each reader holds until the test creates `release`: if the second
    // could not get in beside the first, it would never write its mode.
    let release = dir.join("release");
    let reader = |i: usize| {
        let out = dir.join(format!("r{i}"));
        let script = format!(
            "echo $EDGELOCK_LOCK_MODE > {}; while [ ! -e {} ]; do sleep 0.05; done",
            out.display(),
            release.display()
        );
        let child = edgelock(&[
            "run", "--redis", &node, "--shared", "cfg", "--", "sh", "-c", &script,
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
        (child, out)
    };
    let (mut a, a_out) = reader(0);
    let (mut b, b_out) = reader(1);
    // Both hold at once: both wrote their mode, and neither has ended.
    let modes = [written_line(&a_out), written_line(&b_out)];
    assert!(
        a.try_wait().expect("a").is_none() && b.try_wait().expect("b").is_none(),
        "the readers hold until released"
    );
    let writer = output(&["run", "--redis", &node, "--try", "cfg", "--", "true"]);
    assert_eq!(
        writer.status.code(),
        Some(73),
        "a writer beside readers: {}",
        text(&writer.stderr)
    );
    let status = output(&["status", "--redis", &node, "cfg"]);
    assert_eq!(status.status.code(), Some(0), "{}", text(&status.stderr));
    assert_eq!(
        text(&status.stdout).matches("mode=shared").count(),
        2,
        "{}",
        text(&status.stdout)
    );
    std::fs::write(&release, "").expect("release the readers");
    assert!(a.wait().expect("wait").success() && b.wait().expect("wait").success());
    for mode in modes {
        assert_eq!(mode.trim(), "shared");
    }
    let writer = output(&["run", "--redis", &node, "--try", "cfg", "--", "true"]);
    assert_eq!(writer.status.code(), Some(0), "{}", text(&writer.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn elect_runs_the_command_only_while_leading_and_leader_reports_it() {
    let etcd = Etcd::start();
    let url = etcd.url();
    // Nobody leads yet.
    let out = output(&["leader", "--etcd", &url, "svc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no leader\n");
    assert_eq!(
        text(&output(&["leader", "--etcd", &url, "--json", "svc"]).stdout),
        "null\n"
    );

    // The leader's command sees its token, value and mode.
    let dump = std::env::temp_dir().join(format!(
        "edgelock-cli-elect-{}-{}",
        std::process::id(),
        free_port()
    ));
    let script = format!(
        "echo \"$EDGELOCK_FENCING_TOKEN $EDGELOCK_LEADER_VALUE $EDGELOCK_LOCK_MODE $EDGELOCK_LOCK_NAME\" > {}; sleep 60",
        dump.display()
    );
    let (mut leader, token) = spawn_holder(&[
        "elect",
        "--etcd",
        &url,
        "--ttl",
        "2000",
        "--value",
        "node-a:80",
        "svc",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let seen = written_line(&dump);
    let _ = std::fs::remove_file(&dump);
    assert_eq!(seen.trim(), format!("{token} node-a:80 leader svc"));
    let out = output(&["leader", "--etcd", &url, "svc"]);
    assert_eq!(
        text(&out.stdout),
        format!("leader: node-a:80\nfencing_token: {token}\n")
    );
    let out = output(&["leader", "--etcd", &url, "--json", "svc"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v,
        serde_json::json!({ "value": "node-a:80", "fencingToken": token.to_string() })
    );

    // Someone else leads: --try exits 73 without running its command.
    let out = output(&[
        "elect", "--etcd", &url, "--try", "svc", "--", "sh", "-c", "exit 0",
    ]);
    assert_eq!(out.status.code(), Some(73), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("someone else leads"),
        "{}",
        text(&out.stderr)
    );

    // A watcher sees the current leader, then the next one after a failover.
    let mut watch = edgelock(&["leader", "--etcd", &url, "--watch", "svc"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("leader: node-a:80")
    );
    assert_eq!(
        lines.next().and_then(Result::ok),
        Some(format!("fencing_token: {token}"))
    );
    let (mut next, next_token) = {
        let mut waiting = edgelock(&[
            "elect",
            "--etcd",
            &url,
            "--value",
            "node-b:80",
            "svc",
            "--",
            "sleep",
            "60",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn candidate");
        thread::sleep(Duration::from_millis(300));
        let _ = leader.kill(); // the leader's process dies: its lease expires (default TTL 10 s)
        let _ = leader.wait();
        let mut err = BufReader::new(waiting.stderr.take().expect("stderr"));
        let mut line = String::new();
        err.read_line(&mut line).expect("read stderr");
        let t: u64 = line
            .trim()
            .rsplit_once("token=")
            .and_then(|(_, t)| t.parse().ok())
            .unwrap_or_else(|| panic!("{line:?}"));
        // Keep draining stderr so the child never writes into a closed pipe.
        thread::spawn(move || {
            let _ = err.read_to_end(&mut Vec::new());
        });
        (waiting, t)
    };
    assert!(next_token > token, "{next_token} > {token}");
    let mut seen = Vec::new();
    while let Some(Ok(l)) = lines.next() {
        seen.push(l.clone());
        if l == format!("fencing_token: {next_token}") {
            break;
        }
    }
    assert!(seen.contains(&"leader: node-b:80".to_string()), "{seen:?}");
    let _ = watch.kill();
    let _ = watch.wait();

    // Losing the leadership stops the command and exits 75.
    etcd.delete_lock_keys("svc");
    let status = next.wait().expect("wait");
    assert_eq!(status.code(), Some(75));
}

#[test]
fn election_flags_are_checked_before_any_request() {
    // Nothing listens on this port: a request would be exit 69, not 64.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let big = "v".repeat(4097);
    for (args, says) in [
        (
            vec![
                "elect", "--etcd", &dead, "--value", &big, "svc", "--", "true",
            ],
            "at most 4096 bytes",
        ),
        (vec!["elect", "--etcd", &dead, "svc"], "missing command"),
        (
            vec!["leader", "--etcd", &dead, "svc", "--", "true"],
            "takes no command",
        ),
        (
            vec!["leader", "--etcd", &dead, "--value", "v", "svc"],
            "unknown option",
        ),
        (
            vec!["elect", "--etcd", &dead, "--watch", "svc", "--", "true"],
            "unknown option",
        ),
        (
            vec!["elect", "--etcd", &dead, "--json", "svc", "--", "true"],
            "unknown option",
        ),
    ] {
        let out = output(&args);
        assert_eq!(
            out.status.code(),
            Some(64),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// Runs `edgelock run FLAG URL nest -- sh -c SCRIPT` (SCRIPT nests more
/// runs through `$EL run "$FLAG" "$URL" ...`) with at most 60 s: its output.
fn nested(flag: &str, url: &str, script: &str, env: &[(&str, &str)]) -> Output {
    Command::new("timeout")
        .args([
            "60", BIN, "run", flag, url, "nest", "--", "sh", "-c", script,
        ])
        .env("EL", BIN)
        .env("FLAG", flag)
        .env("URL", url)
        .envs(env.iter().copied())
        .env_remove("EDGELOCK_LOCK_HANDLE")
        .stdin(Stdio::null())
        .output()
        .expect("run edgelock")
}

/// A `run` inside a `run` of the same name re-enters through
/// EDGELOCK_LOCK_HANDLE (no self-deadlock), sees the outer token, gives its
/// hold back (the outer still holds), and the lock is free afterwards; on
/// etcd, on one Redis node and on Redlock (three nodes).
#[test]
fn a_nested_run_of_the_same_name_reenters() {
    let script = r#"
        echo "outer=$EDGELOCK_FENCING_TOKEN"
        test -n "$EDGELOCK_LOCK_HANDLE" || exit 3
        "$EL" run "$FLAG" "$URL" nest -- sh -c 'echo "inner=$EDGELOCK_FENCING_TOKEN"' || exit 4
        # The inner hold is given back; the outer one still holds.
        env -u EDGELOCK_LOCK_HANDLE "$EL" run "$FLAG" "$URL" --try nest -- true
        echo "other-client=$?"
        # A handle of another name is ignored: a normal acquire.
        "$EL" run "$FLAG" "$URL" --try other -- true || exit 5
    "#;
    let etcd = Etcd::start();
    let redis = RedisServer::start().expect("redis-server");
    let webdis = Webdis::start(&redis).expect("webdis");
    let one_node = format!("webdis+{}", webdis.url());
    let more: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start().expect("redis-server"))
        .collect();
    let more_webdis: Vec<Webdis> = more
        .iter()
        .map(|r| Webdis::start(r).expect("webdis"))
        .collect();
    let redlock = more_webdis
        .iter()
        .map(|w| format!("webdis+{}", w.url()))
        .collect::<Vec<_>>()
        .join(",");
    for (flag, url) in [
        ("--etcd", etcd.url()),
        ("--redis", one_node),
        ("--redis", redlock),
    ] {
        let out = nested(flag, &url, script, &[]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{flag}: {stdout}\n{stderr}");
        let token = stdout
            .lines()
            .find_map(|l| l.strip_prefix("outer="))
            .expect("outer token")
            .to_string();
        assert!(
            stdout.contains(&format!("inner={token}\n")),
            "the child saw the outer token: {stdout}"
        );
        assert!(
            stderr.contains(&format!("edgelock: re-entered nest token={token}")),
            "{stderr}"
        );
        assert!(stdout.contains("other-client=73"), "{stdout}\n{stderr}");
        // The credential is never printed.
        assert!(
            !stderr.contains("owner") && !stdout.contains("owner"),
            "{stderr}"
        );
        // Every hold ended: the lock is free.
        let out = output(&["run", flag, &url, "--try", "nest", "--", "true"]);
        assert_eq!(out.status.code(), Some(0), "{flag}: {}", text(&out.stderr));
    }
    assert!(etcd
        .call(
            "/v3/kv/range",
            &serde_json::json!({ "key": base64::engine::general_purpose::STANDARD.encode("edgelock/nest%holds") })
                .to_string()
        )
        .is_some_and(|v| v["kvs"].as_array().map_or(true, |a| a.is_empty())));
}

/// `--zookeeper CONNECT` against a real ZooKeeper (Debian's 3.8, tickTime
/// 200: sessions of at most 4 s): runs exclude each other with rising
/// tokens, `--try` / `--wait` / `status`, a Curator holder of the same path
/// (under `--zk-root`) excludes a run, a killed holder's session expires
/// after `--ttl`, and `--zk-digest` takes its password from the
/// environment only, never repeating it.
#[test]
fn zookeeper_runs_exclude_each_other_and_curator() {
    let zk = ZooKeeperServer::start().expect("zookeeper starts (apt install zookeeper)");
    let connect = zk.connect_string();
    assert_runs_never_overlap(&["--zookeeper", &connect, "--ttl", "4000"], &[]);

    let (mut holder, token) = spawn_holder(&[
        "run",
        "--zookeeper",
        &connect,
        "--ttl",
        "2000",
        "busy",
        "--",
        "sleep",
        "60",
    ]);
    assert!(token > 0);
    let out = output(&[
        "run",
        "--zookeeper",
        &connect,
        "--try",
        "busy",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(73), "{}", text(&out.stderr));
    let out = output(&[
        "run",
        "--zookeeper",
        &connect,
        "--wait",
        "300",
        "busy",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(74), "{}", text(&out.stderr));
    let out = output(&["status", "--zookeeper", &connect, "--json", "busy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["fencingToken"], token.to_string(), "{status}");
    // SIGKILL: no release; the session (2 s asked) expires on the server.
    let _ = holder.kill();
    let _ = holder.wait();
    let t = Instant::now();
    let out = output(&[
        "run",
        "--zookeeper",
        &connect,
        "--wait",
        "20000",
        "busy",
        "--",
        "sh",
        "-c",
        "echo $EDGELOCK_FENCING_TOKEN",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let next: u64 = text(&out.stdout).trim().parse().expect("token");
    assert!(next > token, "tokens rise: {token} then {next}");
    assert!(t.elapsed() < Duration::from_secs(20));

    // Curator's InterProcessMutex on /jobs/nightly is edgelock's `nightly`
    // under --zk-root /jobs.
    let mut curator = CuratorPeer::start(&connect).expect("curator peer");
    let held = curator
        .mutex_acquire("/jobs/nightly", 5_000)
        .expect("curator acquire");
    assert!(held.is_some());
    let zk_root = ["--zookeeper", &connect, "--zk-root", "/jobs"];
    let out = output(&[&["run"][..], &zk_root, &["--try", "nightly", "--", "true"]].concat());
    assert_eq!(out.status.code(), Some(73), "{}", text(&out.stderr));
    curator
        .mutex_release("/jobs/nightly")
        .expect("curator release");
    let out = output(&[&["run"][..], &zk_root, &["--try", "nightly", "--", "true"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    curator.close().expect("curator close");

    let digest = [
        "run",
        "--zookeeper",
        &connect,
        "--zk-digest",
        "locker",
        "--try",
        "d",
        "--",
        "true",
    ];
    let out = edgelock(&digest)
        .env("EDGELOCK_ZK_PASSWORD", "zk-s3cret-pw")
        .output()
        .expect("run edgelock");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = edgelock(&digest)
        .env_remove("EDGELOCK_ZK_PASSWORD")
        .output()
        .expect("run edgelock");
    assert_eq!(out.status.code(), Some(64));
    assert!(
        text(&out.stderr).contains("--zk-digest needs the password in $EDGELOCK_ZK_PASSWORD"),
        "{}",
        text(&out.stderr)
    );
    // A bad connection string is refused before any request, the
    // password in the environment never repeated.
    let out = edgelock(&[
        "run",
        "--zookeeper",
        "h:1/bad/",
        "--zk-digest",
        "locker",
        "n",
        "--",
        "true",
    ])
    .env("EDGELOCK_ZK_PASSWORD", "zk-s3cret-pw")
    .output()
    .expect("run edgelock");
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("zk-s3cret-pw"));
    let out = output(&[
        "run",
        "--zookeeper",
        &connect,
        "--prefix",
        "p",
        "n",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--zk-root"),
        "{}",
        text(&out.stderr)
    );
}
