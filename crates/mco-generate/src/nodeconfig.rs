//! The kubelet settings OpenShift's cluster config objects hold, per pool, as upstream's
//! kubelet config controller generates them:
//! - `97-<pool>-generated-kubelet` from `nodes.config.openshift.io/cluster`: the pool's kubelet
//!   config with the feature gates and, for the `worker` pool, the worker latency profile's
//!   `nodeStatusUpdateFrequency`; the cgroup mode's kernel arguments for `master`, `worker` and
//!   `arbiter`;
//! - `98-<pool>-generated-kubelet` from `FeatureGate/cluster`: the same kubelet config.
//!
//! Both start from the pool's own kubelet config (its template, `01-<role>-kubelet`, whoever
//! generated it), never from a generated one, and the KubeletConfig generator's
//! `99-<pool>-generated-kubelet` builds over them. Every gate the FeatureGate's status lists for
//! the release is written, OpenShift's own included, as upstream writes them: OpenShift's kubelet
//! ignores gates it does not know.

use std::collections::BTreeMap;

use mco_api::{ClusterVersion, FeatureGate, MachineConfig, NodeConfigSpec};
use mco_apimachinery::yaml;
use serde_json::{Map, Value};

use crate::Error;
use crate::kubelet::KUBELET_CONF;

/// The name prefix of the config from `nodes.config.openshift.io/cluster`.
pub const NODE_CONFIG_PREFIX: &str = "97";
/// The name prefix of the config from `FeatureGate/cluster`.
pub const FEATURES_PREFIX: &str = "98";
/// The most gates one release may list: a status beyond it is refused, not written into every
/// kubelet config of the cluster. OpenShift's releases list a few hundred.
pub const MAX_GATES: usize = 2000;

const CGROUP_V2_ARGS: [&str; 2] = ["systemd.unified_cgroup_hierarchy=1", "cgroup_no_v1=\"all\""];
const CGROUP_V1_ARGS: [&str; 2] = [
    "systemd.unified_cgroup_hierarchy=0",
    "systemd.legacy_systemd_cgroup_controller=1",
];

/// `<prefix>-<pool>-generated-kubelet`, as upstream names them.
pub fn name(prefix: &str, pool: &str) -> String {
    format!("{prefix}-{pool}-generated-kubelet")
}

/// Whether `name` is a generated kubelet config (`97-`, `98-` or `99-<pool>-generated-...`):
/// none of them is a base the 97 and 98 configs start from.
pub fn is_generated(name: &str) -> bool {
    ["97-", "98-", "99-"].iter().any(|p| name.starts_with(p)) && name.contains("-generated-")
}

/// The release whose gates the kubelets get: the one `ClusterVersion/version` moves to.
pub fn desired_version(cv: Option<&ClusterVersion>) -> Option<&str> {
    let v = cv?.status.as_ref()?.desired.as_ref()?.version.as_str();
    (!v.is_empty()).then_some(v)
}

/// The gates the FeatureGate's status lists for the release `desired` (the ClusterVersion's
/// desired version; without one, the status must list a single release). A gate listed as both
/// enabled and disabled is enabled, as upstream's accessor reads it.
pub fn gates(fg: &FeatureGate, desired: Option<&str>) -> Result<BTreeMap<String, bool>, Error> {
    let entries = fg
        .status
        .as_ref()
        .map(|s| s.feature_gates.as_slice())
        .unwrap_or_default();
    let entry = match desired {
        Some(v) => entries.iter().find(|e| e.version == v).ok_or_else(|| {
            Error::Refused(format!(
                "FeatureGate cluster: status.featureGates has no entry for version {v:?}, the release ClusterVersion version is moving to"
            ))
        })?,
        None => match entries {
            [one] => one,
            [] => {
                return Err(Error::Refused(
                    "FeatureGate cluster: status.featureGates lists no release yet".into(),
                ));
            }
            more => {
                return Err(Error::Refused(format!(
                    "FeatureGate cluster: status.featureGates lists {} releases, and no ClusterVersion version names the one to use",
                    more.len()
                )));
            }
        },
    };
    let count = entry.enabled.len() + entry.disabled.len();
    if count > MAX_GATES {
        return Err(Error::Refused(format!(
            "FeatureGate cluster: status.featureGates lists {count} gates for version {:?}, more than {MAX_GATES}",
            entry.version
        )));
    }
    let mut out = BTreeMap::new();
    for (list, on) in [(&entry.disabled, false), (&entry.enabled, true)] {
        for g in list.iter().filter(|g| !g.name.is_empty()) {
            out.insert(g.name.clone(), on);
        }
    }
    Ok(out)
}

