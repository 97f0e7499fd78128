//! `mco doctor --root DIR`: what a node's own disk says — OS identity, whether it booted ostree,
//! what the booted deployment came from, the config last applied, first boot, drifted files —
//! and what that means.

use std::path::{Path, PathBuf};

use mco_api::MachineConfig;
use mco_daemon::host::cmd::CommandRunner;
use mco_daemon::host::fs::HostFs;
use mco_daemon::host::osrelease::HostOs;
use mco_daemon::host::ostree::{Deployment, Origin, OsUpdater, RpmOstree, SimOstree};
use mco_daemon::host::paths;
use mco_render::ignition;

use crate::doctor::{Finding, Fix};

/// Why the local facts could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("cannot open node root {root}: {source}")]
    Root {
        root: PathBuf,
        #[source]
        source: mco_daemon::HostError,
    },
    #[error("reading {what} under {root}: {source}")]
    Read {
        what: &'static str,
        root: PathBuf,
        #[source]
        source: mco_daemon::HostError,
    },
}

/// How a file on disk differs from the config last applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriftKind {
    Content,
    Missing,
    Mode { expected: u32, actual: u32 },
}

/// One drifted file, with sizes for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDrift {
    pub path: String,
    pub kind: DriftKind,
    pub expected_size: u64,
    pub actual_size: Option<u64>,
}

/// `/etc/machine-config-daemon/currentconfig`, the parts that matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentConfig {
    pub name: String,
    pub os_image_url: String,
}

/// Everything read from a node's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalFacts {
    pub root: PathBuf,
    /// A simulated node (its ostree lives in a state file), as opposed to a real host.
    pub simulated: bool,
    pub os: HostOs,
    pub booted: Option<Deployment>,
    pub staged: Option<Deployment>,
    /// Why the deployments could not be read.
    pub os_error: Option<String>,
    pub current_config: Option<CurrentConfig>,
    pub current_config_error: Option<String>,
    /// `/etc/ignition-machine-config-encapsulated.json` is still there: first boot has not run.
    pub firstboot_pending: bool,
    /// `.bak` of it: first boot ran.
    pub firstboot_done: bool,
    pub force_file: bool,
    pub file_drift: Vec<FileDrift>,
}

/// Reads the facts. A real host's deployments come from its `rpm-ostree`; a simulated root is
/// recognised by the simulator's state file.
pub fn gather(root: &Path) -> Result<LocalFacts, LocalError> {
    let fs = HostFs::open(root).map_err(|source| LocalError::Root {
        root: root.to_path_buf(),
        source,
    })?;
    let read = |what: &'static str| {
        let root = root.to_path_buf();
        move |source| LocalError::Read { what, root, source }
    };
    let os = HostOs::detect(&fs).map_err(read("os-release"))?;
    let simulated = fs
        .exists(paths::SIM_OSTREE_STATE)
        .map_err(read("the simulated ostree"))?;
    let status = if simulated {
        let clone = fs.try_clone().map_err(read("the node root"))?;
        Some(SimOstree::new(clone).status())
    } else if os.ostree_booted {
        Some(RpmOstree::new(CommandRunner::in_root(root)).status())
    } else {
        None
    };
    let (booted, staged, os_error) = match status {
        Some(Ok(s)) => (Some(s.booted), s.staged, None),
        Some(Err(e)) => (None, None, Some(e.to_string())),
        None => (None, None, None),
    };
    let (current_config, mc, current_config_error) = match fs
        .read_optional(paths::CURRENT_CONFIG)
        .map_err(read("currentconfig"))?
    {
        None => (None, None, None),
        Some(bytes) => match serde_json::from_slice::<MachineConfig>(&bytes) {
            Ok(mc) => (
                Some(CurrentConfig {
                    name: mc.metadata.name.clone().unwrap_or_default(),
                    os_image_url: mc.spec.os_image_url.clone(),
                }),
                Some(mc),
                None,
            ),
            Err(e) => (None, None, Some(e.to_string())),
        },
    };
    let file_drift = match &mc {
        Some(mc) => drift(&fs, mc),
        None => Vec::new(),
    };
    let bak = format!("{}.bak", paths::FIRSTBOOT_CONFIG);
    Ok(LocalFacts {
        root: root.to_path_buf(),
        simulated,
        booted,
        staged,
        os_error,
        current_config,
        current_config_error,
        firstboot_pending: fs
            .exists(paths::FIRSTBOOT_CONFIG)
            .map_err(read("the first-boot config"))?,
        firstboot_done: fs.exists(&bak).map_err(read("the first-boot config"))?,
        force_file: fs
            .exists(paths::FORCE_FILE)
            .map_err(read("the force file"))?,
        os,
        file_drift,
    })
}

