//! Plain data that crosses the boundary between the sans-IO core and a driver.
//!
//! Nothing here performs I/O, reads a clock or draws randomness: time arrives as
//! [`Millis`] with every call, randomness through an injected [`Entropy`].

use serde::{Deserialize, Serialize};

use super::error::LockError;
use super::json_fields::{parse, Fields};
use super::kind::{LockKind, MAX_PERMITS};

/// Milliseconds on the driver's clock. The origin is arbitrary, but it must never
/// go backwards within one machine's life (drivers use a monotonic clock).
pub type Millis = u64;

/// Identifies one HTTP request the core asked a driver to perform.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// Identifies one user operation (acquire, release, extend, resume, inspect, close).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// Identifies one held lock inside a machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockId(pub u64);

/// HTTP method of an [`HttpRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `POST`.
    Post,
}

impl Method {
    /// The method as written on the request line.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// Where a request goes: a URL, or a binding the driver resolves by name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// Absolute `http://` or `https://` URL; path segments are already escaped.
    Url(String),
    /// An object the driver was given under `name` (in a Cloudflare Worker a
    /// Durable Object stub or a service binding; in JavaScript any object with
    /// a `fetch(request)` method), asked for `path` (with its query, escaped).
    Binding {
        /// The binding's name, as the user registered it with the driver.
        name: String,
        /// Path and query, starting with `/`.
        path: String,
    },
}

impl Target {
    /// The URL, for a URL target.
    pub fn url(&self) -> Option<&str> {
        match self {
            Target::Url(u) => Some(u),
            Target::Binding { .. } => None,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Url(u) => f.write_str(u),
            Target::Binding { name, path } => write!(f, "binding:{name}{path}"),
        }
    }
}

/// An HTTP request, as data. The driver performs it and answers with [`Input`]s
/// carrying the same `id`.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// Names the request in every [`Input`] that answers it.
    pub id: RequestId,
    /// `GET` or `POST`.
    pub method: Method,
    /// Where it goes.
    pub target: Target,
    /// Header names and values, in order (`Debug` redacts secret ones, see
    /// [`is_secret_header`]).
    pub headers: Vec<(String, String)>,
    /// Request body (empty for none).
    pub body: Vec<u8>,
    /// The core enforces this itself (it emits [`Transmit::Cancel`] when it runs
    /// out); drivers may use it as a safety net for connect/read timeouts.
    pub timeout_ms: Option<u64>,
    /// When true the driver delivers a 2xx body incrementally as [`Input::Chunk`]s
    /// followed by [`Input::StreamEnd`] (etcd watches). A non-2xx answer is
    /// delivered whole as [`Input::Response`].
    pub stream: bool,
}

/// Header names whose values never appear in `Debug` output or error messages.
pub fn is_secret_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "authorization"
        || n == "proxy-authorization"
        || n == "cookie"
        || n.contains("token")
        || n.contains("secret")
        || n.contains("api-key")
}

impl std::fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_secret_header(k) {
                        "<redacted>"
                    } else {
                        v.as_str()
                    },
                )
            })
            .collect();
        f.debug_struct("HttpRequest")
            .field("id", &self.id)
            .field("method", &self.method)
            .field("target", &self.target)
            .field("headers", &headers)
            .field("body_len", &self.body.len())
            .field("timeout_ms", &self.timeout_ms)
            .field("stream", &self.stream)
            .finish()
    }
}

/// A byte stream (TCP, optionally TLS) the core asks a driver to open: the
/// Redis protocol and ZooKeeper's run over one. Its id names it in every
/// [`Transmit`] and [`Input`] that concerns it; ids share one space with
/// requests. The driver only moves bytes: framing, pipelining, reply matching,
/// reconnects and deadlines are the core's.
#[derive(Clone, PartialEq, Eq)]
pub struct StreamOpen {
    /// Names the stream in every [`Transmit::Write`] and [`Input`] about it.
    pub id: RequestId,
    /// Host name or IP address to connect to.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `Some(server name)`: TLS, checking the server's certificate for this
    /// name (and sending it as SNI); `None`: plain TCP.
    pub tls: Option<String>,
    /// The core enforces it itself (it cancels a stream not opened in time);
    /// drivers may use it as their connect timeout.
    pub timeout_ms: Option<u64>,
}

