//! The committed CRDs are exactly what the types generate, and their printer columns are the ones
//! operators read.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn manifests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../manifests/crds")
}

#[test]
fn committed_crds_are_fresh() {
    for crd in mco_api::crds::all() {
        let path = manifests_dir().join(mco_api::crds::file_name(&crd));
        let committed =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let generated = mco_api::crds::to_yaml(&crd).unwrap();
        assert!(
            committed == generated,
            "{} is stale; regenerate with: cargo run -p mco -- manifests crds --out-dir manifests/crds",
            path.display()
        );
    }
}

fn crd(plural: &str) -> CustomResourceDefinition {
    mco_api::crds::all()
        .into_iter()
        .find(|c| c.spec.names.plural == plural)
        .unwrap()
}

/// What `kubectl get` prints as the header: NAME, then the columns kubectl shows, upper-cased.
fn header(plural: &str, version: &str, wide: bool) -> String {
    let crd = crd(plural);
    let v = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .unwrap();
    let mut cols = vec!["NAME".to_string()];
    for c in v.additional_printer_columns.as_deref().unwrap_or_default() {
        if wide || c.priority.unwrap_or(0) == 0 {
            cols.push(c.name.to_uppercase());
        }
    }
    cols.join(" ")
}

#[test]
fn mcn_columns_match_the_documented_view() {
    assert_eq!(
        header("machineconfignodes", "v1alpha1", false),
        "NAME UPDATED UPDATEPREPARED UPDATEEXECUTED UPDATEPOSTACTIONCOMPLETED UPDATECOMPLETED RESUMED"
    );
    assert_eq!(
        header("machineconfignodes", "v1alpha1", true),
        "NAME UPDATED UPDATEPREPARED UPDATEEXECUTED UPDATEPOSTACTIONCOMPLETED UPDATECOMPLETED RESUMED \
         UPDATECOMPATIBLE UPDATEFILESANDOS DRAINEDNODE CORDONEDNODE REBOOTNODE RELOADEDCRIO UNCORDONED"
    );
}

/// Both served versions print the documented view, whichever `kubectl get` picks, and share
/// one schema: with no conversion the server only rewrites `apiVersion`, so a stored object must
/// mean the same under both.
#[test]
fn mcn_serves_v1_and_v1alpha1_from_one_schema() {
    let crd = crd("machineconfignodes");
    let names: Vec<(&str, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.storage))
        .collect();
    assert_eq!(names, [("v1", true), ("v1alpha1", false)]);
    for wide in [false, true] {
        assert_eq!(
            header("machineconfignodes", "v1", wide),
            header("machineconfignodes", "v1alpha1", wide)
        );
    }
    assert_eq!(crd.spec.versions[0].schema, crd.spec.versions[1].schema);
    assert!(crd.spec.conversion.is_none());
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(
        spec["required"],
        serde_json::json!(["configVersion", "pool"])
    );
    let status = &schema["openAPIV3Schema"]["properties"]["status"]["properties"];
    for kept in ["pinnedImageSets", "configImage", "irreconcilableChanges"] {
        assert!(status.get(kept).is_some(), "status.{kept} is kept");
    }
    assert!(spec["properties"].get("configImage").is_some());
}

/// Upstream's `v1` objects (no `nodeRef`, no `health`) read as mco's type, and what mco does
/// not model comes back out unchanged.
#[test]
fn an_upstream_v1_object_round_trips() {
    let v = serde_json::json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigNode",
        "metadata": {"name": "worker-0"},
        "spec": {"node": {"name": "worker-0"}, "pool": {"name": "worker"},
                 "configVersion": {"desired": "rendered-worker-1"},
                 "configImage": {"desiredImage": "quay.io/x@sha256:00"}},
        "status": {"observedGeneration": 2, "configVersion": {"desired": "rendered-worker-1"},
                   "pinnedImageSets": [{"name": "set", "desiredGeneration": 1}],
                   "irreconcilableChanges": [{"fieldPath": "spec.kernelType", "diff": "x"}]}
    });
    let mcn: mco_api::MachineConfigNode = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(mcn.spec.node_name(), "worker-0");
    let back = serde_json::to_value(&mcn).unwrap();
    assert_eq!(back["spec"], v["spec"]);
    assert_eq!(
        back["status"]["pinnedImageSets"],
        v["status"]["pinnedImageSets"]
    );
    assert_eq!(
        back["status"]["irreconcilableChanges"],
        v["status"]["irreconcilableChanges"]
    );
    assert_eq!(
        back["status"]["configVersion"],
        v["status"]["configVersion"]
    );
}

