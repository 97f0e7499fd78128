//! Applying a planned update to a host: files, units, the `core` user's SSH keys and password,
//! the OS, then the on-disk `currentconfig` and `currentimage`, with every change journalled
//! so that any failure puts the node back exactly as it was (upstream rolls back by
//! re-applying the old config, which cannot restore what the old config did not describe; a
//! journal of prior states can).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};

use ignition_config::v3_5::{File, Unit};
use mco_render::actions::PostConfigAction;
use mco_render::extensions as mco_extensions;
use mco_render::ignition::{self, IgnitionError};

use crate::engine::image_mode;
use crate::engine::plan::{ParsedConfig, UpdatePlan};
use crate::error::HostError;
use crate::host::Host;
use crate::host::backup;
use crate::host::extensions;
use crate::host::fs::{DEFAULT_FILE_MODE, EntryKind, FileAttrs, HostFs};
use crate::host::ostree::{self, KernelType, Origin, RebaseMode};
use crate::host::passwd;
use crate::host::paths;
use crate::host::retry;
use crate::host::units::{self, DropinSpec, UnitSpec};
use crate::host::users;

/// Why applying failed (after which everything applied was rolled back).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A host operation failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A file's contents could not be decoded.
    #[error("decoding contents of file {path:?}: {source}")]
    Decode {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: IgnitionError,
    },
    /// The on-disk config could not be serialised.
    #[error("serialising machineconfig {name}: {source}")]
    Serialize {
        /// The config.
        name: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Upstream's OS update failure wording.
    #[error("failed to update OS to {url}: {source}")]
    Os {
        /// Target image.
        url: String,
        /// Why.
        #[source]
        source: HostError,
    },
    /// Every attempt of a rebase failed (upstream's wording, the last attempt's error and
    /// apimachinery's `ErrWaitTimeout`).
    #[error(
        "failed to update OS to {url} after retries: {source}: timed out waiting for the condition"
    )]
    OsRetries {
        /// Target image.
        url: String,
        /// The last attempt's error.
        #[source]
        source: HostError,
    },
    /// A rebootless post action failed.
    #[error("{action}: {source}")]
    PostAction {
        /// e.g. `Reload crio.service`.
        action: String,
        /// Why.
        #[source]
        source: HostError,
    },
}

/// The on-disk journal of the update in progress: one JSON entry per line, each appended
/// before the change it describes, so that a daemon killed mid-update finds on restart exactly
/// what to undo. It holds prior file contents (`/etc/shadow` among them), hence mode 0600.
pub const JOURNAL: &str = "/etc/machine-config-daemon/update-journal.jsonl";

/// What a path held before the update touched it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum Prior {
    Absent,
    File {
        /// Base64.
        data: String,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Symlink {
        target: PathBuf,
    },
    /// Directories and special files are never replaced by the engine: nothing to restore.
    Untouchable,
}

/// One journal line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "camelCase")]
enum Entry {
    Path { path: String, prior: Prior },
    Enablement { unit: String, enabled: bool },
    Os,
}

/// Prior states of everything an update changed, to undo it in reverse order. Every entry is
/// also appended to [`JOURNAL`] before the change, for [`recover_interrupted`].
#[derive(Debug, Default)]
pub struct Journal {
    entries: Vec<Entry>,
    seen: HashSet<String>,
    enablement_seen: HashSet<String>,
    os_touched: bool,
    started: bool,
}

impl Journal {
    fn persist(&mut self, fs: &HostFs, e: Entry) -> Result<(), HostError> {
        self.persist_all(fs, vec![e])
    }

    /// Appends `entries` in one write and one fdatasync: the rollback needs them on disk
    /// before the change they guard, and batching the records of one step keeps it to one
    /// sync per step.
    fn persist_all(&mut self, fs: &HostFs, entries: Vec<Entry>) -> Result<(), HostError> {
        if entries.is_empty() {
            return Ok(());
        }
        if !self.started {
            // Creates the directory durably (see `create_dir_all`) and fsyncs the journal's
            // entry in it, so the records appended below cannot lose their file.
            fs.write_atomic(JOURNAL, b"", &FileAttrs::mode(0o600))?;
            self.started = true;
        }
        let mut lines = Vec::new();
        for e in &entries {
            serde_json::to_writer(&mut lines, e).map_err(|source| HostError::Json {
                what: JOURNAL.into(),
                source,
            })?;
            lines.push(b'\n');
        }
        fs.append_durable(JOURNAL, &lines)?;
        self.entries.extend(entries);
        Ok(())
    }