// Host names are not secrets, but keep the shape of `HttpRequest`'s Debug.
impl std::fmt::Debug for StreamOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamOpen")
            .field("id", &self.id)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// What the core asks a driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transmit {
    /// Perform this request and answer it with [`Input`]s carrying its id.
    Send(HttpRequest),
    /// Abort a request (timeout, cancelled waiter, closed watch), or close a
    /// stream. The driver must not deliver anything more for this id; late
    /// deliveries are ignored anyway.
    Cancel(RequestId),
    /// Open a byte stream; answer [`Input::Opened`] once connected (TLS
    /// handshake done), then each read as [`Input::Chunk`], the peer's close
    /// as [`Input::StreamEnd`] and a failure (connect, TLS, I/O) as
    /// [`Input::Failed`].
    Open(StreamOpen),
    /// Write these bytes on an open stream, after those written before.
    Write {
        /// The stream.
        id: RequestId,
        /// The bytes, in order after earlier writes (never printed: they
        /// may carry a password).
        data: Redacted,
    },
}

/// Bytes whose `Debug` shows only their length (stream writes may carry a
/// password, stream reads a lock's owner token).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Redacted(pub Vec<u8>);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes>", self.0.len())
    }
}

/// Why a request produced no HTTP response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportError {
    /// The driver's own timeout fired (the core usually times out first).
    Timeout,
    /// Could not connect (refused, DNS, TLS).
    Connect(String),
    /// The connection broke while sending or receiving.
    Io(String),
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportError::Timeout => write!(f, "timed out"),
            TransportError::Connect(m) => write!(f, "connect failed: {m}"),
            TransportError::Io(m) => write!(f, "connection error: {m}"),
        }
    }
}

/// What a driver feeds back into the core, always tagged with the request id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The whole response of a non-streaming request, or a non-2xx response to a
    /// streaming one.
    Response {
        /// The request answered.
        id: RequestId,
        /// HTTP status code.
        status: u16,
        /// The whole body.
        body: Vec<u8>,
    },
    /// A stream opened by [`Transmit::Open`] is connected (TLS included):
    /// writes may follow.
    Opened {
        /// The stream.
        id: RequestId,
    },
    /// The next piece of a 2xx streaming body, or the next bytes read from a
    /// stream (any split; the core reassembles).
    Chunk {
        /// The request answered.
        id: RequestId,
        /// The next bytes of the body.
        data: Vec<u8>,
    },
    /// The 2xx streaming body ended, or the peer closed the stream.
    StreamEnd {
        /// The request answered.
        id: RequestId,
    },
    /// No (complete) response.
    Failed {
        /// The request that failed.
        id: RequestId,
        /// Why there is no response.
        error: TransportError,
    },
}

impl Input {
    /// Whether this input ends its request or stream (anything but a
    /// `Chunk` or `Opened`).
    pub fn is_final(&self) -> bool {
        !matches!(self, Input::Chunk { .. } | Input::Opened { .. })
    }

    /// The request this input answers.
    pub fn id(&self) -> RequestId {
        match self {
            Input::Response { id, .. }
            | Input::Opened { id }
            | Input::Chunk { id, .. }
            | Input::StreamEnd { id }
            | Input::Failed { id, .. } => *id,
        }
    }
}

/// How long an acquire may wait for a held lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Try once: if someone else holds the lock, finish with [`Outcome::NotAcquired`](super::Outcome::NotAcquired).
    Try,
    /// Wait up to this many milliseconds, then fail with `LockError::Timeout`.
    For(u64),
    /// Wait until granted, cancelled or failed.
    Forever,
}

impl Wait {
    /// When a wait that starts at `now` runs out (`None`: it never does).
    pub fn deadline(self, now: Millis) -> Option<Millis> {
        match self {
            Wait::For(ms) => Some(now.saturating_add(ms)),
            Wait::Try | Wait::Forever => None,
        }
    }
}

