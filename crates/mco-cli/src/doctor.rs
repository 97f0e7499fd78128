//! `mco doctor`: for every node or pool that is degraded, unreconcilable, stuck or blocked, the
//! cause in plain words and the exact command that fixes it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mco_api::constants::server_certs::{BUNDLE_KEY, MANAGED_LABEL};
use mco_api::constants::{annotations, cc_conditions, mcn_conditions, pool_conditions, states};
use mco_api::generators::GeneratorStatus;
use mco_api::{
    ContainerRuntimeConfig, ControllerConfig, KubeletConfig, MachineConfig, MachineConfigPool,
};
use mco_pki::{Certificate, Leniency};

use crate::drain::{BlockedDrain, blocked_drains};
use crate::local::{self, DriftKind, LocalFacts};
use crate::phase::{self, human_duration};
use crate::snapshot::{NodeFacts, Snapshot, mcn_condition, name_of};

/// A node still in the same in-progress phase after this long is reported as stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(15 * 60);
/// A CA in a pool's `certExpirys` that expires within this long is reported.
pub const CERT_WARN_WITHIN: Duration = Duration::from_secs(30 * 24 * 3600);

/// One way out: what it does and the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fix {
    pub how: String,
    pub command: String,
}

impl Fix {
    pub fn new(how: impl Into<String>, command: impl Into<String>) -> Fix {
        Fix {
            how: how.into(),
            command: command.into(),
        }
    }
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `node w9`, `pool worker`, `host /`.
    pub subject: String,
    pub title: String,
    pub cause: String,
    /// In order of preference.
    pub fixes: Vec<Fix>,
}

impl Finding {
    pub fn new(subject: &str, title: &str, cause: impl Into<String>, fixes: Vec<Fix>) -> Finding {
        Finding {
            subject: subject.to_string(),
            title: title.to_string(),
            cause: cause.into(),
            fixes,
        }
    }
}

/// What a degraded node's reason says happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// `expected target osImageURL "<x>", have ""`: the OS was never adopted (seed 000).
    NeverAdoptedOs {
        expected: String,
    },
    /// `expected target osImageURL "<x>", have "<y>"`.
    OsMismatch {
        expected: String,
        have: String,
    },
    /// `content mismatch for file "<p>"`.
    ContentDrift {
        path: String,
    },
    /// `mode mismatch for file: "<p>"`.
    ModeDrift {
        path: String,
    },
    /// `could not stat file "<p>"`.
    MissingFile {
        path: String,
    },
    /// `missing expected kernel arguments: [...]`.
    KernelArguments {
        missing: String,
    },
    /// `machineconfig ... "<name>" not found`.
    MissingConfig {
        name: String,
    },
    /// A change that cannot be applied to a running node.
    Unreconcilable {
        detail: String,
    },
    /// `failed to drain node ...`.
    DrainFailed,
    Other,
}

/// The first `"..."` after `marker` in `text`.
fn quoted_after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let start = rest.find('"')? + 1;
    let end = rest[start..].find('"')? + start;
    Some(&rest[start..end])
}

/// Reads a Degraded/Unreconcilable reason.
pub fn classify(reason: &str, unreconcilable: bool) -> Cause {
    const OS: &str = "expected target osImageURL ";
    if let Some(i) = reason.find(OS) {
        let tail = &reason[i + OS.len()..];
        let expected = quoted_after(tail, "").unwrap_or_default().to_string();
        let have = quoted_after(tail, ", have ")
            .unwrap_or_default()
            .to_string();
        return if have.is_empty() {
            Cause::NeverAdoptedOs { expected }
        } else {
            Cause::OsMismatch { expected, have }
        };
    }
    if let Some(p) = quoted_after(reason, "content mismatch for file ") {
        return Cause::ContentDrift { path: p.into() };
    }
    if let Some(p) = quoted_after(reason, "mode mismatch for file: ") {
        return Cause::ModeDrift { path: p.into() };
    }
    if let Some(p) = quoted_after(reason, "could not stat file ") {
        return Cause::MissingFile { path: p.into() };
    }
    if let Some(i) = reason.find("missing expected kernel arguments: ") {
        return Cause::KernelArguments {
            missing: reason[i + "missing expected kernel arguments: ".len()..].to_string(),
        };
    }
    if reason.contains("not found")
        && let Some(i) = reason.find("machineconfig")
    {
        let tail = &reason[i..];
        let name = quoted_after(tail, "")
            .map(str::to_string)
            .or_else(|| {
                tail.split_whitespace()
                    .find(|w| w.starts_with("rendered-"))
                    .map(|w| {
                        w.trim_matches(|c: char| !c.is_alphanumeric() && c != '-')
                            .into()
                    })
            })
            .unwrap_or_default();
        if !name.is_empty() {
            return Cause::MissingConfig { name };
        }
    }
    let unrec_words = [
        "not reconcilable",
        "can't reconcile",
        "are not compatible",
        "refusing to modify FIPS",
    ];
    if unreconcilable || unrec_words.iter().any(|w| reason.contains(w)) {
        return Cause::Unreconcilable {
            detail: reason.to_string(),
        };
    }
    if reason.contains("failed to drain node") {
        return Cause::DrainFailed;
    }
    Cause::Other
}

/// The MachineConfig field an unreconcilable reason points at, as a JSON path.
pub fn unreconcilable_field(detail: &str) -> Option<String> {
    let table: [(&str, &str); 10] = [
        ("disks section", "spec.config.storage.disks"),
        ("filesystems section", "spec.config.storage.filesystems"),
        ("raid section", "spec.config.storage.raid"),
        ("directories section", "spec.config.storage.directories"),
        ("links section", "spec.config.storage.links"),
        ("kargs section", "spec.config.kernelArguments"),
        ("Passwd Groups", "spec.config.passwd.groups"),
        ("passwd user section", "spec.config.passwd.users"),
        ("SSH keys and password hash", "spec.config.passwd.users"),
        ("FIPS", "spec.fips"),
    ];
    if let Some((_, f)) = table.iter().find(|(k, _)| detail.contains(k)) {
        return Some(f.to_string());
    }
    if let Some(i) = detail.find("ignition file ")
        && detail.contains("includes append")
    {
        let path = detail[i + "ignition file ".len()..]
            .split_whitespace()
            .next()
            .unwrap_or_default();
        return Some(format!("spec.config.storage.files[path={path}].append"));
    }
    if let Some(i) = detail.find("cannot create ") {
        let path = detail[i + "cannot create ".len()..]
            .split_whitespace()
            .next()
            .unwrap_or_default();
        return Some(format!("spec.config.storage.files[path={path}]"));
    }
    None
}

/// Whether `mc` sets the field named by [`unreconcilable_field`].
fn mc_sets(mc: &MachineConfig, field: &str) -> bool {
    if field == "spec.fips" {
        return mc.spec.fips;
    }
    let Some(cfg) = mc.spec.config.as_ref() else {
        return false;
    };
    if let Some(rest) = field.strip_prefix("spec.config.storage.files[path=") {
        let path = rest.split(']').next().unwrap_or_default();
        return cfg
            .pointer("/storage/files")
            .and_then(|f| f.as_array())
            .is_some_and(|files| {
                files
                    .iter()
                    .any(|f| f.get("path").and_then(|p| p.as_str()) == Some(path))
            });
    }
    let Some(rest) = field.strip_prefix("spec.config.") else {
        return false;
    };
    let pointer = format!("/{}", rest.replace('.', "/"));
    cfg.pointer(&pointer).is_some_and(|v| match v {
        serde_json::Value::Array(a) => !a.is_empty(),
        serde_json::Value::Null => false,
        _ => true,
    })
}

fn pool_target(pool: &MachineConfigPool) -> &str {
    pool.spec
        .configuration
        .as_ref()
        .map(|c| c.name.as_str())
        .unwrap_or_default()
}

/// The user MachineConfigs of a pool's target that set `field`; when none can be told apart,
/// the ones added since the pool's current config.
fn culprit_configs(
    snap: &Snapshot,
    pool: Option<&MachineConfigPool>,
    field: Option<&str>,
) -> Vec<String> {
    let Some(pool) = pool else {
        return Vec::new();
    };
    let sources: Vec<String> = pool
        .spec
        .configuration
        .iter()
        .flat_map(|c| c.source.iter())
        .filter_map(|r| r.name.clone())
        .collect();
    if let Some(field) = field {
        let hits: Vec<String> = sources
            .iter()
            .filter(|n| snap.machine_config(n).is_some_and(|mc| mc_sets(mc, field)))
            .cloned()
            .collect();
        if !hits.is_empty() {
            return hits;
        }
    }
    let before: Vec<String> = pool
        .status
        .as_ref()
        .and_then(|s| s.configuration.as_ref())
        .map(|c| c.source.iter().filter_map(|r| r.name.clone()).collect())
        .unwrap_or_default();
    sources
        .into_iter()
        .filter(|s| !before.contains(s))
        .collect()
}

