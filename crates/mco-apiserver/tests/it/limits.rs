//! The server's limits hold against hostile clients: each is set small here so it is
//! reached in seconds.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::common::{self, eventually};

#[tokio::test]
async fn idle_connections_are_capped_and_closed_but_watches_stay() {
    let s = common::start_with(|mut c| {
        c.limits.max_connections = 50;
        c.limits.tls_handshake_timeout = Duration::from_secs(1);
        c.limits.idle_timeout = Duration::from_secs(1);
        c
    })
    .await;
    let client = s.admin().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // A watch outlives the idle timeout: it is a request in flight.
    let mut watch = cms
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();

    // More silent connections than the cap: none sends a byte.
    let mut idle = Vec::new();
    for _ in 0..60 {
        idle.push(
            tokio::net::TcpStream::connect(s.handle.addr())
                .await
                .unwrap(),
        );
    }
    eventually("the cap is reached", 10, || async {
        (s.handle.open_connections() == 50).then_some(())
    })
    .await;

    // A client with a token is still served: the silent ones are dropped after the
    // handshake timeout and it gets a slot.
    let fresh = s.admin().await;
    eventually("/readyz answers", 20, || {
        let fresh = fresh.clone();
        async move {
            let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
            let text = tokio::time::timeout(Duration::from_secs(5), fresh.request_text(req)).await;
            matches!(text, Ok(Ok(t)) if t == "ok").then_some(())
        }
    })
    .await;
    assert!(s.handle.open_connections() <= 50);

    // Every silent connection is closed by the server (EOF or reset).
    for (i, c) in idle.iter_mut().enumerate() {
        let mut buf = [0u8; 16];
        let r = tokio::time::timeout(Duration::from_secs(20), c.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0) | Err(_))),
            "connection {i} still open: {r:?}"
        );
    }

    // The watch's connection was not idle: it still delivers.
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
        "metadata": {"name": "after-idle"}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(ev) = watch.next().await {
            if let Ok(WatchEvent::Added(cm)) = ev
                && cm.metadata.name.as_deref() == Some("after-idle")
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the watch ended or missed the event");
    s.handle.shutdown().await;
}

/// A ConfigMap whose `x` nests so that the whole object has `levels` levels.
fn nested_cm(name: &str, levels: usize) -> Value {
    let mut v = json!({});
    for _ in 0..levels - 2 {
        v = json!({ "a": v });
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "x": v})
}

fn post(body: &Value) -> http::Request<Vec<u8>> {
    http::Request::post("/api/v1/namespaces/default/configmaps?fieldManager=deep")
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .unwrap()
}

#[tokio::test]
async fn nesting_is_refused_at_write_so_every_object_reads_back() {
    let s = common::start().await;
    let client = s.admin().await;
    let max = mco_apimachinery::validation::MAX_OBJECT_DEPTH;

    // At the limit: stored with its managedFields, and read back whole in a list, a get and
    // a watch.
    client
        .request_text(post(&nested_cm("at", max)))
        .await
        .unwrap();
    let list: Value = serde_json::from_str(
        &client
            .request_text(
                http::Request::get("/api/v1/namespaces/default/configmaps")
                    .body(Vec::new())
                    .unwrap(),
            )
            .await
            .unwrap(),
    )
    .unwrap();
    let item = &list["items"][0];
    assert_eq!(item["metadata"]["name"], "at", "{list}");
    assert!(item["metadata"]["managedFields"].is_array());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert!(cms.get("at").await.is_ok());
    // A later write keeps its metadata.
    cms.patch(
        "at",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    let got = cms.get("at").await.unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("at"));

    // One over: 422 naming the field, nothing stored.
    let e = common::status(
        client
            .request_text(post(&nested_cm("over", max + 1)))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    let path = format!("x{}", ".a".repeat(max - 1));
    assert_eq!(
        e.message,
        format!(
            "ConfigMap \"over\" is invalid: {path}: Too deep: must have at most {max} levels of nesting: exceeded max depth"
        )
    );
    assert!(cms.get_opt("over").await.unwrap().is_none());
    // A patch that would nest too deep is refused the same way.
    let mut deep = json!({});
    for _ in 0..max {
        deep = json!({ "a": deep });
    }
    let e = common::status(
        cms.patch(
            "at",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"y": deep})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422, "{e:?}");
    s.handle.shutdown().await;
}

