//! The update steps a sync takes: complete an update, run one (with the drain awaited between
//! two pieces of blocking host work), adopt an equal config, and the drift monitor around them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use mco_api::constants::{annotations as ann, drain, mcn_conditions as c, states};
use mco_api::rollouts::{self, NodeCheckResult};
use mco_api::{IrreconcilableChangeDiff, MachineConfig};
use tokio::runtime::Handle;

use super::decide::Target;
use super::policy::ClusterSettings;
use super::{Exit, Inner, SyncError, blocking};
use crate::agent::mcn::{self, Status, Write};
use crate::engine::apply::{self, ApplyError};
use crate::engine::drift::{self, DriftMonitor};
use crate::engine::health;
use crate::engine::image_mode;
use crate::engine::plan::ParsedConfig;
use crate::engine::{
    Engine, EngineError, NodeEvent, Phase, ReportError, Reporter, UpdateOptions, UpdateOutcome,
};

impl Inner {
    pub(super) fn stop_drift(&self) {
        let stopped = self.drift.lock().is_ok_and(|mut d| d.take().is_some());
        if stopped {
            tracing::info!("Config Drift Monitor stopped");
            self.event(NodeEvent::normal(
                "ConfigDriftMonitorStopped",
                "Config Drift Monitor stopped",
            ));
        }
    }

    /// Whether a live drift monitor already watches against `target`, its image included: the
    /// monitor validates the booted OS image as well.
    pub(super) fn drift_watches(&self, target: &Target) -> bool {
        self.drift.lock().is_ok_and(|d| {
            d.as_ref()
                .is_some_and(|m| m.watches(&target.config) && m.image() == target.image)
        })
    }

    /// (Re)starts the drift monitor against `mc`. A live monitor for the same config is kept:
    /// a boot into Done reaches here twice, and each start parses the config and re-registers
    /// every managed path. Parsing and registering are host work, so they run on a blocking
    /// thread.
    pub(super) async fn start_drift(&self, mc: MachineConfig) {
        if self.drift_watches(&target_of(&mc)) {
            return;
        }
        self.stop_drift();
        let (engine, tx) = (Arc::clone(&self.engine), self.drift_tx.clone());
        match blocking(move || Ok::<_, SyncError>(drift_monitor(engine, &mc, tx))).await {
            Ok(monitor) => self.keep_drift(monitor),
            Err(e) => tracing::warn!(error = %e, "config drift monitor not started"),
        }
    }

    /// Keeps a monitor started by [`drift_monitor`], in place of any other.
    pub(super) fn keep_drift(&self, monitor: Option<DriftMonitor>) {
        let Some(m) = monitor else {
            return;
        };
        let message = format!(
            "Config Drift Monitor started, watching against {}",
            m.config()
        );
        if let Ok(mut d) = self.drift.lock() {
            *d = Some(m);
            self.event(NodeEvent::normal("ConfigDriftMonitorStarted", message));
        }
    }

    /// The config of `target` as applied, its image embedded ([`image_mode::embed`]):
    /// `on_disk` when it is that config with that image (as a sync has just read it),
    /// otherwise the rendered config from the API server.
    pub(super) async fn config_known(
        &self,
        target: &Target,
        on_disk: Option<MachineConfig>,
    ) -> Result<MachineConfig, SyncError> {
        match on_disk {
            Some(mc) if target_of(&mc) == *target => Ok(mc),
            _ => {
                let rendered = self.mcs.get(&target.config).await?;
                Ok(image_mode::embed(&rendered, &target.image))
            }
        }
    }

    /// The per-check timeout the controller set on this Node with its `desiredConfig`
    /// (`nodeChecks.timeout` of the governing policy): from the watched Node, which carried
    /// the target this update applied, else read.
    async fn check_timeout(&self) -> std::time::Duration {
        let watched = self.watched.borrow().clone();
        let node = match watched {
            Some(n) => Some(n),
            None => self.node().await.ok().map(Arc::new),
        };
        let value = node.as_ref().and_then(|n| {
            n.metadata
                .annotations
                .as_ref()?
                .get(rollouts::annotations::NODE_CHECK_TIMEOUT)
                .cloned()
        });
        rollouts::check_timeout(value.as_deref())
    }

    /// [`Inner::config_known`] with the on-disk config read first.
    pub(super) async fn config(&self, target: &Target) -> Result<MachineConfig, SyncError> {
        let engine = Arc::clone(&self.engine);
        let on_disk = blocking(move || engine.on_disk_config()).await?;
        self.config_known(target, on_disk).await
    }

