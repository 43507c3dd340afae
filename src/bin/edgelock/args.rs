//! The command line: clap's derive parses it (syntax, per-command `--help`),
//! then [`parse`] checks what clap cannot (one backend, flags that exclude
//! each other, one NAME) and yields the [`Options`] the commands run with.
//! Every refusal is a usage error (exit 64) whose message names the flag.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, Parser, Subcommand};
use edgelock::core::backend::{Backend, CommandLine, BACKENDS};
use edgelock::core::{LockKind, MAX_PERMITS};
use edgelock::native::TlsConfig;

use crate::help;
use crate::Exit;

#[derive(Parser)]
#[command(
    name = "edgelock",
    version,
    about = help::ABOUT,
    override_usage = help::USAGE,
    after_help = help::AFTER,
    subcommand_required = true,
    // A flag given twice keeps its last value (as before clap).
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: CliCommand,
}

#[derive(Subcommand)]
enum CliCommand {
    #[command(
        about = help::RUN_ABOUT,
        long_about = help::RUN_LONG,
        override_usage = help::RUN_USAGE,
        after_help = help::AFTER
    )]
    Run(RunArgs),
    #[command(
        about = help::STATUS_ABOUT,
        long_about = help::STATUS_LONG,
        override_usage = help::STATUS_USAGE,
        after_help = help::AFTER
    )]
    Status(StatusArgs),
    #[command(
        about = help::ELECT_ABOUT,
        long_about = help::ELECT_LONG,
        override_usage = help::ELECT_USAGE,
        after_help = help::AFTER
    )]
    Elect(ElectArgs),
    #[command(
        about = help::LEADER_ABOUT,
        long_about = help::LEADER_LONG,
        override_usage = help::LEADER_USAGE,
        after_help = help::AFTER
    )]
    Leader(LeaderArgs),
}

/// Where the lock lives and how to reach it (every command).
#[derive(Args)]
struct BackendArgs {
    /// etcd gateway endpoint(s), comma-separated; http:// or https:// (see TLS)
    #[arg(
        verbatim_doc_comment,
        long,
        value_name = "URLS",
        allow_hyphen_values = true,
        help_heading = "Backend (exactly one)"
    )]
    etcd: Vec<String>,
    /// Redis node(s), comma-separated: one URL = single-node lock, several =
    /// Redlock over independent nodes. Each URL names its protocol:
    /// redis://[USER[:PASSWORD]@]HOST[:PORT][/DB] or rediss:// (TLS) (the
    /// Redis protocol; the password from the URL, --token, or
    /// $EDGELOCK_REDIS_PASSWORD / $REDISCLI_AUTH), webdis+http(s)://HOST:PORT
    /// (Webdis) or upstash+http(s)://HOST:PORT or a bare http(s):// URL
    /// (Upstash REST; the token comes from --token or
    /// $EDGELOCK_REDIS_TOKEN / $UPSTASH_REDIS_REST_TOKEN)
    #[arg(
        verbatim_doc_comment,
        long,
        value_name = "URLS",
        allow_hyphen_values = true,
        help_heading = "Backend (exactly one)"
    )]
    redis: Vec<String>,
    /// the edgelock Worker's Durable Object lock service, by its base URL
    /// (https://WORKER/lock); the bearer token comes from --token or
    /// $EDGELOCK_API_TOKEN
    #[arg(
        verbatim_doc_comment,
        long = "durable-object",
        value_name = "URL",
        allow_hyphen_values = true,
        help_heading = "Backend (exactly one)"
    )]
    durable_object: Vec<String>,
    /// ZooKeeper ensemble: HOST:PORT[,HOST:PORT...][/CHROOT] (Curator's
    /// InterProcessMutex recipe; exclusive locks; --ttl is the session timeout)
    #[arg(
        verbatim_doc_comment,
        long,
        value_name = "CONNECT",
        allow_hyphen_values = true,
        help_heading = "Backend (exactly one)"
    )]
    zookeeper: Vec<String>,
    /// Upstash (or lock service) bearer token, or a redis:// node's password
    /// (prefer the environment variable: arguments are visible to other
    /// local users)
    #[arg(
        verbatim_doc_comment,
        long,
        value_name = "T",
        allow_hyphen_values = true,
        help_heading = "Connection"
    )]
    token: Option<String>,
    /// etcd authentication as user U; the password comes from
    /// $EDGELOCK_ETCD_PASSWORD (never an argument); tokens are renewed when
    /// etcd says they expired
    #[arg(
        verbatim_doc_comment,
        long = "etcd-user",
        value_name = "U",
        allow_hyphen_values = true,
        help_heading = "Connection"
    )]
    etcd_user: Option<String>,
    /// ZooKeeper digest authentication as user U; the password comes from
    /// $EDGELOCK_ZK_PASSWORD (never an argument)
    #[arg(
        verbatim_doc_comment,
        long = "zk-digest",
        value_name = "U",
        allow_hyphen_values = true,
        help_heading = "Connection"
    )]
    zk_digest: Option<String>,
    /// ZooKeeper: the path under which each lock's node directory lives
    /// (default: /edgelock)
    #[arg(
        verbatim_doc_comment,
        long = "zk-root",
        value_name = "PATH",
        allow_hyphen_values = true,
        help_heading = "Connection"
    )]
    zk_root: Option<String>,
    /// key prefix (default: edgelock)
    #[arg(
        verbatim_doc_comment,
        long,
        value_name = "P",
        allow_hyphen_values = true,
        help_heading = "Connection"
    )]
    prefix: Option<String>,
    /// extra HTTP header for every request (e.g. authorization); may be repeated
    #[arg(verbatim_doc_comment, long, value_name = "'K: V'", allow_hyphen_values = true, value_parser = parse_header, help_heading = "Connection")]
    header: Vec<(String, String)>,
    #[command(flatten)]
    tls: TlsArgs,
}

