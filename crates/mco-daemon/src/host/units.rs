//! systemd unit and dropin files under `/etc/systemd/system`, written the way upstream's
//! `writeUnit` does, for real and simulated hosts alike.

use std::path::Path;

use crate::error::Result;
use crate::host::backup;
use crate::host::fs::{EntryKind, FileAttrs, HostFs};
use crate::host::paths;
use crate::host::systemd::Systemd;

/// Where systemd looks for unit files, most specific first.
pub const UNIT_SEARCH_PATH: &[&str] = &[
    paths::SYSTEMD_UNIT_DIR,
    "/run/systemd/system",
    paths::SYSTEMD_VENDOR_UNIT_DIR,
];

/// A unit as a MachineConfig describes it (Ignition `systemd.units[]`), independent of the
/// Ignition types so the host layer stays free of config parsing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitSpec {
    /// Unit name, e.g. `kubelet.service`.
    pub name: String,
    /// Unit file contents; `None`/empty writes no unit file.
    pub contents: Option<String>,
    /// Enable (true), disable (false), or leave to presets (`None`).
    pub enabled: Option<bool>,
    /// Mask (true), explicitly unmask (false), or leave alone (`None`).
    pub mask: Option<bool>,
    /// Dropins.
    pub dropins: Vec<DropinSpec>,
}

/// A unit dropin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropinSpec {
    /// File name, e.g. `10-mco.conf`.
    pub name: String,
    /// Contents; `None`/empty means the dropin must not exist.
    pub contents: Option<String>,
}

impl UnitSpec {
    fn has_contents(&self) -> bool {
        self.contents.as_deref().is_some_and(|c| !c.is_empty())
    }
}

/// Whether systemd would find a unit file for `unit` anywhere on its search path.
pub fn unit_file_exists(fs: &HostFs, unit: &str) -> Result<bool> {
    for dir in UNIT_SEARCH_PATH {
        if fs.exists(&format!("{dir}/{unit}"))? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The `/usr` copy of an `/etc` path, the source of its backup on CoreOS (upstream `withUsrPath`).
fn usr_copy(path: &str) -> String {
    format!("/usr{path}")
}

fn backup_from_usr(fs: &HostFs, path: &str) -> Result<()> {
    let usr = usr_copy(path);
    if fs.exists(&usr)? {
        backup::ensure_backup_from(fs, &usr, path)?;
    }
    Ok(())
}

/// Writes one unit like upstream's `writeUnit`: dropins first (empty ones removed), then a mask
/// symlink, or the unit file, or (mask explicitly false) removal of an old mask. On ostree
/// hosts the `/usr` copy of a path, when there is one, is backed up before the first write.
pub fn write_unit_spec(fs: &HostFs, unit: &UnitSpec, ostree: bool) -> Result<()> {
    for d in &unit.dropins {
        let path = dropin_path(&unit.name, &d.name);
        if ostree && d.contents.as_deref().is_some_and(|c| !c.is_empty()) {
            backup_from_usr(fs, &path)?;
        }
        write_dropin(fs, &unit.name, &d.name, d.contents.as_deref())?;
    }
    if unit.mask == Some(true) {
        return mask_unit(fs, &unit.name);
    }
    if unit.has_contents() {
        if ostree {
            backup_from_usr(fs, &unit_path(&unit.name))?;
        }
        // A mask in the way would survive an atomic rename onto the symlink's name only by
        // luck of rename semantics; remove it explicitly so the intent is clear.
        unmask_unit(fs, &unit.name)?;
        write_unit(fs, &unit.name, unit.contents.as_deref().unwrap_or_default())?;
    } else if unit.mask == Some(false) {
        // Upstream removes whatever is there; only a mask is removed here, so a unit file
        // shipped elsewhere in /etc is not lost.
        unmask_unit(fs, &unit.name)?;
    }
    Ok(())
}

/// Writes units and applies enablement like upstream's `writeUnits`: enable and disable run as
/// one batch each, only for units that have contents or exist on disk; units that do not say
/// get `preset`, whose failure is only logged (a dropin may target a unit that does not exist).
pub fn write_units(
    fs: &HostFs,
    systemd: &dyn Systemd,
    units: &[UnitSpec],
    ostree: bool,
) -> Result<()> {
    let mut enable = Vec::new();
    let mut disable = Vec::new();
    for u in units {
        write_unit_spec(fs, u, ostree)?;
        match u.enabled {
            Some(on) => {
                if u.has_contents() || unit_file_exists(fs, &u.name)? {
                    if on {
                        enable.push(u.name.clone());
                    } else {
                        disable.push(u.name.clone());
                    }
                } else {
                    tracing::info!(unit = %u.name, "unit has no contents; not changing its enablement");
                }
            }
            None => {
                if let Err(e) = systemd.preset(&u.name) {
                    tracing::info!(unit = %u.name, error = %e, "could not reset unit preset; skipping");
                }
            }
        }
    }
    systemd.enable(&enable)?;
    systemd.disable(&disable)
}

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