/// Names of the nodes worth reading from disk: those in trouble.
pub fn nodes_in_trouble(snap: &Snapshot) -> Vec<String> {
    snap.nodes
        .iter()
        .filter(|n| {
            let f = NodeFacts::of(n);
            f.state == states::DEGRADED || f.state == states::UNRECONCILABLE
        })
        .map(|n| name_of(n.as_ref()).to_string())
        .collect()
}

/// How to run something on a node, and the force command for it.
struct NodeAccess {
    force: String,
    simulated: bool,
}

fn access(node: &str, roots: &BTreeMap<String, LocalFacts>) -> NodeAccess {
    match roots.get(node) {
        Some(f) => NodeAccess {
            force: local::force_command(&f.root, f.simulated),
            simulated: f.simulated,
        },
        None => NodeAccess {
            force: format!("touch {}", mco_api::paths::FORCE_FILE),
            simulated: false,
        },
    }
}

fn on_node(node: &str, a: &NodeAccess) -> String {
    if a.simulated {
        format!("for simulated node {node}, on this machine")
    } else {
        format!("on node {node} (e.g. `oc debug node/{node} -- chroot /host ...` or ssh)")
    }
}

/// Diagnoses every node and pool (or only `only`, a node name). `roots` holds what was read
/// from the disks of nodes reachable from here (simulated nodes, or `--root`).
pub fn diagnose(
    snap: &Snapshot,
    roots: &BTreeMap<String, LocalFacts>,
    only: Option<&str>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let membership = snap.membership();
    let blocked = blocked_drains(snap);

    if let Some(n) = only
        && snap.node(n).is_none()
    {
        out.push(Finding::new(
            &format!("node {n}"),
            "no such node",
            format!("The cluster has no Node named {n}."),
            vec![Fix::new("list the nodes", "kubectl get nodes")],
        ));
        return out;
    }

    if only.is_none() {
        for pool in &snap.pools {
            pool_findings(snap, pool, &mut out);
        }
        out.extend(expiring_certificates(snap));
    }

    for node in &snap.nodes {
        let name = name_of(node.as_ref());
        if only.is_some_and(|o| o != name) {
            continue;
        }
        let facts = NodeFacts::of(node);
        let a = access(name, roots);
        let pool_name = membership.primary.get(name).cloned();
        let pool = pool_name.as_deref().and_then(|p| snap.pool(p));
        let before = out.len();

        if let Some(pools) = membership.conflicts.get(name) {
            out.push(two_pools(snap, name, pools));
        }

        if only.is_some()
            && let Some(p) = pool
            && p.spec.paused
            && pool_pending(p)
        {
            pool_findings(snap, p, &mut out);
        }

        let mcn_degraded = snap
            .mcn(name)
            .and_then(|m| mcn_condition(m, mcn_conditions::NODE_DEGRADED))
            .filter(|c| c.status == "True")
            .map(|c| c.message.clone());
        let unrec = facts.state == states::UNRECONCILABLE;
        let degraded = facts.state == states::DEGRADED || unrec;
        let reason = if !facts.reason.is_empty() {
            Some(facts.reason.clone())
        } else if degraded {
            mcn_degraded.clone().or(Some(String::new()))
        } else {
            mcn_degraded.clone()
        };
        if let Some(reason) = reason.filter(|_| degraded || mcn_degraded.is_some()) {
            out.push(degraded_finding(
                snap, name, &facts, &reason, unrec, pool, &a, roots,
            ));
        } else {
            // Not degraded, but pointing at a config that no longer exists.
            for cfg in [&facts.current, &facts.desired] {
                if !cfg.is_empty()
                    && !snap.machine_configs.is_empty()
                    && snap.machine_config(cfg).is_none()
                {
                    out.push(missing_config(name, cfg, pool, &a));
                    break;
                }
            }
        }

        for b in blocked.iter().filter(|b| b.node == name) {
            out.push(blocked_finding(snap, b));
        }

        if out.len() == before
            && let Some(f) = stuck(snap, name, &facts)
        {
            out.push(f);
        }
    }
    out
}

/// The inputs the controller refused, so that nothing of them reaches a node: a ControllerConfig
/// its template controller fails on, and each KubeletConfig or ContainerRuntimeConfig whose
/// status for its current spec is `Failure`. Their messages name the field.
pub fn refused_inputs(
    controller_config: Option<&ControllerConfig>,
    kubelet_configs: &[KubeletConfig],
    runtime_configs: &[ContainerRuntimeConfig],
) -> Vec<Finding> {
    let mut out = vec![];
    if let Some(cc) = controller_config
        && let Some(failing) = cc
            .status
            .as_ref()
            .and_then(|s| s.condition(cc_conditions::FAILING))
            .filter(|c| c.status == "True")
    {
        let name = cc.metadata.name.as_deref().unwrap_or_default();
        out.push(Finding::new(
            &format!("controllerconfig {name}"),
            "ControllerConfig refused",
            format!(
                "{}. The base configs generated before stay in force; nothing of this spec \
                 reaches a node until it is fixed.",
                failing.message.trim_end_matches('.')
            ),
            vec![Fix::new(
                "correct the field the message names",
                format!("kubectl edit controllerconfig {name}"),
            )],
        ));
    }
    let kubelet = kubelet_configs.iter().map(|k| {
        let status = k.status.as_ref();
        generator_refused("KubeletConfig", "kubeletconfig", &k.metadata, status)
    });
    let runtime = runtime_configs.iter().map(|c| {
        let status = c.status.as_ref();
        generator_refused(
            "ContainerRuntimeConfig",
            "containerruntimeconfig",
            &c.metadata,
            status,
        )
    });
    out.extend(kubelet.chain(runtime).flatten());
    out
}

/// The registry input the controller refuses, checked here as its registries generator checks
/// them (the pool's base files aside): a refused input changes no node, and its only other trace
/// is a Warning event that expires.
pub fn refused_registries(inputs: &mco_generate::registries::Inputs<'_>) -> Option<Finding> {
    if inputs.is_empty() {
        return None;
    }
    // The base files only matter to the writing; the checks are the generator's own.
    let refused = mco_generate::registries::pool_files(inputs, &[]).err()?;
    Some(registry_refused(&refused))
}

/// What the controller makes of the registry inputs that it refuses or writes only in part: a
/// `v1alpha1` image policy `v1` refuses, an input the generator refuses, or else a blocked
/// registry dropped because the release payload is pulled from it.
pub fn registries(inputs: &crate::client::RegistryInputs) -> Vec<Finding> {
    if let Some(refused) = &inputs.unconverted {
        return vec![registry_refused(refused)];
    }
    let borrowed = inputs.as_inputs();
    refused_registries(&borrowed)
        .or_else(|| payload_not_blocked(&borrowed))
        .into_iter()
        .collect()
}

/// A `blockedRegistries` scope covering the release payload's repository, which the controller
/// leaves out of every pool's registries config (the rest is written) and reports only in a
/// Warning event that expires: the nodes keep pulling from a registry the administrator blocked.
pub fn payload_not_blocked(inputs: &mco_generate::registries::Inputs<'_>) -> Option<Finding> {
    // As the controller: only for a config it writes.
    if inputs.is_empty() || mco_generate::registries::pool_files(inputs, &[]).is_err() {
        return None;
    }
    let warning = mco_generate::registries::blocked(inputs).ok()?.warning()?;
    let target = "images.config.openshift.io cluster";
    let mut fixes = vec![Fix::new(
        "remove it from spec.registrySources.blockedRegistries",
        format!("kubectl edit {target}"),
    )];
    // `blocked` took the release image, so it parses; were it not, there is no source to name.
    let payload = inputs.release_image.map(mco_api::image_ref::parse);
    if let Some(Ok(payload)) = payload {
        fixes.push(Fix::new(
            "or mirror the payload with an ImageDigestMirrorSet: the scope is then blocked, and the payload pulled from the mirror",
            format!(
                "kubectl apply -f <ImageDigestMirrorSet with source {} and a mirror not itself blocked>",
                payload.repository
            ),
        ));
    }
    Some(Finding::new(
        target,
        "Blocked registry not blocked",
        format!(
            "{warning}. The nodes still pull from it; the other blocked registries are blocked."
        ),
        fixes,
    ))
}

fn registry_refused(refused: &mco_generate::registries::Refused) -> Finding {
    let resource = refused.kind.to_ascii_lowercase();
    // An ImagePolicy is named `<namespace>/<name>`.
    let target = match refused.name.split_once('/') {
        Some((ns, name)) => format!("{resource} {name} -n {ns}"),
        None => format!("{resource} {}", refused.name),
    };
    Finding::new(
        &target,
        &format!("{} refused", refused.kind),
        format!(
            "{}. No pool's registries config changes until it is fixed; the last one written stays in force.",
            refused.message.trim_end_matches('.')
        ),
        vec![Fix::new(
            "correct the field the message names, or delete the object",
            format!("kubectl edit {target}"),
        )],
    )
}

