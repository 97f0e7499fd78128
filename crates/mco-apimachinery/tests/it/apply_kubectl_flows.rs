//! The write sequences kubectl and kube-rs produce, run through the pure
//! machinery the way the API server chains it: patch, then record ownership.

use mco_apimachinery::apply::{ApplyOptions, Operation, apply, managed_entries, record_update};
use mco_apimachinery::patch::{MergeKeyTable, PatchType, apply_patch, is_noop};
use mco_apimachinery::selector::LabelSelector;
use mco_testkit::MachineConfigBuilder;
use proptest::prelude::*;
use serde_json::{Value, json};

const T1: &str = "2026-03-01T10:00:00Z";
const T2: &str = "2026-03-01T10:05:00Z";

fn mc(args: &[&str]) -> Value {
    MachineConfigBuilder::new("99-worker-custom")
        .role("worker")
        .config(json!({"ignition": {"version": "3.4.0"}}))
        .kernel_arguments(args)
        .json()
}

#[test]
fn client_side_apply_then_server_side_apply() {
    let keys = MergeKeyTable::metadata_only();
    let o = ApplyOptions::new(T1, &keys);
    // `kubectl apply` creates with POST ?fieldManager=kubectl-client-side-apply.
    let mut body = mc(&["nosmt"]);
    body["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": "{...}\n"});
    let live = record_update(None, &body, "kubectl-client-side-apply", o);
    let es = managed_entries(&live);
    assert_eq!(es.len(), 1);
    assert_eq!(es[0].operation, Operation::Update);

    // `kubectl apply --server-side` with the same values: no conflict.
    let ssa = apply(
        Some(&live),
        &mc(&["nosmt"]),
        "kubectl",
        false,
        ApplyOptions::new(T2, &keys),
    )
    .unwrap();
    // Same values change nothing but managedFields and the last-applied annotation,
    // which now records what kubectl applied server-side.
    assert_eq!(ssa["spec"], live["spec"]);
    let recorded: Value = serde_json::from_str(
        ssa["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(recorded, mc(&["nosmt"]));

    // The second PATCH kubectl sends, as `kubectl-last-applied`: the annotation the first
    // one returned.
    let annotation =
        ssa["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].clone();
    let last_applied = json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "99-worker-custom",
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": annotation}}
    });
    let ssa = apply(
        Some(&ssa),
        &last_applied,
        "kubectl-last-applied",
        false,
        ApplyOptions::new(T2, &keys),
    )
    .unwrap();
    assert_eq!(managed_entries(&ssa).len(), 3);

    // A changed list conflicts with the client-side applier (and kubectl, which shares the
    // field) for any other manager, worded as upstream.
    let err = apply(
        Some(&ssa),
        &mc(&["nosmt", "mitigations=off"]),
        "kube-rs",
        false,
        o,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"kubectl\":\n- .spec.kernelArguments\nconflicts with \"kubectl-client-side-apply\" using machineconfiguration.openshift.io/v1:\n- .spec.kernelArguments"
    );

    // kubectl takes it over without --force-conflicts: the client-side apply's last
    // applied value is still the live one.
    let forced = apply(
        Some(&ssa),
        &mc(&["nosmt", "mitigations=off"]),
        "kubectl",
        false,
        o,
    )
    .unwrap();
    assert_eq!(
        forced["spec"]["kernelArguments"],
        json!(["nosmt", "mitigations=off"])
    );
    let csa = managed_entries(&forced)
        .into_iter()
        .find(|e| e.manager == "kubectl-client-side-apply")
        .unwrap();
    assert!(!csa.owns(".spec.kernelArguments"));
}