/// The `nodeStatusUpdateFrequency` a worker latency profile sets (`None`: the profile is unset
/// and the kubelet config keeps its own), in the duration format upstream's encoder writes.
pub fn status_update_frequency(profile: &str) -> Result<Option<&'static str>, Error> {
    match profile {
        "" => Ok(None),
        "Default" => Ok(Some("10s")),
        "MediumUpdateAverageReaction" => Ok(Some("20s")),
        "LowUpdateSlowReaction" => Ok(Some("1m0s")),
        other => Err(Error::Refused(format!(
            "unknown worker latency profile type found {other}, failed to update the original kubelet configuration"
        ))),
    }
}

/// Upstream refuses a move between `Default` and `LowUpdateSlowReaction` in one step (the
/// controller manager's grace periods and the kubelets' reports would disagree meanwhile); it
/// must go through `MediumUpdateAverageReaction`. `stored` is the workers' current
/// `nodeStatusUpdateFrequency` in their `97-` config (`None` without one: any profile goes).
pub fn check_transition(stored: Option<&str>, profile: &str) -> Result<(), Error> {
    let old = match stored {
        Some("10s") => "Default",
        Some("1m0s" | "1m") => "LowUpdateSlowReaction",
        _ => return Ok(()),
    };
    let new = if profile.is_empty() {
        "Default"
    } else {
        profile
    };
    let jump = matches!(
        (old, new),
        ("Default", "LowUpdateSlowReaction") | ("LowUpdateSlowReaction", "Default")
    );
    if jump {
        return Err(Error::Refused(format!(
            "Skipping the Update Node event, name: cluster, transition not allowed from old WorkerLatencyProfile: \"{old}\" to new WorkerLatencyProfile: \"{profile}\""
        )));
    }
    Ok(())
}

/// The `nodeStatusUpdateFrequency` of a stored config's kubelet config, if it sets one.
pub fn stored_frequency(mc: &MachineConfig) -> Option<String> {
    let text = crate::file_contents(mc, KUBELET_CONF).ok()??;
    let conf: Value = yaml::from_str(&text).ok()?;
    conf.get("nodeStatusUpdateFrequency")?
        .as_str()
        .map(str::to_owned)
}

/// The kernel arguments of a cgroup mode: v2's, for `v2` and for an unset mode, as upstream's;
/// v1's for `v1`, which OpenShift 4.14 to 4.18 still accept and their controller wrote so (from
/// 4.19 the API refuses `v1`).
pub fn cgroup_kernel_args(mode: &str) -> Result<Vec<String>, Error> {
    let args: &[&str] = match mode {
        "" | "v2" => &CGROUP_V2_ARGS,
        "v1" => &CGROUP_V1_ARGS,
        other => {
            return Err(Error::Refused(format!(
                "unknown cgroup mode found {other}, failed to update the machine config resource"
            )));
        }
    };
    Ok(args.iter().map(|s| (*s).to_owned()).collect())
}

/// `base` with the gates merged over its own and the status update frequency, when given.
pub fn kubelet_conf(
    base: &str,
    gates: Option<&BTreeMap<String, bool>>,
    frequency: Option<&str>,
) -> Result<String, Error> {
    let mut conf: Value = yaml::from_str(base)
        .map_err(|e| Error::Base(format!("could not decode the pool's {KUBELET_CONF}: {e}")))?;
    if !conf.is_object() {
        conf = Value::Object(Map::new());
    }
    if let Some(gates) = gates {
        let slot = &mut conf["featureGates"];
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        for (g, on) in gates {
            slot[g.as_str()] = Value::Bool(*on);
        }
    }
    if let Some(f) = frequency {
        conf["nodeStatusUpdateFrequency"] = Value::String(f.to_owned());
    }
    yaml::to_string(&conf)
        .map_err(|e| Error::Base(format!("could not encode kubelet configuration: {e}")))
}

/// OpenShift's cluster objects the two configs come from, as the caller holds them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings<'a> {
    /// `nodes.config.openshift.io/cluster`'s spec.
    pub node: Option<&'a NodeConfigSpec>,
    /// `FeatureGate/cluster`.
    pub feature_gate: Option<&'a FeatureGate>,
    /// `ClusterVersion/version`: the release whose gates are written.
    pub cluster_version: Option<&'a ClusterVersion>,
}

