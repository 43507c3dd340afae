//! Real etcd / redis-server / webdis processes: start, pause, kill, restart,
//! cleanup.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use edgelock_devtools::{
    http_request, Env, EtcdCluster, EtcdOptions, EtcdServer, RedisOptions, RedisServer, RespConn,
    RespValue, Webdis,
};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(10);

fn pid_alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; look at its state.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(") ").next().and_then(|r| r.chars().next()) != Some('Z'))
        .unwrap_or(false)
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(25));
    }
    f()
}

#[test]
fn redis_commands_pause_restart_kill_and_cleanup() {
    let mut redis = RedisServer::start().unwrap();
    let dir = redis.dir().to_path_buf();
    let pid = redis.pid().unwrap();
    assert_eq!(
        redis.redis_command(&[b"SET", b"k", b"v\x00"]).unwrap(),
        RespValue::Simple("OK".into())
    );
    assert_eq!(
        redis.redis_command(&[b"GET", b"k"]).unwrap(),
        RespValue::Bulk(b"v\x00".to_vec())
    );
    assert_eq!(redis.all_keys().unwrap(), vec![b"k".to_vec()]);
    redis.pause().unwrap();
    let mut c = RespConn::connect(redis.addr(), Duration::from_millis(300)).unwrap();
    assert!(
        c.command(&["PING"]).is_err(),
        "paused redis must not answer"
    );
    redis.resume().unwrap();
    assert_eq!(
        redis.redis_command(&[b"PING"]).unwrap(),
        RespValue::Simple("PONG".into())
    );
    let port = redis.port();
    redis.restart().unwrap();
    assert_eq!(redis.port(), port);
    assert_ne!(redis.pid().unwrap(), pid);
    assert_eq!(
        redis.redis_command(&[b"GET", b"k"]).unwrap(),
        RespValue::Nil,
        "no persistence"
    );
    redis.kill();
    assert!(RespConn::connect(redis.addr(), Duration::from_millis(300)).is_err());
    drop(redis);
    assert!(!dir.exists(), "temp dir removed on drop");
}

#[test]
fn redis_under_faketime() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let redis = RedisServer::start_with(RedisOptions {
        faketime: Some("+3600s".into()),
        ..Default::default()
    })
    .unwrap();
    let time = |r: &RedisServer| -> i64 {
        let v = r.redis_command(&[b"TIME"]).unwrap();
        v.as_array().unwrap()[0].as_text().unwrap().parse().unwrap()
    };
    let t = time(&redis);
    assert!(
        (t - now - 3600).abs() < 30,
        "clock one hour ahead: {t} vs {now}"
    );
    redis.set_faketime("-3600s").unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || (time(&redis) - now + 3600).abs()
            < 30),
        "clock moved back"
    );
    // Expiry follows the fake clock: a key with PX 1500 still expires.
    redis
        .redis_command(&[b"SET", b"e", b"1", b"PX", b"1500"])
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || redis
        .redis_command(&[b"EXISTS", b"e"])
        .unwrap()
        == RespValue::Integer(0)));
    assert!(RedisServer::start().unwrap().set_faketime("+1s").is_err());
}

fn etcd_put_get(url: &str) -> Value {
    let r = http_request(
        "POST",
        &format!("{url}/v3/kv/put"),
        &[],
        br#"{"key":"Zm9v","value":"YmFy"}"#,
        T,
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let r = http_request(
        "POST",
        &format!("{url}/v3/kv/range"),
        &[],
        br#"{"key":"Zm9v"}"#,
        T,
    )
    .unwrap();
    r.json().unwrap()
}

#[test]
fn etcd_single_member_with_cors_pause_and_cleanup() {
    let etcd = EtcdServer::start().unwrap();
    let dir = etcd.data_dir();
    let v = etcd_put_get(&etcd.url());
    assert_eq!(v["kvs"][0]["value"], json!("YmFy"));
    let r = http_request(
        "POST",
        &format!("{}/v3/kv/range", etcd.url()),
        &[("Origin", "http://localhost:9999")],
        br#"{"key":"Zm9v"}"#,
        T,
    )
    .unwrap();
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("*"),
        "CORS on by default"
    );
    let r = http_request(
        "OPTIONS",
        &format!("{}/v3/kv/range", etcd.url()),
        &[
            ("Origin", "http://localhost:9999"),
            ("Access-Control-Request-Method", "POST"),
        ],
        b"",
        T,
    )
    .unwrap();
    assert_eq!(
        (r.status, r.header("access-control-allow-origin")),
        (200, Some("*"))
    );
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("accept, content-type, authorization")
    );
    let st = etcd.status(T).unwrap();
    assert_eq!(st.member_id, st.leader, "a single member leads");
    etcd.pause().unwrap();
    let r = http_request(
        "POST",
        &format!("{}/v3/kv/range", etcd.url()),
        &[],
        br#"{"key":"Zm9v"}"#,
        Duration::from_millis(300),
    );
    assert!(r.is_err(), "paused etcd must not answer");
    etcd.resume().unwrap();
    assert_eq!(etcd_put_get(&etcd.url())["kvs"][0]["value"], json!("YmFy"));
    assert!(dir.exists());
    drop(etcd);
    assert!(!dir.exists());

    let etcd = EtcdServer::start_with(EtcdOptions {
        cors: false,
        ..Default::default()
    })
    .unwrap();
    let r = http_request(
        "POST",
        &format!("{}/v3/kv/range", etcd.url()),
        &[("Origin", "http://x")],
        br#"{"key":"Zm9v"}"#,
        T,
    )
    .unwrap();
    assert_eq!(r.header("access-control-allow-origin"), None);
}