/// The cluster settings the controller refuses for the `97-` and `98-` kubelet configs, checked
/// as it checks them (the workers' `97-` config among `mcs` judges a latency profile's step): a
/// refused setting changes no node, and its only other trace is an event that expires.
pub fn refused_cluster_settings(
    settings: &crate::client::ClusterSettings,
    mcs: &[mco_api::MachineConfig],
) -> Vec<Finding> {
    use mco_generate::nodeconfig;
    let all = nodeconfig::Settings {
        node: settings.node.as_ref().map(|n| &n.spec),
        feature_gate: settings.feature_gate.as_ref(),
        cluster_version: settings.cluster_version.as_ref(),
    };
    // The controller stops at the first refusal; the Node settings are judged again without the
    // FeatureGate, so that both are named at once.
    let without_gates = nodeconfig::Settings {
        feature_gate: None,
        ..all
    };
    let first = nodeconfig::judge(all, mcs).err();
    let second = first
        .as_ref()
        .filter(|r| r.is_feature_gate())
        .and_then(|_| nodeconfig::judge(without_gates, mcs).err());
    first
        .into_iter()
        .chain(second)
        .map(settings_finding)
        .collect()
}

/// A cluster on cgroup v1: accepted up to OpenShift 4.18 and written to the nodes, but 4.19
/// refuses the value, and upstream's operator blocks the upgrade on it (`Upgradeable=False`). Said
/// here since mco has no ClusterOperator to set it on.
pub fn deprecated_cluster_settings(settings: &crate::client::ClusterSettings) -> Vec<Finding> {
    let on_v1 = settings
        .node
        .as_ref()
        .is_some_and(|n| n.spec.cgroup_mode == "v1");
    if !on_v1 {
        return vec![];
    }
    vec![Finding::new(
        "nodes.config.openshift.io cluster",
        "cgroup v1",
        "The nodes boot with cgroup v1 (spec.cgroupMode: v1). OpenShift 4.19 and newer refuse \
         it: move to v2 before upgrading. The change rolls out to every master, worker and \
         arbiter with a drain and a reboot.",
        vec![Fix::new(
            "move to cgroup v2",
            r#"kubectl patch nodes.config.openshift.io cluster --type merge -p '{"spec":{"cgroupMode":"v2"}}'"#,
        )],
    )]
}

fn settings_finding(refusal: mco_generate::nodeconfig::Refusal) -> Finding {
    let e = refusal.error().to_string();
    let e = e.trim_end_matches('.');
    if refusal.is_feature_gate() {
        Finding::new(
            "featuregate cluster",
            "FeatureGate refused",
            format!(
                "{e}. The kubelets keep the feature gates they have; the 97- and 98- kubelet configs stay as they are until it is fixed."
            ),
            vec![Fix::new(
                "see which releases the status lists, and the release the cluster moves to",
                "kubectl get featuregate cluster -o yaml; kubectl get clusterversion version -o jsonpath='{.status.desired.version}'",
            )],
        )
    } else {
        Finding::new(
            "nodes.config.openshift.io cluster",
            "Node settings refused",
            format!("{e}. No pool's kubelet config changes until it is fixed."),
            vec![Fix::new(
                "set a supported value (a latency profile moves through MediumUpdateAverageReaction)",
                "kubectl edit nodes.config.openshift.io cluster",
            )],
        )
    }
}

/// Upstream's on-cluster image mode, as mco's node controller follows it: a `v1`
/// MachineOSConfig whose pool waits for the image of its rendered config (no node of the pool
/// moves until a builder records it), one for a pool that does not exist, and a Technology
/// Preview `v1alpha1` one, whose builds mco does not apply. A pool whose image is ready, or
/// that is not in image mode, is not named.
pub fn image_mode(
    objects: &crate::client::ImageModeObjects,
    pools: &[std::sync::Arc<MachineConfigPool>],
) -> Vec<Finding> {
    use mco_api::image_mode::{PoolBuild, pool_build};
    let mut found = vec![];
    for mosc in &objects.configs {
        let name = mosc.metadata.name.as_deref().unwrap_or_default();
        let pool_name = mosc.spec.machine_config_pool.name.as_str();
        let subject = format!("machineosconfig {name}");
        let Some(pool) = pools.iter().find(|p| name_of(p.as_ref()) == pool_name) else {
            let which = if pool_name.is_empty() {
                "names no pool".to_string()
            } else {
                format!("is for pool {pool_name}, which does not exist")
            };
            found.push(Finding::new(
                &subject,
                "image mode for no pool",
                format!(
                    "MachineOSConfig {name} {which} (spec.machineConfigPool.name): no node runs \
                     an image built for it."
                ),
                vec![
                    Fix::new("see the pools", "kubectl get mcp"),
                    Fix::new(
                        "delete it, or create the pool it names",
                        format!("kubectl delete machineosconfig {name}"),
                    ),
                ],
            ));
            continue;
        };
        let rendered = pool_target(pool);
        if rendered.is_empty() {
            // No rendered config yet: nothing to build an image from.
            continue;
        }
        let PoolBuild::Waiting(why) =
            pool_build(pool_name, rendered, &objects.configs, &objects.builds)
        else {
            continue;
        };
        found.push(Finding::new(
            &subject,
            "image build awaited",
            format!(
                "Pool {pool_name} is in on-cluster image mode and its rollout waits for the image \
                 of MachineConfig {rendered} ({why}): none of its nodes is moved until it is ready. \
                 mco rolls out the images a builder (upstream's build controller, a pipeline) \
                 records in a MachineOSBuild and in the MachineOSConfig's \
                 status.currentImagePullSpec, and builds none itself."
            ),
            vec![
                Fix::new(
                    "see the builds (their Prepared, Building, Succeeded and Failed columns)",
                    "kubectl get machineosbuilds",
                ),
                Fix::new(
                    format!(
                        "leave image mode: the nodes of pool {pool_name} go back to the rendered \
                         config's OS image, each with a drain and a reboot"
                    ),
                    format!("kubectl delete machineosconfig {name}"),
                ),
            ],
        ));
    }
    for (name, pool) in &objects.tech_preview {
        let pool = if pool.is_empty() { "<none>" } else { pool };
        found.push(Finding::new(
            &format!("machineosconfig {name}"),
            "Technology Preview image mode",
            format!(
                "MachineOSConfig {name} (pool {pool}) is the Technology Preview's \
                 machineconfiguration.openshift.io/v1alpha1 (OpenShift 4.16 to 4.18). mco applies \
                 only v1 image-mode builds (OpenShift 4.19 and newer): the nodes of pool {pool} are \
                 rolled out as any pool's, to the rendered config's OS image, and a node booted on \
                 an image built for it goes back to that OS image with a drain and a reboot."
            ),
            vec![
                Fix::new(
                    "upgrade to OpenShift 4.19 or newer, where image mode is v1 and mco rolls out \
                     the images its MachineOSBuilds record (see the available updates)",
                    "oc adm upgrade",
                ),
                Fix::new(
                    "or leave image mode: delete it",
                    format!("kubectl delete machineosconfig {name}"),
                ),
            ],
        ));
    }
    found
}

/// What `mco doctor` reads of an upstream PinnedImageSet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinnedImageSet {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub images: Vec<String>,
}

/// The pools a PinnedImageSet is for, by upstream's rule (which mco's controller follows):
/// those whose `machineConfigSelector` matches its labels.
fn pools_of_set<'a>(
    set: &PinnedImageSet,
    pools: &'a [std::sync::Arc<MachineConfigPool>],
) -> Vec<&'a str> {
    pools
        .iter()
        .filter(|p| {
            mco_api::select::pool_rule_matches(
                p.spec.machine_config_selector.as_ref(),
                Some(&set.labels),
            )
        })
        .map(|p| name_of(p.as_ref()))
        .collect()
}

/// Nodes named in a finding at most; the rest are counted.
const NODES_NAMED: usize = 5;