/// Files of `mc` whose content or mode differ on disk. Unreadable or undecodable entries are
/// skipped: this is a diagnosis, the daemon's validation is the authority.
pub fn drift(fs: &HostFs, mc: &MachineConfig) -> Vec<FileDrift> {
    let Some(cfg) = mc
        .spec
        .config
        .as_ref()
        .and_then(|raw| ignition::parse(raw).ok())
    else {
        return Vec::new();
    };
    let files = cfg.storage.and_then(|s| s.files).unwrap_or_default();
    let mut out = Vec::new();
    for f in files {
        if f.append.as_ref().is_some_and(|a| !a.is_empty()) {
            continue;
        }
        let Some(expected) = expected_contents(&f) else {
            continue;
        };
        let expected_size = expected.len() as u64;
        let actual = match fs.read_optional(&f.path) {
            Ok(a) => a,
            Err(_) => continue,
        };
        let Some(actual) = actual else {
            out.push(FileDrift {
                path: f.path.clone(),
                kind: DriftKind::Missing,
                expected_size,
                actual_size: None,
            });
            continue;
        };
        let actual_size = Some(actual.len() as u64);
        if actual != expected {
            out.push(FileDrift {
                path: f.path.clone(),
                kind: DriftKind::Content,
                expected_size,
                actual_size,
            });
            continue;
        }
        let want = f.mode.map(|m| m as u32).unwrap_or(0o644);
        if let Ok(Some(st)) = fs.stat(&f.path)
            && st.mode & 0o7777 != want
        {
            out.push(FileDrift {
                path: f.path.clone(),
                kind: DriftKind::Mode {
                    expected: want,
                    actual: st.mode & 0o7777,
                },
                expected_size,
                actual_size,
            });
        }
    }
    out
}

fn expected_contents(f: &ignition_config::v3_5::File) -> Option<Vec<u8>> {
    let src = f.contents.as_ref().and_then(|c| c.source.as_deref());
    let compression = f
        .contents
        .as_ref()
        .and_then(|c| c.compression.as_deref())
        .filter(|c| !c.is_empty());
    match src {
        None => Some(Vec::new()),
        Some(s) => ignition::decode_data_url(s, compression).ok(),
    }
}

/// The size a file has in a rendered config, when the config carries it.
pub fn expected_file_size(mc: &MachineConfig, path: &str) -> Option<u64> {
    let cfg = ignition::parse(mc.spec.config.as_ref()?).ok()?;
    let files = cfg.storage?.files?;
    let f = files.into_iter().rev().find(|f| f.path == path)?;
    expected_contents(&f).map(|c| c.len() as u64)
}

/// Re-runs first boot: from the saved `.bak` when the node has one, else from the config in
/// the cluster (the daemon only applies what it finds at the first-boot path). A simulated
/// node's files live under its root, and its daemon is told so.
pub fn firstboot_command(has_saved_config: bool, config: &str, sim_root: Option<&Path>) -> String {
    let (path, flags) = match sim_root {
        Some(r) => (
            r.join(paths::FIRSTBOOT_CONFIG.trim_start_matches('/'))
                .display()
                .to_string(),
            format!(" --root {} --host sim", r.display()),
        ),
        None => (paths::FIRSTBOOT_CONFIG.to_string(), String::new()),
    };
    let run = format!("mco daemon firstboot-complete-machineconfig{flags}");
    if has_saved_config {
        format!("cp {path}.bak {path} && {run}")
    } else {
        format!("kubectl get machineconfig {config} -o json > {path} && {run}")
    }
}

