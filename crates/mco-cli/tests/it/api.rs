//! `mco status` and `mco doctor` against the embedded API server, with pools, nodes, MCNs, pods
//! and a PodDisruptionBudget created by hand.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mco_api::{MachineConfig, MachineConfigNode, MachineConfigPool};
use mco_testkit::{MachineConfigBuilder, NodeBuilder, PoolBuilder, TestServer, eventually};
use serde_json::{Value, json};

const OLD: &str = "rendered-worker-00000000000000000000000000000000";
const NEW: &str = "rendered-worker-11111111111111111111111111111111";
const IMAGE: &str = "registry.example.com/mco/machine-os-content:1.2.2";

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap()
}

async fn set_status<K>(api: &Api<K>, name: &str, status: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap();
}

fn now_minus(secs: i64) -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - secs)
        .unwrap()
        .to_string()
}

fn node(name: &str, current: &str, desired: &str, state: &str, reason: &str) -> Value {
    NodeBuilder::new(name)
        .role("worker")
        .current_config(current)
        .desired_config(desired)
        .state(state)
        .reason(reason)
        .json()
}

async fn populate(client: &Client) {
    mco_testkit::server::install_crds(client).await;
    let pools: Api<MachineConfigPool> = Api::all(client.clone());
    let mcns: Api<MachineConfigNode> = Api::all(client.clone());
    let mcs: Api<MachineConfig> = Api::all(client.clone());

    for (name, spec) in [
        (
            OLD,
            json!({"osImageURL": IMAGE, "config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
                {"path": "/etc/mco-test", "contents": {"source": "data:,hello%0A"}}]}}}),
        ),
        (NEW, json!({"osImageURL": IMAGE})),
    ] {
        create(&mcs, MachineConfigBuilder::new(name).spec(spec).json()).await;
    }

    create(
        &pools,
        PoolBuilder::new("worker")
            .role("worker")
            .max_unavailable(1)
            .target(NEW)
            .json(),
    )
    .await;
    set_status(
        &pools,
        "worker",
        json!({"configuration": {"name": OLD}, "machineCount": 3, "updatedMachineCount": 1,
               "readyMachineCount": 1, "degradedMachineCount": 1,
               "conditions": [{"type": "Degraded", "status": "True", "message": "Node w2 is reporting"}]}),
    )
    .await;

    let nodes: Api<Node> = Api::all(client.clone());
    create(&nodes, node("w0", NEW, NEW, "Done", "")).await;
    let mut w1 = node("w1", OLD, NEW, "Working", "");
    w1["spec"]["unschedulable"] = json!(true);
    w1["metadata"]["annotations"]["machineconfiguration.openshift.io/desiredDrain"] =
        json!(format!("drain-{NEW}"));
    w1["metadata"]["annotations"]["machineconfiguration.openshift.io/lastAppliedDrain"] =
        json!(format!("uncordon-{OLD}"));
    create(&nodes, w1).await;
    create(
        &nodes,
        node(
            "w2",
            OLD,
            OLD,
            "Degraded",
            &format!("unexpected on-disk state validating against {OLD}: expected target osImageURL \"{IMAGE}\", have \"\""),
        ),
    )
    .await;

    for name in ["w0", "w1", "w2"] {
        create(
            &mcns,
            json!({"apiVersion": "machineconfiguration.openshift.io/v1alpha1", "kind": "MachineConfigNode",
                "metadata": {"name": name},
                "spec": {"nodeRef": {"name": name}, "pool": {"name": "worker"}, "configVersion": {"desired": NEW}}}),
        )
        .await;
    }
    let cond = |t: &str, s: &str, m: &str, ago: i64| json!({"type": t, "status": s, "reason": t, "message": m, "lastTransitionTime": now_minus(ago)});
    set_status(
        &mcns,
        "w0",
        json!({"configVersion": {"current": NEW, "desired": NEW}, "conditions": [
            cond("UpdatePrepared", "True", "Update Compatible.", 600),
            cond("UpdateExecuted", "True", "", 590),
            cond("Updated", "True", "Node w0 Updated", 480),
        ]}),
    )
    .await;
    set_status(
        &mcns,
        "w1",
        json!({"configVersion": {"current": OLD, "desired": NEW}, "conditions": [
            cond("Updated", "False", "Node w1 needs an update", 300),
            cond("UpdatePrepared", "True", "Update Compatible.", 300),
            cond("UpdateExecuted", "Unknown", "Draining Node as part of update executed phase", 290),
            cond("Cordoned", "True", "Cordoned node. The node is reporting Unschedulable = true", 290),
            cond("Drained", "Unknown", &format!("Draining node. The drain will not be complete until desired drainer drain-{NEW} matches current drainer uncordon-{OLD}"), 120),
        ]}),
    )
    .await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, on) in [("web-1", "w1"), ("web-2", "w0")] {
        create(
            &pods,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
                "spec": {"nodeName": on, "containers": [{"name": "web", "image": "nginx"}]}}),
        )
        .await;
        set_status(
            &pods,
            name,
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
        )
        .await;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    create(
        &pdbs,
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web-pdb", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
    )
    .await;
    eventually("PDB status computed", 20, || {
        let pdbs = pdbs.clone();
        async move {
            let p = pdbs.get("web-pdb").await.ok()?;
            let s = p.status?;
            (s.current_healthy == 2 && s.disruptions_allowed == 0).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_doctor_against_the_embedded_api_server() {
    let server = TestServer::start().await;
    // As the binary does: through the kubeconfig the server wrote.
    let client = mco_cli::client::client(Some(&server.kubeconfig()))
        .await
        .unwrap();
    populate(&client).await;

    let snap = mco_cli::fetch(&client).await.unwrap();
    assert_eq!(snap.nodes.len(), 3);
    assert_eq!(snap.mcns.len(), 3);

    let report = mco_cli::status::build(&snap);
    let text = mco_cli::status::render(&report);
    assert!(
        text.starts_with(
            "worker  [######--------------]  1/3 updated  target rendered-worker-1111111111…"
        ),
        "{text}"
    );
    assert!(text.contains("ETA 4m00s (2 waves of 1)"), "{text}");
    assert!(text.contains("degraded (1 nodes)"), "{text}");
    let w1 = report
        .updating
        .iter()
        .find(|u| u.node == "w1")
        .expect("w1 updating");
    assert_eq!(w1.phase.as_ref().unwrap().name, "Drained");
    let in_phase = w1.in_phase.unwrap().as_secs();
    assert!((120..180).contains(&in_phase), "{in_phase}");
    assert!(text.contains("Drained (in progress)  2m"), "{text}");
    assert_eq!(report.blocked.len(), 1, "{text}");
    assert_eq!(report.blocked[0].node, "w1");
    assert_eq!(report.blocked[0].blockers[0].pod, "default/web-1");
    assert_eq!(
        report.blocked[0].blockers[0].pdbs,
        vec!["default/web-pdb".to_string()]
    );
    assert!(
        text.contains("pod default/web-1 (PDB default/web-pdb)"),
        "{text}"
    );
    assert!(text.contains("node w2"), "{text}");

    let findings = mco_cli::doctor::diagnose(&snap, &BTreeMap::new(), None);
    let doc = mco_cli::doctor::render(&findings, Some(&snap));
    assert!(doc.starts_with("2 problems found."), "{doc}");
    assert!(
        doc.contains("node w1: drain blocked by a PodDisruptionBudget"),
        "{doc}"
    );
    assert!(
        doc.contains("$ kubectl get pdb -n default web-pdb"),
        "{doc}"
    );
    assert!(
        doc.contains("node w2: OS image never adopted (first boot skipped the OS)"),
        "{doc}"
    );
    assert!(
        doc.contains("$ touch /run/machine-config-daemon-force"),
        "{doc}"
    );
    assert!(
        doc.contains("mco daemon firstboot-complete-machineconfig"),
        "{doc}"
    );

    let only = mco_cli::doctor::diagnose(&snap, &BTreeMap::new(), Some("w0"));
    assert!(only.is_empty(), "{only:#?}");

    server.handle.shutdown().await;
}

/// `mco doctor`'s refused inputs come from the API; a caller who may not list them gets the rest
/// of the report, not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_inputs_are_read_and_a_narrower_caller_skips_them() {
    let server = TestServer::start().await;
    let admin = mco_cli::client::client(Some(&server.kubeconfig()))
        .await
        .unwrap();
    populate(&admin).await;
    let kcs: Api<mco_api::KubeletConfig> = Api::all(admin.clone());
    let kc = create(
        &kcs,
        json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "KubeletConfig",
            "metadata": {"name": "bad-cgroups"},
            "spec": {"kubeletConfig": {"cgroupDriver": "cgroupfs"}},
        }),
    )
    .await;
    set_status(
        &kcs,
        "bad-cgroups",
        json!({"observedGeneration": kc.metadata.generation, "conditions": [{
            "type": "Failure", "status": "True",
            "message": "Error: KubeletConfiguration: cgroupDriver is not allowed to be set, but contains: cgroupfs",
        }]}),
    )
    .await;

    let (_, kcs, crcs) = mco_cli::client::fetch_inputs(&admin).await.unwrap();
    let found = mco_cli::doctor::refused_inputs(None, &kcs, &crcs);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].subject, "kubeletconfig bad-cgroups");

    // A ServiceAccount without roles may not list KubeletConfigs: nothing to report, and no
    // error.
    let nobody = server.service_account("default", "nobody").await;
    let forbidden = Api::<mco_api::KubeletConfig>::all(nobody.clone())
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(forbidden, kube::Error::Api(ref s) if s.code == 403),
        "{forbidden}"
    );
    let (_, kcs, crcs) = mco_cli::client::fetch_inputs(&nobody).await.unwrap();
    assert!(kcs.is_empty() && crcs.is_empty());

    server.handle.shutdown().await;
}

