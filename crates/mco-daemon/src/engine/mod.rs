//! The update engine: one node, no Kubernetes. It validates the disk, plans and applies an
//! update with rollback, and runs the post action, reporting each phase through a
//! [`Reporter`] so the sync loop can write node annotations and MachineConfigNode conditions
//! while tests simply record the phases.
//!
//! An update is two parts of blocking work, [`Engine::prepare_update`] and
//! [`Engine::apply_update`], with the drain between them: a daemon awaits its drain outside
//! both, so a node that is draining holds no thread of the blocking pool.

pub mod apply;
pub mod certs;
pub mod drift;
pub mod firstboot;
pub mod health;
pub mod image_mode;
pub mod pinned;
pub mod plan;
pub mod validate;

use mco_api::MachineConfig;
use mco_render::actions::PostConfigAction;
use mco_render::reconcile::{ReconcileError, StorageOverrides};

use crate::error::HostError;
use crate::host::Host;
use crate::host::osrelease::HostOs;
use crate::host::paths;
use crate::host::reboot::PendingReboot;
use apply::{ApplyError, ApplyOptions};
use plan::{ActionPolicy, ParsedConfig, PlanError, UpdatePlan, not_if};
use validate::{ValidateOptions, ValidationError};

/// A phase of an update, in the order they happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The change cannot be applied (`UpdatePrepared=Unknown`).
    PrepareFailed {
        /// Upstream's `Update Failed compatibility validation...` message.
        message: String,
    },
    /// Compatible; actions and drain decided (`UpdatePrepared=True`).
    Prepared {
        /// `Update Compatible. Post Cfg Actions: [...] Drain Required: <b>`.
        message: String,
        /// Whether a drain follows.
        drain: bool,
    },
    /// No drain for this update (`Drained=False`).
    DrainNotRequired,
    /// Writing files and OS (`AppliedFilesAndOS=Unknown`).
    Applying {
        /// Upstream's message.
        message: String,
        /// Whether the OS image changes, which takes minutes on a host rather than
        /// milliseconds.
        os: bool,
    },
    /// Files and OS written (`AppliedFilesAndOS=True`).
    Applied {
        /// Upstream's message, plus the OS-skipped note on non-ostree hosts.
        message: String,
        /// Whether [`Phase::Rebooting`] comes next, with nothing in between that takes time.
        reboot: bool,
    },
    /// A reboot follows (`RebootedNode=Unknown`, `post-config-action=Rebooting`); reported
    /// before the reboot is requested so the annotation survives it.
    Rebooting {
        /// Why, as the reboot unit's description carries it.
        rationale: String,
    },
    /// The rebootless actions ran (`UpdatePostActionComplete=True` or `ReloadedCRIO=True`).
    PostActionComplete {
        /// What ran.
        actions: Vec<PostConfigAction>,
    },
}

/// A Node event of upstream's daemon, by its reason and message: sent best effort, as
/// upstream's recorder sends them, so it never aborts an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// Upstream's reason, e.g. `OSUpdateStarted`.
    pub reason: &'static str,
    /// Upstream's message.
    pub message: String,
}

impl NodeEvent {
    /// A `Normal` event.
    pub fn normal(reason: &'static str, message: impl Into<String>) -> NodeEvent {
        NodeEvent {
            warning: false,
            reason,
            message: message.into(),
        }
    }

    /// A `Warning` event.
    pub fn warning(reason: &'static str, message: impl Into<String>) -> NodeEvent {
        NodeEvent {
            warning: true,
            reason,
            message: message.into(),
        }
    }
}

/// Receives the phases of an update; the kube layer turns them into API writes.
pub trait Reporter {
    /// Records one phase. An error aborts (and rolls back) the update.
    fn report(&mut self, phase: &Phase) -> Result<(), ReportError>;

    /// Records a Node event; best effort, never an error.
    fn event(&mut self, _event: &NodeEvent) {}

