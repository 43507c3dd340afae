//! The Lua scripts every lock operation runs (one `EVAL` per node and
//! operation, so each step is atomic on its node), and the parsing of their
//! replies.
//!
//! Keys: `KEYS[1]` is the lock key, `KEYS[2]` the companion fencing counter
//! (see [`keys`](crate::core::redis::keys)). Every script returns an
//! integer or a flat array of integers: the only reply shape both HTTP
//! protocols carry exactly (webdis drops non-UTF-8 strings and nested
//! arrays; the leader read's value string is the one exception, see
//! `election`).
//!
//! The fencing counter is only ever raised: `extend` and `release` carry the
//! holder's fencing token and set the counter to at least that value, even
//! when the lock is no longer theirs (raising is always safe, and it repairs
//! a node that lost its counter in a restart, or lags behind the others).
//!
//! One file per kind, each holding its scripts' Lua source next to the
//! command that runs it and the parser of its reply: `lock` (the exclusive
//! lock), `fair` (the waiters' queue), `rwlock` (readers), `permit`
//! (semaphores), `reentry`, `set` (`AcquireAll`), `election`, `inspect`.
//! Every command is written by `command::eval`, which counts the keys;
//! this module holds the registry ([`Script`]) and the `EVALSHA` form.
//! The Lua text is part of the wire protocol: its SHA-1 names it in
//! `EVALSHA`, and the first line carries the script's version.

mod command;
pub(super) mod election;
mod fair;
mod inspect;
mod lock;
mod permit;
mod reentry;
mod reply;
mod rwlock;
mod set;

pub use fair::{acquire_queued, leave, leave_permits, ACQUIRE_QUEUED, LEAVE};
pub use inspect::{inspect, parse_inspect, InspectReply, INSPECT};
pub use lock::{
    acquire, extend, extend_hold, parse_acquire, parse_flag, parse_flag_and_counter, parse_release,
    parse_status, release, release_hold, release_waking, status, AcquireReply, Released,
    StatusReply, ACQUIRE, EXTEND, MAX_BYPASS, OUTER_HOLD, RELEASE, STATUS,
};
pub use permit::{
    acquire_permit, parse_acquire_permit, permit_cleanup, FreeSlots, PermitAttempt, PermitReply,
    ACQUIRE_PERMIT, PERMIT_CLEANUP,
};
pub use reentry::{parse_reenter, reenter, REENTER};
pub use rwlock::{
    acquire_shared, extend_shared, release_shared, status_shared, ACQUIRE_SHARED, EXTEND_SHARED,
    RELEASE_SHARED, STATUS_SHARED,
};
pub use set::{acquire_set, parse_acquire_set, ACQUIRE_SET, SET_KEYS_PER_NAME};

use super::value::{RedisCommand, RedisValue};

/// Which script a command runs (the simulation's Redis model matches on this).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Script {
    /// [`ACQUIRE`].
    Acquire,
    /// [`EXTEND`].
    Extend,
    /// [`RELEASE`].
    Release,
    /// [`STATUS`].
    Status,
    /// [`ACQUIRE_QUEUED`].
    AcquireQueued,
    /// [`LEAVE`].
    Leave,
    /// [`ACQUIRE_PERMIT`].
    AcquirePermit,
    /// [`PERMIT_CLEANUP`].
    PermitCleanup,
    /// [`INSPECT`].
    Inspect,
    /// [`ACQUIRE_SHARED`].
    AcquireShared,
    /// [`EXTEND_SHARED`].
    ExtendShared,
    /// [`RELEASE_SHARED`].
    ReleaseShared,
    /// [`STATUS_SHARED`].
    StatusShared,
    /// [`election::RECORD`].
    LeaderRecord,
    /// [`election::LEADER`].
    Leader,
    /// [`REENTER`].
    Reenter,
    /// [`ACQUIRE_SET`].
    AcquireSet,
}

impl Script {
    /// Every script.
    pub const ALL: [Script; 17] = [
        Script::Acquire,
        Script::Extend,
        Script::Release,
        Script::Status,
        Script::AcquireQueued,
        Script::Leave,
        Script::AcquirePermit,
        Script::PermitCleanup,
        Script::Inspect,
        Script::AcquireShared,
        Script::ExtendShared,
        Script::ReleaseShared,
        Script::StatusShared,
        Script::LeaderRecord,
        Script::Leader,
        Script::Reenter,
        Script::AcquireSet,
    ];

