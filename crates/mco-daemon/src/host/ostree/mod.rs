//! The OS updater: what ostree deployment is booted or staged, and how to move to another.
//!
//! One trait, two implementations: [`RpmOstree`] drives the host's `rpm-ostree`, [`SimOstree`]
//! keeps deployments in a JSON file inside a simulated node's root with the same field names.

mod imgref;
mod pull_secret;
mod rpm_ostree;
mod sim;

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use imgref::{ImageReference, SignatureSource, Transport};
pub use pull_secret::{choose_pull_secret, link_pull_secret};
pub use rpm_ostree::{RetryPolicy, RpmOstree};
pub use sim::SimOstree;

use crate::error::{HostError, Result};

/// The custom-origin description mco writes in pivot mode; seeing it in `rpm-ostree status`
/// is how operators know the node was adopted.
pub const PIVOT_DESCRIPTION: &str = "Managed by machine-config-operator";
/// Scheme of the legacy custom origin URL.
pub const PIVOT_SCHEME: &str = "pivot://";

/// `rpm-ostree status --json`, top level.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StatusJson {
    /// Newest/default first.
    pub deployments: Vec<DeploymentJson>,
    /// `[method, sender, object-path]` while a transaction runs.
    #[serde(default)]
    pub transaction: Option<Value>,
    /// Cached update metadata, when any.
    #[serde(default)]
    pub cached_update: Option<Value>,
    /// Update driver, when any.
    #[serde(default)]
    pub update_driver: Option<Value>,
    /// Everything else, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One deployment in `rpm-ostree status --json`; unknown keys are kept in `extra` so a
/// round trip loses nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct DeploymentJson {
    /// `<osname>-<checksum>.<serial>`.
    pub id: String,
    /// Stateroot.
    pub osname: String,
    /// Deploy serial.
    #[serde(default)]
    pub serial: u32,
    /// Commit of the deployment (differs from the base when packages are layered).
    pub checksum: String,
    /// Base commit when layered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_checksum: Option<String>,
    /// Commit `version` metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Commit time, unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
    /// Currently booted.
    #[serde(default)]
    pub booted: bool,
    /// Staged for the next boot.
    #[serde(default)]
    pub staged: bool,
    /// Pinned against cleanup.
    #[serde(default)]
    pub pinned: bool,
    /// Ostree refspec (or bare checksum) origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// `[url, description]` custom origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_origin: Option<Vec<String>>,
    /// Ostree container image reference origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_image_reference: Option<String>,
    /// Digest of the container image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_image_reference_digest: Option<String>,
    /// Client-side layered packages.
    #[serde(default)]
    pub requested_packages: Vec<String>,
    /// Base packages removed by override.
    #[serde(default)]
    pub requested_base_removals: Vec<String>,
    /// Every other key, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Where a deployment came from, which is how mco knows whether it adopted the OS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Legacy custom origin `["pivot://<url>", "Managed by machine-config-operator"]`; holds
    /// the URL without the scheme.
    Pivot(String),
    /// `container-image-reference`, verbatim (e.g. `ostree-unverified-registry:<url>`).
    Container(String),
    /// A plain ostree refspec never taken over by mco (seed 000: `uswift:uswift/x86_64`).
    Ostree(String),
}

impl Origin {
    /// Upstream precedence: a container reference wins, then a `pivot://` custom origin, then
    /// the plain refspec.
    fn of(d: &DeploymentJson) -> Origin {
        if let Some(r) = d
            .container_image_reference
            .as_deref()
            .filter(|r| !r.is_empty())
        {
            return Origin::Container(r.to_string());
        }
        if let Some(url) = d
            .custom_origin
            .as_ref()
            .and_then(|c| c.first())
            .and_then(|u| u.strip_prefix(PIVOT_SCHEME))
        {
            return Origin::Pivot(url.to_string());
        }
        Origin::Ostree(d.origin.clone().unwrap_or_default())
    }

    /// The OS image URL mco compares against `osImageURL`: the pivot URL without its scheme,
    /// or the container reference without its signature/transport prefix. `None` for a plain
    /// ostree origin, which upstream reported as `""`.
    pub fn os_image_url(&self) -> Option<String> {
        match self {
            Origin::Pivot(url) => Some(url.clone()),
            Origin::Container(r) => Some(
                r.parse::<ImageReference>()
                    .map(|i| i.image)
                    .unwrap_or_else(|_| r.clone()),
            ),
            Origin::Ostree(_) => None,
        }
    }
}

impl fmt::Display for Origin {
    /// As `rpm-ostree status` titles the deployment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Pivot(url) => write!(f, "{PIVOT_SCHEME}{url}"),
            Origin::Container(r) | Origin::Ostree(r) => f.write_str(r),
        }
    }
}

