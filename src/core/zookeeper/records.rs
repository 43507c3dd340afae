//! The jute records the lock recipes exchange with a ZooKeeper 3.8 server,
//! field for field as `zookeeper-jute/src/main/resources/zookeeper.jute`
//! declares them (design 1.3), with the constants that go with them.
//!
//! Every record implements [`Record`] both ways: the client only encodes
//! requests and decodes responses, but the other direction is what a
//! scripted server in tests needs, and round trips check each pair.
//! A null `buffer`/`ustring`/`vector` from the server decodes as empty
//! (design 1.2: "treat -1 as empty"); encoding never writes null.

use super::jute::{JuteError, Reader, Writer};

/// Op codes (`ZooDefs.java`, `interface OpCode`; design 1.6), all of them,
/// though the recipes use only a few.
pub(crate) mod op {
    pub(crate) const NOTIFICATION: i32 = 0;
    pub(crate) const CREATE: i32 = 1;
    pub(crate) const DELETE: i32 = 2;
    pub(crate) const EXISTS: i32 = 3;
    pub(crate) const GET_DATA: i32 = 4;
    pub(crate) const SET_DATA: i32 = 5;
    pub(crate) const GET_ACL: i32 = 6;
    pub(crate) const SET_ACL: i32 = 7;
    pub(crate) const GET_CHILDREN: i32 = 8;
    pub(crate) const SYNC: i32 = 9;
    pub(crate) const PING: i32 = 11;
    pub(crate) const GET_CHILDREN2: i32 = 12;
    pub(crate) const CHECK: i32 = 13;
    pub(crate) const MULTI: i32 = 14;
    pub(crate) const CREATE2: i32 = 15;
    pub(crate) const RECONFIG: i32 = 16;
    pub(crate) const CHECK_WATCHES: i32 = 17;
    pub(crate) const REMOVE_WATCHES: i32 = 18;
    pub(crate) const CREATE_CONTAINER: i32 = 19;
    pub(crate) const DELETE_CONTAINER: i32 = 20;
    pub(crate) const CREATE_TTL: i32 = 21;
    pub(crate) const MULTI_READ: i32 = 22;
    pub(crate) const AUTH: i32 = 100;
    pub(crate) const SET_WATCHES: i32 = 101;
    pub(crate) const SASL: i32 = 102;
    pub(crate) const GET_EPHEMERALS: i32 = 103;
    pub(crate) const GET_ALL_CHILDREN_NUMBER: i32 = 104;
    pub(crate) const SET_WATCHES2: i32 = 105;
    pub(crate) const ADD_WATCH: i32 = 106;
    pub(crate) const WHO_AM_I: i32 = 107;
    pub(crate) const CREATE_SESSION: i32 = -10;
    pub(crate) const CLOSE_SESSION: i32 = -11;
    pub(crate) const ERROR: i32 = -1;
}

/// Reserved xids (`ClientCnxn.java` lines 123-129; design 1.5). Ordinary
/// requests count from 1.
pub(crate) mod xid {
    pub(crate) const NOTIFICATION: i32 = -1;
    pub(crate) const PING: i32 = -2;
    pub(crate) const AUTH_PACKET: i32 = -4;
    pub(crate) const SET_WATCHES: i32 = -8;
}

