//! The dashboard served against the test API server: the page lists every pool and node, a
//! MachineConfigNode change arrives on `/events`, a blocked drain and a degraded node show their
//! cause, a RolloutPolicy's halt shows its gate and message, and the token rule holds.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use mco_api::{MachineConfigNode, MachineConfigPool, RolloutPolicy};
use mco_dashboard::{Config, Error, serve};
use mco_testkit::{NodeBuilder, PoolBuilder, TestServer, eventually};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Writes a GET request; `bearer` adds the Authorization header.
async fn request(addr: SocketAddr, path: &str, bearer: Option<&str>) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", addr.port()))
        .await
        .unwrap();
    let auth = bearer
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: dash\r\nConnection: close\r\n{auth}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    s
}

/// Status code and whole response text.
async fn get(addr: SocketAddr, path: &str, bearer: Option<&str>) -> (u16, String) {
    let mut s = request(addr, path, bearer).await;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .expect("response within 10s")
        .unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

/// Reads a stream until its text so far satisfies `done`, failing after `secs`.
async fn read_until(
    s: &mut TcpStream,
    secs: u64,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut buf = [0u8; 8192];
    while !done(&text) {
        let n = tokio::time::timeout_at(deadline, s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}; got:\n{text}"))
            .unwrap();
        assert!(n > 0, "stream ended before {what}; got:\n{text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    text
}

/// The dashboard of `client` on a free loopback port, with no token.
async fn serve_loopback(client: &kube::Client) -> mco_dashboard::Dashboard {
    serve(
        client.clone(),
        Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            token: None,
            caches: None,
        },
    )
    .await
    .unwrap()
}

fn mcn(node: &str) -> MachineConfigNode {
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigNode",
        "metadata": {"name": node},
        "spec": {"node": {"name": node}, "pool": {"name": "worker"},
                 "configVersion": {"desired": "rendered-worker-b"}},
    }))
    .unwrap()
}

