//! How the engine reaches one node: an HTTP front (Upstash REST, Webdis),
//! one request per command, or the Redis protocol itself on a stream
//! ([`Connection`]), commands pipelined. The recipes see the same answers
//! either way.

use super::address::RespAddress;
use super::codec::NodeCodec;
use super::config::{RedisNode, RedisProtocol};
use super::connection::{Connection, Mode};
use crate::core::LockError;

/// One node, by the way it is reached.
#[derive(Debug)]
pub(crate) enum NodeLink {
    /// Upstash REST or Webdis.
    Http(NodeCodec),
    /// The Redis protocol over TCP or TLS.
    Resp(Box<RespLinks>),
}

/// A Redis-protocol node's two streams: commands, and the wake-up
/// subscriptions of every waiter of this client (Redis answers nothing but
/// subscription commands on a subscribed connection).
#[derive(Debug)]
pub(crate) struct RespLinks {
    pub(crate) commands: Connection,
    pub(crate) pubsub: Connection,
}

impl NodeLink {
    /// The link for `node`, its options checked. A stream's connect is
    /// bounded by the request timeout.
    pub(crate) fn new(node: &RedisNode, request_timeout_ms: u64) -> Result<Self, LockError> {
        match node.protocol {
            RedisProtocol::Resp => {
                let address = RespAddress::parse(&node.url, node.token.as_deref())?;
                let conn = |mode| Connection::new(address.clone(), request_timeout_ms, mode);
                Ok(NodeLink::Resp(Box::new(RespLinks {
                    commands: conn(Mode::Commands),
                    pubsub: conn(Mode::Subscriber),
                })))
            }
            RedisProtocol::Upstash | RedisProtocol::Webdis => {
                Ok(NodeLink::Http(NodeCodec::new(node)?))
            }
        }
    }

    /// The node as users name it (no credentials): to spot a node listed twice.
    pub(crate) fn name(&self) -> String {
        match self {
            NodeLink::Http(codec) => codec.base_url().to_string(),
            NodeLink::Resp(r) => r.commands.address().public_url(),
        }
    }

    /// Removes this node's credential from a backend-provided text.
    pub(crate) fn scrub(&self, s: &str) -> String {
        match self {
            NodeLink::Http(codec) => codec.scrub(s),
            NodeLink::Resp(r) => r.commands.scrub(s),
        }
    }
}
