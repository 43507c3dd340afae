//! The real backends a scenario runs against, each node behind its own
//! fault proxy, plus helpers to see what keys were left behind.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use edgelock_devtools::{
    http_request, zk_four_letter_word, EtcdCluster, EtcdOptions, FaultProxy, RedisOptions,
    RedisServer, UpstashGateway, Webdis, ZooKeeperOptions, ZooKeeperServer,
};
use serde_json::{json, Value};

use crate::backend::BackendSpec;
use crate::history::History;
use crate::resource::ResourceClient;
use crate::workload::{contend, ContenderCfg};

/// The token the Upstash gateways expect.
pub const UPSTASH_TOKEN: &str = "reliability-token";

/// `http://127.0.0.1:1234/` → the socket address (what a fault proxy forwards to).
pub fn addr_of(url: &str) -> io::Result<SocketAddr> {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .map_err(io::Error::other)
}

/// N independent redis-servers (no persistence), each behind webdis and an
/// Upstash gateway, with a fault proxy in front of each webdis
/// ([`RedisNodes::start`]); or reached over TCP only, a fault proxy in front
/// of each server ([`RedisNodes::start_tcp`]).
pub struct RedisNodes {
    pub servers: Vec<RedisServer>,
    pub webdis: Vec<Webdis>,
    pub gateways: Vec<UpstashGateway>,
    /// `proxies[i]` forwards to `webdis[i]`, or (started by
    /// [`RedisNodes::start_tcp`]) to `servers[i]`.
    pub proxies: Vec<FaultProxy>,
}

/// `redis://<addr>` of a fault proxy in front of a redis-server (the Redis
/// protocol through the proxy).
pub fn redis_url(proxy: &FaultProxy) -> String {
    format!("redis://{}", proxy.addr())
}

/// A new fault proxy in front of `server`'s own port (for TCP clients).
pub fn tcp_proxy(server: &RedisServer) -> io::Result<FaultProxy> {
    FaultProxy::start(server.addr().parse().map_err(io::Error::other)?)
}

impl RedisNodes {
    /// `faketime`: start every server under libfaketime (spec "+0"), so that
    /// its clock can be moved later with `servers[i].set_faketime`.
    pub fn start(n: usize, faketime: bool) -> io::Result<RedisNodes> {
        let mut nodes = RedisNodes {
            servers: Vec::new(),
            webdis: Vec::new(),
            gateways: Vec::new(),
            proxies: Vec::new(),
        };
        for _ in 0..n {
            let opts = RedisOptions {
                faketime: faketime.then(|| "+0".to_string()),
                ..RedisOptions::default()
            };
            let server = RedisServer::start_with(opts)?;
            let webdis = Webdis::start(&server)?;
            let gateway = UpstashGateway::start(&server, UPSTASH_TOKEN)?;
            let proxy = FaultProxy::start(addr_of(&webdis.url())?)?;
            nodes.servers.push(server);
            nodes.webdis.push(webdis);
            nodes.gateways.push(gateway);
            nodes.proxies.push(proxy);
        }
        Ok(nodes)
    }

    /// N redis-servers (no persistence) for clients that speak the Redis
    /// protocol over TCP: no webdis nor gateway, `proxies[i]` in front of
    /// `servers[i]` itself. `faketime` as in [`RedisNodes::start`].
    pub fn start_tcp(n: usize, faketime: bool) -> io::Result<RedisNodes> {
        let mut nodes = RedisNodes {
            servers: Vec::new(),
            webdis: Vec::new(),
            gateways: Vec::new(),
            proxies: Vec::new(),
        };
        for _ in 0..n {
            let opts = RedisOptions {
                faketime: faketime.then(|| "+0".to_string()),
                ..RedisOptions::default()
            };
            let server = RedisServer::start_with(opts)?;
            nodes.proxies.push(tcp_proxy(&server)?);
            nodes.servers.push(server);
        }
        Ok(nodes)
    }

