//! systemd unit and dropin files under `/etc/systemd/system`, written the way upstream's
//! `writeUnit` does, for real and simulated hosts alike.

use std::path::Path;

use crate::error::Result;
use crate::fs::{EntryKind, FileAttrs, HostFs};
use crate::paths;

/// `/etc/systemd/system/<unit>`.
pub fn unit_path(unit: &str) -> String {
    format!("{}/{unit}", paths::SYSTEMD_UNIT_DIR)
}

/// `/etc/systemd/system/<unit>.d/<dropin>`.
pub fn dropin_path(unit: &str, dropin: &str) -> String {
    format!("{}/{unit}.d/{dropin}", paths::SYSTEMD_UNIT_DIR)
}

/// Writes a unit file atomically (0644).
pub fn write_unit(fs: &HostFs, unit: &str, contents: &str) -> Result<()> {
    fs.write_atomic(&unit_path(unit), contents.as_bytes(), &FileAttrs::default())
}

/// Writes a dropin; an absent or empty one is removed instead (upstream: "Dropin for X has no
/// content, skipping write", and a previously written one is deleted). Returns whether a file
/// is now present.
pub fn write_dropin(fs: &HostFs, unit: &str, dropin: &str, contents: Option<&str>) -> Result<bool> {
    let path = dropin_path(unit, dropin);
    match contents {
        Some(c) if !c.is_empty() => {
            fs.write_atomic(&path, c.as_bytes(), &FileAttrs::default())?;
            Ok(true)
        }
        _ => {
            fs.remove_file(&path)?;
            Ok(false)
        }
    }
}

/// Masks a unit by pointing `/etc/systemd/system/<unit>` at `/dev/null`, replacing a unit file
/// that may be there (`systemctl mask` refuses to replace one).
pub fn mask_unit(fs: &HostFs, unit: &str) -> Result<()> {
    fs.symlink(paths::DEV_NULL, &unit_path(unit))
}

/// Removes a mask; a real unit file at the path is left alone. Returns whether a mask was removed.
pub fn unmask_unit(fs: &HostFs, unit: &str) -> Result<bool> {
    if is_masked(fs, unit)? {
        fs.remove_file(&unit_path(unit))
    } else {
        Ok(false)
    }
}

/// Whether `/etc/systemd/system/<unit>` is a symlink to `/dev/null`.
pub fn is_masked(fs: &HostFs, unit: &str) -> Result<bool> {
    Ok(fs
        .read_link(&unit_path(unit))?
        .is_some_and(|t| t == Path::new(paths::DEV_NULL)))
}

/// Whether a regular unit file (not a mask) exists under `/etc/systemd/system`.
pub fn has_unit_file(fs: &HostFs, unit: &str) -> Result<bool> {
    Ok(fs
        .stat(&unit_path(unit))?
        .is_some_and(|s| s.kind == EntryKind::File))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_dropin_and_mask_layout() {
        let t = tempfile::tempdir().unwrap();
        let fs = HostFs::open(t.path()).unwrap();
        write_unit(&fs, "e2etest.service", "[Unit]\n").unwrap();
        assert!(has_unit_file(&fs, "e2etest.service").unwrap());
        assert_eq!(
            fs.read_to_string("/etc/systemd/system/e2etest.service")
                .unwrap(),
            "[Unit]\n"
        );
        assert!(write_dropin(&fs, "e2etest.service", "10-a.conf", Some("[Service]\n")).unwrap());
        assert!(
            fs.exists("/etc/systemd/system/e2etest.service.d/10-a.conf")
                .unwrap()
        );
        // An empty dropin is never written and removes an old one.
        assert!(!write_dropin(&fs, "e2etest.service", "20-b.conf", Some("")).unwrap());
        assert!(
            !fs.exists("/etc/systemd/system/e2etest.service.d/20-b.conf")
                .unwrap()
        );
        assert!(!write_dropin(&fs, "e2etest.service", "10-a.conf", None).unwrap());
        assert!(
            !fs.exists("/etc/systemd/system/e2etest.service.d/10-a.conf")
                .unwrap()
        );

        mask_unit(&fs, "e2etest.service").unwrap();
        assert!(is_masked(&fs, "e2etest.service").unwrap());
        assert!(!has_unit_file(&fs, "e2etest.service").unwrap());
        assert!(unmask_unit(&fs, "e2etest.service").unwrap());
        assert!(!fs.exists("/etc/systemd/system/e2etest.service").unwrap());
        write_unit(&fs, "x.service", "[Unit]\n").unwrap();
        assert!(!unmask_unit(&fs, "x.service").unwrap());
        assert!(has_unit_file(&fs, "x.service").unwrap());
    }
}
