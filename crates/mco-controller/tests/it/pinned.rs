//! Pinned image sets against the embedded API server: each pool's `spec.pinnedImageSets`
//! follows the sets its `machineConfigSelector` matches; the pool's `poolSynchronizersStatus`
//! counts the nodes whose MachineConfigNode has every set current; `PinnedImageSetsDegraded`;
//! and a cluster without the PinnedImageSet CRD.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, CustomResourceExt};
use mco_api::pinned::{POOL_DEGRADED, POOL_SYNCHRONIZER};
use mco_api::{MachineConfigNode, MachineConfigPool, PinnedImageSet};
use serde_json::{Value, json};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::common::*;

const ROLE: &str = "machineconfiguration.openshift.io/role";
const IMAGE: &str =
    "quay.io/openshift/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn set(name: &str, role: &str) -> PinnedImageSet {
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "PinnedImageSet",
        "metadata": {"name": name, "labels": {ROLE: role}},
        "spec": {"pinnedImages": [{"name": IMAGE}]},
    }))
    .unwrap()
}

/// The names the pool lists in `spec.pinnedImageSets`.
async fn listed(c: &kube::Client, pool_name: &str) -> Vec<String> {
    pool(c, pool_name)
        .await
        .spec
        .pinned_image_sets
        .into_iter()
        .map(|s| s.name)
        .collect()
}

/// Waits until the pool lists exactly `want`.
async fn lists(c: &kube::Client, pool_name: &str, want: &[&str]) {
    let what = format!("pool {pool_name} lists {want:?}");
    eventually(&what, 30, || async move {
        (listed(c, pool_name).await == want).then_some(())
    })
    .await;
}

/// The pool's status as JSON (the synchronizer entry is compared on the wire).
async fn status_json(c: &kube::Client, pool_name: &str) -> Value {
    let api: Api<MachineConfigPool> = Api::all(c.clone());
    let p = api.get(pool_name).await.unwrap();
    serde_json::to_value(p.status.unwrap_or_default()).unwrap()
}

fn synchronizer(machines: i64, updated: i64) -> Value {
    json!([{"poolSynchronizerType": POOL_SYNCHRONIZER, "machineCount": machines,
            "updatedMachineCount": updated, "readyMachineCount": machines,
            "availableMachineCount": machines, "unavailableMachineCount": 0}])
}

async fn synchronizer_is(c: &kube::Client, machines: i64, updated: i64) {
    let want = synchronizer(machines, updated);
    eventually(
        &format!("worker's synchronizer at {updated} of {machines}"),
        30,
        || {
            let want = want.clone();
            async move {
                (status_json(c, "worker").await["poolSynchronizersStatus"] == want).then_some(())
            }
        },
    )
    .await;
}