/// Error codes of `ReplyHeader.err` (`KeeperException.java`, enum `Code`;
/// design 1.10). The session will map unknown values to an `Other(i32)`.
pub(crate) mod err {
    pub(crate) const OK: i32 = 0;
    pub(crate) const SYSTEM_ERROR: i32 = -1;
    pub(crate) const RUNTIME_INCONSISTENCY: i32 = -2;
    pub(crate) const DATA_INCONSISTENCY: i32 = -3;
    pub(crate) const CONNECTION_LOSS: i32 = -4;
    pub(crate) const MARSHALLING_ERROR: i32 = -5;
    pub(crate) const UNIMPLEMENTED: i32 = -6;
    pub(crate) const OPERATION_TIMEOUT: i32 = -7;
    pub(crate) const BAD_ARGUMENTS: i32 = -8;
    pub(crate) const UNKNOWN_SESSION: i32 = -12;
    pub(crate) const NEW_CONFIG_NO_QUORUM: i32 = -13;
    pub(crate) const RECONFIG_IN_PROGRESS: i32 = -14;
    pub(crate) const API_ERROR: i32 = -100;
    pub(crate) const NO_NODE: i32 = -101;
    pub(crate) const NO_AUTH: i32 = -102;
    pub(crate) const BAD_VERSION: i32 = -103;
    pub(crate) const NO_CHILDREN_FOR_EPHEMERALS: i32 = -108;
    pub(crate) const NODE_EXISTS: i32 = -110;
    pub(crate) const NOT_EMPTY: i32 = -111;
    pub(crate) const SESSION_EXPIRED: i32 = -112;
    pub(crate) const INVALID_CALLBACK: i32 = -113;
    pub(crate) const INVALID_ACL: i32 = -114;
    pub(crate) const AUTH_FAILED: i32 = -115;
    pub(crate) const SESSION_MOVED: i32 = -118;
    pub(crate) const NOT_READ_ONLY: i32 = -119;
    pub(crate) const EPHEMERAL_ON_LOCAL_SESSION: i32 = -120;
    pub(crate) const NO_WATCHER: i32 = -121;
    pub(crate) const REQUEST_TIMEOUT: i32 = -122;
    pub(crate) const RECONFIG_DISABLED: i32 = -123;
    pub(crate) const SESSION_CLOSED_REQUIRE_SASL_AUTH: i32 = -124;
    pub(crate) const QUOTA_EXCEEDED: i32 = -125;
    pub(crate) const THROTTLED_OP: i32 = -127;
}

/// `CreateMode` flags of a [`CreateRequest`] (`CreateMode.java`; design 1.7).
/// The TTL modes need the server's `extendedTypesEnabled`.
pub(crate) mod create_mode {
    pub(crate) const PERSISTENT: i32 = 0;
    pub(crate) const EPHEMERAL: i32 = 1;
    pub(crate) const PERSISTENT_SEQUENTIAL: i32 = 2;
    pub(crate) const EPHEMERAL_SEQUENTIAL: i32 = 3;
    pub(crate) const CONTAINER: i32 = 4;
    pub(crate) const PERSISTENT_WITH_TTL: i32 = 5;
    pub(crate) const PERSISTENT_SEQUENTIAL_WITH_TTL: i32 = 6;
}

/// ACL permission bits (`ZooDefs.java`, `interface Perms`; design 1.11).
pub(crate) mod perms {
    pub(crate) const READ: i32 = 1;
    pub(crate) const WRITE: i32 = 2;
    pub(crate) const CREATE: i32 = 4;
    pub(crate) const DELETE: i32 = 8;
    pub(crate) const ADMIN: i32 = 16;
    pub(crate) const ALL: i32 = 31;
}

/// Watch event types and session states (`Watcher.java`, enums
/// `Event.EventType` and `Event.KeeperState`; design 1.8).
pub(crate) mod event {
    pub(crate) const NONE: i32 = -1;
    pub(crate) const NODE_CREATED: i32 = 1;
    pub(crate) const NODE_DELETED: i32 = 2;
    pub(crate) const NODE_DATA_CHANGED: i32 = 3;
    pub(crate) const NODE_CHILDREN_CHANGED: i32 = 4;
    pub(crate) const DATA_WATCH_REMOVED: i32 = 5;
    pub(crate) const CHILD_WATCH_REMOVED: i32 = 6;
    pub(crate) const PERSISTENT_WATCH_REMOVED: i32 = 7;

    pub(crate) const STATE_UNKNOWN: i32 = -1;
    pub(crate) const STATE_DISCONNECTED: i32 = 0;
    pub(crate) const STATE_NO_SYNC_CONNECTED: i32 = 1;
    /// The state every server-sent event carries; the others are set by
    /// the Java client itself.
    pub(crate) const STATE_SYNC_CONNECTED: i32 = 3;
    pub(crate) const STATE_AUTH_FAILED: i32 = 4;
    pub(crate) const STATE_CONNECTED_READ_ONLY: i32 = 5;
    pub(crate) const STATE_SASL_AUTHENTICATED: i32 = 6;
    pub(crate) const STATE_EXPIRED: i32 = -112;
    pub(crate) const STATE_CLOSED: i32 = 7;
}

