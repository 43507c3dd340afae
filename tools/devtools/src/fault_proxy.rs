//! A TCP fault proxy for reliability tests (there is no toxiproxy or tc netem
//! here): it sits between clients and one backend node on loopback and applies
//! the fault currently set, switchable at any time from the test.
//!
//! - `Pass`: forward both ways.
//! - `Delay(d)`: forward, but hold every chunk (both directions) for `d`.
//! - `Blackhole`: accept and read, forward nothing, answer nothing (the client's
//!   own timeout must fire).
//! - `Drop`: close every new or active connection at once.
//! - `CutResponse`: forward the request to the server, discard the reply and
//!   close the client's connection ("applied, but the answer never came back").
//!
//! A fault applies to bytes moving after it is set, so a test can flip faults
//! while connections are open (keep-alive clients keep theirs).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Pass,
    Delay(Duration),
    Blackhole,
    Drop,
    CutResponse,
}

struct Shared {
    fault: Mutex<Fault>,
    stop: AtomicBool,
    /// Client-side sockets of live connections, so `Drop` and shutdown reach them.
    conns: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn fault(&self) -> Fault {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            fault: Mutex::new(Fault::Pass),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let accept = thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = conn else { continue };
                    let s2 = s.clone();
                    let _ = thread::Builder::new()
                        .name("fault-proxy-conn".into())
                        .spawn(move || serve(client, upstream, s2));
                }
            })?;
        Ok(FaultProxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sets the fault for everything that moves from now on. `Drop` also closes
    /// the connections that are open right now.
    pub fn set(&self, fault: Fault) {
        *self.shared.fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
        if fault == Fault::Drop {
            close_all(&self.shared);
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        close_all(&self.shared);
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn close_all(shared: &Shared) {
    for c in shared
        .conns
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
    {
        let _ = c.shutdown(Shutdown::Both);
    }
}

fn serve(client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    if shared.stop.load(Ordering::SeqCst) || shared.fault() == Fault::Drop {
        let _ = client.shutdown(Shutdown::Both);
        return;
    }
    let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(2)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    if let Ok(c) = client.try_clone() {
        shared
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c);
    }
    let (Ok(client_r), Ok(server_w), Ok(server_r), Ok(client_w)) = (
        client.try_clone(),
        server.try_clone(),
        server.try_clone(),
        client.try_clone(),
    ) else {
        return;
    };
    let s = shared.clone();
    let up = thread::spawn(move || pump(client_r, server_w, &s, Direction::Request));
    pump(server_r, client_w, &shared, Direction::Response);
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
    let _ = up.join();
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Request,
    Response,
}

/// Copies `from` → `to` chunk by chunk, applying the fault in force for each chunk.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, dir: Direction) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        match shared.fault() {
            Fault::Pass => {}
            Fault::Delay(d) => thread::sleep(d),
            // Swallow: the peer never sees these bytes.
            Fault::Blackhole => continue,
            Fault::Drop => break,
            Fault::CutResponse if dir == Direction::Response => {
                // The request was applied; its answer is lost with the connection.
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
            Fault::CutResponse => {}
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    /// A line server: answers each line with "ok <line>" and counts the lines it
    /// received (so a test can tell "applied" from "never arrived").
    fn line_server() -> (SocketAddr, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        thread::spawn(move || {
            for c in l.incoming().flatten() {
                let s = s.clone();
                thread::spawn(move || {
                    let mut w = c.try_clone().unwrap();
                    for line in io::BufReader::new(c).lines() {
                        let Ok(line) = line else { break };
                        s.fetch_add(1, Ordering::SeqCst);
                        if writeln!(w, "ok {line}").is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (addr, seen)
    }

    fn ask(proxy: &FaultProxy, line: &str, timeout: Duration) -> io::Result<String> {
        let mut c = TcpStream::connect(proxy.addr())?;
        c.set_read_timeout(Some(timeout))?;
        writeln!(c, "{line}")?;
        let mut out = String::new();
        io::BufReader::new(c).read_line(&mut out)?;
        if out.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed without an answer",
            ));
        }
        Ok(out.trim_end().to_string())
    }

    #[test]
    fn pass_delay_blackhole_drop_and_cut_response() {
        let (upstream, seen) = line_server();
        let proxy = FaultProxy::start(upstream).unwrap();
        let t = Duration::from_secs(2);

        assert_eq!(ask(&proxy, "a", t).unwrap(), "ok a");
        assert_eq!(seen.load(Ordering::SeqCst), 1);

        proxy.set(Fault::Delay(Duration::from_millis(150)));
        let started = Instant::now();
        assert_eq!(ask(&proxy, "b", t).unwrap(), "ok b");
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "both directions delayed: {:?}",
            started.elapsed()
        );

        proxy.set(Fault::Blackhole);
        let err = ask(&proxy, "c", Duration::from_millis(300)).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{err:?}"
        );
        assert_eq!(
            seen.load(Ordering::SeqCst),
            2,
            "a blackholed request never reaches the server"
        );

        proxy.set(Fault::Drop);
        assert!(ask(&proxy, "d", t).is_err());
        assert_eq!(seen.load(Ordering::SeqCst), 2);

        proxy.set(Fault::CutResponse);
        assert!(ask(&proxy, "e", t).is_err(), "the answer is cut");
        let deadline = Instant::now() + t;
        while seen.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            seen.load(Ordering::SeqCst),
            3,
            "…but the request was applied"
        );

        proxy.set(Fault::Pass);
        assert_eq!(ask(&proxy, "f", t).unwrap(), "ok f");
    }

    #[test]
    fn drop_closes_connections_that_are_already_open() {
        let (upstream, _) = line_server();
        let proxy = FaultProxy::start(upstream).unwrap();
        let mut c = TcpStream::connect(proxy.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        writeln!(c, "x").unwrap();
        let mut r = io::BufReader::new(c.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), "ok x");
        proxy.set(Fault::Drop);
        let mut rest = String::new();
        assert_eq!(
            r.read_line(&mut rest).unwrap_or(0),
            0,
            "the open connection was closed"
        );
    }
}
