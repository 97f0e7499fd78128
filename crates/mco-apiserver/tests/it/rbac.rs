//! The shipped RBAC, evaluated by the server: the daemon's and the controller's tokens can do
//! what their roles grant and nothing more.

use crate::common;

use common::{eventually, status};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, core::Status};
use mco_apiserver::Identity;
use mco_manifests::{Options, Part};
use serde_json::{Value, json};

const MCO: &str = "machineconfiguration.openshift.io";

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn api(client: &Client, ar: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

fn plural_of(kind: &str) -> String {
    match kind {
        "CustomResourceDefinition" => "customresourcedefinitions".into(),
        k => format!("{}s", k.to_lowercase()),
    }
}

async fn create(client: &Client, v: &Value) {
    let obj: DynamicObject = serde_json::from_value(v.clone()).unwrap();
    let types = obj.types.clone().unwrap();
    let ar = resource(&types.api_version, &types.kind, &plural_of(&types.kind));
    let ns = obj.metadata.namespace.clone();
    api(client, &ar, ns.as_deref())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("creating {}: {e}", types.kind));
}

fn nodes() -> ApiResource {
    resource("v1", "Node", "nodes")
}
fn mcns() -> ApiResource {
    resource(
        &format!("{MCO}/v1alpha1"),
        "MachineConfigNode",
        "machineconfignodes",
    )
}
fn mcs() -> ApiResource {
    resource(&format!("{MCO}/v1"), "MachineConfig", "machineconfigs")
}
fn secrets() -> ApiResource {
    resource("v1", "Secret", "secrets")
}
fn leases() -> ApiResource {
    resource("coordination.k8s.io/v1", "Lease", "leases")
}

fn mcn(name: &str) -> Value {
    json!({"apiVersion": format!("{MCO}/v1alpha1"), "kind": "MachineConfigNode",
        "metadata": {"name": name},
        "spec": {"nodeRef": {"name": name}, "pool": {"name": "worker"},
                 "configVersion": {"desired": "rendered-worker-1"}}})
}

/// A server holding the shipped namespace, CRDs and RBAC, nodes `a` and `b` with their
/// MachineConfigNodes, a MachineConfig and a Secret.
async fn cluster() -> (common::TestServer, Client) {
    let s = common::start().await;
    let admin = s.handle.client_for(Identity::Admin).await.unwrap();
    let opts = Options::default();
    for m in mco_manifests::generate(&opts, &[Part::Namespace, Part::Crds, Part::Rbac]).unwrap() {
        create(&admin, &m.object).await;
    }
    for n in ["a", "b"] {
        create(
            &admin,
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}}),
        )
        .await;
    }
    let mc = json!({"apiVersion": format!("{MCO}/v1"), "kind": "MachineConfig",
        "metadata": {"name": "00-worker"}, "spec": {}});
    let mc: DynamicObject = serde_json::from_value(mc).unwrap();
    let mc_api = api(&admin, &mcs(), None);
    eventually("the MachineConfig CRD to serve", 10, || async {
        mc_api.create(&PostParams::default(), &mc).await.ok()
    })
    .await;
    let mcn_api = api(&admin, &mcns(), None);
    for n in ["a", "b"] {
        let o: DynamicObject = serde_json::from_value(mcn(n)).unwrap();
        eventually("the MachineConfigNode CRD to serve", 10, || async {
            mcn_api.create(&PostParams::default(), &o).await.ok()
        })
        .await;
    }
    create(
        &admin,
        &json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "pull-secret", "namespace": opts.namespace}}),
    )
    .await;
    (s, admin)
}

fn sa(name: &str, node: Option<&str>) -> Identity {
    Identity::service_account(&Options::default().namespace, name, node)
}

fn forbidden(r: Result<impl std::fmt::Debug, kube::Error>) -> Status {
    let st = status(r.expect_err("the call must be refused"));
    assert_eq!(st.code, 403, "{st:?}");
    st
}