    /// `redis://127.0.0.1:<port>` straight to each server (the Redis protocol over TCP).
    pub fn tcp_specs(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// `redis://…` through each node's fault proxy (nodes from
    /// [`RedisNodes::start_tcp`]).
    pub fn proxied_tcp_specs(&self) -> Vec<String> {
        self.proxies.iter().map(redis_url).collect()
    }

    /// The lock keys left, summed over the nodes (`usize::MAX` when one did
    /// not answer): what a variant's "0 lock keys left" check reads.
    pub fn lock_keys_left_total(&self) -> usize {
        self.lock_keys_left()
            .iter()
            .map(|k| k.unwrap_or(usize::MAX))
            .fold(0, usize::saturating_add)
    }

    /// `webdis+http://…` through each node's fault proxy (`redis://…` for
    /// nodes from [`RedisNodes::start_tcp`]).
    pub fn proxied_specs(&self) -> Vec<String> {
        if self.webdis.is_empty() {
            return self.proxied_tcp_specs();
        }
        self.proxies
            .iter()
            .map(|p| format!("webdis+{}", p.url()))
            .collect()
    }

    /// `webdis+http://…` straight to each webdis.
    pub fn webdis_specs(&self) -> Vec<String> {
        self.webdis
            .iter()
            .map(|w| format!("webdis+{}", w.url()))
            .collect()
    }

    /// `upstash+http://…` for each gateway (token [`UPSTASH_TOKEN`]).
    pub fn upstash_specs(&self) -> Vec<String> {
        self.gateways
            .iter()
            .map(|g| format!("upstash+{}", g.url()))
            .collect()
    }

    /// Lock keys (not fence counters, a semaphore's limit record nor an
    /// election's leader record, which are meant to outlive holds) still
    /// present on each node; `None` for a node that did not answer.
    pub fn lock_keys_left(&self) -> Vec<Option<usize>> {
        self.servers
            .iter()
            .map(|s| {
                s.all_keys().ok().map(|keys| {
                    keys.iter()
                        .filter(|k| {
                            !k.ends_with(b":fence")
                                && !k.ends_with(b":limit")
                                && !k.ends_with(b":leader")
                        })
                        .count()
                })
            })
            .collect()
    }

    /// Remaining TTL (ms) of `key` on node `i` (`None`: absent or no answer).
    pub fn pttl(&self, i: usize, key: &str) -> Option<i64> {
        match self
            .servers
            .get(i)?
            .redis_command(&[b"PTTL", key.as_bytes()])
            .ok()?
        {
            edgelock_devtools::RespValue::Integer(ms) if ms >= 0 => Some(ms),
            _ => None,
        }
    }
}

/// A lock's key on a Redis node (`{<prefix>:<name>}`), default prefix.
pub fn redis_lock_key(name: &str) -> String {
    format!("{{edgelock:{name}}}")
}

/// An etcd cluster with a fault proxy in front of each member's client port.
pub struct EtcdNodes {
    pub cluster: EtcdCluster,
    /// `proxies[i]` forwards to member `i`.
    pub proxies: Vec<FaultProxy>,
}

impl EtcdNodes {
    pub fn start(n: usize, opts: EtcdOptions) -> io::Result<EtcdNodes> {
        let cluster = EtcdCluster::start_with(n, opts)?;
        cluster.wait_for_leader(Duration::from_secs(20))?;
        let proxies = cluster
            .urls()
            .iter()
            .map(|u| addr_of(u).and_then(FaultProxy::start))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(EtcdNodes { cluster, proxies })
    }

    pub fn proxied_urls(&self) -> Vec<String> {
        self.proxies.iter().map(|p| p.url()).collect()
    }

