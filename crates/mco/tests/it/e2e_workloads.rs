//! End-to-end: the embedded cluster's own workloads report their status as
//! kube-controller-manager's controllers would, so the real `kubectl get` and
//! `kubectl rollout status` see the pods the sim runs, and a drain shows as a dip in the
//! Deployment's availability and a recovery. Their specs carry kube's apps/v1 defaults.

use crate::e2e;

use e2e::*;
use serde_json::Value;

/// Seconds for the workloads to come up on a fresh cluster, and for a drain to finish.
const UP_SECS: u64 = 180;

fn deploy(c: &Cluster) -> Value {
    c.get_json(&["deploy", "web", "-n", "default"])
}

/// The `Available` condition's status and transition time.
fn available(d: &Value) -> (String, String) {
    let cond = condition(d, "Available");
    let field = |k: &str| {
        cond.and_then(|c| c[k].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    (field("status"), field("lastTransitionTime"))
}

fn rollout_status(c: &Cluster, what: &str, ns: &str) -> Result<String, String> {
    c.kubectl_try(&["rollout", "status", what, "-n", ns, "--timeout=60s"])
}

#[test]
fn workloads_report_ready_and_a_drain_dips_and_recovers() {
    let c = Cluster::up(Opts::default());
    // kubectl's READY, UP-TO-DATE and AVAILABLE columns of the Deployment.
    wait_for(
        "deploy/web 3/3 READY, 3 up to date, 3 available",
        UP_SECS,
        || {
            let out = c
                .kubectl_try(&["get", "deploy", "web", "--no-headers"])
                .ok()?;
            let cols: Vec<&str> = out.split_whitespace().collect();
            (cols.get(1..4) == Some(&["3/3", "3", "3"][..])).then_some(())
        },
    );
    let out = rollout_status(&c, "deploy/web", "default").expect("deploy/web rolled out");
    assert!(out.contains("successfully rolled out"), "{out}");
    let out = rollout_status(&c, "ds/node-agent", "kube-system").expect("ds rolled out");
    assert!(out.contains("successfully rolled out"), "{out}");

    // Every node runs its Ready daemon pod; the ReplicaSet counts the web pods.
    let nodes = c.get_json(&["nodes"])["items"].as_array().unwrap().len() as i64;
    assert_eq!(nodes, 3);
    let ds = wait_for("node-agent on every node", UP_SECS, || {
        let ds = c.get_json(&["ds", "node-agent", "-n", "kube-system"]);
        (ds["status"]["numberAvailable"].as_i64() == Some(nodes)).then_some(ds)
    });
    let st = &ds["status"];
    for k in [
        "desiredNumberScheduled",
        "currentNumberScheduled",
        "numberReady",
        "updatedNumberScheduled",
    ] {
        assert_eq!(st[k].as_i64(), Some(nodes), "{k}: {st}");
    }
    assert_eq!(st["numberMisscheduled"].as_i64(), Some(0), "{st}");
    assert_eq!(st["numberUnavailable"].as_i64(), None, "{st}");
    assert_eq!(
        st["observedGeneration"], ds["metadata"]["generation"],
        "{st}"
    );
    let rs = c.get_json(&["rs", "-n", "default", "-l", "app=web"]);
    let rs = &rs["items"][0];
    for k in [
        "replicas",
        "fullyLabeledReplicas",
        "readyReplicas",
        "availableReplicas",
    ] {
        assert_eq!(rs["status"][k].as_i64(), Some(3), "{k}: {}", rs["status"]);
    }

    // The stored specs carry apps/v1's defaults.
    let d = deploy(&c);
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
    assert_eq!(d["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirst");
    assert_eq!(
        ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        1
    );
    assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
    let progressing = condition(&d, "Progressing").cloned().unwrap_or_default();
    assert_eq!(progressing["reason"], "NewReplicaSetAvailable", "{d}");
    let (status, before) = available(&d);
    assert_eq!(status, "True", "{d}");

    // Drain a worker running a web pod: its eviction takes the Deployment below its minimum
    // (none of 3 may be down at 25%), and the replacement brings it back, so Available turns
    // True again later than it was.
    let pods = c.get_json(&["pods", "-n", "default", "-l", "app=web"]);
    let node = pods["items"][0]["spec"]["nodeName"]
        .as_str()
        .expect("a web pod on a node")
        .to_owned();
    c.kubectl(&["drain", &node, "--ignore-daemonsets", "--timeout=120s"]);
    let d = wait_for(
        "deploy/web available again after the drain",
        UP_SECS,
        || {
            let d = deploy(&c);
            let (status, since) = available(&d);
            (status == "True" && since > before && d["status"]["availableReplicas"] == 3)
                .then_some(d)
        },
    );
    assert_eq!(d["status"]["unavailableReplicas"], Value::Null, "{d}");
    let on_drained = c.get_json(&["pods", "-n", "default", "-l", "app=web"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["spec"]["nodeName"] == node.as_str() && p["metadata"]["deletionTimestamp"].is_null()
        })
        .count();
    assert_eq!(on_drained, 0, "no live web pod left on the drained {node}");
    rollout_status(&c, "deploy/web", "default").expect("deploy/web after the drain");
    c.kubectl(&["uncordon", &node]);
}

/// The web pods not being deleted, and how many of them are Running.
fn live_web_pods(c: &Cluster) -> (usize, usize) {
    let pods = c.get_json(&["pods", "-n", "default", "-l", "app=web"]);
    let live: Vec<&Value> = pods["items"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let live: Vec<&Value> = live
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    let running = live
        .iter()
        .filter(|p| p["status"]["phase"] == "Running")
        .count();
    (live.len(), running)
}

/// Waits for `n` live web pods, all Running, and for the Deployment's status to say so for its
/// current generation; then `kubectl rollout status` returns.
fn wait_scaled(c: &Cluster, n: usize) -> Value {
    let d = wait_for(&format!("{n} Running web pods"), UP_SECS, || {
        let d = deploy(c);
        let st = &d["status"];
        let count = |k: &str| st[k].as_u64().unwrap_or(0) as usize;
        let done = live_web_pods(c) == (n, n)
            && st["observedGeneration"] == d["metadata"]["generation"]
            && [
                "replicas",
                "readyReplicas",
                "availableReplicas",
                "updatedReplicas",
            ]
            .iter()
            .all(|k| count(k) == n);
        done.then_some(d)
    });
    let out = rollout_status(c, "deploy/web", "default").expect("deploy/web rolled out");
    assert!(out.contains("successfully rolled out"), "{out}");
    d
}

#[test]
fn kubectl_scale_moves_the_web_pods_and_the_statuses() {
    let c = Cluster::up(Opts::default());
    wait_scaled(&c, 3);
    let generation = deploy(&c)["metadata"]["generation"].as_i64().unwrap();

    c.kubectl(&["scale", "deploy/web", "-n", "default", "--replicas=5"]);
    let d = wait_scaled(&c, 5);
    assert!(
        d["status"]["observedGeneration"].as_i64().unwrap() > generation,
        "{d}"
    );
    assert_eq!(condition(&d, "Available").unwrap()["status"], "True", "{d}");
    let rs_of = || c.get_json(&["rs", "-n", "default", "-l", "app=web"])["items"][0].clone();
    let rs = rs_of();
    assert_eq!(rs["spec"]["replicas"], 5, "{rs}");
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"], "5",
        "{rs}"
    );

    // The ReplicaSet scaled by hand is scaled back to the Deployment's count, as the
    // deployment controller does, and the pods stay as they are.
    let rs_name = rs["metadata"]["name"].as_str().unwrap().to_owned();
    c.kubectl(&[
        "scale",
        &format!("rs/{rs_name}"),
        "-n",
        "default",
        "--replicas=7",
    ]);
    wait_for("the ReplicaSet back at 5", UP_SECS, || {
        let rs = rs_of();
        (rs["spec"]["replicas"] == 5 && rs["metadata"]["generation"].as_i64() > Some(2))
            .then_some(())
    });
    wait_scaled(&c, 5);

    c.kubectl(&["scale", "deploy/web", "-n", "default", "--replicas=3"]);
    let d = wait_scaled(&c, 3);
    assert_eq!(d["status"]["unavailableReplicas"], Value::Null, "{d}");
    assert_eq!(rs_of()["status"]["replicas"], 3);
}

/// The revisions `kubectl rollout history` lists.
fn history(c: &Cluster) -> Vec<u64> {
    let out = c.kubectl(&["rollout", "history", "deploy/web", "-n", "default"]);
    out.lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Waits for 3 live web pods, all Running `image`, and `kubectl rollout status` to return.
fn wait_rolled_out(c: &Cluster, image: &str) {
    wait_for(&format!("3 Running web pods of {image}"), UP_SECS, || {
        let pods = c.get_json(&["pods", "-n", "default", "-l", "app=web"]);
        let live: Vec<&Value> = pods["items"]
            .as_array()?
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        let done = live.len() == 3
            && live.iter().all(|p| {
                p["status"]["phase"] == "Running" && p["spec"]["containers"][0]["image"] == image
            });
        done.then_some(())
    });
    let out = rollout_status(c, "deploy/web", "default").expect("deploy/web rolled out");
    assert!(out.contains("successfully rolled out"), "{out}");
    wait_scaled(c, 3);
}

#[test]
fn set_image_rolls_out_a_new_replicaset_and_undo_rolls_it_back() {
    let c = Cluster::up(Opts::default());
    wait_scaled(&c, 3);
    let first = deploy(&c)["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = "registry.example.com/sim/web:2";
    c.kubectl(&[
        "set",
        "image",
        "deploy/web",
        "-n",
        "default",
        &format!("web={second}"),
    ]);
    wait_rolled_out(&c, second);
    let d = deploy(&c);
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2",
        "{d}"
    );
    assert_eq!(history(&c), [1, 2]);
    // Two ReplicaSets: the new one, labelled with its hash and owned by the Deployment, and
    // the old one scaled to zero and kept.
    let rss = c.get_json(&["rs", "-n", "default", "-l", "app=web"]);
    let rss = rss["items"].as_array().unwrap();
    assert_eq!(rss.len(), 2, "{rss:?}");
    let new = rss
        .iter()
        .find(|r| r["spec"]["template"]["spec"]["containers"][0]["image"] == second)
        .expect("the new ReplicaSet");
    let hash = new["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap();
    assert_eq!(new["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(new["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    assert_eq!(new["spec"]["replicas"], 3);
    let old = rss.iter().find(|r| r != &new).unwrap();
    assert_eq!(old["spec"]["replicas"], 0, "{old}");

    let out = c.kubectl(&["rollout", "undo", "deploy/web", "-n", "default"]);
    assert!(out.contains("rolled back"), "{out}");
    wait_rolled_out(&c, &first);
    assert_eq!(history(&c), [2, 3]);
    let old_name = old["metadata"]["name"].as_str().unwrap();
    let back = c.get_json(&["rs", old_name, "-n", "default"]);
    let ann = &back["metadata"]["annotations"];
    assert_eq!(ann["deployment.kubernetes.io/revision"], "3", "{back}");
    assert_eq!(
        ann["deployment.kubernetes.io/revision-history"], "1",
        "{back}"
    );
    assert_eq!(back["spec"]["replicas"], 3, "{back}");

    // A restart changes only the template's annotations: a third ReplicaSet, pods replaced.
    let before: Vec<String> = c.get_json(&["pods", "-n", "default", "-l", "app=web"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    c.kubectl(&["rollout", "restart", "deploy/web", "-n", "default"]);
    wait_rolled_out(&c, &first);
    assert_eq!(history(&c), [2, 3, 4]);
    let pods = c.get_json(&["pods", "-n", "default", "-l", "app=web"]);
    let live = pods["items"].as_array().unwrap().iter();
    for p in live.filter(|p| p["metadata"]["deletionTimestamp"].is_null()) {
        let name = p["metadata"]["name"].as_str().unwrap();
        assert!(
            !before.iter().any(|b| b == name),
            "{name} survived the restart"
        );
        let at = &p["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"];
        assert!(at.is_string(), "{p}");
    }
}