/// The force-file command for this root: the real path on a host, the path under the root for a
/// simulated node (whose `/run` is a directory of the node root).
pub fn force_command(root: &Path, simulated: bool) -> String {
    if simulated {
        format!(
            "touch {}",
            root.join(paths::FORCE_FILE.trim_start_matches('/'))
                .display()
        )
    } else {
        format!("touch {}", paths::FORCE_FILE)
    }
}

fn origin_kind(o: &Origin) -> &'static str {
    match o {
        Origin::Pivot(_) => "pivot (mco-managed)",
        Origin::Container(_) => "container image (mco-managed)",
        Origin::Ostree(_) => "plain ostree refspec (not mco-managed)",
    }
}

/// The facts as `key: value` lines, for the report header.
pub fn describe(f: &LocalFacts) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let id = &f.os.identity;
    out.push((
        "os-release".into(),
        format!(
            "ID={:?} VERSION_ID={:?}{}",
            id.id,
            id.version_id,
            if id.pretty_name.is_empty() {
                String::new()
            } else {
                format!(" ({})", id.pretty_name)
            }
        ),
    ));
    out.push((
        paths::OSTREE_BOOTED.into(),
        if f.os.ostree_booted {
            "present: the OS is an ostree deployment mco manages".into()
        } else {
            "absent: not an ostree host, mco does not manage the OS".into()
        },
    ));
    match (&f.booted, &f.os_error) {
        (Some(d), _) => out.push((
            "booted deployment".into(),
            format!(
                "{} [{}]{}",
                d.origin,
                origin_kind(&d.origin),
                if d.version.is_empty() {
                    String::new()
                } else {
                    format!(", version {}", d.version)
                }
            ),
        )),
        (None, Some(e)) => out.push(("booted deployment".into(), format!("unreadable: {e}"))),
        (None, None) => {}
    }
    if let Some(s) = &f.staged {
        out.push(("staged deployment".into(), s.origin.to_string()));
    }
    out.push((
        "currentconfig".into(),
        match (&f.current_config, &f.current_config_error) {
            (Some(c), _) => format!("{} (osImageURL {:?})", c.name, c.os_image_url),
            (None, Some(e)) => format!("unreadable: {e}"),
            (None, None) => "absent".into(),
        },
    ));
    out.push((
        "first boot".into(),
        match (f.firstboot_pending, f.firstboot_done) {
            (true, _) => format!("pending: {} not yet applied", paths::FIRSTBOOT_CONFIG),
            (false, true) => format!("completed ({}.bak present)", paths::FIRSTBOOT_CONFIG),
            (false, false) => "no first-boot config and no .bak".into(),
        },
    ));
    if f.force_file {
        out.push((
            paths::FORCE_FILE.into(),
            "present: the daemon re-applies the current config on its next sync".into(),
        ));
    }
    out
}

