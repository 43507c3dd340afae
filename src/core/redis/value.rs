//! A Redis command as data, and a Redis reply as both HTTP protocols can
//! express it.

use std::fmt;

/// One Redis command: the name and its arguments, each an arbitrary byte string.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisCommand {
    /// The command name, then its arguments.
    pub args: Vec<Vec<u8>>,
}

impl RedisCommand {
    /// The command `name`, without arguments yet.
    pub fn new(name: &str) -> Self {
        RedisCommand {
            args: vec![name.as_bytes().to_vec()],
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, a: impl AsRef<[u8]>) -> Self {
        self.args.push(a.as_ref().to_vec());
        self
    }

    /// The command name as sent (webdis echoes it as the reply's key).
    pub fn name(&self) -> &[u8] {
        self.args.first().map(Vec::as_slice).unwrap_or(&[])
    }
}

// Arguments carry keys and owner tokens: never print them.
impl fmt::Debug for RedisCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RedisCommand({} with {} args)",
            String::from_utf8_lossy(self.name()),
            self.args.len().saturating_sub(1)
        )
    }
}

/// A Redis reply. Status replies (`+OK`) arrive as `Bulk`: neither HTTP
/// protocol distinguishes them reliably, and nothing here needs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisValue {
    /// No value (e.g. a missing key).
    Nil,
    /// An integer reply.
    Int(i64),
    /// A string reply (bulk or status), as bytes.
    Bulk(Vec<u8>),
    /// An array reply.
    Array(Vec<RedisValue>),
    /// A Redis error reply (`-ERR ...`): the command ran and failed.
    Error(String),
}

impl RedisValue {
    /// The integer of an `Int` reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            RedisValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// A flat array of integers (what every edgelock script returns).
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        match self {
            RedisValue::Array(items) => items.iter().map(RedisValue::as_int).collect(),
            _ => None,
        }
    }
}

/// Why a node's HTTP answer could not be turned into a [`RedisValue`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyError {
    /// The HTTP status, when the failure is an HTTP-level refusal.
    pub status: Option<u16>,
    /// Already sanitized (short, no control characters, no token).
    pub message: String,
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "HTTP {s}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}
