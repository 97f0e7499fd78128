//! The node side against the embedded API server: pause, a degraded node halting the pool,
//! MachineConfigNode lifecycle, a drain blocked by a PodDisruptionBudget, and leader failover.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use mco_api::constants::{annotations, mcn_conditions, names, pool_conditions, states, taints};
use mco_api::{MachineConfigNode, MachineConfigPool};
use serde_json::json;

async fn patch_pool(c: &kube::Client, body: serde_json::Value) {
    Api::<MachineConfigPool>::all(c.clone())
        .patch("worker", &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap();
}

async fn nodes(c: &kube::Client) -> Vec<Node> {
    Api::<Node>::all(c.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
}

/// Wait until the node controller has run at least `n` more times, so a test can assert that
/// something did *not* happen.
async fn more_reconciles(r: &Running, n: u64) {
    let start = node_reconciles(r);
    eventually("node controller reconciles", 30, || async move {
        (node_reconciles(r) >= start + n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_pool_renders_but_moves_no_node_until_unpaused() {
    let env = env().await;
    let c = &env.client;
    let ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    for i in 0..3 {
        create_node(c, &node(&format!("w{i}"), "worker", &r0)).await;
    }
    wait_updated(c, "worker", &r0, 30).await;
    let _daemons = spawn_daemons(c, Daemon::Simple);
    patch_pool(c, json!({"spec": {"paused": true}})).await;
    create_mc(c, "50-worker-a", "worker", "/etc/a", "a").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    let want = format!("Pool is paused; will not update to MachineConfig {r1}");
    eventually("paused message", 30, || {
        let want = want.clone();
        async move {
            let s = pool(c, "worker").await.status?;
            let u = s.condition(pool_conditions::UPDATING)?;
            (u.status == "False" && u.message == want).then_some(())
        }
    })
    .await;
    more_reconciles(&ctl, 2).await;
    for n in nodes(c).await {
        assert_eq!(
            ann(&n, annotations::DESIRED_CONFIG),
            r0,
            "paused pool moved a node"
        );
    }
    patch_pool(c, json!({"spec": {"paused": false}})).await;
    wait_updated(c, "worker", &r1, 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_node_halts_the_pool_when_the_budget_is_used_up() {
    let env = env().await;
    let c = &env.client;
    let ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    for i in 0..3 {
        create_node(c, &node(&format!("w{i}"), "worker", &r0)).await;
    }
    wait_updated(c, "worker", &r0, 30).await;
    create_mc(c, "50-worker-a", "worker", "/etc/a", "a").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    let first = eventually("a node targeted", 30, || {
        let r1 = r1.clone();
        async move {
            nodes(c)
                .await
                .into_iter()
                .find(|n| ann(n, annotations::DESIRED_CONFIG) == r1)
                .and_then(|n| n.metadata.name)
        }
    })
    .await;
    Api::<Node>::all(c.clone())
        .patch(
            &first,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                annotations::STATE: states::DEGRADED,
                annotations::REASON: "boom",
            }}})),
        )
        .await
        .unwrap();
    let want = format!("Node {first} is reporting: \"boom\"");
    eventually("NodeDegraded", 30, || {
        let want = want.clone();
        async move {
            let s = pool(c, "worker").await.status?;
            let d = s.condition(pool_conditions::NODE_DEGRADED)?;
            (d.status == "True"
                && d.reason == "1 nodes are reporting degraded status on sync"
                && d.message == want
                && s.degraded_machine_count == 1
                && s.is_true(pool_conditions::DEGRADED))
            .then_some(())
        }
    })
    .await;
    more_reconciles(&ctl, 2).await;
    let targeted = nodes(c)
        .await
        .iter()
        .filter(|n| ann(n, annotations::DESIRED_CONFIG) == r1)
        .count();
    assert_eq!(targeted, 1, "a failing node must use up maxUnavailable=1");

    // The node recovers onto the new config; the rollout resumes.
    Api::<Node>::all(c.clone())
        .patch(
            &first,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                annotations::STATE: states::DONE,
                annotations::REASON: "",
                annotations::CURRENT_CONFIG: r1,
            }}})),
        )
        .await
        .unwrap();
    let _daemons = spawn_daemons(c, Daemon::Simple);
    wait_updated(c, "worker", &r1, 60).await;
    let s = pool(c, "worker").await.status.unwrap();
    assert_eq!(
        s.condition(pool_conditions::NODE_DEGRADED).unwrap().status,
        "False"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_node_updates_the_pool_counts_without_waiting_for_a_resync() {
    let env = env().await;
    let c = &env.client;
    // A resync far beyond the deadline below: only the deletion itself can update the counts.
    let config = mco_controller::Config {
        resync: std::time::Duration::from_secs(600),
        ..fast_config("a")
    };
    let _ctl = start_controller(c, config);
    let r0 = target_other_than(c, "worker", None).await;
    for i in 0..3 {
        create_node(c, &node(&format!("w{i}"), "worker", &r0)).await;
    }
    eventually("3 machines counted", 30, || async move {
        let s = pool(c, "worker").await.status?;
        (s.machine_count == 3 && s.ready_machine_count == 3).then_some(())
    })
    .await;
    Api::<Node>::all(c.clone())
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("2 machines counted after the delete", 10, || async move {
        let s = pool(c, "worker").await.status?;
        (s.machine_count == 2 && s.updated_machine_count == 2 && s.ready_machine_count == 2)
            .then_some(())
    })
    .await;
}

/// The caches are lent while the controller leads: they hold the cluster's nodes, each change
/// is signalled, and they are withdrawn when the controller stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caches_are_lent_while_the_controller_runs() {
    let env = env().await;
    let c = &env.client;
    let (lender, mut borrower) = mco_api::caches::channel();
    let config = mco_controller::Config {
        lend_caches: Some(lender),
        ..fast_config("a")
    };
    let ctl = start_controller(c, config);
    let r0 = target_other_than(c, "worker", None).await;
    for i in 0..2 {
        create_node(c, &node(&format!("w{i}"), "worker", &r0)).await;
    }
    let b = &borrower;
    let caches = eventually("both nodes in the lent caches", 30, || async move {
        let caches = b.borrow().clone()?;
        (caches.nodes.len() == 2 && !caches.pools.is_empty()).then_some(caches)
    })
    .await;
    Api::<Node>::all(c.clone())
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"lent": "yes"}}})),
        )
        .await
        .unwrap();
    // Signals come after the store took the change: one comes with the label stored.
    let labelled = || {
        caches
            .nodes
            .get(&kube::runtime::reflector::ObjectRef::new("w1"))
            .and_then(|n| n.metadata.labels.as_ref()?.get("lent").cloned())
            .is_some_and(|v| v == "yes")
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            caches.changed.notified().await;
            if labelled() {
                break;
            }
        }
    })
    .await
    .expect("the node change signalled within 10 s");
    drop(ctl);
    tokio::time::timeout(Duration::from_secs(10), borrower.wait_for(Option::is_none))
        .await
        .expect("withdrawn within 10 s of the controller's stop")
        .expect("the lender is still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_config_node_follows_its_node() {
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    let mut lone = node("lone", "none", "");
    lone.metadata.annotations = None;
    create_node(c, &lone).await;
    let mcns: Api<MachineConfigNode> = Api::all(c.clone());
    let mcn = eventually("MCN created", 30, || {
        let mcns = mcns.clone();
        async move { mcns.get_opt("lone").await.ok().flatten() }
    })
    .await;
    assert_eq!(mcn.spec.node.name, "lone");
    assert_eq!(mcn.spec.node_ref.as_ref().unwrap().name, "lone");
    assert_eq!(mcn.spec.pool.name, names::NOT_YET_SET);
    assert_eq!(mcn.spec.config_version.desired, names::NOT_YET_SET);
    let node_uid = Api::<Node>::all(c.clone())
        .get("lone")
        .await
        .unwrap()
        .metadata
        .uid;
    let owner = &mcn.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), Some(&owner.uid)),
        ("Node", node_uid.as_ref())
    );

    // The node joins the worker pool: the MCN's pool follows and the node is targeted.
    Api::<Node>::all(c.clone())
        .patch(
            "lone",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}}})),
        )
        .await
        .unwrap();
    eventually("MCN pool and desired follow", 30, || {
        let (mcns, r0) = (mcns.clone(), r0.clone());
        async move {
            let m = mcns.get_opt("lone").await.ok().flatten()?;
            (m.spec.pool.name == "worker" && m.spec.config_version.desired == r0).then_some(())
        }
    })
    .await;

    Api::<Node>::all(c.clone())
        .delete("lone", &DeleteParams::default())
        .await
        .unwrap();
    eventually("MCN deleted with its node", 30, || {
        let mcns = mcns.clone();
        async move { mcns.get_opt("lone").await.ok()?.is_none().then_some(()) }
    })
    .await;
}

