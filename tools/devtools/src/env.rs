//! A whole test environment in one call:
//! `Env::builder().etcd(1).redis(5).webdis(true).gateway(true).start()`.

use std::io;

use serde_json::{json, Value};

use crate::etcd::{EtcdCluster, EtcdOptions};
use crate::gateway::UpstashGateway;
use crate::redis::RedisServer;
use crate::webdis::Webdis;

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct EnvBuilder {
    etcd: usize,
    etcd_opts: EtcdOptions,
    redis: usize,
    webdis: bool,
    gateway: bool,
    token: String,
}

/// Running servers; everything is stopped on drop. Redis node `i` is fronted
/// by `webdis[i]` and `gateways[i]` when those were requested.
#[derive(Debug)]
pub struct Env {
    // Fronts first: they are dropped before the Redis servers behind them.
    pub gateways: Vec<UpstashGateway>,
    pub webdis: Vec<Webdis>,
    pub redis: Vec<RedisServer>,
    pub etcd: Option<EtcdCluster>,
    token: String,
}

impl Env {
    pub fn builder() -> EnvBuilder {
        EnvBuilder::default()
    }

    pub fn etcd_urls(&self) -> Vec<String> {
        self.etcd
            .as_ref()
            .map(EtcdCluster::urls)
            .unwrap_or_default()
    }

    pub fn redis_ports(&self) -> Vec<u16> {
        self.redis.iter().map(RedisServer::port).collect()
    }

    pub fn webdis_urls(&self) -> Vec<String> {
        self.webdis.iter().map(Webdis::url).collect()
    }

    pub fn gateway_urls(&self) -> Vec<String> {
        self.gateways.iter().map(UpstashGateway::url).collect()
    }

    /// The gateways' bearer token ("" when auth is off).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// URLs, ports and pids as JSON (without the token).
    pub fn describe(&self) -> Value {
        let etcd: Vec<Value> = self
            .etcd
            .iter()
            .flat_map(|c| c.members())
            .map(|m| json!({"name": m.name(), "url": m.url(), "client_port": m.client_port(), "peer_port": m.peer_port(), "pid": m.pid()}))
            .collect();
        let redis: Vec<Value> = self
            .redis
            .iter()
            .map(|r| json!({"url": r.url(), "host": "127.0.0.1", "port": r.port(), "pid": r.pid()}))
            .collect();
        let webdis: Vec<Value> =
            self.webdis.iter().map(|w| json!({"url": w.url(), "port": w.port(), "redis_port": w.redis_port(), "pid": w.pid()})).collect();
        let gateway: Vec<Value> = self
            .gateways
            .iter()
            .map(|g| json!({"url": g.url(), "port": g.port()}))
            .collect();
        json!({
            "etcd": etcd,
            "etcd_urls": self.etcd_urls(),
            "redis": redis,
            "webdis": webdis,
            "webdis_urls": self.webdis_urls(),
            "gateway": gateway,
            "gateway_urls": self.gateway_urls(),
            "pid": std::process::id(),
        })
    }
}

impl EnvBuilder {
    /// Number of etcd members (0 = none, 1 = single server, n = one cluster).
    pub fn etcd(mut self, n: usize) -> Self {
        self.etcd = n;
        self
    }

    pub fn etcd_options(mut self, opts: EtcdOptions) -> Self {
        self.etcd_opts = opts;
        self
    }

    /// Number of independent redis-server processes.
    pub fn redis(mut self, n: usize) -> Self {
        self.redis = n;
        self
    }

    /// One webdis per Redis.
    pub fn webdis(mut self, on: bool) -> Self {
        self.webdis = on;
        self
    }

    /// One Upstash gateway per Redis.
    pub fn gateway(mut self, on: bool) -> Self {
        self.gateway = on;
        self
    }

    /// Bearer token the gateways require ("" = no auth).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = token.into();
        self
    }

    pub fn start(self) -> io::Result<Env> {
        if (self.webdis || self.gateway) && self.redis == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "webdis/gateway need at least one redis",
            ));
        }
        let mut env = Env {
            gateways: Vec::new(),
            webdis: Vec::new(),
            redis: Vec::new(),
            etcd: None,
            token: self.token.clone(),
        };
        // Start everything in parallel: etcd elections and process start-up
        // dominate, and they are independent.
        let etcd_opts = self.etcd_opts.clone();
        let n_etcd = self.etcd;
        let etcd = std::thread::spawn(move || {
            (n_etcd > 0)
                .then(|| EtcdCluster::start_with(n_etcd, etcd_opts))
                .transpose()
        });
        let redis: Vec<_> = (0..self.redis)
            .map(|_| std::thread::spawn(RedisServer::start))
            .collect();
        for h in redis {
            let r = h
                .join()
                .map_err(|_| io::Error::other("redis start thread panicked"))??;
            env.redis.push(r);
        }
        env.etcd = etcd
            .join()
            .map_err(|_| io::Error::other("etcd start thread panicked"))??;
        for r in &env.redis {
            if self.webdis {
                env.webdis.push(Webdis::start(r)?);
            }
            if self.gateway {
                env.gateways.push(UpstashGateway::start(r, &self.token)?);
            }
        }
        Ok(env)
    }
}
