//! The render controller against the embedded API server: renders on MachineConfig add, change
//! and delete; RenderDegraded on a bad config; rendered-config garbage collection.

use crate::common::*;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreconcilable_change_is_refused_at_render_time() {
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    let mut fips = machine_config("70-worker-fips", "worker", "/etc/fips", "x");
    fips.spec.fips = true;
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    mcs.create(&PostParams::default(), &fips).await.unwrap();
    let msg = eventually(
        "RenderDegraded for an unreconcilable change",
        30,
        || async move {
            let s = pool(c, "worker").await.status?;
            let rd = s.condition(pool_conditions::RENDER_DEGRADED)?;
            (rd.status == "True").then(|| rd.message.clone())
        },
    )
    .await;
    assert!(
        msg.starts_with("Failed to render configuration for pool worker: "),
        "{msg}"
    );
    assert!(msg.contains("not reconcilable"), "{msg}");
    assert_eq!(pool(c, "worker").await.spec.configuration.unwrap().name, r0);

    // Removing the bad MC clears the condition.
    mcs.delete("70-worker-fips", &DeleteParams::default())
        .await
        .unwrap();
    eventually("RenderDegraded cleared", 30, || async move {
        let s = pool(c, "worker").await.status?;
        let rd = s.condition(pool_conditions::RENDER_DEGRADED)?;
        (rd.status == "False").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_metrics_and_probes() {
    let env = env().await;
    let c = &env.client;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = fast_config("a");
    cfg.metrics_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
    let _ctl = start_controller(c, cfg);
    let r0 = target_other_than(c, "worker", None).await;
    create_node(c, &node("w0", "worker", &r0)).await;
    wait_updated(c, "worker", &r0, 30).await;

    let get = |path: &'static str| async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        Some(out)
    };
    let health = eventually("/healthz", 10, || get("/healthz")).await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let ready = get("/readyz").await.unwrap();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    // A reconcile is counted when it ends, and the render reconcile that set the target may
    // still be writing the pool's status when the pool gauges show the node: wait for all.
    let wants = [
        r#"mco_machine_count{pool="worker"} 1"#,
        r#"mco_updated_machine_count{pool="worker"} 1"#,
        r#"mco_degraded_machine_count{pool="worker"} 0"#,
        r#"mco_unavailable_machine_count{pool="worker"} 0"#,
        r#"mcc_reconcile_total{controller="render"}"#,
        "mcc_reconcile_duration_seconds_bucket",
    ];
    eventually(&format!("metrics {wants:?}"), 30, || async move {
        let m = get("/metrics").await?;
        wants.iter().all(|w| m.contains(w)).then_some(())
    })
    .await;

    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(c.clone());
    let ev = eventually("RenderedConfigGenerated event", 30, || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("RenderedConfigGenerated"))
        }
    })
    .await;
    // The pool is cluster-scoped: its event is in mco's namespace, which its reference names,
    // as upstream's are in its own.
    let ns = mco_api::constants::names::DEFAULT_NAMESPACE;
    assert_eq!(ev.metadata.namespace.as_deref(), Some(ns), "{ev:?}");
    let regarding = ev.regarding.unwrap_or_default();
    assert_eq!(regarding.kind.as_deref(), Some("MachineConfigPool"));
    assert_eq!(regarding.namespace.as_deref(), Some(ns));
}

