//! Lock names as ZooKeeper paths, and Curator's node names (design 2.0,
//! 4.3): lock `N` is the directory `<root>/<escape_segment(N)>`; a
//! contender's node in it is `_c_<uuid v4>-lock-<10-digit sequence>`
//! (Curator's protected mode, so that a node whose create reply was lost can
//! be found again by its prefix), ordered by what follows the last
//! `lock-`.

use super::address::is_path_char;
use crate::core::Entropy;

/// Curator's `InterProcessMutex` node marker (`LockInternals`' `LOCK_NAME`).
pub(crate) const MUTEX_MARKER: &str = "lock-";

/// `InterProcessReadWriteLock`'s reader marker (`READ_LOCK_NAME`).
pub(crate) const READ_MARKER: &str = "__READ__";

/// `InterProcessReadWriteLock`'s writer marker (`WRITE_LOCK_NAME`).
pub(crate) const WRITE_MARKER: &str = "__WRIT__";

/// `LeaderLatch`'s node marker (`LOCK_NAME`).
pub(crate) const LATCH_MARKER: &str = "latch-";

/// `InterProcessSemaphoreV2`'s lease marker (`LEASE_BASE_NAME`).
pub(crate) const LEASE_MARKER: &str = "lease-";

/// `InterProcessSemaphoreV2`'s child directories (`LOCK_PARENT`,
/// `LEASE_PARENT`): the guard mutex and the leases.
pub(crate) const SEMAPHORE_LOCKS: &str = "locks";
pub(crate) const SEMAPHORE_LEASES: &str = "leases";

/// Every marker of a contender node in a lock's directory.
const MARKERS: [&str; 5] = [
    MUTEX_MARKER,
    READ_MARKER,
    WRITE_MARKER,
    LATCH_MARKER,
    LEASE_MARKER,
];

/// `N` as one path segment: `%` and `/` escaped as in etcd's keys (`%25`,
/// `%2F`), every character ZooKeeper refuses as `%XX` per UTF-8 byte, and
/// the segments `.` and `..` as `%2E` and `%2E%2E`.
pub(crate) fn escape_segment(name: &str) -> String {
    match name {
        "." => return "%2E".into(),
        ".." => return "%2E%2E".into(),
        _ => {}
    }
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            c if is_path_char(c) => out.push(c),
            c => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
    }
    out
}

/// The directory of lock `name` under `root`.
pub(crate) fn lock_dir(root: &str, name: &str) -> String {
    format!("{root}/{}", escape_segment(name))
}

/// Every ancestor of `dir` and `dir` itself, shortest first (`/a/b` →
/// `/a`, `/a/b`): what Curator's `mkdirs` creates as containers.
pub(crate) fn ancestors(dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, c) in dir.char_indices().skip(1) {
        if c == '/' {
            out.push(dir[..i].to_string());
        }
    }
    out.push(dir.to_string());
    out
}

/// A fresh protected prefix `_c_<uuid v4>-` (Curator's
/// `ProtectedUtils.getProtectedPrefix` of `UUID.randomUUID()`).
pub(crate) fn protected_prefix(entropy: &mut dyn Entropy) -> String {
    let mut b = [0u8; 16];
    entropy.fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "_c_{}-{}-{}-{}-{}-",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Curator's `standardFixForSorting`: what follows the last `marker`, or
/// the whole name when it has none.
pub(crate) fn sort_key<'a>(name: &'a str, marker: &str) -> &'a str {
    match name.rfind(marker) {
        Some(i) => &name[i + marker.len()..],
        None => name,
    }
}

/// `children` in Curator's lock order (a stable sort by [`sort_key`]; Rust's
/// byte order equals Java's `String.compareTo` for valid ZooKeeper names).
pub(crate) fn sorted_children(mut children: Vec<String>, marker: &str) -> Vec<String> {
    children.sort_by(|a, b| sort_key(a, marker).cmp(sort_key(b, marker)));
    children
}

/// The marker of a contender node (`<anything><marker><10 digits>`), if
/// it is one.
pub(crate) fn marker_of(name: &str) -> Option<&'static str> {
    let digits = name.len().checked_sub(10)?;
    if !name.is_char_boundary(digits) || !name[digits..].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    MARKERS.into_iter().find(|m| name[..digits].ends_with(m))
}