    /// Uncordon, then Done with `currentConfig` and `currentImage` (removed outside image mode,
    /// as upstream's `SetDone`, in the same write), then `Updated=True`. `known` is the config
    /// when the caller holds it, for the drift monitor.
    pub(super) async fn complete(
        &self,
        target: &Target,
        known: Option<MachineConfig>,
    ) -> Result<(), SyncError> {
        let config = target.config.as_str();
        self.request_drain(&drain::uncordon(config), "uncordon")
            .await?;
        tracing::info!("Update completed for {target} and node has been successfully uncordoned");
        self.event(NodeEvent::normal(
            "Uncordon",
            format!("Update completed for config {config} and node has been uncordoned"),
        ));
        // The health checks' result goes out with Done, so a gate never sees an updated node
        // without it.
        let timeout = self.check_timeout().await;
        let engine = Arc::clone(&self.engine);
        let checks =
            blocking(move || Ok::<_, SyncError>(health::run(&engine.host, timeout))).await?;
        if !checks.passed {
            tracing::warn!(check = %checks.check, output = %checks.output, "node health check failed");
        }
        let result = serde_json::to_string(&NodeCheckResult {
            config: config.to_string(),
            passed: checks.passed,
            check: checks.check.clone(),
            output: checks.output.clone(),
            time: jiff::Timestamp::now().to_string(),
        })
        .unwrap_or_default();
        self.event(NodeEvent::normal(
            "NodeDone",
            format!(
                "Setting node {}, currentConfig {config} to Done",
                self.name()
            ),
        ));
        self.annotate(&[
            (ann::CURRENT_CONFIG, Some(config)),
            (ann::CURRENT_IMAGE, current_image(target)),
            (ann::STATE, Some(states::DONE)),
            (ann::REASON, Some("")),
            (rollouts::annotations::NODE_CHECKS, Some(&result)),
        ])
        .await?;
        self.metrics.set_state(states::DONE, "");
        let report = self.irreconcilable(config, known.as_ref()).await;
        if !self.drift_watches(target) {
            let mc = match known.filter(|mc| target_of(mc) == *target) {
                Some(mc) => Ok(mc),
                None => self.config(target).await,
            };
            if let Ok(mc) = mc {
                self.start_drift(mc).await;
            }
        }
        let message = updated_message(self.name(), config, &result);
        self.mcn(&Write::parent(c::UPDATED, Status::True, message).irreconcilable(report))
            .await
    }