/// A jute record: fields in declaration order, no tag, no length.
pub(crate) trait Record: Sized {
    fn encode(&self, w: &mut Writer);
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError>;
}

fn string(r: &mut Reader<'_>) -> Result<String, JuteError> {
    Ok(r.ustring()?.unwrap_or_default())
}

fn bytes(r: &mut Reader<'_>) -> Result<Vec<u8>, JuteError> {
    Ok(r.buffer()?.unwrap_or_default())
}

fn strings(r: &mut Reader<'_>) -> Result<Vec<String>, JuteError> {
    Ok(r.vector(4, string)?.unwrap_or_default())
}

/// The first frame a client sends (no header), with the `readOnly` byte the
/// client appends after the record (design 1.4). A new session sends
/// protocol 0, session id 0 and 16 zero bytes of password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectRequest {
    pub(crate) protocol_version: i32,
    pub(crate) last_zxid_seen: i64,
    pub(crate) time_out: i32,
    pub(crate) session_id: i64,
    pub(crate) passwd: Vec<u8>,
    pub(crate) read_only: bool,
}

impl Record for ConnectRequest {
    fn encode(&self, w: &mut Writer) {
        w.int(self.protocol_version)
            .long(self.last_zxid_seen)
            .int(self.time_out);
        w.long(self.session_id)
            .buffer(Some(&self.passwd))
            .bool(self.read_only);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            protocol_version: r.int()?,
            last_zxid_seen: r.long()?,
            time_out: r.int()?,
            session_id: r.long()?,
            passwd: bytes(r)?,
            read_only: r.bool()?,
        })
    }
}

/// The server's first frame. `time_out` is the negotiated timeout; `<= 0`
/// means the session expired. `read_only` is `None` when an old server left
/// the trailing byte out (tolerated, as `readConnectResult` does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectResponse {
    pub(crate) protocol_version: i32,
    pub(crate) time_out: i32,
    pub(crate) session_id: i64,
    pub(crate) passwd: Vec<u8>,
    pub(crate) read_only: Option<bool>,
}

impl Record for ConnectResponse {
    fn encode(&self, w: &mut Writer) {
        w.int(self.protocol_version)
            .int(self.time_out)
            .long(self.session_id);
        w.buffer(Some(&self.passwd));
        if let Some(read_only) = self.read_only {
            w.bool(read_only);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        let protocol_version = r.int()?;
        let time_out = r.int()?;
        let session_id = r.long()?;
        let passwd = bytes(r)?;
        let read_only = if r.remaining() > 0 {
            Some(r.bool()?)
        } else {
            None
        };
        Ok(Self {
            protocol_version,
            time_out,
            session_id,
            passwd,
            read_only,
        })
    }
}

/// In front of every client frame after the connect request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestHeader {
    pub(crate) xid: i32,
    pub(crate) op: i32,
}

impl Record for RequestHeader {
    fn encode(&self, w: &mut Writer) {
        w.int(self.xid).int(self.op);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            xid: r.int()?,
            op: r.int()?,
        })
    }
}

/// In front of every server frame after the connect response. The body
/// that follows is meaningful only when `err == 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplyHeader {
    pub(crate) xid: i32,
    pub(crate) zxid: i64,
    pub(crate) err: i32,
}

impl Record for ReplyHeader {
    fn encode(&self, w: &mut Writer) {
        w.int(self.xid).long(self.zxid).int(self.err);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            xid: r.int()?,
            zxid: r.long()?,
            err: r.int()?,
        })
    }
}

