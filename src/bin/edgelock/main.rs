//! `edgelock`: run a command while holding a distributed lock, or show who
//! holds one. Hand-rolled argument parsing (std only); see `USAGE`.

use std::io::Write;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use edgelock::core::durable::{DurableConfig, DurableEndpoint};
use edgelock::core::redis::{RedisConfig, RedisNode, RedlockConfig};
use edgelock::core::{
    AcquireOptions, BackendSpec, Holder, LockHandle, LockKind, LockStatus, Wait, MAX_PERMITS,
};
use edgelock::native::{Client, ClientOptions, EtcdAuth, EtcdConfig, Lock, TlsConfig};
use edgelock::LockError;

const USAGE: &str = "\
edgelock - distributed locks over HTTP (etcd JSON gateway)

USAGE:
    edgelock run --etcd URL[,URL...] [OPTIONS] [--limit N | --shared] NAME -- CMD [ARGS...]
    edgelock status --etcd URL[,URL...] [--prefix P] [--json] NAME
    edgelock elect --etcd URL[,URL...] [OPTIONS] [--value V] NAME -- CMD [ARGS...]
    edgelock leader --etcd URL[,URL...] [--prefix P] [--json] [--watch] NAME
    edgelock --help | --version

`run` acquires lock NAME, prints `edgelock: acquired NAME token=N` to stderr,
runs CMD with the lock held and releases the lock when CMD exits. CMD gets
EDGELOCK_FENCING_TOKEN (strictly increasing across holders: pass it to the
resource you protect) and EDGELOCK_LOCK_NAME in its environment. If the lock
is lost while CMD runs, CMD is sent SIGTERM, then SIGKILL after 5 s, and
edgelock exits 75.

Lock kinds: by default the lock is exclusive (one holder at a time).
`--limit N` takes one of N permits of a semaphore instead (at most N
concurrent holders of NAME; every holder must give the same N): CMD also
gets EDGELOCK_SLOT, the permit's slot in 0..N (distinct among the current
holders: use it to pick a resource) and EDGELOCK_LOCK_LIMIT=N, and the
stderr line reads `edgelock: acquired NAME slot=S/N token=T`. `--shared`
takes a shared (reader) hold of a read-write lock: any number of shared
holders, but none while an exclusive holder (a plain `run`) holds it. A
backend that does not offer a kind refuses it with exit 64 before sending
anything (etcd and one Redis node grant --shared; Redlock refuses it). CMD gets
EDGELOCK_LOCK_MODE (exclusive, shared or permit).

