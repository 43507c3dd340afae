//! One real Redis node for a test: redis-server with webdis and the local
//! Upstash gateway in front of it (started on free loopback ports, stopped
//! when dropped), and direct commands to look behind a client's back.

use edgelock::core::redis::RedisNode;
use edgelock_devtools::{RedisServer, UpstashGateway, Webdis};

pub struct Node {
    pub redis: RedisServer,
    pub webdis: Webdis,
    pub gateway: UpstashGateway,
    token: String,
}

impl Node {
    /// Starts the three; `token` is the gateway's REST token.
    pub fn start(token: &str) -> Node {
        let redis = RedisServer::start().expect("start redis-server");
        let webdis = Webdis::start(&redis).expect("start webdis");
        let gateway = UpstashGateway::start(&redis, token).expect("start the gateway");
        Node {
            redis,
            webdis,
            gateway,
            token: token.to_string(),
        }
    }

    pub fn via_webdis(&self) -> RedisNode {
        RedisNode::webdis(self.webdis.url())
    }

    pub fn via_upstash(&self) -> RedisNode {
        RedisNode::upstash(self.gateway.url(), &self.token)
    }

    /// Every key in this Redis (SCAN).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        self.redis.all_keys().expect("SCAN")
    }

    pub fn get(&self, key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        self.redis
            .redis_command(&[b"GET", key.as_ref()])
            .expect("GET")
            .as_bytes()
            .map(<[u8]>::to_vec)
    }

    pub fn exists(&self, key: &str) -> bool {
        self.redis
            .redis_command(&[b"EXISTS", key.as_bytes()])
            .expect("EXISTS")
            .as_int()
            == Some(1)
    }
}

/// How a test's clients reach Redis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Via {
    Upstash,
    Webdis,
    /// Three nodes: webdis, Upstash, webdis.
    Redlock,
}

/// The nodes of one test: one for `Upstash` / `Webdis`, three for `Redlock`.
pub struct Nodes {
    pub via: Via,
    pub nodes: Vec<Node>,
}

impl Nodes {
    /// Starts the nodes; `token` is the gateways' REST token.
    pub fn start(via: Via, token: &str) -> Nodes {
        let n = if via == Via::Redlock { 3 } else { 1 };
        Nodes {
            via,
            nodes: (0..n).map(|_| Node::start(token)).collect(),
        }
    }

    /// Node `i` as a client reaches it (Redlock: odd nodes over Upstash).
    pub fn node(&self, i: usize) -> RedisNode {
        let upstash = match self.via {
            Via::Upstash => true,
            Via::Webdis => false,
            Via::Redlock => i % 2 == 1,
        };
        let n = &self.nodes[i];
        if upstash {
            n.via_upstash()
        } else {
            n.via_webdis()
        }
    }
}