    /// Blocks until the node is drained for `config` (annotation `desiredDrain=drain-<config>`
    /// answered by `lastAppliedDrain`). An error aborts the update before anything is written.
    fn drain(&mut self, config: &str) -> Result<(), ReportError>;
}

/// Why a [`Reporter`] refused a phase or a drain. The engine knows nothing of the API server,
/// so the reporter's own error rides along as the source, its message unchanged.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ReportError(Box<dyn std::error::Error + Send + Sync>);

impl ReportError {
    /// Wraps the reporter's own error.
    pub fn new(source: impl std::error::Error + Send + Sync + 'static) -> ReportError {
        ReportError(Box::new(source))
    }
}

/// A reporter that keeps the phases, for tests and the offline commands.
#[derive(Debug, Default)]
pub struct RecordingReporter {
    /// Every phase reported.
    pub phases: Vec<Phase>,
    /// Every drain requested.
    pub drains: Vec<String>,
    /// Every Node event.
    pub events: Vec<NodeEvent>,
}

impl Reporter for RecordingReporter {
    fn report(&mut self, phase: &Phase) -> Result<(), ReportError> {
        tracing::info!(?phase, "update phase");
        self.phases.push(phase.clone());
        Ok(())
    }

    fn event(&mut self, event: &NodeEvent) {
        tracing::info!(reason = event.reason, message = %event.message, "node event");
        self.events.push(event.clone());
    }

    fn drain(&mut self, config: &str) -> Result<(), ReportError> {
        self.drains.push(config.to_string());
        Ok(())
    }
}

/// Why an engine operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The change cannot be applied in place: the node becomes Unreconcilable.
    #[error("can't reconcile config {old} with {new}: {source}")]
    Unreconcilable {
        /// From.
        old: String,
        /// To.
        new: String,
        /// Why.
        #[source]
        source: Box<ReconcileError>,
    },
    /// A config that does not parse.
    #[error(transparent)]
    Plan(Box<PlanError>),
    /// The disk does not match the current config.
    #[error(transparent)]
    Validation(Box<ValidationError>),
    /// Applying failed; everything applied was rolled back.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The host could not be read.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The drain did not complete.
    #[error("{0}")]
    Drain(#[source] ReportError),
    /// The reporter refused a phase (e.g. the API server is unreachable).
    #[error("reporting update progress: {0}")]
    Report(#[source] ReportError),
    /// The reboot could not be requested; the update was rolled back.
    #[error(transparent)]
    Reboot(HostError),
    /// The booted deployment lacks a package of the config's extensions (upstream's words).
    #[error("extension package verification failed: {0}")]
    Extensions(String),
}

impl From<ValidationError> for EngineError {
    fn from(e: ValidationError) -> Self {
        EngineError::Validation(Box::new(e))
    }
}

impl EngineError {
    /// Whether the node should be marked Unreconcilable rather than Degraded.
    pub fn is_unreconcilable(&self) -> bool {
        matches!(self, EngineError::Unreconcilable { .. })
    }
}

/// How an update ends when it succeeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// A reboot was requested; the update completes on the next start.
    Rebooting,
    /// A reboot is needed but the caller asked to do it itself (first boot).
    RebootDeferred,
    /// Done without a reboot; the caller completes the update (uncordon, Done).
    Rebootless {
        /// What ran.
        actions: Vec<PostConfigAction>,
    },
}

/// Options of one update.
#[derive(Debug, Clone, Default)]
pub struct UpdateOptions {
    /// Re-apply everything with a reboot, as the force file asks (also implied by the file).
    pub force: bool,
    /// Which action calculation runs.
    pub policy: ActionPolicy,
    /// The storage sections the administrator lets change on existing nodes.
    pub storage_overrides: StorageOverrides,
    /// Do not request the reboot; return [`UpdateOutcome::RebootDeferred`].
    pub defer_reboot: bool,
}