    /// The Lua source sent with `EVAL`.
    pub fn text(self) -> &'static str {
        match self {
            Script::Acquire => ACQUIRE,
            Script::Extend => EXTEND,
            Script::Release => RELEASE,
            Script::Status => STATUS,
            Script::AcquireQueued => ACQUIRE_QUEUED,
            Script::Leave => LEAVE,
            Script::AcquirePermit => ACQUIRE_PERMIT,
            Script::PermitCleanup => PERMIT_CLEANUP,
            Script::Inspect => INSPECT,
            Script::AcquireShared => ACQUIRE_SHARED,
            Script::ExtendShared => EXTEND_SHARED,
            Script::ReleaseShared => RELEASE_SHARED,
            Script::StatusShared => STATUS_SHARED,
            Script::LeaderRecord => election::RECORD,
            Script::Leader => election::LEADER,
            Script::Reenter => REENTER,
            Script::AcquireSet => ACQUIRE_SET,
        }
    }

    /// The script whose source is exactly `text`, if any.
    pub fn from_text(text: &[u8]) -> Option<Script> {
        Script::ALL
            .into_iter()
            .find(|s| s.text().as_bytes() == text)
    }

    /// The SHA-1 of the source, as `EVALSHA` names it (lowercase hex).
    /// Hashed once per process: every `EVALSHA` names its script, and
    /// hashing an 800-byte source on each took a tenth of an uncontended
    /// acquire's time in the core.
    pub fn sha1(self) -> &'static str {
        static SHA1S: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
            Script::ALL
                .iter()
                .map(|s| sha1_smol::Sha1::from(s.text()).digest().to_string())
                .collect()
        });
        &SHA1S[self.index()]
    }

    /// The script whose SHA-1 is `sha` (any case), if any.
    pub fn from_sha1(sha: &[u8]) -> Option<Script> {
        Script::ALL
            .into_iter()
            .find(|s| s.sha1().as_bytes().eq_ignore_ascii_case(sha))
    }

    /// The script an `EVAL` or `EVALSHA` command runs, if it is one of ours.
    pub fn of_command(cmd: &RedisCommand) -> Option<Script> {
        let source = cmd.args.get(1)?;
        match cmd.name() {
            b"EVAL" => Script::from_text(source),
            b"EVALSHA" => Script::from_sha1(source),
            _ => None,
        }
    }

    /// Index in [`Script::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The `EVALSHA` form of an `EVAL` of `script`: the same keys and arguments,
/// the source replaced by its SHA-1 (about 400 bytes less per request).
/// Redis answers `NOSCRIPT` when its script cache lacks it (first use on a
/// node, a restart, `SCRIPT FLUSH`): the engine then sends the `EVAL`, which
/// also caches the script.
pub fn as_evalsha(cmd: &RedisCommand, script: Script) -> RedisCommand {
    let mut args = cmd.args.clone();
    if args.len() > 1 {
        args[0] = b"EVALSHA".to_vec();
        args[1] = script.sha1().as_bytes().to_vec();
    }
    RedisCommand { args }
}

/// Whether a reply says the node's script cache lacks the script.
pub fn is_noscript(v: &RedisValue) -> bool {
    matches!(v, RedisValue::Error(e) if e.starts_with("NOSCRIPT"))
}

#[cfg(test)]
mod tests {
    use super::{
        acquire, acquire_permit, acquire_queued, acquire_shared, as_evalsha, extend_shared,
        inspect, is_noscript, leave, permit_cleanup, release, release_shared, release_waking,
        status_shared, PermitAttempt, Script,
    };
    use crate::core::redis::value::{RedisCommand, RedisValue};

    #[test]
    fn scripts_are_told_apart_by_text() {
        for s in Script::ALL {
            assert_eq!(Script::from_text(s.text().as_bytes()), Some(s));
        }
        assert_eq!(Script::from_text(b"return 1"), None);
        let cmd = acquire("{e:k}", "{e:k}:fence", "ab", 100, true, 0, 2);
        assert_eq!(Script::from_text(&cmd.args[1]), Some(Script::Acquire));
        let args: Vec<&[u8]> = cmd.args[2..].iter().map(Vec::as_slice).collect();
        assert_eq!(
            args,
            [
                &b"7"[..],
                b"{e:k}",
                b"{e:k}:fence",
                b"{e:k}:readers",
                b"{e:k}:wintent",
                b"{e:k}:queue",
                b"{e:k}:leases",
                b"{e:k}:bypass",
                b"ab",
                b"100",
                b"1",
                b"0",
                b"2"
            ]
        );
    }