#[tokio::test]
async fn apply_yaml_nesting_at_the_limit_and_one_over() {
    let s = common::start().await;
    let client = s.admin().await;
    let max = mco_apimachinery::yaml::MAX_DEPTH;
    // The document's mapping is level 1, `x`'s flow sequences the rest.
    let doc = |levels: usize| {
        let n = levels - 1;
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\nx: {}{}\n",
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    let apply = |body: String| {
        http::Request::patch("/api/v1/namespaces/default/configmaps/y?fieldManager=deep")
            .header("Content-Type", "application/apply-patch+yaml")
            .body(body.into_bytes())
            .unwrap()
    };
    client.request_text(apply(doc(max))).await.unwrap();
    let e = common::status(client.request_text(apply(doc(max + 1))).await.unwrap_err());
    assert_eq!(e.code, 400);
    assert!(
        e.message.starts_with("error decoding YAML: "),
        "{}",
        e.message
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn the_event_log_is_bounded_by_bytes() {
    const CAP: usize = 1024 * 1024;
    let s = common::start_with(|mut c| {
        c.limits.watch_cache_bytes = CAP;
        c
    })
    .await;
    let client = s.admin().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "churn"}})).unwrap(),
        )
        .await
        .unwrap();
    let rv0 = created.metadata.resource_version.unwrap();
    // Ten writes of 300 KiB: three times the cap, far under the count limit.
    for i in 0..10 {
        let big = format!("{i}").repeat(300 * 1024);
        cms.patch(
            "churn",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"big": big}})),
        )
        .await
        .unwrap();
        assert!(
            s.handle.watch_cache_bytes() <= CAP,
            "{} bytes held",
            s.handle.watch_cache_bytes()
        );
    }
    let events: Vec<_> = cms
        .watch(&WatchParams::default().timeout(2), &rv0)
        .await
        .unwrap()
        .collect()
        .await;
    assert!(
        matches!(events.first(), Some(Ok(WatchEvent::Error(e))) if e.code == 410),
        "a watch from before the window expires: {events:?}"
    );
    // The newest events are still there to resume from.
    let latest = cms
        .get("churn")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let prev = (latest.parse::<u64>().unwrap() - 1).to_string();
    let events: Vec<_> = cms
        .watch(&WatchParams::default().timeout(1), &prev)
        .await
        .unwrap()
        .collect()
        .await;
    assert!(
        matches!(events.first(), Some(Ok(WatchEvent::Modified(_)))),
        "{events:?}"
    );
    // The log on disk lets go of them too: it holds what the memory window holds, plus the
    // event carrying the live object's text. Ten 300 KiB events would be 3 MiB.
    let db = rusqlite::Connection::open(s.dir.path().join("state.db")).unwrap();
    let on_disk: i64 = db
        .query_row("SELECT SUM(LENGTH(json)) FROM events", [], |r| r.get(0))
        .unwrap();
    assert!(
        (on_disk as usize) <= CAP + 320 * 1024,
        "{on_disk} bytes of events on disk"
    );
    s.handle.shutdown().await;
}

/// Replaces the stored text of one ConfigMap in a stopped server's database, as an older
/// server (before the depth limit) or a damaged disk may have left it.
fn plant(dir: &std::path::Path, name: &str, edit: impl FnOnce(&str) -> String) {
    let db = rusqlite::Connection::open(dir.join("state.db")).unwrap();
    let (rv, json): (i64, String) = db
        .query_row(
            "SELECT o.rv, e.json FROM objects o JOIN events e ON e.rv = o.rv
             WHERE o.gr = '/configmaps' AND o.name = ?1",
            [name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    db.execute(
        "UPDATE events SET json = ?1 WHERE rv = ?2",
        rusqlite::params![edit(&json), rv],
    )
    .unwrap();
}

#[tokio::test]
async fn objects_stored_before_the_depth_limit_are_served_whole_and_damaged_ones_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let cfg = || mco_apiserver::Config::new(&dir, "127.0.0.1:0".parse().unwrap());
    let h = mco_apiserver::Server::start(cfg()).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(
        h.client_for(mco_apiserver::Identity::Admin).await.unwrap(),
        "default",
    );
    for name in ["deep", "damaged", "fine"] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    h.shutdown().await;

    // 140 levels: past serde_json's 128, as an object written before the limit can be.
    let levels = 140;
    plant(&dir, "deep", |json| {
        let mut v: Value = serde_json::from_str(json).unwrap();
        let mut x = json!("bottom");
        for _ in 0..levels {
            x = json!({ "a": x });
        }
        v["x"] = x;
        serde_json::to_string(&v).unwrap()
    });

    let h = mco_apiserver::Server::start(cfg()).await.unwrap();
    let client = h.client_for(mco_apiserver::Identity::Admin).await.unwrap();
    let get = |name: &str, table: bool| {
        let mut r = http::Request::get(format!("/api/v1/namespaces/default/configmaps/{name}"));
        if table {
            r = r.header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io");
        }
        r.body(Vec::new()).unwrap()
    };
    // The deep one is served whole, as JSON and as a Table row, and listed.
    let text = client.request_text(get("deep", false)).await.unwrap();
    assert!(
        text.contains("\"bottom\"") && text.contains("\"name\":\"deep\""),
        "{}",
        &text[..200.min(text.len())]
    );
    let table = client.request_text(get("deep", true)).await.unwrap();
    assert!(table.contains("\"deep\""), "{table}");
    let list = client
        .request_text(
            http::Request::get("/api/v1/namespaces/default/configmaps")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(list.contains("\"bottom\""), "the deep object is listed");
    assert!(
        !list.contains("null,") && !list.contains("[null"),
        "no item is null"
    );
    // It takes writes that keep it within the limit's reach: here, its removal.
    cms_patch(&client, "deep", json!({"x": null}))
        .await
        .unwrap();
    let text = client.request_text(get("deep", false)).await.unwrap();
    assert!(
        !text.contains("bottom") && text.contains("\"name\":\"deep\""),
        "the write kept its metadata: {text}"
    );
    h.shutdown().await;

    // Damaged text is refused at start, naming the object and the way out.
    plant(&dir, "damaged", |json| json[..json.len() / 2].to_string());
    let e = mco_apiserver::Server::start(cfg())
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("configmaps default/damaged: EOF"), "{e}");
    assert!(e.contains("mv DIR DIR.damaged"), "{e}");
    plant(&dir, "damaged", |_| {
        r#"{"metadata":{"name":"damaged","namespace":"default"}}"#.into()
    });
    let h = mco_apiserver::Server::start(cfg()).await.unwrap();
    let client = h.client_for(mco_apiserver::Identity::Admin).await.unwrap();

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // The others are untouched.
    assert_eq!(
        cms.get("fine").await.unwrap().metadata.name.as_deref(),
        Some("fine")
    );
    h.shutdown().await;
}

async fn cms_patch(
    client: &kube::Client,
    name: &str,
    patch: Value,
) -> Result<ConfigMap, kube::Error> {
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
}