fn condition(type_: &str, status: &str, message: &str) -> serde_json::Value {
    json!({"type": type_, "status": status, "reason": "Test", "message": message,
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_lists_the_fleet_and_events_carry_a_phase_change() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    mco_testkit::server::install_crds(&client).await;
    let pools: Api<MachineConfigPool> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let mcns: Api<MachineConfigNode> = Api::all(client.clone());
    let pp = PostParams::default();
    for (pool, role) in [("worker", "worker"), ("master", "master")] {
        let p = PoolBuilder::new(pool)
            .role(role)
            .target(&format!("rendered-{pool}-b"));
        pools.create(&pp, &p.build()).await.unwrap();
    }
    let names = ["master-0", "worker-0", "worker-1"];
    for n in names {
        let role = if n.starts_with("master") {
            "master"
        } else {
            "worker"
        };
        let node = NodeBuilder::new(n)
            .role(role)
            .current_config("rendered-worker-a")
            .desired_config("rendered-worker-b")
            .state("Working");
        nodes.create(&pp, &node.build()).await.unwrap();
        mcns.create(&pp, &mcn(n)).await.unwrap();
    }
    mcns.patch_status(
        "worker-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"observedGeneration": 1, "conditions": [
            condition("Updated", "False", ""),
            condition("UpdatePrepared", "True", ""),
            condition("Drained", "Unknown", "Draining node"),
        ]}})),
    )
    .await
    .unwrap();

    let dash = serve_loopback(&client).await;
    let addr = dash.addr;
    assert!(dash.url().starts_with("http://127.0.0.1:"));

    // `/`: every pool and node, once the watches have synced.
    let page = eventually("every node and pool on the page", 30, || async move {
        let (code, page) = get(addr, "/", None).await;
        assert_eq!(code, 200, "{page}");
        let all = ["master-0", "worker-0", "worker-1"]
            .iter()
            .all(|n| page.contains(&format!("data-node=\"{n}\"")))
            && ["master", "worker"]
                .iter()
                .all(|p| page.contains(&format!("data-pool=\"{p}\" aria-labelledby")))
            // The MachineConfigNode watch syncs on its own time.
            && page.contains("Drained (in progress)");
        all.then_some(page)
    })
    .await;
    assert!(
        page.contains("<th scope=\"col\">UPDATEPREPARED</th>"),
        "{page}"
    );

    let (code, js) = get(addr, "/assets/app.js", None).await;
    assert_eq!(code, 200);
    assert!(js.contains("new EventSource(\"/events\")"));
    let (code, fleet) = get(addr, "/api/fleet", None).await;
    assert_eq!(code, 200);
    assert!(fleet.contains("\"worker-1\""), "{fleet}");
    let (code, _) = get(addr, "/healthz", None).await;
    assert_eq!(code, 200);

    // `/events`: the whole view first, then worker-1's phase change.
    let mut es = request(addr, "/events", None).await;
    read_until(&mut es, 10, "the first fleet event", |t| {
        t.contains("event: fleet") && t.contains("\"reset\":true")
    })
    .await;
    mcns.patch_status(
        "worker-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"observedGeneration": 1, "conditions": [
            condition("Updated", "False", ""),
            condition("UpdatePrepared", "True", ""),
            condition("RebootedNode", "Unknown", "Rebooting"),
        ]}})),
    )
    .await
    .unwrap();
    let text = read_until(&mut es, 30, "worker-1 rebooting on /events", |t| {
        t.contains("\"reset\":false") && t.contains("RebootedNode (in progress)")
    })
    .await;
    assert!(text.contains("\"name\":\"worker-1\""), "{text}");

    // Only GET.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"POST /api/fleet HTTP/1.1\r\nHost: d\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 405"));
    drop(dash);
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_drain_and_a_degraded_node_show_their_cause() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    mco_testkit::server::install_crds(&client).await;
    let pp = PostParams::default();
    let pools: Api<MachineConfigPool> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let mcns: Api<MachineConfigNode> = Api::all(client.clone());
    pools
        .create(
            &pp,
            &PoolBuilder::new("worker")
                .role("worker")
                .target("rendered-worker-b")
                .build(),
        )
        .await
        .unwrap();
    // worker-0 fails validation; worker-1's drain is refused by a budget.
    let degraded = NodeBuilder::new("worker-0")
        .role("worker")
        .current_config("rendered-worker-a")
        .desired_config("rendered-worker-b")
        .state("Degraded")
        .reason(r#"unexpected on-disk state validating against rendered-worker-a: content mismatch for file "/etc/motd""#);
    nodes.create(&pp, &degraded.build()).await.unwrap();
    let draining = NodeBuilder::new("worker-1")
        .role("worker")
        .current_config("rendered-worker-a")
        .desired_config("rendered-worker-b")
        .state("Working");
    nodes.create(&pp, &draining.build()).await.unwrap();
    mcns.create(&pp, &mcn("worker-1")).await.unwrap();

    // One ready pod behind `minAvailable: 1`: the budget allows no disruption.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    pdbs.create(
        &pp,
        &serde_json::from_value(json!({
            "metadata": {"name": "web-pdb", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &pp,
        &serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": "worker-1", "containers": [{"name": "web", "image": "web"}]},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    pods.patch_status(
        "web-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .unwrap();
    let drain_message = "Draining node. The drain will not be complete until desired drainer drain-rendered-worker-b matches current drainer uncordon-rendered-worker-a. Blocked by: pod default/web-1 (PodDisruptionBudget default/web-pdb: Cannot evict pod as it would violate the pod's disruption budget.)";
    mcns.patch_status(
        "worker-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"observedGeneration": 1, "conditions": [
            condition("Updated", "False", ""),
            condition("UpdatePrepared", "True", ""),
            condition("Cordoned", "True", ""),
            condition("Drained", "Unknown", drain_message),
        ]}})),
    )
    .await
    .unwrap();

    let dash = serve_loopback(&client).await;
    let addr = dash.addr;

    // `/api/fleet`: the drain with its pod and its budget as the PDB watch reports it.
    let fleet = eventually("worker-1's budget in /api/fleet", 30, || async move {
        let (code, text) = get(addr, "/api/fleet", None).await;
        assert_eq!(code, 200, "{text}");
        let body = &text[text.find("\r\n\r\n")? + 4..];
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        let budget = v
            .pointer("/nodes/worker-1/drain/budgets/0/budget")?
            .as_str()?;
        (budget == "disruptionsAllowed 0, healthy 1/1, minAvailable 1").then_some(v)
    })
    .await;
    let w1 = &fleet["nodes"]["worker-1"];
    assert_eq!(w1["drain"]["pods"][0]["pod"], "default/web-1", "{w1}");
    assert_eq!(w1["drain"]["budgets"][0]["pdb"], "default/web-pdb", "{w1}");
    let phases: Vec<&str> = w1["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["UpdatePrepared", "Cordoned", "Drained"], "{w1}");
    let blocked = w1["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["title"] == "drain blocked by a PodDisruptionBudget")
        .unwrap_or_else(|| panic!("no doctor finding for the drain: {w1}"));
    assert!(
        blocked["cause"]
            .as_str()
            .unwrap()
            .contains("PodDisruptionBudget default/web-pdb (minAvailable 1) allows 0 disruptions"),
        "{blocked}"
    );
    let w0 = &fleet["nodes"]["worker-0"];
    assert_eq!(w0["kind"], "degraded", "{w0}");
    assert_eq!(
        w0["findings"][0]["title"], "config drift: /etc/motd",
        "{w0}"
    );
    assert!(
        w0["findings"][0]["fixes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["command"]
                .as_str()
                .unwrap()
                .starts_with("kubectl get machineconfig rendered-worker-a")),
        "{w0}"
    );
    assert!(w0.get("drain").is_none(), "{w0}");

    // The page renders a node's detail when asked, without the script.
    let (code, page) = get(addr, "/?node=worker-1", None).await;
    assert_eq!(code, 200, "{page}");
    for needle in [
        r#"<section id="d-drain" aria-labelledby="d-drain-h"><h4"#,
        "<code>default/web-pdb</code>: <span class=\"budget\">disruptionsAllowed 0, healthy 1/1",
        "<code>default/web-1</code>",
        r#"<li data-phase="Drained">"#,
        "drain blocked by a PodDisruptionBudget",
    ] {
        assert!(page.contains(needle), "{needle} not in {page}");
    }
    let (_, page) = get(addr, "/?node=worker-0", None).await;
    assert!(
        page.contains(r#"<article class="finding"><h5>config drift: /etc/motd</h5>"#),
        "{page}"
    );

    // The budget's change travels on /events as part of the node.
    let mut es = request(addr, "/events", None).await;
    read_until(&mut es, 10, "the first fleet event", |t| {
        t.contains("\"reset\":true")
    })
    .await;
    pods.delete("web-1", &Default::default()).await.unwrap();
    read_until(&mut es, 30, "worker-1's budget with no healthy pod", |t| {
        t.contains("\"reset\":false") && t.contains("disruptionsAllowed 0, healthy 0/1")
    })
    .await;
    drop(dash);
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halted_rollout_shows_its_gate_and_message() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    mco_testkit::server::install_crds(&client).await;
    let pp = PostParams::default();
    let pools: Api<MachineConfigPool> = Api::all(client.clone());
    let policies: Api<RolloutPolicy> = Api::all(client.clone());
    for (pool, tier) in [("worker", Some("a")), ("infra", None)] {
        let mut p = PoolBuilder::new(pool)
            .role(pool)
            .target(&format!("rendered-{pool}-b"))
            .build();
        p.metadata.labels =
            tier.map(|t| [("tier".to_string(), t.to_string())].into_iter().collect());
        pools.create(&pp, &p).await.unwrap();
    }
    let policy: RolloutPolicy = serde_json::from_value(json!({
        "apiVersion": "rollouts.mco.dev/v1alpha1", "kind": "RolloutPolicy",
        "metadata": {"name": "canary-first"},
        "spec": {"poolSelector": {"matchLabels": {"tier": "a"}}, "canary": {"nodes": 1},
                 "gates": {"nodeReady": {"timeout": "5m"}, "nodeChecks": {}}},
    }))
    .unwrap();
    policies.create(&pp, &policy).await.unwrap();
    let set_status = |pool_status: serde_json::Value| {
        let policies = policies.clone();
        async move {
            policies
                .patch_status(
                    "canary-first",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"pools": [pool_status]}})),
                )
                .await
                .unwrap();
        }
    };
    set_status(
        json!({"pool": "worker", "target": "rendered-worker-b", "phase": "Canary",
                      "canaryNodes": ["worker-0"]}),
    )
    .await;

    let dash = serve_loopback(&client).await;
    let addr = dash.addr;
    let page = eventually("worker's canary rollout on the page", 30, || async move {
        let (code, page) = get(addr, "/", None).await;
        assert_eq!(code, 200, "{page}");
        page.contains(r#"<div class="rollout" data-phase="Canary">"#)
            .then_some(page)
    })
    .await;
    for needle in [
        r#"RolloutPolicy <code>canary-first</code>: <span class="phase">Canary</span>"#,
        r#"<li data-gate="nodeReady"><code>nodeReady</code> within 5m00s</li>"#,
        r#"<li data-gate="nodeChecks">"#,
        r#"<p class="canary">Canary: worker-0</p>"#,
    ] {
        assert!(page.contains(needle), "{needle} not in {page}");
    }
    let infra = &page[page.find(r#"data-pool="infra" aria-labelledby"#).unwrap()..];
    let infra = &infra[..infra.find("</section>").unwrap()];
    assert!(
        !infra.contains("rollout"),
        "no policy governs infra: {infra}"
    );

    // The halt arrives live, with the pool, on /events.
    let mut es = request(addr, "/events", None).await;
    read_until(&mut es, 10, "the first fleet event", |t| {
        t.contains("\"reset\":true")
    })
    .await;
    set_status(
        json!({"pool": "worker", "target": "rendered-worker-b", "phase": "Halted",
        "canaryNodes": ["worker-0"],
        "halt": {"node": "worker-0", "gate": "nodeChecks",
                 "message": "check 10-disk failed: <disk full>", "time": "2026-01-01T00:04:00Z"}}),
    )
    .await;
    let text = read_until(&mut es, 30, "the halt on /events", |t| {
        t.contains("\"reset\":false") && t.contains("check 10-disk failed")
    })
    .await;
    assert!(text.contains("\"gate\":\"nodeChecks\""), "{text}");

    let (code, text) = get(addr, "/api/fleet", None).await;
    assert_eq!(code, 200, "{text}");
    let v: serde_json::Value =
        serde_json::from_str(&text[text.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    let worker = v["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "worker")
        .unwrap();
    assert_eq!(worker["halted"], true, "{worker}");
    let halt = &worker["rollout"]["halt"];
    assert_eq!(halt["gate"], "nodeChecks", "{worker}");
    assert_eq!(halt["node"], "worker-0", "{worker}");
    assert_eq!(
        halt["message"], "check 10-disk failed: <disk full>",
        "{worker}"
    );
    assert_eq!(worker["rollout"]["phase"], "Halted", "{worker}");

    let (_, page) = get(addr, "/", None).await;
    for needle in [
        r#"<div class="rollout" data-phase="Halted">"#,
        r#"<p class="halt" role="alert" data-gate="nodeChecks" data-node="worker-0">Halted by gate nodeChecks on node worker-0 at 2026-01-01T00:04:00Z: <span class="msg">check 10-disk failed: &lt;disk full&gt;</span></p>"#,
        r#"<dd class="flags">halted</dd>"#,
    ] {
        assert!(page.contains(needle), "{needle} not in {page}");
    }
    drop(dash);
    server.handle.shutdown().await;
}

/// Lent caches (the controller's, in `mco up`) are read instead of the API: the page shows a
/// node only they hold, a change signalled in them reaches `/events`, and once they are
/// withdrawn the dashboard watches the server itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lent_caches_are_read_until_they_are_withdrawn() {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event as Ev;
    use mco_api::caches::{Caches, Lent, channel};
    use std::sync::Arc;

    let server = TestServer::start().await;
    let client = server.admin().await;
    mco_testkit::server::install_crds(&client).await;
    let pp = PostParams::default();
    let worker = PoolBuilder::new("worker")
        .role("worker")
        .target("rendered-worker-b")
        .build();
    Api::<MachineConfigPool>::all(client.clone())
        .create(&pp, &worker)
        .await
        .unwrap();
    let on_server = NodeBuilder::new("worker-0").role("worker").build();
    Api::<Node>::all(client.clone())
        .create(&pp, &on_server)
        .await
        .unwrap();

    // The lender's stores, written here: their node is not on the server.
    let (pools, mut pools_w) = reflector::store::<MachineConfigPool>();
    let (nodes, mut nodes_w) = reflector::store::<Node>();
    let (mcns, mut mcns_w) = reflector::store::<MachineConfigNode>();
    let (policies, mut policies_w) = reflector::store::<RolloutPolicy>();
    let mut lent_mcn = mcn("lent-0");
    let with = |m: &mut MachineConfigNode, phase: &str, message: &str| {
        m.status = Some(
            serde_json::from_value(json!({"observedGeneration": 1, "conditions": [
                condition("Updated", "False", ""),
                condition("UpdatePrepared", "True", ""),
                condition(phase, "Unknown", message),
            ]}))
            .unwrap(),
        );
    };
    with(&mut lent_mcn, "Drained", "Draining node");
    let lent_node = NodeBuilder::new("lent-0")
        .role("worker")
        .current_config("rendered-worker-a")
        .desired_config("rendered-worker-b")
        .state("Working")
        .build();
    pools_w.apply_watcher_event(&Ev::Apply(worker));
    nodes_w.apply_watcher_event(&Ev::Apply(lent_node));
    mcns_w.apply_watcher_event(&Ev::Apply(lent_mcn.clone()));
    policies_w.apply_watcher_event(&Ev::InitDone);
    let changed = Arc::new(tokio::sync::Notify::new());
    let (lender, borrower) = channel();
    let lent = Lent::new(
        &lender,
        Caches {
            nodes,
            pools,
            mcns,
            policies,
            changed: changed.clone(),
        },
    );

    let dash = serve(
        client.clone(),
        Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            token: None,
            caches: Some(borrower),
        },
    )
    .await
    .unwrap();
    let addr = dash.addr;
    let page = eventually("the lent node on the page", 30, || async move {
        let (_, page) = get(addr, "/", None).await;
        page.contains("Drained (in progress)").then_some(page)
    })
    .await;
    assert!(page.contains(r#"data-node="lent-0""#), "{page}");
    assert!(
        !page.contains(r#"data-node="worker-0""#),
        "the server's own node is not read: {page}"
    );

    let mut es = request(addr, "/events", None).await;
    read_until(&mut es, 10, "the first fleet event", |t| {
        t.contains("\"reset\":true")
    })
    .await;
    with(&mut lent_mcn, "RebootedNode", "Rebooting");
    mcns_w.apply_watcher_event(&Ev::Apply(lent_mcn));
    changed.notify_one();
    read_until(&mut es, 10, "lent-0 rebooting on /events", |t| {
        t.contains("RebootedNode (in progress)")
    })
    .await;

    drop(lent);
    eventually(
        "the server's node once the caches are withdrawn",
        30,
        || async move {
            let (_, page) = get(addr, "/", None).await;
            (page.contains(r#"data-node="worker-0""#) && !page.contains(r#"data-node="lent-0""#))
                .then_some(())
        },
    )
    .await;
    drop(lender);
    drop(dash);
    server.handle.shutdown().await;
}

/// A cluster that does not serve mco's RolloutPolicy CRD (upstream's) still gets its pools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_rollout_policy_crd_the_pools_still_show() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let server = TestServer::start().await;
    let client = server.admin().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in mco_api::crds::all() {
        if crd.spec.names.plural != "rolloutpolicies" {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
    }
    let pools: Api<MachineConfigPool> = Api::all(client.clone());
    let p = PoolBuilder::new("worker").role("worker").build();
    eventually("the pool CRD served", 20, || {
        let (pools, p) = (pools.clone(), p.clone());
        async move { pools.create(&PostParams::default(), &p).await.ok() }
    })
    .await;
    let dash = serve_loopback(&client).await;
    let addr = dash.addr;
    let page = eventually("the worker pool on the page", 30, || async move {
        let (_, page) = get(addr, "/", None).await;
        page.contains(r#"data-pool="worker" aria-labelledby"#)
            .then_some(page)
    })
    .await;
    assert!(!page.contains(r#"class="rollout""#), "{page}");
    drop(dash);
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_a_token_is_required() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let refused = serve(
        client.clone(),
        Config {
            listen: any,
            token: None,
            caches: None,
        },
    )
    .await;
    assert!(
        matches!(refused, Err(Error::TokenRequired(_))),
        "started without a token"
    );

    let dash = serve(
        client,
        Config {
            listen: any,
            token: Some("s3cret-token".into()),
            caches: None,
        },
    )
    .await
    .unwrap();
    for path in ["/", "/api/fleet", "/events", "/healthz", "/assets/app.js"] {
        let (code, text) = get(dash.addr, path, None).await;
        assert_eq!(code, 401, "{path}: {text}");
        let (code, _) = get(dash.addr, path, Some("s3cret-tokeN")).await;
        assert_eq!(code, 401, "{path} with a wrong token");
    }
    let (code, text) = get(dash.addr, "/healthz", Some("s3cret-token")).await;
    assert_eq!(code, 200, "{text}");
    let (code, text) = get(dash.addr, "/?token=s3cret-token", None).await;
    assert_eq!(code, 303, "{text}");
    assert!(
        text.contains("mco_dashboard_token=s3cret-token; HttpOnly"),
        "{text}"
    );
    drop(dash);
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_are_capped() {
    use mco_dashboard::server::{MAX_SSE_CLIENTS, router};
    let (_tx, rx) =
        tokio::sync::watch::channel(std::sync::Arc::new(mco_dashboard::view::Fleet::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let http = tokio::spawn(async move { axum::serve(listener, router(rx, None)).await });
    let mut open = Vec::new();
    for _ in 0..MAX_SSE_CLIENTS {
        let mut s = request(addr, "/events", None).await;
        read_until(&mut s, 10, "a stream's first event", |t| {
            t.contains("event: fleet")
        })
        .await;
        open.push(s);
    }
    let (code, text) = get(addr, "/events", None).await;
    assert_eq!(code, 503, "{text}");
    // A closed stream frees its place.
    drop(open.pop());
    let s = eventually("a place on /events again", 10, || async move {
        let mut s = request(addr, "/events", None).await;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await.ok()?;
        String::from_utf8_lossy(&buf[..n])
            .starts_with("HTTP/1.1 200")
            .then_some(s)
    })
    .await;
    drop(s);
    http.abort();
}
