//! A data directory of a server that stored apps/v1 workloads without their defaults: opened
//! by this one, its DaemonSet gets them once (so `kubectl rollout status` takes it), keeps its
//! resourceVersion, and a watch from the previous run's last version relists.

use crate::common::{self, Kubectl, text};

use serde_json::{Value, json};

const AGENT: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: registry.example/agent:1}]}
"#;

fn json_of(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undefaulted_daemonset_of_an_older_data_dir_rolls_out_after_the_upgrade() {
    let first = common::start().await;
    let dir = first.dir.path().to_path_buf();
    let k = Kubectl::new(&first);
    k.ok_with_stdin(&["apply", "-f", "-"], AGENT);
    // What a daemon set controller would report: every (no) pod up to date.
    k.ok(&[
        "patch",
        "ds",
        "agent",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"observedGeneration":1}}"#,
    ]);
    let stored = json_of(&k.ok(&["get", "ds", "agent", "-o", "json"]));
    let rv = stored["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    first.handle.shutdown().await;

    // As an older server left it: no strategy, no history limit, no template defaults.
    let mut old = stored.clone();
    for f in ["updateStrategy", "revisionHistoryLimit"] {
        old["spec"].as_object_mut().unwrap().remove(f);
    }
    old["spec"]["template"]["spec"] =
        json!({"containers": [{"name": "agent", "image": "registry.example/agent:1"}]});
    let db = dir.join("state.db");
    let last_rv: i64 = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let rows = conn
            .execute(
                "UPDATE events SET json = ?1 WHERE gr = 'apps/daemonsets' AND name = 'agent'",
                [old.to_string()],
            )
            .unwrap();
        assert!(rows >= 1);
        assert_eq!(
            conn.execute("DELETE FROM meta WHERE k = 'apps_defaults'", [])
                .unwrap(),
            1,
            "a new data dir is marked"
        );
        conn.query_row("SELECT v FROM meta WHERE k = 'rv'", [], |r| r.get(0))
            .unwrap()
    };

    let h = mco_apiserver::Server::start(mco_apiserver::Config::new(
        &dir,
        "127.0.0.1:0".parse().unwrap(),
    ))
    .await
    .unwrap();
    let k = Kubectl {
        kubeconfig: h.kubeconfig_path(),
        home: tempfile::tempdir().unwrap(),
    };
    let out = k.ok(&["rollout", "status", "ds/agent", "--timeout=10s"]);
    assert_eq!(out, "daemon set \"agent\" successfully rolled out\n");
    let ds = json_of(&k.ok(&["get", "ds", "agent", "-o", "json"]));
    assert_eq!(ds["spec"]["updateStrategy"]["type"], "RollingUpdate");
    assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(ds["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirst");
    assert_eq!(ds["metadata"]["resourceVersion"], rv.as_str(), "kept");
    assert_eq!(ds["metadata"]["generation"], 1);
    // The counter moved on, so that a watch of the previous run relists.
    let o = k.run(&[
        "get",
        "--raw",
        &format!("/apis/apps/v1/namespaces/default/daemonsets?watch=1&resourceVersion={last_rv}&timeoutSeconds=1"),
    ]);
    let watched = text(&o.stdout);
    assert!(
        watched.contains("\"code\":410") && watched.contains("too old resource version"),
        "{watched}{}",
        text(&o.stderr)
    );
    h.shutdown().await;
}