async fn ready_pod(c: &kube::Client, name: &str, node: &str) {
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "web", "image": "web:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .unwrap();
}

fn mcn_condition(m: &MachineConfigNode, t: &str) -> Option<(String, String)> {
    let c = m.status.as_ref()?.condition(t)?;
    Some((c.status.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_blocked_by_a_budget_names_it_and_completes_once_a_replacement_is_ready() {
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    create_node(c, &node("w0", "worker", &r0)).await;
    create_node(c, &node("spare", "none", "")).await;
    wait_updated(c, "worker", &r0, 30).await;
    ready_pod(c, "web-0", "w0").await;
    ready_pod(c, "web-1", "spare").await;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web-pdb", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    Api::<PodDisruptionBudget>::namespaced(c.clone(), "default")
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();

    let _daemons = spawn_daemons(c, Daemon::Drain);
    create_mc(c, "50-worker-a", "worker", "/etc/a", "a").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    let mcns: Api<MachineConfigNode> = Api::all(c.clone());
    let msg = eventually("drain blocked, named in the MCN", 60, || {
        let mcns = mcns.clone();
        async move {
            let m = mcns.get_opt("w0").await.ok().flatten()?;
            let (status, msg) = mcn_condition(&m, mcn_conditions::DRAINED)?;
            (status == "Unknown" && msg.contains("PodDisruptionBudget")).then_some(msg)
        }
    })
    .await;
    assert!(msg.contains("PodDisruptionBudget default/web-pdb"), "{msg}");
    assert!(msg.contains("pod default/web-0"), "{msg}");
    let m = mcns.get("w0").await.unwrap();
    assert_eq!(
        mcn_condition(&m, mcn_conditions::CORDONED),
        Some((
            "True".into(),
            "Cordoned node. The node is reporting Unschedulable = true".into()
        ))
    );
    let w0 = Api::<Node>::all(c.clone()).get("w0").await.unwrap();
    assert_eq!(w0.spec.unwrap().unschedulable, Some(true));

    // Someone uncordons the node while the drain waits: once the eviction goes through, the
    // drain starts over (cordons again) rather than answering on a schedulable node.
    let (seen, record) = record_node(c, "w0");
    Api::<Node>::all(c.clone())
        .patch(
            "w0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"unschedulable": false}})),
        )
        .await
        .unwrap();
    eventually("the manual uncordon seen", 30, || async {
        seen.lock()
            .unwrap()
            .iter()
            .any(|s| !s.cordoned)
            .then_some(())
    })
    .await;

    // A replacement becomes Ready elsewhere: the budget allows the eviction.
    ready_pod(c, "web-2", "spare").await;
    wait_updated(c, "worker", &r1, 60).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    assert!(
        pods.get_opt("web-0").await.unwrap().is_none(),
        "web-0 evicted"
    );
    assert!(pods.get_opt("web-1").await.unwrap().is_some());
    let w0 = Api::<Node>::all(c.clone()).get("w0").await.unwrap();
    assert_ne!(
        w0.spec.as_ref().unwrap().unschedulable,
        Some(true),
        "uncordoned"
    );
    assert_eq!(
        ann(&w0, annotations::LAST_APPLIED_DRAIN),
        format!("uncordon-{r1}")
    );
    let m = mcns.get("w0").await.unwrap();
    assert_eq!(
        mcn_condition(&m, mcn_conditions::UNCORDONED),
        Some((
            "True".into(),
            "UnCordoned node. The node is reporting Unschedulable = false".into()
        ))
    );
    record.abort();
    let seen = seen.lock().unwrap().clone();
    let manual = seen.iter().position(|s| !s.cordoned).unwrap();
    let answered = seen
        .iter()
        .position(|s| s.answer == format!("drain-{r1}"))
        .expect("the drain was answered");
    assert!(answered > manual, "{seen:?}");
    assert!(
        seen[answered].cordoned,
        "answered on a cordoned node: {seen:?}"
    );
    let drained = mcn_condition(&m, mcn_conditions::DRAINED).unwrap();
    assert_eq!(drained.0, "True");
    assert_eq!(
        drained.1,
        format!(
            "Drained node. The drain is complete as the desired drainer matches current drainer: drain-{r1}"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_when_the_leader_dies_and_the_rollout_finishes() {
    let env = env().await;
    let c = &env.client;
    patch_pool(c, json!({"spec": {"maxUnavailable": 1}})).await;
    let a = start_controller(c, fast_config("a"));
    let b = start_controller(c, fast_config("b"));
    let r0 = target_other_than(c, "worker", None).await;
    for i in 0..4 {
        create_node(c, &node(&format!("w{i}"), "worker", &r0)).await;
    }
    wait_updated(c, "worker", &r0, 30).await;
    let (leader, standby) = if a.metrics.leader.get() == 1 {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(leader.metrics.leader.get(), 1);
    assert_eq!(standby.metrics.leader.get(), 0, "only one leader");

    let _daemons = spawn_daemons(c, Daemon::Simple);
    create_mc(c, "50-worker-a", "worker", "/etc/a", "a").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    eventually("first node updated", 30, || {
        let r1 = r1.clone();
        async move {
            let n = nodes(c).await;
            n.iter()
                .any(|n| ann(n, annotations::CURRENT_CONFIG) == r1)
                .then_some(())
        }
    })
    .await;
    leader.kill();
    eventually("standby leads", 30, || async {
        (standby.metrics.leader.get() == 1).then_some(())
    })
    .await;
    wait_updated(c, "worker", &r1, 60).await;
}

/// Every version of node `name` a watch delivers, as (lastAppliedDrain, cordoned).
/// What one watched version of a node says about its drain.
#[derive(Debug, Clone)]
struct Seen {
    answer: String,
    cordoned: bool,
    tainted: bool,
}

type NodeLog = std::sync::Arc<std::sync::Mutex<Vec<Seen>>>;

fn record_node(c: &kube::Client, name: &str) -> (NodeLog, tokio::task::JoinHandle<()>) {
    let nodes: Api<Node> = Api::all(c.clone());
    let seen = NodeLog::default();
    let out = seen.clone();
    let cfg = kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"));
    let task = tokio::spawn(async move {
        use futures::StreamExt;
        let mut s = std::pin::pin!(kube::runtime::watcher::watcher(nodes, cfg));
        while let Some(ev) = s.next().await {
            use kube::runtime::watcher::Event;
            let Ok(Event::Apply(n) | Event::InitApply(n)) = ev else {
                continue;
            };
            let spec = n.spec.clone().unwrap_or_default();
            let list = spec.taints.unwrap_or_default();
            out.lock().unwrap().push(Seen {
                answer: ann(&n, annotations::LAST_APPLIED_DRAIN).to_string(),
                cordoned: spec.unschedulable == Some(true),
                tainted: list.iter().any(|t| t.key == taints::UPDATE_IN_PROGRESS_KEY),
            });
        }
    });
    (seen, task)
}

/// A running controller, and one worker `w0` updated to the returned config with its MCN made.
async fn one_node_with_its_mcn(c: &kube::Client) -> (Running, String) {
    let ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    create_node(c, &node("w0", "worker", &r0)).await;
    wait_updated(c, "worker", &r0, 30).await;
    eventually("the MCN exists", 30, || async {
        Api::<MachineConfigNode>::all(c.clone())
            .get_opt("w0")
            .await
            .ok()?
            .map(|_| ())
    })
    .await;
    (ctl, r0)
}

/// A drain with nothing to evict and its uncordon cost two MCN condition writes (cordoned and
/// drained together, uncordoned), and the uncordon is the same Node write as its
/// answer, so no reader sees the answer before the node is schedulable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_and_its_uncordon_write_few_times() {
    const WRITES: &str = r#"verb="PUT",group="machineconfiguration.openshift.io",resource="machineconfignodes",subresource="status",code="200""#;
    let env = env().await;
    let c = &env.client;
    let (_ctl, r0) = one_node_with_its_mcn(c).await;
    let before = requests(c, WRITES).await;
    let (seen, record) = record_node(c, "w0");

    let _daemons = spawn_daemons(c, Daemon::Drain);
    create_mc(c, "50-worker-a", "worker", "/etc/a", "a").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    wait_updated(c, "worker", &r1, 60).await;
    eventually("two condition writes", 30, || async {
        (requests(c, WRITES).await >= before + 2).then_some(())
    })
    .await;
    record.abort();
    assert_eq!(requests(c, WRITES).await - before, 2);
    let mcn = Api::<MachineConfigNode>::all(c.clone())
        .get("w0")
        .await
        .unwrap();
    let drained = mcn
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Drained")
        .expect("a Drained condition");
    assert_eq!(drained.status, "True", "{drained:?}");
    assert!(
        drained.message.ends_with(&format!("drain-{r1}")),
        "{drained:?}"
    );
    let seen = seen.lock().unwrap().clone();
    let uncordon = format!("uncordon-{r1}");
    assert!(
        seen.iter().any(|s| s.answer == uncordon),
        "the uncordon answer was seen: {seen:?}"
    );
    assert!(
        seen.iter().all(|s| s.answer != uncordon || !s.cordoned),
        "answered while still cordoned: {seen:?}"
    );
    assert!(
        seen.iter().all(|s| s.answer != uncordon || !s.tainted),
        "the uncordon answer drops the UpdateInProgress taint in the same write: {seen:?}"
    );
    assert!(
        seen.iter().any(|s| s.tainted),
        "the node was tainted during its update: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|s| s.answer == format!("drain-{r1}") && s.cordoned),
        "the drain answer comes on a cordoned node: {seen:?}"
    );
}

/// The first pass of a rollout points the candidates at the target and taints every member:
/// each taint write is conditional on the version the pass read, which for a candidate is the
/// one its desiredConfig write returned, so no write meets a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollouts_taint_writes_meet_no_conflict() {
    const CONFLICTS: &str = r#"verb="PATCH",group="",resource="nodes",subresource="",code="409""#;
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    for i in 0..6 {
        create_node(c, &node(&format!("w{i}"), "worker", &r0)).await;
    }
    wait_updated(c, "worker", &r0, 30).await;
    patch_pool(c, json!({"spec": {"maxUnavailable": 3}})).await;
    create_mc(c, "50-worker-a", "worker", "/etc/a", "a").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    let tainted = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "UpdateInProgress"))
    };
    eventually("3 targeted, all 6 tainted", 30, || {
        let (r0, r1) = (r0.clone(), r1.clone());
        async move {
            let all = nodes(c).await;
            let targeted = all
                .iter()
                .filter(|n| ann(n, annotations::DESIRED_CONFIG) == r1)
                .count();
            let workers = all
                .iter()
                .filter(|n| ann(n, annotations::CURRENT_CONFIG) == r0);
            (targeted == 3 && workers.clone().count() == 6 && workers.into_iter().all(tainted))
                .then_some(())
        }
    })
    .await;
    assert_eq!(requests(c, CONFLICTS).await, 0);
}

/// An uncordon's conditions go beside its answer, so they must never land after the daemon's
/// `Updated=True`, which closes the update and resets them: asked to uncordon a node whose MCN
/// already says Updated, the controller answers and leaves the conditions as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncordon_never_writes_its_conditions_over_a_closed_update() {
    let status_writes = |c: kube::Client| async move {
        let mut n = 0;
        for verb in ["PUT", "PATCH"] {
            let labels = format!(
                r#"verb="{verb}",group="machineconfiguration.openshift.io",resource="machineconfignodes",subresource="status",code="200""#
            );
            n += requests(&c, &labels).await;
        }
        n
    };
    let env = env().await;
    let c = &env.client;
    let (_ctl, r0) = one_node_with_its_mcn(c).await;
    let mcns: Api<MachineConfigNode> = Api::all(c.clone());
    // The daemon's reset: Updated True, every phase False.
    let conditions: Vec<serde_json::Value> = mcn_conditions::ALL
        .iter()
        .map(|t| {
            let status = if *t == mcn_conditions::UPDATED {
                "True"
            } else {
                "False"
            };
            json!({"type": t, "status": status, "reason": t, "message": format!("{t} reset"),
                   "lastTransitionTime": "2026-01-01T00:00:00Z"})
        })
        .collect();
    mcns.patch_status(
        "w0",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"conditions": conditions}})),
    )
    .await
    .unwrap();
    let before = status_writes(c.clone()).await;

    let uncordon = format!("uncordon-{r0}");
    let nodes: Api<Node> = Api::all(c.clone());
    nodes
        .patch(
            "w0",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {annotations::DESIRED_DRAIN: uncordon}}}),
            ),
        )
        .await
        .unwrap();
    eventually("the uncordon answered", 30, || async {
        let n = nodes.get("w0").await.ok()?;
        (ann(&n, annotations::LAST_APPLIED_DRAIN) == uncordon).then_some(())
    })
    .await;
    let m = mcns.get("w0").await.unwrap();
    assert_eq!(
        mcn_condition(&m, mcn_conditions::UNCORDONED),
        Some(("False".into(), "Uncordoned reset".into())),
        "the closed update's conditions stand"
    );
    assert_eq!(status_writes(c.clone()).await, before, "no status write");
}
