//! `kubectl create token` against the server: the TokenRequest kubectl sends as protobuf,
//! the token it answers, and kube-apiserver's refusals.

use crate::common;

use std::process::{Command, Output};

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, PostParams};
use mco_apiserver::Identity;
use serde_json::{Value, json};

fn kubectl(kubeconfig: &std::path::Path, home: &std::path::Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl {args:?}: {e}"))
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).to_string()
}

/// kubectl failed, and said `what`.
#[track_caller]
fn refused(o: &Output, what: &str) {
    let err = text(&o.stderr);
    assert!(
        !o.status.success() && err.contains(what),
        "want {what:?}, got: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let kc = s.handle.kubeconfig_path();
    let k = |args: &[&str]| kubectl(&kc, home.path(), args);

    // No such ServiceAccount: kube's 404.
    let o = k(&["create", "token", "robot"]);
    refused(&o, r#"serviceaccounts "robot" not found"#);

    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();

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
