//! Users and permissions: PostgreSQL refuses to run as root, so as root the
//! server tools run as the `postgres` OS user.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::HarnessError;

/// The user the server tools run as, when it is not ourselves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunAs {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl RunAs {
    /// `Some(postgres)` when we are root, `None` otherwise.
    pub(crate) fn detect() -> Result<Option<RunAs>, HarnessError> {
        if !is_root() {
            return Ok(None);
        }
        Ok(Some(RunAs {
            uid: id_of("-u")?,
            gid: id_of("-g")?,
        }))
    }

    /// Make `cmd` run as this user (std drops supplementary groups too).
    pub(crate) fn apply(self, cmd: &mut Command) {
        cmd.uid(self.uid).gid(self.gid);
    }
}

/// Our effective uid is 0. `/proc/self` is owned by the effective uid, which
/// spares us `unsafe { libc::geteuid() }`.
pub(crate) fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn id_of(flag: &str) -> Result<u32, HarnessError> {
    let out = Command::new("id")
        .args([flag, "postgres"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HarnessError::io("run `id postgres`", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.trim().parse() {
        Ok(id) if out.status.success() => Ok(id),
        _ => Err(HarnessError::NoPostgresUser {
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        }),
    }
}

/// The directory to create cluster directories in.
///
/// `std::env::temp_dir()`, unless the socket path would get too long for a
/// Unix socket (108 bytes, with `/.s.PGSQL.65535` and our own name to fit) or,
/// as root, the `postgres` user could not traverse it; then `/tmp`.
pub(crate) fn base_dir(run_as: Option<RunAs>) -> PathBuf {
    let preferred = std::env::temp_dir();
    let short = preferred.as_os_str().len() <= 60;
    if short && (run_as.is_none() || traversable_by_others(&preferred)) {
        preferred
    } else {
        PathBuf::from("/tmp")
    }
}

/// Every ancestor of `dir`, and `dir` itself, is searchable by other users.
fn traversable_by_others(dir: &Path) -> bool {
    dir.ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}