/// `mco doctor`'s image-mode objects: the `v1` MachineOSConfigs and MachineOSBuilds, typed;
/// none, and no error, for a caller who may not list them; and on a cluster that serves only
/// the Technology Preview's `v1alpha1` MachineOSConfig, its (name, pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_mode_objects_are_read_at_v1_else_v1alpha1() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

    let server = TestServer::start().await;
    let admin = mco_cli::client::client(Some(&server.kubeconfig()))
        .await
        .unwrap();
    mco_testkit::server::install_crds(&admin).await;
    let none = mco_cli::client::fetch_machine_os_configs(&admin)
        .await
        .unwrap();
    assert!(
        none.configs.is_empty() && none.builds.is_empty() && none.tech_preview.is_empty(),
        "{none:#?}"
    );
    create(
        &Api::<mco_api::MachineOSConfig>::all(admin.clone()),
        json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineOSConfig",
            "metadata": {"name": "worker"},
            "spec": {
                "machineConfigPool": {"name": "worker"},
                "imageBuilder": {"imageBuilderType": "Job"},
                "renderedImagePushSecret": {"name": "push"},
                "renderedImagePushSpec": "registry.example/os:latest",
            },
        }),
    )
    .await;
    create(
        &Api::<mco_api::MachineOSBuild>::all(admin.clone()),
        json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineOSBuild",
            "metadata": {"name": "worker-1"},
            "spec": {
                "machineConfig": {"name": NEW},
                "machineOSConfig": {"name": "worker"},
                "renderedImagePushSpec": "registry.example/os:latest",
            },
        }),
    )
    .await;
    let v1 = mco_cli::client::fetch_machine_os_configs(&admin)
        .await
        .unwrap();
    assert_eq!(v1.configs.len(), 1, "{v1:#?}");
    assert_eq!(v1.configs[0].spec.machine_config_pool.name, "worker");
    assert_eq!(v1.builds.len(), 1, "{v1:#?}");
    assert_eq!(v1.builds[0].spec.machine_config.name, NEW);
    assert!(v1.tech_preview.is_empty(), "{v1:#?}");

    let nobody = server.service_account("default", "nobody").await;
    let hidden = mco_cli::client::fetch_machine_os_configs(&nobody)
        .await
        .unwrap();
    assert!(
        hidden.configs.is_empty() && hidden.builds.is_empty() && hidden.tech_preview.is_empty(),
        "{hidden:#?}"
    );
    server.handle.shutdown().await;

    // OpenShift 4.16 to 4.18 with the Technology Preview: only v1alpha1 MachineOSConfigs.
    let server = TestServer::start().await;
    let admin = mco_cli::client::client(Some(&server.kubeconfig()))
        .await
        .unwrap();
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "machineosconfigs.machineconfiguration.openshift.io"},
        "spec": {
            "group": "machineconfiguration.openshift.io",
            "names": {"kind": "MachineOSConfig", "listKind": "MachineOSConfigList",
                      "plural": "machineosconfigs", "singular": "machineosconfig"},
            "scope": "Cluster",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                }},
            }],
        },
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(admin.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let gvk = GroupVersionKind::gvk(
        "machineconfiguration.openshift.io",
        "v1alpha1",
        "MachineOSConfig",
    );
    let alpha: Api<DynamicObject> = Api::all_with(admin.clone(), &ApiResource::from_gvk(&gvk));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1alpha1", "kind": "MachineOSConfig",
        "metadata": {"name": "layered"},
        "spec": {"machineConfigPool": {"name": "infra"}},
    }))
    .unwrap();
    eventually("the v1alpha1 MachineOSConfig created", 20, || async {
        alpha
            .create(&PostParams::default(), &obj)
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    let tp = mco_cli::client::fetch_machine_os_configs(&admin)
        .await
        .unwrap();
    assert!(tp.configs.is_empty() && tp.builds.is_empty(), "{tp:#?}");
    assert_eq!(
        tp.tech_preview,
        vec![("layered".to_string(), "infra".to_string())]
    );
    server.handle.shutdown().await;
}

/// `mco doctor` reads the machine config server's CA, bundle and serving certificate in the
/// install namespace and names a serving certificate new machines would refuse, or an absent one
/// once the server is installed (the Secret named by the controller Deployment's
/// --server-tls-secret, else doctor's flag); a caller who may not read Secrets gets no finding,
/// and no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_certificates_are_read_where_the_controller_keeps_them() {
    use crate::server_certs::{bundle, ca, controller_config, serving, tls_secret};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};

    const NS: &str = "mco-system";
    let server = TestServer::start().await;
    let admin = mco_cli::client::client(Some(&server.kubeconfig()))
        .await
        .unwrap();
    mco_testkit::server::install_crds(&admin).await;
    create(
        &Api::<Namespace>::all(admin.clone()),
        json!({"metadata": {"name": NS}}),
    )
    .await;
    let uri = "https://api-int.cluster.example:6443";
    Api::<mco_api::ControllerConfig>::all(admin.clone())
        .create(&PostParams::default(), &controller_config(uri))
        .await
        .unwrap();

    // No serving Secret and nothing of the server: nothing to say.
    let none = mco_cli::client::fetch_server_certs(&admin, NS, None)
        .await
        .unwrap();
    assert!(none.ca.is_none() && none.bundle.is_none() && none.serving.is_none());
    assert!(none.serving_missing, "{none:?}");
    assert_eq!(none.serving_name, "mco-server-tls");
    assert!(
        mco_cli::doctor::server_certificates(&none, None, jiff::Timestamp::now()).is_empty(),
        "{none:?}"
    );

    // mco's objects, with a serving certificate for a host machines do not reach.
    let (ca_pem, issuer) = ca("mco-system_machine-config-server-ca@1577836800", None);
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    let pp = PostParams::default();
    secrets
        .create(
            &pp,
            &tls_secret("machine-config-server-ca", &ca_pem, Some("signer")),
        )
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), NS)
        .create(&pp, &bundle(&[&ca_pem], true))
        .await
        .unwrap();

    // The server's DaemonSet and bundle there, its serving Secret not: new machines cannot
    // fetch their config.
    create(
        &Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(admin.clone(), NS),
        json!({
            "metadata": {"name": "mco-server"},
            "spec": {
                "selector": {"matchLabels": {"app": "mco-server"}},
                "template": {
                    "metadata": {"labels": {"app": "mco-server"}},
                    "spec": {"containers": [{"name": "server", "image": "mco"}]},
                },
            },
        }),
    )
    .await;
    let missing = mco_cli::client::fetch_server_certs(&admin, NS, None)
        .await
        .unwrap();
    assert_eq!(missing.server_daemonset.as_deref(), Some("mco-server"));
    let text = mco_cli::doctor::render(
        &mco_cli::doctor::server_certificates(&missing, None, jiff::Timestamp::now()),
        None,
    );
    assert!(text.starts_with("1 problem found."), "{text}");
    for words in [
        "secret mco-server-tls -n mco-system: machine config server certificate missing",
        "Secret mco-system/mco-server-tls does not exist, but the machine config server is \
         installed (DaemonSet mco-system/mco-server, ConfigMap mco-system/machine-config-server-ca)",
        "new machines cannot fetch their config",
        "--server-certs-namespace=mco-system",
        "kubectl -n mco-system create secret tls mco-server-tls --cert=mcs.crt --key=mcs.key",
    ] {
        assert!(text.contains(words), "{words}\n{text}");
    }

    // The controller Deployment names the Secret the server serves.
    create(
        &Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(admin.clone(), NS),
        json!({
            "metadata": {"name": "mco-controller"},
            "spec": {
                "selector": {"matchLabels": {"app": "mco-controller"}},
                "template": {
                    "metadata": {"labels": {"app": "mco-controller"}},
                    "spec": {"containers": [{
                        "name": "controller",
                        "image": "mco",
                        "args": ["controller", "--server-certs-namespace=mco-system",
                                 "--server-tls-secret=machine-config-server-tls"],
                    }]},
                },
            },
        }),
    )
    .await;
    let named = mco_cli::client::fetch_server_certs(&admin, NS, None)
        .await
        .unwrap();
    assert_eq!(named.serving_name, "machine-config-server-tls");
    let text = mco_cli::doctor::render(
        &mco_cli::doctor::server_certificates(&named, None, jiff::Timestamp::now()),
        None,
    );
    assert!(
        text.contains("Secret mco-system/machine-config-server-tls does not exist"),
        "{text}"
    );

    let pem = serving(&issuer, &["api-int.old.example"], (2035, 1, 1));
    secrets
        .create(&pp, &tls_secret("mco-server-tls", &pem, Some("target")))
        .await
        .unwrap();

    // doctor's --server-tls-secret before the Deployment's.
    let objects = mco_cli::client::fetch_server_certs(&admin, NS, Some("mco-server-tls"))
        .await
        .unwrap();
    assert!(!objects.serving_missing);
    let (cc, _, _) = mco_cli::client::fetch_inputs(&admin).await.unwrap();
    let found = mco_cli::doctor::server_certificates(&objects, cc.as_ref(), jiff::Timestamp::now());
    let text = mco_cli::doctor::render(&found, None);
    assert!(text.starts_with("1 problem found."), "{text}");
    assert!(
        text.contains(
            "secret mco-server-tls -n mco-system: machine config server certificate not valid \
             for api-int.cluster.example"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "x509: certificate is valid for api-int.old.example, not api-int.cluster.example"
        ),
        "{text}"
    );

    // On OpenShift the controller keeps upstream's objects in upstream's namespace: doctor
    // reads them there, and still points at the controller in the install namespace.
    const OPENSHIFT_NS: &str = "openshift-machine-config-operator";
    create(
        &Api::<Namespace>::all(admin.clone()),
        json!({"metadata": {"name": OPENSHIFT_NS}}),
    )
    .await;
    let mut upstream_bundle = bundle(&[&ca_pem], true);
    upstream_bundle.metadata.namespace = Some(OPENSHIFT_NS.into());
    Api::<ConfigMap>::namespaced(admin.clone(), OPENSHIFT_NS)
        .create(&pp, &upstream_bundle)
        .await
        .unwrap();
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(admin.clone(), NS)
        .patch(
            "mco-controller",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{
                    "op": "replace",
                    "path": "/spec/template/spec/containers/0/args/1",
                    "value": format!("--server-certs-namespace={OPENSHIFT_NS}"),
                }]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let upstream = mco_cli::client::fetch_server_certs(&admin, NS, None)
        .await
        .unwrap();
    assert_eq!(upstream.namespace, OPENSHIFT_NS);
    assert_eq!(upstream.controller_namespace.as_deref(), Some(NS));
    let text = mco_cli::doctor::render(
        &mco_cli::doctor::server_certificates(&upstream, None, jiff::Timestamp::now()),
        None,
    );
    for words in [
        "Secret openshift-machine-config-operator/machine-config-server-tls does not exist",
        "--server-certs-namespace=openshift-machine-config-operator",
        "kubectl -n mco-system get deployment mco-controller",
        "kubectl -n openshift-machine-config-operator create secret tls machine-config-server-tls",
    ] {
        assert!(text.contains(words), "{words}\n{text}");
    }

    // A ServiceAccount without roles may not read the Secrets: no finding, no error.
    let nobody = server.service_account("default", "nobody").await;
    let hidden = mco_cli::client::fetch_server_certs(&nobody, NS, None)
        .await
        .unwrap();
    assert!(hidden.ca.is_none() && hidden.bundle.is_none() && hidden.serving.is_none());
    assert!(!hidden.serving_missing && hidden.server_daemonset.is_none());
    assert!(mco_cli::doctor::server_certificates(&hidden, None, jiff::Timestamp::now()).is_empty());

    server.handle.shutdown().await;
}

