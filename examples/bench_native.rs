//! Benchmark driver for the native (blocking Rust) client, run by
//! `bench/run.mjs` against the backends it started:
//!
//! `bench_native <slice-ms> <rounds> <handoffs> <etcd-url> <gateway-urls,> <token>`
//!
//! Prints one JSON object: uncontended acquire+release (ops/s, p50/p99 ms) for
//! etcd, Redis (Upstash REST) and Redlock (3× Upstash REST), and handoff
//! latency (release call → waiter holds) for etcd and Redis.
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
    use std::sync::mpsc;
    use std::thread;
    use std::time::{Duration, Instant};

    use edgelock::core::redis::{RedisConfig, RedisMachine, RedisNode, RedlockConfig, RedlockMachine};
    use edgelock::native::{Client, EtcdConfig, OsEntropy};

    type Factory = Box<dyn Fn() -> Result<Client, String>>;

    fn quantile(xs: &[f64], q: f64) -> f64 {
        let mut s = xs.to_vec();
        s.sort_by(f64::total_cmp);
        if s.is_empty() {
            return f64::NAN;
        }
        let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
        s.get(i).copied().unwrap_or(f64::NAN)
    }

    fn json_num(x: f64) -> String {
        if x.is_finite() {
            format!("{x:.4}")
        } else {
            "null".to_string()
        }
    }

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0
    }

    pub fn run(args: Vec<String>) -> Result<(), String> {
        let [slice, rounds, handoffs, etcd, gateways, token] = args.as_slice() else {
            return Err("usage: bench_native <slice-ms> <rounds> <handoffs> <etcd-url> <gateway-urls,> <token>".into());
        };
        let slice = Duration::from_millis(slice.parse().map_err(|_| "bad slice-ms")?);
        let rounds: usize = rounds.parse().map_err(|_| "bad rounds")?;
        let handoffs: usize = handoffs.parse().map_err(|_| "bad handoffs")?;
        let gws: Vec<String> = gateways.split(',').map(str::to_string).collect();
        let first_gw = gws.first().cloned().ok_or("no gateway URL")?;

        let etcd_url = etcd.clone();
        let tok = token.clone();
        let tok2 = token.clone();
        let libs: Vec<(&str, Factory)> = vec![
            ("native-etcd", Box::new(move || Client::etcd(EtcdConfig::new(vec![etcd_url.clone()])).map_err(|e| e.to_string()))),
            (
                "native-redis",
                Box::new(move || {
                    let m = RedisMachine::new(RedisConfig::new(RedisNode::upstash(first_gw.clone(), tok.clone())), Box::new(OsEntropy))
                        .map_err(|e| e.to_string())?;
                    Client::try_from_machine(Box::new(m)).map_err(|e| e.to_string())
                }),
            ),
            (
                "native-redlock",
                Box::new(move || {
                    let nodes = gws.iter().map(|u| RedisNode::upstash(u.clone(), tok2.clone())).collect();
                    let m = RedlockMachine::new(RedlockConfig::new(nodes), Box::new(OsEntropy)).map_err(|e| e.to_string())?;
                    Client::try_from_machine(Box::new(m)).map_err(|e| e.to_string())
                }),
            ),
        ];

        let mut out = Vec::new();
        // Uncontended, interleaved rounds after a warm-up.
        let clients: Vec<Client> = libs.iter().map(|(_, f)| f()).collect::<Result<_, _>>()?;
        let mut lat: Vec<Vec<f64>> = vec![Vec::new(); clients.len()];
        let mut busy = vec![Duration::ZERO; clients.len()];
        let mut errors = vec![0u64; clients.len()];
        for (i, c) in clients.iter().enumerate() {
            for _ in 0..5 {
                let name = format!("unc-{}", libs.get(i).map_or("x", |l| l.0));
                c.acquire(&name, None).and_then(|l| l.release()).map_err(|e| e.to_string())?;
            }
        }
        for _ in 0..rounds {
            for (i, c) in clients.iter().enumerate() {
                let name = format!("unc-{}", libs.get(i).map_or("x", |l| l.0));
                let start = Instant::now();
                while start.elapsed() < slice {
                    let t = Instant::now();
                    match c.acquire(&name, None).and_then(|l| l.release()) {
                        Ok(_) => lat[i].push(ms(t.elapsed())),
                        Err(_) => errors[i] += 1,
                    }
                }
                busy[i] += start.elapsed();
            }
        }
        for (i, c) in clients.iter().enumerate() {
            let _ = c.close();
            let id = libs.get(i).map_or("x", |l| l.0);
            out.push(format!(
                "\"{id}\":{{\"ops\":{},\"opsPerSec\":{},\"p50\":{},\"p99\":{},\"errors\":{}}}",
                lat[i].len(),
                json_num(lat[i].len() as f64 / busy[i].as_secs_f64()),
                json_num(quantile(&lat[i], 0.5)),
                json_num(quantile(&lat[i], 0.99)),
                errors[i]
            ));
        }
        let uncontended = out.join(",");

        // Handoff: the waiter blocks in its own thread; latency from the release call to it holding.
        let mut hand = Vec::new();
        for (id, f) in libs.iter().take(2) {
            let holder = f()?;
            let waiter = f()?;
            let name = format!("handoff-{id}");
            let mut samples = Vec::new();
            let mut early = 0u64;
            for k in 0..handoffs {
                let held = holder.acquire(&name, None).map_err(|e| e.to_string())?;
                let (tx, rx) = mpsc::channel();
                let w = waiter.clone();
                let n = name.clone();
                let th = thread::spawn(move || {
                    let r = w.acquire(&n, None);
                    let at = Instant::now();
                    let _ = tx.send(at);
                    r.and_then(|l| l.release())
                });
                thread::sleep(Duration::from_millis(50 + (k as u64 * 37) % 100));
                let released_at = Instant::now();
                if rx.try_recv().is_ok() {
                    early += 1;
                }
                held.release().map_err(|e| e.to_string())?;
                let got = rx.recv().map_err(|_| "waiter thread failed")?;
                th.join().map_err(|_| "waiter panicked")?.map_err(|e| e.to_string())?;
                samples.push(ms(got.saturating_duration_since(released_at)));
            }
            let _ = holder.close();
            let _ = waiter.close();
            let list: Vec<String> = samples.iter().map(|x| format!("{x:.1}")).collect();
            hand.push(format!(
                "\"{id}\":{{\"n\":{},\"p50\":{},\"p99\":{},\"max\":{},\"samples\":[{}],\"exclusionViolations\":{early},\"errors\":0}}",
                samples.len(),
                json_num(quantile(&samples, 0.5)),
                json_num(quantile(&samples, 0.99)),
                json_num(samples.iter().copied().fold(f64::NAN, f64::max)),
                list.join(",")
            ));
        }
        println!("{{\"uncontended\":{{{uncontended}}},\"handoff\":{{{}}}}}", hand.join(","));
        Ok(())
    }
}
