//! `firstboot-complete-machineconfig`: apply the config the node was provisioned with
//! (`/etc/ignition-machine-config-encapsulated.json`) before it joins the cluster, OS included,
//! on every ostree-booted host whatever its os-release says (seed 000's `ID="uos"` hosts were
//! skipped by upstream's ID check and stayed un-adopted for months).

use mco_api::MachineConfig;

use crate::engine::plan::{ActionPolicy, EMPTY_CONFIG_NAME};
use crate::engine::{Engine, EngineError, RecordingReporter, UpdateOptions, UpdateOutcome};
use crate::error::HostError;
use crate::host::paths;

/// What firstboot did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstbootOutcome {
    /// Applied and renamed; a reboot was requested.
    Rebooting {
        /// The config applied.
        config: String,
    },
    /// Applied and renamed; nothing needed a reboot.
    Completed {
        /// The config applied.
        config: String,
    },
    /// Already done earlier: the file was renamed to `.bak` by a previous run.
    AlreadyCompleted {
        /// The message for the user.
        message: String,
    },
    /// No first-boot config on this node at all.
    NothingToDo {
        /// The message for the user.
        message: String,
    },
}

/// Why firstboot failed.
#[derive(Debug, thiserror::Error)]
pub enum FirstbootError {
    /// Reading or renaming the config failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The config is not a MachineConfig.
    #[error("parsing {path}: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Applying failed (and was rolled back).
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// `<path>.bak`.
pub fn done_path(path: &str) -> String {
    format!("{path}.bak")
}

/// The config the node runs before first boot completes: its booted OS, and those of the new
/// config's kernel arguments the host already has (so a re-run changes nothing, and arguments
/// mco never set are not deleted).
fn booted_config(engine: &Engine, new: &MachineConfig) -> Result<MachineConfig, HostError> {
    let mut mc = MachineConfig::new(EMPTY_CONFIG_NAME, Default::default());
    if engine.managed_os() {
        let status = engine.host.os.status()?;
        mc.spec.os_image_url = status.booted.os_image_url().unwrap_or_default();
        let have = engine.host.os.kargs()?;
        let wanted = mco_render::diff::split_kernel_arguments(
            new.spec.kernel_arguments.as_deref().unwrap_or_default(),
        );
        let present: Vec<String> = wanted.into_iter().filter(|k| have.contains(k)).collect();
        if !present.is_empty() {
            mc.spec.kernel_arguments = Some(present);
        }
    }
    Ok(mc)
}

/// Applies the first-boot config at `path` (default [`paths::FIRSTBOOT_CONFIG`]), renames it to
/// `.bak`, then reboots when the update needs it. Running it again afterwards is a no-op that
/// says so.
pub fn complete_machineconfig(
    engine: &Engine,
    path: Option<&str>,
) -> Result<FirstbootOutcome, FirstbootError> {
    let path = path.unwrap_or(paths::FIRSTBOOT_CONFIG);
    let bak = done_path(path);
    let Some(data) = engine.host.fs.read_optional(path)? else {
        if engine.host.fs.exists(&bak)? {
            let message = format!(
                "first boot already completed: {path} was applied and renamed to {bak}; nothing to do"
            );
            tracing::info!("{message}");
            return Ok(FirstbootOutcome::AlreadyCompleted { message });
        }
        let message = format!("no first-boot config at {path}; nothing to do");
        tracing::info!("{message}");
        return Ok(FirstbootOutcome::NothingToDo { message });
    };
    let new: MachineConfig =
        serde_json::from_slice(&data).map_err(|source| FirstbootError::Parse {
            path: path.to_string(),
            source,
        })?;
    let name = new.metadata.name.clone().unwrap_or_default();
    let old = booted_config(engine, &new)?;
    tracing::info!(
        os = %engine.os.describe(),
        config = %name,
        "completing first boot"
    );
    let mut reporter = RecordingReporter::default();
    let outcome = engine.update(
        &old,
        &new,
        UpdateOptions {
            force: false,
            policy: ActionPolicy::Legacy,
            // First boot writes the whole config; upstream never applies overrides there.
            storage_overrides: Default::default(),
            defer_reboot: true,
        },
        &mut reporter,
    )?;
    // Renamed before the reboot so that the first-boot unit (conditional on the file) does not
    // run again; a rename already done by a concurrent run is not an error.
    if engine.host.fs.exists(path)? {
        engine.host.fs.rename(path, &bak)?;
    }
    match outcome {
        UpdateOutcome::RebootDeferred | UpdateOutcome::Rebooting => {
            let rationale = format!("Completing firstboot provisioning to {name}");
            tracing::info!("{rationale}");
            engine.host.rebooter.reboot(&rationale)?;
            Ok(FirstbootOutcome::Rebooting { config: name })
        }
        UpdateOutcome::Rebootless { .. } => Ok(FirstbootOutcome::Completed { config: name }),
    }
}
