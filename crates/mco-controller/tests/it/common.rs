//! Shared harness of the integration tests: the embedded API server in a temp dir, mco's CRDs and
//! default objects, a controller with fast timeouts, and a fake daemon that plays the node side of
//! the annotation protocol.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mco_api::constants::{annotations, names, states};
use mco_api::{ControllerConfig, ControllerConfigSpec, MachineConfig, MachineConfigPool};
use mco_apiserver::{Identity, ServerHandle};
use mco_controller::{Config, DrainTimeouts, LeaseConfig, Metrics};
pub use mco_testkit::eventually;
use mco_testkit::server::{TestServer, install_crds, install_namespace};
use mco_testkit::{MachineConfigBuilder, NodeBuilder, PoolBuilder};
use serde_json::json;

pub struct Env {
    pub server: ServerHandle,
    pub client: Client,
    pub dir: tempfile::TempDir,
}

pub async fn env() -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let TestServer {
        handle: server,
        dir,
    } = mco_testkit::server::start().await;
    let client = server.client_for(Identity::Admin).await.expect("client");
    install(&client).await;
    Env {
        server,
        client,
        dir,
    }
}

/// mco's namespace (where the controller records its Events), the CRDs, the ControllerConfig
/// and the worker pool with its base MachineConfig.
pub async fn install(client: &Client) {
    install_namespace(client).await;
    install_crds(client).await;
    let ccs: Api<ControllerConfig> = Api::all(client.clone());
    let cc = ControllerConfig::new(
        names::CONTROLLER_CONFIG,
        ControllerConfigSpec {
            base_os_container_image: "registry.example.com/mco/os:1.0".into(),
            release_image: "4.99.0".into(),
            ..Default::default()
        },
    );
    eventually("ControllerConfig created", 20, || {
        let (ccs, cc) = (ccs.clone(), cc.clone());
        async move {
            ccs.create(&PostParams::default(), &cc)
                .await
                .ok()
                .map(|_| ())
        }
    })
    .await;
    create_pool(client, "worker", "worker", None).await;
    create_mc(client, "00-worker", "worker", "/etc/base", "base").await;
}

pub fn role_selector(role: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some([(format!("node-role.kubernetes.io/{role}"), String::new())].into()),
        match_expressions: None,
    }
}

pub async fn create_pool(
    client: &Client,
    name: &str,
    role: &str,
    max: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
) {
    let mut pool = PoolBuilder::new(name).role(role);
    if let Some(max) = max {
        pool = pool.max_unavailable(serde_json::to_value(max).unwrap());
    }
    let pool = pool.build();
    Api::<MachineConfigPool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
}

pub fn machine_config(name: &str, role: &str, path: &str, content: &str) -> MachineConfig {
    MachineConfigBuilder::new(name)
        .role(role)
        .config(json!({
            "ignition": {"version": "3.4.0"},
            "storage": {"files": [{
                "path": path,
                "mode": 420,
                "contents": {"source": format!("data:,{content}")},
            }]},
        }))
        .build()
}

pub async fn create_mc(client: &Client, name: &str, role: &str, path: &str, content: &str) {
    Api::<MachineConfig>::all(client.clone())
        .create(
            &PostParams::default(),
            &machine_config(name, role, path, content),
        )
        .await
        .expect("create MachineConfig");
}

/// Timeouts short enough for tests.
pub fn fast_config(identity: &str) -> Config {
    Config {
        controller_version: "test".into(),
        rendered_retain: 2,
        render_debounce: Duration::from_millis(100),
        resync: Duration::from_secs(2),
        pass_spacing: 10,
        error_requeue: Duration::from_millis(200),
        drain: DrainTimeouts {
            attempt_timeout: Duration::from_secs(3),
            evict_retry: Duration::from_millis(200),
            requeue: Duration::from_millis(300),
            requeue_slow: Duration::from_millis(500),
            slow_after: Duration::from_secs(2),
            failed_after: Duration::from_secs(3),
        },
        lease: LeaseConfig {
            identity: identity.into(),
            duration: Duration::from_secs(2),
            renew_interval: Duration::from_millis(300),
            ..Default::default()
        },
        metrics_addr: None,
        metrics_auth: Default::default(),
        own_node: None,
        // These tests write their own base configs; `templates.rs` turns it on.
        templates: false,
        lend_caches: None,
        server_certs: None,
        user_data: None,
        sync_controller_config: false,
        namespace: names::DEFAULT_NAMESPACE.into(),
    }
}