/// A node's metadata (68 bytes). `czxid` is the fencing token of a lock node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) czxid: i64,
    pub(crate) mzxid: i64,
    pub(crate) ctime: i64,
    pub(crate) mtime: i64,
    pub(crate) version: i32,
    pub(crate) cversion: i32,
    pub(crate) aversion: i32,
    pub(crate) ephemeral_owner: i64,
    pub(crate) data_length: i32,
    pub(crate) num_children: i32,
    pub(crate) pzxid: i64,
}

/// Bytes of an encoded [`Stat`].
pub(crate) const STAT_LEN: usize = 68;

impl Record for Stat {
    fn encode(&self, w: &mut Writer) {
        w.long(self.czxid)
            .long(self.mzxid)
            .long(self.ctime)
            .long(self.mtime);
        w.int(self.version).int(self.cversion).int(self.aversion);
        w.long(self.ephemeral_owner)
            .int(self.data_length)
            .int(self.num_children);
        w.long(self.pzxid);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            czxid: r.long()?,
            mzxid: r.long()?,
            ctime: r.long()?,
            mtime: r.long()?,
            version: r.int()?,
            cversion: r.int()?,
            aversion: r.int()?,
            ephemeral_owner: r.long()?,
            data_length: r.int()?,
            num_children: r.int()?,
            pzxid: r.long()?,
        })
    }
}

/// An identity: `world:anyone`, `auth:` (every id of this connection) or
/// `digest:user:base64(sha1(user:password))`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Id {
    pub(crate) scheme: String,
    pub(crate) id: String,
}

impl Record for Id {
    fn encode(&self, w: &mut Writer) {
        w.ustring(Some(&self.scheme)).ustring(Some(&self.id));
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            scheme: string(r)?,
            id: string(r)?,
        })
    }
}

/// One ACL entry: [`perms`] bits granted to an [`Id`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Acl {
    pub(crate) perms: i32,
    pub(crate) id: Id,
}

impl Acl {
    /// `ZooDefs.Ids.OPEN_ACL_UNSAFE`'s one entry: everything to `world:anyone`.
    pub(crate) fn open_unsafe() -> Self {
        let id = Id {
            scheme: "world".into(),
            id: "anyone".into(),
        };
        Self {
            perms: perms::ALL,
            id,
        }
    }
}

impl Record for Acl {
    fn encode(&self, w: &mut Writer) {
        w.int(self.perms);
        self.id.encode(w);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            perms: r.int()?,
            id: Id::decode(r)?,
        })
    }
}

/// `create` (op 1), `create2` (op 15) and `createContainer` (op 19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreateRequest {
    pub(crate) path: String,
    pub(crate) data: Vec<u8>,
    pub(crate) acl: Vec<Acl>,
    /// A [`create_mode`] value.
    pub(crate) flags: i32,
}

impl Record for CreateRequest {
    fn encode(&self, w: &mut Writer) {
        w.ustring(Some(&self.path)).buffer(Some(&self.data));
        w.vector(Some(&self.acl), |w, acl| acl.encode(w))
            .int(self.flags);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            path: string(r)?,
            data: bytes(r)?,
            acl: r.vector(4, Acl::decode)?.unwrap_or_default(),
            flags: r.int()?,
        })
    }
}

/// The reply to `create` (op 1), also what a `create2` nested in a `multi`
/// yields on 3.8.0 (design 0.1): the created path only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreateResponse {
    pub(crate) path: String,
}

impl Record for CreateResponse {
    fn encode(&self, w: &mut Writer) {
        w.ustring(Some(&self.path));
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self { path: string(r)? })
    }
}

/// The reply to `create2` (op 15): the created path (with the sequence
/// suffix) and its [`Stat`], whose `czxid` is the fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Create2Response {
    pub(crate) path: String,
    pub(crate) stat: Stat,
}

impl Record for Create2Response {
    fn encode(&self, w: &mut Writer) {
        w.ustring(Some(&self.path));
        self.stat.encode(w);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            path: string(r)?,
            stat: Stat::decode(r)?,
        })
    }
}

/// `delete` (op 2); `version` -1 deletes whatever version is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeleteRequest {
    pub(crate) path: String,
    pub(crate) version: i32,
}

