//! `orig`/`noorig` backups, so that a file mco stops managing goes back to what the OS shipped
//! (upstream's TestDontDeleteRPMFiles) instead of being deleted or keeping mco's content.

use crate::error::Result;
use crate::host::fs::{DEFAULT_DIR_MODE, FileAttrs, HostFs};
use crate::host::paths;

/// Where the original of `path` is kept.
pub fn orig_path(path: &str) -> String {
    format!("{}{path}{}", paths::ORIG_DIR, paths::ORIG_SUFFIX)
}

/// The stamp saying `path` did not exist before mco wrote it.
pub fn noorig_path(path: &str) -> String {
    format!("{}{path}{}", paths::NOORIG_DIR, paths::NOORIG_SUFFIX)
}

/// What [`ensure_backup_from`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupState {
    /// A backup or stamp already existed: mco wrote this file before, so the current content
    /// is not the original and must not be saved.
    AlreadyRecorded,
    /// The file did not exist; a `noorig` stamp now says so.
    StampedAbsent,
    /// The pre-existing original was copied to `orig`.
    SavedOriginal,
}

/// Records the original of `path` before mco first overwrites it.
pub fn ensure_backup(fs: &HostFs, path: &str) -> Result<BackupState> {
    ensure_backup_from(fs, path, path)
}

/// Like [`ensure_backup`], but the original content is taken from `from` (a unit's vendor copy
/// under `/usr`, as upstream does on CoreOS).
pub fn ensure_backup_from(fs: &HostFs, from: &str, path: &str) -> Result<BackupState> {
    let noorig = noorig_path(path);
    let orig = orig_path(path);
    if fs.exists(&noorig)? || fs.exists(&orig)? {
        return Ok(BackupState::AlreadyRecorded);
    }
    if !fs.exists(path)? {
        fs.write_atomic(&noorig, b"", &FileAttrs::default())?;
        return Ok(BackupState::StampedAbsent);
    }
    let parent = orig.rsplit_once('/').map(|(p, _)| p).unwrap_or("/");
    fs.create_dir_all(parent, DEFAULT_DIR_MODE, None, None)?;
    fs.copy_preserving(from, &orig)?;
    Ok(BackupState::SavedOriginal)
}

/// Writes a file mco manages: records its original first (see [`ensure_backup`]), then writes
/// atomically with mode and owner. The order matters for crash safety: a crash in between
/// leaves the original saved and the file untouched, and a retry does not re-save.
pub fn write_managed_file(
    fs: &HostFs,
    path: &str,
    contents: &[u8],
    attrs: &FileAttrs,
) -> Result<BackupState> {
    let state = ensure_backup(fs, path)?;
    fs.write_atomic(path, contents, attrs)?;
    Ok(state)
}

/// What [`release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// mco created the file: it and its stamp are gone.
    RemovedCreated,
    /// The original came back from `orig`.
    Restored,
    /// No record at all (written before backups existed): removed, as upstream does.
    RemovedUnrecorded,
}

