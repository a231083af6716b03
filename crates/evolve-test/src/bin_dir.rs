//! Finding the PostgreSQL server binaries.
//!
//! `xtask` carries a copy of this search (it is dependency-free); keep the
//! two in step.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::HarnessError;

/// Where Debian and Ubuntu install the versioned server binaries.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";

/// The directory holding `initdb`, `pg_ctl`, `postgres`, `psql` and friends.
///
/// Searched in this order:
/// 1. `EVOLVE_PG_BIN`, if set (an error if it contains no `initdb`);
/// 2. the highest-numbered `/usr/lib/postgresql/<version>/bin` containing
///    `initdb` (versions compare numerically: 9.6 < 15 < 17);
/// 3. `pg_config --bindir`, if it contains `initdb`;
/// 4. the directory of `initdb` on `PATH`.
pub fn pg_bin_dir() -> Result<PathBuf, HarnessError> {
    if let Some(dir) = std::env::var_os("EVOLVE_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if has_initdb(&dir) {
            Ok(dir)
        } else {
            Err(HarnessError::BadBinDir(dir))
        };
    }
    highest_versioned_bin(Path::new(DEBIAN_ROOT))
        .or_else(pg_config_bindir)
        .or_else(initdb_on_path)
        .ok_or(HarnessError::BinariesNotFound)
}

fn has_initdb(dir: &Path) -> bool {
    dir.join("initdb").is_file()
}

/// The `<root>/<version>/bin` with the highest version that contains `initdb`.
pub(crate) fn highest_versioned_bin(root: &Path) -> Option<PathBuf> {
    std::fs::read_dir(root)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = version_key(entry.file_name().to_str()?)?;
            let bin = entry.path().join("bin");
            has_initdb(&bin).then_some((version, bin))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin)
}

/// `"15"` -> `[15]`, `"9.6"` -> `[9, 6]`; `None` for anything that is not a
/// dotted number. Vectors compare element by element, so 9.6 < 15 < 17.
pub(crate) fn version_key(name: &str) -> Option<Vec<u64>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

fn pg_config_bindir() -> Option<PathBuf> {
    let out = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    has_initdb(&dir).then_some(dir)
}

/// The directory of the `initdb` on `PATH`, following symlinks: a
/// `/usr/local/bin/initdb` linking into the server's bin directory must
/// yield that directory, where `psql` and `pg_recvlogical` live too.
fn initdb_on_path() -> Option<PathBuf> {
    let dir = std::env::split_paths(&std::env::var_os("PATH")?).find(|dir| has_initdb(dir))?;
    let real = std::fs::canonicalize(dir.join("initdb")).ok()?;
    Some(real.parent()?.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_numerically() {
        let mut names = vec!["17", "9.6", "15", "10", "9.10"];
        names.sort_by_key(|n| version_key(n));
        assert_eq!(names, ["9.6", "9.10", "10", "15", "17"]);
        assert_eq!(version_key("main"), None);
        assert_eq!(version_key("15.beta"), None);
        assert_eq!(version_key(""), None);
    }

    #[test]
    fn highest_version_with_initdb_wins() {
        let root = std::env::temp_dir().join(format!("evolve-test-bindir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (version, with_initdb) in [("9.6", true), ("15", true), ("17", false), ("common", true)]
        {
            let bin = root.join(version).join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            if with_initdb {
                std::fs::write(bin.join("initdb"), "").unwrap();
            }
        }
        // 17 has no initdb (a client-only install), "common" is no version.
        assert_eq!(
            highest_versioned_bin(&root),
            Some(root.join("15").join("bin"))
        );
        std::fs::write(root.join("17").join("bin").join("initdb"), "").unwrap();
        assert_eq!(
            highest_versioned_bin(&root),
            Some(root.join("17").join("bin"))
        );
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(highest_versioned_bin(&root), None);
    }
}
