//! The config drift monitor: inotify (through `notify`) on the parent directories of every file,
//! unit and dropin of the current config; a change to one of them re-validates the node, the
//! changed path first, and reports the first drift. Like upstream it stops after reporting; the
//! sync loop restarts it once the node is back in its config.
//!
//! All monitors of a process share one inotify instance (the kernel allows few per user, 128 by
//! default, and `mco up` runs a daemon per simulated node in one process) and one validation
//! thread: a thread per monitor was a thousand mostly idle threads, each with its own stack and
//! allocator arenas. Events are dispatched by changed path to the monitors that manage it.
//! Without inotify a monitor falls back to validating the whole config periodically, and says so.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};

use crate::engine::Engine;
use crate::engine::plan::ParsedConfig;
use crate::engine::validate::{self, ValidateOptions, ValidationError};

/// How often a monitor without inotify validates the whole config.
pub const FALLBACK_PERIOD: Duration = Duration::from_secs(45);

/// Why the monitor could not start.
#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    /// inotify refused.
    #[error("starting the config drift monitor: {0}")]
    Notify(#[from] notify::Error),
}

/// A monitor subscribed to a path, by id.
type Subscriber = (u64, Weak<Monitor>);

/// Monitors by managed host path. Kept apart from the watcher: the watcher's event thread
/// locks it, while `watch`/`unwatch` wait on that thread.
type Subscribers = Arc<Mutex<HashMap<PathBuf, Vec<Subscriber>>>>;

/// The process-wide inotify watcher and how many monitors watch each directory.
struct Shared {
    watcher: RecommendedWatcher,
    dirs: HashMap<PathBuf, usize>,
}

struct Registry {
    subs: Subscribers,
    /// `None` when inotify could not be set up at all.
    shared: Option<Mutex<Shared>>,
    next_id: AtomicU64,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let subs: Subscribers = Arc::default();
        let dispatch = Arc::clone(&subs);
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let Ok(ev) = res else { return };
            if !is_change(&ev.kind) {
                return;
            }
            let Ok(subs) = dispatch.lock() else { return };
            for p in ev.paths {
                for (_, m) in subs.get(&p).into_iter().flatten() {
                    if let Some(m) = m.upgrade() {
                        submit(Job::Changed(m, p.clone()));
                    }
                }
            }
        });
        let shared = match watcher {
            Ok(watcher) => Some(Mutex::new(Shared {
                watcher,
                dirs: HashMap::new(),
            })),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    period_seconds = FALLBACK_PERIOD.as_secs(),
                    "inotify unavailable: config drift is checked periodically instead"
                );
                None
            }
        };
        Registry {
            subs,
            shared,
            next_id: AtomicU64::new(0),
        }
    })
}

/// Whether an inotify event can change what validation sees. `notify` also reports opens;
/// validating opens every managed file, so acting on opens made each monitor re-validate in
/// a loop, and any reader of a managed file (sshd reading its keys) would start one.
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match kind {
        notify::EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        notify::EventKind::Access(_) => false,
        _ => true,
    }
}

/// One monitor's place in the registry; dropping it unsubscribes and releases its directories.
struct Registration {
    id: u64,
    paths: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let reg = registry();
        if let Ok(mut subs) = reg.subs.lock() {
            for p in &self.paths {
                if let Some(list) = subs.get_mut(p) {
                    list.retain(|(id, _)| *id != self.id);
                    if list.is_empty() {
                        subs.remove(p);
                    }
                }
            }
        }
        if let Some(shared) = &reg.shared
            && let Ok(mut shared) = shared.lock()
        {
            for d in &self.dirs {
                release_dir(&mut shared, d);
            }
        }
    }
}

fn release_dir(shared: &mut Shared, dir: &Path) {
    let Some(n) = shared.dirs.get_mut(dir) else {
        return;
    };
    *n -= 1;
    if *n == 0 {
        shared.dirs.remove(dir);
        let _ = shared.watcher.unwatch(dir);
    }
}