/// A running controller; dropping the handle aborts it (like a killed process).
pub struct Running {
    pub metrics: Arc<Metrics>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub fn kill(&self) {
        self.task.abort();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn start_controller(client: &Client, config: Config) -> Running {
    let metrics = Arc::new(Metrics::new());
    let m = metrics.clone();
    let client = client.clone();
    let task = tokio::spawn(async move {
        if let Err(e) =
            mco_controller::run_with_metrics(client, config, m, std::future::pending()).await
        {
            panic!("controller failed: {e}");
        }
    });
    Running { metrics, task }
}

/// A Ready node in `role`, on `config` (Done), created now.
pub fn node(name: &str, role: &str, config: &str) -> Node {
    NodeBuilder::new(name)
        .role(role)
        .current_config(config)
        .desired_config(config)
        .state(states::DONE)
        .ready(true)
        .build()
}

pub async fn create_node(client: &Client, node: &Node) {
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), node)
        .await
        .expect("create node");
}

pub async fn pool(client: &Client, name: &str) -> MachineConfigPool {
    Api::<MachineConfigPool>::all(client.clone())
        .get(name)
        .await
        .expect("get pool")
}

/// Wait for the pool's target config to differ from `not` and return it.
pub async fn target_other_than(client: &Client, name: &str, not: Option<&str>) -> String {
    eventually("pool target", 30, || async move {
        let p = pool(client, name).await;
        let t = p
            .spec
            .configuration
            .map(|c| c.name)
            .filter(|n| !n.is_empty())?;
        (Some(t.as_str()) != not).then_some(t)
    })
    .await
}

pub async fn wait_updated(client: &Client, name: &str, target: &str, secs: u64) {
    eventually(
        &format!("pool {name} updated to {target}"),
        secs,
        || async move {
            let p = pool(client, name).await;
            let s = p.status?;
            (s.is_true("Updated")
                && s.configuration.as_ref().map(|c| c.name.as_str()) == Some(target))
            .then_some(())
        },
    )
    .await
}

pub fn ann<'a>(n: &'a Node, key: &str) -> &'a str {
    n.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        .unwrap_or_default()
}

async fn annotate(api: &Api<Node>, node: &str, values: serde_json::Value) {
    let _ = api
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": values}})),
        )
        .await;
}

/// How the fake daemon behaves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Daemon {
    /// Working, then Done on the new config.
    Simple,
    /// Also requests a drain before and an uncordon after, and waits for each.
    Drain,
}

/// Plays every node's daemon: moves nodes whose desiredConfig changed to it, one step per tick.
/// Nodes in `skip` (by name) are left alone.
pub fn spawn_daemons(client: &Client, mode: Daemon) -> tokio::task::JoinHandle<()> {
    let api: Api<Node> = Api::all(client.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(40)).await;
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            for n in list.items {
                let name = n.metadata.name.clone().unwrap_or_default();
                let (cur, des, state) = (
                    ann(&n, annotations::CURRENT_CONFIG),
                    ann(&n, annotations::DESIRED_CONFIG),
                    ann(&n, annotations::STATE),
                );
                let (dd, last) = (
                    ann(&n, annotations::DESIRED_DRAIN),
                    ann(&n, annotations::LAST_APPLIED_DRAIN),
                );
                if des.is_empty() || state == states::DEGRADED {
                    continue;
                }
                match (mode, state) {
                    (_, states::DONE) if cur != des => {
                        let mut v = json!({annotations::STATE: states::WORKING});
                        if mode == Daemon::Drain {
                            v[annotations::DESIRED_DRAIN] = json!(format!("drain-{des}"));
                        }
                        annotate(&api, &name, v).await;
                    }
                    (Daemon::Simple, states::WORKING) => {
                        annotate(
                            &api,
                            &name,
                            json!({annotations::CURRENT_CONFIG: des, annotations::STATE: states::DONE}),
                        )
                        .await;
                    }
                    (Daemon::Drain, states::WORKING) => {
                        if dd.starts_with("drain-") && dd == last {
                            annotate(
                                &api,
                                &name,
                                json!({annotations::CURRENT_CONFIG: des,
                                       annotations::DESIRED_DRAIN: format!("uncordon-{des}")}),
                            )
                            .await;
                        } else if dd.starts_with("uncordon-") && dd == last {
                            annotate(&api, &name, json!({annotations::STATE: states::DONE})).await;
                        }
                    }
                    _ => {}
                }
            }
        }
    })
}

/// One counter of the server's `apiserver_request_total`, 0 when absent.
pub async fn requests(c: &kube::Client, labels: &str) -> u64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = c.request_text(req).await.unwrap();
    mco_apiserver::metrics::request_total(&text, labels)
}

/// How many times the node controller has reconciled a pool.
pub fn node_reconciles(r: &Running) -> u64 {
    r.metrics
        .reconciles
        .get_or_create(&mco_controller::metrics::ControllerLabels {
            controller: "node".into(),
        })
        .get()
}