/// The PinnedImageSets that do not reach their nodes: a set no pool selects (no node pulls
/// it), and a set some nodes failed to pull or pin, named with the nodes and the first error
/// their MachineConfigNodes report.
pub fn pinned_image_sets(
    sets: &[PinnedImageSet],
    pools: &[std::sync::Arc<MachineConfigPool>],
    mcns: &[std::sync::Arc<mco_api::MachineConfigNode>],
) -> Vec<Finding> {
    let mut found = vec![];
    for set in sets {
        let name = &set.name;
        let count = match set.images.len() {
            1 => "1 image".to_string(),
            n => format!("{n} images"),
        };
        if pools_of_set(set, pools).is_empty() {
            let labels = if set.labels.is_empty() {
                "no labels".to_string()
            } else {
                set.labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            found.push(Finding::new(
                &format!("pinnedimageset {name}"),
                "pinned image set for no pool",
                format!(
                    "PinnedImageSet {name} ({count}) is for no pool: no pool's \
                     machineConfigSelector matches its labels ({labels}), so no node pulls or \
                     pins its images."
                ),
                vec![Fix::new(
                    "label it for the pool whose nodes need the images",
                    format!(
                        "kubectl label pinnedimageset {name} machineconfiguration.openshift.io/role=worker"
                    ),
                )],
            ));
            continue;
        }
        let failing: Vec<(&str, &str)> = mcns
            .iter()
            .filter_map(|m| {
                let entry = m
                    .status
                    .as_ref()?
                    .pinned_image_sets
                    .as_ref()?
                    .iter()
                    .find(|e| &e.name == name)?;
                entry.failed().then(|| {
                    (
                        m.metadata.name.as_deref().unwrap_or_default(),
                        entry.last_failed_generation_error.as_str(),
                    )
                })
            })
            .collect();
        let Some((_, error)) = failing.first() else {
            continue;
        };
        let mut nodes: Vec<&str> = failing.iter().take(NODES_NAMED).map(|(n, _)| *n).collect();
        let more = failing.len().saturating_sub(NODES_NAMED);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        nodes.sort_unstable();
        found.push(Finding::new(
            &format!("pinnedimageset {name}"),
            "pinned images not pulled",
            format!(
                "PinnedImageSet {name} ({count}) is not pinned on {} node{} ({}{more}): {error}. \
                 The daemon tries again with backoff; the node's MachineConfigNode reports \
                 PinnedImageSetsDegraded=True until it succeeds.",
                failing.len(),
                if failing.len() == 1 { "" } else { "s" },
                nodes.join(", "),
            ),
            vec![
                Fix::new(
                    "see each node's error",
                    "kubectl get machineconfignodes -o custom-columns=NODE:.metadata.name,\
                     SETS:.status.pinnedImageSets[*].name,\
                     ERROR:.status.pinnedImageSets[*].lastFailedGenerationError"
                        .to_string(),
                ),
                Fix::new(
                    "make the registry reachable from the nodes and the pull secret cover it, \
                     or correct the image references; a changed set is tried at once",
                    format!("kubectl edit pinnedimageset {name}"),
                ),
            ],
        ));
    }
    found
}

/// A KubeletConfig's or ContainerRuntimeConfig's refusal: its status for its current spec is
/// `Failure`.
fn generator_refused(
    kind: &str,
    resource: &str,
    meta: &ObjectMeta,
    status: Option<&GeneratorStatus>,
) -> Option<Finding> {
    let status = status.filter(|s| s.observed_generation == meta.generation)?;
    let failure = status.conditions.last().filter(|c| c.type_ == "Failure")?;
    let name = meta.name.as_deref().unwrap_or_default();
    Some(Finding::new(
        &format!("{resource} {name}"),
        &format!("{kind} refused"),
        format!(
            "{}. Nothing was generated from it; the MachineConfigs it generated before stay in force.",
            failure.message.trim_end_matches('.')
        ),
        vec![
            Fix::new(
                "correct the field the message names",
                format!("kubectl edit {resource} {name}"),
            ),
            Fix::new(
                "or delete it, which also rolls back what it generated before",
                format!("kubectl delete {resource} {name}"),
            ),
        ],
    ))
}

/// The CAs of the pools' `certExpirys` that expire within [`CERT_WARN_WITHIN`] (or already
/// have), once each, naming the pools that list them.
pub fn expiring_certificates(snap: &Snapshot) -> Vec<Finding> {
    // (bundle, subject, expiry) -> pools
    let mut soon: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for pool in &snap.pools {
        for c in pool.status.iter().flat_map(|s| &s.cert_expirys) {
            let Some(expiry) = c.expiry.as_deref() else {
                continue;
            };
            let Ok(at) = expiry.parse::<jiff::Timestamp>() else {
                continue;
            };
            if at.as_second() - snap.now.as_second() > CERT_WARN_WITHIN.as_secs() as i64 {
                continue;
            }
            soon.entry((c.bundle.clone(), c.subject.clone(), expiry.to_owned()))
                .or_default()
                .push(name_of(pool.as_ref()).to_owned());
        }
    }
    soon.into_iter()
        .map(|((bundle, subject, expiry), pools)| {
            let left = expiry
                .parse::<jiff::Timestamp>()
                .map(|at| at.as_second() - snap.now.as_second())
                .unwrap_or_default();
            let (title, when) = if left <= 0 {
                (
                    "CA certificate expired",
                    format!(
                        "expired at {expiry}, {} ago",
                        human_duration(Duration::from_secs(left.unsigned_abs()))
                    ),
                )
            } else {
                (
                    "CA certificate expires soon",
                    format!(
                        "expires at {expiry}, in {}",
                        human_duration(Duration::from_secs(left as u64))
                    ),
                )
            };
            let plural = if pools.len() == 1 { "" } else { "s" };
            Finding::new(
                &format!("pool{plural} {}", pools.join(", ")),
                title,
                format!(
                    "The CA {subject} in bundle {bundle} {when}. Nodes that trust only it \
                     stop trusting the API server once it expires. A new CA in the \
                     ControllerConfig reaches every node at once, paused pools included, \
                     with no drain and no reboot."
                ),
                vec![Fix::new(
                    "see every certificate of the ControllerConfig's bundles, then rotate the CA \
                     (kubeAPIServerServingCAData is rotated by whoever runs the API server)",
                    "kubectl get controllerconfig machine-config-controller \
                     -o jsonpath='{range .status.controllerCertificates[*]}{.bundleFile}{\"\\t\"}{.subject}{\"\\t\"}{.notAfter}{\"\\n\"}{end}'",
                )],
            )
        })
        .collect()
}

/// The machine config server's certificate objects, as `mco doctor` reads them: each `None`
/// where it is absent or the caller may not read it.
#[derive(Debug, Clone, Default)]
pub struct ServerCertObjects {
    /// Where they are: the controller's `--server-certs-namespace`, else the install namespace.
    pub namespace: String,
    /// The install namespace, where the controller Deployment is, when it is not `namespace`
    /// (on OpenShift the certificates are upstream's, in `openshift-machine-config-operator`).
    pub controller_namespace: Option<String>,
    /// Secret `machine-config-server-ca`: the CA that signs the serving certificate.
    pub ca: Option<Secret>,
    /// ConfigMap `machine-config-server-ca`: the CAs new machines trust.
    pub bundle: Option<ConfigMap>,
    /// The serving certificate's Secret (`serving_name`).
    pub serving: Option<Secret>,
    /// The serving Secret's name: doctor's `--server-tls-secret`, else the controller
    /// Deployment's, else `mco-server-tls` (upstream's is `machine-config-server-tls`).
    pub serving_name: String,
    /// Whether the serving Secret was read and is not there (`false` where it may not be read).
    pub serving_missing: bool,
    /// The machine config server's DaemonSet in the namespace, where it is there and readable.
    pub server_daemonset: Option<String>,
}

/// The certificates of a PEM text, in order: those that parse, as Go's `AppendCertsFromPEM`
/// takes a bundle; the first problem met is the error only where none parses.
fn pem_certs(pem: &[u8]) -> Result<Vec<Certificate>, String> {
    let read = mco_pki::read(pem, "", Leniency::Go, usize::MAX);
    match read.error {
        Some(e) if read.certificates.is_empty() => Err(match e {
            mco_pki::Error::NotPem { block, reason, .. } => format!("PEM block {block}: {reason}"),
            mco_pki::Error::Malformed { block, reason, .. } => {
                format!("certificate {block}: {reason}")
            }
            // Not met here: there is no limit, and other blocks are skipped.
            e @ (mco_pki::Error::TooMany { .. } | mco_pki::Error::NotCertificate { .. }) => {
                e.to_string()
            }
        }),
        _ => Ok(read.certificates),
    }
}

/// The certificates of a Secret's `data.tls.crt`, at least one.
fn secret_certs(secret: &Secret) -> Result<Vec<Certificate>, String> {
    let pem = secret
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .map(|b| b.0.as_slice())
        .unwrap_or_default();
    let certs = pem_certs(pem)?;
    if certs.is_empty() {
        return Err("data.tls.crt holds no certificate".into());
    }
    Ok(certs)
}

/// Whether `parent` signed `child`: its subject is the child's issuer and its key verifies the
/// child's signature (or the algorithm is one ring cannot check, when the names alone decide).
/// Unlike [`mco_pki::issued_by`], `parent` need not be marked a CA: Go's TLS client does not ask
/// that of a root it trusts.
fn signed_by(child: &Certificate, parent: &Certificate) -> bool {
    child.issuer.raw == parent.subject.raw
        && mco_pki::signature(child, parent) != mco_pki::Signature::Invalid
}

/// Whether the serving chain (`chain[0]` the serving certificate, then what the server sends
/// with it) leads to a CA of `bundle`.
fn chains_to(chain: &[Certificate], bundle: &[Certificate]) -> bool {
    let mut current = &chain[0];
    for _ in 0..chain.len() {
        if bundle.iter().any(|ca| signed_by(current, ca)) {
            return true;
        }
        match chain[1..]
            .iter()
            .find(|c| !std::ptr::eq(*c, current) && signed_by(current, c))
        {
            Some(next) => current = next,
            None => return false,
        }
    }
    false
}

/// The host machines reach the server at, upstream's rule (lower-cased, as names are compared),
/// with the URI it is read from.
fn server_host(cc: &ControllerConfig) -> Option<(String, String)> {
    let (host, uri) = mco_api::controllerconfig::api_server_internal_host(&cc.spec.other).ok()?;
    Some((host.to_ascii_lowercase(), uri))
}

/// Whether a certificate names `host`: an IP among its IP SANs, a name among its DNS SANs (a
/// `*.` wildcard standing for one label), as TLS clients match it (the subject's CN is not
/// read).
fn names_host(cert: &Certificate, host: &str) -> bool {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return cert.ip_addresses.contains(&ip);
    }
    let host = host.trim_end_matches('.');
    cert.dns_names.iter().any(|d| {
        let d = d.trim_end_matches('.').to_ascii_lowercase();
        match d.strip_prefix("*.") {
            Some(suffix) => host
                .split_once('.')
                .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
            None => d == host,
        }
    })
}

