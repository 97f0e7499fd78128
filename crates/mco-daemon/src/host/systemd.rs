//! systemd: enablement, masks, presets, reloads and restarts.
//!
//! [`Systemctl`] drives the host's `systemctl`. [`SimSystemd`] reproduces the on-disk effect of
//! enablement (the real `*.wants` symlink layout, masks as links to `/dev/null`) and appends
//! every action that would touch running services to `<root>/var/log/mco-sim/systemd.log`.

use std::path::PathBuf;

use crate::error::{HostError, Result};
use crate::host::cmd::CommandRunner;
use crate::host::fs::{EntryKind, HostFs};
use crate::host::paths;
use crate::host::units;

/// What mco asks of systemd. Blocking: call from a blocking context.
pub trait Systemd: Send + Sync {
    /// `systemctl daemon-reload`.
    fn daemon_reload(&self) -> Result<()>;
    /// `systemctl enable <units...>` (one batch, as upstream: any failure fails all).
    fn enable(&self, units: &[String]) -> Result<()>;
    /// `systemctl disable <units...>`.
    fn disable(&self, units: &[String]) -> Result<()>;
    /// `systemctl mask <units...>`.
    fn mask(&self, units: &[String]) -> Result<()>;
    /// `systemctl unmask <units...>`.
    fn unmask(&self, units: &[String]) -> Result<()>;
    /// `systemctl preset <unit>`: back to the distribution's default enablement.
    fn preset(&self, unit: &str) -> Result<()>;
    /// `systemctl reload <unit>`.
    fn reload(&self, unit: &str) -> Result<()>;
    /// `systemctl restart <unit>`.
    fn restart(&self, unit: &str) -> Result<()>;
    /// Whether `systemctl is-enabled <unit>` says `enabled`.
    fn is_enabled(&self, unit: &str) -> Result<bool>;
}

/// The host's `systemctl`.
///
/// Enablement changes (enable, disable, mask, unmask, preset, is-enabled) only edit symlinks,
/// so with an offline root they run as `systemctl --root=<root> ...` and need no running
/// systemd (useful when the host root is mounted rather than chrooted into). Reloads and
/// restarts always talk to the running systemd, through the command runner (`chroot /rootfs`
/// on a cluster).
#[derive(Debug, Clone)]
pub struct Systemctl {
    program: PathBuf,
    runner: CommandRunner,
    offline_root: Option<PathBuf>,
}

impl Systemctl {
    /// `systemctl` from `PATH`, through `runner`.
    pub fn new(runner: CommandRunner) -> Systemctl {
        Systemctl {
            program: PathBuf::from("systemctl"),
            runner,
            offline_root: None,
        }
    }

    /// A specific executable, run directly (tests pass a recording fake).
    pub fn with_program(program: impl Into<PathBuf>) -> Systemctl {
        Systemctl {
            program: program.into(),
            runner: CommandRunner::direct(),
            offline_root: None,
        }
    }

    /// Runs enablement changes offline against `root`.
    pub fn offline_root(mut self, root: impl Into<PathBuf>) -> Systemctl {
        self.offline_root = Some(root.into());
        self
    }

    fn run(&self, offline: bool, verb: &str, units: &[String]) -> Result<()> {
        let args = self.args(offline, verb, units);
        self.runner.run(&self.program, &args).map(drop)
    }

    fn args(&self, offline: bool, verb: &str, units: &[String]) -> Vec<String> {
        let mut args = Vec::with_capacity(units.len() + 2);
        if offline && let Some(root) = &self.offline_root {
            args.push(format!("--root={}", root.display()));
        }
        args.push(verb.to_string());
        args.extend(units.iter().cloned());
        args
    }
}

impl Systemd for Systemctl {
    fn daemon_reload(&self) -> Result<()> {
        self.run(false, "daemon-reload", &[])
    }

    fn enable(&self, units: &[String]) -> Result<()> {
        if units.is_empty() {
            return Ok(());
        }
        self.run(true, "enable", units)
    }