/// Subscribes `paths` (host paths) and watches their parent directories. `Ok(None)` when the
/// process has no inotify.
fn register(
    paths: Vec<PathBuf>,
    monitor: &Arc<Monitor>,
) -> Result<Option<Registration>, DriftError> {
    let reg = registry();
    let Some(shared) = &reg.shared else {
        return Ok(None);
    };
    let id = monitor.id;
    let mut registration = Registration {
        id,
        paths: Vec::new(),
        dirs: Vec::new(),
    };
    {
        let mut subs = reg.subs.lock().unwrap_or_else(|e| e.into_inner());
        for p in &paths {
            subs.entry(p.clone())
                .or_default()
                .push((id, Arc::downgrade(monitor)));
        }
    }
    registration.paths = paths;
    let mut shared = shared.lock().unwrap_or_else(|e| e.into_inner());
    let mut seen = HashSet::new();
    for p in &registration.paths {
        let Some(parent) = p.parent() else { continue };
        if !parent.is_dir() || !seen.insert(parent.to_path_buf()) {
            continue;
        }
        match shared.dirs.get_mut(parent) {
            Some(n) => *n += 1,
            None => {
                if let Err(e) = shared.watcher.watch(parent, RecursiveMode::NonRecursive) {
                    for d in std::mem::take(&mut registration.dirs) {
                        release_dir(&mut shared, &d);
                    }
                    // `registration` unsubscribes as it drops, after `shared` is released.
                    return Err(e.into());
                }
                shared.dirs.insert(parent.to_path_buf(), 1);
            }
        }
        registration.dirs.push(parent.to_path_buf());
    }
    Ok(Some(registration))
}

/// What a monitor does with its first drift.
type OnDrift = Box<dyn FnOnce(ValidationError) + Send>;

/// What the shared worker knows of one monitor.
struct Monitor {
    id: u64,
    engine: Arc<Engine>,
    cfg: ParsedConfig,
    opts: ValidateOptions,
    /// Managed paths by host path.
    by_host: HashMap<PathBuf, String>,
    on_drift: Mutex<Option<OnDrift>>,
    /// Set when its [`DriftMonitor`] is dropped or it has reported: queued work is skipped.
    stopped: AtomicBool,
    validations: AtomicU64,
}

impl Monitor {
    /// Validates, the changed path first if given; reports a drift once and stops.
    fn check(&self, changed: Option<&str>) {
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        let result = match changed {
            Some(path) => {
                validate::validate_on_disk_preferring(&self.engine.host, &self.cfg, self.opts, path)
            }
            None => validate::validate_on_disk(&self.engine.host, &self.cfg, self.opts),
        };
        self.validations.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(()) => {}
            Err(e) if e.mismatch().is_some() => {
                tracing::error!(error = %e, "config drift detected");
                self.stopped.store(true, Ordering::Release);
                let report = self.on_drift.lock().ok().and_then(|mut f| f.take());
                if let Some(report) = report {
                    report(e);
                }
            }
            Err(e) => tracing::warn!(error = %e, "drift check failed"),
        }
    }
}

enum Job {
    /// A managed path of this monitor changed.
    Changed(Arc<Monitor>, PathBuf),
    /// Validate this monitor every [`FALLBACK_PERIOD`] until it stops.
    Periodic(Arc<Monitor>),
}

/// Hands `job` to the process's validation thread, started on first use; false if it is gone.
fn submit(job: Job) -> bool {
    static WORKER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    WORKER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("mco-drift".into())
                .spawn(move || work(rx));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the config drift thread");
            }
            tx
        })
        .send(job)
        .is_ok()
}

