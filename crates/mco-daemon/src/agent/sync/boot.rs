//! The start-up sync: finish or repeat a reboot, validate the disk against the current config,
//! resume, and complete.

use std::sync::Arc;

use mco_api::constants::{annotations as ann, mcn_conditions as c, states};

use super::update::drift_monitor;
use super::{Daemon, Exit, SyncError, annotation, blocking};
use crate::agent::mcn::{Status, Write};
use crate::engine::{BootCheck, EngineError, UpdateOutcome};
use crate::error::HostError;
use crate::host::fs::FileAttrs;
use crate::host::paths;

impl Daemon {
    /// The start-up sync: finish a reboot, validate, resume, complete.
    pub(super) async fn boot(&mut self) -> Result<Option<Exit>, SyncError> {
        let inner = Arc::clone(&self.inner);
        let node = inner.first_node().await?;
        // Before anything reads or writes the host: first boot's OS step and the start-up
        // validation would both take the layered image for a wrong one.
        if let Some(why) = super::decide::image_mode(&node) {
            return Err(SyncError::ImageMode(why));
        }
        // A reboot still owed (requested in this very boot) has not happened: the start-up
        // check below requests it again, and only the next boot may say "rebooted".
        let rebooting = annotation(&node, ann::POST_CONFIG_ACTION) == states::REBOOTING;
        bootstrap(&inner, &node).await?;
        let engine = Arc::clone(&inner.engine);
        let (owed, on_disk) = blocking(move || -> Result<_, HostError> {
            let on_disk = engine.on_disk_config()?;
            Ok((
                rebooting && engine.reboot_owed_into(on_disk.as_ref())?,
                on_disk,
            ))
        })
        .await?;
        if rebooting && !owed {
            // Both ride with the boot's next write (with Resumed, the uncordon request).
            let m = "Node has rebooted";
            inner.mcn_later(
                Write::parent(c::UPDATE_POST_ACTION_COMPLETE, Status::True, m).child(
                    c::REBOOTED_NODE,
                    Status::True,
                    m,
                ),
            );
            inner.annotate_later(ann::POST_CONFIG_ACTION, None);
        }
        let annotated = annotation(&node, ann::CURRENT_CONFIG);
        let desired = annotation(&node, ann::DESIRED_CONFIG);
        let current = match on_disk {
            Some(mc) => {
                let name = mc.metadata.name.clone().unwrap_or_default();
                if !annotated.is_empty() && annotated != name {
                    tracing::info!(
                        "Disk currentConfig {name} overrides node's currentConfig annotation {annotated}"
                    );
                }
                mc
            }
            None if !annotated.is_empty() => inner.mcs.get(&annotated).await?,
            None if !desired.is_empty() => inner.mcs.get(&desired).await?,
            None => {
                tracing::info!("no current or desired config yet; waiting");
                return Ok(None);
            }
        };
        let current_name = current.metadata.name.clone().unwrap_or_default();
        let (engine, tx) = (Arc::clone(&inner.engine), inner.drift_tx.clone());
        let check_cfg = current.clone();
        // A valid disk is watched for drift from here on: the monitor starts in the same trip
        // to the blocking pool.
        let checked = blocking(move || {
            let check = engine.boot_check(&check_cfg)?;
            let monitor = (check == BootCheck::Valid)
                .then(|| drift_monitor(engine, &check_cfg, tx))
                .flatten();
            Ok::<_, EngineError>((check, monitor))
        });
        let (check, monitor) = match checked.await {
            Err(SyncError::Engine(e)) => {
                inner
                    .event("Warning", "OnDiskStateValidationFailed", &e.to_string())
                    .await;
                return Err(e.into());
            }
            other => other?,
        };
        self.booted = true;
        if check == BootCheck::RebootPending {
            let rationale = format!("Node will reboot into config {current_name}");
            inner
                .annotate(&[(ann::POST_CONFIG_ACTION, Some(states::REBOOTING))])
                .await?;
            let engine = Arc::clone(&inner.engine);
            blocking(move || {
                engine
                    .host
                    .rebooter
                    .reboot(&rationale)
                    .map_err(EngineError::Reboot)
            })
            .await?;
            return Ok(Some(Exit::Rebooting));
        }
        if check == BootCheck::Forced {
            let target = async {
                if desired.is_empty() {
                    Ok(current.clone())
                } else {
                    inner.config(&desired).await
                }
            };
            let (target, settings) = futures::future::join(target, inner.cluster_settings()).await;
            let target = target?;
            return match inner
                .run_update(current, target.clone(), true, settings)
                .await?
            {
                UpdateOutcome::Rebooting | UpdateOutcome::RebootDeferred => {
                    Ok(Some(Exit::Rebooting))
                }
                UpdateOutcome::Rebootless { .. } => {
                    let n = target.metadata.name.unwrap_or_default();
                    inner.finish_rebootless(&n).await?;
                    Ok(None)
                }
            };
        }
        // Rides with the uncordon request, or with whatever this sync writes next.
        inner.mcn_later(Write::parent(
            c::RESUMED,
            Status::True,
            format!("In desired config {current_name}. Resumed normal operations."),
        ));
        inner.stop_drift();
        inner.keep_drift(monitor);
        if desired.is_empty() || desired == current_name {
            inner.complete(&current_name, Some(current)).await?;
        }
        Ok(None)
    }
}

/// A machine the machine config server provisioned starts bootstrapping, as upstream's
/// `checkStateOnFirstRun` has it: `node-annotations.json` is there, Ignition wrote the files,
/// and first boot stored a config whose Ignition is empty (the encapsulated one). The current
/// config is then the cluster's, by the node's `currentConfig` (or the file's), stored on disk
/// as the truth from here on, and the file is renamed `.bak`.
async fn bootstrap(
    inner: &super::Inner,
    node: &k8s_openapi::api::core::v1::Node,
) -> Result<(), SyncError> {
    let engine = Arc::clone(&inner.engine);
    let initial = blocking(move || {
        engine
            .host
            .fs
            .read_optional(paths::INITIAL_NODE_ANNOTATIONS)
    })
    .await?;
    let Some(data) = initial else {
        return Ok(());
    };
    let mut name = annotation(node, ann::CURRENT_CONFIG).to_string();
    if name.is_empty() {
        let file: serde_json::Value =
            serde_json::from_slice(&data).map_err(|source| HostError::Json {
                what: paths::INITIAL_NODE_ANNOTATIONS.into(),
                source,
            })?;
        name = file[ann::CURRENT_CONFIG]
            .as_str()
            .unwrap_or_default()
            .to_string();
    }
    if name.is_empty() {
        return Ok(());
    }
    let mc = inner.mcs.get(&name).await?;
    let engine = Arc::clone(&inner.engine);
    blocking(move || -> Result<(), HostError> {
        let data = serde_json::to_vec(&mc).map_err(|source| HostError::Json {
            what: paths::CURRENT_CONFIG.into(),
            source,
        })?;
        let fs = &engine.host.fs;
        fs.write_atomic(paths::CURRENT_CONFIG, &data, &FileAttrs::default())?;
        fs.rename(
            paths::INITIAL_NODE_ANNOTATIONS,
            &format!("{}.bak", paths::INITIAL_NODE_ANNOTATIONS),
        )
    })
    .await?;
    tracing::info!("Bootstrapping: {name} from the cluster is the current config on disk");
    Ok(())
}