/// How one acquire behaves. The default waits forever and uses the client's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquireOptions {
    /// How long to wait while someone else holds the lock.
    pub wait: Wait,
    /// Per-lock TTL (Redis backends). `None` uses the client default. The etcd
    /// backend's TTL is its session lease's TTL and ignores this.
    pub ttl_ms: Option<u64>,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            wait: Wait::Forever,
            ttl_ms: None,
        }
    }
}

/// Which backend a lock lives on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// etcd v3 through its JSON gateway.
    Etcd,
    /// A single Redis node (Upstash REST or Webdis).
    Redis,
    /// Redlock over several Redis nodes.
    Redlock,
    /// The Durable Object lock service (`docs/lock-service-api.md`).
    #[serde(rename = "durable-object")]
    DurableObject,
    /// A lease row in a Cloudflare D1 (SQLite) table, reached by binding.
    D1,
    /// A ZooKeeper ensemble over its own protocol (TCP/TLS): Curator's recipes.
    ZooKeeper,
}

impl BackendKind {
    /// Every backend, in declaration order (the order of their names).
    pub const ALL: [BackendKind; 6] = [
        BackendKind::Etcd,
        BackendKind::Redis,
        BackendKind::Redlock,
        BackendKind::DurableObject,
        BackendKind::D1,
        BackendKind::ZooKeeper,
    ];

    /// Each backend's name, indexed by its declaration order: the one home
    /// of the names (serde's spelling above agrees; a test checks both).
    const NAMES: [&'static str; 6] = [
        "etcd",
        "redis",
        "redlock",
        "durable-object",
        "d1",
        "zookeeper",
    ];