    /// Records `path` before its first change in this update.
    pub fn record(&mut self, fs: &HostFs, path: &str) -> Result<(), HostError> {
        self.record_all(fs, &[path])
    }

    /// Records `paths` before their first change in this update, in one write.
    pub fn record_all(&mut self, fs: &HostFs, paths: &[&str]) -> Result<(), HostError> {
        let mut entries = Vec::with_capacity(paths.len());
        for p in paths {
            entries.extend(self.entry_for(fs, p)?);
        }
        self.persist_all(fs, entries)
    }

    /// The entry for `path`, unless it was already recorded in this update.
    fn entry_for(&mut self, fs: &HostFs, path: &str) -> Result<Option<Entry>, HostError> {
        if !self.seen.insert(path.to_string()) {
            return Ok(None);
        }
        let prior = match fs.stat(path)? {
            None => Prior::Absent,
            Some(st) => match st.kind {
                EntryKind::File => Prior::File {
                    data: B64.encode(fs.read(path)?),
                    mode: st.mode & 0o7777,
                    uid: st.uid,
                    gid: st.gid,
                },
                EntryKind::Symlink => match fs.read_link(path)? {
                    Some(target) => Prior::Symlink { target },
                    None => Prior::Absent,
                },
                _ => Prior::Untouchable,
            },
        };
        Ok(Some(Entry::Path {
            path: path.to_string(),
            prior,
        }))
    }

    fn record_os(&mut self, fs: &HostFs) -> Result<(), HostError> {
        if !self.os_touched {
            self.os_touched = true;
            self.persist(fs, Entry::Os)?;
        }
        Ok(())
    }

    /// The update reached its point of no return (reboot about to be requested, or rebootless
    /// actions done): a crash from here must not undo it. The entries stay in memory so a
    /// failure to request the reboot can still roll back.
    pub fn commit(&mut self, fs: &HostFs) -> Result<(), HostError> {
        // A removal lost to a power cut would resurrect the journal and undo a finished update.
        if fs.remove_file(JOURNAL)? {
            fs.sync_parent(JOURNAL)?;
        }
        Ok(())
    }

    /// Records a path and its backup records.
    fn record_managed(&mut self, fs: &HostFs, path: &str) -> Result<(), HostError> {
        let mut entries = Vec::with_capacity(3);
        for p in [
            path.to_string(),
            backup::orig_path(path),
            backup::noorig_path(path),
        ] {
            entries.extend(self.entry_for(fs, &p)?);
        }
        self.persist_all(fs, entries)
    }