    fn disable(&self, units: &[String]) -> Result<()> {
        if units.is_empty() {
            return Ok(());
        }
        self.run(true, "disable", units)
    }

    fn mask(&self, units: &[String]) -> Result<()> {
        if units.is_empty() {
            return Ok(());
        }
        self.run(true, "mask", units)
    }

    fn unmask(&self, units: &[String]) -> Result<()> {
        if units.is_empty() {
            return Ok(());
        }
        self.run(true, "unmask", units)
    }

    fn preset(&self, unit: &str) -> Result<()> {
        self.run(true, "preset", &[unit.to_string()])
    }

    fn reload(&self, unit: &str) -> Result<()> {
        self.run(false, "reload", &[unit.to_string()])
    }

    fn restart(&self, unit: &str) -> Result<()> {
        self.run(false, "restart", &[unit.to_string()])
    }

    fn is_enabled(&self, unit: &str) -> Result<bool> {
        let args = self.args(true, "is-enabled", &[unit.to_string()]);
        // The exit code is the answer for disabled units; only an empty answer is an error.
        let (status, out) = self.runner.run_unchecked(&self.program, &args)?;
        let state = out.stdout.lines().next().unwrap_or("").trim();
        if state.is_empty() && !status.success() {
            return Err(HostError::Command {
                command: crate::host::cmd::command_line(&self.program, &args),
                stderr: out.stderr.trim().to_string(),
                status: status.to_string(),
            });
        }
        Ok(matches!(state, "enabled" | "enabled-runtime"))
    }
}

/// A simulated node's systemd.
#[derive(Debug)]
pub struct SimSystemd {
    fs: HostFs,
}

/// The `[Install]` section of a unit file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InstallSection {
    /// `WantedBy=` targets.
    pub wanted_by: Vec<String>,
    /// `RequiredBy=` targets.
    pub required_by: Vec<String>,
    /// `Alias=` names.
    pub alias: Vec<String>,
    /// `Also=` units enabled/disabled together.
    pub also: Vec<String>,
}

impl InstallSection {
    /// Parses the `[Install]` section of unit text (later assignments add; an empty one resets,
    /// as systemd does for list settings).
    pub fn parse(text: &str) -> InstallSection {
        let mut s = InstallSection::default();
        let mut in_install = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
                continue;
            }
            if line.starts_with('[') {
                in_install = line == "[Install]";
                continue;
            }
            if !in_install {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let list = match k.trim() {
                "WantedBy" => &mut s.wanted_by,
                "RequiredBy" => &mut s.required_by,
                "Alias" => &mut s.alias,
                "Also" => &mut s.also,
                _ => continue,
            };
            let v = v.trim();
            if v.is_empty() {
                list.clear();
            } else {
                list.extend(v.split_whitespace().map(str::to_string));
            }
        }
        s
    }

    /// Whether enabling has anything to do.
    pub fn is_empty(&self) -> bool {
        self.wanted_by.is_empty()
            && self.required_by.is_empty()
            && self.alias.is_empty()
            && self.also.is_empty()
    }
}

