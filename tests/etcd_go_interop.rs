//! edgelock and Go's `clientv3/concurrency` on one etcd, through the real Go
//! code: `etcdctl elect`, `etcdctl elect -l` and `etcdctl lock` (Debian's
//! etcd-client) against edgelock's campaign, leader, observe and lock on the
//! same names. Go's prefix for an edgelock name N is `<prefix>/<escaped N>`
//! (`edgelock/N` by default): the same keys, the same line.
#![cfg(feature = "native")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use edgelock::core::*;
use edgelock::native::Client;
use edgelock_devtools::EtcdServer;

mod common;
use common::etcd_raw::{b64, keys_of, raw};
use serde_json::json;

/// One running etcdctl, its stdout lines on a channel.
struct Etcdctl {
    child: Child,
    lines: Receiver<String>,
}

impl Etcdctl {
    fn start(etcd: &EtcdServer, args: &[&str]) -> Etcdctl {
        let mut child = Command::new("etcdctl")
            .arg("--endpoints")
            .arg(etcd.url())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("etcdctl (Debian's etcd-client) runs");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Etcdctl { child, lines }
    }

    /// The next line it prints; 30 s is a must-happen bound.
    fn line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("etcdctl printed a line")
    }

    /// Interrupts it as Ctrl-C does (it closes its session, which revokes
    /// its lease) and waits for it to exit.
    fn interrupt(mut self) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args(["-INT", &pid]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -INT {pid}");
        self.child.wait().expect("etcdctl exits");
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(etcd: &EtcdServer) -> Client {
    Client::etcd(edgelock::core::etcd::EtcdConfig::new(vec![etcd.url()])).expect("client")
}

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions {
        wait: Wait::For(ms),
        ttl_ms: None,
    }
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `etcdctl elect` leads: edgelock's `leader` reports Go's raw value and its
/// key's create revision as the token; an edgelock campaign queues behind
/// it and leads once etcdctl leaves.
#[test]
fn a_go_leader_is_edgelocks_leader_and_an_edgelock_campaign_follows_it() {
    let etcd = EtcdServer::start().expect("start etcd");
    let go = Etcdctl::start(&etcd, &["elect", "edgelock/go", "goval"]);
    let key = go.line();
    assert!(key.starts_with("edgelock/go/"), "{key}");
    assert_eq!(go.line(), "goval");
    let c = client(&etcd);
    let leader = c.leader("go").unwrap().expect("Go's leader is seen");
    assert_eq!(leader.value, "goval");
    assert_eq!(keys_of(&etcd, "go"), vec![key.clone()]);
    let got = raw(&etcd, "/v3/kv/range", json!({ "key": b64(key.as_bytes()) }));
    let created: u64 = got["kvs"][0]["create_revision"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(leader.fencing_token, created, "its create revision");
    let try_now = AcquireOptions {
        wait: Wait::Try,
        ttl_ms: None,
    };
    assert!(c.campaign("go", "B", try_now, None).unwrap().is_none());
    let waiter = std::thread::spawn(move || {
        let l = c.campaign("go", "B", wait(60_000), None).unwrap();
        (l.expect("elected after Go left"), c)
    });
    wait_until("edgelock's campaign queued", || {
        keys_of(&etcd, "go").len() == 2
    });
    go.interrupt();
    let (led, c) = waiter.join().unwrap();
    assert!(led.fencing_token() > leader.fencing_token);
    let now = c.leader("go").unwrap().expect("edgelock leads");
    assert_eq!(
        (now.value.as_str(), now.fencing_token),
        ("B", led.fencing_token())
    );
    led.release().unwrap();
}

/// `etcdctl elect -l` (Go's `Election.Observe`) prints edgelock's leader's
/// raw value, then each proclaim.
#[test]
fn a_go_observer_sees_edgelocks_leader_and_its_proclaims() {
    let etcd = EtcdServer::start().expect("start etcd");
    let c = client(&etcd);
    let led = c
        .campaign("obs", "first", wait(10_000), None)
        .unwrap()
        .unwrap();
    let go = Etcdctl::start(&etcd, &["elect", "-l", "edgelock/obs"]);
    assert!(go.line().starts_with("edgelock/obs/"));
    assert_eq!(go.line(), "first");
    led.proclaim("second value").unwrap();
    assert!(go.line().starts_with("edgelock/obs/"));
    assert_eq!(go.line(), "second value");
    led.release().unwrap();
}

/// `etcdctl lock` (Go's `Mutex`) and edgelock's exclusive lock on one name
/// exclude each other, both ways.
#[test]
fn etcdctl_lock_and_edgelocks_lock_exclude_each_other() {
    let etcd = EtcdServer::start().expect("start etcd");
    let c = client(&etcd);
    let go = Etcdctl::start(&etcd, &["lock", "edgelock/m"]);
    assert!(go.line().starts_with("edgelock/m/"), "Go holds the lock");
    assert!(
        c.try_acquire("m").unwrap().is_none(),
        "edgelock is kept out"
    );
    let waiter = std::thread::spawn(move || {
        let l = c.acquire("m", Some(Duration::from_secs(60))).unwrap();
        (l, c)
    });
    wait_until("edgelock's acquire queued", || {
        keys_of(&etcd, "m").len() == 2
    });
    go.interrupt();
    let (held, _c) = waiter.join().unwrap();
    let go = Etcdctl::start(&etcd, &["lock", "edgelock/m"]);
    wait_until("Go's lock queued", || keys_of(&etcd, "m").len() == 2);
    // Go is still waiting: nothing printed while edgelock holds.
    assert!(go.lines.recv_timeout(Duration::from_millis(300)).is_err());
    held.release().unwrap();
    assert!(
        go.line().starts_with("edgelock/m/"),
        "Go got it after the release"
    );
}
