//! Whether a running node can move from one rendered config to another in place.
//!
//! The rules and their order are upstream's (`isConfigReconcilable`), and every message is
//! upstream's text verbatim, so users can search for the error they see. One deliberate
//! difference: absent and empty Ignition lists compare equal (upstream's reflection-based
//! comparison refuses `"directories": []` against a config without the key).

use ignition_config::v3_5::User;
use mco_api::MachineConfig;
use thiserror::Error;

use crate::diff::{self, CORE_USER, ConfigView, list_eq, storage};
use crate::ignition::{self, FieldError, Ignition, IgnitionError};

/// Why the change between two configs cannot be applied on a running node.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Unreconcilable {
    #[error("invalid passwd change(s): {0}")]
    Passwd(#[from] PasswdChange),
    #[error("ignition kargs section contains changes")]
    IgnitionKernelArguments,
    #[error("ignition disks section contains changes")]
    Disks,
    #[error("ignition filesystems section contains changes")]
    Filesystems,
    #[error("ignition raid section contains changes")]
    Raid,
    #[error("ignition directories section contains changes")]
    Directories,
    #[error("ignition links section contains changes")]
    Links,
    #[error("ignition file {path} includes append")]
    FileAppend { path: String },
    #[error("cannot create {path} via Ignition")]
    ForceFile { path: String },
    #[error("detected change to FIPS flag; refusing to modify FIPS on a running cluster")]
    Fips,
}

/// The refused `passwd` changes; only the `core` user's SSH keys and password hash may change.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PasswdChange {
    #[error("ignition Passwd Groups section contains changes")]
    Groups,
    #[error("ignition passwd user section contains unsupported changes: non-core user")]
    NonCoreUser,
    #[error("SSH keys and password hash are not reconcilable")]
    CoreUserOtherFields,
    #[error(
        "ignition passwd user section contains unsupported changes: user must be core and have 1 or more sshKeys"
    )]
    CoreUserWithoutCredentials,
}

/// Storage sections an administrator has accepted to change without reprovisioning
/// (`MachineConfiguration.spec.irreconcilableValidationOverrides.storage`). Never applied on
/// first boot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageOverrides {
    pub disks: bool,
    pub filesystems: bool,
    pub raid: bool,
}

impl StorageOverrides {
    /// From the API's list of names (`Disks`, `FileSystems`, `Raid`); unknown names are ignored.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Self {
        let has = |n: &str| names.iter().any(|x| x.as_ref() == n);
        Self {
            disks: has("Disks"),
            filesystems: has("FileSystems"),
            raid: has("Raid"),
        }
    }
}

/// Checks the rules in upstream's order and reports the first one broken.
pub fn check_reconcilable(
    old: ConfigView<'_>,
    new: ConfigView<'_>,
    overrides: StorageOverrides,
) -> Result<(), Unreconcilable> {
    let (o, n) = (old.ignition, new.ignition);

    if !diff::passwd_equal(o, n) {
        check_passwd(o, n)?;
    }

    if !diff::ignition_kargs_equal(o, n) {
        return Err(Unreconcilable::IgnitionKernelArguments);
    }

    if !overrides.disks && !list_eq(storage(o, |s| &s.disks), storage(n, |s| &s.disks)) {
        return Err(Unreconcilable::Disks);
    }
    if !overrides.filesystems
        && !list_eq(
            storage(o, |s| &s.filesystems),
            storage(n, |s| &s.filesystems),
        )
    {
        return Err(Unreconcilable::Filesystems);
    }
    if !overrides.raid && !list_eq(storage(o, |s| &s.raid), storage(n, |s| &s.raid)) {
        return Err(Unreconcilable::Raid);
    }
    if !list_eq(
        storage(o, |s| &s.directories),
        storage(n, |s| &s.directories),
    ) {
        return Err(Unreconcilable::Directories);
    }
    // Removing links is allowed so that configs from before links were refused can still move on.
    let new_links = storage(n, |s| &s.links);
    if !list_eq(storage(o, |s| &s.links), new_links) && new_links.is_some_and(|l| !l.is_empty()) {
        return Err(Unreconcilable::Links);
    }

    for f in diff::files(n) {
        if f.append.as_ref().is_some_and(|a| !a.is_empty()) {
            return Err(Unreconcilable::FileAppend {
                path: f.path.clone(),
            });
        }
        if f.path == mco_api::paths::FORCE_FILE {
            return Err(Unreconcilable::ForceFile {
                path: f.path.clone(),
            });
        }
    }

    if old.spec.fips != new.spec.fips {
        return Err(Unreconcilable::Fips);
    }
    Ok(())
}

