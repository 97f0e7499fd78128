//! The template controller against the embedded API server: each role's three configs with the
//! annotation and the owner reference, the pool's first render already built on them, a hand
//! edit and a deletion undone, a refused ControllerConfig reported with the configs kept, and
//! the configs another controller generated (upstream's, taken over) left as they are, and an
//! arbiter cluster's third role.

use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use mco_api::constants::{annotations, cc_conditions, names};
use mco_api::{ControllerConfig, MachineConfig, MachineConfigPool};
use serde_json::json;

use crate::common::*;

const TEMPLATE_NAMES: [&str; 6] = [
    "00-master",
    "00-worker",
    "01-master-container-runtime",
    "01-master-kubelet",
    "01-worker-container-runtime",
    "01-worker-kubelet",
];

fn kubelet_conf(mc: &MachineConfig) -> String {
    mco_generate::base_file(&[mc], "/etc/kubernetes/kubelet.conf")
        .unwrap()
        .unwrap_or_default()
}

/// The worker pool's rendered configs (two beyond the referenced one would be kept).
async fn rendered_worker(mcs: &Api<MachineConfig>) -> Vec<String> {
    mcs.list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| m.name_any())
        .filter(|n| n.starts_with("rendered-worker-"))
        .collect()
}

async fn condition(ccs: &Api<ControllerConfig>, type_: &str) -> Option<(String, String)> {
    let cc = ccs.get(names::CONTROLLER_CONFIG).await.ok()?;
    let c = cc.status?.condition(type_).cloned()?;
    Some((c.status, c.message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_configs_are_generated_kept_and_reported() {
    let env = env().await;
    let c = &env.client;
    let ccs: Api<ControllerConfig> = Api::all(c.clone());
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    let cc = ccs
        .patch(
            names::CONTROLLER_CONFIG,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterDNSIP": "172.30.0.10"}})),
        )
        .await
        .unwrap();
    let uid = cc.uid().unwrap();
    let config = mco_controller::Config {
        templates: true,
        ..fast_config("templates")
    };
    let _controller = start_controller(c, config);

    // Every config, with the annotation and the owner; the hand-written 00-worker is taken over.
    for name in TEMPLATE_NAMES {
        let (mcs, uid) = (mcs.clone(), uid.clone());
        eventually(&format!("{name} generated"), 30, || {
            let (mcs, uid) = (mcs.clone(), uid.clone());
            async move {
                let mc = mcs.get_opt(name).await.ok()??;
                let owned = mc
                    .owner_references()
                    .iter()
                    .any(|o| o.kind == "ControllerConfig" && o.uid == uid);
                let annotated = mc
                    .annotations()
                    .get(annotations::GENERATED_BY_CONTROLLER_VERSION)
                    == Some(&"test".to_string());
                (owned && annotated).then_some(mc)
            }
        })
        .await;
    }
    let base = mcs.get("00-worker").await.unwrap();
    assert_eq!(
        mco_generate::base_file(&[&base], "/etc/base").unwrap(),
        None
    );
    let kubelet = mcs.get("01-worker-kubelet").await.unwrap();
    assert!(kubelet_conf(&kubelet).contains("clusterDNS: [172.30.0.10]"));

    // The worker pool's first render is built on them: no render ran before they existed.
    let target = target_other_than(c, "worker", None).await;
    let pool: MachineConfigPool = Api::all(c.clone()).get("worker").await.unwrap();
    let sources: Vec<String> = pool
        .spec
        .configuration
        .unwrap()
        .source
        .into_iter()
        .filter_map(|s| s.name)
        .collect();
    assert_eq!(
        sources,
        [
            "00-worker",
            "01-worker-container-runtime",
            "01-worker-kubelet"
        ]
    );
    assert_eq!(rendered_worker(&mcs).await, vec![target.clone()]);
    eventually("TemplateControllerCompleted", 30, || {
        let ccs = ccs.clone();
        async move {
            let (status, message) = condition(&ccs, cc_conditions::COMPLETED).await?;
            (status == "True" && message.contains("using controller version test")).then_some(())
        }
    })
    .await;

    // A hand edit of the spec is undone; a label someone added stays.
    mcs.patch(
        "01-worker-kubelet",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"labels": {"team": "a"}},
            "spec": {"kernelArguments": ["nosmt"]},
        })),
    )
    .await
    .unwrap();
    let reverted = eventually("the edit undone", 30, || {
        let mcs = mcs.clone();
        async move {
            let mc = mcs.get("01-worker-kubelet").await.ok()?;
            mc.spec.kernel_arguments.is_none().then_some(mc)
        }
    })
    .await;
    assert_eq!(reverted.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(reverted.spec, kubelet.spec);

    // A role label edited away is restored: the pool never renders without the config.
    mcs.patch(
        "00-worker",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"labels": {"machineconfiguration.openshift.io/role": "nobody"}}}),
        ),
    )
    .await
    .unwrap();
    eventually("the role label restored", 30, || {
        let mcs = mcs.clone();
        async move {
            let mc = mcs.get("00-worker").await.ok()?;
            (mc.labels().get("machineconfiguration.openshift.io/role")
                == Some(&"worker".to_string()))
            .then_some(())
        }
    })
    .await;

    // A deleted config comes back.
    mcs.delete("00-worker", &DeleteParams::default())
        .await
        .unwrap();
    eventually("00-worker back", 30, || {
        let (mcs, base) = (mcs.clone(), base.clone());
        async move {
            let mc = mcs.get_opt("00-worker").await.ok()??;
            (mc.uid() != base.uid() && mc.spec == base.spec).then_some(())
        }
    })
    .await;

    // A refused ControllerConfig: Failing names the field, and the configs stay as they were.
    let before = mcs.get("01-worker-kubelet").await.unwrap();
    ccs.patch(
        names::CONTROLLER_CONFIG,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"clusterDNSIP": "dns.example.com"}})),
    )
    .await
    .unwrap();
    eventually("TemplateControllerFailing", 30, || {
        let ccs = ccs.clone();
        async move {
            let (status, message) = condition(&ccs, cc_conditions::FAILING).await?;
            (status == "True"
                && message.ends_with("spec.clusterDNSIP: \"dns.example.com\" is not an IP address"))
            .then_some(())
        }
    })
    .await;
    let after = mcs.get("01-worker-kubelet").await.unwrap();
    assert_eq!(after.resource_version(), before.resource_version());
    assert_eq!(target_other_than(c, "worker", None).await, target);
    // Nor was the pool rendered while an edit or a deletion stood.
    assert_eq!(rendered_worker(&mcs).await, vec![target.clone()]);

    // Fixed: a new kubelet config, and a new render for it.
    ccs.patch(
        names::CONTROLLER_CONFIG,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"clusterDNSIP": "172.30.0.53"}})),
    )
    .await
    .unwrap();
    eventually("the new DNS IP generated", 30, || {
        let mcs = mcs.clone();
        async move {
            let mc = mcs.get("01-worker-kubelet").await.ok()?;
            kubelet_conf(&mc).contains("172.30.0.53").then_some(())
        }
    })
    .await;
    target_other_than(c, "worker", Some(&target)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_refused_controller_config_leaves_the_render_on_the_configs_before() {
    let env = env().await;
    let c = &env.client;
    let ccs: Api<ControllerConfig> = Api::all(c.clone());
    let set_dns = |ip: &'static str| {
        let ccs = ccs.clone();
        async move {
            ccs.patch(
                names::CONTROLLER_CONFIG,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"clusterDNSIP": ip}})),
            )
            .await
            .unwrap();
        }
    };
    set_dns("172.30.0.10").await;
    let config = || mco_controller::Config {
        templates: true,
        ..fast_config("templates-restart")
    };
    let first = start_controller(c, config());
    let t0 = target_other_than(c, "worker", None).await;
    first.kill();
    drop(first);

    // Refused while no controller runs; the restarted one has never taken a ControllerConfig.
    set_dns("dns.example.com").await;
    let _second = start_controller(c, config());
    eventually("TemplateControllerFailing", 30, || {
        let ccs = ccs.clone();
        async move {
            let (status, message) = condition(&ccs, cc_conditions::FAILING).await?;
            (status == "True" && message.contains("spec.clusterDNSIP")).then_some(())
        }
    })
    .await;
    create_mc(c, "50-worker-a", "worker", "/etc/a", "a").await;
    let t1 = target_other_than(c, "worker", Some(&t0)).await;
    let pool: MachineConfigPool = Api::all(c.clone()).get("worker").await.unwrap();
    let sources: Vec<String> = pool
        .spec
        .configuration
        .unwrap()
        .source
        .into_iter()
        .filter_map(|s| s.name)
        .collect();
    assert_eq!(
        sources,
        [
            "00-worker",
            "01-worker-container-runtime",
            "01-worker-kubelet",
            "50-worker-a"
        ],
        "{t1}"
    );
}

