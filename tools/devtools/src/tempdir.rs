//! Temporary directories removed on drop.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Prefix of every directory this crate creates under the system temp dir.
pub const TEMP_PREFIX: &str = "edgelock-devtools-";

/// A fresh directory under [`std::env::temp_dir`], removed (recursively) on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl TempDir {
    /// Creates `<tmp>/edgelock-devtools-<label>-<pid>-<nanos>-<counter>`.
    pub fn new(label: &str) -> io::Result<TempDir> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let label: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "{TEMP_PREFIX}{label}-{}-{nanos}-{n}",
            std::process::id()
        ));
        std::fs::create_dir(&path)?;
        Ok(TempDir { path, keep: false })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keep the directory after drop (for post-mortem debugging of a failing test).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_on_drop() {
        let dir = TempDir::new("t/../x").unwrap();
        let p = dir.path().to_path_buf();
        assert!(p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("edgelock-devtools-t____x-"));
        assert_eq!(p.parent().unwrap(), std::env::temp_dir());
        std::fs::write(p.join("f"), b"x").unwrap();
        let other = TempDir::new("t/../x").unwrap();
        assert_ne!(other.path(), p);
        drop(dir);
        assert!(!p.exists());
    }
}