/// Handles a file that is no longer managed: restore the original, or remove what mco created.
/// Restoring always wins when a backup exists, because one is only ever taken of a file that
/// pre-existed mco (upstream's extra rpm-ownership check guarded against backups that older
/// releases took by mistake, which this implementation never does).
pub fn release(fs: &HostFs, path: &str) -> Result<Released> {
    let noorig = noorig_path(path);
    let orig = orig_path(path);
    if fs.exists(&noorig)? {
        fs.remove_file(path)?;
        fs.remove_file(&noorig)?;
        return Ok(Released::RemovedCreated);
    }
    if fs.exists(&orig)? {
        fs.copy_preserving(&orig, path)?;
        fs.remove_file(&orig)?;
        return Ok(Released::Restored);
    }
    fs.remove_file(path)?;
    Ok(Released::RemovedUnrecorded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, HostFs) {
        let t = tempfile::tempdir().unwrap();
        let fs = HostFs::open(t.path()).unwrap();
        (t, fs)
    }

    #[test]
    fn names_follow_upstream() {
        assert_eq!(
            orig_path("/etc/motd"),
            "/etc/machine-config-daemon/orig/etc/motd.mcdorig"
        );
        assert_eq!(
            noorig_path("/etc/x"),
            "/etc/machine-config-daemon/noorig/etc/x.mcdnoorig"
        );
    }

    /// TestDontDeleteRPMFiles: an MC overwrites `/etc/motd`, then the MC goes away.
    #[test]
    fn overwritten_os_file_is_restored() {
        let (_t, fs) = root();
        fs.write_atomic("/etc/motd", b"shipped by the OS\n", &FileAttrs::mode(0o644))
            .unwrap();
        assert_eq!(
            ensure_backup(&fs, "/etc/motd").unwrap(),
            BackupState::SavedOriginal
        );
        fs.write_atomic("/etc/motd", b"mc v1\n", &FileAttrs::default())
            .unwrap();
        // A second MC version must not back up mco's own content.
        assert_eq!(
            ensure_backup(&fs, "/etc/motd").unwrap(),
            BackupState::AlreadyRecorded
        );
        fs.write_atomic("/etc/motd", b"mc v2\n", &FileAttrs::default())
            .unwrap();
        assert_eq!(release(&fs, "/etc/motd").unwrap(), Released::Restored);
        assert_eq!(fs.read("/etc/motd").unwrap(), b"shipped by the OS\n");
        assert!(!fs.exists(&orig_path("/etc/motd")).unwrap());
    }

    #[test]
    fn managed_write_backs_up_once() {
        let (_t, fs) = root();
        fs.write_atomic("/etc/chrony.conf", b"os", &FileAttrs::mode(0o600))
            .unwrap();
        assert_eq!(
            write_managed_file(&fs, "/etc/chrony.conf", b"mc1", &FileAttrs::default()).unwrap(),
            BackupState::SavedOriginal
        );
        assert_eq!(
            write_managed_file(&fs, "/etc/chrony.conf", b"mc2", &FileAttrs::default()).unwrap(),
            BackupState::AlreadyRecorded
        );
        assert_eq!(fs.read("/etc/chrony.conf").unwrap(), b"mc2");
        assert_eq!(fs.stat("/etc/chrony.conf").unwrap().unwrap().mode, 0o644);
        release(&fs, "/etc/chrony.conf").unwrap();
        assert_eq!(fs.read("/etc/chrony.conf").unwrap(), b"os");
        assert_eq!(fs.stat("/etc/chrony.conf").unwrap().unwrap().mode, 0o600);
    }

    #[test]
    fn created_file_is_removed() {
        let (_t, fs) = root();
        assert_eq!(
            ensure_backup(&fs, "/etc/new").unwrap(),
            BackupState::StampedAbsent
        );
        fs.write_atomic("/etc/new", b"x", &FileAttrs::default())
            .unwrap();
        assert_eq!(
            ensure_backup(&fs, "/etc/new").unwrap(),
            BackupState::AlreadyRecorded
        );
        assert_eq!(release(&fs, "/etc/new").unwrap(), Released::RemovedCreated);
        assert!(!fs.exists("/etc/new").unwrap());
        assert!(!fs.exists(&noorig_path("/etc/new")).unwrap());
    }

    #[test]
    fn unrecorded_file_is_removed_and_missing_is_fine() {
        let (_t, fs) = root();
        fs.write_atomic("/etc/legacy", b"x", &FileAttrs::default())
            .unwrap();
        assert_eq!(
            release(&fs, "/etc/legacy").unwrap(),
            Released::RemovedUnrecorded
        );
        assert!(!fs.exists("/etc/legacy").unwrap());
        assert_eq!(
            release(&fs, "/etc/gone").unwrap(),
            Released::RemovedUnrecorded
        );
    }

    #[test]
    fn unit_backup_comes_from_vendor_copy() {
        let (_t, fs) = root();
        fs.write_atomic(
            "/usr/etc/systemd/system/a.service",
            b"vendor",
            &FileAttrs::default(),
        )
        .unwrap();
        fs.write_atomic(
            "/etc/systemd/system/a.service",
            b"local",
            &FileAttrs::default(),
        )
        .unwrap();
        assert_eq!(
            ensure_backup_from(
                &fs,
                "/usr/etc/systemd/system/a.service",
                "/etc/systemd/system/a.service"
            )
            .unwrap(),
            BackupState::SavedOriginal
        );
        assert_eq!(
            fs.read(&orig_path("/etc/systemd/system/a.service"))
                .unwrap(),
            b"vendor"
        );
    }
}
