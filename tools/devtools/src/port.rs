//! Free loopback ports.

use std::io;
use std::net::{Ipv4Addr, TcpListener};

/// A TCP port on 127.0.0.1 that was free a moment ago.
///
/// The port is released before returning, so another process may take it
/// before the caller binds it; server starters therefore retry with a fresh
/// port when the server fails to come up.
pub fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// `n` distinct free ports (all held open until every one is chosen, so they
/// differ from each other).
pub fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?);
    }
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_bindable() {
        let ports = free_ports(4).unwrap();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 4);
        for p in ports {
            assert_ne!(p, 0);
            TcpListener::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
        }
        assert_ne!(free_port().unwrap(), 0);
    }
}