Re-entry: for an exclusive lock CMD also gets EDGELOCK_LOCK_HANDLE, the
lock's handle (JSON; it carries the owner credential: keep it in the
environment, never print or log it). A `run NAME` (exclusive) that finds
EDGELOCK_LOCK_HANDLE naming the same NAME on the same backend re-enters the
lock through it instead of waiting for it (so a CMD that itself runs
`edgelock run NAME -- ...` cannot deadlock on its caller): it prints
`edgelock: re-entered NAME token=T` (T is the outer hold's token), runs its
command and then gives its hold back; the lock is freed only when every
hold has ended (the count lives on the backend: etcd, one Redis node, and
on Redlock each node, a quorum deciding). A
handle of another name is ignored; a stale one (its hold gone) is reported
and NAME is acquired as usual. Only the innermost lock's handle is exported.

`elect` campaigns in the election NAME announcing V (default: this host's
name and edgelock's pid), waits until it leads (first come, first served on
etcd), prints `edgelock: elected NAME token=N` to stderr and runs CMD only
while it leads: CMD gets EDGELOCK_FENCING_TOKEN, EDGELOCK_LOCK_NAME,
EDGELOCK_LOCK_MODE=leader and EDGELOCK_LEADER_VALUE; if the leadership is
lost, CMD is stopped as `run` stops it and edgelock exits 75. When CMD
exits, edgelock resigns. --try exits 73 if someone else leads.

`leader` prints the current leader of NAME as `leader: V` and
`fencing_token: N` lines, or `no leader` (exit 0 either way); with --json one
object {value, fencingToken} or null. --watch keeps printing, one line (or
JSON object) per change, pushed by the backend, until edgelock is stopped.

`status` prints the holder's key, its fencing token and the waiters in grant
order (one `waiter:` line each), then, for every holder, one
`hold: mode=M [slot=S] [token=T] [id=ID]` line and, for every waiter, one
`queued: mode=M [limit=N] [id=ID]` line (after `limit: N` for a semaphore);
or one JSON object with --json (`holders` / `queued`: {id, mode, limit,
slot, fencingToken}).

OPTIONS:
    --etcd URLS       etcd gateway endpoint(s), comma-separated; http:// or
                      https:// (see TLS below)
    --redis URLS      Redis node(s), comma-separated: one URL = single-node lock,
                      several = Redlock over independent nodes. Each URL names
                      its protocol: webdis+http(s)://HOST:PORT (Webdis) or
                      upstash+http(s)://HOST:PORT or a bare http(s):// URL
                      (Upstash REST; the token comes from --token or
                      $EDGELOCK_REDIS_TOKEN / $UPSTASH_REDIS_REST_TOKEN)
    --durable-object URL
                      the edgelock Worker's lock service, by its base URL
                      (https://WORKER/lock); the bearer token comes from
                      --token or $EDGELOCK_API_TOKEN; exclusive locks only
    --token T         Upstash (or lock service) bearer token (prefer the
                      environment variable: arguments are visible to other
                      local users)
    --etcd-user U     etcd authentication as user U; the password comes from
                      $EDGELOCK_ETCD_PASSWORD (never an argument); tokens are
                      renewed when etcd says they expired
    --prefix P        key prefix (default: edgelock)
    --ttl MS          etcd: session lease TTL; Redis: lock TTL, renewed at TTL/3
                      (ms, default 10000; etcd: at least 1000);
                      a crashed holder's lock frees up after at most this long;
                      requests time out after min(5000, MS/2) ms
    --wait MS         give up after waiting MS ms for the lock (default: forever)
    --try             do not wait: exit 73 at once if the lock is held
    --fair            one Redis node only: wait in a FIFO queue kept in Redis
                      (waiters get the lock in arrival order); exclusive
                      locks only
    --limit N         (run) take one of N permits of a semaphore (1..=100)
                      instead of the exclusive lock; exports EDGELOCK_SLOT
    --shared          (run) take a shared (reader) hold of a read-write lock;
                      excludes --limit
    --header 'K: V'   extra HTTP header for every request (e.g. authorization);
                      may be repeated
    --ca-file PEM     https: trust the CA certificate(s) in this file instead
                      of the system's roots (default: $EDGELOCK_CA_FILE)
    --cert PEM        https: client certificate chain for mutual TLS (etcd
                      --client-cert-auth); needs --key (default: $EDGELOCK_CERT)
    --key PEM         https: the client certificate's private key, unencrypted
                      PKCS#8/PKCS#1/SEC1 (default: $EDGELOCK_KEY)
    --value V         (elect) what the leader announces (at most 4096 bytes)
    --watch           (leader) print every change of leader until stopped
    --json            (status, leader) print JSON
    -h, --help        this text
    -V, --version     print the version

EXIT CODES:
    0     success (run: the command exited 0)
    N     run: the command's own exit code (128+S if killed by signal S)
    64    usage error (bad option, name, URL, TTL or --limit; a lock kind
          the backend does not offer)
    69    backend unavailable or failing (TRANSPORT / BACKEND errors)
    70    other error
    73    run --try: the lock is held by someone else
    74    run --wait: timed out waiting for the lock
    75    run: the lock was lost while the command ran (the command was killed)
    126   run: the command could not be executed; 127: it was not found
    The command's own codes may coincide with these; use --try/--wait
    consciously if you need to tell them apart.

TLS:
    https:// endpoints are verified against the system's root certificates
    (/etc/ssl/certs; $SSL_CERT_FILE / $SSL_CERT_DIR) or the --ca-file CA(s).
    A certificate that does not verify fails with exit 69 and says why;
    there is no way to skip verification. Unreadable or invalid TLS files
    exit 64 before any request.

NOTES:
    If edgelock itself is killed (Ctrl-C, SIGKILL) it cannot release the lock;
    the session lease then frees it after at most --ttl ms.
";

mod election;

const EX_USAGE: i32 = 64;
const EX_UNAVAILABLE: i32 = 69;
const EX_SOFTWARE: i32 = 70;
const EX_BUSY: i32 = 73;
const EX_WAIT_TIMEOUT: i32 = 74;
const EX_LOST: i32 = 75;
const EX_CANNOT_EXECUTE: i32 = 126;
const EX_NOT_FOUND: i32 = 127;

/// How long a command may take to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);
/// How often the child is polled while waiting for it or for the lock's loss.
const POLL: Duration = Duration::from_millis(50);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = run_cli(args);
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// An error that ends the program with a message and an exit code.
struct Exit {
    code: i32,
    message: String,
}

impl Exit {
    fn usage(message: impl Into<String>) -> Exit {
        Exit {
            code: EX_USAGE,
            message: format!("{}\nRun `edgelock --help` for usage.", message.into()),
        }
    }
    fn lock(e: &LockError) -> Exit {
        Exit {
            code: exit_code(e),
            message: e.to_string(),
        }
    }
}

fn exit_code(e: &LockError) -> i32 {
    match e {
        LockError::InvalidArgument { .. } => EX_USAGE,
        LockError::Transport { .. } | LockError::Backend { .. } | LockError::NoQuorum { .. } => {
            EX_UNAVAILABLE
        }
        LockError::Timeout { .. } => EX_WAIT_TIMEOUT,
        LockError::Lost { .. } => EX_LOST,
        _ => EX_SOFTWARE,
    }
}

fn run_cli(args: Vec<String>) -> i32 {
    let result = match args.first().map(String::as_str) {
        None => Err(Exit::usage("missing command")),
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            Ok(0)
        }
        Some("-V" | "--version") => {
            println!("edgelock {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        Some("run") => parse(&args[1..], Cmd::Run).and_then(|o| cmd_run(&o)),
        Some("status") => parse(&args[1..], Cmd::Status).and_then(|o| cmd_status(&o)),
        Some("elect") => parse(&args[1..], Cmd::Elect).and_then(|o| election::cmd_elect(&o)),
        Some("leader") => parse(&args[1..], Cmd::Leader).and_then(|o| election::cmd_leader(&o)),
        Some(other) => Err(Exit::usage(format!(
            "unknown command {other:?} (expected `run`, `status`, `elect` or `leader`)"
        ))),
    };
    match result {
        Ok(code) => code,
        Err(e) if e.code == 0 => {
            print!("{}", e.message);
            0
        }
        Err(e) => {
            eprintln!("edgelock: {}", e.message);
            e.code
        }
    }
}

/// The subcommand whose options are parsed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Run,
    Status,
    Elect,
    Leader,
}

impl Cmd {
    /// Runs a command under a hold (`run`, `elect`).
    fn runs_command(self) -> bool {
        matches!(self, Cmd::Run | Cmd::Elect)
    }
    fn as_str(self) -> &'static str {
        match self {
            Cmd::Run => "run",
            Cmd::Status => "status",
            Cmd::Elect => "elect",
            Cmd::Leader => "leader",
        }
    }
}

enum Backend {
    Etcd(Vec<String>),
    /// One node: the single-node lock; several: Redlock.
    Redis(Vec<String>),
    /// The Durable Object lock service, by its base URL.
    DurableObject(String),
}

struct Options {
    backend: Backend,
    token: Option<String>,
    prefix: Option<String>,
    ttl_ms: Option<u64>,
    wait_ms: Option<u64>,
    try_only: bool,
    fair: bool,
    kind: LockKind,
    json: bool,
    /// `elect --value`.
    value: Option<String>,
    /// `leader --watch`.
    watch: bool,
    headers: Vec<(String, String)>,
    etcd_user: Option<String>,
    tls: TlsConfig,
    name: String,
    command: Vec<String>,
}

fn parse(args: &[String], cmd: Cmd) -> Result<Options, Exit> {
    let is_run = cmd == Cmd::Run;
    let runs = cmd.runs_command();
    let (mut value_arg, mut watch) = (None, false);
    let mut backend = None;
    let (mut prefix, mut ttl_ms, mut wait_ms) = (None, None, None);
    let (mut try_only, mut json, mut fair, mut shared) = (false, false, false, false);
    let mut limit = None;
    let mut headers = Vec::new();
    let mut token = None;
    let mut etcd_user = None;
    let (mut ca_file, mut cert, mut key) = (None, None, None);
    let mut names = Vec::new();
    let mut command = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        if arg == "--" {
            command = args[i..].to_vec();
            break;
        }
        if !arg.starts_with("--") || arg == "-" {
            if arg.starts_with('-') && arg.len() > 1 {
                return Err(Exit::usage(format!("unknown option {arg:?}")));
            }
            names.push(arg.to_string());
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg, None),
        };
        let mut value = |what: &str| -> Result<String, Exit> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = args
                .get(i)
                .cloned()
                .ok_or_else(|| Exit::usage(format!("{flag} needs {what}")))?;
            i += 1;
            Ok(v)
        };
        match flag {
            "--durable-object" => {
                if backend.is_some() {
                    return Err(Exit::usage(
                        "give exactly one of --etcd / --redis / --durable-object, once",
                    ));
                }
                backend = Some(Backend::DurableObject(value("a URL")?.trim().to_string()));
            }
            "--etcd" | "--redis" => {
                if backend.is_some() {
                    return Err(Exit::usage(
                        "give exactly one of --etcd / --redis / --durable-object, once",
                    ));
                }
                let urls: Vec<String> = value("a URL")?
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                if urls.is_empty() {
                    return Err(Exit::usage(format!("{flag} needs at least one URL")));
                }
                backend = Some(if flag == "--etcd" {
                    Backend::Etcd(urls)
                } else {
                    Backend::Redis(urls)
                });
            }
            "--prefix" => prefix = Some(value("a prefix")?),
            "--token" => token = Some(value("a token")?),
            "--etcd-user" => etcd_user = Some(value("a user name")?),
            "--ca-file" => ca_file = Some(value("a PEM file")?),
            "--cert" => cert = Some(value("a PEM file")?),
            "--key" => key = Some(value("a PEM file")?),
            "--ttl" if runs => ttl_ms = Some(parse_ms("--ttl", &value("milliseconds")?)?),
            "--wait" if runs => wait_ms = Some(parse_ms("--wait", &value("milliseconds")?)?),
            "--try" if runs && inline.is_none() => try_only = true,
            "--value" if cmd == Cmd::Elect => value_arg = Some(value("a value")?),
            "--watch" if cmd == Cmd::Leader && inline.is_none() => watch = true,
            "--fair" if is_run && inline.is_none() => fair = true,
            "--shared" if is_run && inline.is_none() => shared = true,
            "--limit" if is_run => limit = Some(parse_limit(&value("a number of permits")?)?),
            "--json" if !runs && inline.is_none() => json = true,
            "--header" => {
                let h = value("'Name: value'")?;
                let (k, v) = h
                    .split_once(':')
                    .ok_or_else(|| Exit::usage("--header must look like 'Name: value'"))?;
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
            // Not an error: `run_cli` prints the message to stdout for code 0.
            "--help" => {
                return Err(Exit {
                    code: 0,
                    message: USAGE.to_string(),
                })
            }
            _ => return Err(Exit::usage(format!("unknown option {flag:?}"))),
        }
    }
    let backend = backend.ok_or_else(|| {
        Exit::usage("--etcd URL, --redis URL or --durable-object URL is required")
    })?;
    if fair && !matches!(&backend, Backend::Redis(urls) if urls.len() == 1) {
        return Err(Exit::usage(
            "--fair needs exactly one --redis URL (the fair queue is a single-node lock)",
        ));
    }
    if etcd_user.is_some() && !matches!(backend, Backend::Etcd(_)) {
        return Err(Exit::usage("--etcd-user needs --etcd"));
    }
    let tls = tls_config(ca_file, cert, key)?;
    if try_only && wait_ms.is_some() {
        return Err(Exit::usage("--try and --wait exclude each other"));
    }
    let kind = match (limit, shared) {
        (Some(_), true) => return Err(Exit::usage("--limit and --shared exclude each other")),
        (Some(kind), false) => kind,
        (None, true) => LockKind::Shared,
        (None, false) => LockKind::Exclusive,
    };
    if fair && kind != LockKind::Exclusive {
        // The Redis recipe's fair queue orders exclusive holders only; a
        // silently unfair semaphore would surprise.
        return Err(Exit::usage(
            "--fair applies to the exclusive lock, not to --limit or --shared",
        ));
    }
    let name = match names.as_slice() {
        [n] => n.clone(),
        [] => return Err(Exit::usage("missing lock NAME")),
        _ => {
            return Err(Exit::usage(format!(
                "expected one lock NAME, got {}",
                names.len()
            )))
        }
    };
    if runs && command.is_empty() {
        return Err(Exit::usage(format!(
            "missing command: edgelock {} ... NAME -- CMD [ARGS...]",
            cmd.as_str()
        )));
    }
    if !runs && !command.is_empty() {
        return Err(Exit::usage(format!("`{}` takes no command", cmd.as_str())));
    }
    if let Some(v) = &value_arg {
        edgelock::core::check_campaign_value(v).map_err(|e| Exit::usage(e.to_string()))?;
    }
    Ok(Options {
        backend,
        token,
        prefix,
        ttl_ms,
        wait_ms,
        try_only,
        fair,
        kind,
        json,
        value: value_arg,
        watch,
        headers,
        etcd_user,
        tls,
        name,
        command,
    })
}

