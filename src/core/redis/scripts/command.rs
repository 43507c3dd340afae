//! The one way a script's command is written: `EVAL <source> <numkeys>
//! <keys...> <args...>`. The key count is taken from the key list, never
//! written by hand: Redis splits `KEYS` from `ARGV` by it, so a wrong count
//! silently shifts every argument (and, on a cluster host, routes by the
//! wrong keys). The `EVALSHA` form ([`super::as_evalsha`]) copies the count
//! and everything after it.

use crate::core::redis::value::RedisCommand;

/// `EVAL` of the Lua `source` over `keys` (`KEYS[1..]`) with `args`
/// (`ARGV[1..]`); the key count is `keys.len()`.
pub(super) fn eval(source: &str, keys: &[&str], args: &[&str]) -> RedisCommand {
    let mut cmd = RedisCommand::new("EVAL")
        .arg(source)
        .arg(keys.len().to_string());
    for k in keys {
        cmd = cmd.arg(k);
    }
    for a in args {
        cmd = cmd.arg(a);
    }
    cmd
}