/// A deployment, as the update engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    /// `<osname>-<checksum>.<serial>`.
    pub id: String,
    /// Stateroot.
    pub osname: String,
    /// Deployment commit.
    pub checksum: String,
    /// Base commit (the checksum when nothing is layered).
    pub base_checksum: String,
    /// Commit version, empty when unknown.
    pub version: String,
    /// Commit time, unix seconds.
    pub timestamp: Option<u64>,
    /// Where it came from.
    pub origin: Origin,
    /// The custom origin `(url, description)`, when set.
    pub custom_origin: Option<(String, String)>,
    /// Currently booted.
    pub booted: bool,
    /// Staged for the next boot.
    pub staged: bool,
    /// Pinned.
    pub pinned: bool,
    /// Layered packages.
    pub requested_packages: Vec<String>,
    /// Removed base packages.
    pub requested_base_removals: Vec<String>,
}

impl From<&DeploymentJson> for Deployment {
    fn from(d: &DeploymentJson) -> Deployment {
        Deployment {
            id: d.id.clone(),
            osname: d.osname.clone(),
            checksum: d.checksum.clone(),
            base_checksum: d
                .base_checksum
                .clone()
                .unwrap_or_else(|| d.checksum.clone()),
            version: d.version.clone().unwrap_or_default(),
            timestamp: d.timestamp,
            origin: Origin::of(d),
            custom_origin: d.custom_origin.as_ref().and_then(|c| match c.as_slice() {
                [u, desc, ..] => Some((u.clone(), desc.clone())),
                [u] => Some((u.clone(), String::new())),
                [] => None,
            }),
            booted: d.booted,
            staged: d.staged,
            pinned: d.pinned,
            requested_packages: d.requested_packages.clone(),
            requested_base_removals: d.requested_base_removals.clone(),
        }
    }
}

impl Deployment {
    /// See [`Origin::os_image_url`].
    pub fn os_image_url(&self) -> Option<String> {
        self.origin.os_image_url()
    }

    /// Whether mco's origin is on this deployment (pivot or container), i.e. it was adopted.
    pub fn is_mco_managed(&self) -> bool {
        !matches!(self.origin, Origin::Ostree(_))
    }

    /// The kernel flavour installed through overrides.
    pub fn kernel_type(&self) -> KernelType {
        KernelType::from_packages(&self.requested_packages)
    }
}

/// The deployments that matter to an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsStatus {
    /// The running deployment.
    pub booted: Deployment,
    /// What the next boot will run, when it differs.
    pub staged: Option<Deployment>,
    /// What a rollback would boot.
    pub rollback: Option<Deployment>,
    /// All deployments, in rpm-ostree's order.
    pub deployments: Vec<Deployment>,
    /// Whether a transaction is in progress.
    pub transaction_active: bool,
}

impl OsStatus {
    /// Parses `rpm-ostree status --json` output.
    pub fn parse(json: &str) -> Result<OsStatus> {
        let raw: StatusJson = serde_json::from_str(json).map_err(|e| HostError::Json {
            what: "rpm-ostree status --json".into(),
            source: e,
        })?;
        OsStatus::from_json(&raw)
    }

    /// Picks booted/staged/rollback: staged is the deployment marked staged, or else a pending
    /// one listed before the booted; rollback is the first one after the booted.
    pub fn from_json(raw: &StatusJson) -> Result<OsStatus> {
        let deployments: Vec<Deployment> = raw.deployments.iter().map(Deployment::from).collect();
        let booted_idx = deployments
            .iter()
            .position(|d| d.booted)
            .ok_or_else(|| HostError::State("no booted deployment found".into()))?;
        let staged = deployments
            .iter()
            .find(|d| d.staged)
            .or_else(|| deployments[..booted_idx].first())
            .cloned();
        let rollback = deployments[booted_idx + 1..]
            .iter()
            .find(|d| !d.staged)
            .cloned();
        Ok(OsStatus {
            booted: deployments[booted_idx].clone(),
            staged,
            rollback,
            transaction_active: raw.transaction.as_ref().is_some_and(|t| !t.is_null()),
            deployments,
        })
    }

    /// The deployment the next boot runs (staged if any, else booted) — the one whose kernel
    /// arguments `rpm-ostree kargs` shows and edits.
    pub fn default_deployment(&self) -> &Deployment {
        self.staged.as_ref().unwrap_or(&self.booted)
    }
}