    fn record_enablement(&mut self, host: &Host, unit: &str) -> Result<(), HostError> {
        if self.enablement_seen.insert(unit.to_string()) {
            let enabled = host.systemd.is_enabled(unit).unwrap_or(false);
            self.persist(
                &host.fs,
                Entry::Enablement {
                    unit: unit.to_string(),
                    enabled,
                },
            )?;
        }
        Ok(())
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Puts every recorded path back, restores unit enablement and drops a staged deployment.
    /// Best effort: each failure is logged and the rest still runs, since a half-finished
    /// rollback is worse than a complete one with a logged gap.
    pub fn rollback(self, host: &Host) {
        undo(host, self.entries);
    }
}

/// Undoes journal entries, newest first, then removes the on-disk journal.
fn undo(host: &Host, entries: Vec<Entry>) {
    let fs = &host.fs;
    let mut os = false;
    for e in entries.into_iter().rev() {
        match e {
            Entry::Path { path, prior } => {
                let r = match prior {
                    Prior::Absent => fs.remove_file(&path).map(|_| ()),
                    Prior::File {
                        data,
                        mode,
                        uid,
                        gid,
                    } => match B64.decode(data.as_bytes()) {
                        Ok(data) => {
                            fs.write_atomic(&path, &data, &FileAttrs::mode(mode).owned(uid, gid))
                        }
                        Err(e) => Err(HostError::State(format!("journal entry for {path}: {e}"))),
                    },
                    Prior::Symlink { target } => fs.symlink(&target.to_string_lossy(), &path),
                    Prior::Untouchable => Ok(()),
                };
                if let Err(e) = r {
                    tracing::error!(path = %path, error = %e, "rollback: could not restore file");
                }
            }
            Entry::Enablement { unit, enabled } => {
                let units = [unit.clone()];
                let r = if enabled {
                    host.systemd.enable(&units)
                } else {
                    host.systemd.disable(&units)
                };
                if let Err(e) = r {
                    tracing::error!(unit = %unit, error = %e, "rollback: could not restore enablement");
                }
            }
            Entry::Os => os = true,
        }
    }
    if os && let Err(e) = host.os.cleanup_pending() {
        tracing::error!(error = %e, "rollback: could not drop the staged deployment");
    }
    if let Err(e) = host.systemd.daemon_reload() {
        tracing::warn!(error = %e, "rollback: daemon-reload failed");
    }
    if let Err(e) = fs.remove_file(JOURNAL) {
        tracing::error!(error = %e, "rollback: could not remove the journal");
    }
}

/// Undoes an update that a crash interrupted, from its on-disk journal, so the node is back in
/// its `currentconfig` before anything else runs. Returns whether there was one. A torn last
/// line is ignored: its change had not started yet.
pub fn recover_interrupted(host: &Host) -> Result<bool, HostError> {
    let Some(data) = host.fs.read_optional(JOURNAL)? else {
        return Ok(false);
    };
    let entries: Vec<Entry> = String::from_utf8_lossy(&data)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    tracing::warn!(
        entries = entries.len(),
        "an update was interrupted; rolling it back from its journal"
    );
    undo(host, entries);
    Ok(true)
}

/// What an applied update did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// A new deployment was staged, or kernel arguments or type changed.
    pub os_updated: bool,
    /// The `core` user's keys or password changed.
    pub ssh_updated: bool,
    /// Set when the OS part was skipped because the host is not ostree-booted; the line that
    /// says so goes to the log and to the MachineConfigNode.
    pub os_skipped: Option<String>,
}

/// Options of one application.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyOptions {
    /// Whether the host's OS is managed (`/run/ostree-booted`).
    pub managed_os: bool,
    /// Whether the config's `extensions` are installed: an EL CoreOS host
    /// ([`crate::engine::Engine::installs_extensions`]).
    pub extensions: bool,
}

/// The message logged and reported when the OS part of a config is skipped.
pub fn os_skipped_message(url: &str) -> String {
    format!(
        "Not an ostree-booted host ({} absent): skipping OS update to osImageURL {url:?}, kernel arguments and kernel type",
        paths::OSTREE_BOOTED
    )
}

/// Applies `plan` to `host`. On error everything applied is rolled back before returning.
pub fn apply(host: &Host, plan: &UpdatePlan, opts: ApplyOptions) -> Result<Applied, ApplyError> {
    let mut journal = Journal::default();
    match apply_inner(host, plan, opts, &mut journal) {
        Ok(a) => {
            let mut journal = journal;
            journal.commit(&host.fs)?;
            Ok(a)
        }
        Err(e) => {
            tracing::error!(error = %e, "update failed; rolling back");
            journal.rollback(host);
            Err(e)
        }
    }
}

/// Like [`apply`], but hands the journal back so that a later failure (the post action, a
/// failed reboot request) can still roll the update back.
pub fn apply_journalled(
    host: &Host,
    plan: &UpdatePlan,
    opts: ApplyOptions,
) -> Result<(Applied, Journal), ApplyError> {
    let mut journal = Journal::default();
    match apply_inner(host, plan, opts, &mut journal) {
        Ok(a) => Ok((a, journal)),
        Err(e) => {
            tracing::error!(error = %e, "update failed; rolling back");
            journal.rollback(host);
            Err(e)
        }
    }
}