/// `children` in edgelock's own contender order: by sequence whatever the
/// marker (a mutex, a reader, a writer and a latch node on one name are
/// all contenders, so that edgelock clients using different kinds on a
/// name still exclude each other), names that are no contender node last.
/// For each recipe's own nodes this is Curator's order.
pub(crate) fn contender_order(mut children: Vec<String>) -> Vec<String> {
    children.sort_by(|a, b| contender_key(a).cmp(&contender_key(b)));
    children
}

fn contender_key(name: &str) -> (bool, &str) {
    match marker_of(name) {
        Some(_) => (false, &name[name.len() - 10..]),
        None => (true, name),
    }
}

/// The last segment of `path`.
pub(crate) fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::{
        ancestors, contender_order, escape_segment, marker_of, protected_prefix, sort_key,
        sorted_children, MUTEX_MARKER, READ_MARKER,
    };
    use crate::core::zookeeper::address::validate_path;
    use crate::core::SeededEntropy;
    use proptest::prelude::*;

    #[test]
    fn names_escape_as_etcd_keys_do_plus_what_zookeeper_refuses() {
        assert_eq!(escape_segment("orders"), "orders");
        assert_eq!(escape_segment("a/b"), "a%2Fb");
        assert_eq!(escape_segment("a%2Fb"), "a%252Fb");
        assert_eq!(escape_segment("."), "%2E");
        assert_eq!(escape_segment(".."), "%2E%2E");
        assert_eq!(escape_segment("..."), "...");
        assert_eq!(escape_segment("x\u{1}y"), "x%01y");
        assert_eq!(escape_segment("😀"), "%F0%9F%98%80");
        assert_eq!(escape_segment("é"), "é");
    }

    #[test]
    fn ancestors_shortest_first() {
        assert_eq!(ancestors("/edgelock/a"), vec!["/edgelock", "/edgelock/a"]);
        assert_eq!(ancestors("/x"), vec!["/x"]);
    }

    #[test]
    fn protected_prefixes_are_curators_shape() {
        let mut e = SeededEntropy::new(3);
        let p = protected_prefix(&mut e);
        assert_eq!(p.len(), 40, "{p}");
        assert!(p.starts_with("_c_") && p.ends_with('-'));
        let uuid = &p[3..39];
        let groups: Vec<&str> = uuid.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(groups[2].starts_with('4'));
        assert!("89ab".contains(&groups[3][..1]));
        assert_ne!(p, protected_prefix(&mut e));
    }

    #[test]
    fn children_sort_by_their_sequence_and_foreign_names_last() {
        let sorted = sorted_children(
            vec![
                "_c_b-lock-0000000003".into(),
                "foreign".into(),
                "_c_a-lock-0000000010".into(),
                "_c_c-lock-0000000001".into(),
            ],
            MUTEX_MARKER,
        );
        assert_eq!(
            sorted,
            vec![
                "_c_c-lock-0000000001",
                "_c_b-lock-0000000003",
                "_c_a-lock-0000000010",
                "foreign"
            ]
        );
        assert_eq!(sort_key("x-lock-lock-0001", "lock-"), "0001");
    }

    #[test]
    fn contenders_of_every_kind_sort_by_sequence_and_others_last() {
        let sorted = contender_order(vec![
            "leases".into(),
            "_c_a-__WRIT__0000000004".into(),
            "_c_b-latch-0000000002".into(),
            "_c_c-__READ__0000000003".into(),
            "_c_d-lock-0000000001".into(),
            "x-lease-0000000000".into(),
            "y-lock-00000001".into(),
        ]);
        assert_eq!(
            sorted,
            vec![
                "x-lease-0000000000",
                "_c_d-lock-0000000001",
                "_c_b-latch-0000000002",
                "_c_c-__READ__0000000003",
                "_c_a-__WRIT__0000000004",
                "leases",
                "y-lock-00000001",
            ]
        );
        assert_eq!(marker_of("_c_c-__READ__0000000003"), Some(READ_MARKER));
        assert_eq!(marker_of("lock-000000001"), None);
        assert_eq!(marker_of("é"), None);
    }

    proptest! {
        #[test]
        fn every_escaped_name_is_one_valid_segment(name in "\\PC{1,20}") {
            let seg = escape_segment(&name);
            prop_assert!(!seg.contains('/'));
            prop_assert!(validate_path(&format!("/r/{seg}")).is_ok(), "{seg:?}");
        }
    }
}