fn groups(ign: &Ignition) -> Option<&[ignition_config::v3_5::Group]> {
    ign.passwd.as_ref().and_then(|p| p.groups.as_deref())
}

fn check_passwd(o: &Ignition, n: &Ignition) -> Result<(), PasswdChange> {
    if !list_eq(groups(o), groups(n)) {
        return Err(PasswdChange::Groups);
    }
    let new_users = diff::users(n);
    if diff::users(o) != new_users {
        if new_users.iter().any(|u| u.name != CORE_USER) {
            return Err(PasswdChange::NonCoreUser);
        }
        // Upstream inspects only the last entry; an empty list is fine because absence does not
        // remove the user from the host.
        if let Some(last) = new_users.last() {
            verify_core_user(last)?;
        }
    }
    Ok(())
}

fn verify_core_user(user: &User) -> Result<(), PasswdChange> {
    let has_keys = user
        .ssh_authorized_keys
        .as_ref()
        .is_some_and(|k| !k.is_empty());
    if user.name != CORE_USER || (user.password_hash.is_none() && !has_keys) {
        return Err(PasswdChange::CoreUserWithoutCredentials);
    }
    let rest = User {
        name: String::new(),
        ssh_authorized_keys: None,
        password_hash: None,
        groups: user.groups.clone().filter(|g| !g.is_empty()),
        ..user.clone()
    };
    if rest != User::new(String::new()) {
        return Err(PasswdChange::CoreUserOtherFields);
    }
    Ok(())
}

/// A refusal as the render controller and the daemon report it, naming both configs.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ReconcileError {
    #[error("parsing old Ignition config from machineconfig {name:?} failed: {source}")]
    ParseOld { name: String, source: IgnitionError },
    #[error("parsing new Ignition config from machineconfig {name:?} failed: {source}")]
    ParseNew { name: String, source: IgnitionError },
    #[error("validating new Ignition config from machineconfig {name:?} failed: {source}")]
    ValidateNew { name: String, source: FieldError },
    /// Upstream prints the old config's name first although the wording suggests otherwise; kept so
    /// that messages match.
    #[error("new machineconfig {old:?} is not reconcilable against {new:?}: {reason}")]
    NotReconcilable {
        old: String,
        new: String,
        reason: Unreconcilable,
    },
}

/// Parses both MachineConfigs' Ignition, checks the reconcilability rules, then validates the new
/// config. The rules run before validation (upstream validates first) so that an `append` or a
/// force-file entry is reported with upstream's reconcilability text rather than as a validation
/// failure.
pub fn check_machine_configs(
    old: &MachineConfig,
    new: &MachineConfig,
    overrides: StorageOverrides,
) -> Result<(), ReconcileError> {
    let old_name = old.metadata.name.clone().unwrap_or_default();
    let new_name = new.metadata.name.clone().unwrap_or_default();
    let parse = |raw: Option<&serde_json::Value>| {
        raw.map_or_else(|| Ok(ignition::empty()), ignition::parse)
    };
    let old_ign = parse(old.spec.config.as_ref()).map_err(|source| ReconcileError::ParseOld {
        name: old_name.clone(),
        source,
    })?;
    let new_ign = parse(new.spec.config.as_ref()).map_err(|source| ReconcileError::ParseNew {
        name: new_name.clone(),
        source,
    })?;
    check_reconcilable(
        ConfigView::new(&old.spec, &old_ign),
        ConfigView::new(&new.spec, &new_ign),
        overrides,
    )
    .map_err(|reason| ReconcileError::NotReconcilable {
        old: old_name,
        new: new_name.clone(),
        reason,
    })?;
    ignition::validate(&new_ign).map_err(|source| ReconcileError::ValidateNew {
        name: new_name,
        source,
    })
}