fn apply_inner(
    host: &Host,
    plan: &UpdatePlan,
    opts: ApplyOptions,
    journal: &mut Journal,
) -> Result<Applied, ApplyError> {
    let mut applied = Applied::default();
    write_files(host, plan, journal)?;
    fail::fail_point!("apply::after-files");
    write_units(host, plan, opts, journal)?;
    fail::fail_point!("apply::after-units");
    delete_stale(host, plan, journal)?;
    fail::fail_point!("apply::after-stale");
    applied.ssh_updated = write_core_user(host, plan, journal)?;
    fail::fail_point!("apply::after-ssh");
    if plan.os_update() {
        if opts.managed_os {
            applied.os_updated = update_os(host, plan, opts, journal)?;
        } else {
            let msg = os_skipped_message(&plan.new.mc.spec.os_image_url);
            tracing::info!("{msg}");
            applied.os_skipped = Some(msg);
        }
    }
    fail::fail_point!("apply::after-os");
    write_current_config(&host.fs, &plan.new, journal)?;
    fail::fail_point!("apply::after-currentconfig");
    Ok(applied)
}

fn file_list(cfg: &ParsedConfig) -> &[File] {
    cfg.ignition
        .storage
        .as_ref()
        .and_then(|s| s.files.as_deref())
        .unwrap_or_default()
}

fn unit_list(cfg: &ParsedConfig) -> &[Unit] {
    cfg.ignition
        .systemd
        .as_ref()
        .and_then(|s| s.units.as_deref())
        .unwrap_or_default()
}

/// Decoded contents of an Ignition file entry.
pub fn file_contents(f: &File) -> Result<Vec<u8>, ApplyError> {
    match f.contents.as_ref().and_then(|c| c.source.as_deref()) {
        None => Ok(Vec::new()),
        Some(src) => {
            let compression = f
                .contents
                .as_ref()
                .and_then(|c| c.compression.as_deref())
                .filter(|c| !c.is_empty());
            ignition::decode_data_url(src, compression).map_err(|source| ApplyError::Decode {
                path: f.path.clone(),
                source,
            })
        }
    }
}

/// The mode of an Ignition file entry (default 0644).
pub fn file_mode(f: &File) -> u32 {
    f.mode.map(|m| m as u32).unwrap_or(DEFAULT_FILE_MODE)
}

fn write_files(host: &Host, plan: &UpdatePlan, journal: &mut Journal) -> Result<(), ApplyError> {
    for f in file_list(&plan.new) {
        if !plan.force && !plan.diff.files.contains(&f.path) {
            continue;
        }
        let data = file_contents(f)?;
        let (uid, gid) = passwd::resolve_ownership(
            &host.fs,
            f.user.as_ref().and_then(|u| u.id).map(|i| i as u32),
            f.user.as_ref().and_then(|u| u.name.as_deref()),
            f.group.as_ref().and_then(|g| g.id).map(|i| i as u32),
            f.group.as_ref().and_then(|g| g.name.as_deref()),
        )?;
        journal.record_managed(&host.fs, &f.path)?;
        tracing::info!(path = %f.path, "writing file");
        backup::write_managed_file(
            &host.fs,
            &f.path,
            &data,
            &FileAttrs::mode(file_mode(f)).owned(uid, gid),
        )?;
        fail::fail_point!("apply::after-one-file");
    }
    Ok(())
}

/// The host layer's description of an Ignition unit.
pub fn unit_spec(u: &Unit) -> UnitSpec {
    UnitSpec {
        name: u.name.clone(),
        contents: u.contents.clone(),
        enabled: u.enabled,
        mask: u.mask,
        dropins: u
            .dropins
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|d| DropinSpec {
                name: d.name.clone(),
                contents: d.contents.clone(),
            })
            .collect(),
    }
}

fn has_text(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|c| !c.is_empty())
}

fn write_units(
    host: &Host,
    plan: &UpdatePlan,
    opts: ApplyOptions,
    journal: &mut Journal,
) -> Result<(), ApplyError> {
    let old_units = unit_list(&plan.old);
    let mut specs = Vec::new();
    for u in unit_list(&plan.new) {
        if !plan.force && !plan.diff.units.contains(&u.name) {
            continue;
        }
        let unit_path = units::unit_path(&u.name);
        journal.record_managed(&host.fs, &unit_path)?;
        journal.record_enablement(host, &u.name)?;
        let new_dropins: Vec<&str> = u
            .dropins
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        for d in &new_dropins {
            journal.record_managed(&host.fs, &units::dropin_path(&u.name, d))?;
        }
        // What the old version of the unit wrote and the new one no longer describes goes.
        if let Some(old) = old_units.iter().find(|o| o.name == u.name) {
            for d in old.dropins.as_deref().unwrap_or_default() {
                if !new_dropins.contains(&d.name.as_str()) && has_text(&d.contents) {
                    let p = units::dropin_path(&u.name, &d.name);
                    journal.record_managed(&host.fs, &p)?;
                    backup::release(&host.fs, &p)?;
                }
            }
            if has_text(&old.contents) && !has_text(&u.contents) && u.mask != Some(true) {
                backup::release(&host.fs, &unit_path)?;
            }
            if old.mask == Some(true) && u.mask != Some(true) {
                units::unmask_unit(&host.fs, &u.name)?;
            }
        }
        specs.push(unit_spec(u));
    }
    if specs.is_empty() {
        return Ok(());
    }
    tracing::info!(
        units = ?specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        "writing systemd units"
    );
    units::write_units(&host.fs, host.systemd.as_ref(), &specs, opts.managed_os)?;
    host.systemd.daemon_reload()?;
    Ok(())
}