/// An update planned and reported as prepared, waiting for its drain: see
/// [`Engine::prepare_update`].
#[derive(Debug)]
pub struct PreparedUpdate {
    plan: UpdatePlan,
    force: bool,
    new_name: String,
    defer_reboot: bool,
}

impl PreparedUpdate {
    /// Whether the node must be drained before [`Engine::apply_update`].
    pub fn drains(&self) -> bool {
        self.plan.drain
    }

    /// The config the node goes to.
    pub fn config(&self) -> &str {
        &self.new_name
    }
}

/// What the start-up check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootCheck {
    /// The disk matches the config.
    Valid,
    /// The force file is present: validation was skipped and a forced update must run.
    Forced,
    /// The disk holds the config, but the reboot into it never happened (the daemon died
    /// between writing `currentconfig` and requesting the reboot): the boot id is still the one
    /// recorded with the request, or the config's OS is staged but not booted. Reboot.
    RebootPending,
}

/// The largest provisioning record [`Engine::irreconcilable_changes`] reads: a rendered config
/// is stored in one object, which the API server keeps under 3 MiB.
pub const MAX_PROVISIONED_BYTES: u64 = 16 << 20;

/// The update engine of one node.
#[derive(Debug)]
pub struct Engine {
    /// The node.
    pub host: Host,
    /// Its OS, as detected at start.
    pub os: HostOs,
}

impl Engine {
    /// Rolls back an update a crash interrupted (see [`apply::recover_interrupted`]), then
    /// detects the host OS and logs what mco will manage.
    pub fn new(host: Host) -> Result<Engine, HostError> {
        apply::recover_interrupted(&host)?;
        let os = host.detect_os()?;
        if os.is_managed_ostree() {
            tracing::info!(os = %os.describe(), "ostree-booted host: OS updates are managed");
        } else {
            tracing::info!(
                os = %os.describe(),
                "{} absent: OS updates are skipped; files and units still apply",
                paths::OSTREE_BOOTED
            );
        }
        Ok(Engine { host, os })
    }

    /// Whether the OS (image, kernel arguments, kernel type) is managed.
    pub fn managed_os(&self) -> bool {
        self.os.is_managed_ostree()
    }

    /// Whether a config's `extensions` are installed on this host: a managed EL CoreOS
    /// ([`HostOs::is_el`]), as upstream's daemon installs them on RHCOS and SCOS only.
    pub fn installs_extensions(&self) -> bool {
        self.managed_os() && self.os.is_el()
    }

    /// Upstream's `verifyExtensionPackages`: every extension of `mc` is installed, by any of
    /// its valid package sets. Upstream asks `rpm -q`; mco takes the booted deployment's
    /// requested (layered) packages as the installed set, which is where the daemon put them.
    /// Nothing to check on a host that does not install extensions, or on an image-mode
    /// image, whose packages are built in rather than layered.
    pub fn verify_extensions(&self, mc: &MachineConfig) -> Result<(), EngineError> {
        let extensions = mc.spec.extensions.as_deref().unwrap_or_default();
        if !self.installs_extensions()
            || extensions.is_empty()
            || !image_mode::image_of(mc).is_empty()
        {
            return Ok(());
        }
        let installed = self.host.os.status()?.booted.requested_packages;
        mco_render::extensions::verify_installed(&installed, extensions)
            .map_err(EngineError::Extensions)?;
        tracing::info!("Successfully verified all extension packages are installed");
        Ok(())
    }

    /// Writes the ControllerConfig's CA bundles (see [`certs`]): the paths changed, and each
    /// bundle skipped with why.
    pub fn write_certificates(
        &self,
        spec: &mco_api::ControllerConfigSpec,
    ) -> Result<(Vec<String>, Vec<String>), HostError> {
        let want = certs::plan(spec);
        let changed = certs::apply(&self.host.fs, &want)?;
        Ok((changed, want.problems))
    }

    /// Whether `/run/machine-config-daemon-force` exists.
    pub fn force_requested(&self) -> Result<bool, HostError> {
        self.host.fs.exists(paths::FORCE_FILE)
    }