/// https: whom to trust and who we are.
#[derive(Args)]
struct TlsArgs {
    /// https: trust the CA certificate(s) in this file instead of the
    /// system's roots (default: $EDGELOCK_CA_FILE)
    #[arg(
        verbatim_doc_comment,
        long = "ca-file",
        value_name = "PEM",
        allow_hyphen_values = true,
        help_heading = "TLS files"
    )]
    ca_file: Option<String>,
    /// https: client certificate chain for mutual TLS (etcd
    /// --client-cert-auth); needs --key (default: $EDGELOCK_CERT)
    #[arg(
        verbatim_doc_comment,
        long,
        value_name = "PEM",
        allow_hyphen_values = true,
        help_heading = "TLS files"
    )]
    cert: Option<String>,
    /// https: the client certificate's private key, unencrypted
    /// PKCS#8/PKCS#1/SEC1 (default: $EDGELOCK_KEY)
    #[arg(
        verbatim_doc_comment,
        long,
        value_name = "PEM",
        allow_hyphen_values = true,
        help_heading = "TLS files"
    )]
    key: Option<String>,
}

/// How a hold is taken and kept (`run`, `elect`).
#[derive(Args)]
struct HoldArgs {
    /// etcd: session lease TTL; Redis and the lock service: lock TTL, renewed
    /// at TTL/3 (ms, default 10000; etcd: at least 1000); a crashed holder's
    /// lock frees up after at most this long; requests time out after
    /// min(5000, MS/2) ms
    #[arg(verbatim_doc_comment, long, value_name = "MS", allow_hyphen_values = true, value_parser = parse_ttl)]
    ttl: Option<u64>,
    /// give up after waiting MS ms (default: forever; exit 74)
    #[arg(verbatim_doc_comment, long, value_name = "MS", allow_hyphen_values = true, value_parser = parse_wait)]
    wait: Option<u64>,
    /// do not wait: exit 73 at once if someone else holds (or leads)
    #[arg(verbatim_doc_comment, long = "try")]
    try_only: bool,
}