fn status_patch() -> Patch<Value> {
    Patch::Merge(json!({"status": {"health": "Healthy"}}))
}

#[tokio::test]
async fn daemon_token_is_least_privilege() {
    let (s, _admin) = cluster().await;
    let ns = Options::default().namespace;
    let daemon = s
        .handle
        .client_for(sa("mco-daemon", Some("a")))
        .await
        .unwrap();
    let user = "system:serviceaccount:mco-system:mco-daemon";

    // What its role grants.
    let node_api = api(&daemon, &nodes(), None);
    node_api.get("a").await.unwrap();
    node_api.list(&Default::default()).await.unwrap();
    node_api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"machineconfiguration.openshift.io/state": "Done"}}})),
        )
        .await
        .unwrap();
    api(&daemon, &mcs(), None).get("00-worker").await.unwrap();
    let mcn_api = api(&daemon, &mcns(), None);
    let patched = mcn_api
        .patch_status("a", &PatchParams::default(), &status_patch())
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["health"], "Healthy");
    // Its Node's events, in the install namespace as upstream's daemon records them; nowhere
    // else.
    create(
        &daemon,
        &json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e1", "namespace": ns},
            "involvedObject": {"kind": "Node", "name": "a", "namespace": ns}, "reason": "Test"}),
    )
    .await;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(daemon.clone(), "default");
    let e: k8s_openapi::api::core::v1::Event =
        serde_json::from_value(json!({"metadata": {"name": "e2", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "a"}, "reason": "Test"}))
        .unwrap();
    forbidden(events.create(&PostParams::default(), &e).await);

    // Another node's MachineConfigNode: RBAC allows the verb, the owner-node guard refuses.
    let st = forbidden(
        mcn_api
            .patch_status("b", &PatchParams::default(), &status_patch())
            .await,
    );
    assert!(
        st.message
            .contains("updates to MCN b can only be done from the MCN's owner node"),
        "{}",
        st.message
    );
    forbidden(
        mcn_api
            .patch("b", &PatchParams::default(), &status_patch())
            .await,
    );

    // Deleting a MachineConfig.
    let st = forbidden(
        api(&daemon, &mcs(), None)
            .delete("00-worker", &Default::default())
            .await,
    );
    assert_eq!(
        st.message,
        format!(
            "machineconfigs.{MCO} \"00-worker\" is forbidden: User \"{user}\" cannot delete resource \"machineconfigs\" in API group \"{MCO}\" at the cluster scope"
        )
    );

    // Evicting a pod.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(daemon.clone(), "default");
    let st = forbidden(pods.evict("p", &Default::default()).await);
    assert_eq!(
        st.message,
        format!(
            "pods \"p\" is forbidden: User \"{user}\" cannot create resource \"pods/eviction\" in API group \"\" in the namespace \"default\""
        )
    );

    // Reading Secrets.
    let secret_api = api(&daemon, &secrets(), Some(&ns));
    let st = forbidden(secret_api.get("pull-secret").await);
    assert_eq!(
        st.message,
        format!(
            "secrets \"pull-secret\" is forbidden: User \"{user}\" cannot get resource \"secrets\" in API group \"\" in the namespace \"{ns}\""
        )
    );
    forbidden(secret_api.list(&Default::default()).await);
    forbidden(
        api(&daemon, &secrets(), None)
            .list(&Default::default())
            .await,
    );
}

