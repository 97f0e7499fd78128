//! What changed between two rendered configs.
//!
//! The diff is the single input of the reconcilability check's callers, of the post-config action
//! calculation and of the drain decision, so it records every section those rules look at. Empty
//! and absent Ignition lists compare equal: an Ignition writer that emits `"files": []` instead of
//! omitting the key must not make a node reboot or refuse an update.

use std::collections::{BTreeMap, BTreeSet};

use ignition_config::v3_5::{File, Unit, User};
use mco_api::MachineConfigSpec;

use crate::ignition::Ignition;

/// The user whose SSH keys and password hash mco manages in place; upstream supports no other.
pub const CORE_USER: &str = "core";

/// One side of a diff: a MachineConfig spec together with its already-parsed Ignition config.
///
/// Parsing is separate so that callers that diff many times (the daemon, the render controller)
/// parse each config once.
#[derive(Debug, Clone, Copy)]
pub struct ConfigView<'a> {
    pub spec: &'a MachineConfigSpec,
    pub ignition: &'a Ignition,
}

impl<'a> ConfigView<'a> {
    pub fn new(spec: &'a MachineConfigSpec, ignition: &'a Ignition) -> Self {
        Self { spec, ignition }
    }
}

/// Names (file paths or unit names) sorted within each bucket, so diffs are deterministic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
}

impl ChangeSet {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }

    /// Every name touched in any way, in one sorted list without duplicates.
    pub fn all(&self) -> Vec<&str> {
        let set: BTreeSet<&str> = self
            .added
            .iter()
            .chain(&self.changed)
            .chain(&self.removed)
            .map(String::as_str)
            .collect();
        set.into_iter().collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        [&self.added, &self.changed, &self.removed]
            .iter()
            .any(|v| v.iter().any(|n| n == name))
    }

    /// Keyed comparison: entries equal under `same` are unchanged. Later duplicates of a key win,
    /// as they do when Ignition applies a list.
    fn between<T>(
        old: &[T],
        new: &[T],
        key: impl Fn(&T) -> &str,
        same: impl Fn(&T, &T) -> bool,
    ) -> Self {
        let old: BTreeMap<&str, &T> = old.iter().map(|e| (key(e), e)).collect();
        let new: BTreeMap<&str, &T> = new.iter().map(|e| (key(e), e)).collect();
        let mut out = ChangeSet::default();
        for (name, n) in &new {
            match old.get(name) {
                None => out.added.push((*name).to_owned()),
                Some(o) if !same(o, n) => out.changed.push((*name).to_owned()),
                Some(_) => {}
            }
        }
        out.removed = old
            .keys()
            .filter(|name| !new.contains_key(*name))
            .map(|name| (*name).to_owned())
            .collect();
        out
    }
}

/// The old and new entries of one file path; `None` where the file is absent on that side.
#[derive(Debug, Clone, PartialEq)]
pub struct FileChange {
    pub old: Option<File>,
    pub new: Option<File>,
}

/// Ignition sections mco cannot apply on a running node; only the reconcilability check and
/// reporting look at them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SectionChanges {
    pub passwd_groups: bool,
    /// Any user entry other than `core` was added, removed or changed.
    pub passwd_other_users: bool,
    /// The `core` user changed in a field other than its SSH keys and password hash.
    pub core_user_other_fields: bool,
    /// The Ignition `kernelArguments` section (not the MachineConfig field).
    pub ignition_kernel_arguments: bool,
    pub disks: bool,
    pub filesystems: bool,
    pub raid: bool,
    pub luks: bool,
    pub directories: bool,
    pub links: bool,
}

impl SectionChanges {
    pub fn any(&self) -> bool {
        *self != Self::default()
    }
}

/// Everything that differs between two rendered configs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigDiff {
    /// By path; "changed" means any field of the entry differs (contents, mode, owner, overwrite).
    pub files: ChangeSet,
    /// By name; "changed" means contents, dropins, `enabled` or `mask` differ.
    pub units: ChangeSet,
    /// Present only when `/etc/containers/registries.conf` changed: the drain decision reads it.
    pub registries_conf: Option<FileChange>,
    /// The whole Ignition `passwd` section differs (upstream's `passwd` diff flag).
    pub passwd_changed: bool,
    pub ssh_keys_changed: bool,
    pub password_hash_changed: bool,
    pub os_image_changed: bool,
    /// The kernel arguments differ as an ordered list (upstream reboots on reordering too).
    pub kernel_arguments_changed: bool,
    /// Multiset differences of the split kernel arguments.
    pub kernel_arguments_added: Vec<String>,
    pub kernel_arguments_removed: Vec<String>,
    pub kernel_type_changed: bool,
    /// The extensions differ as an ordered list.
    pub extensions_changed: bool,
    pub extensions_added: Vec<String>,
    pub extensions_removed: Vec<String>,
    pub fips_changed: bool,
    pub sections: SectionChanges,
}