/// The lock's NAME and the command to run under it.
#[derive(Args)]
struct CommandTarget {
    /// the lock's (or election's) name
    #[arg(value_name = "NAME")]
    names: Vec<String>,
    /// the command to run while holding, and its arguments
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// The lock's NAME (a command after `--` is refused with a clear message).
#[derive(Args)]
struct QueryTarget {
    /// the lock's (or election's) name
    #[arg(value_name = "NAME")]
    names: Vec<String>,
    #[arg(last = true, hide = true)]
    command: Vec<String>,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    hold: HoldArgs,
    /// take one of N permits of a semaphore (1..=100) instead of the
    /// exclusive lock; exports EDGELOCK_SLOT
    #[arg(verbatim_doc_comment, long, value_name = "N", allow_hyphen_values = true, value_parser = parse_limit, help_heading = "Lock kind")]
    limit: Option<LockKind>,
    /// take a shared (reader) hold of a read-write lock; excludes --limit
    #[arg(verbatim_doc_comment, long, help_heading = "Lock kind")]
    shared: bool,
    /// one Redis node only: wait in a FIFO queue kept in Redis (waiters get
    /// the lock in arrival order); exclusive locks only
    #[arg(verbatim_doc_comment, long, help_heading = "Lock kind")]
    fair: bool,
    #[command(flatten)]
    target: CommandTarget,
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// print one JSON object
    #[arg(verbatim_doc_comment, long)]
    json: bool,
    #[command(flatten)]
    target: QueryTarget,
}

#[derive(Args)]
struct ElectArgs {
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    hold: HoldArgs,
    /// what the leader announces (at most 4096 bytes; default HOST:PID)
    #[arg(verbatim_doc_comment, long, value_name = "V", allow_hyphen_values = true, value_parser = parse_value)]
    value: Option<String>,
    #[command(flatten)]
    target: CommandTarget,
}

#[derive(Args)]
struct LeaderArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// print JSON ({value, fencingToken} or null)
    #[arg(verbatim_doc_comment, long)]
    json: bool,
    /// print every change of leader until stopped
    #[arg(verbatim_doc_comment, long)]
    watch: bool,
    #[command(flatten)]
    target: QueryTarget,
}

/// The subcommand whose options are parsed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmd {
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

/// A checked command line.
pub(crate) struct Options {
    pub(crate) cmd: Cmd,
    /// The backend the flag names (the core's table entry) ...
    pub(crate) backend: &'static dyn Backend,
    /// ... its line on the command line ...
    pub(crate) line: CommandLine,
    /// ... and the URLs the flag's value lists.
    pub(crate) urls: Vec<String>,
    pub(crate) token: Option<String>,
    pub(crate) prefix: Option<String>,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) wait_ms: Option<u64>,
    pub(crate) try_only: bool,
    pub(crate) fair: bool,
    pub(crate) kind: LockKind,
    pub(crate) json: bool,
    /// `elect --value`.
    pub(crate) value: Option<String>,
    /// `leader --watch`.
    pub(crate) watch: bool,
    pub(crate) headers: Vec<(String, String)>,
    /// The user named by the backend's user flag (`--etcd-user`, `--zk-digest`).
    pub(crate) user: Option<String>,
    /// `--zk-root`.
    pub(crate) root: Option<String>,
    pub(crate) tls: TlsConfig,
    pub(crate) name: String,
    pub(crate) command: Vec<String>,
}

/// The arguments after the program's name -> the checked options. `--help`
/// and `--version` come back as an [`Exit`] of code 0 carrying the text.
pub(crate) fn parse(args: &[String]) -> Result<Options, Exit> {
    let argv = std::iter::once("edgelock").chain(args.iter().map(String::as_str));
    let cli = Cli::try_parse_from(argv).map_err(|e| clap_exit(&e, args))?;
    match cli.command {
        CliCommand::Run(a) => run_options(a),
        CliCommand::Status(a) => {
            let mut o = base_options(Cmd::Status, a.backend, a.target.names, a.target.command)?;
            o.json = a.json;
            Ok(o)
        }
        CliCommand::Elect(a) => {
            let mut o = base_options(Cmd::Elect, a.backend, a.target.names, a.target.command)?;
            apply_hold(&mut o, a.hold)?;
            o.value = a.value;
            Ok(o)
        }
        CliCommand::Leader(a) => {
            let mut o = base_options(Cmd::Leader, a.backend, a.target.names, a.target.command)?;
            o.json = a.json;
            o.watch = a.watch;
            Ok(o)
        }
    }
}

fn run_options(a: RunArgs) -> Result<Options, Exit> {
    let mut o = base_options(Cmd::Run, a.backend, a.target.names, a.target.command)?;
    if a.fair && !o.line.fair {
        return Err(Exit::usage(
            "--fair needs exactly one --redis URL (the fair queue is a single-node lock)",
        ));
    }
    apply_hold(&mut o, a.hold)?;
    o.kind = match (a.limit, a.shared) {
        (Some(_), true) => return Err(Exit::usage("--limit and --shared exclude each other")),
        (Some(kind), false) => kind,
        (None, true) => LockKind::Shared,
        (None, false) => LockKind::Exclusive,
    };
    if a.fair && o.kind != LockKind::Exclusive {
        // The Redis recipe's fair queue orders exclusive holders only; a
        // silently unfair semaphore would surprise.
        return Err(Exit::usage(
            "--fair applies to the exclusive lock, not to --limit or --shared",
        ));
    }
    o.fair = a.fair;
    Ok(o)
}