/// Sets the MCN's reported sets as the daemon would.
async fn report(c: &kube::Client, node: &str, sets: Value) {
    Api::<MachineConfigNode>::all(c.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"pinnedImageSets": sets}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pools_list_follows_the_sets_its_selector_matches() {
    let env = env().await;
    let c = &env.client;
    create_pool(c, "master", "master", None).await;
    let pools: Api<MachineConfigPool> = Api::all(c.clone());
    let sets: Api<PinnedImageSet> = Api::all(c.clone());
    let _ctl = start_controller(c, fast_config("a"));
    target_other_than(c, "worker", None).await;

    sets.create(&PostParams::default(), &set("web", "worker"))
        .await
        .unwrap();
    lists(c, "worker", &["web"]).await;
    assert!(listed(c, "master").await.is_empty());

    // A second set, listed in name order; one listed by hand that no selector matches is dropped.
    sets.create(&PostParams::default(), &set("cache", "worker"))
        .await
        .unwrap();
    lists(c, "worker", &["cache", "web"]).await;
    pools
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"pinnedImageSets": [{"name": "by-hand"}]}})),
        )
        .await
        .unwrap();
    lists(c, "worker", &["cache", "web"]).await;

    // Relabelled for the masters: it moves.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {ROLE: "master"}}})),
    )
    .await
    .unwrap();
    lists(c, "master", &["web"]).await;
    lists(c, "worker", &["cache"]).await;

    // Deleted: gone from the list, and no list is no field at all.
    sets.delete("web", &DeleteParams::default()).await.unwrap();
    sets.delete("cache", &DeleteParams::default())
        .await
        .unwrap();
    lists(c, "master", &[]).await;
    lists(c, "worker", &[]).await;
    let raw: Api<kube::api::DynamicObject> = Api::all_with(
        c.clone(),
        &kube::api::ApiResource::erase::<MachineConfigPool>(&()),
    );
    for name in ["worker", "master"] {
        let p = raw.get(name).await.unwrap();
        assert!(
            p.data["spec"].get("pinnedImageSets").is_none(),
            "{name}: {}",
            p.data["spec"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_synchronizer_counts_the_nodes_whose_sets_are_current() {
    let env = env().await;
    let c = &env.client;
    let ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    for n in ["w0", "w1"] {
        create_node(c, &node(n, "worker", &r0)).await;
    }
    wait_updated(c, "worker", &r0, 30).await;
    eventually("both MachineConfigNodes", 30, || async {
        let mcns = Api::<MachineConfigNode>::all(c.clone())
            .list(&ListParams::default())
            .await
            .ok()?;
        (mcns.items.len() == 2).then_some(())
    })
    .await;
    // No set reported: both count.
    synchronizer_is(c, 2, 2).await;
    let status = status_json(c, "worker").await;
    let degraded = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == POOL_DEGRADED)
        .cloned()
        .expect("a PinnedImageSetsDegraded condition");
    assert_eq!(degraded["status"], "False", "{degraded}");
    assert!(degraded.get("message").is_none(), "{degraded}");

    // w0 is pulling a new generation: it no longer counts.
    report(
        c,
        "w0",
        json!([{"name": "web", "desiredGeneration": 2, "currentGeneration": 1}]),
    )
    .await;
    synchronizer_is(c, 2, 1).await;

    // The daemon's other status writes, which leave the sets as they are, wake no pass over
    // the pool: forty of them, then one that moves the count, cost a handful of passes (the
    // resync's included), not one each.
    const UNRELATED: u64 = 40;
    let before = node_reconciles(&ctl);
    let mcns: Api<MachineConfigNode> = Api::all(c.clone());
    for i in 0..UNRELATED {
        mcns.patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"observedGeneration": i + 1}})),
        )
        .await
        .unwrap();
    }
    report(
        c,
        "w0",
        json!([{"name": "web", "desiredGeneration": 2, "currentGeneration": 2}]),
    )
    .await;
    synchronizer_is(c, 2, 2).await;
    let passes = node_reconciles(&ctl) - before;
    assert!(
        passes < UNRELATED / 4,
        "{passes} passes over the pool after {UNRELATED} MachineConfigNode writes"
    );

    // A set that failed on w1 holds it back too.
    report(
        c,
        "w1",
        json!([{"name": "web", "desiredGeneration": 2, "currentGeneration": 1,
                "lastFailedGeneration": 2, "lastFailedGenerationError": "pull failed"}]),
    )
    .await;
    synchronizer_is(c, 2, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_selector_degrades_the_pools_pinned_image_sets() {
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    target_other_than(c, "worker", None).await;
    let pools: Api<MachineConfigPool> = Api::all(c.clone());
    let condition = |c: &kube::Client| {
        let c = c.clone();
        async move {
            let s = pool(&c, "worker").await.status?;
            s.condition(POOL_DEGRADED).cloned()
        }
    };
    eventually("PinnedImageSetsDegraded=False", 30, || async {
        condition(c).await.filter(|d| d.status == "False")
    })
    .await;

    pools
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"machineConfigSelector": {"matchLabels": null,
                "matchExpressions": [{"key": ROLE, "operator": "Sometimes", "values": ["worker"]}]}}})),
        )
        .await
        .unwrap();
    let degraded = eventually("PinnedImageSetsDegraded=True", 30, || async {
        condition(c).await.filter(|d| d.status == "True")
    })
    .await;
    assert!(
        degraded
            .message
            .starts_with("Failed to populate pinned image sets for pool worker: "),
        "{degraded:?}"
    );
    assert!(degraded.message.contains("Sometimes"), "{degraded:?}");

    pools
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"machineConfigSelector": {"matchExpressions": null,
                "matchLabels": {ROLE: "worker"}}}}),
            ),
        )
        .await
        .unwrap();
    let fixed = eventually("PinnedImageSetsDegraded=False again", 30, || async {
        condition(c).await.filter(|d| d.status == "False")
    })
    .await;
    assert!(fixed.message.is_empty(), "{fixed:?}");
}

/// The controller's client, counting its requests about PinnedImageSets.
fn counting_set_requests(c: &kube::Client) -> (kube::Client, Arc<AtomicU64>) {
    let count = Arc::new(AtomicU64::new(0));
    let (inner, n) = (c.clone(), count.clone());
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (inner, n) = (inner.clone(), n.clone());
        async move {
            if req
                .uri()
                .path()
                .starts_with("/apis/machineconfiguration.openshift.io/v1/pinnedimagesets")
            {
                n.fetch_add(1, Ordering::Relaxed);
            }
            inner.send(req).await.map_err(tower::BoxError::from)
        }
    });
    (kube::Client::new(svc, "default"), count)
}

/// On a cluster without the PinnedImageSet CRD (OpenShift before 4.19) the controller runs as
/// ever, looks the kind up again rarely, and picks the sets up once the CRD is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_crd_pools_get_no_sets_until_it_is_installed() {
    let env = env().await;
    let c = &env.client;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let crd_name = PinnedImageSet::crd_name();
    crds.delete(crd_name, &DeleteParams::default())
        .await
        .unwrap();
    let sets: Api<PinnedImageSet> = Api::all(c.clone());
    eventually("PinnedImageSet no longer served", 20, || async {
        sets.list(&ListParams::default())
            .await
            .is_err()
            .then_some(())
    })
    .await;
    let (counted, lookups) = counting_set_requests(c);
    let ctl = start_controller(&counted, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    create_node(c, &node("w0", "worker", &r0)).await;
    wait_updated(c, "worker", &r0, 30).await;
    synchronizer_is(c, 1, 1).await;
    // Three resyncs (2 s each): the kind is looked up every other one, not on every pass or
    // watch retry.
    let start = node_reconciles(&ctl);
    eventually("three resyncs", 30, || async {
        (node_reconciles(&ctl) >= start + 3).then_some(())
    })
    .await;
    let lookups = lookups.load(Ordering::Relaxed);
    assert!(
        (1..=4).contains(&lookups),
        "{lookups} lookups of the missing kind"
    );
    assert!(listed(c, "worker").await.is_empty());

    // Installed: a set is listed within a lookup or two.
    crds.create(&PostParams::default(), &PinnedImageSet::crd())
        .await
        .unwrap();
    let created = eventually("PinnedImageSet served", 20, || async {
        sets.create(&PostParams::default(), &set("web", "worker"))
            .await
            .ok()
    })
    .await;
    assert_eq!(created.metadata.name.as_deref(), Some("web"));
    lists(c, "worker", &["web"]).await;
}