fn sans(cert: &Certificate) -> String {
    let all: Vec<String> = cert
        .dns_names
        .iter()
        .cloned()
        .chain(cert.ip_addresses.iter().map(|i| i.to_string()))
        .collect();
    if all.is_empty() {
        "no host (it has no subject alternative names)".into()
    } else {
        all.join(", ")
    }
}

/// Go's words for a certificate that does not name `host`, as a new machine's Ignition logs them.
fn go_name_mismatch(cert: &Certificate, host: &str) -> String {
    let names: Vec<String> = if host.parse::<std::net::IpAddr>().is_ok() {
        cert.ip_addresses.iter().map(|i| i.to_string()).collect()
    } else {
        cert.dns_names.clone()
    };
    if names.is_empty() {
        format!("x509: certificate is not valid for any names, but wanted to match {host}")
    } else {
        format!(
            "x509: certificate is valid for {}, not {host}",
            names.join(", ")
        )
    }
}

fn days_or_less(d: Duration) -> String {
    match d.as_secs() / 86_400 {
        0 | 1 => human_duration(d),
        days => format!("{days} days"),
    }
}

impl ServerCertObjects {
    fn controller_ns(&self) -> &str {
        self.controller_namespace
            .as_deref()
            .unwrap_or(&self.namespace)
    }
}

/// One of the two Secrets, for the words of its findings.
struct CertSecret<'a> {
    ns: &'a str,
    /// Where the controller Deployment is.
    controller_ns: &'a str,
    name: &'a str,
    /// The label's value, where mco keeps it.
    managed: Option<&'a str>,
}

impl<'a> CertSecret<'a> {
    fn of(
        objects: &'a ServerCertObjects,
        secret: &'a Secret,
        default_name: &'a str,
    ) -> CertSecret<'a> {
        CertSecret {
            ns: &objects.namespace,
            controller_ns: objects.controller_ns(),
            name: secret.metadata.name.as_deref().unwrap_or(default_name),
            managed: secret
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(MANAGED_LABEL))
                .map(String::as_str),
        }
    }

    fn subject(&self) -> String {
        format!("secret {} -n {}", self.name, self.ns)
    }

    fn show(&self) -> Fix {
        Fix::new(
            "see the certificate: subject, issuer, hosts and expiry",
            format!(
                "kubectl -n {} get secret {} -o jsonpath='{{.data.tls\\.crt}}' | base64 -d \
                 | openssl x509 -noout -subject -issuer -ext subjectAltName -enddate",
                self.ns, self.name
            ),
        )
    }

    /// Who keeps the Secret: mco (which `what_mco_does`, and, where it is `overdue`, has not:
    /// the controller may not be running with --server-certs-namespace, `or_else`), or the
    /// administrator.
    fn ownership(&self, what_mco_does: &str, overdue: bool, or_else: &str) -> String {
        let (ns, label) = (self.ns, MANAGED_LABEL);
        match self.managed {
            Some(value) if overdue => format!(
                " mco keeps this Secret (label {label}={value}) and the controller \
                 {what_mco_does}; it has not: the controller may not be running with \
                 --server-certs-namespace={ns}{or_else}."
            ),
            Some(value) => {
                format!(
                    " mco keeps this Secret (label {label}={value}) and the controller \
                     {what_mco_does}."
                )
            }
            None => format!(
                " The Secret has no {label} label: it is the administrator's own, which mco never \
                 rewrites; replace it."
            ),
        }
    }

    /// The controller's side: is it keeping the certificates, and what did it say.
    fn controller_fixes(&self) -> Vec<Fix> {
        let (ns, cns) = (self.ns, self.controller_ns);
        vec![
            Fix::new(
                format!(
                    "check that the controller keeps the server's certificates: its arguments \
                     name --server-certs-namespace={ns}"
                ),
                format!(
                    "kubectl -n {cns} get deployment mco-controller \
                     -o jsonpath='{{.spec.template.spec.containers[*].args}}'"
                ),
            ),
            Fix::new(
                "see why it did not: its warnings, and the Events of its renewals",
                format!(
                    "kubectl -n {cns} logs deployment/mco-controller | grep 'machine config server certificates'; \
                     kubectl -n {ns} get events --field-selector involvedObject.name={}",
                    self.name
                ),
            ),
        ]
    }

    /// The administrator's side: replace the Secret, or hand it over to the controller.
    fn replace_fixes(&self, with: &str) -> Vec<Fix> {
        let (ns, name) = (self.ns, self.name);
        let (file, picked_up) = if name == mco_api::constants::names::SERVER_CA {
            ("ca", "")
        } else {
            ("mcs", "; the server picks it up without a restart")
        };
        vec![
            Fix::new(
                format!("replace it with {with}{picked_up}"),
                format!(
                    "kubectl -n {ns} create secret tls {name} --cert={file}.crt --key={file}.key \
                     --dry-run=client -o yaml | kubectl replace -f -"
                ),
            ),
            Fix::new(
                format!(
                    "delete it: a controller running with --server-certs-namespace={ns} then \
                     makes its own and renews it"
                ),
                format!("kubectl -n {ns} delete secret {name}"),
            ),
        ]
    }
}

/// Whether the certificate of `secret` expires within [`CERT_WARN_WITHIN`] of `now`, or has.
fn cert_expiry(
    s: &CertSecret<'_>,
    cert: &Certificate,
    is_ca: bool,
    now: jiff::Timestamp,
) -> Option<Finding> {
    let left = cert.not_after.as_second() - now.as_second();
    if left > CERT_WARN_WITHIN.as_secs() as i64 {
        return None;
    }
    let what = if is_ca {
        "machine config server CA"
    } else {
        "machine config server certificate"
    };
    let (title, when) = if left <= 0 {
        (
            format!("{what} expired"),
            format!(
                "expired at {}, {} ago",
                cert.not_after,
                days_or_less(Duration::from_secs(left.unsigned_abs()))
            ),
        )
    } else {
        (
            format!("{what} expires soon"),
            format!(
                "expires at {}, in {}",
                cert.not_after,
                days_or_less(Duration::from_secs(left as u64))
            ),
        )
    };
    let effect = if is_ca {
        "It signs the machine config server's serving certificate; once it expires, new machines \
         refuse every certificate it signed (x509: certificate has expired or is not yet valid) \
         and cannot fetch their Ignition."
    } else {
        "New machines fetch their Ignition from the machine config server over TLS; once it \
         expires they refuse it (x509: certificate has expired or is not yet valid) and cannot \
         join."
    };
    // library-go's rule: renewed once past 80 % of its validity.
    let renew_at = cert.not_after - (cert.not_after.duration_since(cert.not_before) / 5);
    let ownership = s.ownership(
        &format!("renews it once past 80% of its validity, at {renew_at}"),
        now > renew_at,
        "",
    );
    let mut fixes = vec![s.show()];
    if s.managed.is_some() {
        fixes.extend(s.controller_fixes());
    } else if is_ca {
        fixes.extend(s.replace_fixes(&format!(
            "a new CA, and add it to ConfigMap {}/{} so that new machines trust it",
            s.ns,
            mco_api::constants::names::SERVER_CA
        )));
    } else {
        fixes.extend(s.replace_fixes(
            "a new certificate and key for the same hosts, signed by a CA of the bundle",
        ));
    }
    Some(Finding::new(
        &s.subject(),
        &title,
        format!(
            "The certificate in Secret {}/{} (data.tls.crt, {}) {when}. {effect}{ownership}",
            s.ns, s.name, cert.subject.text
        ),
        fixes,
    ))
}

