//! What a node must do after writing a new config (reboot, reload or restart a service, nothing),
//! and whether it must be drained first.
//!
//! This is upstream's node-disruption-policy calculation with its built-in default policies.
//! Administrators' policies from `MachineConfiguration` merge on top through
//! [`DisruptionPolicies::with_user_policies`]. The `/run/machine-config-daemon-force` file is the
//! daemon's business: when it exists the daemon reboots without asking this module.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::diff::{ConfigDiff, FileChange};
use crate::ignition;

/// One post-config action, as upstream's `NodeDisruptionPolicyStatusAction` types. Serialises to
/// the operator API's shape, e.g. `{"type": "Reload", "reload": {"serviceName": "crio.service"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "WireAction", into = "WireAction")]
pub enum PostConfigAction {
    /// Nothing to do (the change takes effect by itself, e.g. SSH keys).
    None,
    /// Drain the node without rebooting it.
    Drain,
    /// `systemctl reload <unit>`.
    Reload(String),
    /// `systemctl restart <unit>`.
    Restart(String),
    /// `systemctl daemon-reload`.
    DaemonReload,
    /// Reserved for `/etc/containers/registries.conf`: reload crio, drain only if the change is
    /// unsafe for running workloads.
    Special,
    Reboot,
}

impl PostConfigAction {
    pub fn reload(unit: &str) -> Self {
        Self::Reload(unit.to_owned())
    }

    pub fn restart(unit: &str) -> Self {
        Self::Restart(unit.to_owned())
    }
}

impl fmt::Display for PostConfigAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Drain => f.write_str("Drain"),
            Self::Reload(unit) => write!(f, "Reload {unit}"),
            Self::Restart(unit) => write!(f, "Restart {unit}"),
            Self::DaemonReload => f.write_str("DaemonReload"),
            Self::Special => f.write_str("Special"),
            Self::Reboot => f.write_str("Reboot"),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireService {
    service_name: String,
}

/// The operator API's tagged-struct encoding of an action.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WireAction {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reload: Option<WireService>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    restart: Option<WireService>,
}

impl From<PostConfigAction> for WireAction {
    fn from(a: PostConfigAction) -> Self {
        let bare = |kind: &str| WireAction {
            kind: kind.to_owned(),
            reload: None,
            restart: None,
        };
        match a {
            PostConfigAction::None => bare("None"),
            PostConfigAction::Drain => bare("Drain"),
            PostConfigAction::DaemonReload => bare("DaemonReload"),
            PostConfigAction::Special => bare("Special"),
            PostConfigAction::Reboot => bare("Reboot"),
            PostConfigAction::Reload(service_name) => WireAction {
                reload: Some(WireService { service_name }),
                ..bare("Reload")
            },
            PostConfigAction::Restart(service_name) => WireAction {
                restart: Some(WireService { service_name }),
                ..bare("Restart")
            },
        }
    }
}

impl TryFrom<WireAction> for PostConfigAction {
    type Error = String;

    fn try_from(w: WireAction) -> Result<Self, Self::Error> {
        Ok(match w.kind.as_str() {
            "None" => Self::None,
            "Drain" => Self::Drain,
            "DaemonReload" => Self::DaemonReload,
            "Special" => Self::Special,
            "Reboot" => Self::Reboot,
            "Reload" => Self::Reload(
                w.reload
                    .ok_or("reload.serviceName is required when type is Reload")?
                    .service_name,
            ),
            "Restart" => Self::Restart(
                w.restart
                    .ok_or("restart.serviceName is required when type is Restart")?
                    .service_name,
            ),
            other => return Err(format!("unknown post-config action type {other:?}")),
        })
    }
}

/// Displays a list of actions as `[Reload crio.service, Restart kubelet.service]`.
#[derive(Debug, Clone, Copy)]
pub struct ActionList<'a>(pub &'a [PostConfigAction]);

impl fmt::Display for ActionList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{a}")?;
        }
        f.write_str("]")
    }
}