impl ConfigDiff {
    pub fn between(old: ConfigView<'_>, new: ConfigView<'_>) -> Self {
        let (o, n) = (old.ignition, new.ignition);

        let old_files = files(o);
        let new_files = files(n);
        let file_set = ChangeSet::between(old_files, new_files, |f| &f.path, files_equal);
        let registries_conf =
            file_set
                .contains(mco_api::paths::REGISTRIES_CONF)
                .then(|| FileChange {
                    old: find_file(old_files, mco_api::paths::REGISTRIES_CONF).cloned(),
                    new: find_file(new_files, mco_api::paths::REGISTRIES_CONF).cloned(),
                });

        let units = ChangeSet::between(units(o), units(n), |u| &u.name, units_equal);

        let old_kargs = split_kernel_arguments(opt_slice(&old.spec.kernel_arguments));
        let new_kargs = split_kernel_arguments(opt_slice(&new.spec.kernel_arguments));
        let old_ext = opt_slice(&old.spec.extensions);
        let new_ext = opt_slice(&new.spec.extensions);

        let old_core = core_user(o);
        let new_core = core_user(n);

        ConfigDiff {
            files: file_set,
            units,
            registries_conf,
            passwd_changed: !passwd_equal(o, n),
            ssh_keys_changed: ssh_keys(old_core) != ssh_keys(new_core),
            password_hash_changed: old_core.and_then(|u| u.password_hash.as_deref())
                != new_core.and_then(|u| u.password_hash.as_deref()),
            os_image_changed: old.spec.os_image_url != new.spec.os_image_url,
            kernel_arguments_changed: old_kargs != new_kargs,
            kernel_arguments_added: multiset_minus(&new_kargs, &old_kargs),
            kernel_arguments_removed: multiset_minus(&old_kargs, &new_kargs),
            kernel_type_changed: canonical_kernel_type(&old.spec.kernel_type)
                != canonical_kernel_type(&new.spec.kernel_type),
            extensions_changed: old_ext != new_ext,
            extensions_added: multiset_minus(new_ext, old_ext),
            extensions_removed: multiset_minus(old_ext, new_ext),
            fips_changed: old.spec.fips != new.spec.fips,
            sections: SectionChanges {
                passwd_groups: !list_eq(
                    o.passwd.as_ref().and_then(|p| p.groups.as_deref()),
                    n.passwd.as_ref().and_then(|p| p.groups.as_deref()),
                ),
                passwd_other_users: other_users(o) != other_users(n),
                core_user_other_fields: core_user_rest(old_core) != core_user_rest(new_core),
                ignition_kernel_arguments: !ignition_kargs_equal(o, n),
                disks: !list_eq(storage(o, |s| &s.disks), storage(n, |s| &s.disks)),
                filesystems: !list_eq(
                    storage(o, |s| &s.filesystems),
                    storage(n, |s| &s.filesystems),
                ),
                raid: !list_eq(storage(o, |s| &s.raid), storage(n, |s| &s.raid)),
                luks: !list_eq(storage(o, |s| &s.luks), storage(n, |s| &s.luks)),
                directories: !list_eq(
                    storage(o, |s| &s.directories),
                    storage(n, |s| &s.directories),
                ),
                links: !list_eq(storage(o, |s| &s.links), storage(n, |s| &s.links)),
            },
        }
    }

    /// True when the configs are equivalent from the node's point of view.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Changes that only a new OS deployment can apply (upstream's `osUpdate`, `kargs`, `fips`,
    /// `kernelType` and `extensions` flags).
    pub fn needs_os_update(&self) -> bool {
        self.os_image_changed
            || self.kernel_arguments_changed
            || self.fips_changed
            || self.kernel_type_changed
            || self.extensions_changed
    }
}

/// Split MachineConfig kernel arguments the way the kernel splits its command line: each entry may
/// hold several whitespace-separated arguments, and double quotes protect spaces, so
/// `bar="hello world"` stays one argument (quotes kept, as rpm-ostree needs them).
pub fn split_kernel_arguments(entries: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in entries {
        let mut current = String::new();
        let mut in_quote = false;
        for c in entry.chars() {
            if c.is_ascii_whitespace() && !in_quote {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
                continue;
            }
            if c == '"' {
                in_quote = !in_quote;
            }
            current.push(c);
        }
        if !current.is_empty() {
            out.push(current);
        }
    }
    out
}