impl Record for DeleteRequest {
    fn encode(&self, w: &mut Writer) {
        w.ustring(Some(&self.path)).int(self.version);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            path: string(r)?,
            version: r.int()?,
        })
    }
}

/// `{ ustring path; boolean watch; }`, the shape shared by `exists`,
/// `getData` and `getChildren2` requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathWatchRequest {
    pub(crate) path: String,
    pub(crate) watch: bool,
}

/// `exists` (op 3).
pub(crate) type ExistsRequest = PathWatchRequest;
/// `getData` (op 4).
pub(crate) type GetDataRequest = PathWatchRequest;
/// `getChildren2` (op 12).
pub(crate) type GetChildren2Request = PathWatchRequest;

impl Record for PathWatchRequest {
    fn encode(&self, w: &mut Writer) {
        w.ustring(Some(&self.path)).bool(self.watch);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            path: string(r)?,
            watch: r.bool()?,
        })
    }
}

/// `{ Stat stat; }`, the reply to `exists` and to `setData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatResponse {
    pub(crate) stat: Stat,
}

/// The reply to `exists` (op 3).
pub(crate) type ExistsResponse = StatResponse;
/// The reply to `setData` (op 5).
pub(crate) type SetDataResponse = StatResponse;

impl Record for StatResponse {
    fn encode(&self, w: &mut Writer) {
        self.stat.encode(w);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            stat: Stat::decode(r)?,
        })
    }
}

/// The reply to `getData` (op 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GetDataResponse {
    pub(crate) data: Vec<u8>,
    pub(crate) stat: Stat,
}

impl Record for GetDataResponse {
    fn encode(&self, w: &mut Writer) {
        w.buffer(Some(&self.data));
        self.stat.encode(w);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            data: bytes(r)?,
            stat: Stat::decode(r)?,
        })
    }
}

/// The reply to `getChildren2` (op 12). The server sends the children in
/// no particular order: sort before use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GetChildren2Response {
    pub(crate) children: Vec<String>,
    pub(crate) stat: Stat,
}

impl Record for GetChildren2Response {
    fn encode(&self, w: &mut Writer) {
        w.vector(Some(&self.children), |w, c| {
            w.ustring(Some(c));
        });
        self.stat.encode(w);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            children: strings(r)?,
            stat: Stat::decode(r)?,
        })
    }
}

/// `setData` (op 5); `version` -1 matches any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SetDataRequest {
    pub(crate) path: String,
    pub(crate) data: Vec<u8>,
    pub(crate) version: i32,
}

impl Record for SetDataRequest {
    fn encode(&self, w: &mut Writer) {
        w.ustring(Some(&self.path))
            .buffer(Some(&self.data))
            .int(self.version);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            path: string(r)?,
            data: bytes(r)?,
            version: r.int()?,
        })
    }
}

/// A watch notification, after `ReplyHeader { xid: -1, zxid: -1, err: 0 }`.
/// The path is the server's (chroot included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WatcherEvent {
    /// An [`event`] type.
    pub(crate) event_type: i32,
    /// A session state (server-sent: [`event::STATE_SYNC_CONNECTED`]).
    pub(crate) state: i32,
    pub(crate) path: String,
}

impl Record for WatcherEvent {
    fn encode(&self, w: &mut Writer) {
        w.int(self.event_type)
            .int(self.state)
            .ustring(Some(&self.path));
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            event_type: r.int()?,
            state: r.int()?,
            path: string(r)?,
        })
    }
}

/// `auth` (op 100, xid -4): type 0, scheme `digest`, auth `user:password`.
/// `Debug` leaves the credential out.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct AuthPacket {
    pub(crate) auth_type: i32,
    pub(crate) scheme: String,
    pub(crate) auth: Vec<u8>,
}

impl std::fmt::Debug for AuthPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthPacket")
            .field("auth_type", &self.auth_type)
            .field("scheme", &self.scheme)
            .field("auth", &"<redacted>")
            .finish()
    }
}