/// The MachineConfigNode `UpdatePrepared` message. Upstream prints an always-empty legacy list on
/// this path; mco prints the actions it will really take.
pub fn update_prepared_message(actions: &[PostConfigAction], drain: bool) -> String {
    format!(
        "Update Compatible. Post Cfg Actions: {} Drain Required: {drain}",
        ActionList(actions)
    )
}

/// Paths and units the default policies name (upstream `pkg/daemon/constants`).
pub mod paths {
    pub const KUBELET_AUTH_FILE: &str = "/var/lib/kubelet/config.json";
    pub const GPG_NO_REBOOT: &str = "/etc/machine-config-daemon/no-reboot/containers-gpg.pub";
    pub const CONTAINER_POLICY: &str = "/etc/containers/policy.json";
    pub const REGISTRIES_CONF: &str = mco_api::paths::REGISTRIES_CONF;
    pub const SIGSTORE_REGISTRIES_DIR: &str = "/etc/containers/registries.d";
    pub const CRIO_POLICIES_DIR: &str = "/etc/crio/policies";
    pub const NMSTATE_OPENSHIFT_DIR: &str = "/etc/nmstate/openshift";
    pub const USER_CA_BUNDLE: &str =
        "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt";
    pub const CREDENTIAL_PROVIDERS_DIR: &str = "/etc/kubernetes/credential-providers";
    pub const KUBELET_CRIO_CRED_PROVIDER_DROPIN: &str =
        "/etc/systemd/system/kubelet.service.d/40-kubelet-crio-image-credential-provider.conf";
    pub const IRI_REGISTRY_DIR: &str = "/etc/iri-registry";
    pub const IRI_LOAD_IMAGE_SCRIPT: &str = "/usr/local/bin/load-registry-image.sh";
    pub const IRI_ROOT_CA: &str = "/etc/pki/ca-trust/source/anchors/iri-root-ca.crt";
    pub const IRI_REGISTRY_SERVICE: &str = "iri-registry.service";
    pub const UPDATE_CA_TRUST_SERVICE: &str = "coreos-update-ca-trust.service";
    pub const CRIO_SERVICE: &str = "crio.service";
    pub const KUBELET_SERVICE: &str = "kubelet.service";
}

/// Actions for a file path: an exact path, or a directory covering everything beneath it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePolicy {
    pub path: String,
    pub actions: Vec<PostConfigAction>,
}

/// Actions for a systemd unit, matched by exact name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitPolicy {
    pub name: String,
    pub actions: Vec<PostConfigAction>,
}

/// The merged node disruption policies in force (upstream's `clusterPolicies` status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisruptionPolicies {
    pub files: Vec<FilePolicy>,
    pub units: Vec<UnitPolicy>,
    pub ssh_key: Vec<PostConfigAction>,
}

impl Default for DisruptionPolicies {
    /// Upstream's built-in defaults (`defaultClusterPolicies`).
    fn default() -> Self {
        use PostConfigAction as A;
        use paths::*;
        let file = |path: &str, actions: Vec<PostConfigAction>| FilePolicy {
            path: path.to_owned(),
            actions,
        };
        Self {
            files: vec![
                file(KUBELET_AUTH_FILE, vec![A::None]),
                file(GPG_NO_REBOOT, vec![A::reload(CRIO_SERVICE)]),
                file(CONTAINER_POLICY, vec![A::reload(CRIO_SERVICE)]),
                file(REGISTRIES_CONF, vec![A::Special]),
                file(SIGSTORE_REGISTRIES_DIR, vec![A::reload(CRIO_SERVICE)]),
                file(CRIO_POLICIES_DIR, vec![A::reload(CRIO_SERVICE)]),
                file(NMSTATE_OPENSHIFT_DIR, vec![A::None]),
                file(
                    USER_CA_BUNDLE,
                    vec![
                        A::restart(UPDATE_CA_TRUST_SERVICE),
                        A::restart(CRIO_SERVICE),
                    ],
                ),
                file(CREDENTIAL_PROVIDERS_DIR, vec![A::restart(KUBELET_SERVICE)]),
                file(
                    KUBELET_CRIO_CRED_PROVIDER_DROPIN,
                    vec![A::DaemonReload, A::restart(KUBELET_SERVICE)],
                ),
                file(IRI_REGISTRY_DIR, vec![A::restart(IRI_REGISTRY_SERVICE)]),
                file(
                    IRI_LOAD_IMAGE_SCRIPT,
                    vec![A::restart(IRI_REGISTRY_SERVICE)],
                ),
                file(IRI_ROOT_CA, vec![A::restart(UPDATE_CA_TRUST_SERVICE)]),
            ],
            units: vec![UnitPolicy {
                name: IRI_REGISTRY_SERVICE.to_owned(),
                actions: vec![A::DaemonReload, A::restart(IRI_REGISTRY_SERVICE)],
            }],
            ssh_key: vec![A::None],
        }
    }
}