/// TLS files from the flags, else from the environment (an empty variable
/// counts as unset). The files are read by `Client::connect_with`.
fn tls_config(
    ca_file: Option<String>,
    cert: Option<String>,
    key: Option<String>,
) -> Result<TlsConfig, Exit> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let ca_file = ca_file.or_else(|| env("EDGELOCK_CA_FILE"));
    let cert = cert.or_else(|| env("EDGELOCK_CERT"));
    let key = key.or_else(|| env("EDGELOCK_KEY"));
    let mut tls = TlsConfig::new();
    if let Some(ca) = ca_file {
        tls = tls.with_ca_file(ca);
    }
    match (cert, key) {
        (Some(c), Some(k)) => tls = tls.with_client_cert(c, k),
        (None, None) => {}
        (Some(_), None) => {
            return Err(Exit::usage(
                "--cert needs --key (the client certificate's private key)",
            ))
        }
        (None, Some(_)) => return Err(Exit::usage("--key needs --cert (the client certificate)")),
    }
    Ok(tls)
}

/// `--limit N`: a semaphore of N permits, N in 1..=MAX_PERMITS.
fn parse_limit(v: &str) -> Result<LockKind, Exit> {
    let bad = || {
        Exit::usage(format!(
            "--limit needs a whole number of permits in 1..={MAX_PERMITS}, got {v:?}"
        ))
    };
    let n = v.trim().parse::<u64>().map_err(|_| bad())?;
    LockKind::permits(n).map_err(|_| bad())
}