fn apply_hold(o: &mut Options, hold: HoldArgs) -> Result<(), Exit> {
    if hold.try_only && hold.wait.is_some() {
        return Err(Exit::usage("--try and --wait exclude each other"));
    }
    o.ttl_ms = hold.ttl;
    o.wait_ms = hold.wait;
    o.try_only = hold.try_only;
    Ok(())
}

/// What every command checks: one backend, its TLS files, one NAME, and a
/// command exactly when the subcommand runs one.
fn base_options(
    cmd: Cmd,
    b: BackendArgs,
    names: Vec<String>,
    command: Vec<String>,
) -> Result<Options, Exit> {
    let (backend, line, urls) = backend(&b)?;
    let user = user(&line, &b)?;
    if b.zk_root.is_some() && line.flag != "--zookeeper" {
        return Err(Exit::usage("--zk-root needs --zookeeper"));
    }
    let tls = tls_config(b.tls)?;
    let name = one_name(names)?;
    if cmd.runs_command() && command.is_empty() {
        return Err(Exit::usage(format!(
            "missing command: edgelock {} ... NAME -- CMD [ARGS...]",
            cmd.as_str()
        )));
    }
    if !cmd.runs_command() && !command.is_empty() {
        return Err(Exit::usage(format!("`{}` takes no command", cmd.as_str())));
    }
    Ok(Options {
        cmd,
        backend,
        line,
        urls,
        token: b.token,
        prefix: b.prefix,
        ttl_ms: None,
        wait_ms: None,
        try_only: false,
        fair: false,
        kind: LockKind::Exclusive,
        json: false,
        value: None,
        watch: false,
        headers: b.header,
        user,
        root: b.zk_root,
        tls,
        name,
        command,
    })
}

/// The user flag given (`--etcd-user`, `--zk-digest`), if it is the one
/// the backend takes; another backend's user flag is refused.
fn user(line: &CommandLine, b: &BackendArgs) -> Result<Option<String>, Exit> {
    let mut user = None;
    for (given, flag, needs) in [
        (&b.etcd_user, "--etcd-user", "--etcd"),
        (&b.zk_digest, "--zk-digest", "--zookeeper"),
    ] {
        let Some(name) = given else { continue };
        if line.user.map(|u| u.flag) != Some(flag) {
            return Err(Exit::usage(format!("{flag} needs {needs}")));
        }
        user = Some(name.clone());
    }
    Ok(user)
}

/// Exactly one of `--etcd`, `--redis`, `--durable-object`, `--zookeeper`,
/// given once: the backend it names, its command-line entry and the URLs
/// its value lists.
fn backend(b: &BackendArgs) -> Result<(&'static dyn Backend, CommandLine, Vec<String>), Exit> {
    let given = [
        (&b.etcd, "--etcd"),
        (&b.redis, "--redis"),
        (&b.durable_object, "--durable-object"),
        (&b.zookeeper, "--zookeeper"),
    ];
    let mut flags = given
        .iter()
        .flat_map(|(values, flag)| values.iter().map(move |v| (*flag, v)));
    let (flag, value) = flags.next().ok_or_else(|| {
        Exit::usage(
            "--etcd URL, --redis URL, --durable-object URL or --zookeeper CONNECT is required",
        )
    })?;
    if flags.next().is_some() {
        return Err(Exit::usage(
            "give exactly one of --etcd / --redis / --durable-object / --zookeeper, once",
        ));
    }
    named_by(flag, value)
}

/// The backend of the core's table that `flag` names and that takes as
/// many URLs as `value` lists (`--redis`: one node, or Redlock over several).
fn named_by(
    flag: &str,
    value: &str,
) -> Result<(&'static dyn Backend, CommandLine, Vec<String>), Exit> {
    let lines = BACKENDS
        .iter()
        .filter_map(|b| Some((*b, b.command_line()?)))
        .filter(|(_, line)| line.flag == flag);
    for (backend, line) in lines {
        let urls = line.urls.read(value);
        if line.urls.admits(urls.len()) {
            return Ok((backend, line, urls));
        }
    }
    // Every flag's backends together take any number of URLs but none.
    Err(Exit::usage(format!("{flag} needs at least one URL")))
}