impl DisruptionPolicies {
    /// Merges administrator policies on top, as upstream's `MergeClusterPolicies`: an entry with a
    /// default's path or name replaces it in place, others are appended, and a non-empty SSH
    /// policy replaces the default one.
    pub fn with_user_policies(
        mut self,
        files: Vec<FilePolicy>,
        units: Vec<UnitPolicy>,
        ssh_key: Vec<PostConfigAction>,
    ) -> Self {
        for f in files {
            match self.files.iter_mut().find(|d| d.path == f.path) {
                Some(d) => *d = f,
                None => self.files.push(f),
            }
        }
        for u in units {
            match self.units.iter_mut().find(|d| d.name == u.name) {
                Some(d) => *d = u,
                None => self.units.push(u),
            }
        }
        if !ssh_key.is_empty() {
            self.ssh_key = ssh_key;
        }
        self
    }

    /// The policy with the longest path that equals `path` or is a directory above it.
    pub fn file_actions(&self, path: &str) -> Option<&[PostConfigAction]> {
        self.files
            .iter()
            .filter(|p| covers(&p.path, path))
            .max_by_key(|p| p.path.len())
            .map(|p| p.actions.as_slice())
    }

    pub fn unit_actions(&self, name: &str) -> Option<&[PostConfigAction]> {
        self.units
            .iter()
            .find(|u| u.name == name)
            .map(|u| u.actions.as_slice())
    }
}

/// Whether a policy path applies to a file: equal, or an ancestor directory (whole components
/// only, so `/etc/foo` does not cover `/etc/foobar`).
fn covers(policy: &str, path: &str) -> bool {
    if policy == path {
        return true;
    }
    let dir = policy.trim_end_matches('/');
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/') && rest.len() > 1)
}

/// Actions under upstream's default policies.
pub fn actions_for(diff: &ConfigDiff) -> Vec<PostConfigAction> {
    actions_with_policies(diff, &DisruptionPolicies::default())
}