#[tokio::test]
async fn controller_token_is_least_privilege() {
    let (s, _admin) = cluster().await;
    let ns = Options::default().namespace;
    let ctrl = s
        .handle
        .client_for(sa("mco-controller", None))
        .await
        .unwrap();

    // What its roles grant: rollout, render, MCN lifecycle, drain, leader election.
    api(&ctrl, &nodes(), None)
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let mc_api = api(&ctrl, &mcs(), None);
    let rendered: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{MCO}/v1"), "kind": "MachineConfig",
        "metadata": {"name": "rendered-worker-1"}, "spec": {}}))
    .unwrap();
    mc_api
        .create(&PostParams::default(), &rendered)
        .await
        .unwrap();
    mc_api
        .delete("rendered-worker-1", &Default::default())
        .await
        .unwrap();
    api(&ctrl, &mcns(), None)
        .patch_status("b", &PatchParams::default(), &status_patch())
        .await
        .unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(ctrl.clone());
    pods.list(&Default::default()).await.unwrap();
    let lease_api = api(&ctrl, &leases(), Some(&ns));
    let lease: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "mco-controller", "namespace": ns}, "spec": {}}))
    .unwrap();
    lease_api
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let got = lease_api.get("mco-controller").await.unwrap();
    lease_api
        .replace("mco-controller", &PostParams::default(), &got)
        .await
        .unwrap();

    // The pull secret, by name: read, and listed or watched only with a field selector for it.
    let secret_api = api(&ctrl, &secrets(), Some(&ns));
    secret_api.get("pull-secret").await.unwrap();
    let by_name = kube::api::ListParams::default().fields("metadata.name=pull-secret");
    assert_eq!(secret_api.list(&by_name).await.unwrap().items.len(), 1);

    // Not granted: other Secrets, other Leases, deleting Nodes.
    forbidden(secret_api.get("other-secret").await);
    forbidden(secret_api.list(&Default::default()).await);
    forbidden(api(&ctrl, &secrets(), None).list(&Default::default()).await);
    forbidden(lease_api.get("someone-else").await);
    forbidden(
        api(&ctrl, &nodes(), None)
            .delete("a", &Default::default())
            .await,
    );
    // Its events role is bound in `default` and its own namespace only.
    forbidden(
        api(
            &ctrl,
            &resource("v1", "Event", "events"),
            Some("kube-system"),
        )
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": "e", "namespace": "kube-system"},
                    "involvedObject": {"kind": "Node", "name": "a"}}))
            .unwrap(),
        )
        .await,
    );
}

#[tokio::test]
async fn unbound_service_account_and_legacy_identities() {
    let (s, _admin) = cluster().await;
    // A ServiceAccount no binding names may still discover the API, but not read.
    let nobody = s.handle.client_for(sa("nobody", None)).await.unwrap();
    nobody.apiserver_version().await.unwrap();
    nobody.list_api_groups().await.unwrap();
    forbidden(api(&nobody, &nodes(), None).list(&Default::default()).await);
    // The older node identity is not subject to RBAC, only to the owner-node guard.
    let node = s
        .handle
        .client_for(Identity::Node("a".into()))
        .await
        .unwrap();
    api(&node, &secrets(), Some("mco-system"))
        .list(&Default::default())
        .await
        .unwrap();
    let st = forbidden(
        api(&node, &mcns(), None)
            .patch_status("b", &PatchParams::default(), &status_patch())
            .await,
    );
    assert!(st.message.contains("owner node"), "{}", st.message);
}

/// The server holds a parsed copy of the RBAC objects; creating, changing and deleting a
/// binding or role must take effect on the very next request.
#[tokio::test]
async fn rbac_changes_apply_to_the_next_request() {
    let (s, admin) = cluster().await;
    let nobody = s.handle.client_for(sa("nobody", None)).await.unwrap();
    let node_api = api(&nobody, &nodes(), None);
    forbidden(node_api.list(&Default::default()).await);

    let rbac = "rbac.authorization.k8s.io/v1";
    let ns = Options::default().namespace;
    create(
        &admin,
        &json!({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": "node-reader"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}),
    )
    .await;
    create(
        &admin,
        &json!({"apiVersion": rbac, "kind": "ClusterRoleBinding",
            "metadata": {"name": "nobody-reads-nodes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": ns}]}),
    )
    .await;
    node_api.get("a").await.expect("the new binding grants get");
    forbidden(node_api.list(&Default::default()).await);

    // Widening the role widens the grant at once.
    api(&admin, &resource(rbac, "ClusterRole", "clusterroles"), None)
        .patch(
            "node-reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": [{"apiGroups": [""], "resources": ["nodes"],
                "verbs": ["get", "list"]}]})),
        )
        .await
        .unwrap();
    node_api
        .list(&Default::default())
        .await
        .expect("the widened role grants list");

    // Deleting the binding takes it away at once.
    api(
        &admin,
        &resource(rbac, "ClusterRoleBinding", "clusterrolebindings"),
        None,
    )
    .delete("nobody-reads-nodes", &Default::default())
    .await
    .unwrap();
    forbidden(node_api.get("a").await);
}