/// An ECDSA P-256 public key, PEM, base64: what `v1` takes.
const PEM_KEY: &str = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFZ0dLb2VUb2wwWXYvRURJT21SdHVYdWxPTllXNQpwT2xYa1R0SFZlbnRaR2dpV1ZTc09yUkpZeUQrMWhRaTVOTlpaQTdJZnBwRWJjeXJGbDJwYlU3SExRPT0KLS0tLS1FTkQgUFVCTElDIEtFWS0tLS0tCg==";

/// `mco doctor` reads the image policies as the controller does: none where no version is
/// served; in `v1alpha1` alone (OpenShift 4.16–4.19) converted to `v1`, a value `v1` refuses
/// named with its object and field; in `v1` once it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reads_the_image_policies_in_v1_when_served_and_else_in_v1alpha1() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    use kube::api::{DeleteParams, ListParams};
    use mco_api::generators::v1alpha1;
    let server = TestServer::start().await;
    let c = server.admin().await;
    let none = mco_cli::client::fetch_registry_inputs(&c).await.unwrap();
    assert!(none.cips.is_empty() && none.ips.is_empty() && none.unconverted.is_none());

    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    for crd in [
        v1alpha1::ClusterImagePolicy::crd(),
        v1alpha1::ImagePolicy::crd(),
    ] {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let alpha: Api<v1alpha1::ClusterImagePolicy> = Api::all(c.clone());
    let alpha_ips: Api<v1alpha1::ImagePolicy> = Api::namespaced(c.clone(), "default");
    eventually("v1alpha1 served", 20, || {
        let (alpha, alpha_ips) = (alpha.clone(), alpha_ips.clone());
        async move {
            alpha.list(&ListParams::default()).await.ok()?;
            alpha_ips.list(&ListParams::default()).await.ok()
        }
    })
    .await;
    let policy = |name: &str, key: &str| {
        json!({
            "metadata": {"name": name},
            "spec": {
                "scopes": ["quay.io/openshift-release-dev/ocp-release"],
                "policy": {"rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": key}}},
            },
        })
    };
    let mut cip = policy("release", PEM_KEY);
    cip["apiVersion"] = json!("config.openshift.io/v1alpha1");
    cip["kind"] = json!("ClusterImagePolicy");
    create(&alpha, cip).await;
    let mut ip = policy("team", PEM_KEY);
    ip["apiVersion"] = json!("config.openshift.io/v1alpha1");
    ip["kind"] = json!("ImagePolicy");
    create(&alpha_ips, ip).await;
    let read = mco_cli::client::fetch_registry_inputs(&c).await.unwrap();
    assert!(read.unconverted.is_none(), "{:?}", read.unconverted);
    assert_eq!(read.cips.len(), 1);
    assert_eq!(read.ips.len(), 1);
    let key = &read.cips[0].spec.policy.root_of_trust.public_key;
    assert_eq!(key.as_ref().unwrap().key_data, PEM_KEY);
    assert_eq!(read.ips[0].metadata.namespace.as_deref(), Some("default"));
    assert!(mco_cli::doctor::registries(&read).is_empty());

    // 36 characters of base64 where `v1` takes at least 68.
    let mut short = policy("short", "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0K");
    short["apiVersion"] = json!("config.openshift.io/v1alpha1");
    short["kind"] = json!("ClusterImagePolicy");
    create(&alpha, short).await;
    let read = mco_cli::client::fetch_registry_inputs(&c).await.unwrap();
    assert_eq!(
        read.unconverted
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some(
            "ClusterImagePolicy short: spec.policy.rootOfTrust.publicKey.keyData: should be at least 68 chars long in config.openshift.io/v1"
        )
    );
    let found = mco_cli::doctor::registries(&read);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].subject, "clusterimagepolicy short");
    alpha
        .delete("short", &DeleteParams::default())
        .await
        .unwrap();

    // Served in v1 too: read in v1.
    let mut crd = crds
        .get("clusterimagepolicies.config.openshift.io")
        .await
        .unwrap();
    let mut v1 = mco_api::ClusterImagePolicy::crd().spec.versions.remove(0);
    v1.storage = false;
    crd.spec.versions.push(v1);
    crds.replace(
        "clusterimagepolicies.config.openshift.io",
        &PostParams::default(),
        &crd,
    )
    .await
    .unwrap();
    let v1: Api<mco_api::ClusterImagePolicy> = Api::all(c.clone());
    eventually("v1 served", 20, || {
        let v1 = v1.clone();
        async move { v1.list(&ListParams::default()).await.ok() }
    })
    .await;
    let read = mco_cli::client::fetch_registry_inputs(&c).await.unwrap();
    assert_eq!(read.cips.len(), 1);
    // The ImagePolicy kind is not served in v1: none, as the controller reads them.
    assert!(read.ips.is_empty());
}