/// In a rollout the pool's status is written several times a second. Such writes must not hold
/// back the render of a MachineConfig created meanwhile: the render waits for its debounce to
/// pass without a trigger, and a pool write that changes no spec is not one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_written_without_pause_still_renders_a_new_machine_config() {
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;

    // Ten writes per render debounce, none of them to the spec.
    let writer = {
        let pools: Api<MachineConfigPool> = Api::all(c.clone());
        tokio::spawn(async move {
            for i in 0u64.. {
                let patch =
                    json!({"metadata": {"annotations": {"example.com/beat": i.to_string()}}});
                pools
                    .patch("worker", &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
    };
    eventually("the pool written without pause", 10, || async {
        let p = pool(c, "worker").await;
        let beat = p
            .metadata
            .annotations?
            .get("example.com/beat")?
            .parse::<u64>()
            .ok()?;
        (beat >= 20).then_some(())
    })
    .await;
    create_mc(c, "50-worker-a", "worker", "/etc/a", "one").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    assert!(!writer.is_finished(), "the writes went on throughout");
    writer.abort();
    assert_eq!(
        sources(&pool(c, "worker").await),
        vec!["00-worker", "50-worker-a"]
    );
    assert_ne!(r1, r0);
}

/// A MachineConfig of about 100 KiB whose gzip file inflates past 100 MiB: the pool gets
/// `RenderDegraded` naming the MachineConfig and the path, and no node is given a new target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decompression_bomb_degrades_render_and_targets_no_node() {
    use base64::Engine as _;
    use std::io::Write;
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    create_node(c, &node("w0", "worker", &r0)).await;

    let limit = mco_render::ignition::MAX_FILE_BYTES;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&vec![0u8; limit as usize + 1]).unwrap();
    let source = format!(
        "data:;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap())
    );
    let mut bomb = machine_config("60-worker-bomb", "worker", "/etc/bomb", "x");
    bomb.spec.config = Some(
        json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/bomb", "mode": 420, "contents": {"source": source, "compression": "gzip"}}
        ]}}),
    );
    Api::<MachineConfig>::all(c.clone())
        .create(&PostParams::default(), &bomb)
        .await
        .unwrap();
    let msg = eventually("RenderDegraded", 30, || async move {
        let s = pool(c, "worker").await.status?;
        let rd = s.condition(pool_conditions::RENDER_DEGRADED)?;
        (rd.status == "True").then(|| rd.message.clone())
    })
    .await;
    assert_eq!(
        msg,
        format!(
            "Failed to render configuration for pool worker: MachineConfig \"60-worker-bomb\": spec.config.storage.files[0].contents.source: the decoded contents of /etc/bomb exceed the limit of {limit} bytes"
        )
    );
    assert_eq!(pool(c, "worker").await.spec.configuration.unwrap().name, r0);
    let n = Api::<k8s_openapi::api::core::v1::Node>::all(c.clone())
        .get("w0")
        .await
        .unwrap();
    assert_eq!(ann(&n, annotations::DESIRED_CONFIG), r0, "no node targeted");
}

/// A rendered config carries the ControllerConfig's release-image-version annotation, as
/// upstream's; the name hashes the spec alone, so the annotation set on a cluster already
/// rendered lands on its rendered configs in place (no new config, no rollout), and a new
/// release's OS image makes a new config carrying the new release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_configs_carry_the_release_version_without_a_new_name() {
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    let release = |mc: &MachineConfig| {
        mc.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::RELEASE_IMAGE_VERSION).cloned())
    };
    assert_eq!(release(&rendered(c, &r0).await), None);
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    let count = || async { mcs.list(&Default::default()).await.unwrap().items.len() };
    let before = count().await;

    let ccs: Api<mco_api::ControllerConfig> = Api::all(c.clone());
    let annotate =
        |v: &str| json!({"metadata": {"annotations": {annotations::RELEASE_IMAGE_VERSION: v}}});
    ccs.patch(
        "machine-config-controller",
        &PatchParams::default(),
        &Patch::Merge(&annotate("4.16.8")),
    )
    .await
    .unwrap();
    eventually("the release version on the rendered config", 30, || async {
        (release(&rendered(c, &r0).await).as_deref() == Some("4.16.8")).then_some(())
    })
    .await;
    assert_eq!(pool(c, "worker").await.spec.configuration.unwrap().name, r0);
    assert_eq!(count().await, before, "a rendered config was made");

    // The next release: its OS image and version together, as the sync writes them.
    let mut next = annotate("4.17.2");
    next["spec"] = json!({"baseOSContainerImage": "registry.example.com/mco/os:2.0"});
    ccs.patch(
        "machine-config-controller",
        &PatchParams::default(),
        &Patch::Merge(&next),
    )
    .await
    .unwrap();
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    let mc = rendered(c, &r1).await;
    assert_eq!(mc.spec.os_image_url, "registry.example.com/mco/os:2.0");
    assert_eq!(release(&mc).as_deref(), Some("4.17.2"));
}