fn delete_stale(host: &Host, plan: &UpdatePlan, journal: &mut Journal) -> Result<(), ApplyError> {
    let new_dropins: HashSet<String> = unit_list(&plan.new)
        .iter()
        .flat_map(|u| {
            u.dropins
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(|d| units::dropin_path(&u.name, &d.name))
        })
        .collect();
    for path in &plan.diff.files.removed {
        // A file that became a unit dropin is the unit writer's now (upstream keeps it).
        if new_dropins.contains(path) {
            continue;
        }
        journal.record_managed(&host.fs, path)?;
        let r = backup::release(&host.fs, path)?;
        tracing::info!(path = %path, result = ?r, "removed stale file");
    }
    let old_units = unit_list(&plan.old);
    for name in &plan.diff.units.removed {
        let Some(old) = old_units.iter().find(|u| &u.name == name) else {
            continue;
        };
        journal.record_enablement(host, name)?;
        if old.enabled == Some(true) && units::unit_file_exists(&host.fs, name)? {
            host.systemd.disable(std::slice::from_ref(name))?;
        }
        for d in old.dropins.as_deref().unwrap_or_default() {
            let p = units::dropin_path(name, &d.name);
            journal.record_managed(&host.fs, &p)?;
            if host.fs.exists(&p)? {
                backup::release(&host.fs, &p)?;
            }
        }
        let p = units::unit_path(name);
        journal.record_managed(&host.fs, &p)?;
        if old.mask == Some(true) {
            units::unmask_unit(&host.fs, name)?;
        } else if has_text(&old.contents) {
            backup::release(&host.fs, &p)?;
        }
        tracing::info!(unit = %name, "removed stale unit");
    }
    if !plan.diff.units.removed.is_empty() {
        host.systemd.daemon_reload()?;
    }
    Ok(())
}

fn core_user(cfg: &ParsedConfig) -> Option<&ignition_config::v3_5::User> {
    cfg.ignition
        .passwd
        .as_ref()?
        .users
        .as_deref()?
        .iter()
        .find(|u| u.name == paths::CORE_USER)
}

/// Writes the `core` user's SSH keys and password hash when they changed (or on a forced
/// re-apply). Returns whether anything was written.
fn write_core_user(
    host: &Host,
    plan: &UpdatePlan,
    journal: &mut Journal,
) -> Result<bool, ApplyError> {
    let keys_changed = plan.diff.ssh_keys_changed
        || (plan.force && core_user(&plan.new).is_some_and(|u| u.ssh_authorized_keys.is_some()));
    let hash_changed = plan.diff.password_hash_changed;
    if !keys_changed && !hash_changed {
        return Ok(false);
    }
    if passwd::lookup_uid(&host.fs, paths::CORE_USER).is_err() {
        tracing::info!("user core does not exist on this host; skipping SSH keys and password");
        return Ok(false);
    }
    let core = core_user(&plan.new);
    if keys_changed {
        let keys = core
            .and_then(|u| u.ssh_authorized_keys.clone())
            .unwrap_or_default();
        journal.record(&host.fs, paths::CORE_SSH_KEYS)?;
        tracing::info!(count = keys.len(), "writing SSH keys of user core");
        users::write_core_ssh_keys(&host.fs, &keys)?;
    }
    if hash_changed {
        let hash = users::effective_password_hash(core.and_then(|u| u.password_hash.as_deref()));
        journal.record(&host.fs, paths::SHADOW)?;
        tracing::info!("setting password hash of user core");
        users::set_password_hash(&host.fs, paths::CORE_USER, hash)?;
    }
    Ok(true)
}