    /// The on-disk `currentconfig`, with the on-cluster image mode image of `currentimage`
    /// embedded when there is one ([`image_mode::join`]): the config the node was updated
    /// to, whose `osImageURL` is the image it must boot.
    pub fn on_disk_config(&self) -> Result<Option<MachineConfig>, HostError> {
        apply::read_current_config(&self.host.fs)
    }

    /// How the storage sections no update applies differ between the config this machine was
    /// provisioned with ([`PROVISIONED_CONFIG`](mco_api::paths::PROVISIONED_CONFIG)) and
    /// `target` ([`mco_render::irreconcilable`]). `None` when there is no such record (a
    /// machine not provisioned by a machine config server), or it cannot be used: larger than
    /// [`MAX_PROVISIONED_BYTES`] or not a MachineConfig. Nothing is then reported, as upstream.
    pub fn irreconcilable_changes(
        &self,
        target: &MachineConfig,
    ) -> Option<Vec<mco_api::IrreconcilableChangeDiff>> {
        let path = mco_api::paths::PROVISIONED_CONFIG;
        let unusable = |why: String| {
            tracing::warn!(path, "irreconcilable changes not reported: {why}");
            None
        };
        match self.host.fs.stat(path) {
            Ok(None) => return None,
            Ok(Some(s)) if s.len > MAX_PROVISIONED_BYTES => {
                return unusable(format!("{} bytes, over {MAX_PROVISIONED_BYTES}", s.len));
            }
            Ok(Some(_)) => {}
            Err(e) => return unusable(e.to_string()),
        }
        let provisioned = match self
            .host
            .fs
            .read(path)
            .map(|d| serde_json::from_slice::<MachineConfig>(&d).map_err(|e| e.to_string()))
        {
            Ok(Ok(mc)) => mc,
            Ok(Err(e)) => return unusable(e),
            Err(e) => return unusable(e.to_string()),
        };
        match (ParsedConfig::new(&provisioned), ParsedConfig::new(target)) {
            (Ok(p), Ok(t)) => Some(mco_render::irreconcilable::report(&p.ignition, &t.ignition)),
            (Err(e), _) | (_, Err(e)) => unusable(e.to_string()),
        }
    }

    /// Validates the disk against `mc`.
    pub fn validate(&self, mc: &MachineConfig) -> Result<(), EngineError> {
        let cfg = ParsedConfig::new(mc).map_err(|source| {
            EngineError::Plan(Box::new(PlanError::Parse {
                name: mc.metadata.name.clone().unwrap_or_default(),
                source,
            }))
        })?;
        validate::validate_on_disk(
            &self.host,
            &cfg,
            ValidateOptions {
                managed_os: self.managed_os(),
            },
        )?;
        Ok(())
    }

    /// Whether a reboot into the on-disk `currentconfig` was requested in this boot and has not
    /// happened: the `post-config-action=Rebooting` annotation then means "still to do", not
    /// "done".
    pub fn reboot_owed(&self) -> Result<bool, HostError> {
        self.reboot_owed_into(self.on_disk_config()?.as_ref())
    }

    /// [`Engine::reboot_owed`] for an on-disk `currentconfig` the caller has already read.
    pub fn reboot_owed_into(&self, on_disk: Option<&MachineConfig>) -> Result<bool, HostError> {
        let Some(pending) = PendingReboot::read(&self.host.fs)? else {
            return Ok(false);
        };
        let Some(current) = on_disk else {
            return Ok(false);
        };
        Ok(pending.is_owed(
            current.metadata.name.as_deref().unwrap_or_default(),
            &self.host.boot_id()?,
        ))
    }