/// A kind's name as handles, `status` and EDGELOCK_LOCK_MODE spell it.
fn mode_name(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Permits { .. } => "permit",
        other => other.as_str(),
    }
}

fn limit_of(kind: LockKind) -> Option<u32> {
    match kind {
        LockKind::Permits { limit } => Some(limit),
        _ => None,
    }
}

fn parse_ms(flag: &str, v: &str) -> Result<u64, Exit> {
    v.trim().parse::<u64>().map_err(|_| {
        Exit::usage(format!(
            "{flag} needs a whole number of milliseconds, got {v:?}"
        ))
    })
}

fn connect(o: &Options) -> Result<Client, Exit> {
    match &o.backend {
        Backend::Etcd(endpoints) => {
            let mut cfg = EtcdConfig::new(endpoints.clone());
            if let Some(p) = &o.prefix {
                cfg.prefix = p.clone();
            }
            if let Some(t) = o.ttl_ms {
                cfg.session_ttl_ms = t;
                // A request slower than half the lease's life is useless for
                // keeping it alive (and a lease must outlive one request).
                cfg.request_timeout_ms = cfg.request_timeout_ms.min(t / 2).max(1);
            }
            cfg.headers = o.headers.clone();
            if let Some(user) = &o.etcd_user {
                let password = std::env::var("EDGELOCK_ETCD_PASSWORD").map_err(|_| {
                    Exit::usage("--etcd-user needs the password in $EDGELOCK_ETCD_PASSWORD")
                })?;
                cfg.auth = Some(EtcdAuth {
                    username: user.clone(),
                    password,
                });
            }
            Client::connect_with(
                BackendSpec::Etcd(cfg),
                &ClientOptions::new().with_tls(o.tls.clone()),
            )
            .map_err(|e| Exit::lock(&e))
        }
        Backend::Redis(urls) => {
            let token = o
                .token
                .clone()
                .or_else(|| std::env::var("EDGELOCK_REDIS_TOKEN").ok())
                .or_else(|| std::env::var("UPSTASH_REDIS_REST_TOKEN").ok());
            let nodes = urls
                .iter()
                .map(|u| redis_node(u, token.as_deref()))
                .collect::<Result<Vec<_>, _>>()?;
            let spec = if let [node] = nodes.as_slice() {
                let mut cfg = RedisConfig::new(node.clone());
                cfg.fair = o.fair;
                if let Some(p) = &o.prefix {
                    cfg.prefix = p.clone();
                }
                if let Some(t) = o.ttl_ms {
                    cfg.ttl_ms = t;
                    cfg.request_timeout_ms = cfg.request_timeout_ms.min(t / 2).max(1);
                }
                BackendSpec::Redis(cfg)
            } else {
                let mut cfg = RedlockConfig::new(nodes);
                if let Some(p) = &o.prefix {
                    cfg.prefix = p.clone();
                }
                if let Some(t) = o.ttl_ms {
                    cfg.ttl_ms = t;
                    cfg.request_timeout_ms = cfg.request_timeout_ms.min(t / 4).max(1);
                }
                BackendSpec::Redlock(cfg)
            };
            Client::connect_with(spec, &ClientOptions::new().with_tls(o.tls.clone()))
                .map_err(|e| Exit::lock(&e))
        }
        Backend::DurableObject(url) => {
            let mut cfg = DurableConfig::new(DurableEndpoint::Url(url.clone()));
            cfg.token = o
                .token
                .clone()
                .or_else(|| std::env::var("EDGELOCK_API_TOKEN").ok());
            if let Some(t) = o.ttl_ms {
                cfg.ttl_ms = t;
                cfg.request_timeout_ms = cfg.request_timeout_ms.min(t / 2).max(1);
            }
            Client::connect_with(
                BackendSpec::DurableObject(cfg),
                &ClientOptions::new().with_tls(o.tls.clone()),
            )
            .map_err(|e| Exit::lock(&e))
        }
    }
}