    /// `status.irreconcilableChanges` for the node at `config` ([`Engine::irreconcilable_changes`]),
    /// against `known` when it is that config, else the one on disk. Computed once per config:
    /// the provisioning record does not change. `None`, which leaves the field as it is, where
    /// the served MachineConfigNode has no such field (upstream's before 4.20), so that no
    /// write keeps trying to set what the server prunes.
    pub(super) async fn irreconcilable(
        &self,
        config: &str,
        known: Option<&MachineConfig>,
    ) -> Option<Vec<IrreconcilableChangeDiff>> {
        if let Ok(c) = self.irreconcilable.lock()
            && let Some((name, report)) = c.as_ref()
            && name == config
        {
            return report.clone();
        }
        let served = match self.mcns.served().await {
            Ok(s) => s.has(&["status", "irreconcilableChanges"]),
            Err(e) => {
                tracing::warn!(error = %e, "MachineConfigNode schema not read; irreconcilable changes not reported");
                return None;
            }
        };
        let report = if served {
            let engine = Arc::clone(&self.engine);
            let name = config.to_string();
            let known = known
                .filter(|mc| mc.metadata.name.as_deref() == Some(config))
                .cloned();
            blocking(move || {
                let target = match known {
                    Some(mc) => Some(mc),
                    None => engine
                        .on_disk_config()?
                        .filter(|mc| mc.metadata.name.as_deref() == Some(name.as_str())),
                };
                Ok::<_, SyncError>(target.and_then(|t| engine.irreconcilable_changes(&t)))
            })
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "irreconcilable changes not reported");
                None
            })
        } else {
            None
        };
        if let Ok(mut c) = self.irreconcilable.lock() {
            *c = Some((config.to_string(), report.clone()));
        }
        report
    }

    /// One update of the node from `old` to `new` (whose target is `target`), to its reboot
    /// request or, rebootless, to Done. As upstream's `update`, it holds SIGTERM off from after
    /// the drift monitor stops until the reboot is requested ([`Inner::report`]) or it ends
    /// otherwise, failed or Done; the sync loop heeds a SIGTERM only between syncs anyway.
    pub(super) async fn update_node(
        self: &Arc<Self>,
        old: MachineConfig,
        new: MachineConfig,
        force: bool,
        settings: ClusterSettings,
        target: &Target,
    ) -> Result<Option<Exit>, SyncError> {
        self.stop_drift();
        self.catch_sigterm();
        let result = match self.run_update(old, new, force, settings).await {
            Ok(UpdateOutcome::Rebooting | UpdateOutcome::RebootDeferred) => {
                Ok(Some(Exit::Rebooting))
            }
            Ok(UpdateOutcome::Rebootless { .. }) => {
                self.finish_rebootless(target).await.map(|()| None)
            }
            Err(e) => Err(e),
        };
        self.cancel_sigterm();
        result
    }

    /// Starts holding SIGTERM off for an update, once: upstream's `catchIgnoreSIGTERM`.
    fn catch_sigterm(&self) {
        if self.update_active.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::info!("Adding SIGTERM protection");
        self.event(NodeEvent::normal(
            "AddSigtermProtection",
            "Adding SIGTERM protection",
        ));
    }

    /// Stops holding SIGTERM off, when an update did: upstream's `CancelSIGTERM`.
    pub(super) fn cancel_sigterm(&self) {
        if !self.update_active.swap(false, Ordering::SeqCst) {
            return;
        }
        tracing::info!("Removing SIGTERM protection");
        self.event(NodeEvent::normal(
            "RemoveSigtermProtection",
            "Removing SIGTERM protection",
        ));
    }

    /// Whether an update holds SIGTERM off.
    pub(super) fn update_active(&self) -> bool {
        self.update_active.load(Ordering::SeqCst)
    }

    async fn run_update(
        self: &Arc<Self>,
        old: MachineConfig,
        new: MachineConfig,
        force: bool,
        settings: ClusterSettings,
    ) -> Result<UpdateOutcome, SyncError> {
        let target = new.metadata.name.clone().unwrap_or_default();
        let res = match self.update_in_steps(old, new, force, settings).await {
            Ok(outcome) => Ok(outcome),
            Err(SyncError::Engine(e)) => Err(e),
            // Not the update's failure (its task died): nothing to record.
            Err(e) => return Err(e),
        };
        let err = res.as_ref().err().map(|e| e.to_string());
        match &res {
            Err(EngineError::Apply(ApplyError::Os { .. } | ApplyError::OsRetries { .. })) => {
                self.metrics.pivot_errors.inc()
            }
            Err(EngineError::Reboot(_)) => self.metrics.reboots_failed.inc(),
            _ => 0,
        };
        self.metrics
            .set_update(&target, err.as_deref().unwrap_or_default());
        self.mcn(&mcn::degraded(self.name(), err.as_deref()))
            .await?;
        Ok(res?)
    }

    /// [`Engine::update`] with the drain awaited here, between two pieces of blocking host work:
    /// waiting on a thread of the blocking pool for every draining node grew the pool to a
    /// thread per node in a large wave.
    pub(super) async fn update_in_steps(
        self: &Arc<Self>,
        old: MachineConfig,
        new: MachineConfig,
        force: bool,
        settings: ClusterSettings,
    ) -> Result<UpdateOutcome, SyncError> {
        let engine = Arc::clone(&self.engine);
        let mut reporter = KubeReporter::new(self);
        let opts = UpdateOptions {
            force,
            policy: settings.policy,
            storage_overrides: settings.storage_overrides,
            ..UpdateOptions::default()
        };
        let (prepared, engine, mut reporter) = blocking(move || {
            let prepared = engine.prepare_update(&old, &new, opts, &mut reporter);
            prepared.map(|p| (p, engine, reporter))
        })
        .await?;
        if prepared.drains()
            && let Err(e) = self
                .request_drain(&drain::drain(prepared.config()), "drain")
                .await
        {
            return Err(EngineError::Drain(ReportError::new(e)).into());
        }
        blocking(move || engine.apply_update(prepared, &mut reporter)).await
    }

    /// After a rebootless update: Resumed, then complete.
    pub(super) async fn finish_rebootless(&self, target: &Target) -> Result<(), SyncError> {
        self.mcn(&Write::parent(
            c::RESUMED,
            Status::True,
            format!(
                "In desired config {}. Resumed normal operations. Applying proper annotations.",
                target.config
            ),
        ))
        .await?;
        self.complete(target, None).await
    }

    /// Records `new` as current without an update, because the node already runs its
    /// equivalent `old` (a config rendered under another controller's name, e.g. upstream's
    /// `rendered-<pool>-<md5>` when mco takes over a cluster). The disk is validated against
    /// `new` first, so Done is never reported over a disk that does not match; nothing is
    /// drained, written (beyond the on-disk `currentconfig`) or rebooted, and the state never
    /// passes through `Working`.
    pub(super) async fn adopt(
        &self,
        old: &MachineConfig,
        new: MachineConfig,
    ) -> Result<(), SyncError> {
        let old_name = old.metadata.name.clone().unwrap_or_default();
        let new_name = new.metadata.name.clone().unwrap_or_default();
        let engine = Arc::clone(&self.engine);
        let cfg = new.clone();
        blocking(move || -> Result<(), EngineError> {
            engine.validate(&cfg)?;
            // The on-disk config is the source of truth after a restart: keep it naming the
            // config the node is now reported on, when the node keeps one at all.
            if engine.on_disk_config()?.is_some() {
                apply::store_current(&engine.host.fs, &cfg)?;
            }
            Ok(())
        })
        .await?;
        let target = target_of(&new);
        self.annotate(&[
            (ann::CURRENT_CONFIG, Some(new_name.as_str())),
            (ann::CURRENT_IMAGE, current_image(&target)),
            (ann::STATE, Some(states::DONE)),
            (ann::REASON, Some("")),
        ])
        .await?;
        let message = format!("adopted {new_name} (equal to {old_name}) without an update");
        tracing::info!("{message}");
        self.metrics.set_state(states::DONE, "");
        self.metrics.set_update(&new_name, "");
        self.event(NodeEvent::normal("ConfigAdopted", message.clone()));
        let report = self.irreconcilable(&new_name, Some(&new)).await;
        self.start_drift(new).await;
        self.mcn(
            &Write::parent(
                c::UPDATED,
                Status::True,
                format!("Node {} Updated", self.name()),
            )
            .irreconcilable(report),
        )
        .await
    }
}

