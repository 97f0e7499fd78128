//! `/openapi/v2`, which kubectl reads to validate the items of a `kind: List`: the file
//! `kubectl get -o yaml` writes applies again, and a List holding an item with an unknown
//! field or a value of the wrong type is refused client-side with kubectl's (and
//! kube-apiserver's) message, by kubectl 1.32 on `PATH` and by the versioned 1.27 and 1.33.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use http::header;
use serde_json::{Value, json};

const KUBECTL_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

fn kubectl(bin: &str, kubeconfig: &Path, home: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .output()
        .unwrap_or_else(|e| panic!("running {bin} {args:?}: {e}"))
}

fn ok(o: &Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what} failed:\nstdout: {out}\nstderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn refused(o: &Output, what: &str) -> String {
    assert!(
        !o.status.success(),
        "{what} unexpectedly succeeded: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The Google Cloud SDK's `kubectl.1.<minor>`: in its `bin/`, which also holds the `kubectl`
/// on `PATH` when that comes from the SDK.
fn versioned_kubectl(minor: u32) -> Option<String> {
    let mut dirs = vec![PathBuf::from("/usr/lib/google-cloud-sdk/bin")];
    let on_path = Command::new("sh")
        .args(["-c", "command -v kubectl"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if let Ok(bin) = std::fs::canonicalize(on_path) {
        dirs.extend(bin.parent().map(Path::to_path_buf));
    }
    dirs.into_iter()
        .map(|d| d.join(format!("kubectl.1.{minor}")))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

fn machine_config(name: &str) -> Value {
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": "worker"}},
        "spec": {"config": {"ignition": {"version": "3.2.0"}}, "kernelArguments": ["nosmt"], "fips": false}
    })
}

async fn read(client: &kube::Client, name: &str) -> Value {
    let a = common::send(
        client,
        "GET",
        &format!("/apis/machineconfiguration.openshift.io/v1/machineconfigs/{name}"),
        "application/json",
        &Value::Null,
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.body);
    a.body
}

/// A List `kubectl get -o yaml` wrote, with `from` replaced by `to` in every item.
fn edited(list: &str, from: &str, to: &str) -> String {
    let out = list.replace(from, to);
    assert_ne!(out, list, "the List has `{from}`");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_and_validates_a_list_of_machine_configs() {
    let s = common::start().await;
    let client = s.admin().await;
    mco_testkit::server::install_crds(&client).await;
    for name in ["99-a", "99-b"] {
        let a = common::send(
            &client,
            "POST",
            "/apis/machineconfiguration.openshift.io/v1/machineconfigs",
            "application/json",
            &machine_config(name),
        )
        .await;
        assert_eq!(a.code, 201, "{}", a.body);
    }
    let kc = s.kubeconfig();
    let home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();

    let in_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    let mut clients = vec![("1.32 on PATH".to_string(), "kubectl".to_string())];
    for minor in [27, 33] {
        match versioned_kubectl(minor) {
            Some(bin) => clients.push((format!("1.{minor}"), bin)),
            None => {
                // In CI a missing client fails, or this would pass having run none of them.
                assert!(!in_ci, "kubectl.1.{minor} not found (CI is set)");
                println!("note: kubectl.1.{minor} not installed; skipped");
            }
        }
    }
    for (which, bin) in &clients {
        let before = read(&client, "99-a").await;
        let list = ok(
            &kubectl(
                bin,
                &kc,
                home.path(),
                &["get", "mc", "99-a", "99-b", "-o", "yaml"],
            ),
            "get -o yaml",
        );
        assert!(list.starts_with("apiVersion: v1\nitems:"), "{list}");
        assert!(list.contains("kind: List"), "{list}");
        let file = tmp.path().join("mcs.yaml");
        std::fs::write(&file, &list).unwrap();
        let f = file.to_str().unwrap();
        let out = ok(
            &kubectl(bin, &kc, home.path(), &["apply", "-f", f]),
            &format!("kubectl {which} apply -f of the List it got"),
        );
        assert!(
            out.contains("machineconfig.machineconfiguration.openshift.io/99-a")
                && out.contains("/99-b"),
            "{which}: {out}"
        );
        let after = read(&client, "99-a").await;
        assert_eq!(
            after["spec"], before["spec"],
            "{which}: the spec is as it was"
        );
        assert_eq!(
            after["metadata"]["generation"], before["metadata"]["generation"],
            "{which}: no change of the spec"
        );

        let b_before = read(&client, "99-b").await;
        // Read again: the file carries the resourceVersion it is applied over.
        let list = ok(
            &kubectl(
                bin,
                &kc,
                home.path(),
                &["get", "mc", "99-a", "99-b", "-o", "yaml"],
            ),
            "get -o yaml",
        );
        for (from, to, message) in [
            (
                "  spec:\n",
                "  spec:\n    bogus: 1\n",
                "error validating data: ValidationError(MachineConfig.spec): unknown field \"bogus\" in io.openshift.machineconfiguration.v1.MachineConfig.spec",
            ),
            (
                "    fips: false\n",
                "    fips: \"yes\"\n",
                "error validating data: ValidationError(MachineConfig.spec.fips): invalid type for io.openshift.machineconfiguration.v1.MachineConfig.spec.fips: got \"string\", expected \"boolean\"",
            ),
        ] {
            std::fs::write(&file, edited(&list, from, to)).unwrap();
            let err = refused(
                &kubectl(bin, &kc, home.path(), &["apply", "-f", f]),
                &format!("kubectl {which} apply of a List with `{to}`"),
            );
            assert!(err.contains(message), "{which}, `{to}`: {err}");
            assert!(
                err.contains("turn validation off with --validate=false"),
                "refused client-side, by kubectl: {err}"
            );
        }
        let unchanged = read(&client, "99-b").await;
        assert_eq!(
            unchanged["metadata"]["resourceVersion"], b_before["metadata"]["resourceVersion"],
            "{which}: a refused List applies none of its items"
        );
    }
    s.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_kinds_without_schemas_is_applied_unchecked() {
    let s = common::start().await;
    let kc = s.kubeconfig();
    let home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("list.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: from-list, namespace: default}, data: {a: \"1\"}}\n",
    )
    .unwrap();
    let out = ok(
        &kubectl(
            "kubectl",
            &kc,
            home.path(),
            &["apply", "-f", file.to_str().unwrap()],
        ),
        "apply of a List of ConfigMaps",
    );
    assert!(out.contains("configmap/from-list created"), "{out}");
    s.handle.shutdown().await;
}

struct Got {
    code: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

async fn get(client: &kube::Client, accept: &str, if_none_match: Option<&str>) -> Got {
    let mut req = http::Request::builder()
        .uri("/openapi/v2")
        .header(header::ACCEPT, accept);
    if let Some(etag) = if_none_match {
        req = req.header(header::IF_NONE_MATCH, etag);
    }
    let resp = client
        .send(req.body(kube::client::Body::empty()).unwrap())
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect_bytes().await.unwrap().to_vec();
    Got {
        code,
        headers,
        body,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_negotiated_cached_and_follows_the_crds() {
    let s = common::start().await;
    let client = s.admin().await;

    let pb = get(&client, KUBECTL_PROTOBUF, None).await;
    assert_eq!(pb.code, 200);
    assert_eq!(
        pb.headers[header::CONTENT_TYPE],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    assert_eq!(pb.headers[header::VARY], "Accept");
    assert!(pb.headers.contains_key(header::LAST_MODIFIED));
    assert!(
        pb.body.starts_with(b"\x0a\x032.0"),
        "a Document message, `swagger` first"
    );
    let etag = pb.headers[header::ETAG].to_str().unwrap().to_string();

    let json = get(&client, "application/json", None).await;
    assert_eq!(json.code, 200);
    assert_eq!(json.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(
        json.headers[header::ETAG],
        etag.as_str(),
        "one ETag for both"
    );
    let doc: Value = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    assert!(
        doc["definitions"]
            .get("io.openshift.machineconfiguration.v1.MachineConfig")
            .is_none()
    );

    let cached = get(&client, KUBECTL_PROTOBUF, Some(&etag)).await;
    assert_eq!(cached.code, 304);
    assert!(cached.body.is_empty());
    assert_eq!(
        get(&client, KUBECTL_PROTOBUF, Some("\"other\"")).await.code,
        200
    );
    assert_eq!(get(&client, "text/html", None).await.code, 406);

    mco_testkit::server::install_crds(&client).await;
    let json = get(&client, "application/json", Some(&etag)).await;
    assert_eq!(json.code, 200, "a new CRD: a new document");
    assert_ne!(json.headers[header::ETAG], etag.as_str());
    let doc: Value = serde_json::from_slice(&json.body).unwrap();
    let mc = &doc["definitions"]["io.openshift.machineconfiguration.v1.MachineConfig"];
    assert_eq!(
        mc["x-kubernetes-group-version-kind"],
        json!([{"group": "machineconfiguration.openshift.io", "version": "v1", "kind": "MachineConfig"}])
    );
    assert_eq!(
        mc["properties"]["spec"]["properties"]["fips"]["type"],
        "boolean"
    );
    s.handle.shutdown().await;
}
