//! The config drift monitor: inotify (through `notify`) on the parent directories of every file,
//! unit and dropin of the current config; a change to one of them re-validates the node, the
//! changed path first, and reports the first drift. Like upstream it stops after reporting; the
//! sync loop restarts it once the node is back in its config.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};

use crate::engine::Engine;
use crate::engine::plan::ParsedConfig;
use crate::validate::{self, ValidateOptions, ValidationError};

/// Why the monitor could not start.
#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    /// inotify refused.
    #[error("starting the config drift monitor: {0}")]
    Notify(#[from] notify::Error),
}

/// A running monitor; dropping it stops watching.
pub struct DriftMonitor {
    _watcher: RecommendedWatcher,
    config: String,
}

impl std::fmt::Debug for DriftMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriftMonitor")
            .field("config", &self.config)
            .finish()
    }
}

impl DriftMonitor {
    /// The config being watched against.
    pub fn config(&self) -> &str {
        &self.config
    }
}

fn host_path(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// Starts watching against `cfg`. `on_drift` runs on the monitor's thread, once, with the
/// validation error of the first drift seen.
pub fn start(
    engine: Arc<Engine>,
    cfg: ParsedConfig,
    on_drift: impl FnOnce(ValidationError) + Send + 'static,
) -> Result<DriftMonitor, DriftError> {
    let root = engine.host.fs.root().to_path_buf();
    let managed: Vec<String> = validate::managed_paths(&cfg);
    let by_host: Vec<(PathBuf, String)> = managed
        .iter()
        .map(|p| (host_path(&root, p), p.clone()))
        .collect();
    let (tx, rx) = mpsc::channel::<PathBuf>();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res {
            for p in ev.paths {
                let _ = tx.send(p);
            }
        }
    })?;
    let mut dirs = HashSet::new();
    for (hp, _) in &by_host {
        if let Some(parent) = hp.parent()
            && parent.is_dir()
            && dirs.insert(parent.to_path_buf())
        {
            watcher.watch(parent, RecursiveMode::NonRecursive)?;
        }
    }
    let name = cfg.name.clone();
    tracing::info!(config = %name, dirs = dirs.len(), "Config Drift Monitor started");
    std::thread::Builder::new()
        .name("mco-drift".into())
        .spawn(move || {
            let opts = ValidateOptions {
                managed_os: engine.managed_os(),
            };
            let mut on_drift = Some(on_drift);
            // Ends when the watcher (the only sender) is dropped.
            while let Ok(changed) = rx.recv() {
                let Some((_, path)) = by_host.iter().find(|(hp, _)| *hp == changed) else {
                    continue;
                };
                match validate::validate_on_disk_preferring(&engine.host, &cfg, opts, path) {
                    Ok(()) => {}
                    Err(e) if e.mismatch().is_some() => {
                        tracing::error!(error = %e, "config drift detected");
                        if let Some(f) = on_drift.take() {
                            f(e);
                        }
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "drift check failed"),
                }
            }
        })
        .map_err(|e| DriftError::Notify(notify::Error::io(e)))?;
    Ok(DriftMonitor {
        _watcher: watcher,
        config: name,
    })
}