/// The node guard: a daemon's token changes annotations of its own Node and its own
/// MachineConfigNode, and nothing of another node's, whatever the request names.
#[tokio::test]
async fn daemon_token_changes_only_its_own_node() {
    let (s, admin) = cluster().await;
    let daemon = s
        .handle
        .client_for(sa("mco-daemon", Some("a")))
        .await
        .unwrap();
    let node_api = api(&daemon, &nodes(), None);
    let desired = |v: &str| {
        Patch::Merge(json!({"metadata": {"annotations": {
            "machineconfiguration.openshift.io/desiredConfig": v}}}))
    };
    node_api
        .patch("a", &PatchParams::default(), &desired("rendered-worker-1"))
        .await
        .unwrap();

    // Another node: its labels, its spec, its annotations; by patch, update and apply.
    let st = forbidden(
        node_api
            .patch("b", &PatchParams::default(), &desired("rendered-master-1"))
            .await,
    );
    assert_eq!(
        st.message,
        "nodes \"b\" is forbidden: ValidatingAdmissionPolicy 'mco-node-guards' with binding 'mco-node-guards-binding' denied request: updates to node b can only be done from the node itself (the request is from node a)"
    );
    forbidden(
        node_api
            .patch(
                "b",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
            )
            .await,
    );
    forbidden(
        node_api
            .patch(
                "b",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await,
    );
    let mut b = api(&admin, &nodes(), None).get("b").await.unwrap();
    b.metadata.labels = Some([("x".to_string(), "1".to_string())].into());
    forbidden(node_api.replace("b", &PostParams::default(), &b).await);
    let apply = PatchParams::apply("mco-daemon");
    forbidden(
        node_api
            .patch(
                "b",
                &apply,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "b", "labels": {"x": "1"}}})),
            )
            .await,
    );
    forbidden(node_api.delete("b", &Default::default()).await);
    let b_now = api(&admin, &nodes(), None).get("b").await.unwrap();
    assert_eq!(b_now.metadata.labels, None, "nothing of b changed");
    assert_eq!(b_now.metadata.annotations, None);
    assert_eq!(
        b_now.data.get("spec").and_then(|s| s.get("unschedulable")),
        None
    );

    // Its own node: annotations only.
    let st = forbidden(
        node_api
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await,
    );
    assert!(
        st.message
            .ends_with("the machine config daemon may change only annotations of its node, not its spec (node a)"),
        "{}",
        st.message
    );
    let st = forbidden(
        node_api
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
            )
            .await,
    );
    assert!(
        st.message.ends_with("not its labels (node a)"),
        "{}",
        st.message
    );
    let mut a = node_api.get("a").await.unwrap();
    a.data["spec"] = json!({"taints": [{"key": "k", "effect": "NoSchedule"}]});
    forbidden(node_api.replace("a", &PostParams::default(), &a).await);

    // A MachineConfigNode for another node, under a generated name or its own name.
    let mcn_api = api(&daemon, &mcns(), None);
    let mut other = mcn("b");
    other["metadata"] = json!({"generateName": "b-"});
    let other: DynamicObject = serde_json::from_value(other).unwrap();
    let st = forbidden(mcn_api.create(&PostParams::default(), &other).await);
    assert!(
        st.message.starts_with("machineconfignodes.machineconfiguration.openshift.io \"b-")
            && st.message.ends_with("can only be done from the MCN's owner node: its spec.nodeRef.name is b, the request is from node a"),
        "{}",
        st.message
    );
    let mut misnamed = mcn("b");
    misnamed["metadata"]["name"] = json!("a-2");
    let misnamed: DynamicObject = serde_json::from_value(misnamed).unwrap();
    forbidden(mcn_api.create(&PostParams::default(), &misnamed).await);
    // Its own MachineConfigNode retargeted at b, by patch and by update.
    let st = forbidden(
        mcn_api
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"nodeRef": {"name": "b"}}})),
            )
            .await,
    );
    assert!(
        st.message.contains("its spec.nodeRef.name is b"),
        "{}",
        st.message
    );
    let mut mine = mcn_api.get("a").await.unwrap();
    mine.data["spec"]["nodeRef"]["name"] = json!("b");
    forbidden(mcn_api.replace("a", &PostParams::default(), &mine).await);
    let names: Vec<String> = api(&admin, &mcns(), None)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    assert_eq!(names, ["a", "b"], "no MachineConfigNode was created");

    // The controller and the admin are not guarded.
    let controller = s
        .handle
        .client_for(sa("mco-controller", None))
        .await
        .unwrap();
    api(&controller, &nodes(), None)
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
}

