//! End-to-end: on a cluster taken over, `mco controller --sync-controller-config` reports the
//! `machine-config` ClusterOperator as upstream's operator did, with real processes:
//! `mco up --no-controller`, the shipped `--openshift` RBAC applied, a minimal ClusterOperator
//! CRD and the object as the CVO leaves it (the old release's versions), and the controller run
//! as the shipped `mco-controller` ServiceAccount (so the RBAC is proven to suffice). Without
//! the object nothing is reported and that is said once; with it, the report is Available and
//! reaches the release of `machine-config-osimageurl` once the required pool runs a rendered
//! config carrying it, keeping `operator-image`; a degraded pool then makes it Degraded and
//! Upgradeable=False `DegradedPool`, as `kubectl get co` shows, and fixing the pool clears both.

use kube::core::CustomResourceExt as _;
use serde_json::{Value, json};

use crate::e2e::{self, annotation, condition, condition_status, wait_for};
use crate::e2e_ccsync::{Up, alive};

const CO: &str = mco_api::clusteroperator::MACHINE_CONFIG;
const OLD: &str = "4.18.1";
const RELEASE: &str = "4.18.2";
const IMG: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:1111111111111111111111111111111111111111111111111111111111111111";
const RELEASE_ANN: &str = mco_api::constants::annotations::RELEASE_IMAGE_VERSION;
const NO_CO_LOG: &str = "no ClusterOperator machine-config";

// The harness of the CA bundle sync's e2e: `mco up --no-controller` (a master and a worker)
// with the namespaces the shipped `--openshift` RBAC names and that RBAC applied.
impl Up {
    fn get(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let out = self.kubectl_as(&self.kubeconfig(), &a, None).ok()?;
        serde_json::from_str(&out).ok()
    }

    fn co(&self) -> Option<Value> {
        self.get(&["clusteroperator", CO])
    }
}