/// The serving Secret read and absent while the machine config server is installed (its
/// DaemonSet or the bundle ConfigMap is there): the server has nothing to serve, and new
/// machines cannot fetch their config. Nothing where neither is there (no server here), or the
/// Secret could not be read.
fn missing_serving_secret(objects: &ServerCertObjects) -> Option<Finding> {
    use mco_api::constants::names::{SERVER_CA, SERVER_TLS_SECRET};
    if !objects.serving_missing {
        return None;
    }
    let ns = objects.namespace.as_str();
    let mut installed = vec![];
    if let Some(ds) = &objects.server_daemonset {
        installed.push(format!("DaemonSet {ns}/{ds}"));
    }
    if objects.bundle.is_some() {
        installed.push(format!("ConfigMap {ns}/{SERVER_CA}"));
    }
    if installed.is_empty() {
        return None;
    }
    let name = match objects.serving_name.as_str() {
        "" => SERVER_TLS_SECRET,
        name => name,
    };
    let s = CertSecret {
        ns,
        controller_ns: objects.controller_ns(),
        name,
        managed: None,
    };
    let mut fixes = s.controller_fixes();
    fixes.push(Fix::new(
        format!(
            "or create it yourself, with a certificate for the host machines reach the server at, \
             signed by a CA of ConfigMap {ns}/{SERVER_CA}; the server picks it up without a \
             restart, and mco never rewrites a Secret it did not make"
        ),
        format!("kubectl -n {ns} create secret tls {name} --cert=mcs.crt --key=mcs.key"),
    ));
    Some(Finding::new(
        &s.subject(),
        "machine config server certificate missing",
        format!(
            "Secret {ns}/{name} does not exist, but the machine config server is installed \
             ({}): it has no certificate to serve (a server pod that starts waits for it: \
             secret \"{name}\" not found), so new machines cannot fetch their config and \
             cannot join. A controller running with --server-certs-namespace={ns} makes it at \
             its next check.",
            installed.join(", ")
        ),
        fixes,
    ))
}

/// The machine config server's certificates, as new machines meet them: the serving certificate
/// or its CA expiring within [`CERT_WARN_WITHIN`] (or expired), a serving certificate that does
/// not name the host of the ControllerConfig's `spec.infra.status.apiServerInternalURI`, and
/// one no CA of the bundle ConfigMap signed; an absent serving Secret where the server is
/// installed ([`missing_serving_secret`]). Nothing where the serving Secret could not be read.
pub fn server_certificates(
    objects: &ServerCertObjects,
    controller_config: Option<&ControllerConfig>,
    now: jiff::Timestamp,
) -> Vec<Finding> {
    use mco_api::constants::names::{SERVER_CA, SERVER_TLS_SECRET};
    let Some(serving) = &objects.serving else {
        return missing_serving_secret(objects).into_iter().collect();
    };
    let ns = objects.namespace.as_str();
    let s = CertSecret::of(objects, serving, SERVER_TLS_SECRET);
    let chain = match secret_certs(serving) {
        Ok(chain) => chain,
        Err(why) => {
            // The controller goes by the annotations, not by the certificate: it does not
            // notice, and a deleted Secret is made again at its next check.
            let (whose, fixes) = match s.managed {
                Some(value) => (
                    format!(
                        " mco keeps this Secret (label {MANAGED_LABEL}={value}), but the \
                         controller renews it by its annotations and does not notice; deleted, \
                         it is made again at the controller's next check."
                    ),
                    vec![
                        Fix::new(
                            format!(
                                "delete it, for the controller (running with \
                                 --server-certs-namespace={ns}) to issue a new one"
                            ),
                            format!("kubectl -n {ns} delete secret {}", s.name),
                        ),
                        s.controller_fixes().remove(0),
                    ],
                ),
                None => (
                    s.ownership("", false, ""),
                    s.replace_fixes("a certificate and key signed by a CA of the bundle"),
                ),
            };
            return vec![Finding::new(
                &s.subject(),
                "machine config server certificate unreadable",
                format!(
                    "Secret {ns}/{} holds no readable certificate ({why}): the machine config \
                     server does not load it (a running server keeps serving the pair it had, \
                     one that starts fails), so new machines may not fetch their Ignition.{whose}",
                    s.name,
                ),
                fixes,
            )];
        }
    };
    let leaf = &chain[0];
    let mut out = vec![];
    out.extend(cert_expiry(&s, leaf, false, now));
    if let Some(ca) = &objects.ca
        && let Ok(ca_certs) = secret_certs(ca)
    {
        out.extend(cert_expiry(
            &CertSecret::of(objects, ca, SERVER_CA),
            &ca_certs[0],
            true,
            now,
        ));
    }

    if let Some((host, uri)) = controller_config.and_then(server_host)
        && !names_host(leaf, &host)
    {
        let cc = controller_config
            .and_then(|c| c.metadata.name.as_deref())
            .unwrap_or(mco_api::constants::names::CONTROLLER_CONFIG);
        let mut fixes = vec![s.show()];
        if s.managed.is_some() {
            fixes.extend(s.controller_fixes());
        } else {
            fixes.extend(s.replace_fixes(&format!(
                "a certificate for {host}, signed by a CA of the bundle"
            )));
        }
        out.push(Finding::new(
            &s.subject(),
            &format!("machine config server certificate not valid for {host}"),
            format!(
                "New machines fetch their Ignition from the machine config server at {host}, the \
                 host of ControllerConfig {cc}'s spec.infra.status.apiServerInternalURI ({uri}), \
                 but the certificate in Secret {ns}/{} (data.tls.crt) is for {}: they refuse it \
                 ({}) and cannot join.{}",
                s.name,
                sans(leaf),
                go_name_mismatch(leaf, &host),
                s.ownership(
                    "reissues it at once when the hosts change",
                    true,
                    ", or its --server-cert-hostnames may name other hosts"
                )
            ),
            fixes,
        ));
    }

    if let Some(cm) = &objects.bundle {
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get(BUNDLE_KEY))
            .map(String::as_str)
            .unwrap_or_default();
        let bundle = pem_certs(text.as_bytes()).unwrap_or_default();
        if !chains_to(&chain, &bundle) {
            let cm_name = cm.metadata.name.as_deref().unwrap_or(SERVER_CA);
            let held = if bundle.is_empty() {
                "no certificate".to_string()
            } else {
                bundle
                    .iter()
                    .map(|c| c.subject.text.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            let bundle_managed = cm
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(MANAGED_LABEL));
            let mut fixes = vec![
                s.show(),
                Fix::new(
                    "see the CAs of the bundle",
                    format!(
                        "kubectl -n {ns} get configmap {cm_name} -o jsonpath='{{.data.ca-bundle\\.crt}}' \
                         | openssl crl2pkcs7 -nocrl -certfile /dev/stdin | openssl pkcs7 -print_certs -noout"
                    ),
                ),
            ];
            if s.managed.is_some() {
                fixes.extend(s.controller_fixes());
            } else {
                fixes.extend(s.replace_fixes("a certificate signed by a CA of the bundle"));
            }
            if !bundle_managed {
                fixes.push(Fix::new(
                    format!(
                        "the ConfigMap having no {MANAGED_LABEL} label (it is the \
                         administrator's own): add the CA that signed the certificate to its \
                         {BUNDLE_KEY}"
                    ),
                    format!("kubectl -n {ns} edit configmap {cm_name}"),
                ));
            }
            out.push(Finding::new(
                &s.subject(),
                "machine config server certificate not signed by a CA of the bundle",
                format!(
                    "New machines trust only the CAs of ConfigMap {ns}/{cm_name} \
                     ({BUNDLE_KEY}: {held}), and none of them signed the certificate in \
                     Secret {ns}/{} (issuer {}): they refuse it (x509: certificate signed by \
                     unknown authority) and cannot fetch their Ignition.{}",
                    s.name,
                    leaf.issuer.text,
                    s.ownership(
                        "reissues it at once when its CA leaves the bundle",
                        true,
                        ""
                    )
                ),
                fixes,
            ));
        }
    }
    out
}

fn pool_pending(p: &MachineConfigPool) -> bool {
    let target = pool_target(p);
    let current = p
        .status
        .as_ref()
        .and_then(|s| s.configuration.as_ref())
        .map(|c| c.name.as_str())
        .unwrap_or_default();
    let s = p.status.clone().unwrap_or_default();
    (!target.is_empty() && target != current) || s.updated_machine_count < s.machine_count
}