#[test]
fn mcn_columns_read_the_right_condition_types() {
    let crd = crd("machineconfignodes");
    let cols = crd.spec.versions[0]
        .additional_printer_columns
        .clone()
        .unwrap();
    let by_name = |n: &str| cols.iter().find(|c| c.name == n).unwrap().json_path.clone();
    for (col, cond) in [
        ("Updated", "Updated"),
        ("UpdatePrepared", "UpdatePrepared"),
        ("UpdateExecuted", "UpdateExecuted"),
        ("UpdatePostActionCompleted", "UpdatePostActionComplete"),
        ("UpdateCompleted", "UpdateComplete"),
        ("Resumed", "Resumed"),
        ("UpdateCompatible", "UpdateCompatible"),
        ("UpdateFilesAndOS", "AppliedFilesAndOS"),
        ("DrainedNode", "Drained"),
        ("CordonedNode", "Cordoned"),
        ("RebootNode", "RebootedNode"),
        ("ReloadedCRIO", "ReloadedCRIO"),
        ("Uncordoned", "Uncordoned"),
    ] {
        assert_eq!(
            by_name(col),
            format!(".status.conditions[?(@.type==\"{cond}\")].status"),
            "column {col}"
        );
        assert!(
            mco_api::constants::mcn_conditions::ALL.contains(&cond),
            "{cond} is a known type"
        );
    }
}

#[test]
fn pool_and_mc_columns() {
    assert_eq!(
        header("machineconfigpools", "v1", true),
        "NAME CONFIG UPDATED UPDATING DEGRADED MACHINECOUNT READYMACHINECOUNT UPDATEDMACHINECOUNT DEGRADEDMACHINECOUNT AGE"
    );
    assert_eq!(
        header("machineconfigs", "v1", true),
        "NAME GENERATEDBYCONTROLLER IGNITIONVERSION AGE"
    );
}

#[test]
fn short_names_scope_and_subresources() {
    for (plural, short, status) in [
        ("machineconfigs", Some("mc"), false),
        ("machineconfigpools", Some("mcp"), true),
        ("machineconfignodes", Some("mcn"), true),
        ("controllerconfigs", None, true),
    ] {
        let crd = crd(plural);
        assert_eq!(crd.spec.scope, "Cluster", "{plural}");
        assert_eq!(crd.spec.group, mco_api::GROUP);
        assert_eq!(
            crd.spec
                .names
                .short_names
                .clone()
                .unwrap_or_default()
                .first()
                .map(String::as_str),
            short,
            "{plural}"
        );
        let has_status = crd.spec.versions[0]
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some());
        assert_eq!(has_status, status, "{plural}");
    }
}

#[test]
fn upstream_machineconfig_yaml_round_trips() {
    let yaml = r#"
apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 99-worker-ssh
  labels:
    machineconfiguration.openshift.io/role: worker
spec:
  config:
    ignition:
      version: 3.2.0
    passwd:
      users:
      - name: core
        sshAuthorizedKeys:
        - ssh-ed25519 AAAA
    futureField: {kept: true}
  kernelArguments: ["nosmt"]
  fips: false
  kernelType: realtime
"#;
    let mc: mco_api::MachineConfig = mco_apimachinery::yaml::from_str(yaml).unwrap();
    assert_eq!(mc.ignition_version(), Some("3.2.0"));
    assert_eq!(mc.spec.kernel_type, "realtime");
    let back = serde_json::to_value(&mc).unwrap();
    assert_eq!(back["spec"]["config"]["futureField"]["kept"], true);
    assert_eq!(
        back["spec"]["osImageURL"], "",
        "upstream always serialises osImageURL"
    );
}

