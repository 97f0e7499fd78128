//! Lists in pages and watches from versions the server no longer holds, answered as
//! kube-apiserver answers them: continue tokens at the first page's version, 400 for a token
//! that is not one, 410 Expired once its version is gone, and 410 for a watch from before the
//! resource's events begin.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use common::{Answer, send};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use mco_apiserver::{Config, Identity, Server};
use serde_json::{Value, json};

fn cm(name: &str, v: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"paged": "yes"}},
        "data": {"v": v}
    }))
    .unwrap()
}

async fn get(client: &kube::Client, path: &str) -> Answer {
    send(client, "GET", path, "application/json", &Value::Null).await
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn token(list: &Value) -> Value {
    let c = list["metadata"]["continue"].as_str().unwrap();
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c)
        .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

fn encode(token: &Value) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.to_string())
}

const CMS: &str = "/api/v1/namespaces/paged/configmaps";

/// The namespace `paged` with the ConfigMaps `a`, `b` and `c`.
async fn abc(client: &kube::Client) -> Api<ConfigMap> {
    namespace(client, "paged").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "paged");
    for n in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &cm(n, "1"))
            .await
            .unwrap();
    }
    cms
}

async fn namespace(client: &kube::Client, name: &str) {
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

#[tokio::test]
async fn later_pages_are_read_at_the_first_pages_version() {
    let s = common::start().await;
    let client = s.admin().await;
    let cms = abc(&client).await;
    let first = get(&client, &format!("{CMS}?labelSelector=paged%3Dyes&limit=2")).await;
    assert_eq!(first.code, 200);
    assert_eq!(names(&first.body), ["a", "b"]);
    let rv = first.body["metadata"]["resourceVersion"].as_str().unwrap();
    // kube-apiserver's token: its version, and the key right after the page's last.
    assert_eq!(
        token(&first.body),
        json!({"v": "meta.k8s.io/v1", "rv": rv.parse::<i64>().unwrap(), "start": "/b\u{0}"})
    );
    // A selector narrows the list: no count of what remains.
    assert!(first.body["metadata"].get("remainingItemCount").is_none());
    let whole = get(&client, &format!("{CMS}?limit=2")).await;
    assert_eq!(names(&whole.body), ["a", "b"]);
    assert_eq!(
        whole.body["metadata"]["remainingItemCount"], 2,
        "c, kube-root-ca.crt"
    );

    // Changes between the pages are not seen by the next one.
    cms.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    cms.create(&PostParams::default(), &cm("bb", "1"))
        .await
        .unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let c = first.body["metadata"]["continue"].as_str().unwrap();
    let second = get(
        &client,
        &format!("{CMS}?labelSelector=paged%3Dyes&limit=2&continue={c}"),
    )
    .await;
    assert_eq!(second.code, 200);
    assert_eq!(names(&second.body), ["c"]);
    assert_eq!(second.body["items"][0]["data"]["v"], "1");
    assert_eq!(second.body["metadata"]["resourceVersion"], rv);
    assert!(second.body["metadata"].get("continue").is_none());
    // A new list sees them.
    let now = get(&client, &format!("{CMS}?labelSelector=paged%3Dyes")).await;
    assert_eq!(names(&now.body), ["b", "bb", "c"]);

    // `resourceVersion=0` is served whole, limit or not, as from kube-apiserver's watch cache.
    let at0 = get(
        &client,
        &format!("{CMS}?labelSelector=paged%3Dyes&limit=1&resourceVersion=0"),
    )
    .await;
    assert_eq!(names(&at0.body), ["b", "bb", "c"]);
    assert!(at0.body["metadata"].get("continue").is_none());
    // A version beside a token is refused.
    let both = get(
        &client,
        &format!("{CMS}?limit=1&continue={c}&resourceVersion=5"),
    )
    .await;
    assert_eq!(
        (both.code, both.message()),
        (
            400,
            "specifying resource version is not allowed when using continue"
        )
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn tokens_that_are_not_the_servers_are_refused_as_kube_apiserver_refuses_them() {
    let s = common::start().await;
    let client = s.admin().await;
    let bad = |t: Value| encode(&t);
    let cases = [
        (
            "notbase64!!".to_string(),
            "invalid continue token: continue key is not valid: illegal base64 data at input byte 9",
        ),
        (
            bad(json!({"v": "meta.k8s.io/v1", "rv": 0, "start": "/x"})),
            "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ),
        (
            bad(json!({"v": "meta.k8s.io/v1", "rv": 5, "start": ""})),
            "invalid continue token: continue key is not valid: encoded start key empty (version meta.k8s.io/v1)",
        ),
        (
            bad(json!({"v": "x", "rv": 5, "start": "/a"})),
            "invalid continue token: continue key is not valid: server does not recognize this encoded version x",
        ),
        (
            bad(json!({"v": "meta.k8s.io/v1", "rv": 5, "start": "/../a"})),
            "invalid continue token: continue key is not valid: /../a",
        ),
    ];
    for (t, want) in cases {
        let a = get(
            &client,
            &format!("/api/v1/namespaces/default/configmaps?limit=1&continue={t}"),
        )
        .await;
        assert_eq!((a.code, a.message()), (400, want), "token {t}");
        assert_eq!(a.body["reason"], "BadRequest");
    }
    // A version the server has not reached.
    let future = bad(json!({"v": "meta.k8s.io/v1", "rv": 1u64 << 40, "start": "/a\u{0}"}));
    let a = get(
        &client,
        &format!("/api/v1/namespaces/default/configmaps?limit=1&continue={future}"),
    )
    .await;
    assert_eq!((a.code, a.body["reason"].as_str()), (504, Some("Timeout")));
    assert!(
        a.message()
            .starts_with("Timeout: Too large resource version: 1099511627776, current: ")
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn a_token_whose_version_is_gone_answers_410_with_one_at_the_current_version() {
    let s = common::start().await;
    let client = s.admin().await;
    let cms = abc(&client).await;
    let first = get(&client, &format!("{CMS}?labelSelector=paged%3Dyes&limit=1")).await;
    let c = first.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    // As many other paged lists as are kept (the store's PAGED_LISTS): the first is still kept
    // at the limit...
    let others = 16 - 1;
    for i in 0..others {
        cms.create(&PostParams::default(), &cm(&format!("x{i:02}"), "1"))
            .await
            .unwrap();
        let p = get(&client, &format!("{CMS}?labelSelector=paged%3Dyes&limit=1")).await;
        assert!(p.body["metadata"]["continue"].is_string());
    }
    let kept = get(
        &client,
        &format!("{CMS}?labelSelector=paged%3Dyes&limit=1&continue={c}"),
    )
    .await;
    assert_eq!((kept.code, names(&kept.body)), (200, vec!["b".to_string()]));
    // ... and one more pushes it out: the resource changed since, so its version is gone.
    cms.create(&PostParams::default(), &cm("y", "1"))
        .await
        .unwrap();
    let p = get(&client, &format!("{CMS}?labelSelector=paged%3Dyes&limit=1")).await;
    assert!(p.body["metadata"]["continue"].is_string());
    let gone = get(
        &client,
        &format!("{CMS}?labelSelector=paged%3Dyes&limit=1&continue={c}"),
    )
    .await;
    assert_eq!(
        (gone.code, gone.body["reason"].as_str()),
        (410, Some("Expired"))
    );
    assert!(gone.message().starts_with(
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results."
    ));
    // Its token resumes after the same key, at the current version.
    let next = gone.body["metadata"]["continue"].as_str().unwrap();
    assert_eq!(
        token(&gone.body),
        json!({"v": "meta.k8s.io/v1", "rv": -1, "start": "/a\u{0}"})
    );
    let rest = get(
        &client,
        &format!("{CMS}?labelSelector=paged%3Dyes&continue={next}"),
    )
    .await;
    assert_eq!(rest.code, 200);
    let mut want: Vec<String> = vec!["b".into(), "c".into()];
    want.extend((0..others).map(|i| format!("x{i:02}")));
    want.push("y".into());
    assert_eq!(names(&rest.body), want);
    s.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_every_chunk() {
    let s = common::start().await;
    let client = s.admin().await;
    abc(&client).await;
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("kubectl")
        .args([
            "get",
            "configmaps",
            "-n",
            "paged",
            "-l",
            "paged=yes",
            "--chunk-size=1",
            "-o",
            "name",
        ])
        .env("KUBECONFIG", s.kubeconfig())
        .env("HOME", home.path())
        .output()
        .expect("kubectl on PATH");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "configmap/a\nconfigmap/b\nconfigmap/c\n"
    );
    s.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_lists_past_its_500_object_page() {
    let s = common::start().await;
    let client = s.admin().await;
    namespace(&client, "paged").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "paged");
    // One more than kube-rs's page.
    const N: usize = 501;
    futures::stream::iter(0..N)
        .for_each_concurrent(16, |i| {
            let cms = cms.clone();
            async move {
                cms.create(&PostParams::default(), &cm(&format!("cm-{i:03}"), "1"))
                    .await
                    .unwrap();
            }
        })
        .await;
    let cfg = watcher::Config::default().labels("paged=yes");
    let mut stream = watcher(cms.clone(), cfg).boxed();
    let mut seen = BTreeSet::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("watcher stalled")
            .expect("watcher ended")
            .expect("watcher error");
        match ev {
            watcher::Event::InitApply(o) => {
                seen.insert(o.metadata.name.unwrap());
            }
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen.len(), N);
    s.handle.shutdown().await;
}

/// The first event of a one-second watch of `path` from `rv`: its type (empty if none came), or
/// an ERROR's (code, message). kube-apiserver answers a watch from too old a version so: 200,
/// then one ERROR event.
async fn first_event(client: &kube::Client, path: &str, rv: u64) -> Result<String, (u16, String)> {
    let req = http::Request::get(format!(
        "{path}?watch=1&resourceVersion={rv}&timeoutSeconds=1"
    ))
    .body(kube::client::Body::empty())
    .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect_bytes().await.unwrap();
    let Some(line) = body.split(|b| *b == b'\n').find(|l| !l.is_empty()) else {
        return Ok(String::new());
    };
    let ev: Value = serde_json::from_slice(line).unwrap();
    match ev["type"].as_str().unwrap() {
        "ERROR" => Err((
            ev["object"]["code"].as_u64().unwrap() as u16,
            ev["object"]["message"].as_str().unwrap().to_string(),
        )),
        t => Ok(t.to_string()),
    }
}

#[tokio::test]
async fn a_custom_resource_is_watched_from_its_definition_on() {
    let s = common::start().await;
    let client = s.admin().await;
    mco_testkit::server::install_crds(&client).await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let pools = "/apis/machineconfiguration.openshift.io/v1/machineconfigpools";
    // The server marks the definition established after creating it: wait for the window to
    // start at its last version.
    let defined = common::eventually("the pools' watch window starts at their CRD", 20, || {
        let (crds, client) = (crds.clone(), client.clone());
        async move {
            let crd = crds
                .get("machineconfigpools.machineconfiguration.openshift.io")
                .await
                .unwrap();
            let defined: u64 = crd.metadata.resource_version.unwrap().parse().unwrap();
            let before = first_event(&client, pools, defined - 1).await;
            let want = format!("too old resource version: {} ({defined})", defined - 1);
            (before == Err((410, want))).then_some(defined)
        }
    })
    .await;
    assert_eq!(
        first_event(&client, pools, defined).await,
        Ok(String::new())
    );
    assert_eq!(
        first_event(&client, pools, 1).await,
        Err((410, format!("too old resource version: 1 ({defined})")))
    );
    // A watch with its initial events does not resume: it starts from the current objects.
    let wp = WatchParams::streaming_lists().timeout(1);
    let dynamic: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "machineconfiguration.openshift.io",
                "v1",
                "MachineConfigPool",
            ),
            "machineconfigpools",
        ),
    );
    let first = dynamic.watch(&wp, "1").await.unwrap().boxed().next().await;
    assert!(
        matches!(first, Some(Ok(WatchEvent::Bookmark(_)))),
        "{first:?}"
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn after_a_restart_a_watch_resumes_from_the_restart_on() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || Config::new(dir.path(), "127.0.0.1:0".parse().unwrap());
    let server = Server::start(cfg()).await.unwrap();
    let client = server.client_for(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let made = cms
        .create(&PostParams::default(), &cm("before", "1"))
        .await
        .unwrap();
    let before: u64 = made.metadata.resource_version.unwrap().parse().unwrap();
    let path = "/api/v1/namespaces/default/configmaps";
    assert_eq!(
        first_event(&client, path, before - 1).await,
        Ok("ADDED".to_string())
    );
    server.shutdown().await;

    let server = Server::start(cfg()).await.unwrap();
    let client = server.client_for(Identity::Admin).await.unwrap();
    let (code, message) = first_event(&client, path, before - 1).await.unwrap_err();
    assert_eq!(code, 410);
    // "too old resource version: <asked> (<the version the server started at>)"
    let opened: u64 = message
        .strip_prefix(&format!("too old resource version: {} (", before - 1))
        .and_then(|m| m.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{message}"))
        .parse()
        .unwrap();
    assert!(opened >= before, "{message}");
    assert_eq!(first_event(&client, path, opened).await.map(|_| ()), Ok(()));
    assert_eq!(
        first_event(&client, path, opened - 1).await.unwrap_err().0,
        410
    );
    server.shutdown().await;
}
