//! The render controller against the embedded API server: renders on MachineConfig add, change
//! and delete; RenderDegraded on a bad config; rendered-config garbage collection.

mod common;

use common::*;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use mco_api::constants::{annotations, pool_conditions};
use mco_api::{MachineConfig, MachineConfigPool};
use serde_json::json;

async fn rendered(c: &kube::Client, name: &str) -> MachineConfig {
    Api::<MachineConfig>::all(c.clone())
        .get(name)
        .await
        .unwrap()
}

fn sources(p: &MachineConfigPool) -> Vec<String> {
    p.spec
        .configuration
        .as_ref()
        .unwrap()
        .source
        .iter()
        .map(|s| s.name.clone().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renders_on_machine_config_add_change_and_delete() {
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    let mc = rendered(c, &r0).await;
    let anns = mc.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(anns[annotations::GENERATED_BY_CONTROLLER_VERSION], "test");
    let owner = &mc.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("MachineConfigPool", "worker")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(mc.spec.os_image_url, "registry.example.com/mco/os:1.0");
    assert_eq!(sources(&pool(c, "worker").await), vec!["00-worker"]);

    // Add.
    create_mc(c, "50-worker-a", "worker", "/etc/a", "one").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    assert_eq!(
        sources(&pool(c, "worker").await),
        vec!["00-worker", "50-worker-a"]
    );

    // Change.
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    let mut changed = machine_config("50-worker-a", "worker", "/etc/a", "two");
    changed.metadata.resource_version = mcs
        .get("50-worker-a")
        .await
        .unwrap()
        .metadata
        .resource_version;
    mcs.replace("50-worker-a", &PostParams::default(), &changed)
        .await
        .unwrap();
    let r2 = target_other_than(c, "worker", Some(&r1)).await;
    assert_ne!(r2, r0);

    // Delete: back to the first content, hence the first name.
    mcs.delete("50-worker-a", &DeleteParams::default())
        .await
        .unwrap();
    let r3 = target_other_than(c, "worker", Some(&r2)).await;
    assert_eq!(r3, r0, "rendering is by content");
    let p = pool(c, "worker").await;
    assert_eq!(sources(&p), vec!["00-worker"]);
    let st = p.status.unwrap();
    assert_eq!(
        st.condition(pool_conditions::RENDER_DEGRADED)
            .unwrap()
            .status,
        "False"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_machine_config_degrades_render_and_moves_no_node_until_fixed() {
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    for i in 0..2 {
        create_node(c, &node(&format!("w{i}"), "worker", &r0)).await;
    }
    wait_updated(c, "worker", &r0, 30).await;
    let _daemons = spawn_daemons(c, Daemon::Simple);

    let mut bad = machine_config("60-worker-bad", "worker", "/etc/bad", "x");
    bad.spec.extensions = Some(vec!["bogus".into()]);
    Api::<MachineConfig>::all(c.clone())
        .create(&PostParams::default(), &bad)
        .await
        .unwrap();
    let msg = eventually("RenderDegraded", 30, || async move {
        let s = pool(c, "worker").await.status?;
        let rd = s.condition(pool_conditions::RENDER_DEGRADED)?;
        (rd.status == "True").then(|| rd.message.clone())
    })
    .await;
    assert!(
        msg.starts_with("Failed to render configuration for pool worker: "),
        "{msg}"
    );
    assert!(msg.contains("invalid extensions found: [bogus]"), "{msg}");
    let p = pool(c, "worker").await;
    assert_eq!(
        p.spec.configuration.as_ref().unwrap().name,
        r0,
        "previous target stays"
    );
    assert!(
        p.status
            .as_ref()
            .unwrap()
            .is_true(pool_conditions::DEGRADED)
    );
    for n in Api::<k8s_openapi::api::core::v1::Node>::all(c.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
    {
        assert_eq!(ann(&n, annotations::DESIRED_CONFIG), r0, "no node targeted");
    }

    // Fix it: the render succeeds, the condition clears, and the rollout goes on.
    Api::<MachineConfig>::all(c.clone())
        .patch(
            "60-worker-bad",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"extensions": ["usbguard"]}})),
        )
        .await
        .unwrap();
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    wait_updated(c, "worker", &r1, 60).await;
    let s = pool(c, "worker").await.status.unwrap();
    assert_eq!(
        s.condition(pool_conditions::RENDER_DEGRADED)
            .unwrap()
            .status,
        "False"
    );
    assert!(!s.is_true(pool_conditions::DEGRADED));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_keeps_what_is_referenced() {
    let env = env().await;
    let c = &env.client;
    // fast_config keeps the newest 2 per pool.
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    // A node stuck on r0 keeps it alive however many renders follow.
    let mut stuck = node("stuck", "worker", &r0);
    stuck.metadata.labels = Some([("role".to_string(), "none".to_string())].into());
    create_node(c, &stuck).await;

    let mut last = r0.clone();
    let mut all = vec![r0.clone()];
    for i in 0..4 {
        create_mc(
            c,
            &format!("50-worker-{i}"),
            "worker",
            &format!("/etc/f{i}"),
            "x",
        )
        .await;
        last = target_other_than(c, "worker", Some(&last)).await;
        all.push(last.clone());
    }
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    let keep = [all[0].clone(), all[3].clone(), all[4].clone()];
    let gone = [all[1].clone(), all[2].clone()];
    eventually("old rendered configs collected", 30, || {
        let (mcs, gone) = (mcs.clone(), gone.clone());
        async move {
            for g in &gone {
                if mcs.get_opt(g).await.ok()?.is_some() {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
    for k in &keep {
        assert!(mcs.get_opt(k).await.unwrap().is_some(), "{k} was collected");
    }
    assert!(mcs.get_opt("00-worker").await.unwrap().is_some());
}