/// What the facts mean: every problem with its cause and fix; empty for a healthy node.
pub fn diagnose(f: &LocalFacts) -> Vec<Finding> {
    let subject = if f.simulated {
        format!("node root {}", f.root.display())
    } else {
        format!("host {}", f.root.display())
    };
    let force = force_command(&f.root, f.simulated);
    let mut out = Vec::new();

    if let Some(e) = &f.current_config_error {
        out.push(Finding::new(
            &subject,
            "unreadable currentconfig",
            format!("{} does not parse as a MachineConfig: {e}", paths::CURRENT_CONFIG),
            vec![Fix::new(
                "remove it so the daemon falls back to the node's annotations, then force a re-apply",
                format!("rm {} && {force}", paths::CURRENT_CONFIG),
            )],
        ));
    }

    if f.firstboot_pending {
        out.push(Finding::new(
            &subject,
            "first boot not completed",
            format!(
                "{} is still present: the first-boot service has not applied the node's config yet \
                 (or failed). Until it does, the node runs neither mco's files nor its OS image.",
                paths::FIRSTBOOT_CONFIG
            ),
            vec![Fix::new(
                "apply it now (reboots when the OS changes)",
                if f.simulated {
                    format!(
                        "mco daemon firstboot-complete-machineconfig --root {} --host sim",
                        f.root.display()
                    )
                } else {
                    "mco daemon firstboot-complete-machineconfig".to_string()
                },
            )],
        ));
    }

    if f.os.ostree_booted
        && let (Some(booted), Some(cc)) = (&f.booted, &f.current_config)
        && !cc.os_image_url.is_empty()
    {
        let have = booted.os_image_url();
        if !booted.is_mco_managed() {
            let id = &f.os.identity.id;
            let restore = firstboot_command(
                f.firstboot_done || f.firstboot_pending,
                &cc.name,
                f.simulated.then_some(f.root.as_path()),
            );
            out.push(Finding::new(
                &subject,
                "first boot never adopted the OS image",
                format!(
                    "Config {name} was applied (currentconfig present, osImageURL {url:?}) but the \
                     booted deployment `{origin}` has no mco-managed origin (no pivot:// custom origin, \
                     no container image reference). First boot wrote the files and skipped the OS: \
                     the daemon that ran it did not take this host for an ostree/CoreOS host \
                     (os-release ID={id:?}; mco decides by {ostree}, which is present). The daemon \
                     now reads the booted image as \"\" and every config validation fails with \
                     `expected target osImageURL {url:?}, have \"\"`.",
                    name = cc.name,
                    url = cc.os_image_url,
                    origin = booted.origin,
                    ostree = paths::OSTREE_BOOTED,
                ),
                vec![
                    Fix::new(
                        "force the daemon to re-apply the current config, OS included; it reboots \
                         into the mco-managed deployment",
                        force.clone(),
                    ),
                    Fix::new(
                        "complete first boot again with the saved first-boot config",
                        restore,
                    ),
                ],
            ));
        } else if have.as_deref() != Some(cc.os_image_url.as_str()) {
            let staged = f
                .staged
                .as_ref()
                .and_then(|s| s.os_image_url())
                .is_some_and(|u| u == cc.os_image_url);
            if staged {
                out.push(Finding::new(
                    &subject,
                    "reboot pending",
                    format!(
                        "The deployment of {:?} is staged but not booted yet.",
                        cc.os_image_url
                    ),
                    vec![Fix::new(
                        "let the daemon reboot the node, or reboot it",
                        "systemctl reboot",
                    )],
                ));
            } else {
                out.push(Finding::new(
                    &subject,
                    "booted OS image differs from the config",
                    format!(
                        "Config {} expects osImageURL {:?} but the booted deployment is {:?}.",
                        cc.name,
                        cc.os_image_url,
                        have.unwrap_or_default()
                    ),
                    vec![Fix::new(
                        "force the daemon to re-apply the current config, OS included (reboots)",
                        force.clone(),
                    )],
                ));
            }
        }
    }

    for d in &f.file_drift {
        let (title, detail) = match &d.kind {
            DriftKind::Content => (
                format!("content mismatch for file {:?}", d.path),
                format!(
                    "expected {} bytes (from {}), found {} bytes",
                    d.expected_size,
                    config_name(f),
                    d.actual_size.unwrap_or_default()
                ),
            ),
            DriftKind::Missing => (
                format!("file {:?} is missing", d.path),
                format!(
                    "expected {} bytes (from {})",
                    d.expected_size,
                    config_name(f)
                ),
            ),
            DriftKind::Mode { expected, actual } => (
                format!("mode mismatch for file {:?}", d.path),
                format!("expected mode {expected:04o}, found {actual:04o}"),
            ),
        };
        out.push(Finding::new(
            &subject,
            &title,
            format!(
                "The file was changed on the node after mco wrote it: {detail}. The daemon marks the \
                 node Degraded until it matches again."
            ),
            vec![
                Fix::new(
                    "restore the file's content and mode from the config (the daemon re-validates on its next sync)",
                    format!(
                        "kubectl get machineconfig {} -o jsonpath='{{.spec.config.storage.files[?(@.path==\"{}\")].contents.source}}'",
                        config_name(f),
                        d.path
                    ),
                ),
                Fix::new("force the daemon to rewrite every file (reboots)", force.clone()),
            ],
        ));
    }
    out
}

fn config_name(f: &LocalFacts) -> &str {
    f.current_config
        .as_ref()
        .map(|c| c.name.as_str())
        .unwrap_or("the current config")
}
