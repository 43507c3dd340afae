//! The statements of the D1 lock recipe. Every value is a bound parameter;
//! the only text spliced in is the table name, checked by [`is_table_name`].

/// The database's clock in ms since the Unix epoch (any SQLite: no
/// `unixepoch('subsec')` needed).
pub const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

/// Whether `t` may be spliced into the statements as a table name: an
/// identifier of 1..=64 ASCII letters, digits or `_`, not starting with a
/// digit, and not in SQLite's (`sqlite_`) or D1's (`_cf_`) reserved space.
pub fn is_table_name(t: &str) -> bool {
    let lower = t.to_ascii_lowercase();
    (1..=64).contains(&t.len())
        && t.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
        && !t.as_bytes()[0].is_ascii_digit()
        && !lower.starts_with("sqlite_")
        && !lower.starts_with("_cf_")
}

/// Creates the table if it is missing (the first statement of every batch).
pub fn create(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (name TEXT PRIMARY KEY, owner TEXT, expires_at INTEGER NOT NULL, version INTEGER NOT NULL)"
    )
}

/// Takes the row `?1` for owner `?2` for `?3` ms if it is free (no owner,
/// or expired): a new row has version 1, a taken one `version + 1`. A row
/// held (by anyone, this owner included) is left alone.
pub fn take(table: &str) -> String {
    format!(
        "INSERT INTO {table} (name, owner, expires_at, version) VALUES (?1, ?2, {NOW_MS} + ?3, 1) \
         ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, version = {table}.version + 1 \
         WHERE {table}.owner IS NULL OR {table}.expires_at <= {NOW_MS}"
    )
}

/// Row `?1` as owner `?2` sees it: `mine` (1 if `?2` holds it, unexpired),
/// `version`, and the holder's remaining ms `pttl` (null when free). Never
/// the owner itself.
pub fn probe(table: &str) -> String {
    format!(
        "SELECT CASE WHEN owner = ?2 AND expires_at > {NOW_MS} THEN 1 ELSE 0 END AS mine, version, \
         CASE WHEN owner IS NOT NULL AND expires_at > {NOW_MS} THEN expires_at - {NOW_MS} END AS pttl \
         FROM {table} WHERE name = ?1"
    )
}

/// Frees row `?1` if owner `?2` holds grant `?3` unexpired (the row stays:
/// its version keeps counting).
pub fn release(table: &str) -> String {
    format!(
        "UPDATE {table} SET owner = NULL WHERE name = ?1 AND owner = ?2 AND version = ?3 AND expires_at > {NOW_MS}"
    )
}

/// Frees row `?1` if owner `?2` holds it, whatever the version (an acquire
/// that ended without knowing whether it was granted; owners are random
/// per acquire).
pub fn leave(table: &str) -> String {
    format!("UPDATE {table} SET owner = NULL WHERE name = ?1 AND owner = ?2")
}

/// Sets row `?1`'s expiry to now + `?4` ms if owner `?2` holds grant `?3`
/// unexpired.
pub fn extend(table: &str) -> String {
    format!(
        "UPDATE {table} SET expires_at = {NOW_MS} + ?4 WHERE name = ?1 AND owner = ?2 AND version = ?3 AND expires_at > {NOW_MS}"
    )
}

/// Owner `?2`'s grant `?3` of row `?1`, if still current: its remaining ms.
pub fn resume(table: &str) -> String {
    format!(
        "SELECT expires_at - {NOW_MS} AS pttl FROM {table} WHERE name = ?1 AND owner = ?2 AND version = ?3 AND expires_at > {NOW_MS}"
    )
}

/// Row `?1` for anyone: `version` and the holder's remaining ms `pttl`
/// (null when free).
pub fn inspect(table: &str) -> String {
    format!(
        "SELECT version, CASE WHEN owner IS NOT NULL AND expires_at > {NOW_MS} THEN expires_at - {NOW_MS} END AS pttl \
         FROM {table} WHERE name = ?1"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers() {
        for ok in ["edgelock_locks", "L", "_x1", "locks2"] {
            assert!(is_table_name(ok), "{ok}");
        }
        for bad in [
            "",
            "1x",
            "a b",
            "a;DROP TABLE x",
            "a\"b",
            "sqlite_master",
            "SQLITE_x",
            "_cf_KV",
            "ü",
            &"a".repeat(65),
        ] {
            assert!(!is_table_name(bad), "{bad}");
        }
    }
}
