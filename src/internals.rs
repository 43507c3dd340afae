//! The core's inner modules that the crate's own integration tests, the
//! simulation (`tests/sim`) and the tools (`tools/reliability`'s fuzzer,
//! `tools/devtools`) reach into: codecs, key layouts, Lua scripts and stream
//! splitters. Not part of the API: no semver promise, hidden from the docs.
//! The modules themselves are `pub(crate)`; this is the one door to them.

/// `core::b64`: standard base64 (webdis binary replies, D1 rows).
pub mod b64 {
    pub use crate::core::b64::*;
}

/// `core::json_stream`: the splitter of the Durable Object wake-up stream.
pub mod json_stream {
    pub use crate::core::json_stream::*;
}

/// `core::sse_stream`: the server-sent-events splitter (Upstash subscribe).
pub mod sse_stream {
    pub use crate::core::sse_stream::*;
}

/// The D1 backend's statements and row codec.
pub mod d1 {
    /// `core::d1::codec`.
    pub mod codec {
        pub use crate::core::d1::codec::*;
    }
    /// `core::d1::sql`.
    pub mod sql {
        pub use crate::core::d1::sql::*;
    }
}

/// The Durable Object lock service's request and reply codec.
pub mod durable {
    /// `core::durable::codec`.
    pub mod codec {
        pub use crate::core::durable::codec::*;
    }
}

/// Redis internals: one node's codec, the HTTP protocols, keys, scripts,
/// quorum arithmetic and the wake-up subscription decoder.
pub mod redis {
    /// `core::redis::codec`: one node's requests and replies.
    pub mod codec {
        pub use crate::core::redis::codec::*;
    }
    /// `core::redis::keys`: every key a lock uses.
    pub mod keys {
        pub use crate::core::redis::keys::*;
    }
    /// `core::redis::quorum`: majority arithmetic.
    pub mod quorum {
        pub use crate::core::redis::quorum::*;
    }
    /// `core::redis::resp`: the Redis protocol's own codec (RESP2/RESP3).
    pub mod resp {
        pub use crate::core::redis::resp::*;
    }
    /// `core::redis::round`: one command's answers from a set of nodes.
    pub mod round {
        pub use crate::core::redis::round::*;
    }
    /// `core::redis::scripts`: the Lua scripts, their commands and parsers.
    pub mod scripts {
        pub use crate::core::redis::scripts::*;
    }
    /// `core::redis::subscription`: wake-up channels and push decoding.
    pub mod subscription {
        pub use crate::core::redis::subscription::*;
    }
    /// `core::redis::upstash`: the Upstash REST codec.
    pub mod upstash {
        pub use crate::core::redis::upstash::*;
    }
    /// `core::redis::webdis`: the Webdis codec.
    pub mod webdis {
        pub use crate::core::redis::webdis::*;
    }
}
