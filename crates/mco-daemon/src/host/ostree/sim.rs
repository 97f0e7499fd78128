//! The simulated OS updater: deployments in `<root>/var/lib/mco-sim/ostree.json`, in the shape
//! of `rpm-ostree status --json`, so the same parser and the same update engine serve both.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::{
    DEFAULT_KERNEL_PACKAGES, DeploymentJson, KernelType, OsStatus, OsUpdater, PIVOT_DESCRIPTION,
    PIVOT_SCHEME, RebaseMode, StatusJson,
};
use crate::error::{HostError, Result};
use crate::host::fs::{FileAttrs, HostFs};
use crate::host::paths;

/// Per-deployment kernel arguments; real rpm-ostree keeps them in the boot loader entry, so
/// the key is namespaced to show it is the simulator's own.
const KARGS_KEY: &str = "mco-sim-kernel-arguments";
/// Top-level map of image URL to `{ "version": ... }`, so a simulated rebase can report the
/// version the image would carry.
const IMAGES_KEY: &str = "mco-sim-images";

/// A simulated node's ostree, state kept under its root.
#[derive(Debug)]
pub struct SimOstree {
    fs: HostFs,
}

fn fake_checksum(seed: &str) -> String {
    (0..4u8)
        .map(|i| {
            let mut h = DefaultHasher::new();
            (seed, i).hash(&mut h);
            format!("{:016x}", h.finish())
        })
        .collect()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn kargs_of(d: &DeploymentJson) -> Vec<String> {
    d.extra
        .get(KARGS_KEY)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn set_kargs_of(d: &mut DeploymentJson, kargs: Vec<String>) {
    d.extra.insert(
        KARGS_KEY.into(),
        Value::Array(kargs.into_iter().map(Value::String).collect()),
    );
}

impl SimOstree {
    /// The simulated ostree of the node at `fs`.
    pub fn new(fs: HostFs) -> SimOstree {
        SimOstree { fs }
    }

    /// Writes the whole state (a node's initial deployments, e.g. from a captured fixture).
    pub fn seed(&self, state: &StatusJson) -> Result<()> {
        self.save(state)
    }

    /// Seeds from `rpm-ostree status --json` text, giving every deployment `kargs` when it
    /// has none of its own.
    pub fn seed_from_json(&self, json: &str, kargs: &[String]) -> Result<()> {
        let mut state: StatusJson = serde_json::from_str(json).map_err(|e| HostError::Json {
            what: "simulated ostree seed".into(),
            source: e,
        })?;
        for d in &mut state.deployments {
            if !d.extra.contains_key(KARGS_KEY) {
                set_kargs_of(d, kargs.to_vec());
            }
        }
        self.save(&state)
    }

    /// The raw state.
    pub fn state(&self) -> Result<StatusJson> {
        let data = self
            .fs
            .read_optional(paths::SIM_OSTREE_STATE)?
            .ok_or_else(|| {
                HostError::State(format!(
                    "simulated ostree has no state at {}",
                    paths::SIM_OSTREE_STATE
                ))
            })?;
        serde_json::from_slice(&data).map_err(|e| HostError::Json {
            what: paths::SIM_OSTREE_STATE.into(),
            source: e,
        })
    }

    fn save(&self, state: &StatusJson) -> Result<()> {
        let data = serde_json::to_vec_pretty(state).map_err(|e| HostError::Json {
            what: paths::SIM_OSTREE_STATE.into(),
            source: e,
        })?;
        self.fs
            .write_atomic(paths::SIM_OSTREE_STATE, &data, &FileAttrs::default())
    }

    fn update<T>(&self, f: impl FnOnce(&mut StatusJson) -> Result<T>) -> Result<T> {
        let mut state = self.state()?;
        let r = f(&mut state)?;
        self.save(&state)?;
        Ok(r)
    }

    /// Declares the version an image carries, so rebasing to it reports that version.
    pub fn register_image(&self, url: &str, version: &str) -> Result<()> {
        self.update(|s| {
            let images = s
                .extra
                .entry(IMAGES_KEY)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = images {
                m.insert(url.into(), serde_json::json!({ "version": version }));
            }
            Ok(())
        })
    }

    /// Kernel arguments of the booted deployment (what `/proc/cmdline` would show).
    pub fn booted_kargs(&self) -> Result<Vec<String>> {
        let s = self.state()?;
        s.deployments
            .iter()
            .find(|d| d.booted)
            .map(kargs_of)
            .ok_or_else(|| HostError::State("no booted deployment found".into()))
    }

    /// What a reboot does: the staged deployment becomes booted and the previously booted one
    /// becomes the rollback (older ones are pruned, as ostree keeps two). Returns whether
    /// anything was staged.
    pub fn finalize_reboot(&self) -> Result<bool> {
        self.update(|s| {
            let Some(staged_idx) = staged_index(s) else {
                return Ok(false);
            };
            let booted_idx = booted_index(s)?;
            let mut next = s.deployments[staged_idx].clone();
            next.staged = false;
            next.booted = true;
            let mut prev = s.deployments[booted_idx].clone();
            prev.booted = false;
            s.deployments = vec![next, prev];
            Ok(true)
        })
    }

    /// Starts a new staged deployment from the merge deployment (staged, else booted).
    fn stage_from_merge(s: &mut StatusJson) -> Result<usize> {
        if let Some(i) = staged_index(s) {
            return Ok(i);
        }
        let booted_idx = booted_index(s)?;
        let mut d = s.deployments[booted_idx].clone();
        d.booted = false;
        d.staged = true;
        d.serial = next_serial(s, &d.osname, &d.checksum);
        d.id = format!("{}-{}.{}", d.osname, d.checksum, d.serial);
        s.deployments.insert(0, d);
        Ok(0)
    }
}

fn booted_index(s: &StatusJson) -> Result<usize> {
    s.deployments
        .iter()
        .position(|d| d.booted)
        .ok_or_else(|| HostError::State("no booted deployment found".into()))
}

fn staged_index(s: &StatusJson) -> Option<usize> {
    s.deployments.iter().position(|d| d.staged)
}

fn next_serial(s: &StatusJson, osname: &str, checksum: &str) -> u32 {
    s.deployments
        .iter()
        .filter(|d| d.osname == osname && d.checksum == checksum)
        .map(|d| d.serial + 1)
        .max()
        .unwrap_or(0)
}

impl OsUpdater for SimOstree {
    fn status(&self) -> Result<OsStatus> {
        OsStatus::from_json(&self.state()?)
    }

    fn rebase(&self, url: &str, mode: &RebaseMode) -> Result<()> {
        self.update(|s| {
            let merge_idx = staged_index(s).unwrap_or(booted_index(s)?);
            let merge = s.deployments[merge_idx].clone();
            let version = s
                .extra
                .get(IMAGES_KEY)
                .and_then(|m| m.get(url))
                .and_then(|v| v.get("version"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .or(merge.version.clone());
            let checksum = fake_checksum(url);
            let mut d = DeploymentJson {
                osname: merge.osname.clone(),
                serial: next_serial(s, &merge.osname, &checksum),
                checksum: checksum.clone(),
                version,
                timestamp: Some(now()),
                staged: true,
                requested_packages: merge.requested_packages.clone(),
                requested_base_removals: merge.requested_base_removals.clone(),
                ..DeploymentJson::default()
            };
            d.id = format!("{}-{}.{}", d.osname, checksum, d.serial);
            match mode {
                RebaseMode::Pivot { .. } => {
                    d.origin = Some(checksum.clone());
                    d.custom_origin = Some(vec![
                        format!("{PIVOT_SCHEME}{url}"),
                        PIVOT_DESCRIPTION.into(),
                    ]);
                }
                RebaseMode::Container => {
                    d.container_image_reference = Some(format!("ostree-unverified-registry:{url}"));
                    d.container_image_reference_digest = Some(format!("sha256:{checksum}"));
                }
            }
            set_kargs_of(&mut d, kargs_of(&merge));
            d.extra
                .insert("unlocked".into(), Value::String("none".into()));
            d.extra.insert(
                "base-commit-meta".into(),
                serde_json::json!({ "version": d.version.clone().unwrap_or_default() }),
            );
            // A new rebase replaces any pending deployment, as rpm-ostree does.
            s.deployments.retain(|x| !x.staged);
            s.deployments.insert(0, d);
            Ok(())
        })
    }

    fn kargs(&self) -> Result<Vec<String>> {
        let s = self.state()?;
        let idx = staged_index(&s).unwrap_or(booted_index(&s)?);
        Ok(kargs_of(&s.deployments[idx]))
    }

    fn set_kargs(&self, delete: &[String], append: &[String]) -> Result<()> {
        if delete.is_empty() && append.is_empty() {
            return Ok(());
        }
        self.update(|s| {
            let idx = SimOstree::stage_from_merge(s)?;
            let mut kargs = kargs_of(&s.deployments[idx]);
            for del in delete {
                if let Some(pos) = kargs.iter().position(|k| k == del) {
                    kargs.remove(pos);
                }
            }
            kargs.extend(append.iter().cloned());
            set_kargs_of(&mut s.deployments[idx], kargs);
            Ok(())
        })
    }

    fn set_kernel_type(&self, kernel: KernelType) -> Result<()> {
        let current = self.status()?.default_deployment().kernel_type();
        if current == kernel {
            return Ok(());
        }
        self.update(|s| {
            let idx = SimOstree::stage_from_merge(s)?;
            let d = &mut s.deployments[idx];
            d.requested_packages
                .retain(|p| !current.packages().contains(&p.as_str()));
            d.requested_base_removals
                .retain(|p| !DEFAULT_KERNEL_PACKAGES.contains(&p.as_str()));
            if kernel != KernelType::Default {
                d.requested_packages
                    .extend(kernel.packages().iter().map(|p| p.to_string()));
                d.requested_base_removals
                    .extend(DEFAULT_KERNEL_PACKAGES.iter().map(|p| p.to_string()));
            }
            Ok(())
        })
    }

    fn update_packages(&self, args: &[String]) -> Result<()> {
        if args.is_empty() {
            return Ok(());
        }
        self.update(|s| {
            let idx = SimOstree::stage_from_merge(s)?;
            let requested = &mut s.deployments[idx].requested_packages;
            let mut it = args.iter();
            while let Some(flag) = it.next() {
                let pkg = it.next().ok_or_else(|| {
                    HostError::State(format!("rpm-ostree update: {flag} without a package"))
                })?;
                // rpm-ostree's own refusals, so the simulation is no more lenient than a host.
                match flag.as_str() {
                    "--install" if requested.contains(pkg) => {
                        return Err(HostError::State(format!(
                            "error: Package '{pkg}' is already requested"
                        )));
                    }
                    "--install" => requested.push(pkg.clone()),
                    "--uninstall" => match requested.iter().position(|p| p == pkg) {
                        Some(i) => {
                            requested.remove(i);
                        }
                        None => {
                            return Err(HostError::State(format!(
                                "error: Package/capability '{pkg}' is not currently requested"
                            )));
                        }
                    },
                    other => {
                        return Err(HostError::State(format!(
                            "rpm-ostree update: unsupported argument {other}"
                        )));
                    }
                }
            }
            Ok(())
        })
    }

    fn cleanup_pending(&self) -> Result<()> {
        self.update(|s| {
            let booted_idx = booted_index(s)?;
            let booted_id = s.deployments[booted_idx].id.clone();
            let mut seen_booted = false;
            s.deployments.retain(|d| {
                if d.id == booted_id {
                    seen_booted = true;
                }
                seen_booted && !d.staged
            });
            Ok(())
        })
    }

    fn cleanup_rollback(&self) -> Result<()> {
        self.update(|s| {
            let booted_idx = booted_index(s)?;
            s.deployments.truncate(booted_idx + 1);
            Ok(())
        })
    }
}