/// An access review's or rules review's answer to `client`.
async fn review(client: &Client, plural: &str, spec: Value) -> Value {
    let kind = if plural == "selfsubjectaccessreviews" {
        "SelfSubjectAccessReview"
    } else {
        "SelfSubjectRulesReview"
    };
    let a = common::send(
        client,
        "POST",
        &format!("/apis/authorization.k8s.io/v1/{plural}"),
        "application/json",
        &json!({"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec}),
    )
    .await;
    assert_eq!(a.code, 201, "{:?}", a.body);
    a.body["status"].clone()
}

#[tokio::test]
async fn daemon_reviews_its_own_access_and_rules() {
    let (s, admin) = cluster().await;
    let ns = Options::default().namespace;
    let daemon = s
        .handle
        .client_for(sa("mco-daemon", Some("a")))
        .await
        .unwrap();
    let st = review(
        &daemon,
        "selfsubjectaccessreviews",
        json!({"resourceAttributes": {"verb": "list", "resource": "secrets", "namespace": "kube-system"}}),
    )
    .await;
    assert_eq!(st, json!({"allowed": false}));
    let st = review(
        &daemon,
        "selfsubjectaccessreviews",
        json!({"resourceAttributes": {"verb": "patch", "group": MCO, "resource": "machineconfignodes", "subresource": "status", "name": "a"}}),
    )
    .await;
    assert_eq!(st["allowed"], json!(true), "{st}");
    assert!(
        st["reason"]
            .as_str()
            .unwrap()
            .starts_with("RBAC: allowed by ClusterRoleBinding "),
        "{st}"
    );
    let st = review(
        &daemon,
        "selfsubjectaccessreviews",
        json!({"nonResourceAttributes": {"verb": "get", "path": "/apis/x"}}),
    )
    .await;
    assert_eq!(
        st["reason"],
        json!(
            "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" to Group \"system:authenticated\""
        )
    );
    let st = review(&daemon, "selfsubjectrulesreviews", json!({"namespace": ns})).await;
    assert_eq!(st["incomplete"], json!(false));
    let resources: Vec<&Value> = st["resourceRules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap())
        .collect();
    assert!(resources.contains(&&json!("machineconfignodes")), "{st}");
    assert!(
        resources.contains(&&json!("selfsubjectrulesreviews")),
        "{st}"
    );
    // A review is never a list, a get or a stored object (authorized first, as upstream).
    let a = common::send(
        &admin,
        "GET",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        "application/json",
        &Value::Null,
    )
    .await;
    assert_eq!(a.code, 405, "{:?}", a.body);
    let a = common::send(
        &daemon,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        "application/json",
        &json!({"spec": {}}),
    )
    .await;
    assert_eq!((a.code, a.message()), (400, "no namespace on request"));
}
