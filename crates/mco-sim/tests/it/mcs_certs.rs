//! `mco up`'s projection of the serving Secret and the CA bundle against the embedded API
//! server: a change, a deletion and a re-creation reach the files from the watches, with no
//! GET of either object once the first projection is made.

use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mco_api::constants::names::SERVER_CA;
use mco_api::constants::server_certs::BUNDLE_KEY;
use mco_sim::mcs_certs::{Projector, Seen};
use mco_testkit::eventually;
use mco_testkit::server::TestServer;
use serde_json::json;

const NS: &str = "mco-system";
const NAME: &str = "mco-server-tls";

fn secret(crt: &str, key: &str) -> Secret {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    serde_json::from_value(json!({
        "metadata": {"name": NAME},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64.encode(crt), "tls.key": b64.encode(key)},
    }))
    .unwrap()
}

fn bundle_patch(bundle: &str) -> serde_json::Value {
    json!({"metadata": {"name": SERVER_CA}, "data": {BUNDLE_KEY: bundle}})
}

/// The GETs of Secrets and ConfigMaps the server answered.
async fn gets(admin: &Client) -> u64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = admin.request_text(req).await.unwrap();
    ["secrets", "configmaps"]
        .iter()
        .map(|r| {
            mco_apiserver::metrics::request_total(
                &text,
                &format!(r#"verb="GET",group="",resource="{r}",subresource="",code="200""#),
            )
        })
        .sum()
}

async fn file_is(path: &Path, want: &str) {
    eventually(&format!("{} = {want}", path.display()), 10, || async {
        (std::fs::read_to_string(path).ok()? == want).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_deleted_and_remade_secret_is_projected_from_watches_without_gets() {
    let s = TestServer::start().await;
    let admin = s.admin().await;
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    let maps: Api<ConfigMap> = Api::namespaced(admin.clone(), NS);
    secrets
        .create(&PostParams::default(), &secret("crt-1", "key-1"))
        .await
        .unwrap();
    maps.create(
        &PostParams::default(),
        &serde_json::from_value(bundle_patch("ca-1")).unwrap(),
    )
    .await
    .unwrap();

    let out = tempfile::tempdir().unwrap();
    let (dir, ca) = (out.path().join("tls"), out.path().join("ca.crt"));
    let projector = Projector::new(admin.clone(), NS, NAME, &dir, &ca);
    let mut seen = Seen::default();
    let files = projector.first(&mut seen).await.unwrap();
    assert_eq!(std::fs::read_to_string(&files.cert).unwrap(), "crt-1");
    assert_eq!(std::fs::read_to_string(&files.ca).unwrap(), "ca-1");
    let follower = tokio::spawn(projector.follow(seen));
    let before = gets(&admin).await;

    // A renewed pair, then a new bundle.
    secrets
        .replace(NAME, &PostParams::default(), &{
            let mut s = secret("crt-2", "key-2");
            s.metadata.resource_version =
                secrets.get(NAME).await.unwrap().metadata.resource_version;
            s
        })
        .await
        .unwrap();
    let after_read = gets(&admin).await;
    file_is(&files.cert, "crt-2").await;
    file_is(&files.key, "key-2").await;
    maps.patch(
        SERVER_CA,
        &PatchParams::default(),
        &Patch::Merge(&bundle_patch("ca-2")),
    )
    .await
    .unwrap();
    file_is(&files.ca, "ca-2").await;

    // Deleted, the files stay; made again, the new pair is served.
    secrets
        .delete(NAME, &DeleteParams::default())
        .await
        .unwrap();
    secrets
        .create(&PostParams::default(), &secret("crt-3", "key-3"))
        .await
        .unwrap();
    file_is(&files.cert, "crt-3").await;
    file_is(&files.key, "key-3").await;

    // Every GET since the follower started is the test's own (one, for the resourceVersion):
    // the changes reached the files by the watches, not by reading the objects again.
    let got = gets(&admin).await - before;
    assert_eq!(after_read - before, 1, "the test's own GET is counted");
    assert_eq!(
        got, 1,
        "{got} GETs of the Secret or the bundle since following"
    );
    follower.abort();
}