impl Record for AuthPacket {
    fn encode(&self, w: &mut Writer) {
        w.int(self.auth_type)
            .ustring(Some(&self.scheme))
            .buffer(Some(&self.auth));
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            auth_type: r.int()?,
            scheme: string(r)?,
            auth: bytes(r)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{
        create_mode, Acl, AuthPacket, ConnectRequest, ConnectResponse, Create2Response,
        CreateRequest, CreateResponse, DeleteRequest, GetChildren2Response, GetDataResponse, Id,
        PathWatchRequest, Record, ReplyHeader, RequestHeader, SetDataRequest, Stat, StatResponse,
        WatcherEvent, STAT_LEN,
    };
    use crate::core::zookeeper::jute::{JuteError, Reader, Writer};
    use proptest::prelude::*;
    use std::fmt::Debug;

    fn encode<T: Record>(record: &T) -> Vec<u8> {
        let mut w = Writer::new();
        record.encode(&mut w);
        w.finish().unwrap()
    }

    /// Encodes, decodes the bytes whole, and checks that every strict
    /// prefix of them is refused as truncated rather than misread.
    fn round_trip<T: Record + PartialEq + Debug>(record: &T) -> Vec<u8> {
        let bytes = encode(record);
        let mut r = Reader::new(&bytes);
        assert_eq!(&T::decode(&mut r).unwrap(), record);
        assert_eq!(r.remaining(), 0, "{record:?} left bytes unread");
        bytes
    }

    fn assert_prefixes_truncated<T: Record + Debug>(bytes: &[u8]) {
        for cut in 0..bytes.len() {
            let got = T::decode(&mut Reader::new(&bytes[..cut]));
            assert!(
                matches!(got, Err(JuteError::Truncated { .. })),
                "cut {cut}: {got:?}"
            );
        }
    }

    fn stat() -> Stat {
        Stat {
            czxid: 0x1_0000_0002,
            mzxid: 0x1_0000_0003,
            ctime: 1_700_000_000_000,
            mtime: 1_700_000_000_001,
            version: 1,
            cversion: 2,
            aversion: 3,
            ephemeral_owner: 0x0123_4567_89ab_cdef,
            data_length: 4,
            num_children: 5,
            pzxid: 0x1_0000_0004,
        }
    }

    fn digest_acl() -> Acl {
        let id = Id {
            scheme: "digest".into(),
            id: "u:abcdefghijklmnopqrstuvwxyz0=".into(),
        };
        Acl {
            perms: super::perms::READ | super::perms::ADMIN,
            id,
        }
    }

    fn connect_request() -> ConnectRequest {
        ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 0,
            time_out: 30_000,
            session_id: 0,
            passwd: vec![0; 16],
            read_only: false,
        }
    }

    #[test]
    fn a_new_session_connect_request_is_the_designs_45_bytes() {
        // Design 1.4: `00 00 00 2d | 00 00 00 00 | 00x8 | 00 00 75 30 | 00x8
        // | 00 00 00 10 | 00x16 | 00`, the frame length first.
        let mut expected = vec![0, 0, 0, 0x2d];
        expected.extend_from_slice(&[0, 0, 0, 0]); // protocolVersion
        expected.extend_from_slice(&[0; 8]); // lastZxidSeen
        expected.extend_from_slice(&[0, 0, 0x75, 0x30]); // timeOut 30000
        expected.extend_from_slice(&[0; 8]); // sessionId
        expected.extend_from_slice(&[0, 0, 0, 0x10]); // passwd length 16
        expected.extend_from_slice(&[0; 16]); // passwd
        expected.push(0); // readOnly false
        let body = round_trip(&connect_request());
        assert_eq!(body.len(), 45);
        assert_eq!(crate::core::zookeeper::jute::encode_frame(&body), expected);
    }