/// The `TemplateConfigsKept` events' notes, newest last.
async fn kept_notes(c: &kube::Client) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(c.clone());
    let Ok(list) = events.list(&Default::default()).await else {
        return vec![];
    };
    list.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("TemplateConfigsKept"))
        .filter_map(|e| e.note)
        .collect()
}

/// A cluster mco took over from upstream's operator: upstream's base configs, stamped with its
/// git commit, hold more than mco's templates (here the pull secret). They are kept as they
/// are, rendered from, and reported; a deleted one is generated by mco.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_another_controller_generated_are_kept_and_reported() {
    const COMMIT: &str = "1d7c5a1e9f2b3c4d5e6f708192a3b4c5d6e7f809";
    let env = env().await;
    let c = &env.client;
    let ccs: Api<ControllerConfig> = Api::all(c.clone());
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    ccs.patch(
        names::CONTROLLER_CONFIG,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"clusterDNSIP": "172.30.0.10"}})),
    )
    .await
    .unwrap();
    let stamp = |name: &'static str| {
        let mcs = mcs.clone();
        async move {
            mcs.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    annotations::GENERATED_BY_CONTROLLER_VERSION: COMMIT}}})),
            )
            .await
            .unwrap()
        }
    };
    // The environment's hand-written 00-worker, made upstream's.
    mcs.patch(
        "00-worker",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"config": {"storage": {"files": [{
            "path": "/var/lib/kubelet/config.json",
            "mode": 384,
            "contents": {"source": "data:,%7B%7D"},
        }]}}}})),
    )
    .await
    .unwrap();
    let upstreams = stamp("00-worker").await;

    let config = || mco_controller::Config {
        templates: true,
        ..fast_config("templates-kept")
    };
    let controller = start_controller(c, config());
    let target = target_other_than(c, "worker", None).await;
    let rendered = mcs.get(&target).await.unwrap();
    assert!(
        mco_generate::base_file(&[&rendered], "/var/lib/kubelet/config.json")
            .unwrap()
            .is_some(),
        "{target} lacks upstream's file"
    );
    let kubelet = mcs.get("01-worker-kubelet").await.unwrap();
    assert_eq!(
        kubelet.annotations()[annotations::GENERATED_BY_CONTROLLER_VERSION],
        "test"
    );
    let kept = mcs.get("00-worker").await.unwrap();
    assert_eq!(kept.resource_version(), upstreams.resource_version());
    eventually("the kept config reported", 30, || async move {
        kept_notes(c)
            .await
            .iter()
            .any(|n| n.contains(&format!("00-worker ({COMMIT})")))
            .then_some(())
    })
    .await;
    eventually("TemplateControllerCompleted", 30, || {
        let ccs = ccs.clone();
        async move {
            let (status, _) = condition(&ccs, cc_conditions::COMPLETED).await?;
            (status == "True").then_some(())
        }
    })
    .await;

    // All six upstream's, on a platform mco has no templates for (a restart reads them so):
    // nothing is generated or refused.
    controller.kill();
    drop(controller);
    for name in &TEMPLATE_NAMES[..] {
        if *name != "00-worker" {
            stamp(name).await;
        }
    }
    ccs.patch(
        names::CONTROLLER_CONFIG,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"infra": {"status": {"platformStatus": {"type": "AWS"}}}}})),
    )
    .await
    .unwrap();
    let before: Vec<MachineConfig> = mcs.list(&Default::default()).await.unwrap().items;
    let _second = start_controller(c, config());
    eventually("all six reported kept", 30, || async move {
        kept_notes(c)
            .await
            .iter()
            .any(|n| {
                TEMPLATE_NAMES
                    .iter()
                    .all(|t| n.contains(&format!("{t} ({COMMIT})")))
            })
            .then_some(())
    })
    .await;
    // Read once the status is the one written for the AWS spec, not the one before it.
    let (failing, message) = eventually("the status of the AWS spec", 30, || {
        let ccs = ccs.clone();
        async move {
            let cc = ccs.get(names::CONTROLLER_CONFIG).await.ok()?;
            let status = cc.status?;
            let c = status.condition(cc_conditions::FAILING)?;
            (status.observed_generation == cc.metadata.generation)
                .then(|| (c.status.clone(), c.message.clone()))
        }
    })
    .await;
    assert_eq!(failing, "False", "{message}");
    // Kept as they were: a kubelet config is only marked with the TLS profile it follows, a
    // config writing the proxy environment with the proxy it follows.
    for mc in before
        .iter()
        .filter(|m| TEMPLATE_NAMES.contains(&m.name_any().as_str()))
    {
        let now = mcs.get(&mc.name_any()).await.unwrap();
        assert_eq!(now.spec, mc.spec, "{}", mc.name_any());
        let mut annotations = now.annotations().clone();
        let mark = annotations.remove(mco_generate::template::TLS_PROFILE_FOLLOWED);
        let proxy = annotations.remove(mco_generate::template::PROXY_FOLLOWED);
        assert_eq!(&annotations, mc.annotations(), "{}", mc.name_any());
        assert_eq!(
            mark.is_some(),
            mc.name_any().ends_with("-kubelet"),
            "{}",
            mc.name_any()
        );
        let writes_proxy = mco_generate::file_contents(mc, mco_generate::template::PROXY_FILE)
            .unwrap()
            .is_some();
        assert_eq!(proxy.is_some(), writes_proxy, "{}", mc.name_any());
    }

    // Back on platform None, a deleted upstream config is generated by mco.
    ccs.patch(
        names::CONTROLLER_CONFIG,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"infra": {"status": {"platformStatus": {"type": "None"}}}}})),
    )
    .await
    .unwrap();
    mcs.delete("00-worker", &DeleteParams::default())
        .await
        .unwrap();
    eventually("00-worker generated by mco", 30, || {
        let mcs = mcs.clone();
        async move {
            let mc = mcs.get_opt("00-worker").await.ok()??;
            (mc.annotations()
                .get(annotations::GENERATED_BY_CONTROLLER_VERSION)
                == Some(&"test".to_string()))
            .then_some(())
        }
    })
    .await;
}

