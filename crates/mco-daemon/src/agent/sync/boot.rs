//! The start-up sync: finish or repeat a reboot, validate the disk against the current config,
//! resume, and complete.

use std::sync::Arc;

use mco_api::constants::{annotations as ann, mcn_conditions as c, states};

use super::decide::Target;
use super::update::{drift_monitor, target_of};
use super::{Daemon, Exit, SyncError, annotation, blocking};
use crate::agent::mcn::{Status, Write};
use crate::engine::{BootCheck, EngineError, NodeEvent, apply};
use crate::error::HostError;
use crate::host::paths;

impl Daemon {
    /// The start-up sync: finish a reboot, validate, resume, complete.
    pub(super) async fn boot(&mut self) -> Result<Option<Exit>, SyncError> {
        let inner = Arc::clone(&self.inner);
        let node = inner.first_node().await?;
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
        let annotated = Target::new(
            annotation(&node, ann::CURRENT_CONFIG),
            annotation(&node, ann::CURRENT_IMAGE),
        );
        let desired = Target::new(
            annotation(&node, ann::DESIRED_CONFIG),
            annotation(&node, ann::DESIRED_IMAGE),
        );
        // The config the node is on, as applied: on disk with the image of `currentimage`
        // embedded, else the annotations' config with their image.
        let current = match on_disk {
            Some(mc) => {
                let on_disk = target_of(&mc);
                if !annotated.config.is_empty() && annotated != on_disk {
                    tracing::info!(
                        "Disk currentConfig {on_disk} overrides node's currentConfig annotation {annotated}"
                    );
                }
                mc
            }
            None if !annotated.config.is_empty() => inner.config_known(&annotated, None).await?,
            None if !desired.config.is_empty() => inner.config_known(&desired, None).await?,
            None => {
                tracing::info!("no current or desired config yet; waiting");
                return Ok(None);
            }
        };
        let current_target = target_of(&current);
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
                inner.event(NodeEvent::warning(
                    "OnDiskStateValidationFailed",
                    e.to_string(),
                ));
                return Err(e.into());
            }
            other => other?,
        };
        self.booted = true;
        if check == BootCheck::RebootPending {
            let rationale = format!("Node will reboot into config {current_name}");
            inner.event(NodeEvent::normal("Reboot", rationale.clone()));
            let (written, ()) = futures::future::join(
                inner.annotate(&[(ann::POST_CONFIG_ACTION, Some(states::REBOOTING))]),
                inner.events.flush(super::REBOOT_FLUSH),
            )
            .await;
            written?;
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
                if desired.config.is_empty() {
                    Ok(current.clone())
                } else {
                    inner.config(&desired).await
                }
            };
            let (target, settings) = futures::future::join(target, inner.cluster_settings()).await;
            let target = target?;
            let to = target_of(&target);
            return inner
                .update_node(current, target, true, settings, &to)
                .await;
        }
        // Rides with the uncordon request, or with whatever this sync writes next.
        inner.mcn_later(Write::parent(
            c::RESUMED,
            Status::True,
            format!("In desired config {current_name}. Resumed normal operations."),
        ));
        inner.stop_drift();
        inner.keep_drift(monitor);
        // Another desired config or image is the next sync's change.
        if desired.config.is_empty() || desired == current_target {
            // In its desired config: its extensions must be installed before it is Done
            // (upstream's verifyExtensionPackages). A node booted short of its target is not
            // held back by the config it is leaving.
            let (engine, booted) = (Arc::clone(&inner.engine), current.clone());
            blocking(move || engine.verify_extensions(&booted)).await?;
            inner.complete(&current_target, Some(current)).await?;
        } else {
            inner.event(NodeEvent::normal(
                "BootResync",
                format!(
                    "Booting node {}, currentConfig {current_name}, desiredConfig {}",
                    inner.name(),
                    desired.config
                ),
            ));
        }
        Ok(None)
    }
}

/// A machine the machine config server provisioned starts bootstrapping, as upstream's
/// `checkStateOnFirstRun` has it: `node-annotations.json` is there, Ignition wrote the files,
/// and first boot stored a config whose Ignition is empty (the encapsulated one). The current
/// config is then the cluster's, by the node's `currentConfig` and `currentImage` (or the
/// file's), stored on disk as the truth from here on (`currentconfig` and `currentimage`), and
/// the file is renamed `.bak`.
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
    let mut current = Target::new(
        annotation(node, ann::CURRENT_CONFIG),
        annotation(node, ann::CURRENT_IMAGE),
    );
    if current.config.is_empty() {
        let file: serde_json::Value =
            serde_json::from_slice(&data).map_err(|source| HostError::Json {
                what: paths::INITIAL_NODE_ANNOTATIONS.into(),
                source,
            })?;
        let field = |key: &str| file[key].as_str().unwrap_or_default().to_string();
        current = Target::new(field(ann::CURRENT_CONFIG), field(ann::CURRENT_IMAGE));
    }
    if current.config.is_empty() {
        return Ok(());
    }
    let mc = inner.config_known(&current, None).await?;
    let engine = Arc::clone(&inner.engine);
    blocking(move || -> Result<(), EngineError> {
        let fs = &engine.host.fs;
        apply::store_current(fs, &mc)?;
        fs.rename(
            paths::INITIAL_NODE_ANNOTATIONS,
            &format!("{}.bak", paths::INITIAL_NODE_ANNOTATIONS),
        )?;
        Ok(())
    })
    .await?;
    tracing::info!("Bootstrapping: {current} from the cluster is the current config on disk");
    Ok(())
}