fn pool_findings(snap: &Snapshot, pool: &MachineConfigPool, out: &mut Vec<Finding>) {
    let name = name_of(pool);
    let subject = format!("pool {name}");
    if pool.spec.paused && pool_pending(pool) {
        let s = pool.status.clone().unwrap_or_default();
        out.push(Finding::new(
            &subject,
            "paused with a pending update",
            format!(
                "Pool {name} is paused: it rendered {target} but moves no node to it \
                 ({updated}/{total} nodes updated). Changes made since the pause (including \
                 certificate rotations) wait until it is unpaused.",
                target = pool_target(pool),
                updated = s.updated_machine_count,
                total = s.machine_count,
            ),
            vec![Fix::new(
                "unpause the pool; the rollout proceeds within maxUnavailable",
                format!(
                    "kubectl patch mcp {name} --type merge -p '{{\"spec\":{{\"paused\":false}}}}'"
                ),
            )],
        ));
    }
    let rollout_condition = |ty: &str| {
        pool.status
            .as_ref()
            .and_then(|s| s.condition(ty))
            .filter(|c| c.status == "True")
            .cloned()
    };
    if let Some(c) = rollout_condition(mco_api::rollouts::conditions::POOL_HALTED) {
        out.push(Finding::new(
            &subject,
            "rollout halted by its RolloutPolicy",
            format!(
                "{} No new node of pool {name} is updated until the rollout is resumed or rolled back.",
                c.message
            ),
            vec![
                Fix::new(
                    "roll the pool back to its previous config, under the same gates",
                    format!("mco rollback {name}"),
                ),
                Fix::new(
                    "fix the cause on the node, then resume (failures seen so far are forgiven)",
                    format!("mco rollout resume {name}"),
                ),
            ],
        ));
    }
    if let Some(c) = rollout_condition(mco_api::rollouts::conditions::POOL_PINNED) {
        out.push(Finding::new(
            &subject,
            "rolled back: its MachineConfigs differ from its target",
            c.message,
            vec![Fix::new(
                "fix or remove the MachineConfig that made the bad config; the pin ends when they render the pinned config again",
                "kubectl get machineconfigs --sort-by=.metadata.creationTimestamp",
            )],
        ));
    }
    if let Some(c) = pool
        .status
        .as_ref()
        .and_then(|s| s.condition(pool_conditions::RENDER_DEGRADED))
        .filter(|c| c.status == "True")
    {
        let mc = quoted_after(&c.message, "machineconfig ")
            .map(str::to_string)
            .or_else(|| culprit_configs(snap, Some(pool), None).into_iter().next());
        let fix = match &mc {
            Some(m) => Fix::new(
                format!("fix or remove MachineConfig {m}; the pool renders again at once"),
                format!("kubectl edit machineconfig {m}   # or: kubectl delete machineconfig {m}"),
            ),
            None => Fix::new(
                "find the MachineConfig named in the message and fix or remove it",
                format!("kubectl describe mcp {name}"),
            ),
        };
        out.push(Finding::new(
            &subject,
            "cannot render its configuration",
            format!("{} No node is touched until this is fixed.", c.message),
            vec![fix],
        ));
    }
    if pool_target(pool).starts_with(mco_api::constants::names::RENDERED_PREFIX)
        && !snap.machine_configs.is_empty()
        && snap.machine_config(pool_target(pool)).is_none()
    {
        out.push(Finding::new(
            &subject,
            "target rendered config is missing",
            format!(
                "Pool {name} targets {}, which no longer exists.",
                pool_target(pool)
            ),
            vec![Fix::new(
                "the controller renders it again on its next sync; if it does not, see why",
                format!("kubectl describe mcp {name}"),
            )],
        ));
    }
}

fn two_pools(snap: &Snapshot, node: &str, pools: &[String]) -> Finding {
    let mut fixes = Vec::new();
    for keep in pools {
        let drop: Vec<String> = pools
            .iter()
            .filter(|p| *p != keep)
            .flat_map(|p| {
                snap.pool(p)
                    .and_then(|p| p.spec.node_selector.as_ref())
                    .and_then(|s| s.match_labels.as_ref())
                    .map(|l| l.keys().cloned().collect::<Vec<_>>())
                    .unwrap_or_default()
            })
            .map(|k| format!("{k}-"))
            .collect();
        if !drop.is_empty() {
            fixes.push(Fix::new(
                format!("keep the node in pool {keep}: remove the other pools' labels"),
                format!("kubectl label node {node} {}", drop.join(" ")),
            ));
        }
    }
    Finding::new(
        &format!("node {node}"),
        "in more than one custom pool",
        format!(
            "Node {node} matches the node selectors of the custom pools {}. A node can belong to \
             only one custom pool, so no pool manages it: it gets no config updates.",
            pools.join(", ")
        ),
        fixes,
    )
}

fn missing_config(
    node: &str,
    cfg: &str,
    pool: Option<&MachineConfigPool>,
    a: &NodeAccess,
) -> Finding {
    let target = pool.map(pool_target).unwrap_or_default();
    let mut fixes = Vec::new();
    if !target.is_empty() && target != cfg {
        fixes.push(Fix::new(
            format!("point the node at its pool's current config {target}"),
            format!(
                "kubectl annotate node {node} --overwrite {}={target} {}={target}",
                annotations::CURRENT_CONFIG,
                annotations::DESIRED_CONFIG
            ),
        ));
        fixes.push(Fix::new(
            format!(
                "then make the daemon re-apply it instead of validating against the old one ({})",
                on_node(node, a)
            ),
            a.force.clone(),
        ));
    } else {
        fixes.push(Fix::new(
            "find out which rendered configs exist and re-create the missing one from the same sources",
            "kubectl get machineconfig",
        ));
    }
    Finding::new(
        &format!("node {node}"),
        "missing rendered config",
        format!(
            "Node {node} refers to machineconfig {cfg:?}, which does not exist (deleted, or \
             garbage-collected while still in use). The daemon cannot validate or update from it."
        ),
        fixes,
    )
}

#[allow(clippy::too_many_arguments)]
fn degraded_finding(
    snap: &Snapshot,
    node: &str,
    facts: &NodeFacts,
    reason: &str,
    unrec: bool,
    pool: Option<&MachineConfigPool>,
    a: &NodeAccess,
    roots: &BTreeMap<String, LocalFacts>,
) -> Finding {
    let subject = format!("node {node}");
    let current = facts.current.as_str();
    let where_ = on_node(node, a);
    match classify(reason, unrec) {
        Cause::NeverAdoptedOs { expected } => {
            let mut cause = format!(
                "The daemon reports `expected target osImageURL {expected:?}, have \"\"`. The booted OS \
                 deployment was never taken over by mco: first boot skipped the OS (the daemon that ran \
                 first boot did not recognise the host as ostree/CoreOS, e.g. os-release ID=\"uos\"), so \
                 the booted deployment has no pivot:// or container origin and its image reads as \"\". \
                 Files were applied, so the node joined; the first config change (or OS upgrade) then \
                 fails validation."
            );
            if let Some(l) = roots.get(node)
                && let Some(b) = &l.booted
            {
                let _ = write!(
                    cause,
                    " On disk: booted deployment `{}`, os-release ID={:?}, {} {}.",
                    b.origin,
                    l.os.identity.id,
                    mco_api::paths::OSTREE_BOOTED,
                    if l.os.ostree_booted {
                        "present"
                    } else {
                        "absent"
                    }
                );
            }
            Finding::new(
                &subject,
                "OS image never adopted (first boot skipped the OS)",
                cause,
                vec![
                    Fix::new(
                        format!(
                            "one step, {where_}: force a full re-apply of {current} including the OS; \
                             the daemon rebases to {expected} and reboots, after which the node is \
                             managed and later upgrades work"
                        ),
                        a.force.clone(),
                    ),
                    Fix::new(
                        format!("{where_}: complete first boot again from the first-boot config"),
                        local::firstboot_command(
                            roots
                                .get(node)
                                .is_none_or(|l| l.firstboot_done || l.firstboot_pending),
                            current,
                            roots
                                .get(node)
                                .filter(|l| l.simulated)
                                .map(|l| l.root.as_path()),
                        ),
                    ),
                ],
            )
        }
        Cause::OsMismatch { expected, have } => Finding::new(
            &subject,
            "booted OS image differs from the config",
            format!(
                "The node booted {have:?} but its config {current} expects {expected:?} (a rebase was \
                 undone, or the OS was changed by hand)."
            ),
            vec![Fix::new(
                format!("{where_}: re-apply the config, OS included (reboots)"),
                a.force.clone(),
            )],
        ),
        Cause::ContentDrift { path } | Cause::ModeDrift { path } | Cause::MissingFile { path } => {
            let expected = snap
                .machine_config(current)
                .and_then(|mc| local::expected_file_size(mc, &path));
            let on_disk = roots
                .get(node)
                .and_then(|l| l.file_drift.iter().find(|d| d.path == path));
            let mut sizes = String::new();
            match (expected, on_disk) {
                (Some(e), Some(d)) => {
                    let actual = match (&d.kind, d.actual_size) {
                        (_, None) => "the file is missing".to_string(),
                        (DriftKind::Mode { expected, actual }, _) => {
                            format!("same content, mode {actual:04o} instead of {expected:04o}")
                        }
                        (_, Some(a)) => format!("found {a} bytes"),
                    };
                    let _ = write!(sizes, " Expected {e} bytes, {actual}.");
                }
                (Some(e), None) => {
                    let _ = write!(
                        sizes,
                        " Expected {e} bytes (run `mco doctor {node} --root /` on the node to see what is there)."
                    );
                }
                _ => {}
            }
            Finding::new(
                &subject,
                &format!("config drift: {path}"),
                format!(
                    "{path} was changed on the node after mco wrote it, so validation against \
                     {current} fails: {reason}.{sizes}"
                ),
                vec![
                    Fix::new(
                        format!(
                            "restore the file from {current} ({where_}); the daemon re-validates and \
                             clears Degraded. The expected content is the data URL printed by"
                        ),
                        format!(
                            "kubectl get machineconfig {current} -o jsonpath='{{.spec.config.storage.files[?(@.path==\"{path}\")].contents.source}}'"
                        ),
                    ),
                    Fix::new(
                        format!(
                            "make the daemon rewrite every file of {current} and reboot ({where_})"
                        ),
                        a.force.clone(),
                    ),
                ],
            )
        }
        Cause::KernelArguments { missing } => Finding::new(
            &subject,
            "kernel arguments missing",
            format!("The booted kernel lacks {missing} required by {current}."),
            vec![Fix::new(
                format!("{where_}: re-apply the config, kernel arguments included (reboots)"),
                a.force.clone(),
            )],
        ),
        Cause::MissingConfig { name } => missing_config(node, &name, pool, a),
        Cause::Unreconcilable { detail } => {
            let field = unreconcilable_field(&detail);
            let mcs = culprit_configs(snap, pool, field.as_deref());
            let which = if mcs.is_empty() {
                "the MachineConfig that introduced it".to_string()
            } else {
                format!("MachineConfig {}", mcs.join(", "))
            };
            let mut fixes = Vec::new();
            for mc in &mcs {
                fixes.push(Fix::new(
                    format!(
                        "remove the change from {mc}{}",
                        field
                            .as_ref()
                            .map(|f| format!(" (field {f})"))
                            .unwrap_or_default()
                    ),
                    format!(
                        "kubectl edit machineconfig {mc}   # or: kubectl delete machineconfig {mc}"
                    ),
                ));
            }
            if fixes.is_empty() {
                fixes.push(Fix::new(
                    "see which MachineConfigs the pool's target is built from",
                    format!(
                        "kubectl get mcp {} -o jsonpath='{{.spec.configuration.source[*].name}}'",
                        pool.map(name_of).unwrap_or("<pool>")
                    ),
                ));
            }
            Finding::new(
                &subject,
                "unreconcilable change",
                format!(
                    "The new config changes {} which cannot be applied to a running node; it only \
                     takes effect on newly provisioned nodes. Introduced by {which}. Daemon: {detail}",
                    field.as_deref().unwrap_or("something")
                ),
                fixes,
            )
        }
        Cause::DrainFailed => Finding::new(
            &subject,
            "drain failing",
            format!("{reason}. A pod on the node cannot be evicted."),
            vec![Fix::new(
                "see the drain's progress and which pods block it",
                format!("kubectl describe machineconfignode {node}"),
            )],
        ),
        Cause::Other => Finding::new(
            &subject,
            if unrec { "unreconcilable" } else { "degraded" },
            if reason.is_empty() {
                format!("The node is {} without a reason.", facts.state)
            } else {
                reason.to_string()
            },
            vec![
                Fix::new(
                    "see the update's phases and messages",
                    format!("kubectl describe machineconfignode {node}"),
                ),
                Fix::new(
                    format!("once the cause is fixed, re-apply ({where_})"),
                    a.force.clone(),
                ),
            ],
        ),
    }
}