/// `webdis+http(s)://…`, `upstash+http(s)://…` or a bare Upstash URL → a node (parsed by the core).
fn redis_node(url: &str, token: Option<&str>) -> Result<RedisNode, Exit> {
    RedisNode::from_spec(url, token).map_err(|e| Exit::lock(&e))
}

fn cmd_status(o: &Options) -> Result<i32, Exit> {
    let client = connect(o)?;
    let status = client.inspect(&o.name).map_err(|e| Exit::lock(&e));
    let _ = client.close();
    let status = status?;
    if o.json {
        println!("{}", status_json(&status));
    } else {
        print!("{}", status_text(&status));
    }
    Ok(0)
}

fn status_text(s: &LockStatus) -> String {
    let mut out = format!("name: {}\nheld: {}\n", s.name, s.held);
    if let Some(h) = &s.holder {
        out.push_str(&format!("holder: {h}\n"));
    }
    if let Some(t) = s.fencing_token {
        out.push_str(&format!("fencing_token: {t}\n"));
    }
    if let Some(r) = s.remaining_ms {
        out.push_str(&format!("remaining_ms: {r}\n"));
    }
    for w in &s.waiters {
        out.push_str(&format!("waiter: {w}\n"));
    }
    if let Some(l) = s.limit {
        out.push_str(&format!("limit: {l}\n"));
    }
    for h in &s.holders {
        out.push_str(&format!("hold: {}\n", holder_text(h, true)));
    }
    for q in &s.queued {
        out.push_str(&format!("queued: {}\n", holder_text(q, false)));
    }
    out
}