impl fmt::Display for OsStatus {
    /// Like the human `rpm-ostree status`, for logs: the booted deployment marked `*`, the
    /// title being the origin (`pivot://...` for adopted legacy nodes), then the custom origin
    /// description, version with commit time, and the commit for un-adopted deployments.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.transaction_active {
            "busy"
        } else {
            "idle"
        };
        writeln!(f, "State: {state}")?;
        writeln!(f, "Deployments:")?;
        for (i, d) in self.deployments.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            let mark = if d.booted { '*' } else { ' ' };
            writeln!(f, "{mark} {}", d.origin)?;
            let line = |f: &mut fmt::Formatter<'_>, label: &str, value: &str| {
                writeln!(f, "{:>27} {value}", format!("{label}:"))
            };
            if let Some((_, desc)) = &d.custom_origin {
                line(f, "CustomOrigin", desc)?;
            }
            let when = d
                .timestamp
                .and_then(|t| jiff::Timestamp::from_second(t as i64).ok())
                .map(|t| format!(" ({})", t.strftime("%Y-%m-%dT%H:%M:%SZ")))
                .unwrap_or_default();
            line(f, "Version", &format!("{}{when}", d.version))?;
            if d.staged {
                line(f, "Staged", "yes")?;
            }
            if !matches!(d.origin, Origin::Pivot(_)) {
                line(f, "Commit", &d.checksum)?;
            }
        }
        Ok(())
    }
}

/// How to rebase to an OS image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebaseMode {
    /// Legacy: deploy a local ostree commit extracted from the image (`refspec`, e.g.
    /// `/run/mco-machine-os-content/os-content-X/srv/repo:<checksum>`), recording the image as
    /// custom origin `pivot://<url>`.
    Pivot {
        /// Local repo path and commit, as `rpm-ostree rebase` takes them.
        refspec: String,
    },
    /// Bootable container image: `ostree-unverified-registry:<url>`.
    Container,
}

/// Kernel flavour (MachineConfig `kernelType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelType {
    /// The OS's default kernel.
    #[default]
    Default,
    /// `realtime`: kernel-rt.
    Realtime,
    /// `64k-pages`: kernel-64k (aarch64).
    SixtyFourK,
}

/// Base kernel packages replaced by an override.
pub const DEFAULT_KERNEL_PACKAGES: &[&str] = &[
    "kernel",
    "kernel-core",
    "kernel-modules",
    "kernel-modules-core",
    "kernel-modules-extra",
];
/// Packages of the realtime kernel.
pub const RT_KERNEL_PACKAGES: &[&str] = &[
    "kernel-rt-core",
    "kernel-rt-modules",
    "kernel-rt-modules-core",
    "kernel-rt-modules-extra",
    "kernel-rt-kvm",
];
/// Packages of the 64k-pages kernel.
pub const KERNEL_64K_PACKAGES: &[&str] = &[
    "kernel-64k-core",
    "kernel-64k-modules",
    "kernel-64k-modules-core",
    "kernel-64k-modules-extra",
];

impl KernelType {
    /// Parses the MachineConfig spelling; empty means default.
    pub fn from_mc(s: &str) -> Option<KernelType> {
        match s {
            "" | "default" => Some(KernelType::Default),
            "realtime" => Some(KernelType::Realtime),
            "64k-pages" => Some(KernelType::SixtyFourK),
            _ => None,
        }
    }

    /// The MachineConfig spelling.
    pub fn as_mc(self) -> &'static str {
        match self {
            KernelType::Default => "default",
            KernelType::Realtime => "realtime",
            KernelType::SixtyFourK => "64k-pages",
        }
    }

    /// Packages layered for this flavour (none for the default kernel).
    pub fn packages(self) -> &'static [&'static str] {
        match self {
            KernelType::Default => &[],
            KernelType::Realtime => RT_KERNEL_PACKAGES,
            KernelType::SixtyFourK => KERNEL_64K_PACKAGES,
        }
    }

    fn from_packages(pkgs: &[String]) -> KernelType {
        if pkgs.iter().any(|p| p == "kernel-rt-core") {
            KernelType::Realtime
        } else if pkgs.iter().any(|p| p == "kernel-64k-core") {
            KernelType::SixtyFourK
        } else {
            KernelType::Default
        }
    }
}