    #[test]
    fn a_create_request_is_its_fields_in_order() {
        let request = CreateRequest {
            path: "/edgelock/a".into(),
            data: b"x".to_vec(),
            acl: vec![Acl::open_unsafe()],
            flags: create_mode::EPHEMERAL_SEQUENTIAL,
        };
        let mut expected = vec![0, 0, 0, 11];
        expected.extend_from_slice(b"/edgelock/a"); // path
        expected.extend_from_slice(&[0, 0, 0, 1, b'x']); // data
        expected.extend_from_slice(&[0, 0, 0, 1]); // one ACL
        expected.extend_from_slice(&[0, 0, 0, 0x1f]); // perms ALL
        expected.extend_from_slice(&[0, 0, 0, 5]);
        expected.extend_from_slice(b"world"); // id.scheme
        expected.extend_from_slice(&[0, 0, 0, 6]);
        expected.extend_from_slice(b"anyone"); // id.id
        expected.extend_from_slice(&[0, 0, 0, 3]); // flags EPHEMERAL_SEQUENTIAL
        assert_eq!(round_trip(&request), expected);
    }

    #[test]
    fn a_ping_frame_is_the_designs_12_bytes() {
        let header = RequestHeader {
            xid: super::xid::PING,
            op: super::op::PING,
        };
        let frame = crate::core::zookeeper::jute::encode_frame(&encode(&header));
        assert_eq!(frame, [0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 0x0b]);
    }

    #[test]
    fn a_stat_is_68_bytes() {
        assert_eq!(round_trip(&stat()).len(), STAT_LEN);
    }

    #[test]
    fn connect_response_tolerates_a_missing_read_only_byte() {
        let response = ConnectResponse {
            protocol_version: 0,
            time_out: 4_000,
            session_id: 0x0100_0000_0000_0001,
            passwd: (0..16).collect(),
            read_only: Some(false),
        };
        let bytes = round_trip(&response);
        assert_eq!(bytes.len(), 37);
        let old = ConnectResponse {
            read_only: None,
            ..response
        };
        assert_eq!(
            ConnectResponse::decode(&mut Reader::new(&bytes[..36])),
            Ok(old.clone())
        );
        assert_eq!(round_trip(&old).len(), 36);
    }

    #[test]
    fn null_fields_from_a_server_decode_as_empty() {
        let mut w = Writer::new();
        w.buffer(None);
        stat().encode(&mut w);
        let bytes = w.finish().unwrap();
        let got = GetDataResponse::decode(&mut Reader::new(&bytes)).unwrap();
        assert_eq!(
            got,
            GetDataResponse {
                data: Vec::new(),
                stat: stat()
            }
        );
    }

    #[test]
    fn every_record_round_trips_and_refuses_its_prefixes() {
        let b = round_trip(&connect_request());
        assert_prefixes_truncated::<ConnectRequest>(&b);
        let b = round_trip(&RequestHeader {
            xid: 7,
            op: super::op::CREATE2,
        });
        assert_prefixes_truncated::<RequestHeader>(&b);
        let b = round_trip(&ReplyHeader {
            xid: -1,
            zxid: -1,
            err: super::err::NO_NODE,
        });
        assert_prefixes_truncated::<ReplyHeader>(&b);
        let b = round_trip(&stat());
        assert_prefixes_truncated::<Stat>(&b);
        let b = round_trip(&digest_acl());
        assert_prefixes_truncated::<Acl>(&b);
        let create = CreateRequest {
            path: "/edgelock/n/_c_x-lock-".into(),
            data: Vec::new(),
            acl: vec![digest_acl(), Acl::open_unsafe()],
            flags: create_mode::CONTAINER,
        };
        let b = round_trip(&create);
        assert_prefixes_truncated::<CreateRequest>(&b);
        let b = round_trip(&CreateResponse { path: "/p".into() });
        assert_prefixes_truncated::<CreateResponse>(&b);
        let created = Create2Response {
            path: "/p/lock-0000000001".into(),
            stat: stat(),
        };
        let b = round_trip(&created);
        assert_prefixes_truncated::<Create2Response>(&b);
        let b = round_trip(&DeleteRequest {
            path: "/p".into(),
            version: -1,
        });
        assert_prefixes_truncated::<DeleteRequest>(&b);
        let b = round_trip(&PathWatchRequest {
            path: "/p/q".into(),
            watch: true,
        });
        assert_prefixes_truncated::<PathWatchRequest>(&b);
        let b = round_trip(&StatResponse { stat: stat() });
        assert_prefixes_truncated::<StatResponse>(&b);
    }