/// How to rebase: an image-mode image as the container it is (upstream's `RebaseLayered`, no
/// custom origin); otherwise keep the booted deployment's kind of origin, where a never-adopted
/// or pivot-era deployment gets the legacy `pivot://` custom origin, which is what upstream's
/// nodes of that era show once adopted (seed 000).
pub fn rebase_mode(booted: &Origin, url: &str, image_mode: bool) -> RebaseMode {
    if image_mode {
        return RebaseMode::Container;
    }
    match booted {
        Origin::Container(_) => RebaseMode::Container,
        Origin::Pivot(_) | Origin::Ostree(_) => RebaseMode::Pivot {
            refspec: format!("ostree-unverified-registry:{url}"),
        },
    }
}

/// Whether the update runs on on-cluster image mode (either side has an image): upstream's
/// `oclEnabled`, where the image carries the kernel and packages, so neither the extensions
/// repo nor extensions apply.
fn image_mode_update(plan: &UpdatePlan) -> bool {
    !image_mode::image_of(&plan.old.mc).is_empty() || !image_mode::image_of(&plan.new.mc).is_empty()
}

/// The extensions image to provide as the `coreos-extensions` repo for this OS update, as
/// upstream decides it in `applyLayeredOSChanges`: when either config has extensions or a
/// non-default kernel (whose packages come from the same repo, and rpm-ostree needs the repo of
/// layered packages to carry them over a rebase), outside image mode, on a host that installs
/// extensions.
pub fn extensions_image(plan: &UpdatePlan, opts: ApplyOptions) -> Option<&str> {
    let image = plan.new.mc.spec.base_os_extensions_container_image.as_str();
    let has_extensions = |c: &ParsedConfig| {
        !c.mc
            .spec
            .extensions
            .as_deref()
            .unwrap_or_default()
            .is_empty()
    };
    let has_kernel = |c: &ParsedConfig| {
        mco_render::diff::canonical_kernel_type(&c.mc.spec.kernel_type)
            != KernelType::Default.as_mc()
    };
    let wanted = has_extensions(&plan.old)
        || has_extensions(&plan.new)
        || has_kernel(&plan.old)
        || has_kernel(&plan.new);
    (opts.extensions && !image.is_empty() && wanted && !image_mode_update(plan)).then_some(image)
}

/// Whether the layered extension packages are reconciled in this update (upstream's
/// `applyExtensions`): some config has extensions, and they or the OS image changed; a forced
/// re-apply reconciles them too, as it re-applies everything.
fn extensions_to_apply(plan: &UpdatePlan, opts: ApplyOptions) -> bool {
    let old = plan.old.mc.spec.extensions.as_deref().unwrap_or_default();
    let new = plan.new.mc.spec.extensions.as_deref().unwrap_or_default();
    opts.extensions
        && !image_mode_update(plan)
        && !(old.is_empty() && new.is_empty())
        && (plan.force || plan.diff.extensions_changed || plan.diff.os_image_changed)
}

fn update_os(
    host: &Host,
    plan: &UpdatePlan,
    opts: ApplyOptions,
    journal: &mut Journal,
) -> Result<bool, ApplyError> {
    let url = plan.new.mc.spec.os_image_url.clone();
    let os_err = |source: HostError| ApplyError::Os {
        url: url.clone(),
        source,
    };
    journal.record_os(&host.fs)?;
    let Some(image) = extensions_image(plan, opts) else {
        return update_os_steps(host, plan, opts);
    };
    // Journalled so that a crash with the repo in place removes it; the content is under /run.
    journal.record(&host.fs, extensions::REPO_FILE)?;
    tracing::info!(image, "providing the extensions repo");
    let dir = host.extensions.provide(image).map_err(os_err)?;
    let result = update_os_steps(host, plan, opts);
    if let Err(e) = host.extensions.withdraw(&dir) {
        tracing::warn!(error = %e, dir, "could not remove the extensions repo");
    }
    result
}