    /// Lowercase name (`etcd`, `redis`, `redlock`, `durable-object`, `d1`,
    /// `zookeeper`),
    /// as used in error messages and serialised handles.
    pub fn as_str(self) -> &'static str {
        // A fieldless enum's discriminant is its declaration index.
        Self::NAMES[self as usize]
    }

    /// The backend named `name` (as [`BackendKind::as_str`] spells it).
    pub fn from_name(name: &str) -> Option<BackendKind> {
        BackendKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// A serialisable description of a held lock, enough for another process to
/// resume (verify, extend, release) it. It contains the owner credential
/// (etcd lease id, Redis random token): treat it like a secret.
///
/// JSON (as `Serialize` writes it and the npm package's `toJSON()` returns it):
/// `{"v":1,"backend":"etcd","name":…,"key":…,"owner":…,"fencingToken":"7","revision":"7"}`,
/// plus `"mode":"shared"` for a shared hold, or `"mode":"permit","limit":3,"slot":1`
/// for a semaphore permit, `"mode":"leader"` for an election's leadership.
/// A handle without `mode` is exclusive (every handle
/// written before lock kinds existed).
#[derive(Clone, PartialEq, Eq)]
pub struct LockHandle {
    /// Format version, currently 1.
    pub v: u32,
    /// The backend that holds the lock.
    pub backend: BackendKind,
    /// The lock's name.
    pub name: String,
    /// The backend key that represents the lock.
    pub key: String,
    /// etcd: the lease id (decimal); Redis/Redlock: the random owner token (hex).
    pub owner: String,
    /// Decimal string so that JSON consumers never lose precision.
    pub fencing_token: u64,
    /// etcd: create revision of `key`; Redis/Redlock: 0.
    pub revision: u64,
    /// The kind of hold (exclusive, shared, or a permit of a semaphore of `limit`).
    pub kind: LockKind,
    /// A permit's slot in `0..limit`; `None` for other kinds.
    pub slot: Option<u32>,
}

impl LockHandle {
    /// Reads the JSON of a handle (as its `Serialize` writes it and the npm
    /// package's `toJSON()` returns it); unknown fields are ignored (no
    /// `finish`: the handle format may grow fields).
    pub fn from_json(json: &str) -> Result<LockHandle, LockError> {
        parse("lock handle", json, |v| {
            let f = Fields::new(v)?;
            let backend = BackendKind::ALL.map(BackendKind::as_str);
            const KINDS: [BackendKind; BackendKind::ALL.len()] = BackendKind::ALL;
            let mode = f
                .opt_choice("mode", &["exclusive", "shared", "permit", "leader"])?
                .unwrap_or(0);
            let limit = f.opt_u32("limit")?;
            let slot = f.opt_u32("slot")?;
            let kind = match (mode, limit, slot) {
                (0, None, None) => LockKind::Exclusive,
                (1, None, None) => LockKind::Shared,
                (3, None, None) => LockKind::Leader,
                (2, Some(limit), Some(slot))
                    if (1..=MAX_PERMITS).contains(&limit) && slot < limit =>
                {
                    LockKind::Permits { limit }
                }
                (2, _, _) => {
                    return Err(format!(
                        "a permit's handle needs `limit` in 1..={MAX_PERMITS} and `slot` below it"
                    ))
                }
                _ => {
                    return Err(
                        "`limit` and `slot` belong to a permit's handle (`mode`: `permit`)".into(),
                    )
                }
            };
            Ok(LockHandle {
                v: f.opt_u32("v")?.ok_or("missing field `v`")?,
                backend: KINDS[f
                    .opt_choice("backend", &backend)?
                    .ok_or("missing field `backend`")?],
                name: f.str("name")?,
                key: f.str("key")?,
                owner: f.str("owner")?,
                fencing_token: f
                    .opt_u64_or_string("fencingToken")?
                    .ok_or("missing field `fencingToken`")?,
                revision: f.opt_u64_or_string("revision")?.unwrap_or(0),
                kind,
                slot: if mode == 2 { slot } else { None },
            })
        })
    }

    /// Refuses (`INVALID_ARGUMENT`) a handle whose kind is not `expected`:
    /// a permit of a semaphore of 3 is not resumed as a shared hold, nor as a
    /// permit of a semaphore of 5.
    pub fn check_kind(&self, expected: LockKind) -> Result<(), LockError> {
        if self.kind == expected {
            return Ok(());
        }
        Err(LockError::invalid(format!(
            "the handle is of a {} hold, not the {} asked for",
            self.kind.describe(),
            expected.describe()
        )))
    }
}

impl Serialize for LockHandle {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let extra = match self.kind {
            LockKind::Exclusive => 0,
            LockKind::Shared | LockKind::Leader => 1,
            LockKind::Permits { .. } => 3,
        };
        let mut m = s.serialize_map(Some(7 + extra))?;
        m.serialize_entry("v", &self.v)?;
        m.serialize_entry("backend", self.backend.as_str())?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("key", &self.key)?;
        m.serialize_entry("owner", &self.owner)?;
        m.serialize_entry("fencingToken", &self.fencing_token.to_string())?;
        m.serialize_entry("revision", &self.revision.to_string())?;
        match self.kind {
            LockKind::Exclusive => {}
            LockKind::Shared => m.serialize_entry("mode", "shared")?,
            LockKind::Leader => m.serialize_entry("mode", "leader")?,
            LockKind::Permits { limit } => {
                m.serialize_entry("mode", "permit")?;
                m.serialize_entry("limit", &limit)?;
                m.serialize_entry("slot", &self.slot.unwrap_or(0))?;
            }
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for LockHandle {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        LockHandle::from_json(&v.to_string()).map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Debug for LockHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockHandle")
            .field("backend", &self.backend)
            .field("name", &self.name)
            .field("key", &self.key)
            .field("owner", &"<redacted>")
            .field("fencing_token", &self.fencing_token)
            .field("revision", &self.revision)
            .field("kind", &self.kind)
            .field("slot", &self.slot)
            .finish()
    }
}

/// Who leads an election: what [`Operation::Leader`](super::Operation::Leader)
/// and [`Operation::Observe`](super::Operation::Observe) report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    /// The value the leader campaigned with or last proclaimed.
    pub value: String,
    /// The leadership's fencing token (the leader's lock token: on etcd its
    /// key's create revision). Strictly increases across leaders.
    pub fencing_token: u64,
}

/// A lock this client holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock's id within its machine.
    pub id: LockId,
    /// The lock's name.
    pub name: String,
    /// Strictly increases across successive holders of `name`. Pass it to the
    /// resource you protect and have it reject lower tokens.
    pub fencing_token: u64,
    /// Conservative end of validity on the driver's clock ([`Millis`]): measured
    /// from when the request that established it was *sent*, minus drift.
    pub expires_at: Millis,
    /// Lets another process resume the lock (contains the owner credential).
    pub handle: LockHandle,
}