    #[test]
    fn evalsha_names_the_script_by_its_sha1() {
        // The SHA-1 of "return 1" as Redis computes it (SCRIPT LOAD).
        assert_eq!(
            sha1_smol::Sha1::from("return 1").digest().to_string(),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        let cmd = release("k", "k:fence", "ab", 3);
        let sha = as_evalsha(&cmd, Script::Release);
        assert_eq!(sha.name(), b"EVALSHA");
        assert_eq!(sha.args[1], Script::Release.sha1().as_bytes().to_vec());
        assert_eq!(sha.args[2..], cmd.args[2..]);
        assert_eq!(Script::of_command(&sha), Some(Script::Release));
        assert_eq!(Script::of_command(&cmd), Some(Script::Release));
        assert_eq!(Script::of_command(&RedisCommand::new("GET").arg("x")), None);
        assert!(is_noscript(&RedisValue::Error(
            "NOSCRIPT No matching script. Please use EVAL.".into()
        )));
        assert!(!is_noscript(&RedisValue::Error("ERR x".into())));
        for (i, s) in Script::ALL.into_iter().enumerate() {
            assert_eq!(s.index(), i);
        }
    }

    #[test]
    fn scripts_keep_their_sha1s() {
        // The SHA-1 names a script on the wire (EVALSHA, the nodes' script
        // caches, tools that match on it): a change of text is a new
        // version, never an accident of moving code.
        let pinned = [
            (Script::Acquire, "46c95c03546843a76009eb7293e9d16113900324"),
            (Script::Extend, "4fecc77bebccdfa1a01e57e96fabbf22b4c456d1"),
            (Script::Release, "e1cb43cdf1c97d1bd43dd579da2c63aa55812844"),
            (Script::Status, "8467ced33c2da3e11d5b85650f3454709cd4610c"),
            (
                Script::AcquireQueued,
                "2f2faf89a0790468da7bc6b00e10f0730c9dc9fb",
            ),
            (Script::Leave, "c50c910d09370a59554215e7d171adfa3fdc694b"),
            (
                Script::AcquirePermit,
                "bb498a2ad99cb66d72bd8a014e5ab79a300cf9f8",
            ),
            (
                Script::PermitCleanup,
                "17c99a6ca88e91bd0929ec2ce91c568cd8b6ab34",
            ),
            (Script::Inspect, "5399c4e2874978e85413cb837a96a59c8a0ff931"),
            (
                Script::AcquireShared,
                "c5fd940d6c2eb8255ce17cd894b55c701aa1bc85",
            ),
            (
                Script::ExtendShared,
                "600a3d9b765bec930a6d3db9737e09ccd2597ab3",
            ),
            (
                Script::ReleaseShared,
                "40749ddb8ea574b22bd09e72d19d16dd3e00882a",
            ),
            (
                Script::StatusShared,
                "a7917e614c5898e31d9254c7567bdcbdba78327f",
            ),
            (
                Script::LeaderRecord,
                "e7855cb708b197fc9ad55ccdb3897decd74b5983",
            ),
            (Script::Leader, "d24baacb56881dd8b67e8a2af19e87705ecc32a5"),
            (Script::Reenter, "73041c37e5cb80dc85a8c1f36e8cb698e43986c0"),
            (
                Script::AcquireSet,
                "f22386576c9d2491a3274226968a7e8caee55671",
            ),
        ];
        assert_eq!(pinned.len(), Script::ALL.len());
        for (s, sha) in pinned {
            assert_eq!(s.sha1(), sha, "{s:?}");
        }
    }

    #[test]
    fn permit_commands_declare_every_key_they_touch() {
        let slots = crate::core::redis::keys::permit_keys("{e:s}", 3);
        let p = PermitAttempt {
            fence_key: "{e:s}:fence",
            limit_key: "{e:s}:limit",
            base: "{e:s}:permit",
            slots: &slots,
            token: "ab",
            ttl_ms: 100,
            limit: 3,
            preferred: Some(2),
            count_every_attempt: true,
            waiter: None,
        };
        let cmd = acquire_permit(&p);
        assert!(
            !format!("{p:?}").contains("\"ab\""),
            "the token stays out of Debug"
        );
        assert_eq!(Script::of_command(&cmd), Some(Script::AcquirePermit));
        let args: Vec<String> = cmd.args[2..]
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "7",
                "{e:s}:fence",
                "{e:s}:limit",
                "{e:s}:permit:queue",
                "{e:s}:permit:leases",
                "{e:s}:permit:0",
                "{e:s}:permit:1",
                "{e:s}:permit:2",
                "ab",
                "100",
                "3",
                "2",
                "1",
                "-",
                "0"
            ]
        );
        let one = acquire_permit(&PermitAttempt {
            preferred: None,
            count_every_attempt: false,
            waiter: Some(("w1", 6000)),
            ..p
        });
        assert_eq!(
            one.args[args.len() + 2 - 4..]
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>(),
            ["-1", "0", "w1", "6000"]
        );
        let c = permit_cleanup(&slots, "ab");
        assert_eq!(Script::of_command(&c), Some(Script::PermitCleanup));
        assert_eq!(c.args[2], b"3");
        let r = release_waking("{e:s}:permit:1", "{e:s}:fence", "{e:s}:permit", "ab", 4);
        assert_eq!(r.args[5], b"{e:s}:permit:queue");
        assert_eq!(r.args[2], b"5");
        assert_eq!(r.args[7], b"{e:s}:permit:1:holds");
        assert_eq!(
            r.args[10],
            crate::core::redis::subscription::wake_channel("{e:s}:permit").into_bytes()
        );
        let i = inspect("{e:s}", "{e:s}:fence", "{e:s}:limit", &slots[..1]);
        assert_eq!(Script::of_command(&i), Some(Script::Inspect));
        assert_eq!(i.args[2], b"5");
    }

    #[test]
    fn read_write_commands_declare_every_key_they_touch() {
        let strs = |c: &RedisCommand| {
            c.args[2..]
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        };
        let a = acquire_shared("{e:r}", "{e:r}:fence", "ab", 100);
        assert_eq!(Script::of_command(&a), Some(Script::AcquireShared));
        assert_eq!(
            strs(&a),
            [
                "4",
                "{e:r}",
                "{e:r}:fence",
                "{e:r}:readers",
                "{e:r}:wintent",
                "ab",
                "100"
            ]
        );
        let q = acquire_queued("{e:r}", "{e:r}:fence", "ab", 100, "w1", 6000, 2);
        assert_eq!(
            strs(&q),
            [
                "7",
                "{e:r}",
                "{e:r}:fence",
                "{e:r}:queue",
                "{e:r}:leases",
                "{e:r}:readers",
                "{e:r}:wintent",
                "{e:r}:bypass",
                "ab",
                "100",
                "w1",
                "6000",
                "2",
                "6000"
            ]
        );
        let r = release_shared("{e:r}", "{e:r}:fence", "ab", 7);
        assert_eq!(Script::of_command(&r), Some(Script::ReleaseShared));
        let channel = crate::core::redis::subscription::wake_channel("{e:r}");
        assert_eq!(
            strs(&r),
            [
                "5",
                "{e:r}",
                "{e:r}:fence",
                "{e:r}:queue",
                "{e:r}:leases",
                "{e:r}:readers",
                "ab",
                "7",
                channel.as_str()
            ]
        );
        let e = extend_shared("{e:r}:readers", "{e:r}:fence", "ab", 100, 7);
        assert_eq!(
            (Script::of_command(&e), strs(&e)[..3].to_vec()),
            (
                Some(Script::ExtendShared),
                vec!["2".into(), "{e:r}:readers".into(), "{e:r}:fence".into()]
            )
        );
        let s = status_shared("{e:r}:readers", "{e:r}:fence", "ab");
        assert_eq!(Script::of_command(&s), Some(Script::StatusShared));
        let l = leave("{e:r}", "{e:r}:fence", "w1");
        assert_eq!(Script::of_command(&l), Some(Script::Leave));
        assert_eq!(
            strs(&l)[..7],
            [
                "6",
                "{e:r}",
                "{e:r}:fence",
                "{e:r}:queue",
                "{e:r}:leases",
                "{e:r}:wintent",
                "{e:r}:bypass"
            ]
        );
        let i = inspect("{e:r}", "{e:r}:fence", "{e:r}:limit", &[]);
        assert_eq!(
            strs(&i),
            ["4", "{e:r}", "{e:r}:fence", "{e:r}:limit", "{e:r}:readers"]
        );
        // Every script's text is distinct (the model and EVALSHA tell them apart by it).
        let shas: std::collections::BTreeSet<&str> = Script::ALL.iter().map(|s| s.sha1()).collect();
        assert_eq!(shas.len(), Script::ALL.len());
    }

    #[test]
    fn no_script_reads_a_client_clock() {
        // Leases are scored by the server's TIME; no script takes a time argument.
        for s in Script::ALL {
            let t = s.text();
            if t.contains("now") {
                assert!(
                    t.contains("redis.call('TIME')"),
                    "{s:?} uses `now` without the server's TIME"
                );
            }
        }
    }
}
