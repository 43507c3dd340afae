//! Benchmark driver for the native (blocking Rust) client, run by
//! `bench/run.mjs` against the backends it started:
//!
//! `BENCH_TOKEN=<gateway token> bench_native '<json config>'`
//!
//! with the config `{"sliceMs":400,"rounds":6,"handoffs":32,"etcd":"http://…",
//! "gateways":["http://…",…],"webdis":["http://…",…]}` (the token travels in the
//! environment, not in argv where `ps` shows it).
//!
//! Prints one JSON object:
//! - `uncontended`: acquire+release in a loop (ops/s, p50/p99 ms, requests per
//!   op) for etcd, Redis (Upstash REST and Webdis) and Redlock (3× Upstash
//!   REST and 3× Webdis);
//! - `handoff`: latency from the holder's release call to the waiter holding,
//!   and the requests the waiter sent between the two (and during its whole
//!   wait), for the same configurations plus the single-node `fair: true`
//!   lock when the core accepts that option;
//! - `skipped`: configurations the core refused (id → message).
//!
//! Requests are counted by wrapping each client's lock machine: every
//! `Transmit::Send` the driver takes from it is one HTTP request (a
//! subscription stream counts as one, when it is opened).
//! Build: `cargo build --release --features native --example bench_native`.

#[cfg(not(feature = "native"))]
fn main() {
    eprintln!("bench_native needs --features native");
    std::process::exit(2);
}