/// Why the settings change no pool's configs, and which object is to blame.
#[derive(Debug)]
pub enum Refusal {
    /// `FeatureGate/cluster`'s status names no usable release, or too many gates.
    FeatureGates(Error),
    /// A latency profile step upstream refuses (a Normal event on the Node settings, as
    /// upstream's).
    Transition(Error),
    /// An unknown latency profile or cgroup mode.
    NodeSettings(Error),
}

impl Refusal {
    /// The reason of the event upstream emits (or mco, where upstream only logs).
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::FeatureGates(_) => "InvalidFeatureGates",
            Refusal::Transition(_) => "ActionProhibited",
            Refusal::NodeSettings(_) => "InvalidNodeConfig",
        }
    }

    /// Whether the refused object is `FeatureGate/cluster` (else the Node settings).
    pub fn is_feature_gate(&self) -> bool {
        matches!(self, Refusal::FeatureGates(_))
    }

    pub fn error(&self) -> &Error {
        match self {
            Refusal::FeatureGates(e) | Refusal::Transition(e) | Refusal::NodeSettings(e) => e,
        }
    }
}

/// Judges the settings once for every pool, before any pool's configs are written, so that a
/// refusal leaves every pool as it was: the release's gates (returned, when there is a
/// FeatureGate), then the latency profile's step from the workers' `97-` config among `mcs`,
/// then the profile and the cgroup mode themselves.
pub fn judge<'m>(
    settings: Settings<'_>,
    mcs: impl IntoIterator<Item = &'m MachineConfig>,
) -> Result<Option<BTreeMap<String, bool>>, Refusal> {
    let gates = settings
        .feature_gate
        .map(|fg| gates(fg, desired_version(settings.cluster_version)))
        .transpose()
        .map_err(Refusal::FeatureGates)?;
    if let Some(node) = settings.node {
        let workers = name(NODE_CONFIG_PREFIX, "worker");
        let stored = mcs
            .into_iter()
            .find(|m| m.metadata.name.as_deref() == Some(workers.as_str()))
            .and_then(stored_frequency);
        check_transition(stored.as_deref(), &node.worker_latency_profile)
            .map_err(Refusal::Transition)?;
        status_update_frequency(&node.worker_latency_profile)
            .and_then(|_| cgroup_kernel_args(&node.cgroup_mode))
            .map_err(Refusal::NodeSettings)?;
    }
    Ok(gates)
}

/// What the cluster's config objects say, read once for every pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inputs<'a> {
    /// `nodes.config.openshift.io/cluster`'s spec, when it exists.
    pub node: Option<&'a NodeConfigSpec>,
    /// The release's gates, when `FeatureGate/cluster` exists (see [`gates`]).
    pub gates: Option<&'a BTreeMap<String, bool>>,
}