/// `mode=M [limit=N] [slot=S] [token=T] [id=ID]` (holders show their slot,
/// waiters the limit they wait for).
fn holder_text(h: &Holder, holding: bool) -> String {
    let mut out = format!("mode={}", mode_name(h.kind));
    match (holding, h.slot, limit_of(h.kind)) {
        (true, Some(slot), _) => out.push_str(&format!(" slot={slot}")),
        (false, _, Some(limit)) => out.push_str(&format!(" limit={limit}")),
        _ => {}
    }
    if let Some(t) = h.fencing_token {
        out.push_str(&format!(" token={t}"));
    }
    if !h.id.is_empty() {
        out.push_str(&format!(" id={}", h.id));
    }
    out
}

fn holder_json(h: &Holder) -> serde_json::Value {
    serde_json::json!({
        "id": h.id,
        "mode": mode_name(h.kind),
        "limit": limit_of(h.kind),
        "slot": h.slot,
        "fencingToken": h.fencing_token.map(|t| t.to_string()),
    })
}

fn status_json(s: &LockStatus) -> String {
    serde_json::json!({
        "name": s.name,
        "held": s.held,
        "holder": s.holder,
        // Decimal string, like LockHandle's, so JSON consumers never lose precision.
        "fencingToken": s.fencing_token.map(|t| t.to_string()),
        "remainingMs": s.remaining_ms,
        "waiters": s.waiters,
        "limit": s.limit,
        "holders": s.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "queued": s.queued.iter().map(holder_json).collect::<Vec<_>>(),
    })
    .to_string()
}