    /// Upstream's start-up check: a reboot owed by an interrupted update comes first; then the
    /// force file skips validation (and asks for a forced update); otherwise the disk must
    /// match `current`. The extensions are checked apart ([`Engine::verify_extensions`]), as
    /// upstream does, only when `current` is also the desired config.
    pub fn boot_check(&self, current: &MachineConfig) -> Result<BootCheck, EngineError> {
        let name = current.metadata.name.as_deref().unwrap_or_default();
        if let Some(pending) = PendingReboot::read(&self.host.fs)? {
            if pending.is_owed(name, &self.host.boot_id()?) {
                tracing::warn!(
                    "the reboot into {name} was requested in this boot but never happened: rebooting"
                );
                return Ok(BootCheck::RebootPending);
            }
            tracing::info!(config = %pending.config, "the pending reboot has happened");
            PendingReboot::clear(&self.host.fs)?;
        }
        if self.force_requested()? {
            tracing::info!("Skipping on-disk validation; {} present", paths::FORCE_FILE);
            return Ok(BootCheck::Forced);
        }
        tracing::info!(
            config = current.metadata.name.as_deref().unwrap_or_default(),
            "Validating against current config"
        );
        if let Err(e) = self.validate(current) {
            if let EngineError::Validation(v) = &e
                && let Some(validate::Mismatch::OsImage { expected, .. }) = v.mismatch()
                && self
                    .host
                    .os
                    .status()?
                    .staged
                    .and_then(|d| d.os_image_url())
                    .as_deref()
                    == Some(expected.as_str())
            {
                tracing::warn!(
                    "{expected} is staged but not booted: the reboot into it was interrupted"
                );
                return Ok(BootCheck::RebootPending);
            }
            return Err(e);
        }
        tracing::info!("Validated on-disk state");
        Ok(BootCheck::Valid)
    }

    /// Updates the node from `old` to `new`: plan, drain, apply with rollback, post action.
    pub fn update(
        &self,
        old: &MachineConfig,
        new: &MachineConfig,
        opts: UpdateOptions,
        reporter: &mut dyn Reporter,
    ) -> Result<UpdateOutcome, EngineError> {
        let prepared = self.prepare_update(old, new, opts, reporter)?;
        if prepared.drains() {
            reporter
                .drain(prepared.config())
                .map_err(EngineError::Drain)?;
        }
        self.apply_update(prepared, reporter)
    }

    /// The first part of [`Engine::update`]: plans the update and reports it prepared. The
    /// caller drains the node when [`PreparedUpdate::drains`] says so, then calls
    /// [`Engine::apply_update`]. A daemon waits for its drain outside its blocking host work, so
    /// a hundred nodes draining at once do not each hold a thread.
    pub fn prepare_update(
        &self,
        old: &MachineConfig,
        new: &MachineConfig,
        opts: UpdateOptions,
        reporter: &mut dyn Reporter,
    ) -> Result<PreparedUpdate, EngineError> {
        let force = opts.force || self.force_requested()?;
        let old_name = old.metadata.name.clone().unwrap_or_default();
        let new_name = new.metadata.name.clone().unwrap_or_default();
        let plan = match UpdatePlan::with_overrides(
            old,
            new,
            force,
            &opts.policy,
            opts.storage_overrides,
        ) {
            Ok(p) => p,
            Err(PlanError::Unreconcilable(source)) => {
                let message = format!(
                    "Update Failed compatibility validation. MachineConfigs {old_name} and {new_name} are not compatible. Err: {source}"
                );
                reporter
                    .report(&Phase::PrepareFailed { message })
                    .map_err(EngineError::Report)?;
                return Err(EngineError::Unreconcilable {
                    old: old_name,
                    new: new_name,
                    source: Box::new(source),
                });
            }
            Err(e) => return Err(EngineError::Plan(Box::new(e))),
        };
        tracing::info!(
            from = %old_name,
            to = %new_name,
            force,
            files = ?plan.diff.files,
            units = ?plan.diff.units,
            actions = %mco_render::actions::ActionList(&plan.actions),
            drain = plan.drain,
            "Starting update"
        );
        reporter
            .report(&Phase::Prepared {
                message: plan.prepared_message(),
                drain: plan.drain,
            })
            .map_err(EngineError::Report)?;
        Ok(PreparedUpdate {
            plan,
            force,
            new_name,
            defer_reboot: opts.defer_reboot,
        })
    }

