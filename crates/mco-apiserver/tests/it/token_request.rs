//! `kubectl create token` against the server: the TokenRequest kubectl sends as protobuf,
//! the token it answers, kube-apiserver's refusals, and the tokens across a restart.

use crate::common::{Cluster, Kubectl, text};

use std::process::Output;

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// kubectl failed, and said `what`.
#[track_caller]
fn refused(o: &Output, what: &str) {
    let err = text(&o.stderr);
    assert!(
        !o.status.success() && err.contains(what),
        "want {what:?}, got: {err}"
    );
}

/// The ServiceAccount `default/robot`.
async fn robot(client: &kube::Client) {
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token() {
    let c = Cluster::start().await;
    let client = c.client.clone();
    let k = |args: &[&str]| c.kubectl.run(args);

    // No such ServiceAccount: kube's 404.
    let o = k(&["create", "token", "robot"]);
    refused(&o, r#"serviceaccounts "robot" not found"#);

    robot(&client).await;

    // The token authenticates as the account: RBAC refuses it by that name.
    let o = k(&["create", "token", "robot"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let token = text(&o.stdout).trim().to_string();
    let o = k(&["--token", &token, "get", "configmaps"]);
    refused(
        &o,
        r#"User "system:serviceaccount:default:robot" cannot list resource "configmaps""#,
    );
    // A token the server never issued is not authenticated at all.
    let o = k(&["--token", "not-issued", "get", "configmaps"]);
    refused(&o, "Unauthorized");

    // Expiry: the default, the minimum, one second under it.
    let o = k(&["create", "token", "robot", "-o", "json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["spec"]["expirationSeconds"], json!(3600), "{v}");
    assert!(
        k(&["create", "token", "robot", "--duration=10m"])
            .status
            .success()
    );
    let o = k(&["create", "token", "robot", "--duration=599s"]);
    refused(
        &o,
        "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes",
    );

    // Bound objects: a missing one is 404, a stale uid 409.
    let o = k(&[
        "create",
        "token",
        "robot",
        "--bound-object-kind=Secret",
        "--bound-object-name=gone",
    ]);
    refused(&o, r#"secrets "gone" not found"#);
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "held"}})).unwrap();
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let o = k(&[
        "create",
        "token",
        "robot",
        "--bound-object-kind=Secret",
        "--bound-object-name=held",
        "--bound-object-uid=stale",
    ]);
    refused(
        &o,
        "the UID in the bound object reference (stale) does not match the UID in record",
    );
    let o = k(&[
        "create",
        "token",
        "robot",
        "--bound-object-kind=Secret",
        "--bound-object-name=held",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let bound = text(&o.stdout).trim().to_string();
    assert!(
        text(&k(&["--token", &bound, "get", "configmaps"]).stderr)
            .contains("system:serviceaccount:default:robot")
    );
    // Deleting the Secret ends its token.
    assert!(k(&["delete", "secret", "held"]).status.success());
    let o = k(&["--token", &bound, "get", "configmaps"]);
    refused(&o, "Unauthorized");
}

/// `kubectl auth whoami` with `token`: the user it authenticates as, or `None` when the server
/// answers Unauthorized.
fn whoami(k: &dyn Fn(&[&str]) -> Output, token: &str) -> Option<Value> {
    let o = k(&["--token", token, "auth", "whoami", "-o", "json"]);
    if o.status.success() {
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        return Some(v["status"]["userInfo"].clone());
    }
    refused(&o, "Unauthorized");
    None
}

/// kube's service account tokens are signed and outlive a restart of kube-apiserver; these
/// are kept in the data directory (as digests) and do too, until they expire or their bound
/// object is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issued_tokens_outlive_a_restart() {
    let c = Cluster::start().await;
    let dir = c.server.dir.path().to_path_buf();
    let client = c.client.clone();
    let k = |args: &[&str]| c.kubectl.run(args);
    robot(&client).await;
    let secrets = Api::<Secret>::namespaced(client.clone(), "default");
    for name in ["held", "gone"] {
        let secret: Secret = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    let create = |args: &[&str]| {
        let o = k(&[&["create", "token", "robot"], args].concat());
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout).trim().to_string()
    };
    let plain = create(&[]);
    let expiring = create(&["--duration=10m"]);
    let held = create(&["--bound-object-kind=Secret", "--bound-object-name=held"]);
    let gone = create(&["--bound-object-kind=Secret", "--bound-object-name=gone"]);
    let before: Vec<Value> = [&plain, &expiring, &held, &gone]
        .into_iter()
        .map(|t| whoami(&k, t).expect("authenticates before the restart"))
        .collect();
    assert_eq!(before[0]["username"], "system:serviceaccount:default:robot");
    let credential = |u: &Value| u["extra"]["authentication.kubernetes.io/credential-id"].clone();
    assert!(
        credential(&before[0])[0]
            .as_str()
            .is_some_and(|c| c.starts_with("JTI=")),
        "{}",
        before[0]
    );
    assert_ne!(credential(&before[0]), credential(&before[2]));
    // Deleted while the server runs, before the restart.
    assert!(k(&["delete", "secret", "gone"]).status.success());
    assert_eq!(whoami(&k, &gone), None);
    c.server.handle.shutdown().await;

    // While the server is down, the clock passes the short token's expiry.
    let db = dir.join("state.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let digest = mco_apiserver::store::token_digest(&expiring);
        let now = jiff::Timestamp::now().as_second();
        let changed = conn
            .execute(
                "UPDATE issued_tokens SET expires_at = ?1 WHERE token = ?2",
                rusqlite::params![now - 1, digest],
            )
            .unwrap();
        assert_eq!(changed, 1, "the token is stored by its digest");
    }

    let h = mco_apiserver::Server::start(mco_apiserver::Config::new(
        &dir,
        "127.0.0.1:0".parse().unwrap(),
    ))
    .await
    .unwrap();
    let after = Kubectl::for_handle(&h);
    let k = |args: &[&str]| after.run(args);
    // The same user, down to the credential's id.
    assert_eq!(whoami(&k, &plain).as_ref(), Some(&before[0]));
    assert_eq!(whoami(&k, &held).as_ref(), Some(&before[2]));
    assert_eq!(
        whoami(&k, &expiring),
        None,
        "expired while the server was down"
    );
    assert_eq!(whoami(&k, &gone), None, "its Secret was deleted");
    let o = k(&["--token", &held, "get", "configmaps"]);
    refused(
        &o,
        r#"User "system:serviceaccount:default:robot" cannot list resource "configmaps""#,
    );
    // The expired token's row was dropped at the start.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM issued_tokens", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 3);
    // Deleting the bound Secret after the restart ends its token too.
    assert!(k(&["delete", "secret", "held"]).status.success());
    assert_eq!(whoami(&k, &held), None);
    h.shutdown().await;
}