fn cmd_run(o: &Options) -> Result<i32, Exit> {
    let client = connect(o)?;
    let result = hold_and_run(&client, o);
    let _ = client.close(); // revokes the session lease; errors leave it to expire
    result
}

/// The wait `--try` / `--wait` ask for.
fn wait_of(o: &Options) -> Wait {
    match (o.try_only, o.wait_ms) {
        (true, _) => Wait::Try,
        (false, Some(ms)) => Wait::For(ms),
        (false, None) => Wait::Forever,
    }
}

/// The variable `run` exports the exclusive lock's handle in (a credential:
/// only in the command's environment, never printed).
const HANDLE_VAR: &str = "EDGELOCK_LOCK_HANDLE";

/// A nested `run` of the lock its caller holds: the handle that
/// [`HANDLE_VAR`] carries, if it names NAME on this client's backend.
fn inherited_handle(client: &Client, o: &Options) -> Option<LockHandle> {
    if o.kind != LockKind::Exclusive {
        return None;
    }
    let json = std::env::var(HANDLE_VAR).ok()?;
    let handle = LockHandle::from_json(&json).ok()?;
    (handle.name == o.name
        && handle.kind == LockKind::Exclusive
        && handle.backend.as_str() == client.backend())
    .then_some(handle)
}

fn hold_and_run(client: &Client, o: &Options) -> Result<i32, Exit> {
    if let Some(handle) = inherited_handle(client, o) {
        // Our caller holds NAME: re-enter through its handle instead of
        // waiting forever on ourselves. One more hold, counted on the
        // backend; our release at the end takes it away again.
        match client.reenter(&handle) {
            Ok(lock) => {
                eprintln!(
                    "edgelock: re-entered {} token={}",
                    o.name,
                    lock.fencing_token()
                );
                return run_holding(lock, o, &[]);
            }
            // A stale handle (its hold is gone): take the lock as usual.
            // Anything else (no quorum reachable, a handle of another
            // prefix) is an error rather than a wait on ourselves.
            Err(e @ LockError::Lost { .. }) => {
                eprintln!(
                    "edgelock: {HANDLE_VAR} does not hold {} here ({e}); acquiring it",
                    o.name
                )
            }
            Err(e) => return Err(Exit::lock(&e)),
        }
    }
    let wait = wait_of(o);
    let lock =
        match client.acquire_kind(&o.name, o.kind, AcquireOptions { wait, ttl_ms: None }, None) {
            Ok(Some(lock)) => lock,
            Ok(None) if limit_of(o.kind).is_some() => {
                return Err(Exit {
                    code: EX_BUSY,
                    message: format!("every permit of {:?} is taken", o.name),
                })
            }
            Ok(None) => {
                return Err(Exit {
                    code: EX_BUSY,
                    message: format!("lock {:?} is held by someone else", o.name),
                })
            }
            Err(e) => return Err(Exit::lock(&e)),
        };
    // The token stays last on the line: scripts read it after `token=`.
    let held = match (lock.kind(), lock.slot()) {
        (LockKind::Permits { limit }, Some(slot)) => format!(" slot={slot}/{limit}"),
        (LockKind::Exclusive, _) => String::new(),
        (kind, _) => format!(" {}", mode_name(kind)),
    };
    eprintln!(
        "edgelock: acquired {}{held} token={}",
        o.name,
        lock.fencing_token()
    );
    run_holding(lock, o, &[])
}