/// The waits between attempts of a remote rebase: upstream's backoff (10 s doubling, capped at
/// 60 s, 7 steps; OCPBUGS-43406: a pull that fails while, say, CoreDNS restarts succeeds on a
/// later try). Reaching the cap ends it, so upstream tries 4 times over 70 s, and so does mco.
pub fn rebase_waits() -> Vec<Duration> {
    retry::backoff_waits(Duration::from_secs(10), 2, 7, Duration::from_secs(60))
}

/// Rebases to `url`, trying again after each of [`rebase_waits`] while the pull fails. The
/// engine holds the node in its update meanwhile (drained, `Working`), as upstream's daemon
/// does, instead of failing the update at the first transient registry or DNS error.
fn rebase(host: &Host, url: &str, mode: &RebaseMode) -> Result<(), ApplyError> {
    let what = format!("rebase to {url}");
    // Linking the pull secret fails only on the node itself: that ends the update at once.
    let mut local = None;
    let pulled = retry::retry(&rebase_waits(), &host.pause, &what, || {
        // Before every pull: the pull secret may have changed since the last one, and a
        // reboot empties /run. Not journalled: it holds a path, not contents, and the next pull
        // relinks it anyway.
        if let Err(e) = ostree::link_pull_secret(&host.fs) {
            local = Some(e);
            return Ok(());
        }
        host.os.rebase(url, mode)
    });
    if let Some(source) = local {
        return Err(ApplyError::Os {
            url: url.to_string(),
            source,
        });
    }
    pulled.map_err(|e| ApplyError::OsRetries {
        url: url.to_string(),
        source: e.last,
    })
}

/// The OS steps in upstream's order: rebase, kernel arguments, kernel type, extensions.
fn update_os_steps(host: &Host, plan: &UpdatePlan, opts: ApplyOptions) -> Result<bool, ApplyError> {
    let url = plan.new.mc.spec.os_image_url.clone();
    let os_err = |source: HostError| ApplyError::Os {
        url: url.clone(),
        source,
    };
    host.os.cleanup_pending().map_err(os_err)?;
    let status = host.os.status().map_err(os_err)?;
    let booted_url = status.booted.os_image_url();
    let mut changed = false;
    if !url.is_empty() && (plan.force || booted_url.as_deref() != Some(url.as_str())) {
        let layered = !image_mode::image_of(&plan.new.mc).is_empty();
        let mode = rebase_mode(&status.booted.origin, &url, layered);
        tracing::info!(from = ?booted_url, to = %url, ?mode, "rebasing OS");
        rebase(host, &url, &mode)?;
        changed = true;
    } else if url == booted_url.clone().unwrap_or_default() {
        tracing::info!(url = %url, "already booted into the target OS image; skipping rebase");
    }
    if plan.force || plan.diff.kernel_arguments_changed {
        let delete = plan.old.kernel_arguments();
        let append = plan.new.kernel_arguments();
        if !delete.is_empty() || !append.is_empty() {
            tracing::info!(?delete, ?append, "changing kernel arguments");
            host.os.set_kargs(&delete, &append).map_err(os_err)?;
            changed = true;
        }
    }
    if plan.force || plan.diff.kernel_type_changed {
        let kernel = KernelType::from_mc(&plan.new.mc.spec.kernel_type).unwrap_or_default();
        tracing::info!(kernel = kernel.as_mc(), "setting kernel type");
        host.os.set_kernel_type(kernel).map_err(os_err)?;
        changed = true;
    }
    if extensions_to_apply(plan, opts) {
        changed |= apply_extensions(host, plan).map_err(os_err)?;
    }
    Ok(changed)
}

/// Moves the layered extension packages from what the booted deployment requests to the new
/// config's extensions in one `rpm-ostree update`, then checks the staged deployment requests
/// them all before any reboot (upstream's `applyExtensions` and `verifyExtensionsStaged`).
/// Returns whether a deployment was staged.
fn apply_extensions(host: &Host, plan: &UpdatePlan) -> Result<bool, HostError> {
    let wanted = plan.new.mc.spec.extensions.as_deref().unwrap_or_default();
    let installed = host.os.status()?.booted.requested_packages;
    let args = mco_extensions::extension_args(&installed, wanted);
    if args.is_empty() {
        tracing::info!("No extension updates required");
        return Ok(false);
    }
    tracing::info!(?args, "Applying extensions");
    host.os.update_packages(&args)?;
    let staged = host.os.status()?.staged.ok_or_else(|| {
        HostError::State("no staged deployment found after applying extensions".into())
    })?;
    mco_extensions::verify_staged(&staged.requested_packages, wanted).map_err(HostError::State)?;
    tracing::info!(config = %plan.new.name, "verified the extension packages are staged");
    Ok(true)
}

