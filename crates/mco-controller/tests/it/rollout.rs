//! Rollouts against the embedded API server, with the test playing every node's daemon.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use mco_api::MachineConfigPool;
use mco_api::constants::{annotations, taints};
use serde_json::json;

/// Records every node change seen by a watch, the most nodes ever busy at once, and the nodes
/// that were pointed at a new config before they carried the `UpdateInProgress` taint.
struct Recorder {
    max_busy: Arc<Mutex<usize>>,
    targeted_untainted: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

fn tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == taints::UPDATE_IN_PROGRESS_KEY))
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn record(client: &kube::Client) -> Recorder {
    let api: Api<Node> = Api::all(client.clone());
    let max_busy = Arc::new(Mutex::new(0));
    let max = max_busy.clone();
    let targeted_untainted = Arc::new(Mutex::new(vec![]));
    let untainted = targeted_untainted.clone();
    let task = tokio::spawn(async move {
        let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    let desired = ann(&n, annotations::DESIRED_CONFIG);
                    let retargeted = nodes
                        .get(&name)
                        .is_some_and(|old| ann(old, annotations::DESIRED_CONFIG) != desired);
                    if retargeted && desired != ann(&n, annotations::CURRENT_CONFIG) && !tainted(&n)
                    {
                        untainted.lock().unwrap().push(name.clone());
                    }
                    nodes.insert(name, n);
                }
                Ok(watcher::Event::Delete(n)) => {
                    nodes.remove(n.metadata.name.as_deref().unwrap_or_default());
                }
                _ => continue,
            }
            let busy = nodes
                .values()
                .filter(|n| mco_rollout::plan::is_unavailable(n))
                .count();
            let mut m = max.lock().unwrap();
            *m = (*m).max(busy);
        }
    });
    Recorder {
        max_busy,
        targeted_untainted,
        task,
    }
}

async fn set_max_unavailable(c: &kube::Client, max: IntOrString) {
    Api::<MachineConfigPool>::all(c.clone())
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"maxUnavailable": max}})),
        )
        .await
        .unwrap();
}

async fn rollout_within(max: IntOrString, budget: usize) {
    let env = env().await;
    let c = &env.client;
    set_max_unavailable(c, max).await;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    for i in 0..20 {
        create_node(c, &node(&format!("w{i:02}"), "worker", &r0)).await;
    }
    eventually("20 machines counted", 30, || async move {
        let s = pool(c, "worker").await.status?;
        (s.machine_count == 20 && s.updated_machine_count == 20).then_some(())
    })
    .await;
    wait_updated(c, "worker", &r0, 30).await;

    let rec = record(c);
    let _daemons = spawn_daemons(c, Daemon::Simple);
    create_mc(c, "50-worker-extra", "worker", "/etc/extra", "x").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    wait_updated(c, "worker", &r1, 120).await;

    // The pool's status and each node's taint are separate writes, so the last node's taint may
    // come off just after the pool reports Updated: poll for it rather than read once.
    let r1_ref = &r1;
    eventually(
        "every node at the target and untainted",
        30,
        || async move {
            let nodes = Api::<Node>::all(c.clone())
                .list(&Default::default())
                .await
                .ok()?;
            nodes
                .items
                .iter()
                .all(|n| ann(n, annotations::CURRENT_CONFIG) == *r1_ref && !tainted(n))
                .then_some(())
        },
    )
    .await;
    let seen = *rec.max_busy.lock().unwrap();
    assert!(seen <= budget, "{seen} nodes busy at once, budget {budget}");
    assert!(seen >= 1, "the watch saw no node move");
    // Each node's taint went out no later than its new target: with the target's own write
    // when it had none yet, and no node was ever told to update without it.
    let untainted = rec.targeted_untainted.lock().unwrap().clone();
    assert!(
        untainted.is_empty(),
        "targeted before tainted: {untainted:?}"
    );
    let s = pool(c, "worker").await.status.unwrap();
    assert_eq!(s.updated_machine_count, 20);
    assert_eq!(s.ready_machine_count, 20);
    assert_eq!(s.unavailable_machine_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_of_20_nodes_with_max_unavailable_1() {
    rollout_within(IntOrString::Int(1), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_of_20_nodes_with_max_unavailable_3() {
    rollout_within(IntOrString::Int(3), 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_of_20_nodes_with_max_unavailable_25_percent() {
    rollout_within(IntOrString::String("25%".into()), 5).await;
}

/// The controller's client, counting its desiredConfig writes in flight: `(now, most)`.
fn counting_target_writes(c: &kube::Client) -> (kube::Client, Arc<Mutex<(usize, usize)>>) {
    let gauge = Arc::new(Mutex::new((0, 0)));
    let (inner, g) = (c.clone(), gauge.clone());
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (inner, g) = (inner.clone(), g.clone());
        async move {
            let node_write = req.method() == http::Method::PATCH
                && req.uri().path().starts_with("/api/v1/nodes/")
                && !req.uri().path().ends_with("/status");
            let body = match req.body().try_clone() {
                Some(b) if node_write => b.collect_bytes().await.unwrap_or_default(),
                _ => Default::default(),
            };
            let counted = String::from_utf8_lossy(&body).contains(annotations::DESIRED_CONFIG);
            if counted {
                let mut g = g.lock().unwrap();
                g.0 += 1;
                g.1 = g.1.max(g.0);
            }
            let res = inner.send(req).await;
            if counted {
                g.lock().unwrap().0 -= 1;
            }
            res.map_err(tower::BoxError::from)
        }
    });
    (kube::Client::new(svc, "default"), gauge)
}

/// A wave's candidates are targeted one after another: never two desiredConfig writes in
/// flight, even when the whole pool may update at once. Targeted together, a wave's nodes
/// drained, rebooted and returned together, and later waves inherited the bunching.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_is_targeted_one_node_at_a_time() {
    let env = env().await;
    let c = &env.client;
    set_max_unavailable(c, IntOrString::String("100%".into())).await;
    let (counting, gauge) = counting_target_writes(c);
    let _ctl = start_controller(&counting, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    for i in 0..20 {
        create_node(c, &node(&format!("w{i:02}"), "worker", &r0)).await;
    }
    wait_updated(c, "worker", &r0, 30).await;
    let _daemons = spawn_daemons(c, Daemon::Simple);
    create_mc(c, "50-worker-extra", "worker", "/etc/extra", "x").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    wait_updated(c, "worker", &r1, 120).await;
    let (_, most) = *gauge.lock().unwrap();
    assert_eq!(most, 1, "{most} desiredConfig writes in flight at once");
}
