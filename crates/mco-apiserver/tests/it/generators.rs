//! kubectl's typed generators for RBAC and Deployments (`kubectl create role|clusterrole|
//! rolebinding|clusterrolebinding|deployment`), which send protobuf bodies: each command
//! succeeds and the stored object is what kube-apiserver 1.37 stores for it (read back with
//! `kubectl get --raw` from a real one; its uid, resourceVersion, creationTimestamp and
//! managedFields set aside).

use crate::common;

use std::process::Command;

use serde_json::{Value, json};

fn kubectl(kubeconfig: &std::path::Path, home: &std::path::Path, args: &[&str]) -> String {
    let o = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "kubectl {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// A server with the namespace `diff`, and kubectl for it.
struct Cluster {
    _server: common::TestServer,
    kubeconfig: std::path::PathBuf,
    home: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Cluster {
        let server = common::start().await;
        let c = Cluster {
            kubeconfig: server.handle.kubeconfig_path(),
            home: tempfile::tempdir().unwrap(),
            _server: server,
        };
        c.kubectl(&["create", "namespace", "diff"]);
        c
    }

    fn kubectl(&self, args: &[&str]) -> String {
        kubectl(&self.kubeconfig, self.home.path(), args)
    }

    fn stored(&self, path: &str) -> Value {
        stored(&self.kubeconfig, self.home.path(), path)
    }
}

/// The stored object less what the server makes up for each object.
fn stored(kc: &std::path::Path, home: &std::path::Path, path: &str) -> Value {
    let mut v: Value = serde_json::from_str(&kubectl(kc, home, &["get", "--raw", path])).unwrap();
    let meta = v["metadata"].as_object_mut().unwrap();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
    ] {
        assert!(
            meta.remove(k).is_some() || k == "managedFields",
            "{path}: no {k}"
        );
    }
    v
}

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

fn user(name: &str) -> Value {
    json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name})
}

fn group(name: &str) -> Value {
    json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name})
}