impl LockInfo {
    /// The kind of hold (from the handle).
    pub fn kind(&self) -> LockKind {
        self.handle.kind
    }

    /// A permit's slot in `0..limit` (from the handle); `None` for other kinds.
    pub fn slot(&self) -> Option<u32> {
        self.handle.slot
    }
}

/// One holder or waiter of a name, as [`LockStatus`] lists them.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Holder {
    /// Backend-specific identity (etcd: the key; Redis: a short, non-secret id
    /// or empty where the backend does not reveal one).
    pub id: String,
    /// What it holds or waits for.
    pub kind: LockKind,
    /// A permit's slot (holders of a semaphore only).
    pub slot: Option<u32>,
    /// Its fencing token where the backend knows it (holders).
    pub fencing_token: Option<u64>,
}

/// What a backend can tell about a lock name (for `status` / `GET /locks/:name`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LockStatus {
    /// The name asked about.
    pub name: String,
    /// Whether the lock is held (by anyone).
    pub held: bool,
    /// Backend-specific holder identity (etcd: key; Redis: not revealed).
    pub holder: Option<String>,
    /// etcd: the holder's token (its key's create revision); Redis/Redlock: the
    /// highest fencing counter the nodes report.
    pub fencing_token: Option<u64>,
    /// Remaining lifetime of the holder as the backend reports it.
    pub remaining_ms: Option<u64>,
    /// Waiters in grant order, where the backend can tell (etcd).
    pub waiters: Vec<String>,
    /// A semaphore's limit, as stored with its permits (`None`: not a
    /// semaphore, or no permit is held or queued).
    pub limit: Option<u32>,
    /// Every holder (an exclusive holder, the shared holders, or the permits
    /// with their slots), oldest first where the backend can tell.
    pub holders: Vec<Holder>,
    /// Waiters with what they wait for, in grant order where the backend can tell.
    pub queued: Vec<Holder>,
}

/// Why a held lock was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The backend no longer has our key (deleted by someone, or expired).
    KeyGone,
    /// The lease / TTL could not be renewed before it ran out.
    RenewalFailed(String),
    /// The client's conservative validity estimate ran out.
    Expired,
    /// The client was closed while holding it (its keys were deleted).
    ClientClosed,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LostReason::KeyGone => write!(f, "the lock's key is gone from the backend"),
            LostReason::RenewalFailed(m) => write!(f, "renewal failed: {m}"),
            LostReason::Expired => write!(f, "validity ran out before it could be renewed"),
            LostReason::ClientClosed => write!(f, "the client was closed"),
        }
    }
}

/// The source of owner tokens and jitter, injected so that the core never reads
/// an RNG itself. Production drivers use the OS CSPRNG (`getrandom`), tests a
/// seeded generator.
pub trait Entropy {
    /// Fills `buf` with random bytes.
    fn fill(&mut self, buf: &mut [u8]);
}

/// Uniform-ish integer in `0..=max` from the entropy source (jitter only; the
/// slight modulo bias is irrelevant for spreading retries).
pub fn jitter(entropy: &mut dyn Entropy, max: u64) -> u64 {
    if max == 0 {
        return 0;
    }
    let mut b = [0u8; 8];
    entropy.fill(&mut b);
    u64::from_le_bytes(b) % (max + 1)
}