fn work(rx: mpsc::Receiver<Job>) {
    let mut periodic: Vec<(Instant, Arc<Monitor>)> = Vec::new();
    loop {
        periodic.retain(|(_, m)| !m.stopped.load(Ordering::Acquire));
        let wait = periodic
            .iter()
            .map(|(due, _)| due.saturating_duration_since(Instant::now()))
            .min()
            .unwrap_or(Duration::from_secs(3600));
        let mut jobs = Vec::new();
        match rx.recv_timeout(wait) {
            Ok(job) => jobs.push(job),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        // An update writes many managed files at once: one validation per monitor for the
        // whole burst, preferring its newest managed path, not one per event.
        jobs.extend(rx.try_iter());
        let mut changed: Vec<(Arc<Monitor>, String)> = Vec::new();
        for job in jobs {
            match job {
                Job::Changed(m, path) => {
                    let Some(p) = m.by_host.get(&path).cloned() else {
                        continue;
                    };
                    match changed.iter_mut().find(|(c, _)| c.id == m.id) {
                        Some(entry) => entry.1 = p,
                        None => changed.push((m, p)),
                    }
                }
                Job::Periodic(m) => periodic.push((Instant::now() + FALLBACK_PERIOD, m)),
            }
        }
        for (m, path) in changed {
            m.check(Some(&path));
        }
        let now = Instant::now();
        for (due, m) in periodic.iter_mut() {
            if *due <= now {
                m.check(None);
                *due = now + FALLBACK_PERIOD;
            }
        }
    }
}

/// A running monitor; dropping it stops watching.
pub struct DriftMonitor {
    /// `None` in the periodic fallback.
    registration: Option<Registration>,
    monitor: Arc<Monitor>,
}

impl Drop for DriftMonitor {
    fn drop(&mut self) {
        self.monitor.stopped.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for DriftMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriftMonitor")
            .field("config", &self.config())
            .field("periodic", &self.is_periodic())
            .finish()
    }
}

impl DriftMonitor {
    /// The config being watched against.
    pub fn config(&self) -> &str {
        &self.monitor.cfg.name
    }

    /// The on-cluster image mode image of the config watched against, `""` for none: its OS
    /// image is validated too.
    pub fn image(&self) -> &str {
        crate::engine::image_mode::image_of(&self.monitor.cfg.mc)
    }

    /// Whether it still watches against `config`: a monitor that has reported a drift is spent.
    pub fn watches(&self, config: &str) -> bool {
        !self.monitor.stopped.load(Ordering::Acquire) && self.config() == config
    }

    /// Whether this monitor validates periodically because inotify is unavailable.
    pub fn is_periodic(&self) -> bool {
        self.registration.is_none()
    }

    /// How many times it has validated the node so far.
    pub fn validations(&self) -> u64 {
        self.monitor.validations.load(Ordering::Relaxed)
    }
}

fn host_path(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// Starts watching against `cfg`. `on_drift` runs on the process's drift thread, once, with the
/// validation error of the first drift seen.
pub fn start(
    engine: Arc<Engine>,
    cfg: ParsedConfig,
    on_drift: impl FnOnce(ValidationError) + Send + 'static,
) -> Result<DriftMonitor, DriftError> {
    let root = engine.host.fs.root().to_path_buf();
    let by_host: HashMap<PathBuf, String> = validate::managed_paths(&cfg)
        .into_iter()
        .map(|p| (host_path(&root, &p), p))
        .collect();
    let name = cfg.name.clone();
    let paths: Vec<PathBuf> = by_host.keys().cloned().collect();
    let monitor = Arc::new(Monitor {
        id: registry().next_id.fetch_add(1, Ordering::Relaxed),
        opts: ValidateOptions {
            managed_os: engine.managed_os(),
        },
        engine,
        cfg,
        by_host,
        on_drift: Mutex::new(Some(Box::new(on_drift))),
        stopped: AtomicBool::new(false),
        validations: AtomicU64::new(0),
    });
    let registration = match register(paths, &monitor) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(
                config = %name,
                error = %e,
                period_seconds = FALLBACK_PERIOD.as_secs(),
                "cannot watch the managed paths: config drift is checked periodically instead"
            );
            None
        }
    };
    let periodic = registration.is_none();
    if periodic && !submit(Job::Periodic(Arc::clone(&monitor))) {
        return Err(DriftError::Notify(notify::Error::generic(
            "the config drift thread is not running",
        )));
    }
    tracing::info!(config = %name, paths = monitor.by_host.len(), periodic, "Config Drift Monitor started");
    Ok(DriftMonitor {
        registration,
        monitor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind};

    #[test]
    fn only_writes_renames_and_removals_count_as_changes() {
        for kind in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
        ] {
            assert!(is_change(&kind), "{kind:?}");
        }
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ] {
            assert!(!is_change(&kind), "{kind:?}");
        }
    }
}
