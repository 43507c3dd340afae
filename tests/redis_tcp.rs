//! The Redis lock and Redlock over the Redis protocol itself (`redis://`,
//! `rediss://`): real redis-server processes started by each test on free
//! loopback ports (plain, with a password, with an ACL user, on redis'
//! own TLS port), reached by the native client's byte streams.
#![cfg(feature = "native")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode, RedlockConfig, RedlockMachine};
use edgelock::core::*;
use edgelock::internals::redis::keys::lock_key;
use edgelock::native::{AsyncClient, Client, ClientOptions, OsEntropy, TlsConfig};
use edgelock_devtools::{free_port, RedisOptions, RedisServer, TestPki};

fn url(redis: &RedisServer) -> String {
    format!("redis://127.0.0.1:{}", redis.port())
}

fn single(node: RedisNode) -> Client {
    let mut cfg = RedisConfig::new(node);
    cfg.ttl_ms = 5_000;
    cfg.retry_delay_ms = 20;
    cfg.retry_jitter_ms = 10;
    Client::from_machine(Box::new(
        RedisMachine::new(cfg, Box::new(OsEntropy)).expect("config"),
    ))
}

fn tcp(url: &str) -> RedisNode {
    RedisNode::resp(url, None).expect("redis:// URL")
}

fn exists(redis: &RedisServer, key: &str) -> bool {
    redis
        .redis_command(&[b"EXISTS", key.as_bytes()])
        .expect("EXISTS")
        .as_int()
        == Some(1)
}