fn blocked_finding(snap: &Snapshot, b: &BlockedDrain) -> Finding {
    let mut cause = format!(
        "Node {} is cordoned and its drain cannot evict {}.",
        b.node,
        b.describe()
    );
    for pdb_ref in b.pdbs() {
        let (ns, name) = pdb_ref.split_once('/').unwrap_or(("default", &pdb_ref));
        if let Some(p) = snap.pdbs.iter().find(|p| {
            p.metadata.namespace.as_deref() == Some(ns) && p.metadata.name.as_deref() == Some(name)
        }) {
            let spec = p.spec.clone().unwrap_or_default();
            let rule = match (&spec.min_available, &spec.max_unavailable) {
                (Some(m), _) => format!("minAvailable {}", intstr(m)),
                (_, Some(m)) => format!("maxUnavailable {}", intstr(m)),
                _ => "no limit".into(),
            };
            if let Some(s) = &p.status {
                let _ = write!(
                    cause,
                    " PodDisruptionBudget {pdb_ref} ({rule}) allows {} disruptions: {} of {} pods \
                     healthy, {} required.",
                    s.disruptions_allowed, s.current_healthy, s.expected_pods, s.desired_healthy
                );
            }
        }
    }
    if let Some(since) = b.since {
        let _ = write!(
            cause,
            " Blocked for {}.",
            human_duration(Duration::from_secs(
                (snap.now.as_second() - since.as_second()).max(0) as u64
            ))
        );
    }
    cause.push_str(
        " The drain retries on its own and finishes once replacement pods are Ready elsewhere.",
    );
    let mut fixes = Vec::new();
    for pdb_ref in b.pdbs() {
        let (ns, name) = pdb_ref.split_once('/').unwrap_or(("default", &pdb_ref));
        fixes.push(Fix::new(
            format!("inspect PodDisruptionBudget {pdb_ref}: which pods it counts and how many are healthy"),
            format!("kubectl get pdb -n {ns} {name}"),
        ));
    }
    if let Some(blk) = b.blockers.first() {
        let (ns, _) = blk.pod.split_once('/').unwrap_or(("default", &blk.pod));
        fixes.push(Fix::new(
            format!(
                "see why the workload of pod {} has no spare replica (not Ready, or nowhere to schedule)",
                blk.pod
            ),
            format!("kubectl get pods -n {ns} -o wide"),
        ));
    }
    Finding::new(
        &format!("node {}", b.node),
        "drain blocked by a PodDisruptionBudget",
        cause,
        fixes,
    )
}

fn intstr(v: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString) -> String {
    match v {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
    }
}

fn stuck(snap: &Snapshot, node: &str, facts: &NodeFacts) -> Option<Finding> {
    let mcn = snap.mcn(node)?;
    let p = phase::current_phase(mcn)?;
    if !p.in_progress() {
        return None;
    }
    let elapsed = p.elapsed(snap.now)?;
    if elapsed < STUCK_AFTER {
        return None;
    }
    let fix = if p.name == mcn_conditions::REBOOTED_NODE && !facts.ready {
        Fix::new(
            "the node has not come back from its reboot; check it",
            format!("kubectl get node {node} -o wide"),
        )
    } else {
        Fix::new(
            "see the phase's message and the daemon's last error",
            format!("kubectl describe machineconfignode {node}"),
        )
    };
    Some(Finding::new(
        &format!("node {node}"),
        &format!("stuck in {}", p.name),
        format!(
            "The update has been in phase {} for {}: {}",
            p.name,
            human_duration(elapsed),
            p.message
        ),
        vec![fix],
    ))
}

/// The file a drift finding is about, from either wording.
fn drift_path(title: &str) -> Option<&str> {
    title
        .strip_prefix("config drift: ")
        .or_else(|| quoted_after(title, "for file "))
        .or_else(|| quoted_after(title, "file "))
}

/// Whether two findings (one from the API, one from the disk) describe the same problem.
pub fn same_problem(a: &Finding, b: &Finding) -> bool {
    let adopted = |f: &Finding| f.title.contains("never adopted");
    a.title == b.title
        || (adopted(a) && adopted(b))
        || drift_path(&a.title).is_some_and(|p| drift_path(&b.title) == Some(p))
}

/// Adds what the disk found that the API did not already explain.
pub fn merge_local(findings: &mut Vec<Finding>, local: Vec<Finding>) {
    for f in local {
        if !findings.iter().any(|x| same_problem(x, &f)) {
            findings.push(f);
        }
    }
}

/// The text of `mco doctor`.
pub fn render(findings: &[Finding], snap: Option<&Snapshot>) -> String {
    let mut out = String::new();
    if findings.is_empty() {
        match snap {
            Some(s) => {
                let _ = writeln!(
                    out,
                    "No problems found: {} pools, {} nodes healthy.",
                    s.pools.len(),
                    s.nodes.len()
                );
            }
            None => out.push_str("No problems found.\n"),
        }
        return out;
    }
    let _ = writeln!(
        out,
        "{} problem{} found.",
        findings.len(),
        if findings.len() == 1 { "" } else { "s" }
    );
    for f in findings {
        out.push_str(&render_finding(f));
    }
    out
}

/// One finding: title line, cause, then each fix with its command on its own line.
pub fn render_finding(f: &Finding) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\n{}: {}", f.subject, f.title);
    let _ = writeln!(out, "  Cause: {}", f.cause);
    for (i, fix) in f.fixes.iter().enumerate() {
        let label = if i == 0 { "Fix" } else { "Or" };
        let _ = writeln!(out, "  {label}: {}", fix.how);
        let _ = writeln!(out, "      $ {}", fix.command);
    }
    out
}

/// The text of `mco doctor --root`: the facts, then what they mean.
pub fn render_local(facts: &LocalFacts, findings: &[Finding]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Node root {}:", facts.root.display());
    for (k, v) in local::describe(facts) {
        let _ = writeln!(out, "  {k}: {v}");
    }
    if findings.is_empty() {
        let _ = writeln!(
            out,
            "\nHealthy: {}.",
            match &facts.current_config {
                Some(c) => format!("the node is on {} and matches it", c.name),
                None => "mco has not configured this node (no currentconfig)".to_string(),
            }
        );
    } else {
        for f in findings {
            out.push_str(&render_finding(f));
        }
    }
    out
}