#[test]
fn etcd_cluster_of_three_elects_a_new_leader() {
    let opts = EtcdOptions {
        lease_checkpoint: true,
        ..Default::default()
    };
    let mut cluster = EtcdCluster::start_with(3, opts).unwrap();
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    let mut ports: Vec<u16> = cluster
        .members()
        .iter()
        .flat_map(|m| [m.client_port(), m.peer_port()])
        .collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 6);
    let leader = cluster.wait_for_leader(T).unwrap();
    let args = std::fs::read_to_string(format!(
        "/proc/{}/cmdline",
        cluster.member(0).unwrap().pid().unwrap()
    ))
    .unwrap();
    assert!(args.contains("--experimental-enable-lease-checkpoint=true"));
    assert_eq!(
        etcd_put_get(&urls[(leader + 1) % 3])["kvs"][0]["value"],
        json!("YmFy")
    );
    cluster.member_mut(leader).unwrap().kill();
    let new_leader = {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match cluster.leader() {
                Some(l) if l != leader => break l,
                _ if Instant::now() > deadline => panic!("no new leader"),
                _ => thread::sleep(Duration::from_millis(100)),
            }
        }
    };
    assert_eq!(
        etcd_put_get(&urls[new_leader])["kvs"][0]["value"],
        json!("YmFy")
    );
    // The killed member rejoins with its data dir.
    let m = cluster.member_mut(leader).unwrap();
    m.restart().unwrap();
    m.wait_ready(Duration::from_secs(15)).unwrap();
    let r = http_request(
        "POST",
        &format!("{}/v3/kv/range", urls[leader]),
        &[],
        br#"{"key":"Zm9v"}"#,
        T,
    )
    .unwrap();
    assert_eq!(r.json().unwrap()["kvs"][0]["value"], json!("YmFy"));
}

#[test]
fn webdis_in_front_of_redis() {
    let mut redis = RedisServer::start().unwrap();
    let webdis = Webdis::start(&redis).unwrap();
    let cfg: Value = serde_json::from_slice(&std::fs::read(webdis.config_path()).unwrap()).unwrap();
    assert_eq!(cfg["redis_port"], json!(redis.port()));
    assert_eq!(cfg["daemonize"], json!(false));
    let get =
        |path: &str| http_request("GET", &format!("{}{path}", webdis.url()), &[], b"", T).unwrap();
    assert_eq!(
        get("/SET/k%2Fx/v").json().unwrap(),
        json!({"SET": [true, "OK"]})
    );
    assert_eq!(
        redis.redis_command(&[b"GET", b"k/x"]).unwrap(),
        RespValue::Bulk(b"v".to_vec())
    );
    assert_eq!(
        get("/EVAL/return%20ARGV%5B1%5D/0/hi").json().unwrap(),
        json!({"EVAL": "hi"})
    );
    assert_eq!(get("/MULTI").status, 403, "webdis refuses transactions");
    let r = http_request(
        "OPTIONS",
        &format!("{}/GET/k", webdis.url()),
        &[
            ("Origin", "http://x"),
            ("Access-Control-Request-Method", "GET"),
        ],
        b"",
        T,
    )
    .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("X-Requested-With, Content-Type, Authorization")
    );
    assert_eq!(
        get("/GET/k%2Fx").header("access-control-allow-origin"),
        Some("*")
    );
    redis.kill();
    assert_eq!(get("/GET/k%2Fx").status, 503);
    redis.restart().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || get("/PING").status == 200),
        "webdis reconnects after a redis restart"
    );
}

