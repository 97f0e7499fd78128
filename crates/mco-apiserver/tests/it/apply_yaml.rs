//! How the server reads `application/apply-patch+yaml` bodies: YAML 1.2's core schema, as
//! serde_yaml did (see `mco_apimachinery::yaml`), and hostile nesting refused cheaply.

use crate::common;

use common::status;
use mco_apiserver::Identity;
use serde_json::{Value, json};

fn apply(name: &str, body: &str) -> http::Request<Vec<u8>> {
    http::Request::patch(format!(
        "/api/v1/namespaces/default/configmaps/{name}?fieldManager=yaml-test"
    ))
    .header("Content-Type", "application/apply-patch+yaml")
    .body(body.as_bytes().to_vec())
    .unwrap()
}

#[tokio::test]
async fn apply_yaml_keeps_yes_on_and_leading_zeros_as_strings() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let body = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: core-schema
  annotations: &values
    yes: yes
    on: on
    mode: 0755
    octal: '0o755'
data: *values
immutable: ~
";
    let text = client
        .request_text(apply("core-schema", body))
        .await
        .unwrap();
    let cm: Value = serde_json::from_str(&text).unwrap();
    let values = json!({"yes": "yes", "on": "on", "mode": "0755", "octal": "0o755"});
    assert_eq!(cm["data"], values);
    assert_eq!(cm["metadata"]["annotations"], values);
    assert_eq!(cm.get("immutable"), None);
    s.handle.shutdown().await;
}

#[tokio::test]
async fn apply_yaml_refuses_deep_nesting() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    let e = status(client.request_text(apply("deep", &deep)).await.unwrap_err());
    assert_eq!(e.code, 400);
    assert!(
        e.message.starts_with("error decoding YAML: "),
        "{}",
        e.message
    );

    s.handle.shutdown().await;
}

#[tokio::test]
async fn apply_yaml_reads_0o_as_octal() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    // The server does not type-check a ConfigMap's data, so the number shows as decoded.
    let body = "{apiVersion: v1, kind: ConfigMap, metadata: {name: octal}, data: {mode: 0o755}}";
    let text = client.request_text(apply("octal", body)).await.unwrap();
    let cm: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(cm["data"]["mode"], json!(493));
    s.handle.shutdown().await;
}
