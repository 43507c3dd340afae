//! Pooled Redis connections for the gateway.

use std::io;
use std::sync::Mutex;
use std::time::Duration;

use crate::resp::RespConn;

const MAX_IDLE: usize = 32;

/// Why a command could not be run at all (as opposed to a Redis error reply).
#[derive(Debug)]
pub enum PoolError {
    /// Could not connect, or the connection broke.
    Unavailable(io::Error),
    /// Redis did not answer within the timeout (e.g. paused with SIGSTOP).
    Timeout,
}

#[derive(Debug)]
pub struct RedisPool {
    addr: String,
    timeout: Duration,
    idle: Mutex<Vec<RespConn>>,
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Errors that show an idle pooled connection died while unused (Redis was
/// restarted or closed it); the command cannot have reached a live server.
fn is_stale(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

impl RedisPool {
    pub fn new(addr: String, timeout: Duration) -> RedisPool {
        RedisPool {
            addr,
            timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    fn take_idle(&self) -> Option<RespConn> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn put_back(&self, c: RespConn) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(c);
        }
    }

    fn connect(&self) -> Result<RespConn, PoolError> {
        RespConn::connect(self.addr.as_str(), self.timeout).map_err(|e| {
            if is_timeout(&e) {
                PoolError::Timeout
            } else {
                PoolError::Unavailable(e)
            }
        })
    }

    /// Runs `f` on a pooled connection. A connection whose `f` failed is
    /// dropped (its reply stream may be out of step). If a *reused*
    /// connection turns out to be dead, `f` is retried once on a new one.
    pub fn run<T>(&self, f: impl Fn(&mut RespConn) -> io::Result<T>) -> Result<T, PoolError> {
        if let Some(mut c) = self.take_idle() {
            match f(&mut c) {
                Ok(v) => {
                    self.put_back(c);
                    return Ok(v);
                }
                Err(e) if is_stale(&e) => {
                    // Other idle connections are likely dead too.
                    self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
                }
                Err(e) if is_timeout(&e) => return Err(PoolError::Timeout),
                Err(e) => return Err(PoolError::Unavailable(e)),
            }
        }
        let mut c = self.connect()?;
        match f(&mut c) {
            Ok(v) => {
                self.put_back(c);
                Ok(v)
            }
            Err(e) if is_timeout(&e) => Err(PoolError::Timeout),
            Err(e) => Err(PoolError::Unavailable(e)),
        }
    }
}