/// Writes `/etc/machine-config-daemon/currentconfig` and `currentimage`, the source of truth
/// after a reboot, both journalled first.
fn write_current_config(
    fs: &HostFs,
    cfg: &ParsedConfig,
    journal: &mut Journal,
) -> Result<(), ApplyError> {
    journal.record_all(fs, &[paths::CURRENT_CONFIG, paths::CURRENT_IMAGE])?;
    store_current(fs, &cfg.mc)
}

/// Stores `mc`, the config the node is on, as upstream's daemon keeps it: the rendered config
/// (its own `osImageURL`, without the image-mode annotations) in `currentconfig`, and its
/// image-mode image in `currentimage`, which goes when there is none
/// ([`image_mode::split`]). The image is written first: `currentconfig` completes the pair.
/// Callers journal both paths when the write must be undone on failure.
pub fn store_current(fs: &HostFs, mc: &mco_api::MachineConfig) -> Result<(), ApplyError> {
    let (rendered, image) = image_mode::split(mc);
    let name = rendered.metadata.name.clone().unwrap_or_default();
    let data =
        serde_json::to_vec(&rendered).map_err(|source| ApplyError::Serialize { name, source })?;
    if image.is_empty() {
        // A removal lost to a power cut would put the node back on the image.
        if fs.remove_file(paths::CURRENT_IMAGE)? {
            fs.sync_parent(paths::CURRENT_IMAGE)?;
        }
    } else {
        fs.write_atomic(
            paths::CURRENT_IMAGE,
            image.as_bytes(),
            &FileAttrs::default(),
        )?;
    }
    fs.write_atomic(paths::CURRENT_CONFIG, &data, &FileAttrs::default())?;
    Ok(())
}

/// Reads the on-disk current config, if any: `currentconfig` with the image of
/// `currentimage` embedded ([`image_mode::join`]), so that it is the config the node was
/// updated to, booted image included. Upstream's own files read the same.
pub fn read_current_config(fs: &HostFs) -> Result<Option<mco_api::MachineConfig>, HostError> {
    let Some(data) = fs.read_optional(paths::CURRENT_CONFIG)? else {
        return Ok(None);
    };
    let mc = serde_json::from_slice(&data).map_err(|e| HostError::Json {
        what: paths::CURRENT_CONFIG.into(),
        source: e,
    })?;
    let image = fs
        .read_optional(paths::CURRENT_IMAGE)?
        .map(|d| String::from_utf8_lossy(&d).into_owned());
    Ok(Some(image_mode::join(&mc, image.as_deref())))
}

/// Runs the rebootless post actions in order (upstream: Reload, Restart, DaemonReload, crio
/// reload for Special). `None` and `Drain` need nothing here.
pub fn run_rebootless_actions(host: &Host, actions: &[PostConfigAction]) -> Result<(), ApplyError> {
    for a in actions {
        let err = |source| ApplyError::PostAction {
            action: a.to_string(),
            source,
        };
        match a {
            PostConfigAction::Reload(u) => host.systemd.reload(u).map_err(err)?,
            PostConfigAction::Restart(u) => host.systemd.restart(u).map_err(err)?,
            PostConfigAction::DaemonReload => host.systemd.daemon_reload().map_err(err)?,
            PostConfigAction::Special => host.systemd.reload("crio.service").map_err(err)?,
            PostConfigAction::None | PostConfigAction::Drain | PostConfigAction::Reboot => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_mode_image_is_rebased_as_a_container_whatever_was_booted() {
        let url = "registry.example/os@sha256:1";
        let pivot = Origin::Pivot("registry.example/base:1".into());
        assert!(matches!(
            rebase_mode(&pivot, url, false),
            RebaseMode::Pivot { .. }
        ));
        assert_eq!(rebase_mode(&pivot, url, true), RebaseMode::Container);
        let container = Origin::Container("ostree-unverified-registry:x".into());
        assert_eq!(rebase_mode(&container, url, false), RebaseMode::Container);
    }
}