    /// Keys under `prefix` (default `edgelock/`), asked of the first member
    /// that answers.
    pub fn keys(&self, prefix: &str) -> io::Result<Vec<String>> {
        let mut last = io::Error::other("no member answered");
        for url in self.cluster.urls() {
            match etcd_keys(&url, prefix) {
                Ok(k) => return Ok(k),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// Keys under `prefix` through etcd's JSON gateway at `url`.
pub fn etcd_keys(url: &str, prefix: &str) -> io::Result<Vec<String>> {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let body = json!({"key": STANDARD.encode(prefix.as_bytes()), "range_end": STANDARD.encode(&end), "keys_only": true}).to_string();
    let r = http_request(
        "POST",
        &format!("{url}/v3/kv/range"),
        &[("content-type", "application/json")],
        body.as_bytes(),
        Duration::from_secs(3),
    )?;
    if r.status != 200 {
        return Err(io::Error::other(format!("etcd range: HTTP {}", r.status)));
    }
    let v: Value = serde_json::from_slice(&r.body).map_err(io::Error::other)?;
    Ok(v.get("kvs")
        .and_then(Value::as_array)
        .map(|kvs| {
            kvs.iter()
                .filter_map(|kv| kv.get("key")?.as_str())
                .filter_map(|k| STANDARD.decode(k).ok())
                .map(|k| String::from_utf8_lossy(&k).into_owned())
                .collect()
        })
        .unwrap_or_default())
}

/// In-process contenders, one client each, on their own threads.
pub struct Crew {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Crew {
    /// Starts one thread per `cfgs` entry; each builds its own client from
    /// `backend` and runs [`contend`] until `duration` passes or [`Crew::stop`].
    pub fn start(
        backend: &BackendSpec,
        cfgs: Vec<ContenderCfg>,
        resource: &ResourceClient,
        history: &History,
        duration: Duration,
    ) -> Crew {
        let stop = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + duration;
        let threads = cfgs
            .into_iter()
            .map(|cfg| {
                let (backend, resource, history, stop) = (
                    backend.clone(),
                    resource.clone(),
                    history.clone(),
                    stop.clone(),
                );
                std::thread::spawn(move || match backend.client() {
                    Ok(client) => {
                        contend(&client, &cfg, &resource, &history, &stop, deadline);
                        let _ = client.close();
                    }
                    Err(e) => eprintln!("contender {}: {e}", cfg.id),
                })
            })
            .collect();
        Crew { stop, threads }
    }

    pub fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits for the loops to reach their deadline (or round limit).
    pub fn join_when_done(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }

    /// Stops the loops (after their current round) and waits for them.
    pub fn join(self) {
        self.stop();
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// `n` contender configs named `<prefix>0..` on `lock`.
pub fn contenders(
    prefix: &str,
    n: usize,
    lock: &str,
    template: &ContenderCfg,
) -> Vec<ContenderCfg> {
    (0..n)
        .map(|i| ContenderCfg {
            id: format!("{prefix}{i}"),
            lock: lock.to_string(),
            ..template.clone()
        })
        .collect()
}

// The Worker in workerd (the lock service, D1): shared with the Rust tests.
pub use edgelock_devtools::workerd::{WorkerdHost, WORKER_TOKEN};

/// A standalone ZooKeeper for a scenario: tickTime 200 ms (sessions of
/// 400 ms … 4 s) and the `dump` four-letter word allowed, so that
/// [`zk_ephemerals`] can count the lock nodes left behind.
pub fn zookeeper_server() -> io::Result<ZooKeeperServer> {
    ZooKeeperServer::start_with(ZooKeeperOptions {
        config: vec![("4lw.commands.whitelist".into(), "srvr,dump".into())],
        ..ZooKeeperOptions::default()
    })
}

/// The ephemeral nodes ZooKeeper at `addr` still holds (every session's,
/// from `dump`): a lock node left by a client that stopped. Containers are
/// not ephemeral and do not count (the server removes them when empty).
pub fn zk_ephemerals(addr: &str) -> io::Result<Vec<String>> {
    let dump = zk_four_letter_word(addr, "dump", Duration::from_secs(5))?;
    if !dump.contains("ephemeral nodes dump") {
        return Err(io::Error::other(format!("unexpected dump: {dump}")));
    }
    Ok(dump
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('/'))
        .map(str::to_string)
        .collect())
}

/// [`zk_ephemerals`]'s count, `usize::MAX` when it cannot be told; waits up
/// to 2 s for closed sessions' nodes to go (closeSession is answered before
/// the last client's process exits, but a killed one's session must expire).
pub fn zk_nodes_left(addr: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let n = zk_ephemerals(addr).map_or(usize::MAX, |v| v.len());
        if n == 0 || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