#[test]
fn env_builder_starts_everything() {
    let env = Env::builder()
        .etcd(1)
        .redis(2)
        .webdis(true)
        .gateway(true)
        .token("tok")
        .start()
        .unwrap();
    let d = env.describe();
    assert_eq!(d["redis"].as_array().unwrap().len(), 2);
    assert_eq!(d["webdis_urls"].as_array().unwrap().len(), 2);
    assert_eq!(d["gateway_urls"].as_array().unwrap().len(), 2);
    assert_eq!(d["etcd_urls"].as_array().unwrap().len(), 1);
    assert!(!d.to_string().contains("tok\""));
    etcd_put_get(&env.etcd_urls()[0]);
    for (i, url) in env.gateway_urls().iter().enumerate() {
        let key = format!("node{i}");
        let body = json!(["SET", key, i]).to_string();
        let r = http_request(
            "POST",
            &format!("{url}/"),
            &[("Authorization", "Bearer tok")],
            body.as_bytes(),
            T,
        )
        .unwrap();
        assert_eq!(r.json().unwrap(), json!({"result": "OK"}));
        // The matching webdis fronts the same redis.
        let w = http_request(
            "GET",
            &format!("{}/GET/{key}", env.webdis_urls()[i]),
            &[],
            b"",
            T,
        )
        .unwrap();
        assert_eq!(w.json().unwrap(), json!({ "GET": i.to_string() }));
        assert_eq!(env.redis[i].all_keys().unwrap(), vec![key.into_bytes()]);
    }
    assert!(Env::builder().gateway(true).start().is_err());
}

fn testenv_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_testenv"))
}

fn temp_dir_of(pid: u32) -> PathBuf {
    // redis runs with --dir <its temp dir>; its cwd is that dir.
    std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default()
}

fn spawn_testenv(args: &[&str]) -> (std::process::Child, Value) {
    let mut child = Command::new(testenv_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, serde_json::from_str(&line).unwrap())
}

#[test]
fn testenv_prints_json_and_stops_on_stdin_close_and_sigterm() {
    let (mut child, v) = spawn_testenv(&["--redis", "1", "--gateway", "--token", "secret-tok"]);
    assert!(v.get("token").is_none(), "a given token is not printed");
    let redis_pid = v["redis"][0]["pid"].as_u64().unwrap() as u32;
    let dir = temp_dir_of(redis_pid);
    assert!(
        dir.to_string_lossy().contains("edgelock-devtools-redis"),
        "{dir:?}"
    );
    let url = v["gateway_urls"][0].as_str().unwrap();
    let r = http_request(
        "POST",
        &format!("{url}/"),
        &[("Authorization", "Bearer secret-tok")],
        br#"["PING"]"#,
        T,
    )
    .unwrap();
    assert_eq!(r.json().unwrap(), json!({"result": "PONG"}));
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success());
    assert!(!pid_alive(redis_pid));
    assert!(!dir.exists());

    let (mut child, v) = spawn_testenv(&["--redis", "1", "--gateway"]);
    let token = v["token"].as_str().unwrap().to_string();
    assert_eq!(token.len(), 32, "generated token printed");
    let url = v["gateway_urls"][0].as_str().unwrap();
    let auth = format!("Bearer {token}");
    let r = http_request(
        "POST",
        &format!("{url}/"),
        &[("Authorization", &auth)],
        br#"["PING"]"#,
        T,
    )
    .unwrap();
    assert_eq!(r.status, 200);
    let redis_pid = v["redis"][0]["pid"].as_u64().unwrap() as u32;
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(
        child.wait().unwrap().success(),
        "SIGTERM handled: clean exit"
    );
    assert!(!pid_alive(redis_pid));
}

#[test]
fn watchdog_reaps_servers_when_the_owner_is_killed() {
    let (mut child, v) = spawn_testenv(&["--redis", "1", "--webdis"]);
    let redis_pid = v["redis"][0]["pid"].as_u64().unwrap() as u32;
    let webdis_pid = v["webdis"][0]["pid"].as_u64().unwrap() as u32;
    let dir = temp_dir_of(redis_pid);
    assert!(dir.exists());
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || !pid_alive(redis_pid)
            && !pid_alive(webdis_pid)),
        "servers reaped"
    );
    assert!(
        wait_until(Duration::from_secs(5), || !Path::new(&dir).exists()),
        "temp dir removed"
    );
    let _ = child.stdin.take().map(|mut s| s.write_all(b""));
}