/// The post-config actions for a diff, deduplicated in first-seen order: files (sorted by path),
/// then units (sorted by name), then the SSH policy. Never empty.
pub fn actions_with_policies(
    diff: &ConfigDiff,
    policies: &DisruptionPolicies,
) -> Vec<PostConfigAction> {
    use PostConfigAction as A;
    if diff.needs_os_update() {
        return vec![A::Reboot];
    }
    if diff.files.is_empty() && diff.units.is_empty() && !diff.passwd_changed {
        return vec![A::None];
    }

    let mut actions: Vec<PostConfigAction> = Vec::new();
    for path in diff.files.all() {
        match policies.file_actions(path) {
            Some(found) => actions.extend_from_slice(found),
            None => return vec![A::Reboot],
        }
    }
    for unit in diff.units.all() {
        match policies.unit_actions(unit) {
            Some(found) => actions.extend_from_slice(found),
            None => return vec![A::Reboot],
        }
    }
    if diff.passwd_changed {
        actions.extend_from_slice(&policies.ssh_key);
    }

    if actions.contains(&A::Reboot) {
        return vec![A::Reboot];
    }
    actions.retain(|a| *a != A::None);
    if actions.is_empty() {
        return vec![A::None];
    }
    let mut out: Vec<PostConfigAction> = Vec::with_capacity(actions.len());
    for a in actions {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

pub fn requires_reboot(actions: &[PostConfigAction]) -> bool {
    actions.contains(&PostConfigAction::Reboot)
}

/// Whether to drain before applying: always for Reboot or Drain; for Special only when the
/// registries.conf change could break running pods; never otherwise. Single-node clusters skip
/// draining altogether, which is the caller's decision. A registries.conf that cannot be decoded
/// or parsed is treated as unsafe, since draining is the cautious choice.
pub fn drain_required(actions: &[PostConfigAction], diff: &ConfigDiff) -> bool {
    use PostConfigAction as A;
    if actions.iter().any(|a| matches!(a, A::Reboot | A::Drain)) {
        return true;
    }
    if actions.contains(&A::Special) {
        return !match &diff.registries_conf {
            Some(change) => registries_change_is_safe(change).unwrap_or(false),
            None => true,
        };
    }
    false
}

/// Files whose change needs nothing on the first-boot path; `kubelet-ca.crt` is written by the
/// certificate writer and tolerated there.
const LEGACY_NONE_FILES: &[&str] = &["/etc/kubernetes/kubelet-ca.crt", paths::KUBELET_AUTH_FILE];
const LEGACY_RELOAD_CRIO_FILES: &[&str] = &[
    paths::REGISTRIES_CONF,
    paths::GPG_NO_REBOOT,
    paths::CONTAINER_POLICY,
];

fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// Upstream's older calculation, still used on first boot when the API (and so any administrator
/// policy) is unreachable: every unit change reboots, directories match only their direct
/// children, and the result is a single action: `None`, `Reload crio`, the crio restart after a
/// CA trust update, or `Reboot`.
pub fn legacy_actions_for(diff: &ConfigDiff) -> Vec<PostConfigAction> {
    use PostConfigAction as A;
    if diff.needs_os_update() || !diff.units.is_empty() {
        return vec![A::Reboot];
    }
    let mut reload = false;
    let mut restart = false;
    for path in diff.files.all() {
        let dir = parent_dir(path);
        if LEGACY_NONE_FILES.contains(&path) || dir == paths::NMSTATE_OPENSHIFT_DIR {
            continue;
        } else if LEGACY_RELOAD_CRIO_FILES.contains(&path) || dir == paths::SIGSTORE_REGISTRIES_DIR
        {
            reload = true;
        } else if path == paths::USER_CA_BUNDLE {
            restart = true;
        } else {
            return vec![A::Reboot];
        }
    }
    if restart {
        vec![
            A::restart(paths::UPDATE_CA_TRUST_SERVICE),
            A::restart(paths::CRIO_SERVICE),
        ]
    } else if reload {
        vec![A::reload(paths::CRIO_SERVICE)]
    } else {
        vec![A::None]
    }
}

/// The first-boot path's drain rule: reboot drains; a crio reload or restart drains only for an
/// unsafe registries.conf change; anything else does not.
pub fn legacy_drain_required(actions: &[PostConfigAction], diff: &ConfigDiff) -> bool {
    use PostConfigAction as A;
    if actions.iter().any(|a| matches!(a, A::Reboot | A::Drain)) {
        return true;
    }
    if actions
        .iter()
        .any(|a| matches!(a, A::Reload(_) | A::Restart(_) | A::Special))
    {
        return diff
            .registries_conf
            .as_ref()
            .is_some_and(|c| !registries_change_is_safe(c).unwrap_or(false));
    }
    false
}

/// Why registries.conf could not be compared.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum RegistriesError {
    #[error("failed decoding Data URL scheme string: {0}")]
    Decode(#[from] ignition::IgnitionError),
    #[error("failed decoding TOML content from file {path}: {message}")]
    Toml { path: String, message: String },
}

/// The parts of containers-registries.conf(5) v2 that decide drain safety; other keys are ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RegistriesConf {
    #[serde(default)]
    unqualified_search_registries: Vec<String>,
    #[serde(default)]
    registry: Vec<Registry>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Registry {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    location: String,
    #[serde(default)]
    insecure: bool,
    #[serde(default)]
    blocked: bool,
    #[serde(default)]
    mirror_by_digest_only: bool,
    #[serde(default)]
    mirror: Vec<Mirror>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Mirror {
    #[serde(default)]
    location: String,
    #[serde(default)]
    insecure: bool,
    #[serde(default)]
    pull_from_mirror: String,
}

const DIGEST_ONLY: &str = "digest-only";

impl Registry {
    fn scope(&self) -> &str {
        if self.prefix.is_empty() {
            &self.location
        } else {
            &self.prefix
        }
    }

    fn mirror(&self, location: &str) -> Option<&Mirror> {
        self.mirror.iter().find(|m| m.location == location)
    }

    /// Upstream's rule for a newly added registry: every mirror pulls by digest only, or, with no
    /// mirrors, the registry itself is digest-only.
    fn all_mirrors_digest_only(&self) -> bool {
        if self.mirror.is_empty() {
            return self.mirror_by_digest_only;
        }
        self.mirror
            .iter()
            .all(|m| m.pull_from_mirror == DIGEST_ONLY)
    }
}

fn registries_conf(
    file: Option<&ignition_config::v3_5::File>,
) -> Result<RegistriesConf, RegistriesError> {
    let source = file
        .and_then(|f| f.contents.as_ref())
        .and_then(|c| c.source.as_deref().map(|s| (s, c.compression.as_deref())));
    let text = match source {
        Some((source, compression)) => {
            String::from_utf8_lossy(&ignition::decode_data_url(source, compression)?).into_owned()
        }
        None => String::new(),
    };
    toml::from_str(&text).map_err(|e| RegistriesError::Toml {
        path: paths::REGISTRIES_CONF.to_owned(),
        message: e.to_string(),
    })
}

/// Upstream's `isSafeContainerRegistryConfChanges`: a change is safe when pods keep pulling the
/// same images from the same places, i.e. it only appends unqualified-search registries, or adds
/// mirrors and registries that pull by digest only.
pub fn registries_change_is_safe(change: &FileChange) -> Result<bool, RegistriesError> {
    let old = registries_conf(change.old.as_ref())?;
    let new = registries_conf(change.new.as_ref())?;
    Ok(registries_safe(&old, &new))
}

fn registries_safe(old: &RegistriesConf, new: &RegistriesConf) -> bool {
    // Search order matters, so the old list must be a prefix of the new one.
    if !new
        .unqualified_search_registries
        .starts_with(&old.unqualified_search_registries)
    {
        return false;
    }

    let by_scope = |c: &RegistriesConf| {
        c.registry
            .iter()
            .map(|r| (r.scope().to_owned(), r.clone()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let old_regs = by_scope(old);
    let new_regs = by_scope(new);

    if old_regs.keys().any(|scope| !new_regs.contains_key(scope)) {
        return false;
    }

    for (scope, new_reg) in &new_regs {
        let Some(old_reg) = old_regs.get(scope) else {
            if !new_reg.all_mirrors_digest_only() {
                return false;
            }
            continue;
        };
        if old_reg == new_reg {
            continue;
        }
        if old_reg.prefix != new_reg.prefix
            || old_reg.location != new_reg.location
            || old_reg.blocked != new_reg.blocked
            || old_reg.insecure != new_reg.insecure
        {
            return false;
        }
        if old_reg
            .mirror
            .iter()
            .any(|m| new_reg.mirror(&m.location).is_none())
        {
            return false;
        }
        for m in &new_reg.mirror {
            match old_reg.mirror(&m.location) {
                Some(old_m) => {
                    if m.pull_from_mirror != old_m.pull_from_mirror
                        && m.pull_from_mirror != DIGEST_ONLY
                    {
                        return false;
                    }
                }
                None => {
                    if m.pull_from_mirror != DIGEST_ONLY && !new_reg.mirror_by_digest_only {
                        return false;
                    }
                }
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_paths_cover_whole_components_only() {
        assert!(covers("/etc/foo", "/etc/foo"));
        assert!(covers("/etc/foo", "/etc/foo/bar"));
        assert!(covers("/etc/foo/", "/etc/foo/bar"));
        assert!(!covers("/etc/foo", "/etc/foobar"));
        assert!(!covers("/etc/foo/bar", "/etc/foo"));
    }
}