fn pull_secret(type_: &str, json: &str) -> k8s_openapi::api::core::v1::Secret {
    serde_json::from_value(json!({
        "metadata": {"name": "pull-secret", "namespace": "mco-system"},
        "type": type_,
        "data": {".dockerconfigjson": base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            json,
        )},
    }))
    .unwrap()
}

/// What `00-worker` holds at the pull secret's path.
async fn pull_secret_file(mcs: &Api<MachineConfig>) -> Option<String> {
    let mc = mcs.get_opt("00-worker").await.ok()??;
    mco_generate::base_file(&[&mc], "/var/lib/kubelet/config.json")
        .ok()
        .flatten()
}

/// The pull secret the ControllerConfig names and the APIServer's TLS profile reach the
/// templates at once (the resync here is ten minutes: only the watches can bring them), and a
/// missing or mistyped Secret is refused in upstream's words with the configs before kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pull_secret_and_the_tls_profile_reach_the_templates_at_once() {
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    let env = env().await;
    let c = &env.client;
    let ccs: Api<ControllerConfig> = Api::all(c.clone());
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    let namespaces: Api<Namespace> = Api::all(c.clone());
    let _ = namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": "mco-system"}})).unwrap(),
        )
        .await;
    let secrets: Api<Secret> = Api::namespaced(c.clone(), "mco-system");
    secrets
        .create(
            &Default::default(),
            &pull_secret(
                "kubernetes.io/dockerconfigjson",
                r#"{"auths": {"quay.example.com": {"auth": "b25lOm9uZQ=="}}}"#,
            ),
        )
        .await
        .unwrap();
    ccs.patch(
        names::CONTROLLER_CONFIG,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"pullSecret": {"namespace": "mco-system", "name": "pull-secret"}}}),
        ),
    )
    .await
    .unwrap();
    let config = mco_controller::Config {
        templates: true,
        resync: std::time::Duration::from_secs(600),
        ..fast_config("templates")
    };
    let _controller = start_controller(c, config);

    let want = |s: &'static str| {
        let mcs = mcs.clone();
        move || {
            let mcs = mcs.clone();
            async move { (pull_secret_file(&mcs).await? == s).then_some(()) }
        }
    };
    eventually(
        "the pull secret in 00-worker",
        30,
        want("{\"auths\":{\"quay.example.com\":{\"auth\":\"b25lOm9uZQ==\"}}}\n"),
    )
    .await;
    // The templates are written one by one: 01-worker-kubelet may follow 00-worker.
    let kubelet = {
        let mcs = mcs.clone();
        eventually("01-worker-kubelet", 30, move || {
            let mcs = mcs.clone();
            async move { mcs.get("01-worker-kubelet").await.ok() }
        })
        .await
    };
    assert!(
        kubelet_conf(&kubelet).contains("tlsMinVersion: VersionTLS12\n"),
        "{}",
        kubelet_conf(&kubelet)
    );

    // Rotated: the new credentials, long before any resync.
    secrets
        .replace(
            "pull-secret",
            &Default::default(),
            &pull_secret(
                "kubernetes.io/dockerconfigjson",
                r#"{"auths": {"quay.example.com": {"auth": "dHdvOnR3bw=="}}}"#,
            ),
        )
        .await
        .unwrap();
    eventually(
        "the rotated pull secret in 00-worker",
        30,
        want("{\"auths\":{\"quay.example.com\":{\"auth\":\"dHdvOnR3bw==\"}}}\n"),
    )
    .await;

    // The APIServer's profile: Modern, in both kubelet configs.
    Api::<mco_api::APIServer>::all(c.clone())
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "apiVersion": "config.openshift.io/v1",
                "kind": "APIServer",
                "metadata": {"name": "cluster"},
                "spec": {"tlsSecurityProfile": {"type": "Modern", "modern": {}}},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    for name in ["01-master-kubelet", "01-worker-kubelet"] {
        let mcs = mcs.clone();
        eventually(&format!("Modern in {name}"), 30, move || {
            let mcs = mcs.clone();
            async move {
                let mc = mcs.get(name).await.ok()?;
                kubelet_conf(&mc)
                    .contains("tlsMinVersion: VersionTLS13\n")
                    .then_some(())
            }
        })
        .await;
    }

    // Deleted: refused with the server's words, the configs before kept.
    secrets
        .delete("pull-secret", &DeleteParams::default())
        .await
        .unwrap();
    let failing = |needle: &'static str| {
        let ccs = ccs.clone();
        move || {
            let ccs = ccs.clone();
            async move {
                let (status, message) = condition(&ccs, cc_conditions::FAILING).await?;
                (status == "True" && message.contains(needle)).then_some(message)
            }
        }
    };
    let message = eventually(
        "Failing for the missing Secret",
        30,
        failing(
            "spec.pullSecret: Secret mco-system/pull-secret: secrets \"pull-secret\" not found",
        ),
    )
    .await;
    assert!(!message.contains("dHdvOnR3bw"), "{message}");
    assert!(
        pull_secret_file(&mcs)
            .await
            .unwrap()
            .contains("dHdvOnR3bw==")
    );

    // Back, but of the wrong type: upstream's message.
    secrets
        .create(&Default::default(), &pull_secret("Opaque", "{}"))
        .await
        .unwrap();
    eventually(
        "Failing for the type",
        30,
        failing("expected secret type kubernetes.io/dockerconfigjson found Opaque"),
    )
    .await;
    assert!(
        pull_secret_file(&mcs)
            .await
            .unwrap()
            .contains("dHdvOnR3bw==")
    );
}