/// `(status, reason, message)` of a ClusterOperator condition.
fn said(co: &Value, ty: &str) -> (String, String, String) {
    let c = condition(co, ty).cloned().unwrap_or_default();
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

fn versions(co: &Value) -> Value {
    co["status"]["versions"].clone()
}

#[test]
fn the_machine_config_clusteroperator_is_reported_as_upstreams_operator_did() {
    let c = Up::start();
    // Upstream labels the master pool: its nodes must run a release before it is reported.
    let required = format!("{}=", mco_controller::clusteroperator::REQUIRED_FOR_UPGRADE);
    c.kubectl(&["label", "mcp", "master", &required]);
    c.apply(
        &json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "machine-config-osimageurl", "namespace": "openshift-machine-config-operator"},
            "data": {"releaseVersion": RELEASE},
        })
        .to_string(),
    );

    // No ClusterOperator kind yet (not OpenShift): nothing reported, said once.
    // A long resync: every report must come from a change, not from a resync.
    let (mut controller, log) = c.controller_with(&["--resync=300s"]);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut alive = alive(&mut controller, &log);
    wait_for("the controller says there is nothing to report", 60, || {
        alive();
        logs().contains(NO_CO_LOG).then_some(())
    });
    // The release follow has meanwhile taken the release onto the ControllerConfig.
    wait_for("the ControllerConfig names the release", 60, || {
        alive();
        let cc = c.get(&["controllerconfig", "machine-config-controller"])?;
        (annotation(&cc, RELEASE_ANN) == RELEASE).then_some(())
    });

    // The CVO's kind and object: the old release's versions, as its manifest leaves them.
    c.apply(&serde_json::to_string(&mco_api::ClusterOperator::crd()).unwrap());
    wait_for("the ClusterOperator kind served", 60, || {
        c.kubectl_as(&c.kubeconfig(), &["get", "clusteroperators"], None)
            .ok()
    });
    c.apply(
        &json!({
            "apiVersion": "config.openshift.io/v1",
            "kind": "ClusterOperator",
            "metadata": {"name": CO},
            "spec": {},
        })
        .to_string(),
    );
    let initial = json!({"status": {
        "versions": [
            {"name": "operator", "version": OLD},
            {"name": "operator-image", "version": IMG},
        ],
        "relatedObjects": [
            {"group": "", "resource": "namespaces", "name": "openshift-machine-config-operator"},
        ],
    }});
    c.kubectl(&[
        "patch",
        "clusteroperator",
        CO,
        "--subresource=status",
        "--type=merge",
        "-p",
        &initial.to_string(),
    ]);

    // The rendered configs carry the release, and the report says it is reached.
    wait_for(
        "every pool on a rendered config carrying the release",
        120,
        || {
            alive();
            ["master", "worker"]
                .iter()
                .all(|p| {
                    let pool = c.get(&["mcp", p]);
                    let name = pool.as_ref().and_then(|p| {
                        p["status"]["configuration"]["name"]
                            .as_str()
                            .map(str::to_string)
                    });
                    let mc = name.and_then(|n| c.get(&["mc", &n]));
                    mc.is_some_and(|mc| annotation(&mc, RELEASE_ANN) == RELEASE)
                        && pool.is_some_and(|p| {
                            condition_status(&p, "Updated") == "True"
                                && p["status"]["machineCount"] == 1
                                && p["status"]["updatedMachineCount"] == 1
                        })
                })
                .then_some(())
        },
    );
    let master_config = c.get(&["mcp", "master"]).unwrap()["status"]["configuration"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let master_line = format!("all 1 nodes are at latest configuration {master_config}");
    let co = wait_for("the release reported, with the settled pools", 120, || {
        alive();
        let co = c.co()?;
        (said(&co, "Progressing").2 == format!("Cluster version is {RELEASE}")
            && co["status"]["extension"]["master"] == master_line.as_str())
        .then_some(co)
    });
    let want_versions = json!([
        {"name": "operator", "version": RELEASE},
        {"name": "operator-image", "version": IMG},
    ]);
    assert_eq!(versions(&co), want_versions);
    assert_eq!(said(&co, "Progressing").0, "False");
    assert_eq!(
        said(&co, "Available"),
        (
            "True".into(),
            "AsExpected".into(),
            format!("Cluster has deployed [{{operator {RELEASE}}} {{operator-image {IMG}}}]")
        )
    );
    assert_eq!(said(&co, "Degraded").0, "False");
    assert_eq!(
        said(&co, "Upgradeable"),
        ("True".into(), "AsExpected".into(), String::new())
    );
    assert_eq!(co["status"]["relatedObjects"].as_array().unwrap().len(), 30);
    let version_changed = format!(
        "clusteroperator/machine-config version changed from [{{operator {OLD}}} {{operator-image {IMG}}}] to [{{operator {RELEASE}}} {{operator-image {IMG}}}]"
    );
    wait_for("the OperatorVersionChanged event", 30, || {
        let events = c.get(&[
            "events",
            "-A",
            "--field-selector",
            "reason=OperatorVersionChanged",
        ])?;
        events["items"]
            .as_array()?
            .iter()
            .any(|e| {
                e["message"] == version_changed.as_str() || e["note"] == version_changed.as_str()
            })
            .then_some(())
    });
    assert_eq!(
        logs().matches(NO_CO_LOG).count(),
        1,
        "said once:\n{}",
        logs()
    );

    // `kubectl get co`: upstream's columns.
    let table = c.kubectl(&["get", "co", CO]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "VERSION",
            "AVAILABLE",
            "PROGRESSING",
            "DEGRADED",
            "SINCE"
        ]
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..5],
        [CO, RELEASE, "True", "False", "False"],
        "{table}"
    );

    // A bad MachineConfig degrades the worker pool: Degraded, and upgrades refused.
    let bad = e2e::BAD_WORKER_MC;
    c.apply(bad);
    let co = wait_for("Upgradeable=False DegradedPool", 120, || {
        alive();
        let co = c.co()?;
        (said(&co, "Upgradeable").1 == "DegradedPool").then_some(co)
    });
    assert_eq!(
        said(&co, "Upgradeable"),
        (
            "False".into(),
            "DegradedPool".into(),
            "One or more machine config pools are degraded, please see `oc get mcp` for further details and resolve before upgrading".into()
        )
    );
    let (status, reason, message) = said(&co, "Degraded");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "RequiredPoolsFailed")
    );
    assert!(
        message.starts_with(&format!(
            "Failed to resync {RELEASE} because: during syncRequiredMachineConfigPools: MachineConfigPool worker is not ready, retrying."
        )),
        "{message}"
    );
    assert_eq!(
        said(&co, "Progressing"),
        (
            "False".into(),
            String::new(),
            format!("Error while reconciling {RELEASE}")
        )
    );
    assert_eq!(versions(&co), want_versions, "the release stays reported");
    let ext = co["status"]["extension"]["worker"]
        .as_str()
        .unwrap_or_default();
    assert!(
        ext.starts_with("pool is degraded because rendering fails with"),
        "{ext}"
    );
    let table = c.kubectl(&["get", "co", CO]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..5], [CO, RELEASE, "True", "False", "True"], "{table}");

    // Deleted, as an administrator undoes a bad config: the pool is rendered without it at
    // once (the resync is 300 s away), and both clear.
    c.kubectl(&["delete", "mc", "60-worker-bad"]);
    wait_for("the worker pool no longer degraded", 60, || {
        alive();
        let p = c.get(&["mcp", "worker"])?;
        (condition_status(&p, "Degraded") == "False").then_some(())
    });
    wait_for("Degraded=False and Upgradeable=True again", 120, || {
        alive();
        let co = c.co()?;
        (said(&co, "Degraded").0 == "False" && said(&co, "Upgradeable").0 == "True").then_some(())
    });
}