#[test]
fn mcn_seed_shape_parses() {
    let yaml = r#"
apiVersion: machineconfiguration.openshift.io/v1alpha1
kind: MachineConfigNode
metadata: {name: worker-0}
spec:
  nodeRef: {name: worker-0}
  pool: {name: worker}
  configVersion: {desired: rendered-worker-823ff8dc2b33bf444709ed7cd2b9855b}
status:
  conditions:
  - lastTransitionTime: "2023-10-17T13:09:02Z"
    message: Node has completed update to config rendered-master-cf99e619747ab19165f11e3546c71f1e
    reason: NodeUpgradeComplete
    status: "True"
    type: Updated
  configVersion:
    current: rendered-worker-823ff8dc2b33bf444709ed7cd2b9855b
    desired: rendered-worker-823ff8dc2b33bf444709ed7cd2b9855b
  health: Healthy
  mostRecentError: ""
  observedGeneration: 3
"#;
    let mcn: mco_api::MachineConfigNode = mco_apimachinery::yaml::from_str(yaml).unwrap();
    let st = mcn.status.clone().unwrap();
    assert_eq!(st.condition("Updated").unwrap().status, "True");
    assert_eq!(st.health, "Healthy");
    assert_eq!(mcn.spec.pool.name, "worker");
    assert_eq!(mcn.spec.node_name(), "worker-0", "named in nodeRef only");
    let back = serde_json::to_value(&mcn).unwrap();
    assert!(
        back["spec"].get("node").is_none(),
        "no empty spec.node written back: {back}"
    );
}

/// Every spec field's JSON name is upstream's, so existing YAML keeps working.
#[test]
fn machineconfig_spec_field_names_are_upstreams() {
    let crd = crd("machineconfigs");
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let props = schema["openAPIV3Schema"]["properties"]["spec"]["properties"]
        .as_object()
        .unwrap();
    let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "baseOSExtensionsContainerImage",
            "config",
            "extensions",
            "fips",
            "kernelArguments",
            "kernelType",
            "osImageURL"
        ]
    );
}