/// A two-node cluster with an arbiter: the arbiter's three configs appear when the
/// ControllerConfig names the topology, its pool renders on them, and its kubelet registers with
/// its own role and taint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arbiter_topology_gets_the_arbiter_configs_and_its_pool_renders_on_them() {
    let env = env().await;
    let c = &env.client;
    let ccs: Api<ControllerConfig> = Api::all(c.clone());
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    create_pool(c, "arbiter", "arbiter", None).await;
    let _controller = start_controller(
        c,
        mco_controller::Config {
            templates: true,
            ..fast_config("templates-arbiter")
        },
    );
    target_other_than(c, "worker", None).await;
    assert!(mcs.get_opt("00-arbiter").await.unwrap().is_none());

    ccs.patch(
        names::CONTROLLER_CONFIG,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"infra": {"status": {
            "platformStatus": {"type": "None"},
            "controlPlaneTopology": "HighlyAvailableArbiter",
        }}}})),
    )
    .await
    .unwrap();
    let pools: Api<MachineConfigPool> = Api::all(c.clone());
    eventually("the arbiter pool rendered on its three configs", 30, || {
        let pools = pools.clone();
        async move {
            let pool = pools.get("arbiter").await.ok()?;
            let sources: Vec<String> = pool
                .spec
                .configuration?
                .source
                .into_iter()
                .filter_map(|s| s.name)
                .collect();
            (sources
                == [
                    "00-arbiter",
                    "01-arbiter-container-runtime",
                    "01-arbiter-kubelet",
                ])
            .then_some(())
        }
    })
    .await;
    let kubelet = mcs.get("01-arbiter-kubelet").await.unwrap();
    let unit = serde_json::to_string(&kubelet.spec.config).unwrap();
    assert!(
        unit.contains("--register-with-taints=node-role.kubernetes.io/arbiter=:NoSchedule"),
        "{unit}"
    );
}