/// `""` and anything unknown mean the default kernel, as upstream canonicalises it.
pub fn canonical_kernel_type(kernel_type: &str) -> &str {
    match kernel_type {
        "realtime" => "realtime",
        "64k-pages" => "64k-pages",
        _ => "default",
    }
}

fn opt_slice<T>(v: &Option<Vec<T>>) -> &[T] {
    v.as_deref().unwrap_or(&[])
}

pub(crate) fn files(ign: &Ignition) -> &[File] {
    ign.storage
        .as_ref()
        .and_then(|s| s.files.as_deref())
        .unwrap_or(&[])
}

fn units(ign: &Ignition) -> &[Unit] {
    ign.systemd
        .as_ref()
        .and_then(|s| s.units.as_deref())
        .unwrap_or(&[])
}

pub(crate) fn users(ign: &Ignition) -> &[User] {
    ign.passwd
        .as_ref()
        .and_then(|p| p.users.as_deref())
        .unwrap_or(&[])
}

fn find_file<'a>(files: &'a [File], path: &str) -> Option<&'a File> {
    files.iter().rev().find(|f| f.path == path)
}

pub(crate) fn storage<T>(
    ign: &Ignition,
    field: impl Fn(&ignition_config::v3_5::Storage) -> &Option<Vec<T>>,
) -> Option<&[T]> {
    ign.storage.as_ref().and_then(|s| field(s).as_deref())
}

/// Absent and empty lists are the same configuration.
pub(crate) fn list_eq<T: PartialEq>(a: Option<&[T]>, b: Option<&[T]>) -> bool {
    a.unwrap_or(&[]) == b.unwrap_or(&[])
}

fn files_equal(a: &File, b: &File) -> bool {
    a.path == b.path
        && a.contents == b.contents
        && a.mode == b.mode
        && a.user == b.user
        && a.group == b.group
        && a.overwrite == b.overwrite
        && list_eq(a.append.as_deref(), b.append.as_deref())
}

fn units_equal(a: &Unit, b: &Unit) -> bool {
    a.contents == b.contents
        && a.enabled == b.enabled
        && a.mask == b.mask
        && list_eq(a.dropins.as_deref(), b.dropins.as_deref())
}

pub(crate) fn passwd_equal(a: &Ignition, b: &Ignition) -> bool {
    let pa = a.passwd.as_ref();
    let pb = b.passwd.as_ref();
    list_eq(
        pa.and_then(|p| p.groups.as_deref()),
        pb.and_then(|p| p.groups.as_deref()),
    ) && list_eq(
        pa.and_then(|p| p.users.as_deref()),
        pb.and_then(|p| p.users.as_deref()),
    )
}

pub(crate) fn ignition_kargs_equal(a: &Ignition, b: &Ignition) -> bool {
    let ka = a.kernel_arguments.as_ref();
    let kb = b.kernel_arguments.as_ref();
    list_eq(
        ka.and_then(|k| k.should_exist.as_deref()),
        kb.and_then(|k| k.should_exist.as_deref()),
    ) && list_eq(
        ka.and_then(|k| k.should_not_exist.as_deref()),
        kb.and_then(|k| k.should_not_exist.as_deref()),
    )
}

/// The last `core` entry wins, as it does when users are merged by name.
fn core_user(ign: &Ignition) -> Option<&User> {
    users(ign).iter().rev().find(|u| u.name == CORE_USER)
}

fn ssh_keys(user: Option<&User>) -> &[String] {
    user.and_then(|u| u.ssh_authorized_keys.as_deref())
        .unwrap_or(&[])
}

/// The `core` user with the two fields mco manages blanked out.
fn core_user_rest(user: Option<&User>) -> Option<User> {
    user.map(|u| User {
        ssh_authorized_keys: None,
        password_hash: None,
        ..u.clone()
    })
}

fn other_users(ign: &Ignition) -> Vec<&User> {
    users(ign).iter().filter(|u| u.name != CORE_USER).collect()
}

/// Elements of `a` not matched one-for-one by an element of `b`, in `a`'s order.
fn multiset_minus(a: &[String], b: &[String]) -> Vec<String> {
    let mut remaining: BTreeMap<&str, usize> = BTreeMap::new();
    for x in b {
        *remaining.entry(x.as_str()).or_default() += 1;
    }
    a.iter()
        .filter(|x| match remaining.get_mut(x.as_str()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn multiset_minus_counts_duplicates() {
        assert_eq!(
            multiset_minus(&s(&["a", "a", "b"]), &s(&["a"])),
            s(&["a", "b"])
        );
        assert!(multiset_minus(&s(&["a"]), &s(&["a", "a"])).is_empty());
    }
}