#[test]
fn pool_status_keeps_upstreams_fields_and_names_the_ones_mco_owns() {
    let upstream = serde_json::json!({
        "machineCount": 2, "updatedMachineCount": 2, "readyMachineCount": 2,
        "unavailableMachineCount": 0, "degradedMachineCount": 0,
        "certExpirys": [{"bundle": "KubeAPIServerServingCAData", "subject": "CN=x", "expiry": "2036-01-01T00:00:00Z"}],
        "poolSynchronizersStatus": [{"poolSynchronizerType": "PinnedImageSets", "machineCount": 2,
            "updatedMachineCount": 2, "readyMachineCount": 2, "availableMachineCount": 2,
            "unavailableMachineCount": 0, "observedGeneration": 4}],
        "osImageStream": {"name": "rhel-10"}
    });
    let status: mco_api::MachineConfigPoolStatus =
        serde_json::from_value(upstream.clone()).unwrap();
    assert_eq!(status.cert_expirys[0].subject, "CN=x");
    assert_eq!(serde_json::to_value(&status).unwrap(), upstream);

    // The CRD carries upstream's fields, so the API server prunes none of them.
    let crd = crd("machineconfigpools");
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let props = &schema["openAPIV3Schema"]["properties"]["status"]["properties"];
    for field in ["certExpirys", "poolSynchronizersStatus"] {
        assert!(props[field].is_object(), "{field} missing from the schema");
    }
    assert_eq!(
        schema["openAPIV3Schema"]["properties"]["status"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    // What mco writes is exactly its own fields.
    for field in mco_api::MachineConfigPoolStatus::OWNED {
        assert!(props[field].is_object(), "{field} is not a status field");
    }
    assert!(!mco_api::MachineConfigPoolStatus::OWNED.contains(&"certExpirys"));
}

#[test]
fn machine_configuration_crd_is_upstreams_group_and_keeps_unknown_fields() {
    let crd = crd("machineconfigurations");
    assert_eq!(crd.spec.group, "operator.openshift.io");
    assert_eq!(crd.spec.scope, "Cluster");
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let root = &schema["openAPIV3Schema"]["properties"];
    assert_eq!(root["spec"]["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(root["status"]["x-kubernetes-preserve-unknown-fields"], true);
    let files = &root["spec"]["properties"]["nodeDisruptionPolicy"]["properties"]["files"];
    assert_eq!(files["maxItems"], 50);
    assert!(
        crd.spec.versions[0]
            .subresources
            .as_ref()
            .unwrap()
            .status
            .is_some()
    );
}

#[test]
fn controller_config_keeps_every_upstream_spec_field_and_reads_the_ca_bundles() {
    // Every field of upstream's ControllerConfigSpec, as its operator writes them.
    let spec = serde_json::json!({
        "clusterDNSIP": "172.30.0.10",
        "cloudProviderConfig": "",
        "platform": "none",
        "etcdDiscoveryDomain": "",
        "kubeAPIServerServingCAData": "LS0tLS1CRUdJTg==",
        "rootCAData": "Uk9PVA==",
        "cloudProviderCAData": "Q0xPVUQ=",
        "additionalTrustBundle": "VFJVU1Q=",
        "imageRegistryBundleUserData": [{"file": "registry.example.com..5000", "data": "VVNFUg=="}],
        "imageRegistryBundleData": [{"file": "image-registry.openshift-image-registry.svc..5000", "data": "SVI="}],
        "pullSecret": {"namespace": "openshift-config", "name": "pull-secret"},
        "internalRegistryPullSecret": "e30=",
        "images": {"machineConfigOperator": "quay.io/mco:1"},
        "baseOSContainerImage": "quay.io/os:1",
        "baseOSExtensionsContainerImage": "quay.io/ext:1",
        "osImageURL": "",
        "releaseImage": "quay.io/release:1",
        "proxy": {"httpProxy": "http://proxy:3128"},
        "infra": {"apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
                  "status": {"controlPlaneTopology": "HighlyAvailable"}},
        "dns": {"apiVersion": "config.openshift.io/v1", "kind": "DNS", "spec": {"baseDomain": "x"}},
        "ipFamilies": "IPv4",
        "networkType": "OVNKubernetes",
        "network": {"mtuMigration": null}
    });
    let parsed: mco_api::ControllerConfigSpec = serde_json::from_value(spec.clone()).unwrap();
    assert_eq!(
        parsed.kube_api_server_serving_ca_data.as_deref(),
        Some("LS0tLS1CRUdJTg==")
    );
    let user = parsed.image_registry_bundle_user_data.as_deref().unwrap();
    assert_eq!(user[0].file, "registry.example.com..5000");
    let mut back = serde_json::to_value(&parsed).unwrap();
    // mco writes the empty osImageURL as absent, which upstream reads the same.
    back.as_object_mut()
        .unwrap()
        .insert("osImageURL".into(), "".into());
    assert_eq!(back, spec);

    // Upstream's Go nil slices arrive as null; they read as absent.
    let nulls: mco_api::ControllerConfigSpec = serde_json::from_value(serde_json::json!({
        "imageRegistryBundleData": null, "cloudProviderCAData": null
    }))
    .unwrap();
    assert_eq!(nulls.image_registry_bundle_data, None);

    // The API server prunes nothing from spec or status.
    let crd = crd("controllerconfigs");
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let root = &schema["openAPIV3Schema"]["properties"];
    assert_eq!(root["spec"]["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(root["status"]["x-kubernetes-preserve-unknown-fields"], true);
    for field in ["observedGeneration", "conditions", "controllerCertificates"] {
        assert!(
            root["status"]["properties"][field].is_object(),
            "{field} missing from the schema"
        );
    }
}