/// The target `mc` is, as applied: its name and its embedded image ([`image_mode::image_of`]).
pub(super) fn target_of(mc: &MachineConfig) -> Target {
    Target::new(
        mc.metadata.name.clone().unwrap_or_default(),
        image_mode::image_of(mc),
    )
}

/// The `currentImage` annotation's value for a node on `target`: its image, or its removal
/// outside image mode.
fn current_image(target: &Target) -> Option<&str> {
    (!target.image.is_empty()).then_some(target.image.as_str())
}

/// The `Updated` message: upstream's, and a failed health check of the current config with
/// its output (`checks` is the node's `rollouts.mco.dev/node-checks` annotation).
pub(super) fn updated_message(node: &str, current: &str, checks: &str) -> String {
    let mut message = format!("Node {node} Updated");
    if let Ok(r) = serde_json::from_str::<NodeCheckResult>(checks)
        && r.config == current
        && !r.passed
    {
        message.push_str(&format!("; health check {} failed: {}", r.check, r.output));
    }
    message
}

/// Bridges the blocking engine to the async API writes.
struct KubeReporter {
    inner: Arc<Inner>,
    rt: Handle,
}

impl KubeReporter {
    /// A reporter for blocking work started from `inner`'s runtime.
    fn new(inner: &Arc<Inner>) -> KubeReporter {
        KubeReporter {
            inner: Arc::clone(inner),
            rt: Handle::current(),
        }
    }
}

impl Reporter for KubeReporter {
    fn report(&mut self, phase: &Phase) -> Result<(), ReportError> {
        self.rt
            .block_on(self.inner.report(phase))
            .map_err(ReportError::new)
    }

    fn drain(&mut self, config: &str) -> Result<(), ReportError> {
        self.rt
            .block_on(self.inner.request_drain(&drain::drain(config), "drain"))
            .map_err(ReportError::new)
    }

    fn event(&mut self, event: &NodeEvent) {
        self.inner.event(event.clone());
    }
}

/// A drift monitor of `mc` that reports to `tx`; `None` (and a warning) when it cannot start.
/// Blocking: it parses the config and registers every managed path's directory.
pub(super) fn drift_monitor(
    engine: Arc<Engine>,
    mc: &MachineConfig,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) -> Option<DriftMonitor> {
    let cfg = ParsedConfig::new(mc).ok()?;
    match drift::start(engine, cfg, move |e| {
        let _ = tx.send(e.to_string());
    }) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(error = %e, "config drift monitor not started");
            None
        }
    }
}