/// Lowercase hex of `n` random bytes: an owner token.
pub fn random_hex(entropy: &mut dyn Entropy, n: usize) -> String {
    let mut buf = vec![0u8; n];
    entropy.fill(&mut buf);
    let mut s = String::with_capacity(n * 2);
    for b in buf {
        s.push(char::from_digit((b >> 4) as u32, 16).unwrap_or('0'));
        s.push(char::from_digit((b & 15) as u32, 16).unwrap_or('0'));
    }
    s
}

/// A small deterministic generator (SplitMix64) for tests and simulations.
#[derive(Clone, Debug)]
pub struct SeededEntropy(u64);

impl SeededEntropy {
    /// A generator starting from `seed`: the same seed gives the same sequence.
    pub fn new(seed: u64) -> Self {
        SeededEntropy(seed)
    }
    /// The next value of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Entropy for SeededEntropy {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BackendKind, LockHandle, LockKind};

    #[test]
    fn every_kind_has_its_name_in_declaration_order_as_serde_spells_it() {
        for (i, kind) in BackendKind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, i);
            let serde_name = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde_name, format!("\"{}\"", kind.as_str()));
            assert_eq!(BackendKind::from_name(kind.as_str()), Some(kind));
        }
    }

    fn handle(kind: LockKind, slot: Option<u32>) -> LockHandle {
        LockHandle {
            v: 1,
            backend: BackendKind::Redis,
            name: "n".into(),
            key: "k".into(),
            owner: "o".into(),
            fencing_token: u64::MAX,
            revision: 7,
            kind,
            slot,
        }
    }

    #[test]
    fn handles_round_trip_with_their_kind() {
        for h in [
            handle(LockKind::Exclusive, None),
            handle(LockKind::Shared, None),
            handle(LockKind::Permits { limit: 3 }, Some(2)),
        ] {
            let json = serde_json::to_string(&h).unwrap();
            assert_eq!(LockHandle::from_json(&json).unwrap(), h, "{json}");
            assert_eq!(serde_json::from_str::<LockHandle>(&json).unwrap(), h);
        }
        let json = serde_json::to_string(&handle(LockKind::Permits { limit: 3 }, Some(2))).unwrap();
        assert!(
            json.contains(r#""mode":"permit","limit":3,"slot":2"#),
            "{json}"
        );
        assert!(
            json.contains(r#""fencingToken":"18446744073709551615""#),
            "{json}"
        );
        // A handle written before kinds existed is exclusive.
        let old = r#"{"v":1,"backend":"etcd","name":"a","key":"k","owner":"1","fencingToken":"5","revision":"5"}"#;
        assert_eq!(
            LockHandle::from_json(old).unwrap().kind,
            LockKind::Exclusive
        );
    }

    #[test]
    fn inconsistent_kinds_in_a_handle_are_refused() {
        let base = r#""v":1,"backend":"redis","name":"a","key":"k","owner":"1","fencingToken":"5""#;
        for extra in [
            r#""mode":"permit""#,
            r#""mode":"permit","limit":3,"slot":3"#,
            r#""mode":"permit","limit":0,"slot":0"#,
            r#""mode":"shared","limit":3"#,
            r#""slot":1"#,
            r#""mode":"writer""#,
            r#""mode":"permit","limit":101,"slot":1"#,
        ] {
            let e = LockHandle::from_json(&format!("{{{base},{extra}}}")).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT", "{extra}: {e}");
        }
    }

    #[test]
    fn a_handle_of_one_kind_is_not_resumed_as_another() {
        let h = handle(LockKind::Permits { limit: 3 }, Some(0));
        assert!(h.check_kind(LockKind::Permits { limit: 3 }).is_ok());
        let e = h.check_kind(LockKind::Permits { limit: 5 }).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.to_string().contains("is of a permit of a semaphore of 3 hold, not the permit of a semaphore of 5 asked for"), "{e}");
        assert_eq!(
            handle(LockKind::Shared, None)
                .check_kind(LockKind::Exclusive)
                .unwrap_err()
                .code(),
            "INVALID_ARGUMENT"
        );
    }
}
