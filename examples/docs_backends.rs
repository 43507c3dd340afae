//! The Rust examples of docs/backends/*.md, docs/tls.md and docs/kinds/*.md.
//! `scripts/check-docs.sh` checks that each guide's code block equals its
//! `// [docs:NAME]` region here; `cargo build --features native --examples`
//! compiles them. Each function needs the servers its guide names to run.

#[cfg(not(feature = "native"))]
fn main() {
    eprintln!("build with --features native");
}

#[cfg(feature = "native")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let which = std::env::args().nth(1).unwrap_or_default();
    match which.as_str() {
        "etcd-semaphore" => examples::etcd_semaphore(),
        "etcd-auth" => examples::etcd_auth(),
        "tls" => examples::tls(),
        "redis" => examples::redis(),
        "redlock" => examples::redlock(),
        "redis-tcp" => examples::redis_tcp(),
        "kinds" => examples::kinds(),
        "election" => examples::election(),
        _ => Err("which example? etcd-semaphore, etcd-auth, tls, redis, redlock, redis-tcp, kinds, election".into()),
    }
}

#[cfg(feature = "native")]
mod examples {
    use std::error::Error;

    use edgelock::native::{CancelToken, Client, EtcdConfig};

    type Result = std::result::Result<(), Box<dyn Error>>;

    /// What the examples protect: one resource per slot, fenced by the slot's tokens.
    fn render(slot: u32, token: u64) -> Result {
        println!("rendering in slot {slot} with fencing token {token}");
        Ok(())
    }

    fn etcd() -> std::result::Result<Client, Box<dyn Error>> {
        Ok(Client::etcd(EtcdConfig::new(vec![
            "http://127.0.0.1:2379".into(),
        ]))?)
    }

    pub fn etcd_semaphore() -> Result {
        let client = etcd()?;
        // [docs:etcd-semaphore]
        use edgelock::core::{AcquireOptions, LockKind, Wait};
        let opts = AcquireOptions {
            wait: Wait::For(30_000),
            ttl_ms: None,
        };
        if let Some(permit) = client.acquire_kind("render", LockKind::permits(3)?, opts, None)? {
            render(permit.slot().unwrap(), permit.fencing_token())?; // check tokens per slot
            permit.release()?;
        }
        // [/docs:etcd-semaphore]
        Ok(())
    }

    pub fn etcd_auth() -> Result {
        // [docs:etcd-auth]
        use edgelock::native::{Client, EtcdAuth, EtcdConfig};
        let mut cfg = EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]);
        cfg.auth = Some(EtcdAuth {
            username: "locker".into(),
            password: std::env::var("ETCD_PASSWORD")?,
        });
        let client = Client::etcd(cfg)?; // the user's role needs readwrite on "edgelock/" (the prefix)
                                         // [/docs:etcd-auth]
        client.close()?;
        Ok(())
    }

    pub fn tls() -> Result {
        // [docs:tls]
        use edgelock::core::BackendSpec;
        use edgelock::native::{Client, ClientOptions, EtcdConfig, TlsConfig};

        let tls = TlsConfig::new()
            .with_ca_file("/etc/etcd/pki/ca.pem") // omit: system roots
            .with_client_cert("/etc/etcd/pki/client.pem", "/etc/etcd/pki/client-key.pem"); // omit: no mTLS
        let spec = BackendSpec::Etcd(EtcdConfig::new(vec!["https://etcd-1:2379".into()]));
        let client = Client::connect_with(spec, &ClientOptions::new().with_tls(tls))?;
        // Client::connect(spec) / Client::etcd(cfg) also take https URLs (system roots).
        // [/docs:tls]
        client.close()?;
        Ok(())
    }

    pub fn redis() -> Result {
        // [docs:redis]
        use edgelock::core::redis::{RedisConfig, RedisNode};
        use edgelock::core::BackendSpec;
        use edgelock::native::Client;

        // One node over the Upstash REST protocol (or RedisNode::webdis(url) for Webdis).
        let node = RedisNode::upstash("http://127.0.0.1:8079", std::env::var("UPSTASH_TOKEN")?);
        let single = Client::connect(BackendSpec::Redis(RedisConfig::new(node)))?;
        // [/docs:redis]
        single.close()?;
        Ok(())
    }

    pub fn redlock() -> Result {
        // [docs:redlock]
        use edgelock::core::redis::{RedisNode, RedlockConfig};
        use edgelock::core::BackendSpec;
        use edgelock::native::Client;

        // Redlock over N independent nodes (each may use either protocol).
        let nodes = [
            "http://127.0.0.1:7379",
            "http://127.0.0.1:7380",
            "http://127.0.0.1:7381",
        ]
        .map(RedisNode::webdis)
        .to_vec();
        let redlock = Client::connect(BackendSpec::Redlock(RedlockConfig::new(nodes)))?;
        let lock = redlock.acquire("rollup", None)?; // lock.fencing_token() strictly increases across holders
                                                     // [/docs:redlock]
        lock.release()?;
        Ok(())
    }

    pub fn redis_tcp() -> Result {
        use edgelock::core::redis::{RedisConfig, RedisNode};
        use edgelock::core::BackendSpec;
        // [docs:redis-tcp]
        let node = RedisNode::resp(
            "rediss://locker@cache.example:6380/2",
            Some(&std::env::var("REDIS_PASSWORD")?),
        )?;
        let tcp = Client::connect(BackendSpec::Redis(RedisConfig::new(node)))?;
        // [/docs:redis-tcp]
        tcp.close()?;
        Ok(())
    }

    pub fn kinds() -> Result {
        // [docs:kinds]
        use edgelock::native::{Client, EtcdConfig, LockKind};
        let client = Client::etcd(EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]))?;
        if let Some(permit) = client.try_acquire_kind("renders", LockKind::permits(3)?)? {
            render(permit.slot().unwrap_or(0), permit.fencing_token())?; // slot in 0..3
            permit.release()?;
        }
        // Waiting: client.acquire_kind(name, kind, AcquireOptions { wait, ttl_ms }, cancel); async: AsyncClient::{acquire_kind, try_acquire_kind}.
        // [/docs:kinds]
        Ok(())
    }

    pub fn election() -> Result {
        use edgelock::core::{AcquireOptions, Wait};
        let client = etcd()?;
        let cancel_token = CancelToken::new();
        // [docs:election]
        let me = client
            .campaign(
                "scheduler",
                "node-a:8080",
                AcquireOptions {
                    wait: Wait::Forever,
                    ttl_ms: None,
                },
                None,
            )?
            .expect("waited");
        me.proclaim("node-a:9090")?;
        for change in client.observe("scheduler", cancel_token.clone()) {
            println!("{:?}", change?);
        }
        me.release()?; // resign
                       // [/docs:election]
        Ok(())
    }
}
