//! The `--help` texts: the overview (`edgelock --help`) and one page per
//! command (`edgelock run --help`, `edgelock help run`). The options' own
//! lines are in `args.rs`, next to the flags they describe.

/// The sections every page ends with, as macros so `concat!` can join them.
macro_rules! backends {
    () => {
        "\
BACKENDS (give exactly one):
    --etcd URL[,URL...]     etcd v3 through its JSON gateway (the endpoints of
                            one cluster)
    --redis URL             one Redis node: the Redis protocol itself
                            (redis://[USER[:PASSWORD]@]HOST[:PORT][/DB], rediss://
                            for TLS; the password from the URL, --token,
                            $EDGELOCK_REDIS_PASSWORD or $REDISCLI_AUTH), Upstash
                            REST (upstash+http(s)://HOST:PORT or a bare http(s)://
                            URL; needs a token) or Webdis (webdis+http(s)://...)
    --redis URL,URL,...     Redlock: a majority of independent Redis nodes, each
                            redis://, Upstash REST or Webdis (they may be mixed)
    --durable-object URL    the edgelock Worker's Durable Object lock service
                            (https://WORKER/lock; bearer token)
    --zookeeper CONNECT     a ZooKeeper ensemble (HOST:PORT[,HOST:PORT...][/CHROOT];
                            Curator's InterProcessMutex, so Curator clients of
                            the same path exclude each other; exclusive locks;
                            --ttl is the session timeout asked for)
    A backend that does not offer a lock kind refuses it with exit 64 before
    sending anything (etcd and one Redis node grant --shared; Redlock refuses it).
"
    };
}

macro_rules! exit_codes {
    () => {
        "
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
"
    };
}

macro_rules! tls_and_notes {
    () => {
        "
TLS:
    https:// endpoints are verified against the system's root certificates
    (/etc/ssl/certs; $SSL_CERT_FILE / $SSL_CERT_DIR) or the --ca-file CA(s).
    A certificate that does not verify fails with exit 69 and says why;
    there is no way to skip verification. Unreadable or invalid TLS files
    exit 64 before any request.

NOTES:
    If edgelock itself is killed (Ctrl-C, SIGKILL) it cannot release the lock;
    the session lease then frees it after at most --ttl ms.
"
    };
}

pub(crate) const ABOUT: &str = "\
edgelock - distributed locks: etcd (JSON gateway), Redis (redis:// or Upstash
REST or Webdis), Redlock, and the edgelock Worker's Durable Object lock service.
Runs a command while holding a lock (or leading an election), or shows who
holds (or leads). `edgelock help COMMAND` describes each command.";

/// Every command at a glance (clap prints it after `Usage: `).
pub(crate) const USAGE: &str = "\
edgelock run BACKEND [OPTIONS] [--limit N | --shared] NAME -- CMD [ARGS...]
       edgelock status BACKEND [--prefix P] [--json] NAME
       edgelock elect BACKEND [OPTIONS] [--value V] NAME -- CMD [ARGS...]
       edgelock leader BACKEND [--prefix P] [--json] [--watch] NAME
       edgelock --help | --version | help COMMAND

BACKEND is --etcd URL[,URL...], --redis URL[,URL...] or --durable-object URL";

/// The end of every page: the backends, the exit codes, TLS and notes.
pub(crate) const AFTER: &str = concat!(backends!(), exit_codes!(), tls_and_notes!());

pub(crate) const RUN_ABOUT: &str = "Run a command while holding lock NAME";
pub(crate) const RUN_USAGE: &str =
    "edgelock run BACKEND [OPTIONS] [--limit N | --shared] NAME -- CMD [ARGS...]";
pub(crate) const RUN_LONG: &str = "\
Run a command while holding lock NAME.

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
anything. CMD gets EDGELOCK_LOCK_MODE (exclusive, shared or permit).

Re-entry: for an exclusive lock CMD also gets EDGELOCK_LOCK_HANDLE, the
lock's handle (JSON; it carries the owner credential: keep it in the
environment, never print or log it). A `run NAME` (exclusive) that finds
EDGELOCK_LOCK_HANDLE naming the same NAME on the same backend re-enters the
lock through it instead of waiting for it (so a CMD that itself runs
`edgelock run NAME -- ...` cannot deadlock on its caller): it prints
`edgelock: re-entered NAME token=T` (T is the outer hold's token), runs its
command and then gives its hold back; the lock is freed only when every
hold has ended (the count lives on the backend: etcd, one Redis node, and
on Redlock each node, a quorum deciding). A handle of another name is
ignored; a stale one (its hold gone) is reported and NAME is acquired as
usual. Only the innermost lock's handle is exported.";

pub(crate) const STATUS_ABOUT: &str = "Show who holds lock NAME and who waits for it";
pub(crate) const STATUS_USAGE: &str = "edgelock status BACKEND [--prefix P] [--json] NAME";
pub(crate) const STATUS_LONG: &str = "\
Show who holds lock NAME and who waits for it.

`status` prints the holder's key, its fencing token and the waiters in grant
order (one `waiter:` line each), then, for every holder, one
`hold: mode=M [slot=S] [token=T] [id=ID]` line and, for every waiter, one
`queued: mode=M [limit=N] [id=ID]` line (after `limit: N` for a semaphore);
or one JSON object with --json (`holders` / `queued`: {id, mode, limit,
slot, fencingToken}).";

pub(crate) const ELECT_ABOUT: &str = "Run a command only while leading election NAME";
pub(crate) const ELECT_USAGE: &str =
    "edgelock elect BACKEND [OPTIONS] [--value V] NAME -- CMD [ARGS...]";
pub(crate) const ELECT_LONG: &str = "\
Run a command only while leading election NAME.

`elect` campaigns in the election NAME announcing V (default: this host's
name and edgelock's pid), waits until it leads (first come, first served on
etcd), prints `edgelock: elected NAME token=N` to stderr and runs CMD only
while it leads: CMD gets EDGELOCK_FENCING_TOKEN, EDGELOCK_LOCK_NAME,
EDGELOCK_LOCK_MODE=leader and EDGELOCK_LEADER_VALUE; if the leadership is
lost, CMD is stopped as `run` stops it and edgelock exits 75. When CMD
exits, edgelock resigns. --try exits 73 if someone else leads.";

pub(crate) const LEADER_ABOUT: &str = "Print the current leader of election NAME";
pub(crate) const LEADER_USAGE: &str =
    "edgelock leader BACKEND [--prefix P] [--json] [--watch] NAME";
pub(crate) const LEADER_LONG: &str = "\
Print the current leader of election NAME.

`leader` prints the current leader of NAME as `leader: V` and
`fencing_token: N` lines, or `no leader` (exit 0 either way); with --json one
object {value, fencingToken} or null. --watch keeps printing, one line (or
JSON object) per change, pushed by the backend, until edgelock is stopped.";