#[test]
fn exclusive_lock_over_tcp_holds_excludes_and_hands_on_with_higher_tokens() {
    let redis = RedisServer::start().unwrap();
    let a = single(tcp(&url(&redis)));
    let b = single(tcp(&url(&redis)));
    let first = a.acquire("job", None).expect("acquire");
    assert!(exists(&redis, &lock_key("edgelock", "job")));
    assert!(b.try_acquire("job").expect("try").is_none());
    let status = b.inspect("job").expect("inspect");
    assert!(status.held, "{status:?}");
    let first_token = first.fencing_token();
    assert!(first.release().expect("release"));
    assert!(!exists(&redis, &lock_key("edgelock", "job")));
    let second = b
        .acquire("job", Some(Duration::from_secs(5)))
        .expect("acquire");
    assert!(second.fencing_token() > first_token);
    second.extend(Some(Duration::from_secs(8))).expect("extend");
    assert!(second.release().expect("release"));
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn contending_clients_over_tcp_never_overlap_and_tokens_rise() {
    let redis = RedisServer::start().unwrap();
    let url = url(&redis);
    let inside = Arc::new(AtomicU64::new(0));
    let last_token = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (url, inside, last_token) = (url.clone(), inside.clone(), last_token.clone());
            thread::spawn(move || {
                let c = single(tcp(&url));
                for _ in 0..15 {
                    let lock = c
                        .acquire("counter", Some(Duration::from_secs(30)))
                        .expect("acquire");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    let t = lock.fencing_token();
                    assert!(
                        last_token.fetch_max(t, Ordering::SeqCst) < t,
                        "token {t} not rising"
                    );
                    thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(lock.release().expect("release"));
                }
                c.close().unwrap();
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    assert_eq!(last_token.load(Ordering::SeqCst), 60);
}

#[test]
fn semaphore_read_write_and_reentry_over_tcp() {
    let redis = RedisServer::start().unwrap();
    let c = single(tcp(&url(&redis)));
    let permit = |c: &Client| {
        c.try_acquire_kind("pool", LockKind::Permits { limit: 2 })
            .expect("permit")
    };
    let (p1, p2) = (permit(&c).expect("1st"), permit(&c).expect("2nd"));
    assert!(permit(&c).is_none(), "a third permit of 2");
    assert_ne!(p1.slot(), p2.slot());
    assert!(p1.release().unwrap() && p2.release().unwrap());
    let r1 = c
        .try_acquire_kind("doc", LockKind::Shared)
        .unwrap()
        .expect("reader");
    let r2 = c
        .try_acquire_kind("doc", LockKind::Shared)
        .unwrap()
        .expect("reader");
    assert!(
        c.try_acquire("doc").unwrap().is_none(),
        "a writer beside readers"
    );
    assert!(r1.release().unwrap() && r2.release().unwrap());
    let w = c.acquire("doc", None).expect("writer");
    assert!(w.release().unwrap());
    c.close().unwrap();
}

#[test]
fn password_acl_user_and_database_are_used_and_never_shown() {
    let redis = RedisServer::start().unwrap();
    // The password is set after the start (the devtools readiness check
    // pings without one); an ACL user beside it.
    let cmd = |args: &[&str]| {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        redis.redis_command(&args).expect("command")
    };
    // Database 3: the lock's key is there, not in database 0.
    let db3 = single(tcp(&format!("{}/3", url(&redis))));
    let held = db3.acquire("in-db3", None).expect("acquire in db 3");
    let key = lock_key("edgelock", "in-db3");
    assert!(!exists(&redis, &key), "the key landed in database 0");
    let in_db3 = cmd(&[
        "EVAL",
        "redis.call('SELECT', 3) return redis.call('EXISTS', KEYS[1])",
        "1",
        &key,
    ]);
    assert_eq!(in_db3.as_int(), Some(1));
    assert!(held.release().unwrap());
    db3.close().unwrap();
    cmd(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        ">locker-pw-123",
        "~*",
        "&*",
        "+@all",
    ]);
    cmd(&["CONFIG", "SET", "requirepass", "default-pw-456"]);
    let port = redis.port();
    let by_password = single(tcp(&format!("redis://:default-pw-456@127.0.0.1:{port}/3")));
    let lock = by_password
        .acquire("db3", None)
        .expect("acquire with the password");
    assert!(lock.release().unwrap());
    let by_user = single(tcp(&format!(
        "redis://locker:locker-pw-123@127.0.0.1:{port}"
    )));
    let lock = by_user
        .acquire("user", None)
        .expect("acquire as the ACL user");
    assert!(lock.release().unwrap());
    let wrong = single(tcp(&format!(
        "redis://locker:wrong-pw-789@127.0.0.1:{port}"
    )));
    let e = wrong
        .acquire("x", Some(Duration::from_secs(1)))
        .unwrap_err();
    let text = format!("{e} {e:?}");
    assert!(!text.contains("wrong-pw-789"), "{text}");
    assert!(
        text.contains("WRONGPASS") || text.contains("AUTH"),
        "{text}"
    );
    // The server answered and refused us: BACKEND, as an Upstash 401.
    assert_eq!(e.code(), "BACKEND", "{text}");
    assert!(text.contains("refused authentication"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    eprintln!("wrong password: {text}");
    for c in [by_password, by_user, wrong] {
        c.close().unwrap();
    }
}

#[test]
fn a_restarted_server_is_reconnected_to() {
    let mut redis = RedisServer::start().unwrap();
    let c = single(tcp(&url(&redis)));
    let lock = c.acquire("a", None).expect("acquire");
    assert!(lock.release().unwrap());
    redis.kill();
    let e = c
        .acquire("b", Some(Duration::from_millis(300)))
        .unwrap_err();
    assert!(matches!(e.code(), "TRANSPORT" | "TIMEOUT"), "{e}");
    redis.restart().expect("restart");
    let deadline = Instant::now() + Duration::from_secs(10);
    let lock = loop {
        match c.acquire("b", Some(Duration::from_secs(2))) {
            Ok(lock) => break lock,
            Err(e) if Instant::now() < deadline => eprintln!("retrying after: {e}"),
            Err(e) => panic!("no reconnect: {e}"),
        }
    };
    assert!(lock.release().unwrap());
    c.close().unwrap();
}

#[test]
fn redlock_over_three_tcp_nodes_and_mixed_with_tls() {
    let pki = TestPki::generate().unwrap();
    let tls_port = free_port().unwrap();
    let p = |f: std::path::PathBuf| f.to_string_lossy().into_owned();
    let tls_args = vec![
        "--tls-port".to_string(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        p(pki.server_cert()),
        "--tls-key-file".into(),
        p(pki.server_key()),
        "--tls-ca-cert-file".into(),
        p(pki.ca_cert()),
        "--tls-auth-clients".into(),
        "no".into(),
    ];
    let servers = [
        RedisServer::start().unwrap(),
        RedisServer::start().unwrap(),
        RedisServer::start_with(RedisOptions {
            extra_args: tls_args,
            ..RedisOptions::default()
        })
        .unwrap(),
    ];
    let nodes = vec![
        tcp(&url(&servers[0])),
        tcp(&url(&servers[1])),
        tcp(&format!("rediss://127.0.0.1:{tls_port}")),
    ];
    let mut cfg = RedlockConfig::new(nodes);
    cfg.ttl_ms = 5_000;
    let options = ClientOptions::new().with_tls(TlsConfig::new().with_ca_file(pki.ca_cert()));
    let client =
        Client::connect_with(BackendSpec::Redlock(cfg.clone()), &options).expect("connect");
    let other = Client::connect_with(BackendSpec::Redlock(cfg), &options).expect("connect");
    let first = client.acquire("rl", None).expect("acquire");
    let held = servers
        .iter()
        .filter(|s| exists(s, &lock_key("edgelock", "rl")))
        .count();
    assert!(held >= 2, "held on {held} nodes");
    assert!(other.try_acquire("rl").unwrap().is_none());
    let first_token = first.fencing_token();
    assert!(first.release().unwrap());
    let second = other
        .acquire("rl", Some(Duration::from_secs(5)))
        .expect("acquire");
    assert!(second.fencing_token() > first_token);
    assert!(second.release().unwrap());
    client.close().unwrap();
    other.close().unwrap();
    let _ = RedlockMachine::new(
        RedlockConfig::new(vec![tcp("redis://h")]),
        Box::new(OsEntropy),
    );
}

#[test]
fn the_async_client_over_tcp() {
    let redis = RedisServer::start().unwrap();
    let spec = BackendSpec::Redis(RedisConfig::new(tcp(&url(&redis))));
    let client = AsyncClient::connect(spec).expect("connect");
    let token = smol::block_on(async {
        let lock = client.acquire("async", None).await.expect("acquire");
        let t = lock.fencing_token();
        assert!(lock.release().await.expect("release"));
        t
    });
    assert_eq!(token, 1);
}

#[test]
fn waiters_share_one_subscriber_connection_and_a_release_wakes_them() {
    use edgelock::internals::redis::subscription::wake_channel;
    let redis = RedisServer::start().unwrap();
    let holder = single(tcp(&url(&redis)));
    let mut cfg = RedisConfig::new(tcp(&url(&redis)));
    // Waiters poll rarely; what is checked is that they subscribe, on one
    // shared connection, and are granted after the releases.
    (cfg.ttl_ms, cfg.retry_delay_ms, cfg.retry_jitter_ms) = (60_000, 60_000, 0);
    let waiters = Arc::new(Client::from_machine(Box::new(
        RedisMachine::new(cfg, Box::new(OsEntropy)).unwrap(),
    )));
    let names = ["w1", "w2", "w3"];
    let held: Vec<_> = names
        .iter()
        .map(|n| holder.acquire(n, None).expect("hold"))
        .collect();
    let waiting: Vec<_> = names
        .iter()
        .map(|n| {
            let (c, n) = (waiters.clone(), n.to_string());
            thread::spawn(move || {
                let t = Instant::now();
                let lock = c.acquire(&n, Some(Duration::from_secs(50))).expect("woken");
                let waited = t.elapsed();
                assert!(lock.release().unwrap());
                waited
            })
        })
        .collect();
    // Every waiter subscribed, on one connection of the waiting client.
    let numsub = |channel: &str| {
        let v = redis
            .redis_command(&[b"PUBSUB", b"NUMSUB", channel.as_bytes()])
            .expect("NUMSUB");
        format!("{v:?}")
    };
    let channels: Vec<String> = names
        .iter()
        .map(|n| wake_channel(&lock_key("edgelock", n)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while channels.iter().any(|c| !numsub(c).contains("Integer(1)")) {
        assert!(
            Instant::now() < deadline,
            "waiters never subscribed: {}",
            numsub(&channels[0])
        );
        thread::sleep(Duration::from_millis(20));
    }
    let clients = redis
        .redis_command(&[b"CLIENT", b"LIST"])
        .expect("CLIENT LIST");
    let list = String::from_utf8_lossy(clients.as_bytes().unwrap()).into_owned();
    let subscribers = list
        .lines()
        .filter(|l| l.contains("name=edgelock") && l.contains(" sub=3"))
        .count();
    assert_eq!(
        subscribers, 1,
        "one subscriber connection for three waiters:\n{list}"
    );
    let started = Instant::now();
    for lock in held {
        assert!(lock.release().unwrap());
    }
    for w in waiting {
        let waited = w.join().expect("waiter");
        assert!(waited < Duration::from_secs(50));
    }
    eprintln!(
        "three waiters granted {:?} after the releases",
        started.elapsed()
    );
}

#[test]
fn with_no_subscriptions_allowed_waiters_poll_and_open_no_second_connection() {
    let redis = RedisServer::start().unwrap();
    let holder = single(tcp(&url(&redis)));
    let mut cfg = RedisConfig::new(tcp(&url(&redis)));
    // A Worker's cap on Redlock: every connection counts.
    (
        cfg.max_subscriptions,
        cfg.retry_delay_ms,
        cfg.retry_jitter_ms,
    ) = (0, 50, 10);
    let waiter = Client::from_machine(Box::new(
        RedisMachine::new(cfg, Box::new(OsEntropy)).unwrap(),
    ));
    let held = holder.acquire("polled", None).unwrap();
    let t = thread::spawn(move || {
        let lock = waiter
            .acquire("polled", Some(Duration::from_secs(30)))
            .expect("polled");
        assert!(lock.release().unwrap());
        waiter.close().unwrap();
    });
    let client_list = || {
        let clients = redis
            .redis_command(&[b"CLIENT", b"LIST"])
            .expect("CLIENT LIST");
        String::from_utf8_lossy(clients.as_bytes().unwrap()).into_owned()
    };
    let ours = |list: &str| list.lines().filter(|l| l.contains("name=edgelock")).count();
    // Until the waiter has connected (and attempted at least once).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut list = client_list();
    while ours(&list) < 2 {
        assert!(
            Instant::now() < deadline,
            "the waiter never connected:\n{list}"
        );
        thread::sleep(Duration::from_millis(20));
        list = client_list();
    }
    assert_eq!(
        ours(&list),
        2,
        "the holder's and the waiter's command connections only:\n{list}"
    );
    assert!(
        !list
            .lines()
            .any(|l| l.contains("name=edgelock") && !l.contains(" sub=0")),
        "{list}"
    );
    assert!(held.release().unwrap());
    t.join().expect("waiter");
}

/// No starved waiter (bounded bypass): while a waiter heads the queue, the
/// free lock goes to others at most `MAX_BYPASS` times before only the
/// waiter may take it. The others here are raw runs of the acquire script,
/// each grant freed by a plain `DEL` (which wakes nobody), so that the
/// waiter, asleep until its fallback timer, cannot take part in the race:
/// without the bound every run would be granted.
#[test]
fn a_queued_waiter_is_bypassed_at_most_max_bypass_times() {
    use edgelock::internals::redis::keys::fence_key;
    use edgelock::internals::redis::scripts::{self, MAX_BYPASS};
    let redis = RedisServer::start().unwrap();
    let (holder, waiter) = (single(tcp(&url(&redis))), single(tcp(&url(&redis))));
    let held = holder.acquire("bypass", None).expect("acquire");
    let first = held.fencing_token();
    let waiting = thread::spawn(move || {
        let l = waiter
            .acquire("bypass", Some(Duration::from_secs(60)))
            .expect("the waiter is granted");
        (l.fencing_token(), l, waiter)
    });
    let key = lock_key("edgelock", "bypass");
    let queue = format!("{key}:queue");
    let deadline = Instant::now() + Duration::from_secs(60);
    while redis
        .redis_command(&[b"LLEN", queue.as_bytes()])
        .expect("LLEN")
        .as_int()
        != Some(1)
    {
        assert!(Instant::now() < deadline, "the waiter never queued");
        thread::sleep(Duration::from_millis(5));
    }
    // The holder's key vanishes without a release message.
    redis.redis_command(&[b"DEL", key.as_bytes()]).expect("DEL");
    let fence = fence_key(&key);
    let mut bypasses = 0;
    for i in 0..10 {
        let token = format!("barger-{i}");
        let cmd = scripts::acquire(&key, &fence, &token, 10_000, false, 0, MAX_BYPASS);
        let args: Vec<&[u8]> = cmd.args.iter().map(Vec::as_slice).collect();
        redis.redis_command(&args).expect("EVAL");
        if redis
            .redis_command(&[b"GET", key.as_bytes()])
            .expect("GET")
            .as_bytes()
            == Some(token.as_bytes())
        {
            bypasses += 1;
            redis.redis_command(&[b"DEL", key.as_bytes()]).expect("DEL");
        }
    }
    assert!(bypasses <= MAX_BYPASS, "bypassed {bypasses} times");
    // The waiter (woken by its fallback timer) gets it, with the next token.
    let (token, l, _waiter) = waiting.join().unwrap();
    assert_eq!(
        token,
        first + 1 + u64::from(bypasses),
        "only the bypasses came between"
    );
    assert!(l.release().expect("release"));
    drop(held);
    // With the queue empty again, a try on the free lock succeeds at once.
    let other = single(tcp(&url(&redis)));
    assert!(other.try_acquire("bypass").expect("try").is_some());
}