#[test]
fn label_then_cordon_then_apply_on_a_node() {
    let keys = MergeKeyTable::builtin("", "Node").unwrap();
    let o = ApplyOptions::new(T1, &keys);
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-0"},
                      "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let live = record_update(None, &node, "mco-sim", o);

    let labeled = apply_patch(
        live.clone(),
        PatchType::Merge,
        &json!({"metadata": {"labels": {"foo": "bar"}}}),
        &keys,
    )
    .unwrap();
    let labeled = record_update(Some(&live), &labeled, "kubectl-label", o);
    assert!(
        LabelSelector::parse("foo=bar")
            .unwrap()
            .matches_object(&labeled)
    );

    let cordoned = apply_patch(
        labeled.clone(),
        PatchType::StrategicMerge,
        &json!({"spec": {"unschedulable": true}}),
        &keys,
    )
    .unwrap();
    let cordoned = record_update(Some(&labeled), &cordoned, "kubectl", o);
    assert_eq!(cordoned["spec"]["unschedulable"], json!(true));

    // Cordoning again is a no-op: the server keeps resourceVersion.
    let again = apply_patch(
        cordoned.clone(),
        PatchType::StrategicMerge,
        &json!({"spec": {"unschedulable": true}}),
        &keys,
    )
    .unwrap();
    assert!(is_noop(&cordoned, &again));

    // An applier that disagrees about the label conflicts with kubectl-label.
    let applied = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-0", "labels": {"foo": "baz"}}});
    let err = apply(Some(&cordoned), &applied, "ops", false, o).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-label\" using v1: .metadata.labels.foo"
    );
}

#[test]
fn status_apply_keeps_spec_and_merges_conditions() {
    let keys = MergeKeyTable::builtin("", "Node").unwrap();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-0"},
                      "spec": {"unschedulable": true},
                      "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let live = record_update(None, &node, "kubelet", ApplyOptions::new(T1, &keys));
    let status = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-0"},
                        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}});
    let out = apply(
        Some(&live),
        &status,
        "mcd",
        false,
        ApplyOptions::for_status(T2, &keys),
    )
    .unwrap();
    assert_eq!(out["spec"], json!({"unschedulable": true}));
    assert_eq!(
        out["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}])
    );
    let mcd = managed_entries(&out)
        .into_iter()
        .find(|e| e.manager == "mcd")
        .unwrap();
    assert_eq!(mcd.subresource.as_deref(), Some("status"));
    assert!(mcd.owns(".status.conditions[type=\"MemoryPressure\"].status"));
}

fn config() -> impl Strategy<Value = Value> {
    let labels = proptest::collection::btree_map("[a-z]{1,3}", "[a-z0-9]{0,3}", 0..4);
    let data = proptest::collection::btree_map("[a-z]{1,3}", "[a-z0-9]{0,3}", 0..4);
    let finalizers = proptest::collection::btree_set("[a-z]{1,3}/[a-z]{1,3}", 0..3);
    (labels, data, finalizers).prop_map(|(l, d, f)| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "labels": l, "finalizers": f}, "data": d})
    })
}

proptest! {
    #[test]
    fn reapplying_is_idempotent(c in config()) {
        let keys = MergeKeyTable::builtin("", "ConfigMap").unwrap();
        let o = ApplyOptions::new(T1, &keys);
        let once = apply(None, &c, "m", false, o).unwrap();
        let twice = apply(Some(&once), &c, "m", false, o).unwrap();
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn agreeing_managers_never_conflict(c in config()) {
        let keys = MergeKeyTable::builtin("", "ConfigMap").unwrap();
        let o = ApplyOptions::new(T1, &keys);
        let once = apply(None, &c, "a", false, o).unwrap();
        let both = apply(Some(&once), &c, "b", false, o).unwrap();
        prop_assert!(is_noop(&once, &both));
        // ...and if one leaves, the other still holds every field.
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let left = apply(Some(&both), &bare, "a", false, o).unwrap();
        prop_assert!(is_noop(&once, &left));
    }

    #[test]
    fn match_labels_select_their_own_labels(c in config()) {
        let labels = c["metadata"]["labels"].clone();
        let sel = LabelSelector::from_k8s(&json!({"matchLabels": labels})).unwrap().unwrap();
        prop_assert!(sel.matches_object(&c));
    }
}