/// The `97-` and `98-` configs of `pool`, whose own MachineConfigs in merge order are
/// `pool_mcs`: none without inputs. Unlabelled: the caller stamps and owns them.
pub fn pool_configs(
    pool: &str,
    pool_mcs: &[&MachineConfig],
    inputs: Inputs<'_>,
    controller_version: &str,
) -> Result<Vec<MachineConfig>, Error> {
    if inputs.node.is_none() && inputs.gates.is_none() {
        return Ok(vec![]);
    }
    let bases: Vec<&MachineConfig> = pool_mcs
        .iter()
        .copied()
        .filter(|mc| !is_generated(mc.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    let base = crate::base_file(&bases, KUBELET_CONF)?
        .ok_or_else(|| Error::Base("could not find Kubelet Config".into()))?;
    // The latency profile is the workers' alone, as upstream's: other pools keep their own.
    let frequency = match inputs.node {
        Some(n) if pool == "worker" => status_update_frequency(&n.worker_latency_profile)?,
        _ => None,
    };
    let conf = kubelet_conf(&base, inputs.gates, frequency)?;
    let mut out = vec![];
    if let Some(node) = inputs.node {
        let mut mc = crate::machine_config(
            &name(NODE_CONFIG_PREFIX, pool),
            pool,
            controller_version,
            vec![crate::file(KUBELET_CONF, &conf)],
        );
        if ["master", "worker", "arbiter"].contains(&pool) {
            mc.spec.kernel_arguments = Some(cgroup_kernel_args(&node.cgroup_mode)?);
        }
        out.push(mc);
    }
    if inputs.gates.is_some() {
        out.push(crate::machine_config(
            &name(FEATURES_PREFIX, pool),
            pool,
            controller_version,
            vec![crate::file(KUBELET_CONF, &conf)],
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mco_api::generators::{FeatureGateAttributes, FeatureGateDetails};
    use mco_api::{FeatureGateSpec, FeatureGateStatus};

    const BASE: &str = "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\ncgroupDriver: systemd\nnodeStatusUpdateFrequency: 10s\nfeatureGates:\n  KeptFromTheTemplate: true\n  RotateKubeletServerCertificate: false\n";

    fn fg(releases: &[(&str, &[&str], &[&str])]) -> FeatureGate {
        let attrs = |names: &[&str]| {
            names
                .iter()
                .map(|n| FeatureGateAttributes {
                    name: (*n).to_owned(),
                })
                .collect()
        };
        let mut fg = FeatureGate::new("cluster", FeatureGateSpec::default());
        fg.status = Some(FeatureGateStatus {
            feature_gates: releases
                .iter()
                .map(|(v, on, off)| FeatureGateDetails {
                    version: (*v).to_owned(),
                    enabled: attrs(on),
                    disabled: attrs(off),
                })
                .collect(),
        });
        fg
    }

    fn base_mc(name: &str, conf: &str) -> MachineConfig {
        crate::machine_config(name, "worker", "x", vec![crate::file(KUBELET_CONF, conf)])
    }

    fn node(cgroup: &str, profile: &str) -> NodeConfigSpec {
        NodeConfigSpec {
            cgroup_mode: cgroup.into(),
            worker_latency_profile: profile.into(),
            ..Default::default()
        }
    }

    fn conf_of(mc: &MachineConfig) -> Value {
        yaml::from_str(&crate::base_file(&[mc], KUBELET_CONF).unwrap().unwrap()).unwrap()
    }

    #[test]
    fn the_release_the_cluster_moves_to_picks_the_gates() {
        let two = fg(&[
            ("4.20.0", &["NewThing", "Both"], &["Old", "Both"]),
            ("4.19.3", &["Old"], &[]),
        ]);
        let g = gates(&two, Some("4.20.0")).unwrap();
        assert_eq!(
            g,
            BTreeMap::from([
                ("Both".into(), true),
                ("NewThing".into(), true),
                ("Old".into(), false),
            ])
        );
        assert_eq!(
            gates(&two, Some("4.21.0")).unwrap_err().to_string(),
            "FeatureGate cluster: status.featureGates has no entry for version \"4.21.0\", the release ClusterVersion version is moving to"
        );
        assert_eq!(
            gates(&two, None).unwrap_err().to_string(),
            "FeatureGate cluster: status.featureGates lists 2 releases, and no ClusterVersion version names the one to use"
        );
        let one = fg(&[("4.19.3", &["Old"], &[])]);
        assert_eq!(
            gates(&one, None).unwrap(),
            BTreeMap::from([("Old".into(), true)])
        );
        let none = FeatureGate::new("cluster", FeatureGateSpec::default());
        assert_eq!(
            gates(&none, None).unwrap_err().to_string(),
            "FeatureGate cluster: status.featureGates lists no release yet"
        );
    }

    #[test]
    fn gates_are_limited_at_two_thousand() {
        let names: Vec<String> = (0..MAX_GATES).map(|i| format!("Gate{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let at = fg(&[("4.20.0", &refs[..1000], &refs[1000..])]);
        assert_eq!(gates(&at, None).unwrap().len(), MAX_GATES);
        let past = fg(&[(
            "4.20.0",
            &refs[..1000],
            &[&refs[1000..], &["OneMore"]].concat(),
        )]);
        assert_eq!(
            gates(&past, None).unwrap_err().to_string(),
            "FeatureGate cluster: status.featureGates lists 2001 gates for version \"4.20.0\", more than 2000"
        );
    }

    #[test]
    fn latency_profiles_set_the_status_update_frequency() {
        assert_eq!(status_update_frequency("").unwrap(), None);
        assert_eq!(status_update_frequency("Default").unwrap(), Some("10s"));
        assert_eq!(
            status_update_frequency("MediumUpdateAverageReaction").unwrap(),
            Some("20s")
        );
        assert_eq!(
            status_update_frequency("LowUpdateSlowReaction").unwrap(),
            Some("1m0s")
        );
        assert_eq!(
            status_update_frequency("Fast").unwrap_err().to_string(),
            "unknown worker latency profile type found Fast, failed to update the original kubelet configuration"
        );
    }

    #[test]
    fn default_and_low_are_one_step_apart_only_through_medium() {
        assert!(check_transition(None, "LowUpdateSlowReaction").is_ok());
        assert!(check_transition(Some("10s"), "MediumUpdateAverageReaction").is_ok());
        assert!(check_transition(Some("20s"), "LowUpdateSlowReaction").is_ok());
        assert!(check_transition(Some("1m0s"), "MediumUpdateAverageReaction").is_ok());
        assert!(check_transition(Some("10s"), "Default").is_ok());
        assert_eq!(
            check_transition(Some("10s"), "LowUpdateSlowReaction")
                .unwrap_err()
                .to_string(),
            "Skipping the Update Node event, name: cluster, transition not allowed from old WorkerLatencyProfile: \"Default\" to new WorkerLatencyProfile: \"LowUpdateSlowReaction\""
        );
        assert!(check_transition(Some("1m0s"), "Default").is_err());
        // Unset counts as Default, as upstream's.
        assert!(check_transition(Some("1m0s"), "").is_err());
    }

    #[test]
    fn the_settings_are_judged_once_for_every_pool() {
        let stored =
            |name: &str, f: &str| base_mc(name, &format!("nodeStatusUpdateFrequency: {f}\n"));
        let workers_default = stored("97-worker-generated-kubelet", "10s");
        let masters_low = stored("97-master-generated-kubelet", "1m0s");
        let mcs = [workers_default, masters_low];
        let low = node("", "LowUpdateSlowReaction");
        let medium = node("", "MediumUpdateAverageReaction");
        let one = fg(&[("4.20.0", &["On"], &[])]);
        let settings = |node, feature_gate| Settings {
            node,
            feature_gate,
            cluster_version: None,
        };
        // The step is judged from the workers' 97- config, whichever pool asks.
        let r = judge(settings(Some(&low), None), &mcs).unwrap_err();
        assert_eq!(r.reason(), "ActionProhibited");
        assert!(!r.is_feature_gate());
        assert!(r.error().to_string().contains("\"Default\" to new"));
        assert_eq!(
            judge(settings(Some(&medium), Some(&one)), &mcs).unwrap(),
            Some(BTreeMap::from([("On".into(), true)]))
        );
        assert_eq!(judge(settings(Some(&medium), None), &mcs).unwrap(), None);
        // The FeatureGate is judged first.
        let none = FeatureGate::new("cluster", FeatureGateSpec::default());
        let r = judge(settings(Some(&low), Some(&none)), &mcs).unwrap_err();
        assert_eq!(r.reason(), "InvalidFeatureGates");
        assert!(r.is_feature_gate());
        // An unknown profile or cgroup mode refuses every pool, not only those it reaches.
        for bad in [node("v3", ""), node("", "Fast")] {
            let s = Settings {
                node: Some(&bad),
                feature_gate: Some(&one),
                cluster_version: None,
            };
            let r = judge(s, &mcs).unwrap_err();
            assert_eq!(r.reason(), "InvalidNodeConfig", "{bad:?}");
        }
        assert_eq!(judge(Settings::default(), &mcs).unwrap(), None);
    }

    #[test]
    fn cgroup_modes() {
        assert_eq!(
            cgroup_kernel_args("").unwrap(),
            ["systemd.unified_cgroup_hierarchy=1", "cgroup_no_v1=\"all\""]
        );
        assert_eq!(
            cgroup_kernel_args("v2").unwrap(),
            cgroup_kernel_args("").unwrap()
        );
        assert_eq!(
            cgroup_kernel_args("v1").unwrap(),
            [
                "systemd.unified_cgroup_hierarchy=0",
                "systemd.legacy_systemd_cgroup_controller=1"
            ]
        );
        assert_eq!(
            cgroup_kernel_args("v3").unwrap_err().to_string(),
            "unknown cgroup mode found v3, failed to update the machine config resource"
        );
    }

    #[test]
    fn both_configs_build_on_the_template_never_on_a_generated_config() {
        let template = base_mc("01-worker-kubelet", BASE);
        let generated = base_mc("99-worker-generated-kubelet", "maxPods: 10\n");
        let old97 = base_mc(
            "97-worker-generated-kubelet",
            "nodeStatusUpdateFrequency: 1m0s\n",
        );
        let g = BTreeMap::from([
            ("NewThing".to_owned(), true),
            ("RotateKubeletServerCertificate".to_owned(), true),
        ]);
        let n = node("", "MediumUpdateAverageReaction");
        let inputs = Inputs {
            node: Some(&n),
            gates: Some(&g),
        };
        let mcs =
            pool_configs("worker", &[&template, &old97, &generated], inputs, "1.0.0").unwrap();
        let names: Vec<_> = mcs
            .iter()
            .map(|m| m.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            ["97-worker-generated-kubelet", "98-worker-generated-kubelet"]
        );
        for mc in &mcs {
            let conf = conf_of(mc);
            assert_eq!(conf["nodeStatusUpdateFrequency"], "20s");
            assert_eq!(conf["cgroupDriver"], "systemd");
            assert_eq!(conf.get("maxPods"), None);
            assert_eq!(
                conf["featureGates"],
                serde_json::json!({
                    "KeptFromTheTemplate": true,
                    "NewThing": true,
                    "RotateKubeletServerCertificate": true,
                })
            );
            assert_eq!(
                mc.metadata.labels.as_ref().unwrap()[crate::ROLE_LABEL],
                "worker"
            );
        }
        assert_eq!(
            mcs[0].spec.kernel_arguments.as_deref().unwrap(),
            ["systemd.unified_cgroup_hierarchy=1", "cgroup_no_v1=\"all\""]
        );
        assert_eq!(mcs[1].spec.kernel_arguments, None);
        assert_eq!(stored_frequency(&mcs[0]).as_deref(), Some("20s"));
    }

    #[test]
    fn golden_97_and_98_worker_configs() {
        let template = crate::template::generate(
            &mco_api::ControllerConfig::new("machine-config-controller", Default::default()),
            &Default::default(),
            "1.0.0",
        )
        .unwrap();
        let pool: Vec<&MachineConfig> = template.iter().collect();
        let g = BTreeMap::from([
            ("ExampleGate".to_owned(), true),
            ("OtherGate".to_owned(), false),
        ]);
        let n = node("v2", "MediumUpdateAverageReaction");
        let inputs = Inputs {
            node: Some(&n),
            gates: Some(&g),
        };
        let mcs = pool_configs("worker", &pool, inputs, "1.0.0").unwrap();
        crate::golden::check("nodeconfig-97-worker.yaml", &crate::golden::render(&mcs[0]));
        crate::golden::check("nodeconfig-98-worker.yaml", &crate::golden::render(&mcs[1]));
    }

    #[test]
    fn the_latency_profile_is_the_workers_and_the_cgroup_mode_the_known_roles() {
        let template = base_mc("01-infra-kubelet", BASE);
        let n = node("v2", "LowUpdateSlowReaction");
        let inputs = Inputs {
            node: Some(&n),
            gates: None,
        };
        let infra = pool_configs("infra", &[&template], inputs, "1.0.0").unwrap();
        assert_eq!(infra.len(), 1);
        assert_eq!(conf_of(&infra[0])["nodeStatusUpdateFrequency"], "10s");
        assert_eq!(infra[0].spec.kernel_arguments, None);
        let master = pool_configs("master", &[&template], inputs, "1.0.0").unwrap();
        assert_eq!(conf_of(&master[0])["nodeStatusUpdateFrequency"], "10s");
        assert!(master[0].spec.kernel_arguments.is_some());
        let worker = pool_configs("worker", &[&template], inputs, "1.0.0").unwrap();
        assert_eq!(conf_of(&worker[0])["nodeStatusUpdateFrequency"], "1m0s");
    }

    #[test]
    fn no_inputs_no_configs_and_no_base_refused() {
        assert!(
            pool_configs("worker", &[], Inputs::default(), "1.0.0")
                .unwrap()
                .is_empty()
        );
        let n = node("", "");
        let only_generated = base_mc("98-worker-generated-kubelet", BASE);
        let inputs = Inputs {
            node: Some(&n),
            gates: None,
        };
        assert_eq!(
            pool_configs("worker", &[&only_generated], inputs, "1.0.0")
                .unwrap_err()
                .to_string(),
            "could not find Kubelet Config"
        );
        let bad = node("v3", "");
        let template = base_mc("01-worker-kubelet", BASE);
        let inputs = Inputs {
            node: Some(&bad),
            gates: None,
        };
        assert!(pool_configs("worker", &[&template], inputs, "1.0.0").is_err());
    }
}