    /// The rest of [`Engine::update`], once the node is drained (when it had to be): write,
    /// then reboot or run the rebootless actions; a failure after writing rolls back.
    pub fn apply_update(
        &self,
        prepared: PreparedUpdate,
        reporter: &mut dyn Reporter,
    ) -> Result<UpdateOutcome, EngineError> {
        let PreparedUpdate {
            plan,
            force,
            new_name,
            defer_reboot,
        } = prepared;
        if !plan.drain {
            reporter
                .report(&Phase::DrainNotRequired)
                .map_err(EngineError::Report)?;
        }
        let os_will = plan.os_update() && self.managed_os();
        let ssh_will = plan.ssh_update();
        reporter
            .report(&Phase::Applying {
                os: os_will,
                message: format!(
                    "Applying files and new OS config to node. OS will {}need an update. SSH Keys will {}need an update",
                    not_if(os_will),
                    not_if(ssh_will)
                ),
            })
            .map_err(EngineError::Report)?;
        // Upstream's events around the OS part, on a host whose OS is managed.
        let os_events = self.managed_os() && plan.os_update();
        if os_events {
            for ev in plan.os_started_events() {
                reporter.event(&ev);
            }
        }
        let (applied, mut journal) = apply::apply_journalled(
            &self.host,
            &plan,
            ApplyOptions {
                managed_os: self.managed_os(),
                extensions: self.installs_extensions(),
            },
        )?;
        if os_events {
            for ev in plan.os_staged_events() {
                reporter.event(&ev);
            }
        }
        let mut message = format!(
            "Applied files and new OS config to node. OS did {}need an update. SSH Keys did {}need an update",
            not_if(applied.os_updated),
            not_if(applied.ssh_updated)
        );
        if let Some(note) = &applied.os_skipped {
            message.push_str(". ");
            message.push_str(note);
        }
        let finish = (|| {
            reporter
                .report(&Phase::Applied {
                    message,
                    reboot: plan.reboots(),
                })
                .map_err(EngineError::Report)?;
            if force {
                self.host.fs.remove_file(paths::FORCE_FILE)?;
            }
            if plan.reboots() {
                let rationale = format!("Node will reboot into config {new_name}");
                reporter
                    .report(&Phase::Rebooting {
                        rationale: rationale.clone(),
                    })
                    .map_err(EngineError::Report)?;
                // Owed from here until the boot id changes: a crash before the request below
                // must not let the next start take the matching disk for a finished update.
                journal.record(&self.host.fs, paths::PENDING_REBOOT)?;
                PendingReboot {
                    config: new_name.clone(),
                    boot_id: self.host.boot_id()?,
                }
                .write(&self.host.fs)?;
                fail::fail_point!("engine::after-pending-reboot");
                journal.commit(&self.host.fs)?;
                fail::fail_point!("engine::before-reboot");
                if defer_reboot {
                    return Ok(UpdateOutcome::RebootDeferred);
                }
                tracing::info!("{rationale}");
                self.host
                    .rebooter
                    .reboot(&rationale)
                    .map_err(EngineError::Reboot)?;
                Ok(UpdateOutcome::Rebooting)
            } else {
                apply::run_rebootless_actions(&self.host, &plan.actions)?;
                journal.commit(&self.host.fs)?;
                reporter
                    .report(&Phase::PostActionComplete {
                        actions: plan.actions.clone(),
                    })
                    .map_err(EngineError::Report)?;
                Ok(UpdateOutcome::Rebootless {
                    actions: plan.actions.clone(),
                })
            }
        })();
        if finish.is_err() {
            tracing::error!("update failed after writing; rolling back");
            journal.rollback(&self.host);
        }
        finish
    }
}
