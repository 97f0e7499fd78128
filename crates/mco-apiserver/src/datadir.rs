//! Who may read the data directory: its owner alone. It holds credentials (the CA's and the
//! serving certificate's keys, the admin kubeconfig) and the store, which holds Secrets.
//! A directory made by an older server, or by hand, is tightened on start, with a log line.

use std::path::Path;

use crate::error::Error;

/// The files in the data directory readable by the owner only.
pub(crate) const PRIVATE_FILES: &[&str] = &[
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "ca.key",
    "server.key",
    "kubeconfig",
];

/// Creates `dir` (0700) if missing, and sets it to 0700 if it is open to others.
pub(crate) fn create(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io(dir.display(), e))?;
    tighten(dir, 0o700)
}

/// Sets every file of [`PRIVATE_FILES`] that exists to 0600 if it is open to others.
/// SQLite creates its `-wal` and `-shm` with the mode of the database file, so once that is
/// 0600 they follow.
pub(crate) fn tighten_files(dir: &Path) -> Result<(), Error> {
    for f in PRIVATE_FILES {
        let path = dir.join(f);
        if path.exists() {
            tighten(&path, 0o600)?;
        }
    }
    Ok(())
}

fn tighten(path: &Path, mode: u32) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let was = std::fs::metadata(path)
        .map_err(|e| Error::io(path.display(), e))?
        .permissions()
        .mode()
        & 0o7777;
    if was & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(path.display(), e))?;
        tracing::warn!(
            path = %path.display(),
            was = format!("{was:04o}"),
            now = format!("{mode:04o}"),
            "was readable by other users: permissions tightened"
        );
    }
    Ok(())
}