/// Minimal glob (`*`, `?`) for preset patterns.
fn glob_match(pattern: &str, name: &str) -> bool {
    fn go(p: &[char], n: &[char]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some('*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some('?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

use crate::host::units::UNIT_SEARCH_PATH;

impl SimSystemd {
    /// The simulated systemd of the node at `fs`.
    pub fn new(fs: HostFs) -> SimSystemd {
        SimSystemd { fs }
    }

    fn log(&self, line: &str) -> Result<()> {
        self.fs
            .append(paths::SIM_SYSTEMD_LOG, format!("{line}\n").as_bytes())
    }

    /// Every recorded action, one per line (`daemon-reload`, `restart crio.service`, ...).
    pub fn log_lines(&self) -> Result<Vec<String>> {
        let data = self
            .fs
            .read_optional(paths::SIM_SYSTEMD_LOG)?
            .unwrap_or_default();
        Ok(String::from_utf8_lossy(&data)
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// The unit file systemd would load (a template's `foo@.service` for `foo@bar.service`).
    fn find_unit_file(&self, unit: &str) -> Result<Option<String>> {
        let template = unit.split_once('@').and_then(|(base, rest)| {
            rest.rsplit_once('.')
                .map(|(_, ext)| format!("{base}@.{ext}"))
        });
        for name in std::iter::once(unit.to_string()).chain(template) {
            for dir in UNIT_SEARCH_PATH {
                let p = format!("{dir}/{name}");
                if let Some(st) = self.fs.stat(&p)? {
                    if st.kind == EntryKind::Symlink
                        && self
                            .fs
                            .read_link(&p)?
                            .is_some_and(|t| t == std::path::Path::new(paths::DEV_NULL))
                    {
                        return Ok(None);
                    }
                    return Ok(Some(p));
                }
            }
        }
        Ok(None)
    }

    fn install_section(&self, unit: &str) -> Result<(String, InstallSection)> {
        if units::is_masked(&self.fs, unit)? {
            return Err(HostError::State(format!("Unit file {unit} is masked.")));
        }
        let path = self
            .find_unit_file(unit)?
            .ok_or_else(|| HostError::State(format!("Unit file {unit} does not exist.")))?;
        let text = String::from_utf8_lossy(&self.fs.read(&path)?).into_owned();
        Ok((path, InstallSection::parse(&text)))
    }

    fn link_dirs(&self) -> Result<Vec<String>> {
        Ok(self
            .fs
            .list_dir(paths::SYSTEMD_UNIT_DIR)?
            .into_iter()
            .filter(|n| n.ends_with(".wants") || n.ends_with(".requires"))
            .map(|n| format!("{}/{n}", paths::SYSTEMD_UNIT_DIR))
            .collect())
    }

    fn enable_one(&self, unit: &str, seen: &mut Vec<String>) -> Result<()> {
        if seen.iter().any(|u| u == unit) {
            return Ok(());
        }
        seen.push(unit.to_string());
        let (path, install) = self.install_section(unit)?;
        if install.is_empty() {
            tracing::warn!(unit, "unit has no installation config; nothing to enable");
        }
        for t in &install.wanted_by {
            self.fs.symlink(
                &path,
                &format!("{}/{t}.wants/{unit}", paths::SYSTEMD_UNIT_DIR),
            )?;
        }
        for t in &install.required_by {
            self.fs.symlink(
                &path,
                &format!("{}/{t}.requires/{unit}", paths::SYSTEMD_UNIT_DIR),
            )?;
        }
        for a in &install.alias {
            self.fs.symlink(&path, &units::unit_path(a))?;
        }
        for also in &install.also {
            self.enable_one(also, seen)?;
        }
        Ok(())
    }

    fn disable_one(&self, unit: &str, seen: &mut Vec<String>) -> Result<()> {
        if seen.iter().any(|u| u == unit) {
            return Ok(());
        }
        seen.push(unit.to_string());
        for dir in self.link_dirs()? {
            let link = format!("{dir}/{unit}");
            if self.fs.read_link(&link)?.is_some() {
                self.fs.remove_file(&link)?;
            }
        }
        if let Ok((_, install)) = self.install_section(unit) {
            for a in &install.alias {
                if self.fs.read_link(&units::unit_path(a))?.is_some() {
                    self.fs.remove_file(&units::unit_path(a))?;
                }
            }
            for also in &install.also {
                self.disable_one(also, seen)?;
            }
        }
        Ok(())
    }

    /// The preset policy for a unit: the first matching rule across preset files, ordered by
    /// file name (an `/etc` file shadows a `/usr/lib` one of the same name); no match enables.
    pub fn preset_enables(&self, unit: &str) -> Result<bool> {
        let mut files: Vec<(String, String)> = Vec::new();
        for dir in [paths::SYSTEMD_PRESET_DIR, paths::SYSTEMD_VENDOR_PRESET_DIR] {
            for name in self.fs.list_dir(dir)? {
                if name.ends_with(".preset") && !files.iter().any(|(n, _)| *n == name) {
                    files.push((name.clone(), format!("{dir}/{name}")));
                }
            }
        }
        files.sort();
        for (_, path) in files {
            let text = String::from_utf8_lossy(&self.fs.read(&path)?).into_owned();
            for line in text.lines() {
                let mut words = line.split_whitespace();
                let (Some(verb), Some(pattern)) = (words.next(), words.next()) else {
                    continue;
                };
                if verb.starts_with('#') || !glob_match(pattern, unit) {
                    continue;
                }
                match verb {
                    "enable" => return Ok(true),
                    "disable" => return Ok(false),
                    _ => {}
                }
            }
        }
        Ok(true)
    }
}

impl Systemd for SimSystemd {
    fn daemon_reload(&self) -> Result<()> {
        self.log("daemon-reload")
    }

    fn enable(&self, units: &[String]) -> Result<()> {
        if units.is_empty() {
            return Ok(());
        }
        let mut seen = Vec::new();
        for u in units {
            self.enable_one(u, &mut seen)?;
        }
        self.log(&format!("enable {}", units.join(" ")))
    }

    fn disable(&self, units: &[String]) -> Result<()> {
        if units.is_empty() {
            return Ok(());
        }
        let mut seen = Vec::new();
        for u in units {
            self.disable_one(u, &mut seen)?;
        }
        self.log(&format!("disable {}", units.join(" ")))
    }

    fn mask(&self, units: &[String]) -> Result<()> {
        if units.is_empty() {
            return Ok(());
        }
        for u in units {
            units::mask_unit(&self.fs, u)?;
        }
        self.log(&format!("mask {}", units.join(" ")))
    }

    fn unmask(&self, units: &[String]) -> Result<()> {
        if units.is_empty() {
            return Ok(());
        }
        for u in units {
            units::unmask_unit(&self.fs, u)?;
        }
        self.log(&format!("unmask {}", units.join(" ")))
    }

    fn preset(&self, unit: &str) -> Result<()> {
        let enable = self.preset_enables(unit)?;
        let mut seen = Vec::new();
        if enable {
            self.enable_one(unit, &mut seen)?;
        } else {
            self.disable_one(unit, &mut seen)?;
        }
        self.log(&format!("preset {unit}"))
    }

    fn reload(&self, unit: &str) -> Result<()> {
        self.log(&format!("reload {unit}"))
    }

    fn restart(&self, unit: &str) -> Result<()> {
        self.log(&format!("restart {unit}"))
    }

    fn is_enabled(&self, unit: &str) -> Result<bool> {
        if units::is_masked(&self.fs, unit)? {
            return Ok(false);
        }
        for dir in self.link_dirs()? {
            if self.fs.read_link(&format!("{dir}/{unit}"))?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_section_parsing() {
        let s = InstallSection::parse(
            "[Unit]\nWantedBy=ignored.target\n[Install]\nWantedBy=multi-user.target\n\
             WantedBy=graphical.target other.target\nRequiredBy=x.target\nAlias=y.service\n# c\n",
        );
        assert_eq!(
            s.wanted_by,
            vec!["multi-user.target", "graphical.target", "other.target"]
        );
        assert_eq!(s.required_by, vec!["x.target"]);
        assert_eq!(s.alias, vec!["y.service"]);
        let reset = InstallSection::parse("[Install]\nWantedBy=a.target\nWantedBy=\n");
        assert!(reset.is_empty());
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", "a.service"));
        assert!(glob_match("kubelet*.service", "kubelet-x.service"));
        assert!(glob_match("a?.service", "ab.service"));
        assert!(!glob_match("a?.service", "a.service"));
        assert!(!glob_match("b*", "a.service"));
    }
}
