//! The simulated fleet, as files: `DIR/sim/nodes/<name>.json` holds one node's spec.
//!
//! This directory is the interface between `mco sim add-node`/`remove-node` and a running
//! `mco up`: the commands write or delete a spec, and the cluster reconciles its supervisors
//! against the directory. It also makes the fleet survive restarts without the API server.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, SimError};
use crate::profile::OsProfile;

/// Zones nodes are spread over, as `topology.kubernetes.io/zone=<region><zone>`.
pub const ZONES: [&str; 3] = ["a", "b", "c"];

/// One simulated node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    /// Node name.
    pub name: String,
    /// `master` or `worker` (or a custom role: the node gets `node-role.kubernetes.io/<pool>`).
    pub pool: String,
    /// The OS it runs (`uos`, `rhcos`, `fcos`, `rhel`).
    pub os: String,
    /// Reproduce seed 000: first boot applies files but never adopts the OS.
    #[serde(default)]
    pub skip_firstboot_os: bool,
    /// Zone suffix (`a`, `b`, `c`).
    pub zone: String,
}

impl NodeSpec {
    /// The OS profile.
    pub fn profile(&self) -> Result<OsProfile> {
        self.os
            .parse()
            .map_err(|e: crate::profile::UnknownProfile| SimError::Invalid(e.to_string()))
    }
}

/// Whether `name` is a valid node name (a DNS-1123 subdomain, kept simple).
pub fn valid_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The specs directory of a data dir.
#[derive(Debug, Clone)]
pub struct SpecDir {
    dir: PathBuf,
}

impl SpecDir {
    /// `DATA_DIR/sim/nodes`.
    pub fn of(data_dir: &Path) -> SpecDir {
        SpecDir {
            dir: data_dir.join("sim").join("nodes"),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// When the directory last changed (a spec added, replaced or removed), if it exists.
    pub fn changed_at(&self) -> Option<std::time::SystemTime> {
        std::fs::metadata(&self.dir).and_then(|m| m.modified()).ok()
    }

    /// Every spec, by name.
    pub fn list(&self) -> Result<Vec<NodeSpec>> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SimError::io("listing", &self.dir, e)),
        };
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| SimError::io("listing", &self.dir, e))?;
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let data = std::fs::read(&path).map_err(|e| SimError::io("reading", &path, e))?;
            let spec: NodeSpec = serde_json::from_slice(&data).map_err(|e| SimError::Json {
                what: path.display().to_string(),
                source: e,
            })?;
            out.push(spec);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// One spec.
    pub fn get(&self, name: &str) -> Result<Option<NodeSpec>> {
        Ok(self.list()?.into_iter().find(|s| s.name == name))
    }

    /// Adds a node; fails if one of that name exists.
    pub fn add(&self, spec: &NodeSpec) -> Result<()> {
        if !valid_node_name(&spec.name) {
            return Err(SimError::Invalid(format!(
                "invalid node name {:?}: use lower-case letters, digits, '-' and '.'",
                spec.name
            )));
        }
        spec.profile()?;
        if self.file(&spec.name).exists() {
            return Err(SimError::Invalid(format!(
                "node {} already exists",
                spec.name
            )));
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| SimError::io("creating", &self.dir, e))?;
        let data = serde_json::to_vec_pretty(spec).map_err(|e| SimError::Json {
            what: spec.name.clone(),
            source: e,
        })?;
        let tmp = self.dir.join(format!(".{}.tmp", spec.name));
        std::fs::write(&tmp, data).map_err(|e| SimError::io("writing", &tmp, e))?;
        let dst = self.file(&spec.name);
        std::fs::rename(&tmp, &dst).map_err(|e| SimError::io("writing", &dst, e))
    }

    /// Removes a node's spec; returns whether it existed.
    pub fn remove(&self, name: &str) -> Result<bool> {
        let f = self.file(name);
        match std::fs::remove_file(&f) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(SimError::io("removing", &f, e)),
        }
    }

    /// The zone for the next node: the least used one.
    pub fn next_zone(&self) -> Result<String> {
        let specs = self.list()?;
        Ok(pick_zone(specs.iter().map(|s| s.zone.as_str())))
    }
}

/// The least used zone, first in order on ties.
pub fn pick_zone<'a>(used: impl Iterator<Item = &'a str>) -> String {
    let mut counts = [0usize; ZONES.len()];
    for z in used {
        if let Some(i) = ZONES.iter().position(|x| *x == z) {
            counts[i] += 1;
        }
    }
    let i = (0..ZONES.len()).min_by_key(|&i| counts[i]).unwrap_or(0);
    ZONES[i].to_string()
}

/// The specs of a fresh cluster: `master-0..` and `worker-0..`, zones round-robin per role.
pub fn initial_fleet(masters: usize, workers: usize, os: OsProfile) -> Vec<NodeSpec> {
    let mut out = Vec::new();
    for (pool, n) in [("master", masters), ("worker", workers)] {
        for i in 0..n {
            out.push(NodeSpec {
                name: format!("{pool}-{i}"),
                pool: pool.to_string(),
                os: os.as_str().to_string(),
                skip_firstboot_os: false,
                zone: ZONES[i % ZONES.len()].to_string(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_spread() {
        assert_eq!(pick_zone(["a", "b", "a"].into_iter()), "c");
        assert_eq!(pick_zone(std::iter::empty()), "a");
        let fleet = initial_fleet(3, 4, OsProfile::Uos);
        assert_eq!(fleet.len(), 7);
        assert_eq!(fleet[3].name, "worker-0");
        assert_eq!(fleet[6].zone, "a");
    }

    #[test]
    fn add_list_remove() {
        let d = tempfile::tempdir().unwrap();
        let specs = SpecDir::of(d.path());
        let s = NodeSpec {
            name: "w9".into(),
            pool: "worker".into(),
            os: "uos".into(),
            skip_firstboot_os: true,
            zone: "a".into(),
        };
        specs.add(&s).unwrap();
        assert!(specs.add(&s).is_err(), "duplicate refused");
        assert_eq!(specs.list().unwrap(), vec![s.clone()]);
        assert_eq!(specs.next_zone().unwrap(), "b");
        assert!(specs.remove("w9").unwrap());
        assert!(!specs.remove("w9").unwrap());
        assert!(specs.list().unwrap().is_empty());
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_node_name("worker-0"));
        assert!(!valid_node_name("Worker"));
        assert!(!valid_node_name("-a"));
        assert!(!valid_node_name(""));
    }
}
