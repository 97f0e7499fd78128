//! The daemon's test helpers: fixtures, fake host tools, and a simulated node for engine tests
//! (a temp root with users, os-release, and optionally an ostree marker and simulated
//! deployments).

// Test setup reaches the temp roots directly.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

use std::path::PathBuf;

use mco_api::MachineConfig;
use mco_daemon::Host;
use mco_daemon::engine::Engine;
use mco_daemon::host::fs::{FileAttrs, HostFs};
use mco_daemon::host::ostree::SimOstree;
use mco_testkit::MachineConfigBuilder;
use serde_json::{Value, json};

pub const URL_122: &str = "registry.uniontech.com/utccp-components/machine-os-content:1.2.2";
pub const URL_130: &str = "registry.uniontech.com/uccps-components/machine-os-content:1.3.0";

/// Path of a fixture under `tests/fixtures`.
pub fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Text of a fixture under `tests/fixtures`.
pub fn fixture(rel: &str) -> String {
    std::fs::read_to_string(fixture_path(rel)).unwrap()
}

mod fake_tools;
#[allow(unused_imports)] // not every test binary uses every helper
pub use fake_tools::{argv, calls, fake_tool};

pub struct Node {
    pub dir: tempfile::TempDir,
    pub fs: HostFs,
}

impl Node {
    /// A node with `core` (uid 1000), the seed's `uos` os-release, and, when `ostree`, the
    /// ostree marker plus the seed's never-adopted deployment.
    pub fn new(ostree: bool) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let fs = HostFs::open(dir.path()).unwrap();
        let w = |p: &str, c: &str| {
            fs.write_atomic(p, c.as_bytes(), &FileAttrs::default())
                .unwrap()
        };
        w(
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000:CoreOS Admin:/home/core:/bin/bash\n",
        );
        w("/etc/group", "root:x:0:\ncore:x:1000:\nwheel:x:10:core\n");
        fs.write_atomic(
            "/etc/shadow",
            b"root:*:19000:0:99999:7:::\ncore:!!:19000:0:99999:7:::\n",
            &FileAttrs::mode(0o600),
        )
        .unwrap();
        w("/etc/os-release", &fixture("os-release/uos"));
        if ostree {
            w("/run/ostree-booted", "");
            SimOstree::new(fs.try_clone().unwrap())
                .seed_from_json(
                    &fixture("rpm-ostree/seed-unpivoted.json"),
                    &["rw".to_string(), "root=UUID=1".to_string()],
                )
                .unwrap();
        }
        Node { dir, fs }
    }

    pub fn engine(&self) -> Engine {
        Engine::new(Host::sim(self.dir.path()).unwrap()).unwrap()
    }

    pub fn sim_ostree(&self) -> SimOstree {
        SimOstree::new(self.fs.try_clone().unwrap())
    }

    pub fn read(&self, path: &str) -> Option<String> {
        self.fs
            .read_optional(path)
            .unwrap()
            .map(|d| String::from_utf8(d).unwrap())
    }

    pub fn write(&self, path: &str, content: &str) {
        self.fs
            .write_atomic(path, content.as_bytes(), &FileAttrs::default())
            .unwrap();
    }

    pub fn mode(&self, path: &str) -> u32 {
        self.fs.stat(path).unwrap().unwrap().mode & 0o7777
    }

    pub fn systemd_log(&self) -> Vec<String> {
        self.read(mco_daemon::host::paths::SIM_SYSTEMD_LOG)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// A rendered config.
pub fn mc(name: &str, url: &str, ignition: Value) -> MachineConfig {
    MachineConfigBuilder::new(name)
        .os_image_url(url)
        .config(ignition)
        .build()
}

/// Ignition 3.2.0 with files and units.
pub fn ign(files: Value, units: Value) -> Value {
    json!({
        "ignition": {"version": "3.2.0"},
        "storage": {"files": files},
        "systemd": {"units": units},
    })
}

/// A plain-text file entry.
pub fn file(path: &str, content: &str, mode: u32) -> Value {
    json!({
        "path": path,
        "contents": {"source": format!("data:,{}", pct(content))},
        "mode": mode,
    })
}

fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
