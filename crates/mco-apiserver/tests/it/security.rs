//! What a hostile local user or a stolen node token can do: the node guard and impersonation
//! through the real kubectl, the data directory's modes, tokens at rest and across restarts,
//! and a damaged store.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams, PostParams};
use mco_apiserver::{Config, Identity, Server};
use serde_json::json;

fn kubectl(kubeconfig: &Path, home: &Path, args: &[&str]) -> (bool, String) {
    let o = Command::new("kubectl")
        .args(args)
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .output()
        .expect("running kubectl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

async fn seed_nodes(admin: &kube::Client, names: &[&str]) {
    for n in names {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": n}})).unwrap();
        Api::<Node>::all(admin.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_a_node_kubeconfig_changes_only_its_own_node() {
    let s = common::start().await;
    let admin = s.admin().await;
    seed_nodes(&admin, &["worker-0", "worker-1"]).await;
    let home = tempfile::tempdir().unwrap();
    let kc = home.path().join("node-worker-0");
    s.handle
        .write_kubeconfig(Identity::Node("worker-0".into()), &kc)
        .await
        .unwrap();
    let desired = r#"{"metadata":{"annotations":{"machineconfiguration.openshift.io/desiredConfig":"rendered-master-1"}}}"#;
    for args in [
        &["label", "node", "worker-1", "x=1"][..],
        &[
            "patch",
            "node",
            "worker-1",
            "-p",
            r#"{"spec":{"unschedulable":true}}"#,
        ],
        &["patch", "node", "worker-1", "-p", desired],
        // kubectl cordon reports the refusal but exits 0.
        &["cordon", "worker-1"],
    ] {
        let (ok, out) = kubectl(&kc, home.path(), args);
        assert!(
            !ok || args[0] == "cordon",
            "kubectl {args:?} succeeded: {out}"
        );
        assert!(
            out.contains("nodes \"worker-1\" is forbidden: ValidatingAdmissionPolicy 'mco-node-guards'")
                && out.contains("updates to node worker-1 can only be done from the node itself (the request is from node worker-0)"),
            "kubectl {args:?}: {out}"
        );
    }
    let (ok, out) = kubectl(&kc, home.path(), &["label", "node", "worker-0", "x=1"]);
    assert!(
        !ok && out.contains("not its labels (node worker-0)"),
        "{out}"
    );
    let (ok, out) = kubectl(
        &kc,
        home.path(),
        &["patch", "node", "worker-0", "-p", desired],
    );
    assert!(ok, "its own annotations: {out}");
    let w1 = Api::<Node>::all(admin).get("worker-1").await.unwrap();
    assert_eq!(w1.metadata.labels, None);
    assert_eq!(w1.metadata.annotations, None);
    assert_eq!(w1.spec.and_then(|s| s.unschedulable), None);
}

/// A raw request as `client`'s identity (or nobody) carrying `headers`.
async fn get_with(client: &kube::Client, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = http::Request::builder().uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .send(req.body(kube::client::Body::empty()).unwrap())
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let body = resp.into_body().collect_bytes().await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    (code, v["message"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_needs_the_impersonate_verb() {
    let s = common::start().await;
    let home = tempfile::tempdir().unwrap();
    let kc = s.kubeconfig();
    // admin may act as the daemon's ServiceAccount, which then has only its own rights.
    let (ok, out) = kubectl(
        &kc,
        home.path(),
        &[
            "get",
            "secrets",
            "-n",
            "kube-system",
            "--as=system:serviceaccount:mco-system:mco-daemon",
        ],
    );
    assert!(
        !ok && out.contains(
            "secrets is forbidden: User \"system:serviceaccount:mco-system:mco-daemon\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
        ),
        "{out}"
    );
    let (ok, out) = kubectl(
        &kc,
        home.path(),
        &["auth", "can-i", "get", "nodes", "--as=someone"],
    );
    assert!(!ok && out.starts_with("no\n"), "{out}");
    // A ServiceAccount with no impersonate rights is refused in the first mode's words.
    let sa = s.service_account("default", "nobody").await;
    let (code, msg) = get_with(&sa, "/api/v1/nodes", &[("Impersonate-User", "someone")]).await;
    assert_eq!(code, 403);
    assert_eq!(
        msg,
        "nodes is forbidden: User \"system:serviceaccount:default:nobody\" cannot impersonate-on:user-info:list resource \"nodes\" in API group \"\" at the cluster scope"
    );
    // The node and controller identities, which RBAC does not govern, may not shed the guard.
    let node = s
        .handle
        .client_for(Identity::Node("worker-0".into()))
        .await
        .unwrap();
    let (code, msg) = get_with(
        &node,
        "/api/v1/nodes",
        &[(
            "Impersonate-User",
            "system:serviceaccount:mco-system:mco-daemon",
        )],
    )
    .await;
    assert_eq!(code, 403, "{msg}");
    assert!(
        msg.contains("User \"node-worker-0\" cannot impersonate-on:serviceaccount:list"),
        "{msg}"
    );
    // Nobody unauthenticated impersonates, not even on a public path.
    let anonymous = s.handle.local_transport(None);
    let (code, msg) = get_with(&anonymous, "/version", &[("Impersonate-User", "admin")]).await;
    assert_eq!(code, 403, "{msg}");
    assert_eq!(
        msg,
        "forbidden: User \"system:anonymous\" cannot impersonate-on:user-info:get path \"/version\""
    );
    // Groups without a user are a bad request.
    let admin = s.admin().await;
    let (code, msg) = get_with(&admin, "/api/v1/nodes", &[("Impersonate-Group", "devs")]).await;
    assert_eq!(code, 400);
    assert!(msg.ends_with("without impersonating a user name"), "{msg}");
    // Once granted `impersonate` on users (not groups), users alone pass.
    for o in [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "imp"},
            "rules": [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "imp"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "imp"},
            "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": "default"}]}),
    ] {
        let plural = format!("{}s", o["kind"].as_str().unwrap().to_lowercase());
        let a = common::send(
            &admin,
            "POST",
            &format!("/apis/rbac.authorization.k8s.io/v1/{plural}"),
            "application/json",
            &o,
        )
        .await;
        assert_eq!(a.code, 201, "{:?}", a.body);
    }
    let (code, msg) = get_with(&sa, "/api/v1/nodes", &[("Impersonate-User", "someone")]).await;
    assert_eq!(code, 403);
    assert_eq!(
        msg,
        "nodes is forbidden: User \"someone\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
    );
    let (code, msg) = get_with(
        &sa,
        "/api/v1/nodes",
        &[
            ("Impersonate-User", "someone"),
            ("Impersonate-Group", "devs"),
        ],
    )
    .await;
    assert_eq!(code, 403);
    assert!(
        msg.contains("cannot impersonate-on:user-info:list"),
        "{msg}"
    );
    // The access review answers as the impersonated user, with kube's reason.
    let a = send_as(
        &admin,
        "system:serviceaccount:default:nobody",
        json!({"spec": {"resourceAttributes": {"verb": "impersonate", "resource": "users", "name": "x"}}}),
    )
    .await;
    assert_eq!(
        a,
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"imp\" of ClusterRole \"imp\" to ServiceAccount \"nobody/default\""})
    );
}

/// A SelfSubjectAccessReview's status as `user` (impersonated by `admin`).
async fn send_as(admin: &kube::Client, user: &str, review: serde_json::Value) -> serde_json::Value {
    let req = http::Request::builder()
        .method("POST")
        .uri("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
        .header("content-type", "application/json")
        .header("Impersonate-User", user)
        .body(kube::client::Body::from(
            serde_json::to_vec(&review).unwrap(),
        ))
        .unwrap();
    let resp = admin.send(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let body = resp.into_body().collect_bytes().await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["status"].clone()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn set_mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

const PRIVATE: &[&str] = &[
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "ca.key",
    "server.key",
    "kubeconfig",
];

fn assert_private(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    for f in PRIVATE {
        let p = dir.join(f);
        assert!(p.exists(), "{} exists", p.display());
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
}

fn config(dir: &Path) -> Config {
    Config::new(dir, "127.0.0.1:0".parse().unwrap())
}

/// The bytes of the database and its log.
fn db_bytes(dir: &Path) -> Vec<u8> {
    ["state.db", "state.db-wal", "state.db-shm"]
        .iter()
        .flat_map(|f| std::fs::read(dir.join(f)).unwrap_or_default())
        .collect()
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

async fn node_client(h: &mco_apiserver::ServerHandle, token: &str) -> kube::Client {
    let doc = h.kubeconfig_for_token("node-worker-0", token);
    let kc = kube::config::Kubeconfig::from_yaml(&doc).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

#[tokio::test]
async fn credentials_at_rest_are_private_and_hashed_and_restarts_revoke_node_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let h = Server::start(config(&dir)).await.unwrap();
    let node = Identity::Node("worker-0".into());
    let first = h.mint_token(node.clone()).await.unwrap();
    let admin = h.client_for(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    assert_private(&dir);
    let admin_token = std::fs::read_to_string(dir.join("kubeconfig")).unwrap();
    let admin_token = admin_token
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    assert_eq!(admin_token.len(), 40);
    let bytes = db_bytes(&dir);
    assert!(
        !contains(&bytes, &admin_token),
        "the admin token in plain text"
    );
    assert!(!contains(&bytes, &first), "a node token in plain text");
    h.shutdown().await;

    // A directory opened up by hand (or by an older server) is tightened on start.
    set_mode(&dir, 0o755);
    for f in PRIVATE {
        let p = dir.join(f);
        if p.exists() {
            set_mode(&p, 0o644);
        }
    }
    let h = Server::start(config(&dir)).await.unwrap();
    assert_private(&dir);
    // The admin token stays; the node's old token works until this start mints a new one.
    let kept = std::fs::read_to_string(dir.join("kubeconfig")).unwrap();
    assert!(kept.contains(&admin_token), "the admin token is kept");
    let old = node_client(&h, &first).await;
    Api::<ConfigMap>::namespaced(old.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    let second = h.mint_token(node.clone()).await.unwrap();
    let e = common::status(
        Api::<ConfigMap>::namespaced(old, "default")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 401, "the replaced token");
    Api::<ConfigMap>::namespaced(node_client(&h, &second).await, "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    // The admin kubeconfig still works after an in-process admin client was minted.
    h.client_for(Identity::Admin).await.unwrap();
    let by_file = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(dir.join("kubeconfig")).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    Api::<ConfigMap>::namespaced(by_file, "default")
        .get("c")
        .await
        .unwrap();
    h.shutdown().await;
}

#[tokio::test]
async fn an_empty_database_file_is_refused_and_names_the_way_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    Server::start(config(&dir)).await.unwrap().shutdown().await;
    for f in ["state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    std::fs::write(dir.join("state.db"), b"").unwrap();
    let err = Server::start(config(&dir))
        .await
        .err()
        .expect("an empty state.db is refused")
        .to_string();
    let db = dir.join("state.db");
    assert!(
        err.starts_with(&format!(
            "{}: the database file is empty (0 bytes)",
            db.display()
        )) && err.contains("move it away (for example `mv DIR DIR.damaged`"),
        "{err}"
    );
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0, "left as it was");
}

#[tokio::test]
async fn a_damaged_database_names_the_file_and_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("state.db"), vec![0x5a; 8192]).unwrap();
    let err = Server::start(config(&dir))
        .await
        .err()
        .expect("garbage is refused")
        .to_string();
    assert!(
        err.starts_with(&format!(
            "{}: the database is damaged (database error: file is not a database)",
            dir.join("state.db").display()
        )) && err.contains("restore the data directory from a backup, or move it away"),
        "{err}"
    );
}