    #[test]
    fn every_response_record_round_trips_and_refuses_its_prefixes() {
        let b = round_trip(&GetDataResponse {
            data: b"edgelock:holds=1".to_vec(),
            stat: stat(),
        });
        assert_prefixes_truncated::<GetDataResponse>(&b);
        let children = GetChildren2Response {
            children: vec!["lock-0000000002".into(), "lock-0000000001".into()],
            stat: stat(),
        };
        let b = round_trip(&children);
        assert_prefixes_truncated::<GetChildren2Response>(&b);
        let b = round_trip(&SetDataRequest {
            path: "/p".into(),
            data: vec![1, 2],
            version: 3,
        });
        assert_prefixes_truncated::<SetDataRequest>(&b);
        let event = WatcherEvent {
            event_type: super::event::NODE_DELETED,
            state: super::event::STATE_SYNC_CONNECTED,
            path: "/p/lock-0000000001".into(),
        };
        let b = round_trip(&event);
        assert_prefixes_truncated::<WatcherEvent>(&b);
        let auth = AuthPacket {
            auth_type: 0,
            scheme: "digest".into(),
            auth: b"u:pw".to_vec(),
        };
        let b = round_trip(&auth);
        assert_prefixes_truncated::<AuthPacket>(&b);
        let b = round_trip(&Id {
            scheme: "world".into(),
            id: "anyone".into(),
        });
        assert_prefixes_truncated::<Id>(&b);
        // ConnectResponse's last byte is optional, so only cuts inside the
        // record proper are truncations.
        let response = ConnectResponse {
            protocol_version: 0,
            time_out: 0,
            session_id: 0,
            passwd: vec![0; 16],
            read_only: Some(true),
        };
        let b = round_trip(&response);
        assert_prefixes_truncated::<ConnectResponse>(&b[..b.len() - 1]);
    }

    #[test]
    fn auth_packet_debug_hides_the_credential() {
        let auth = AuthPacket {
            auth_type: 0,
            scheme: "digest".into(),
            auth: b"u:secret".to_vec(),
        };
        let shown = format!("{auth:?}");
        assert!(
            !shown.contains("secret") && !shown.contains("115, 101"),
            "{shown}"
        );
    }

    fn decode_all(bytes: &[u8]) {
        fn one<T: Record>(bytes: &[u8]) {
            let _ = T::decode(&mut Reader::new(bytes));
        }
        one::<ConnectRequest>(bytes);
        one::<ConnectResponse>(bytes);
        one::<RequestHeader>(bytes);
        one::<ReplyHeader>(bytes);
        one::<Stat>(bytes);
        one::<Acl>(bytes);
        one::<CreateRequest>(bytes);
        one::<CreateResponse>(bytes);
        one::<Create2Response>(bytes);
        one::<DeleteRequest>(bytes);
        one::<PathWatchRequest>(bytes);
        one::<StatResponse>(bytes);
        one::<GetDataResponse>(bytes);
        one::<GetChildren2Response>(bytes);
        one::<SetDataRequest>(bytes);
        one::<WatcherEvent>(bytes);
        one::<AuthPacket>(bytes);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_a_record_decoder(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            decode_all(&bytes);
        }

        #[test]
        fn create_requests_round_trip(
            path in "/[a-z0-9_-]{1,20}(/[a-z0-9_-]{1,20}){0,3}",
            data in proptest::collection::vec(any::<u8>(), 0..64),
            perms in 0i32..32,
            flags in 0i32..5,
        ) {
            let acl = vec![Acl { perms, id: Id { scheme: "world".into(), id: "anyone".into() } }];
            let request = CreateRequest { path, data, acl, flags };
            let bytes = encode(&request);
            prop_assert_eq!(CreateRequest::decode(&mut Reader::new(&bytes)), Ok(request));
        }
    }
}