/// Splits a kernel command line like the kernel does (`next_arg()` in lib/cmdline.c):
/// whitespace separates, `"` quotes spaces and is kept, so `bar="hello world"` is one argument.
pub fn split_kernel_arguments(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_quote = false;
    for c in s.chars() {
        if c.is_ascii_whitespace() && !in_quote {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if c == '"' {
            in_quote = !in_quote;
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Flattens MachineConfig `kernelArguments` entries (each may hold several) into arguments.
pub fn parse_kernel_arguments(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .flat_map(|e| split_kernel_arguments(e))
        .collect()
}

/// Reads and changes the host OS. Blocking: call from a blocking context.
pub trait OsUpdater: Send + Sync {
    /// Booted, staged and rollback deployments.
    fn status(&self) -> Result<OsStatus>;

    /// The booted OS image URL, `None` when the booted deployment was never adopted by mco.
    fn booted_os_image_url(&self) -> Result<Option<String>> {
        Ok(self.status()?.booted.os_image_url())
    }

    /// Stages a deployment of the image at `url`. Pulling it needs the registry credentials
    /// that [`link_pull_secret`] provides; the caller links them first.
    fn rebase(&self, url: &str, mode: &RebaseMode) -> Result<()>;

    /// Kernel arguments of the default (next-boot) deployment, split like the kernel does.
    fn kargs(&self) -> Result<Vec<String>>;

    /// Deletes (when present) then appends kernel arguments, each element one argument.
    fn set_kargs(&self, delete: &[String], append: &[String]) -> Result<()>;

    /// Switches the kernel flavour; a no-op when it is already the requested one.
    fn set_kernel_type(&self, kernel: KernelType) -> Result<()>;

    /// Applies extension arguments (`--install P`, `--uninstall Q`, as
    /// [`mco_render::extensions::extension_args`] makes them) in one transaction, `rpm-ostree
    /// update --install P ... --uninstall Q ...`, staging a deployment that requests them on top
    /// of the merge deployment (staged, else booted); a no-op when `args` is empty. The packages
    /// come from the repositories enabled on the host, the extensions repo among them
    /// ([`crate::host::extensions`]).
    fn update_packages(&self, args: &[String]) -> Result<()>;

    /// Drops a staged/pending deployment (`rpm-ostree cleanup -p`).
    fn cleanup_pending(&self) -> Result<()>;

    /// Drops the rollback deployment (`rpm-ostree cleanup -r`).
    fn cleanup_rollback(&self) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_style_split() {
        assert_eq!(
            split_kernel_arguments(" baz=test bar=\"hello world\"  nosmt\tfoo=bar "),
            vec!["baz=test", "bar=\"hello world\"", "nosmt", "foo=bar"]
        );
        assert_eq!(
            parse_kernel_arguments(&[
                "nosmt".into(),
                "foo=bar".into(),
                "foo=baz".into(),
                " baz=test bar=\"hello world\"".into()
            ]),
            vec![
                "nosmt",
                "foo=bar",
                "foo=baz",
                "baz=test",
                "bar=\"hello world\""
            ]
        );
        assert!(split_kernel_arguments("   ").is_empty());
    }

    #[test]
    fn origin_precedence_and_url() {
        let mut d = DeploymentJson {
            origin: Some("abc".into()),
            custom_origin: Some(vec![
                "pivot://quay.io/x@sha256:1".into(),
                PIVOT_DESCRIPTION.into(),
            ]),
            ..DeploymentJson::default()
        };
        assert_eq!(Origin::of(&d), Origin::Pivot("quay.io/x@sha256:1".into()));
        d.container_image_reference = Some("ostree-unverified-registry:quay.io/y:1".into());
        let o = Origin::of(&d);
        assert_eq!(o.os_image_url().as_deref(), Some("quay.io/y:1"));
        assert_eq!(o.to_string(), "ostree-unverified-registry:quay.io/y:1");
        let plain = DeploymentJson {
            origin: Some("uswift:uswift/x86_64".into()),
            custom_origin: Some(vec!["https://example.com".into(), "other".into()]),
            ..DeploymentJson::default()
        };
        assert_eq!(
            Origin::of(&plain),
            Origin::Ostree("uswift:uswift/x86_64".into())
        );
        assert_eq!(Origin::of(&plain).os_image_url(), None);
    }

    #[test]
    fn kernel_types() {
        assert_eq!(KernelType::from_mc("realtime"), Some(KernelType::Realtime));
        assert_eq!(KernelType::from_mc(""), Some(KernelType::Default));
        assert_eq!(KernelType::from_mc("bogus"), None);
        assert_eq!(KernelType::SixtyFourK.as_mc(), "64k-pages");
        assert_eq!(
            KernelType::from_packages(&["usbguard".into(), "kernel-rt-core".into()]),
            KernelType::Realtime
        );
    }

    #[test]
    fn missing_booted_is_an_error() {
        let err = OsStatus::parse(r#"{"deployments":[]}"#).unwrap_err();
        assert_eq!(err.to_string(), "no booted deployment found");
        assert!(OsStatus::parse("not json").is_err());
    }
}
