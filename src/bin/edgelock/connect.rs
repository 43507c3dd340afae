//! The checked options -> a connected [`Client`] of the backend they name.
//! The backend's table entry builds its configuration from the flags
//! ([`Backend::read_flags`](edgelock::core::backend::Backend::read_flags));
//! credentials not given as flags come from the environment variables its
//! [`CommandLine`](edgelock::core::backend::CommandLine) names, read here.

use edgelock::core::backend::Flags;
use edgelock::native::{Client, ClientOptions};

use crate::args::Options;
use crate::Exit;

pub(crate) fn connect(o: &Options) -> Result<Client, Exit> {
    let spec = o
        .backend
        .read_flags(flags(o)?)
        .map_err(|e| Exit::lock(&e))?;
    Client::connect_with(spec, &ClientOptions::new().with_tls(o.tls.clone()))
        .map_err(|e| Exit::lock(&e))
}

/// The options as the backend's [`Flags`], its credentials read.
fn flags(o: &Options) -> Result<Flags, Exit> {
    Ok(Flags {
        urls: o.urls.clone(),
        token: token(o),
        token_from_env: o.token.is_none(),
        redis_password: first_set(o.line.redis_password_vars),
        prefix: o.prefix.clone(),
        ttl_ms: o.ttl_ms,
        headers: o.headers.clone(),
        user: user(o)?,
        root: o.root.clone(),
        fair: o.fair,
    })
}

/// `--token`, else the first of the backend's token variables that is set.
fn token(o: &Options) -> Option<String> {
    o.token.clone().or_else(|| first_set(o.line.token_vars))
}

/// The value of the first of `vars` that is set.
fn first_set(vars: &[&str]) -> Option<String> {
    vars.iter().find_map(|name| std::env::var(name).ok())
}

/// The user of the backend's user flag (`--etcd-user`, `--zk-digest`) with
/// the password from its variable (never an argument: arguments are visible
/// to other local users).
fn user(o: &Options) -> Result<Option<(String, String)>, Exit> {
    let (Some(user), Some(flag)) = (&o.user, o.line.user) else {
        return Ok(None);
    };
    let var = flag.password_var;
    let password = std::env::var(var)
        .map_err(|_| Exit::usage(format!("{} needs the password in ${var}", flag.flag)))?;
    Ok(Some((user.clone(), password)))
}