fn one_name(names: Vec<String>) -> Result<String, Exit> {
    let count = names.len();
    let mut names = names.into_iter();
    match (names.next(), count) {
        (Some(name), 1) => Ok(name),
        (None, _) => Err(Exit::usage("missing lock NAME")),
        _ => Err(Exit::usage(format!("expected one lock NAME, got {count}"))),
    }
}

/// TLS files from the flags, else from the environment (an empty variable
/// counts as unset). The files are read by `Client::connect_with`.
fn tls_config(flags: TlsArgs) -> Result<TlsConfig, Exit> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let ca_file = flags.ca_file.or_else(|| env("EDGELOCK_CA_FILE"));
    let cert = flags.cert.or_else(|| env("EDGELOCK_CERT"));
    let key = flags.key.or_else(|| env("EDGELOCK_KEY"));
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
fn parse_limit(v: &str) -> Result<LockKind, String> {
    let bad = || format!("--limit needs a whole number of permits in 1..={MAX_PERMITS}, got {v:?}");
    let n = v.trim().parse::<u64>().map_err(|_| bad())?;
    LockKind::permits(n).map_err(|_| bad())
}

fn parse_ms(flag: &str, v: &str) -> Result<u64, String> {
    v.trim()
        .parse::<u64>()
        .map_err(|_| format!("{flag} needs a whole number of milliseconds, got {v:?}"))
}

fn parse_ttl(v: &str) -> Result<u64, String> {
    parse_ms("--ttl", v)
}

fn parse_wait(v: &str) -> Result<u64, String> {
    parse_ms("--wait", v)
}

fn parse_header(h: &str) -> Result<(String, String), String> {
    let (k, v) = h
        .split_once(':')
        .ok_or("--header must look like 'Name: value'")?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

/// `elect --value`: checked before any request (size, characters).
fn parse_value(v: &str) -> Result<String, String> {
    edgelock::core::check_campaign_value(v).map_err(|e| e.to_string())?;
    Ok(v.to_string())
}

/// clap's refusal -> our exit: help and version texts exit 0; everything
/// else is a usage error worded as edgelock always worded it.
fn clap_exit(e: &clap::Error, args: &[String]) -> Exit {
    let context = |kind: ContextKind| match e.get(kind) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    // `--limit <N>` or `--limit=x` -> `--limit`.
    let flag = || {
        let arg = context(ContextKind::InvalidArg);
        arg.split(['=', ' ']).next().unwrap_or_default().to_string()
    };
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Exit {
            code: 0,
            message: e.render().to_string(),
        },
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            Exit::usage("missing command")
        }
        ErrorKind::InvalidSubcommand => unknown_command(&context(ContextKind::InvalidSubcommand)),
        ErrorKind::UnknownArgument if args.first() == Some(&context(ContextKind::InvalidArg)) => {
            unknown_command(&context(ContextKind::InvalidArg))
        }
        ErrorKind::UnknownArgument => Exit::usage(format!("unknown option {:?}", flag())),
        ErrorKind::ValueValidation => match std::error::Error::source(e) {
            Some(reason) => Exit::usage(reason.to_string()),
            None => Exit::usage(first_line(e)),
        },
        ErrorKind::InvalidValue if context(ContextKind::InvalidValue).is_empty() => {
            let flag = flag();
            Exit::usage(format!("{flag} needs {}", what_follows(&flag)))
        }
        ErrorKind::TooManyValues | ErrorKind::NoEquals => {
            Exit::usage(format!("unknown option {:?}", flag()))
        }
        _ => Exit::usage(first_line(e)),
    }
}

fn unknown_command(name: &str) -> Exit {
    Exit::usage(format!(
        "unknown command {name:?} (expected `run`, `status`, `elect` or `leader`)"
    ))
}

/// clap's own wording, for refusals edgelock never worded itself.
fn first_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