/// Runs the command while `lock` is held (`extra_env` on top of the lock's
/// own variables), stops it if the lock is lost, and releases the lock
/// when it exits.
fn run_holding(lock: Lock, o: &Options, extra_env: &[(&str, String)]) -> Result<i32, Exit> {
    let (program, args) = match o.command.split_first() {
        Some(split) => split,
        None => return Err(Exit::usage("missing command")),
    };
    let spawned = Command::new(program)
        .args(args)
        .envs(extra_env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("EDGELOCK_FENCING_TOKEN", lock.fencing_token().to_string())
        .env("EDGELOCK_LOCK_NAME", &o.name)
        .env("EDGELOCK_LOCK_MODE", mode_name(lock.kind()))
        .envs(lock.slot().map(|slot| ("EDGELOCK_SLOT", slot.to_string())))
        .envs(limit_of(lock.kind()).map(|limit| ("EDGELOCK_LOCK_LIMIT", limit.to_string())))
        .envs(
            (lock.kind() == LockKind::Exclusive)
                .then(|| serde_json::to_string(lock.handle()).ok())
                .flatten()
                .map(|json| (HANDLE_VAR, json)),
        )
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = lock.release();
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => EX_NOT_FOUND,
                std::io::ErrorKind::PermissionDenied => EX_CANNOT_EXECUTE,
                _ => EX_SOFTWARE,
            };
            return Err(Exit {
                code,
                message: format!("cannot run {program:?}: {e}"),
            });
        }
    };
    match supervise(&mut child, &lock) {
        Supervised::Exited(status) => finish(lock, status, &o.name),
        Supervised::Lost(reason) => {
            stop_child(&mut child);
            Err(Exit { code: EX_LOST, message: format!("lock {:?} was lost while the command ran ({reason}); the command was terminated", o.name) })
        }
        Supervised::WaitFailed(e) => {
            stop_child(&mut child);
            let _ = lock.release();
            Err(Exit {
                code: EX_SOFTWARE,
                message: format!("cannot wait for the command: {e}"),
            })
        }
    }
}

enum Supervised {
    Exited(ExitStatus),
    Lost(String),
    WaitFailed(std::io::Error),
}

/// Waits for the child to exit or the lock to be lost, whichever comes first.
fn supervise(child: &mut Child, lock: &Lock) -> Supervised {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Supervised::Exited(status),
            Ok(None) => {}
            Err(e) => return Supervised::WaitFailed(e),
        }
        // Doubles as the poll interval's sleep, and wakes at once on loss.
        if let Some(reason) = lock.wait_lost(Some(POLL)) {
            return Supervised::Lost(reason.to_string());
        }
    }
}

/// SIGTERM through the `kill` utility (std has no signal API), then SIGKILL
/// (`Child::kill`) if the command has not exited within `TERM_GRACE`.
fn stop_child(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let t = Instant::now();
    while t.elapsed() < TERM_GRACE {
        if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
            return;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn finish(lock: Lock, status: ExitStatus, name: &str) -> Result<i32, Exit> {
    let code = exit_status_code(status);
    match lock.release() {
        Ok(true) => Ok(code),
        Ok(false) => Err(Exit {
            code: EX_LOST,
            message: format!(
                "lock {name:?} was lost before the command finished (command exit code {code})"
            ),
        }),
        Err(e) => {
            // The command ran under the lock; the session close (or lease
            // expiry) still frees it.
            eprintln!("edgelock: warning: releasing lock {name:?} failed: {e}");
            Ok(code)
        }
    }
}

fn exit_status_code(status: ExitStatus) -> i32 {
    if let Some(c) = status.code() {
        return c;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return 128 + sig;
        }
    }
    EX_SOFTWARE
}