#[cfg(feature = "native")]
fn main() {
    if let Err(e) = bench::run(std::env::args().skip(1).collect()) {
        eprintln!("bench_native: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "native")]
mod bench {
    use std::sync::{mpsc, Arc, Mutex};
    use std::thread;
    use std::time::{Duration, Instant};

    use edgelock::core::{
        BackendKind, BackendSpec, Capabilities, Event, Input, LockError, LockMachine, Millis, OpId,
        Operation, Transmit,
    };
    use edgelock::native::{Client, OsEntropy};
    use serde_json::{json, Map, Value};

    /// When each request was sent, and whether it was a stream (a subscription or watch).
    type ReqLog = Arc<Mutex<Vec<(Instant, bool)>>>;

    /// A lock machine that records every request it hands to the driver.
    struct Counted {
        inner: Box<dyn LockMachine + Send>,
        log: ReqLog,
    }

    impl LockMachine for Counted {
        fn backend(&self) -> BackendKind {
            self.inner.backend()
        }
        fn capabilities(&self) -> Capabilities {
            self.inner.capabilities()
        }
        fn live_count(&self) -> usize {
            self.inner.live_count()
        }
        fn start(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
            self.inner.start(now, op)
        }
        fn start_operation(&mut self, now: Millis, op: Operation) -> Result<OpId, LockError> {
            self.inner.start_operation(now, op)
        }
        fn cancel(&mut self, now: Millis, op: OpId) {
            self.inner.cancel(now, op)
        }
        fn close(&mut self, now: Millis) -> OpId {
            self.inner.close(now)
        }
        fn handle_input(&mut self, now: Millis, input: Input) {
            self.inner.handle_input(now, input)
        }
        fn handle_timeout(&mut self, now: Millis) {
            self.inner.handle_timeout(now)
        }
        fn poll_transmit(&mut self) -> Option<Transmit> {
            let t = self.inner.poll_transmit();
            // An HTTP request, or one write of pipelined Redis commands on
            // a stream (`redis://` rows: a command batch counts as one).
            let logged = match &t {
                Some(Transmit::Send(req)) => Some(req.stream),
                Some(Transmit::Write { .. }) => Some(false),
                _ => None,
            };
            if let (Some(stream), Ok(mut log)) = (logged, self.log.lock()) {
                log.push((Instant::now(), stream));
            }
            t
        }
        fn poll_event(&mut self) -> Option<Event> {
            self.inner.poll_event()
        }
        fn poll_timeout(&self) -> Option<Millis> {
            self.inner.poll_timeout()
        }
    }

    /// One configuration: its id, backend kind and JSON options (the npm spelling).
    struct Lib {
        id: &'static str,
        kind: BackendKind,
        options: Value,
        /// Also run in the uncontended phase (the fair lock is measured in handoffs only).
        uncontended: bool,
    }

    struct Instrumented {
        client: Client,
        log: ReqLog,
    }

    impl Lib {
        fn make(&self) -> Result<Instrumented, LockError> {
            let spec = BackendSpec::from_json(self.kind, &self.options.to_string())?;
            let machine = spec.build(Box::new(OsEntropy))?;
            let log: ReqLog = Arc::default();
            let client = Client::try_from_machine(Box::new(Counted {
                inner: machine,
                log: log.clone(),
            }))?;
            Ok(Instrumented { client, log })
        }
    }

    fn count_between(log: &ReqLog, from: Instant, to: Instant) -> (usize, usize) {
        let log = log.lock().map(|l| l.clone()).unwrap_or_default();
        let inside = log.iter().filter(|(t, _)| *t >= from && *t <= to);
        let (mut all, mut streams) = (0, 0);
        for (_, stream) in inside {
            all += 1;
            if *stream {
                streams += 1;
            }
        }
        (all, streams)
    }

    /// The first request of `log` sent between `from` and `to`.
    fn first_between(log: &ReqLog, from: Instant, to: Instant) -> Option<Instant> {
        let log = log.lock().ok()?;
        log.iter()
            .map(|(t, _)| *t)
            .filter(|t| *t >= from && *t <= to)
            .min()
    }

    fn quantile(xs: &[f64], q: f64) -> f64 {
        let mut s = xs.to_vec();
        s.sort_by(f64::total_cmp);
        if s.is_empty() {
            return f64::NAN;
        }
        let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
        s.get(i).copied().unwrap_or(f64::NAN)
    }

    fn mean(xs: &[f64]) -> f64 {
        if xs.is_empty() {
            f64::NAN
        } else {
            xs.iter().sum::<f64>() / xs.len() as f64
        }
    }

    fn num(x: f64) -> Value {
        if x.is_finite() {
            json!((x * 10_000.0).round() / 10_000.0)
        } else {
            Value::Null
        }
    }

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0
    }

    fn str_field(cfg: &Value, key: &str) -> Result<String, String> {
        cfg.get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or(format!("config: {key} missing"))
    }

    fn list_field(cfg: &Value, key: &str) -> Result<Vec<String>, String> {
        let list = cfg
            .get(key)
            .and_then(Value::as_array)
            .ok_or(format!("config: {key} missing"))?;
        Ok(list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect())
    }

    fn libs(cfg: &Value, token: &str) -> Result<Vec<Lib>, String> {
        let etcd = str_field(cfg, "etcd")?;
        let gws = list_field(cfg, "gateways")?;
        let webdis = list_field(cfg, "webdis")?;
        let first_gw = gws.first().cloned().ok_or("config: no gateway URL")?;
        let first_webdis = webdis.first().cloned().ok_or("config: no webdis URL")?;
        let upstash_nodes: Vec<Value> = gws
            .iter()
            .map(|u| json!({"url": u, "protocol": "upstash", "token": token}))
            .collect();
        let webdis_nodes: Vec<Value> = webdis
            .iter()
            .map(|u| json!({"url": u, "protocol": "webdis"}))
            .collect();
        let mut libs = http_libs(
            etcd,
            first_gw,
            first_webdis,
            token,
            upstash_nodes,
            webdis_nodes,
        );
        // The Redis protocol itself (`redis://`), when the config lists the servers.
        let tcp = list_field(cfg, "redis").unwrap_or_default();
        if let Some(first) = tcp.first() {
            let nodes: Vec<Value> = tcp.iter().map(|u| json!({ "url": u })).collect();
            libs.push(Lib {
                id: "native-redis-tcp",
                kind: BackendKind::Redis,
                options: json!({ "url": first }),
                uncontended: true,
            });
            libs.push(Lib {
                id: "native-redlock-tcp",
                kind: BackendKind::Redlock,
                options: json!({ "nodes": nodes, "retryCount": 1000 }),
                uncontended: true,
            });
        }
        Ok(libs)
    }

    fn http_libs(
        etcd: String,
        first_gw: String,
        first_webdis: String,
        token: &str,
        upstash_nodes: Vec<Value>,
        webdis_nodes: Vec<Value>,
    ) -> Vec<Lib> {
        vec![
            Lib {
                id: "native-etcd",
                kind: BackendKind::Etcd,
                options: json!({"endpoints": [etcd]}),
                uncontended: true,
            },
            Lib {
                id: "native-redis",
                kind: BackendKind::Redis,
                options: json!({"url": first_gw, "protocol": "upstash", "token": token}),
                uncontended: true,
            },
            Lib {
                id: "native-redis-webdis",
                kind: BackendKind::Redis,
                options: json!({"url": first_webdis, "protocol": "webdis"}),
                uncontended: true,
            },
            Lib {
                id: "native-redis-fair",
                kind: BackendKind::Redis,
                options: json!({"url": first_gw, "protocol": "upstash", "token": token, "fair": true}),
                uncontended: false,
            },
            // retryCount as in the Node rows: a waiter must not run out of retries.
            Lib {
                id: "native-redlock",
                kind: BackendKind::Redlock,
                options: json!({"nodes": upstash_nodes, "retryCount": 1000}),
                uncontended: true,
            },
            Lib {
                id: "native-redlock-webdis",
                kind: BackendKind::Redlock,
                options: json!({"nodes": webdis_nodes, "retryCount": 1000}),
                uncontended: true,
            },
        ]
    }

    pub fn run(args: Vec<String>) -> Result<(), String> {
        if let [mode, config] = args.as_slice() {
            if mode == "zookeeper" {
                return zookeeper::run(config);
            }
        }
        let [config] = args.as_slice() else {
            return Err("usage: BENCH_TOKEN=<token> bench_native '<json config>'".into());
        };
        let cfg: Value = serde_json::from_str(config).map_err(|e| format!("config: {e}"))?;
        let slice = Duration::from_millis(
            cfg.get("sliceMs")
                .and_then(Value::as_u64)
                .ok_or("config: sliceMs")?,
        );
        let rounds = cfg
            .get("rounds")
            .and_then(Value::as_u64)
            .ok_or("config: rounds")? as usize;
        let handoffs = cfg
            .get("handoffs")
            .and_then(Value::as_u64)
            .ok_or("config: handoffs")? as usize;
        let token = std::env::var("BENCH_TOKEN").unwrap_or_default();
        let all = libs(&cfg, &token)?;

        // Which configurations the core accepts (the fair lock may not exist yet).
        let mut skipped = Map::new();
        let mut usable = Vec::new();
        for lib in &all {
            match lib.make() {
                Ok(c) => {
                    let _ = c.client.close();
                    usable.push(lib);
                }
                Err(e) if e.code() == "INVALID_ARGUMENT" => {
                    skipped.insert(lib.id.into(), json!(e.to_string()));
                }
                Err(e) => return Err(format!("{}: {e}", lib.id)),
            }
        }

        // Uncontended, interleaved rounds after a warm-up.
        let unc_libs: Vec<&Lib> = usable.iter().copied().filter(|l| l.uncontended).collect();
        let clients: Vec<Instrumented> = unc_libs
            .iter()
            .map(|l| l.make().map_err(|e| format!("{}: {e}", l.id)))
            .collect::<Result<_, _>>()?;
        let n = clients.len();
        let mut lat: Vec<Vec<f64>> = vec![Vec::new(); n];
        let mut busy = vec![Duration::ZERO; n];
        let mut errors = vec![0u64; n];
        let mut requests = vec![0usize; n];
        for (i, c) in clients.iter().enumerate() {
            let name = format!("unc-{}", unc_libs[i].id);
            for _ in 0..5 {
                c.client
                    .acquire(&name, None)
                    .and_then(|l| l.release())
                    .map_err(|e| format!("{}: {e}", unc_libs[i].id))?;
            }
        }
        for _ in 0..rounds {
            for (i, c) in clients.iter().enumerate() {
                let name = format!("unc-{}", unc_libs[i].id);
                let start = Instant::now();
                while start.elapsed() < slice {
                    let t = Instant::now();
                    match c.client.acquire(&name, None).and_then(|l| l.release()) {
                        Ok(_) => lat[i].push(ms(t.elapsed())),
                        Err(_) => errors[i] += 1,
                    }
                }
                let end = Instant::now();
                busy[i] += end - start;
                requests[i] += count_between(&c.log, start, end).0;
            }
        }
        let mut uncontended = Map::new();
        for (i, c) in clients.iter().enumerate() {
            let _ = c.client.close();
            let ops = lat[i].len();
            uncontended.insert(
                unc_libs[i].id.into(),
                json!({
                    "ops": ops,
                    "opsPerSec": num(ops as f64 / busy[i].as_secs_f64()),
                    "p50": num(quantile(&lat[i], 0.5)),
                    "p99": num(quantile(&lat[i], 0.99)),
                    "requestsPerOp": num(if ops > 0 { requests[i] as f64 / ops as f64 } else { f64::NAN }),
                    "errors": errors[i],
                }),
            );
        }

        // Handoff: the waiter blocks in its own thread; latency from the
        // release call to it holding; the waiter's own requests counted from
        // its log, between the release call and the grant.
        let mut hand = Map::new();
        for lib in &usable {
            let (holder, waiter) = match (lib.make(), lib.make()) {
                (Ok(h), Ok(w)) => (h, w),
                (Err(e), _) | (_, Err(e)) => return Err(format!("{}: {e}", lib.id)),
            };
            let name = format!("handoff-{}", lib.id);
            let mut samples = Vec::new();
            let (mut after, mut whole, mut streams, mut wake) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let mut early = 0u64;
            let mut errs = 0u64;
            for k in 0..handoffs {
                let held = match holder.client.acquire(&name, None) {
                    Ok(l) => l,
                    Err(_) => {
                        errs += 1;
                        continue;
                    }
                };
                let (tx, rx) = mpsc::channel();
                let w = waiter.client.clone();
                let n = name.clone();
                let wait_start = Instant::now();
                let th = thread::spawn(move || {
                    let r = w.acquire(&n, Some(Duration::from_secs(30)));
                    let _ = tx.send(Instant::now());
                    r.and_then(|l| l.release())
                });
                thread::sleep(Duration::from_millis(50 + (k as u64 * 37) % 100));
                let released_at = Instant::now();
                let mut got = rx.try_recv().ok();
                if got.is_some() {
                    early += 1; // the waiter got in while the holder held: exclusion lost
                }
                if held.release().is_err() {
                    errs += 1;
                }
                if got.is_none() {
                    got = rx.recv().ok();
                }
                let ok = matches!(th.join(), Ok(Ok(_)));
                match got {
                    Some(at) if ok => {
                        samples.push(ms(at.saturating_duration_since(released_at)));
                        after.push(count_between(&waiter.log, released_at, at).0 as f64);
                        if let Some(first) = first_between(&waiter.log, released_at, at) {
                            wake.push(ms(first - released_at));
                        }
                        let (w_all, w_streams) = count_between(&waiter.log, wait_start, at);
                        whole.push(w_all as f64);
                        streams.push(w_streams as f64);
                    }
                    _ => errs += 1,
                }
            }
            let _ = holder.client.close();
            let _ = waiter.client.close();
            let list: Vec<Value> = samples
                .iter()
                .map(|x| num((x * 10.0).round() / 10.0))
                .collect();
            hand.insert(
                lib.id.into(),
                json!({
                    "n": samples.len(),
                    "p50": num(quantile(&samples, 0.5)),
                    "p99": num(quantile(&samples, 0.99)),
                    "max": num(samples.iter().copied().fold(f64::NAN, f64::max)),
                    "samples": list,
                    "wakeP50": num(quantile(&wake, 0.5)),
                    "waiterRequestsAfterRelease": num(mean(&after)),
                    "waiterRequestsAfterReleaseMax": num(after.iter().copied().fold(f64::NAN, f64::max)),
                    "waiterRequestsWholeWait": num(mean(&whole)),
                    "waiterStreamsWholeWait": num(mean(&streams)),
                    "exclusionViolations": early,
                    "errors": errs,
                }),
            );
        }
        let out = json!({ "uncontended": uncontended, "handoff": hand, "skipped": skipped });
        println!("{out}");
        Ok(())
    }

    /// `bench_native zookeeper '{"sliceMs":400,"rounds":6}'`: uncontended
    /// acquire+release on a local ZooKeeper (Debian's 3.8, started here
    /// through the devtools, tickTime 200) by the native client, beside
    /// Curator 5.4's InterProcessMutex (the devtools' `CuratorPeer`, one JVM
    /// with its own session; the loop timed inside the JVM), interleaved in
    /// `rounds` slices: in each, the native client runs for `sliceMs`, then
    /// Curator runs as many cycles as the native client made (at least 50).
    /// Prints `{"native":{…},"curator":{…},"ratio":…}`: ops/s each, and
    /// native ÷ Curator (above 1: the native client is faster). Never
    /// asserted: a figure of this machine and this run.
    mod zookeeper {
        use std::time::{Duration, Instant};

        use edgelock::core::BackendKind;
        use edgelock_devtools::{CuratorPeer, ZooKeeperServer};
        use serde_json::{json, Value};

        use super::{count_between, ms, num, quantile, Lib};

        /// Curator's lock path for edgelock's name (root `/edgelock`).
        const NAME: &str = "bench-zk";

        pub fn run(config: &str) -> Result<(), String> {
            let cfg: Value = serde_json::from_str(config).map_err(|e| format!("config: {e}"))?;
            let slice =
                Duration::from_millis(cfg.get("sliceMs").and_then(Value::as_u64).unwrap_or(400));
            let rounds = cfg.get("rounds").and_then(Value::as_u64).unwrap_or(6);
            let zk = ZooKeeperServer::start().map_err(|e| format!("zookeeper: {e}"))?;
            let lib = Lib {
                id: "native-zookeeper",
                kind: BackendKind::ZooKeeper,
                options: json!({ "connect": zk.connect_string() }),
                uncontended: true,
            };
            let native = lib.make().map_err(|e| format!("native client: {e}"))?;
            let mut curator =
                CuratorPeer::start(&zk.connect_string()).map_err(|e| format!("curator: {e}"))?;
            let path = format!("/edgelock/{NAME}-curator");
            // Warm-ups: the native client's session and parents, the JVM's JIT.
            for _ in 0..20 {
                native
                    .client
                    .acquire(NAME, None)
                    .and_then(|l| l.release())
                    .map_err(|e| e.to_string())?;
            }
            curator
                .bench_mutex(&path, 500)
                .map_err(|e| format!("curator warm-up: {e}"))?;
            let (mut lat, mut busy, mut requests, mut errors) =
                (Vec::new(), Duration::ZERO, 0, 0u64);
            let (mut cur_ops, mut cur_busy) = (0u64, Duration::ZERO);
            for _ in 0..rounds {
                let start = Instant::now();
                let before = lat.len();
                while start.elapsed() < slice {
                    let t = Instant::now();
                    match native.client.acquire(NAME, None).and_then(|l| l.release()) {
                        Ok(_) => lat.push(ms(t.elapsed())),
                        Err(_) => errors += 1,
                    }
                }
                let end = Instant::now();
                busy += end - start;
                requests += count_between(&native.log, start, end).0;
                let n = (lat.len() - before).max(50) as u32;
                cur_busy += curator
                    .bench_mutex(&path, n)
                    .map_err(|e| format!("curator: {e}"))?;
                cur_ops += u64::from(n);
            }
            let _ = native.client.close();
            let _ = curator.close();
            let ops = lat.len();
            let native_rate = ops as f64 / busy.as_secs_f64();
            let curator_rate = cur_ops as f64 / cur_busy.as_secs_f64();
            let out = json!({
                "native": {
                    "ops": ops,
                    "opsPerSec": num(native_rate),
                    "p50": num(quantile(&lat, 0.5)),
                    "p99": num(quantile(&lat, 0.99)),
                    "writesPerOp": num(if ops > 0 { requests as f64 / ops as f64 } else { f64::NAN }),
                    "errors": errors,
                },
                "curator": { "ops": cur_ops, "opsPerSec": num(curator_rate), "meanMs": num(ms(cur_busy) / cur_ops.max(1) as f64) },
                "ratio": num(native_rate / curator_rate),
            });
            println!("{out}");
            Ok(())
        }
    }
}