/// What a flag given without its value needed (`--limit needs ...`).
fn what_follows(flag: &str) -> &'static str {
    let names_a_backend = BACKENDS
        .iter()
        .any(|b| b.command_line().is_some_and(|line| line.flag == flag));
    if flag == "--zookeeper" {
        return "a connection string (HOST:PORT[,HOST:PORT...][/CHROOT])";
    }
    if names_a_backend {
        return "a URL";
    }
    match flag {
        "--zk-digest" => "a user name",
        "--zk-root" => "a path",
        "--prefix" => "a prefix",
        "--token" => "a token",
        "--etcd-user" => "a user name",
        "--ca-file" | "--cert" | "--key" => "a PEM file",
        "--ttl" | "--wait" => "milliseconds",
        "--value" => "a value",
        "--limit" => "a number of permits",
        "--header" => "'Name: value'",
        _ => "a value",
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use edgelock::core::backend::BACKENDS;
    use edgelock::core::LockKind;

    use super::{parse, Cli, Options};

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    fn parsed(args: &[&str]) -> Options {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        match parse(&args) {
            Ok(o) => o,
            Err(e) => panic!("{args:?}: exit {}: {}", e.code, e.message),
        }
    }

    fn refused(args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        match parse(&args) {
            Ok(_) => panic!("{args:?} was accepted"),
            Err(e) => {
                assert_eq!(e.code, 64, "{args:?}: {}", e.message);
                e.message
            }
        }
    }

    #[test]
    fn everything_after_the_first_double_dash_is_the_command() {
        let o = parsed(&[
            "run", "--etcd", "http://a", "n", "--", "sh", "--", "-x", "--etcd",
        ]);
        assert_eq!(o.command, ["sh", "--", "-x", "--etcd"]);
        assert_eq!(o.name, "n");
        // Options may follow NAME; `-` is a name; `--flag=value` works.
        let o = parsed(&[
            "run",
            "-",
            "--redis=webdis+http://a,webdis+http://b",
            "--limit=3",
            "--",
            "true",
        ]);
        assert_eq!(o.name, "-");
        assert_eq!(o.backend.name(), "redlock");
        assert_eq!(o.urls.len(), 2);
        assert_eq!(o.kind, LockKind::Permits { limit: 3 });
    }

    #[test]
    fn a_repeated_flag_keeps_its_last_value_and_values_may_start_with_a_dash() {
        let o = parsed(&[
            "status", "--etcd", "http://a", "--prefix", "a", "--prefix", "-b", "--header", "X: 1",
            "--header", "Y:2", "n",
        ]);
        assert_eq!(o.prefix.as_deref(), Some("-b"));
        assert_eq!(
            o.headers,
            [("X".into(), "1".into()), ("Y".into(), "2".into())]
        );
    }

    #[test]
    fn refusals_say_what_was_wrong_as_before() {
        for (args, says) in [
            (
                &["run", "--etcd", "http://a", "--ttl", "x", "n", "--", "true"][..],
                "--ttl needs a whole number of milliseconds, got \"x\"",
            ),
            (&["run", "--etcd"], "--etcd needs a URL"),
            (
                &["run", "--etcd", "http://a", "--try=1", "n", "--", "true"],
                "unknown option \"--try\"",
            ),
            (
                &["status", "--etcd", "http://a", "--wait", "5", "n"],
                "unknown option \"--wait\"",
            ),
            (
                &[
                    "run",
                    "--etcd",
                    "a",
                    "--durable-object",
                    "b",
                    "n",
                    "--",
                    "true",
                ],
                "give exactly one of",
            ),
            (
                &["status", "--etcd", "a", "n", "m"],
                "expected one lock NAME, got 2",
            ),
            (&["status", "--etcd", "a"], "missing lock NAME"),
            (&["bogus"], "unknown command \"bogus\""),
            (&[], "missing command"),
        ] {
            let message = refused(args);
            assert!(message.contains(says), "{args:?}: {message}");
            assert!(
                message.ends_with("Run `edgelock --help` for usage."),
                "{message}"
            );
        }
    }

    /// The backend flags clap knows are the flags of the core's table.
    #[test]
    fn every_backend_flag_is_a_line_of_the_backend_table() {
        let cli = Cli::command();
        let run = cli.find_subcommand("run").expect("run");
        let mut clap_flags: Vec<String> = run
            .get_arguments()
            .filter(|a| a.get_help_heading() == Some("Backend (exactly one)"))
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        let mut table_flags: Vec<String> = BACKENDS
            .iter()
            .filter_map(|b| b.command_line().map(|line| line.flag.to_string()))
            .collect();
        clap_flags.sort();
        table_flags.sort();
        table_flags.dedup();
        assert_eq!(clap_flags, table_flags);
    }

    #[test]
    fn a_flag_names_the_backend_taking_as_many_urls() {
        for (args, backend, urls) in [
            (
                &["status", "--etcd", "http://a, http://b", "n"][..],
                "etcd",
                &["http://a", "http://b"][..],
            ),
            (
                &["status", "--redis", " webdis+http://a ,", "n"],
                "redis",
                &["webdis+http://a"],
            ),
            (
                &["status", "--redis", "http://a,http://b,http://c", "n"],
                "redlock",
                &["http://a", "http://b", "http://c"],
            ),
            (
                &["status", "--redis", "redis://:pw@a:6380/1", "n"],
                "redis",
                &["redis://:pw@a:6380/1"],
            ),
            // HTTP and redis:// nodes may be mixed in a Redlock.
            (
                &["status", "--redis", "rediss://a, https://b,redis://c", "n"],
                "redlock",
                &["rediss://a", "https://b", "redis://c"],
            ),
            // The lock service's URL is the whole value, commas and all.
            (
                &["status", "--durable-object", " http://a/lock,x ", "n"],
                "durable-object",
                &["http://a/lock,x"],
            ),
            // A ZooKeeper connection string is one value, commas and all.
            (
                &["status", "--zookeeper", " a:2181,b:2181/app ", "n"],
                "zookeeper",
                &["a:2181,b:2181/app"],
            ),
        ] {
            let o = parsed(args);
            assert_eq!(o.backend.name(), backend, "{args:?}");
            assert_eq!(o.urls, urls, "{args:?}");
            assert_eq!(o.line, o.backend.command_line().unwrap());
        }
        for flag in ["--etcd", "--redis"] {
            let message = refused(&["status", flag, " , ", "n"]);
            assert!(
                message.starts_with(&format!("{flag} needs at least one URL")),
                "{message}"
            );
        }
        for (args, says) in [
            (
                &["status", "--redis", "http://a", "--etcd-user", "u", "n"][..],
                "--etcd-user needs --etcd",
            ),
            (
                &["status", "--zookeeper", "a:1", "--etcd-user", "u", "n"][..],
                "--etcd-user needs --etcd",
            ),
            (
                &["status", "--etcd", "http://a", "--zk-digest", "u", "n"][..],
                "--zk-digest needs --zookeeper",
            ),
            (
                &["status", "--redis", "http://a", "--zk-root", "/x", "n"][..],
                "--zk-root needs --zookeeper",
            ),
            (
                &["run", "--zookeeper", "a:1", "--fair", "n", "--", "true"][..],
                "--fair needs exactly one --redis URL",
            ),
            (
                &["status", "--zookeeper"],
                "--zookeeper needs a connection string",
            ),
            (
                &[
                    "run",
                    "--redis",
                    "http://a,http://b",
                    "--fair",
                    "n",
                    "--",
                    "true",
                ],
                "--fair needs exactly one --redis URL",
            ),
            (
                &["run", "--etcd", "http://a", "--fair", "n", "--", "true"],
                "--fair needs exactly one --redis URL",
            ),
            (
                &["leader", "--durable-object"],
                "--durable-object needs a URL",
            ),
            (&["status", "--redis"], "--redis needs a URL"),
        ] {
            let message = refused(args);
            assert!(message.starts_with(says), "{args:?}: {message}");
        }
        assert!(parsed(&["run", "--redis", "http://a", "--fair", "n", "--", "true"]).fair);
    }

    #[test]
    fn help_and_version_are_texts_with_exit_0() {
        for args in [
            &["--help"][..],
            &["help", "run"],
            &["run", "--help"],
            &["-V"],
        ] {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            match parse(&args) {
                Err(e) => assert_eq!(e.code, 0, "{args:?}"),
                Ok(_) => panic!("{args:?}"),
            }
        }
    }

    /// Every command's --help names every backend the CLI reaches.
    #[test]
    fn each_command_help_names_every_backend() {
        for command in ["run", "status", "elect", "leader"] {
            let mut cli = Cli::command();
            let help = cli
                .find_subcommand_mut(command)
                .expect("subcommand")
                .render_long_help()
                .to_string();
            for backend in [
                "--etcd",
                "Upstash REST",
                "Webdis",
                "Redlock",
                "Durable Object lock service",
                "ZooKeeper",
            ] {
                assert!(help.contains(backend), "{command} --help lacks {backend}");
            }
        }
    }
}