fn role_ref(kind: &str, name: &str) -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_rbac_generators_store_what_kube_apiserver_stores() {
    let c = Cluster::start().await;
    let k = |args: &[&str]| c.kubectl(args);
    let get = |path: &str| c.stored(path);

    assert_eq!(
        k(&[
            "create",
            "role",
            "pod-reader",
            "-n",
            "diff",
            "--verb=get,list,watch",
            "--resource=pods,deployments.apps,pods/log",
            "--resource-name=a",
            "--resource-name=b"
        ]),
        "role.rbac.authorization.k8s.io/pod-reader created\n"
    );
    let verbs = json!(["get", "list", "watch"]);
    assert_eq!(
        get(&format!("{RBAC}/namespaces/diff/roles/pod-reader")),
        json!({"kind": "Role", "apiVersion": "rbac.authorization.k8s.io/v1",
            "metadata": {"name": "pod-reader", "namespace": "diff"},
            "rules": [
                {"verbs": verbs, "apiGroups": [""], "resources": ["pods", "pods/log"],
                    "resourceNames": ["a", "b"]},
                {"verbs": verbs, "apiGroups": ["apps"], "resources": ["deployments"],
                    "resourceNames": ["a", "b"]}]})
    );

    k(&[
        "create",
        "clusterrole",
        "reader",
        "--verb=get",
        "--resource=nodes,deployments.apps",
        "--non-resource-url=/healthz",
        "--non-resource-url=/logs/*",
    ]);
    assert_eq!(
        get(&format!("{RBAC}/clusterroles/reader")),
        json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
            "metadata": {"name": "reader"},
            "rules": [
                {"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"]},
                {"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"]},
                {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/logs/*"]}]})
    );

    k(&[
        "create",
        "clusterrole",
        "monitoring",
        "--aggregation-rule=rbac.example.com/aggregate-to-monitoring=true,tier=obs",
    ]);
    assert_eq!(
        get(&format!("{RBAC}/clusterroles/monitoring")),
        json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
            "metadata": {"name": "monitoring"}, "rules": null,
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels":
                {"rbac.example.com/aggregate-to-monitoring": "true", "tier": "obs"}}]}})
    );

    k(&[
        "create",
        "rolebinding",
        "readers",
        "-n",
        "diff",
        "--role=pod-reader",
        "--user=alice",
        "--user=bob",
        "--group=devs",
        "--serviceaccount=diff:builder",
    ]);
    assert_eq!(
        get(&format!("{RBAC}/namespaces/diff/rolebindings/readers")),
        json!({"kind": "RoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
            "metadata": {"name": "readers", "namespace": "diff"},
            "subjects": [user("alice"), user("bob"), group("devs"),
                {"kind": "ServiceAccount", "name": "builder", "namespace": "diff"}],
            "roleRef": role_ref("Role", "pod-reader")})
    );

    k(&[
        "create",
        "rolebinding",
        "viewers",
        "-n",
        "diff",
        "--clusterrole=view",
        "--group=ops",
    ]);
    assert_eq!(
        get(&format!("{RBAC}/namespaces/diff/rolebindings/viewers")),
        json!({"kind": "RoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
            "metadata": {"name": "viewers", "namespace": "diff"},
            "subjects": [group("ops")], "roleRef": role_ref("ClusterRole", "view")})
    );

    assert_eq!(
        k(&[
            "create",
            "clusterrolebinding",
            "admins",
            "--clusterrole=reader",
            "--user=alice",
            "--group=admins",
            "--serviceaccount=kube-system:ops"
        ]),
        "clusterrolebinding.rbac.authorization.k8s.io/admins created\n"
    );
    assert_eq!(
        get(&format!("{RBAC}/clusterrolebindings/admins")),
        json!({"kind": "ClusterRoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
            "metadata": {"name": "admins"},
            "subjects": [user("alice"), group("admins"),
                {"kind": "ServiceAccount", "name": "ops", "namespace": "kube-system"}],
            "roleRef": role_ref("ClusterRole", "reader")})
    );
    // What the bindings grant takes effect (bob's role names pods a and b).
    assert_eq!(k(&["auth", "can-i", "get", "nodes", "--as=alice"]), "yes\n");
    assert_eq!(
        k(&["auth", "can-i", "get", "/logs/kubelet", "--as=alice"]),
        "yes\n"
    );
    assert_eq!(
        k(&[
            "auth",
            "can-i",
            "watch",
            "pods/a",
            "--subresource=log",
            "-n",
            "diff",
            "--as=bob"
        ]),
        "yes\n"
    );
}

/// The pod template kube-apiserver stores for one container `create deployment` wrote.
fn template(app: &str, container: Value) -> Value {
    let mut c = json!({"resources": {}, "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File"});
    c.as_object_mut()
        .unwrap()
        .extend(container.as_object().unwrap().clone());
    json!({"metadata": {"labels": {"app": app}}, "spec": {"containers": [c],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "securityContext": {}, "schedulerName": "default-scheduler"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_deployment_stores_what_kube_apiserver_stores() {
    let c = Cluster::start().await;
    let k = |args: &[&str]| c.kubectl(args);
    let get = |path: &str| c.stored(path);
    let defaults = json!({"strategy": {"type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
        "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600});

    assert_eq!(
        k(&[
            "create",
            "deployment",
            "web",
            "-n",
            "diff",
            "--image=registry.example/web:1.27",
            "--port=8080",
            "--replicas=3"
        ]),
        "deployment.apps/web created\n"
    );
    let web = get("/apis/apps/v1/namespaces/diff/deployments/web");
    assert_eq!(
        web["metadata"],
        json!({"name": "web", "namespace": "diff", "generation": 1, "labels": {"app": "web"}})
    );
    let mut spec = json!({"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
        "template": template("web", json!({"name": "web", "image": "registry.example/web:1.27",
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "imagePullPolicy": "IfNotPresent"}))});
    spec.as_object_mut()
        .unwrap()
        .extend(defaults.as_object().unwrap().clone());
    assert_eq!(web["spec"], spec);

    k(&[
        "create",
        "deployment",
        "sleeper",
        "-n",
        "diff",
        "--image=busybox",
        "--",
        "sleep",
        "3600",
    ]);
    let sleeper = get("/apis/apps/v1/namespaces/diff/deployments/sleeper");
    let mut spec = json!({"replicas": 1, "selector": {"matchLabels": {"app": "sleeper"}},
        "template": template("sleeper", json!({"name": "busybox", "image": "busybox",
            "command": ["sleep", "3600"], "imagePullPolicy": "Always"}))});
    spec.as_object_mut()
        .unwrap()
        .extend(defaults.as_object().unwrap().clone());
    assert_eq!(sleeper["spec"], spec);
    assert_eq!(sleeper["metadata"]["labels"], json!({"app": "sleeper"}));
}

/// A protobuf body as the JSON ones: one of `MAX_BODY` bytes is read, one byte more is
/// refused before it is decoded. The padding is a Deployment's status (field 3), which the
/// server drops, as it writes the status itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protobuf_body_is_bounded_as_a_json_one() {
    let s = common::start().await;
    let client = s
        .handle
        .client_for(mco_apiserver::Identity::Admin)
        .await
        .unwrap();
    let kc = s.handle.kubeconfig_path();
    let home = tempfile::tempdir().unwrap();
    kubectl(&kc, home.path(), &["create", "namespace", "diff"]);
    let sent = std::fs::read(format!(
        "{}/tests/data/protobuf/deployment-create.bin",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    // The captured envelope: magic, typeMeta (field 1), then the raw object (field 2, 207
    // bytes) last; the padding goes at the raw object's end.
    let padded = |total: usize| -> Vec<u8> {
        let varint = |mut v: usize, out: &mut Vec<u8>| {
            while v >= 0x80 {
                out.push((v as u8) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        };
        let raw_at = sent.windows(2).position(|w| w == [0x12, 0xcf]).unwrap();
        let (head, raw) = (&sent[..raw_at], &sent[raw_at + 3..]);
        assert_eq!(sent.len(), raw_at + 3 + raw.len());
        // Sizes of the varints move with the padding: settle them by trying.
        for pad in (0..total).rev() {
            let mut status = vec![0x1a];
            varint(pad, &mut status);
            status.extend(std::iter::repeat_n(0u8, pad));
            let mut inner = raw.to_vec();
            inner.extend(&status);
            let mut body = head.to_vec();
            body.push(0x12);
            varint(inner.len(), &mut body);
            body.extend(&inner);
            if body.len() == total {
                return body;
            }
        }
        panic!("no padding makes {total} bytes");
    };
    let post = |body: Vec<u8>| {
        http::Request::builder()
            .method("POST")
            .uri("/apis/apps/v1/namespaces/diff/deployments")
            .header("content-type", "application/vnd.kubernetes.protobuf")
            .body(kube::client::Body::from(body))
            .unwrap()
    };
    let resp = client
        .send(post(padded(mco_apiserver::MAX_BODY + 1)))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
    let resp = client
        .send(post(padded(mco_apiserver::MAX_BODY)))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let web = stored(
        &kc,
        home.path(),
        "/apis/apps/v1/namespaces/diff/deployments/web",
    );
    assert_eq!(web["spec"]["replicas"], json!(3));
    assert_eq!(web["status"], json!({}));
}
