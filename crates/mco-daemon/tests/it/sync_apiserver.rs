//! The daemon against the embedded API server, the test playing the controller (it sets
//! desiredConfig and answers drain requests): the MachineConfigNode condition sequence of one
//! rebootless and one reboot update, recorded from a watch and asserted in order.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use mco_api::constants::annotations as ann;
use mco_api::pinned::CRIO_PINNED_IMAGES_DROPIN;
use mco_api::{MachineConfig, MachineConfigNode, MachineConfigPool, PinnedImageSet};
use mco_apiserver::Identity;
use mco_daemon::Host;
use mco_daemon::agent::sync::{Daemon, Exit, SyncOptions};
use mco_daemon::engine::Engine;
use mco_daemon::engine::pinned::crio_dropin;
use mco_daemon::host::images::ContainerImages;
use mco_daemon::host::ostree::{OsUpdater, RebaseMode};
use mco_daemon::host::paths;
use mco_daemon::host::reboot::{SimRebooter, complete_sim_reboot};
use mco_testkit::server::{TestServer, install_crds, install_namespace};
use mco_testkit::{NodeBuilder, PoolBuilder, eventually};
use serde_json::json;
use support::{Node as SimNode, file, ign, mc};

const NODE: &str = "worker-0";

fn annotation(n: &Node, k: &str) -> String {
    n.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(k))
        .cloned()
        .unwrap_or_default()
}

async fn set_annotation(nodes: &Api<Node>, k: &str, v: &str) {
    nodes
        .patch(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {k: v}}})),
        )
        .await
        .unwrap();
}

async fn wait_done(nodes: &Api<Node>, config: &str) {
    eventually(&format!("node Done at {config}"), 60, || async {
        let n = nodes.get(NODE).await.ok()?;
        (annotation(&n, ann::STATE) == "Done" && annotation(&n, ann::CURRENT_CONFIG) == config)
            .then_some(())
    })
    .await
}

/// Every (type, status, message) change of the MCN's conditions, in watch order.
type Log = Arc<Mutex<Vec<(String, String, String)>>>;

fn record(mcns: Api<MachineConfigNode>) -> Log {
    let log: Log = Arc::default();
    let out = Arc::clone(&log);
    tokio::spawn(async move {
        let mut prev: Vec<(String, String, String)> = Vec::new();
        let mut s = std::pin::pin!(watcher::watcher(mcns, watcher::Config::default()));
        while let Some(ev) = s.next().await {
            let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev else {
                continue;
            };
            let Some(st) = o.status else { continue };
            for c in st.conditions {
                let key = (c.type_.clone(), c.status.clone(), c.message.clone());
                let old = prev.iter().position(|(t, _, _)| *t == c.type_);
                match old {
                    Some(i) if prev[i] == key => {}
                    Some(i) => {
                        prev[i] = key;
                        out.lock().unwrap().push((c.type_, c.status, c.message));
                    }
                    None => {
                        prev.push(key);
                        out.lock().unwrap().push((c.type_, c.status, c.message));
                    }
                }
            }
        }
    });
    log
}

/// The test's controller: answers every drain request.
fn drain_controller(nodes: Api<Node>) {
    tokio::spawn(async move {
        loop {
            if let Ok(n) = nodes.get(NODE).await {
                let want = annotation(&n, ann::DESIRED_DRAIN);
                if !want.is_empty() && want != annotation(&n, ann::LAST_APPLIED_DRAIN) {
                    set_annotation(&nodes, ann::LAST_APPLIED_DRAIN, &want).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// How many of `expected` appear in `log` in that order.
/// How many recorded transitions set condition `type_` to `status`.
fn transitions(log: &Log, type_: &str, status: &str) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(t, s, _)| t == type_ && s == status)
        .count()
}

fn matched_in_order(log: &[(String, String, String)], expected: &[(&str, &str)]) -> usize {
    let mut i = 0;
    for (t, s, _) in log {
        if i < expected.len() && expected[i] == (t.as_str(), s.as_str()) {
            i += 1;
        }
    }
    i
}

/// Waits until the recorded watch, from entry `from` on, holds `expected` in order (it may
/// trail the reads a test waits on), then asserts it.
async fn wait_in_order(log: &Log, from: usize, expected: &[(&str, &str)]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = log.lock().unwrap()[from..].to_vec();
        if matched_in_order(&seen, expected) == expected.len() || Instant::now() > deadline {
            assert_in_order(&seen, expected);
            return from + seen.len();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn assert_in_order(log: &[(String, String, String)], expected: &[(&str, &str)]) {
    let i = matched_in_order(log, expected);
    assert!(
        i == expected.len(),
        "missing {:?} (after {:?}) in {:#?}",
        expected.get(i),
        &expected[..i],
        log.iter()
            .map(|(t, s, _)| format!("{t}={s}"))
            .collect::<Vec<_>>()
    );
}

/// The Node, settled on `rendered-worker-0`, and its MachineConfigNode, as the controller leaves them.
async fn settled_node(admin: &Client) -> (Api<Node>, Api<MachineConfigNode>) {
    let (nodes, mcns) = settled_node_alone(admin).await;
    create_mcn(&mcns).await;
    (nodes, mcns)
}

/// [`settled_node`] whose start-up uncordon is answered already, so a daemon's boot needs no
/// drain controller.
async fn settled_node_uncordoned(admin: &Client) -> Api<Node> {
    let (nodes, _mcns) = settled_node(admin).await;
    set_annotation(
        &nodes,
        ann::LAST_APPLIED_DRAIN,
        "uncordon-rendered-worker-0",
    )
    .await;
    nodes
}

/// The Node of [`settled_node`] without its MachineConfigNode.
async fn settled_node_alone(admin: &Client) -> (Api<Node>, Api<MachineConfigNode>) {
    let nodes: Api<Node> = Api::all(admin.clone());
    let node = NodeBuilder::new(NODE)
        .current_config("rendered-worker-0")
        .desired_config("rendered-worker-0")
        .state("Done")
        .build();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    (nodes, Api::all(admin.clone()))
}

/// The node's MachineConfigNode, as the controller creates it.
async fn create_mcn(mcns: &Api<MachineConfigNode>) {
    let mcn: MachineConfigNode = serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1alpha1", "kind": "MachineConfigNode",
        "metadata": {"name": NODE},
        "spec": {"nodeRef": {"name": NODE}, "pool": {"name": "worker"}, "configVersion": {"desired": "rendered-worker-0"}},
    }))
    .unwrap();
    mcns.create(&PostParams::default(), &mcn).await.unwrap();
}

/// An API server in a temp dir with mco's CRDs served, its admin client and the MachineConfig
/// API.
async fn serve_with_crds() -> (TestServer, Client, Api<MachineConfig>) {
    let server = mco_testkit::server::start().await;
    let admin = server.admin().await;
    // Where the daemon records its Node's events.
    install_namespace(&admin).await;
    install_crds(&admin).await;
    let mcs: Api<MachineConfig> = Api::all(admin.clone());
    (server, admin, mcs)
}

/// A client with the node's own identity, as its daemon has.
async fn node_client(server: &TestServer) -> Client {
    server
        .handle
        .client_for(Identity::Node(NODE.into()))
        .await
        .unwrap()
}

/// `Some` once the node's MachineConfigNode says `Updated=True`.
async fn updated(mcns: &Api<MachineConfigNode>) -> Option<()> {
    let c = mcns
        .get(NODE)
        .await
        .ok()?
        .status?
        .condition("Updated")
        .cloned()?;
    (c.status == "True").then_some(())
}

fn start_daemon(client: Client, node: &SimNode) -> tokio::task::JoinHandle<Exit> {
    start_daemon_polling(client, node, Duration::from_millis(50))
}

/// [`start_daemon`] with the drain wait's safety-net poll at `poll`.
fn start_daemon_polling(
    client: Client,
    node: &SimNode,
    poll: Duration,
) -> tokio::task::JoinHandle<Exit> {
    let engine = node.engine();
    let mut opts = SyncOptions::new(NODE);
    opts.poll_interval = poll;
    opts.drain_timeout = Duration::from_secs(30);
    opts.max_backoff = Duration::from_secs(1);
    let daemon = Daemon::new(client, engine, opts);
    tokio::spawn(async move { daemon.run(std::future::pending()).await.unwrap() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebootless_then_reboot_update_condition_sequence() {
    let (server, admin, mcs) = serve_with_crds().await;

    let empty = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let mut ssh = ign(json!([]), json!([]));
    ssh["passwd"] =
        json!({"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAk"]}]});
    let rebootless = mc("rendered-worker-1", "", ssh.clone());
    let mut with_file = ssh;
    with_file["storage"]["files"] = json!([file("/etc/mco-test-file", "hello", 0o644)]);
    let reboot = mc("rendered-worker-2", "", with_file);
    for m in [&empty, &rebootless, &reboot] {
        mcs.create(&PostParams::default(), m).await.unwrap();
    }
    let (nodes, mcns) = settled_node(&admin).await;
    let log = record(mcns.clone());
    drain_controller(nodes.clone());

    let sim = SimNode::new(true);
    let daemon_client = node_client(&server).await;
    let task = start_daemon(daemon_client.clone(), &sim);
    wait_done(&nodes, "rendered-worker-0").await;

    // Rebootless: SSH keys only.
    set_annotation(&nodes, ann::DESIRED_CONFIG, "rendered-worker-1").await;
    wait_done(&nodes, "rendered-worker-1").await;
    eventually("Updated=True", 30, || async {
        let m = mcns.get(NODE).await.ok()?;
        m.status?
            .condition("Updated")
            .filter(|c| c.status == "True")
            .map(|_| ())
    })
    .await;
    let mark = wait_in_order(
        &log,
        0,
        &[
            ("Updated", "False"),
            ("UpdatePrepared", "True"),
            // One write (listed in the conditions' order): Prepared rides with the next phase.
            ("UpdateExecuted", "Unknown"),
            ("Drained", "False"),
            // Files alone: the in-progress phase rides with the write that ends it.
            ("AppliedFilesAndOS", "True"),
            ("UpdatePostActionComplete", "True"),
            ("Updated", "True"),
        ],
    )
    .await;
    assert!(SimRebooter::pending(&sim.fs).unwrap().is_none());
    assert_eq!(
        sim.read(mco_daemon::host::paths::CORE_SSH_KEYS).unwrap(),
        "ssh-ed25519 AAAAk\n"
    );
    let status = mcns.get(NODE).await.unwrap().status.unwrap();
    assert_eq!(status.health, "Healthy");
    assert_eq!(status.config_version.unwrap().current, "rendered-worker-1");
    assert!(status.observed_generation.is_some());
    assert_eq!(
        status.conditions.len(),
        mco_api::constants::mcn_conditions::ALL.len()
    );

    // Reboot: a file outside every disruption policy.
    set_annotation(&nodes, ann::DESIRED_CONFIG, "rendered-worker-2").await;
    let exit = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit, Exit::Rebooting);
    assert!(SimRebooter::pending(&sim.fs).unwrap().is_some());
    let n = nodes.get(NODE).await.unwrap();
    assert_eq!(annotation(&n, ann::POST_CONFIG_ACTION), "Rebooting");
    assert_eq!(
        annotation(&n, ann::DESIRED_DRAIN),
        "drain-rendered-worker-2"
    );
    complete_sim_reboot(&sim.fs).unwrap();
    let task = start_daemon(daemon_client, &sim);
    wait_done(&nodes, "rendered-worker-2").await;
    eventually("Updated=True again", 30, || async {
        let m = mcns.get(NODE).await.ok()?;
        let c = m.status?.condition("Updated").cloned()?;
        (c.status == "True" && c.message == format!("Node {NODE} Updated")).then_some(())
    })
    .await;
    wait_in_order(
        &log,
        mark,
        &[
            ("Updated", "False"),
            ("UpdatePrepared", "True"),
            ("AppliedFilesAndOS", "True"),
            ("RebootedNode", "Unknown"),
            ("RebootedNode", "True"),
            ("Updated", "True"),
        ],
    )
    .await;
    let n = nodes.get(NODE).await.unwrap();
    assert_eq!(annotation(&n, ann::POST_CONFIG_ACTION), "");
    assert_eq!(
        annotation(&n, ann::DESIRED_DRAIN),
        "uncordon-rendered-worker-2"
    );
    assert_eq!(sim.read("/etc/mco-test-file").unwrap(), "hello");

    // Drift: Degraded with upstream's reason, NodeDegraded and Unhealthy; restoring clears it.
    sim.write("/etc/mco-test-file", "not-the-data");
    let reason = eventually("drift degrades the node", 30, || async {
        let n = nodes.get(NODE).await.ok()?;
        (annotation(&n, ann::STATE) == "Degraded").then(|| annotation(&n, ann::REASON))
    })
    .await;
    assert_eq!(
        reason,
        "unexpected on-disk state validating against rendered-worker-2: content mismatch for file \"/etc/mco-test-file\""
    );
    let st = eventually("MCN unhealthy", 30, || async {
        let st = mcns.get(NODE).await.ok()?.status?;
        (st.health == "Unhealthy").then_some(st)
    })
    .await;
    assert_eq!(st.condition("NodeDegraded").unwrap().status, "True");
    assert!(
        st.most_recent_error.contains("content mismatch"),
        "{}",
        st.most_recent_error
    );
    sim.write("/etc/mco-test-file", "hello");
    wait_done(&nodes, "rendered-worker-2").await;
    assert_eq!(annotation(&nodes.get(NODE).await.unwrap(), ann::REASON), "");

    // An unreconcilable config: state Unreconcilable, UpdatePrepared=Unknown.
    let mut bad = ign(json!([]), json!([]));
    bad["storage"]["directories"] = json!([{"path": "/etc/newdir"}]);
    mcs.create(&PostParams::default(), &mc("rendered-worker-3", "", bad))
        .await
        .unwrap();
    set_annotation(&nodes, ann::DESIRED_CONFIG, "rendered-worker-3").await;
    let reason = eventually("Unreconcilable", 30, || async {
        let n = nodes.get(NODE).await.ok()?;
        (annotation(&n, ann::STATE) == "Unreconcilable").then(|| annotation(&n, ann::REASON))
    })
    .await;
    assert!(
        reason.starts_with("can't reconcile config rendered-worker-2 with rendered-worker-3: "),
        "{reason}"
    );
    let st = mcns.get(NODE).await.unwrap().status.unwrap();
    assert_eq!(st.condition("UpdatePrepared").unwrap().status, "Unknown");
    assert_eq!(st.health, "Unhealthy");
    task.abort();
}

/// The daemon's events about its Node, oldest first, as (reason, message, count): their names
/// end in the time they were first made, in hexadecimal nanoseconds; one made again is counted
/// on the first.
async fn node_events(admin: &Client) -> Vec<(String, String, i32)> {
    let ns = mco_api::constants::names::DEFAULT_NAMESPACE;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin.clone(), ns);
    let mut list = events.list(&Default::default()).await.unwrap().items;
    list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    list.into_iter()
        .map(|e| {
            let count = e.count.unwrap_or(1);
            (
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                count,
            )
        })
        .collect()
}

/// How many times `reason` was recorded.
fn count(events: &[(String, String, i32)], reason: &str) -> i32 {
    events
        .iter()
        .filter(|(r, _, _)| r == reason)
        .map(|(_, _, n)| n)
        .sum()
}

/// Waits until `reason` was recorded `n` times, and returns the events then.
async fn events_once(admin: &Client, reason: &str, n: i32) -> Vec<(String, String, i32)> {
    eventually(&format!("{reason} recorded {n} times"), 30, || async {
        let seen = node_events(admin).await;
        (count(&seen, reason) == n).then_some(seen)
    })
    .await
}

fn reasons(events: &[(String, String, i32)]) -> Vec<(&str, &str, i32)> {
    events
        .iter()
        .map(|(r, m, n)| (r.as_str(), m.as_str(), *n))
        .collect()
}

const ADD: (&str, &str, i32) = ("AddSigtermProtection", "Adding SIGTERM protection", 1);
const REMOVE: (&str, &str, i32) = ("RemoveSigtermProtection", "Removing SIGTERM protection", 1);

/// As upstream's daemon: a rebootless update holds SIGTERM off from just after the drift
/// monitor stops, before its drain, to its very end, after Done, and says so once each way. The
/// boot before it says neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebootless_update_holds_sigterm_off_to_its_end() {
    let (server, admin, mcs) = serve_with_crds().await;
    let empty = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let mut ssh = ign(json!([]), json!([]));
    ssh["passwd"] =
        json!({"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAk"]}]});
    let rebootless = mc("rendered-worker-1", "", ssh);
    for m in [&empty, &rebootless] {
        mcs.create(&PostParams::default(), m).await.unwrap();
    }
    let (nodes, _mcns) = settled_node(&admin).await;
    drain_controller(nodes.clone());
    let sim = SimNode::new(true);
    let task = start_daemon(node_client(&server).await, &sim);
    wait_done(&nodes, "rendered-worker-0").await;
    let booted = events_once(&admin, "NodeDone", 1).await;
    assert_eq!(
        count(&booted, ADD.0) + count(&booted, REMOVE.0),
        0,
        "{booted:#?}"
    );

    set_annotation(&nodes, ann::DESIRED_CONFIG, "rendered-worker-1").await;
    wait_done(&nodes, "rendered-worker-1").await;
    let seen = events_once(&admin, REMOVE.0, 1).await;
    let update = reasons(&seen[booted.len()..]);
    assert_eq!(
        update[..2],
        [
            (
                "ConfigDriftMonitorStopped",
                "Config Drift Monitor stopped",
                1
            ),
            ADD
        ],
        "{update:#?}"
    );
    assert_eq!(update.last(), Some(&REMOVE), "{update:#?}");
    let done = update.iter().position(|(r, _, _)| *r == "NodeDone");
    assert!(done.is_some(), "Done before the end: {update:#?}");
    assert_eq!(count(&seen, ADD.0), 1, "{update:#?}");
    assert!(SimRebooter::pending(&sim.fs).unwrap().is_none());
    task.abort();
}

/// As upstream's daemon: a reboot update holds SIGTERM off from just after the drift monitor
/// stops, before its drain, and says so once; it stops as the reboot is requested, just before
/// `Reboot`, whose flush takes both. The boot after it says neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_update_holds_sigterm_off_until_its_reboot_request() {
    let (f, task) = daemon_done_on_the_first_config().await;
    let booted = events_once(&f.admin, "NodeDone", 1).await;
    let task = reboot_update(&f, task).await;
    let seen = events_once(&f.admin, "NodeDone", 2).await;
    let done = "Setting node worker-0, currentConfig rendered-worker-1 to Done";
    assert_eq!(
        reasons(&seen[booted.len()..]),
        [
            (
                "ConfigDriftMonitorStopped",
                "Config Drift Monitor stopped",
                1
            ),
            ADD,
            ("Cordon", "Cordoned node to apply update", 1),
            ("Drain", "Draining node to update config.", 1),
            REMOVE,
            (
                "Reboot",
                "Node will reboot into config rendered-worker-1",
                1
            ),
            (
                "ConfigDriftMonitorStarted",
                "Config Drift Monitor started, watching against rendered-worker-1",
                1
            ),
            (
                "Uncordon",
                "Update completed for config rendered-worker-1 and node has been uncordoned",
                1
            ),
            ("NodeDone", done, 1),
        ]
    );
    task.abort();
}

/// `rendered-worker-0` (empty, where the node starts) and `rendered-worker-1` (one file, so
/// moving to it drains and reboots).
async fn create_empty_and_file_configs(mcs: &Api<MachineConfig>) {
    let empty = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let with_file = mc(
        "rendered-worker-1",
        "",
        ign(
            json!([file("/etc/mco-test-file", "hello", 0o644)]),
            json!([]),
        ),
    );
    for m in [&empty, &with_file] {
        mcs.create(&PostParams::default(), m).await.unwrap();
    }
}

/// A daemon waiting on a drain request nobody answers stops cleanly on shutdown: `Exit::Shutdown`, and
/// the node is not marked Degraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_a_drain_wait_is_not_degraded() {
    let (server, admin, mcs) = serve_with_crds().await;
    create_empty_and_file_configs(&mcs).await;
    let (nodes, _) = settled_node(&admin).await;

    let sim = SimNode::new(true);
    let client = node_client(&server).await;
    let mut opts = SyncOptions::new(NODE);
    opts.poll_interval = Duration::from_millis(50);
    let daemon = Daemon::new(client, sim.engine(), opts);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(daemon.run(async {
        let _ = stopped.await;
    }));
    // Nothing answers drain requests: the first sync's uncordon request already waits.
    eventually("a drain request", 30, || async {
        let n = nodes.get(NODE).await.ok()?;
        (!annotation(&n, ann::DESIRED_DRAIN).is_empty()).then_some(())
    })
    .await;
    stop.send(()).unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(exit, Exit::Shutdown);
    let n = nodes.get(NODE).await.unwrap();
    assert_ne!(annotation(&n, ann::STATE), "Degraded");
    assert_eq!(annotation(&n, ann::CURRENT_CONFIG), "rendered-worker-0");
}

/// The drain controller's answers reach a waiting daemon through its node watch: with the
/// fallback GET only every 5 minutes, the start-up uncordon, a drain before a reboot and the
/// uncordon after it all finish within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_waits_end_on_the_watch_not_the_poll() {
    let (server, admin, mcs) = serve_with_crds().await;
    create_empty_and_file_configs(&mcs).await;
    let (nodes, _) = settled_node(&admin).await;
    drain_controller(nodes.clone());

    let sim = SimNode::new(true);
    let client = node_client(&server).await;
    let start = |client: Client| {
        let mut opts = SyncOptions::new(NODE);
        opts.poll_interval = Duration::from_secs(300);
        opts.drain_timeout = Duration::from_secs(600);
        let daemon = Daemon::new(client, sim.engine(), opts);
        tokio::spawn(async move { daemon.run(std::future::pending()).await.unwrap() })
    };
    // Well under the poll interval, so only the watch can end the waits in time.
    const PROMPT: u64 = 20;

    let task = start(client.clone());
    let uncordoned = |n: &Node, config: &str| {
        annotation(n, ann::STATE) == "Done"
            && annotation(n, ann::CURRENT_CONFIG) == config
            && annotation(n, ann::LAST_APPLIED_DRAIN) == format!("uncordon-{config}")
    };
    eventually("start-up uncordon", PROMPT, || async {
        let n = nodes.get(NODE).await.ok()?;
        uncordoned(&n, "rendered-worker-0").then_some(())
    })
    .await;

    set_annotation(&nodes, ann::DESIRED_CONFIG, "rendered-worker-1").await;
    let exit = tokio::time::timeout(Duration::from_secs(PROMPT), task)
        .await
        .expect("the drain before the reboot ends on the watch")
        .unwrap();
    assert_eq!(exit, Exit::Rebooting);
    let n = nodes.get(NODE).await.unwrap();
    assert_eq!(
        annotation(&n, ann::LAST_APPLIED_DRAIN),
        "drain-rendered-worker-1"
    );

    complete_sim_reboot(&sim.fs).unwrap();
    let task = start(client);
    eventually("uncordon after the reboot", PROMPT, || async {
        let n = nodes.get(NODE).await.ok()?;
        uncordoned(&n, "rendered-worker-1").then_some(())
    })
    .await;
    task.abort();
}

/// The test's controller, as the real one answers: it applies a drain condition to the MCN
/// (its own field manager) before it sets `lastAppliedDrain`.
///
/// It acts once the phase the daemon writes alongside its request is in (Prepared for a drain,
/// Resumed for an uncordon). Its server-side apply is unconditional, so one landing between the
/// daemon's read and write would fail that write with a conflict; the real drain controller's
/// conditional writes retry instead, and this test is about the daemon's copies.
fn drain_controller_writing_mcn(nodes: Api<Node>, mcns: Api<MachineConfigNode>) {
    // Watched, not read: the tests count the daemon's reads.
    let (seen, writer) = kube::runtime::reflector::store::<MachineConfigNode>();
    let reflect =
        kube::runtime::reflector(writer, watcher(mcns.clone(), watcher::Config::default()));
    tokio::spawn(reflect.for_each(|_| async {}));
    tokio::spawn(async move {
        let mut applied: std::collections::BTreeSet<String> = Default::default();
        loop {
            if let Ok(n) = nodes.get(NODE).await {
                let want = annotation(&n, ann::DESIRED_DRAIN);
                let alongside = if want.starts_with("uncordon-") {
                    "Resumed"
                } else {
                    "UpdatePrepared"
                };
                let written = seen
                    .get(&kube::runtime::reflector::ObjectRef::new(NODE))
                    .and_then(|m| {
                        m.status
                            .as_ref()?
                            .condition(alongside)
                            .map(|c| c.status == "True")
                    });
                if !want.is_empty()
                    && want != annotation(&n, ann::LAST_APPLIED_DRAIN)
                    && written == Some(true)
                {
                    // An uncordon sets the real controller's conditions, whose texts the
                    // daemon shares; a drain, one of its own.
                    let mut conditions: Vec<serde_json::Value> = if want.starts_with("uncordon-") {
                        mco_api::constants::mcn_reasons::UNCORDONED
                            .iter()
                            .map(|(t, reason, message)| {
                                json!({
                                    "type": t, "status": "True", "reason": reason,
                                    "message": message,
                                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                                })
                            })
                            .collect()
                    } else {
                        vec![json!({
                            "type": "Drained", "status": "True", "reason": "Drained",
                            "message": want, "lastTransitionTime": "2026-01-01T00:00:00Z",
                        })]
                    };
                    // An apply is the manager's whole intent: a condition it set before and
                    // leaves out would lose its fields. As the real controller does, those go
                    // again as they stand now.
                    let now = seen.get(&kube::runtime::reflector::ObjectRef::new(NODE));
                    let ours: Vec<String> = conditions
                        .iter()
                        .map(|c| c["type"].as_str().unwrap_or_default().to_string())
                        .collect();
                    for t in applied.iter().filter(|t| !ours.contains(t)) {
                        if let Some(c) = now
                            .as_ref()
                            .and_then(|m| m.status.as_ref()?.condition(t).cloned())
                        {
                            conditions.push(serde_json::to_value(c).unwrap());
                        }
                    }
                    applied.extend(ours);
                    let cond = json!({
                        "apiVersion": "machineconfiguration.openshift.io/v1alpha1",
                        "kind": "MachineConfigNode",
                        "metadata": {"name": NODE},
                        "status": {"conditions": conditions},
                    });
                    mcns.patch_status(
                        NODE,
                        &PatchParams::apply("test-drain-controller").force(),
                        &Patch::Apply(&cond),
                    )
                    .await
                    .unwrap();
                    set_annotation(&nodes, ann::LAST_APPLIED_DRAIN, &want).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// A daemon on `rendered-worker-0` with the MCN-writing drain controller, and what a test needs
/// to drive it.
struct Fixture {
    _server: TestServer,
    admin: Client,
    nodes: Api<Node>,
    mcns: Api<MachineConfigNode>,
    sim: SimNode,
    /// The daemon's client: every request it sends is logged in `sent`.
    client: Client,
    sent: Sent,
    /// The daemon's drain-wait poll.
    poll: Duration,
}

/// The requests a client sent, as "METHOD path?query", in order.
type Sent = Arc<Mutex<Vec<String>>>;

/// `client`, logging each request it sends.
fn logging(client: Client) -> (Client, Sent) {
    let sent = Sent::default();
    let log = Arc::clone(&sent);
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        log.lock()
            .unwrap()
            .push(format!("{} {}", req.method(), req.uri()));
        let client = client.clone();
        async move { client.send(req).await.map_err(tower::BoxError::from) }
    });
    (Client::new(svc, "default"), sent)
}

async fn daemon_done_on_the_first_config() -> (Fixture, tokio::task::JoinHandle<Exit>) {
    daemon_polling_done_on_the_first_config(Duration::from_millis(50)).await
}

/// [`daemon_done_on_the_first_config`] with the drain wait's poll at `poll`.
async fn daemon_polling_done_on_the_first_config(
    poll: Duration,
) -> (Fixture, tokio::task::JoinHandle<Exit>) {
    let (server, admin, mcs) = serve_with_crds().await;
    create_empty_and_file_configs(&mcs).await;
    let (nodes, mcns) = settled_node(&admin).await;
    drain_controller_writing_mcn(nodes.clone(), mcns.clone());
    let sim = SimNode::new(true);
    let (client, sent) = logging(node_client(&server).await);
    let task = start_daemon_polling(client.clone(), &sim, poll);
    wait_done(&nodes, "rendered-worker-0").await;
    // The daemon's last write, Updated=True, follows Done: a test that moves the MCN before it
    // lands would make that write meet a conflict.
    eventually("Updated=True on the first config", 30, || updated(&mcns)).await;
    let f = Fixture {
        _server: server,
        admin,
        nodes,
        mcns,
        sim,
        client,
        sent,
        poll,
    };
    (f, task)
}

/// Moves the node and its MCN's spec to `rendered-worker-1` (a reboot), restarts the daemon after the reboot as the
/// host would, and returns the new daemon once the node is Done.
async fn reboot_update(
    f: &Fixture,
    task: tokio::task::JoinHandle<Exit>,
) -> tokio::task::JoinHandle<Exit> {
    reboot_update_to(f, task, "rendered-worker-1").await
}

/// [`reboot_update`] to `config`.
async fn reboot_update_to(
    f: &Fixture,
    task: tokio::task::JoinHandle<Exit>,
    config: &str,
) -> tokio::task::JoinHandle<Exit> {
    // As the controller does: the MCN's spec follows the node's desired config.
    let spec = json!({"spec": {"configVersion": {"desired": config}}});
    f.mcns
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap();
    set_annotation(&f.nodes, ann::DESIRED_CONFIG, config).await;
    let exit = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit, Exit::Rebooting);
    complete_sim_reboot(&f.sim.fs).unwrap();
    let task = start_daemon_polling(f.client.clone(), &f.sim, f.poll);
    wait_done(&f.nodes, config).await;
    task
}

/// A daemon that boots before the controller has made its MachineConfigNode holds its status,
/// and writes it once the MachineConfigNode exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_written_before_the_mcn_exists_lands_once_it_does() {
    let (server, admin, mcs) = serve_with_crds().await;
    create_empty_and_file_configs(&mcs).await;
    // The daemon boots first, as a node can when the controller is slow to make its MCN.
    let (nodes, mcns) = settled_node_alone(&admin).await;
    drain_controller(nodes.clone());
    let sim = SimNode::new(true);
    let _task = start_daemon(node_client(&server).await, &sim);
    wait_done(&nodes, "rendered-worker-0").await;
    eventually("the daemon's first status write to find no MCN", 30, || async {
        let missed = r#"verb="GET",group="machineconfiguration.openshift.io",resource="machineconfignodes",subresource="",code="404""#;
        (requests(&admin, missed).await > 0).then_some(())
    })
    .await;
    create_mcn(&mcns).await;
    eventually("Updated=True once the MCN exists", 30, || updated(&mcns)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_file_on_an_idle_node_is_polled_and_reapplied() {
    let (f, task) = daemon_done_on_the_first_config().await;
    f.sim.write(paths::FORCE_FILE, "");
    let exit = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the force file was not acted on within 30 s")
        .unwrap();
    assert_eq!(exit, Exit::Rebooting);
    assert!(
        !f.sim.fs.exists(paths::FORCE_FILE).unwrap(),
        "force file consumed"
    );
}

/// Files alone are written in milliseconds, so their in-progress phase rides with the write that
/// ends it. An OS change takes minutes on a host, and the MCN shows it in progress meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_os_change_is_shown_in_progress_and_files_alone_are_not() {
    let (f, task) = daemon_done_on_the_first_config().await;
    let log = record(f.mcns.clone());
    let task = reboot_update(&f, task).await;
    let mark = wait_in_order(
        &log,
        0,
        &[("AppliedFilesAndOS", "True"), ("Updated", "True")],
    )
    .await;
    assert_eq!(
        transitions(&log, "AppliedFilesAndOS", "Unknown"),
        0,
        "files alone were shown in progress"
    );

    let mcs: Api<MachineConfig> = Api::all(f.admin.clone());
    let os = mc(
        "rendered-worker-2",
        "registry.example.com/mco/machine-os-content:1.3.0",
        ign(
            json!([file("/etc/mco-test-file", "hello", 0o644)]),
            json!([]),
        ),
    );
    mcs.create(&PostParams::default(), &os).await.unwrap();
    let task = reboot_update_to(&f, task, "rendered-worker-2").await;
    wait_in_order(
        &log,
        mark,
        &[
            ("AppliedFilesAndOS", "Unknown"),
            ("AppliedFilesAndOS", "True"),
            ("RebootedNode", "True"),
            ("Updated", "True"),
        ],
    )
    .await;
    task.abort();
    assert_eq!(
        f.sim.sim_ostree().booted_os_image_url().unwrap().as_deref(),
        Some("registry.example.com/mco/machine-os-content:1.3.0")
    );
}

/// The daemon's writes after a drain answer patch only its own conditions, which the drain
/// controller's writes leave valid, and after an uncordon answer its copy holds the conditions
/// that answer follows: no write meets a 409 or a failed test (422).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_after_a_drain_answer_do_not_conflict() {
    let (f, task) = daemon_done_on_the_first_config().await;
    let task = reboot_update(&f, task).await;
    eventually("Updated=True on the MCN", 30, || async {
        let m = f.mcns.get(NODE).await.ok()?;
        m.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Updated" && c.status == "True")
            .then_some(())
    })
    .await;
    task.abort();

    let patched = status_requests(&f.admin, "PATCH", 200).await;
    assert!(patched > 0, "no status patches counted");
    for (verb, code) in [("PUT", 409), ("PATCH", 409), ("PATCH", 422)] {
        let n = status_requests(&f.admin, verb, code).await;
        assert_eq!(n, 0, "{n} status {verb}s answered {code}");
    }
}

/// The MCN status requests of one verb answered with one code.
async fn status_requests(admin: &Client, verb: &str, code: u16) -> u64 {
    let labels = format!(
        r#"verb="{verb}",group="machineconfiguration.openshift.io",resource="machineconfignodes",subresource="status",code="{code}""#
    );
    requests(admin, &labels).await
}

/// The daemon's MCN status writes, whole or patched.
async fn status_writes(admin: &Client) -> u64 {
    status_requests(admin, "PUT", 200).await + status_requests(admin, "PATCH", 200).await
}

/// One counter of the server's `apiserver_request_total`, 0 when absent.
async fn requests(admin: &Client, labels: &str) -> u64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = admin.request_text(req).await.unwrap();
    mco_apiserver::metrics::request_total(&text, labels)
}

/// The daemon reads its MCN only where no copy it holds can serve (at start, a new process after
/// the reboot), not on every sync that finds nothing to write: node events during an update wake
/// many such syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncs_with_nothing_to_write_do_not_read_the_mcn() {
    const MCN_GETS: &str = r#"verb="GET",group="machineconfiguration.openshift.io",resource="machineconfignodes",subresource="",code="200""#;
    let (f, task) = daemon_done_on_the_first_config().await;
    let before = requests(&f.admin, MCN_GETS).await;
    let log = record(f.mcns.clone());
    // Node events with nothing for the daemon to do, each waking a sync.
    for i in 0..10 {
        set_annotation(&f.nodes, "example.com/unrelated", &i.to_string()).await;
    }
    let task = reboot_update(&f, task).await;
    for i in 10..20 {
        set_annotation(&f.nodes, "example.com/unrelated", &i.to_string()).await;
    }
    // Waited for on the recorded watch, so the test itself reads no MCN.
    let deadline = Instant::now() + Duration::from_secs(30);
    while transitions(&log, "Updated", "True") < 2 {
        assert!(Instant::now() < deadline, "no second Updated=True");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gets = requests(&f.admin, MCN_GETS).await - before;
    task.abort();
    // Reads only where no copy serves: the start after the reboot. Reading on every sync with
    // nothing to write made it 6 to 8, reading for the new desired config and after the drain
    // answer 4, and reading after the uncordon answer for the `Updated` reset 2.
    assert!(gets <= 1, "the daemon read its MCN {gets} times");
}

/// An update's phases that follow each other at once share one write: a reboot update costs
/// the daemon 4 MCN status writes (Prepared, Rebooting, Resumed, Updated) and 4 Node writes (the
/// drain request, Rebooting, the uncordon request, Done) where it cost 9 and 6, and every phase
/// still reaches the MCN, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_update_writes_its_phases_in_few_requests() {
    const NODE_PATCHES: &str =
        r#"verb="PATCH",group="",resource="nodes",subresource="",code="200""#;
    let (f, task) = daemon_done_on_the_first_config().await;
    let log = record(f.mcns.clone());
    let (puts, patches, whole) = (
        status_writes(&f.admin).await,
        requests(&f.admin, NODE_PATCHES).await,
        status_requests(&f.admin, "PUT", 200).await,
    );
    let task = reboot_update(&f, task).await;
    let updated = |log: &Log| {
        log.lock()
            .unwrap()
            .iter()
            .any(|(t, s, m)| t == "Updated" && s == "True" && m.contains("Updated"))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    // The watch event goes out before the request is counted.
    while !updated(&log) || status_writes(&f.admin).await < puts + 4 {
        assert!(Instant::now() < deadline, "no Updated=True");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
    let puts = status_writes(&f.admin).await - puts;
    // A sync that lands between the test's spec and annotation writes may record the new
    // observedGeneration on its own: 5 then. Phase by phase, it was 9.
    assert!(
        (4..=5).contains(&puts),
        "the daemon wrote its MCN status {puts} times"
    );
    // Every one a patch, the first after the boot too (on the copy just read): a whole-status
    // write cost the server several patches' worth.
    let whole = status_requests(&f.admin, "PUT", 200).await - whole;
    assert_eq!(whole, 0, "{whole} whole-status writes");
    // The test's own desiredConfig write and the drain controller's two answers are 3 more.
    let patches = requests(&f.admin, NODE_PATCHES).await - patches;
    assert_eq!(patches, 4 + 3, "{patches} Node patches");
    let n = f.nodes.get(NODE).await.unwrap();
    assert_eq!(
        annotation(&n, ann::POST_CONFIG_ACTION),
        "",
        "cleared after the boot"
    );
    assert_eq!(annotation(&n, ann::STATE), "Done");
    // The spec write moved the generation under the daemon's copies; the status follows it.
    let m = f.mcns.get(NODE).await.unwrap();
    assert_eq!(
        m.status.unwrap().observed_generation,
        m.metadata.generation,
        "observedGeneration"
    );
    assert_in_order(
        &log.lock().unwrap(),
        &[
            ("Updated", "False"),
            ("UpdatePrepared", "True"),
            ("AppliedFilesAndOS", "True"),
            ("RebootedNode", "Unknown"),
            ("NodeDegraded", "False"),
            // One write after the boot: the log lists its changes in the conditions' order.
            ("Resumed", "True"),
            ("RebootedNode", "True"),
            ("Updated", "True"),
        ],
    );
}

/// Everything the daemon asks of the API server for one reboot update, its restart included:
/// its watches start with a streaming list (one WATCH each, where a LIST and a WATCH were), the
/// MachineConfigNode version comes from aggregated discovery (one request, where the group's
/// documents were three), and the rest is the update's own reads and writes. A regression adds requests to every node of
/// every rollout, so the total is pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_update_costs_the_daemon_few_requests() {
    // A poll slower than the test, so that only the watch ends the drain waits.
    let (f, task) = daemon_polling_done_on_the_first_config(Duration::from_secs(30)).await;
    let log = record(f.mcns.clone());
    f.sent.lock().unwrap().clear();
    let task = reboot_update(&f, task).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while transitions(&log, "Updated", "True") < 2 {
        assert!(
            Instant::now() < deadline,
            "no Updated=True after the update"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
    let sent = f.sent.lock().unwrap().clone();
    // Upstream's Node events, one request each in the install namespace, sent beside the update
    // rather than in its way:
    // the monitor stopped, SIGTERM held off, cordon, drain, SIGTERM heeded again and reboot
    // before; after, the monitor started, the uncordon and Done.
    let (events, sent): (Vec<String>, Vec<String>) =
        sent.into_iter().partition(|r| r.contains("/events"));
    assert_eq!(events.len(), 9, "the update's events: {events:#?}");
    assert!(
        events
            .iter()
            .all(|r| r.starts_with("POST /api/v1/namespaces/mco-system/events")),
        "{events:#?}"
    );
    let lists: Vec<&String> = sent
        .iter()
        .filter(|r| {
            let (path, query) = r.split_once('?').unwrap_or((r.as_str(), ""));
            r.starts_with("GET ")
                && !query.split('&').any(|kv| kv == "watch=true")
                && (path.ends_with("/nodes") || path.ends_with("/controllerconfigs"))
        })
        .collect();
    assert!(lists.is_empty(), "lists besides the watches: {lists:#?}");
    let watches = sent.iter().filter(|r| r.contains("watch=true")).count();
    assert_eq!(
        watches, 3,
        "the restart's watches (Node, ControllerConfig, PinnedImageSet): {sent:#?}"
    );
    // Before the reboot: the old config (this node keeps none on disk) and the new one,
    // MachineConfiguration/cluster, the drain request, the Prepared phase, Rebooting on the Node
    // and the MCN. After it: three watches, one aggregated discovery and the MCN schema, the
    // MCN, the uncordon request and Resumed, Done and Updated. With no PinnedImageSet the
    // pinned worker sends nothing but its watch. 21 with list-then-watch and the group's
    // discovery documents read one by one.
    assert!(
        sent.len() <= 17,
        "the daemon sent {} requests for one reboot update: {sent:#?}",
        sent.len()
    );
}

/// A SIGTERM while an update holds it off is said in upstream's words, a Warning event
/// `GotSigtermDuringUpdate`, and the daemon stops at the update's next safe point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_during_an_update_is_said() {
    let (server, admin, mcs) = serve_with_crds().await;
    create_empty_and_file_configs(&mcs).await;
    // Nothing answers the drain: the update waits in it.
    let nodes = settled_node_uncordoned(&admin).await;
    let sim = SimNode::new(true);
    let mut opts = SyncOptions::new(NODE);
    opts.poll_interval = Duration::from_millis(50);
    opts.drain_timeout = Duration::from_secs(600);
    let daemon = Daemon::new(node_client(&server).await, sim.engine(), opts);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(daemon.run(async {
        let _ = stopped.await;
    }));
    wait_done(&nodes, "rendered-worker-0").await;
    set_annotation(&nodes, ann::DESIRED_CONFIG, "rendered-worker-1").await;
    events_once(&admin, "Drain", 1).await;
    assert_eq!(
        count(&node_events(&admin).await, "GotSigtermDuringUpdate"),
        0
    );
    stop.send(()).unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(exit, Exit::Shutdown);
    let seen = events_once(&admin, "GotSigtermDuringUpdate", 1).await;
    assert!(
        reasons(&seen).contains(&(
            "GotSigtermDuringUpdate",
            "Got SIGTERM but actively updating",
            1
        )),
        "{seen:#?}"
    );
}

/// A drain nobody answers ends in upstream's words: the update fails, and a Warning event
/// `FailedToDrain` on the Node says why, after the `Cordon` and `Drain` events of the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_drain_ends_in_upstreams_warning_event() {
    let (server, admin, mcs) = serve_with_crds().await;
    for m in [
        mc("rendered-worker-0", "", ign(json!([]), json!([]))),
        mc(
            "rendered-worker-1",
            "",
            ign(
                json!([file("/etc/mco-test-file", "hello", 0o644)]),
                json!([]),
            ),
        ),
    ] {
        mcs.create(&PostParams::default(), &m).await.unwrap();
    }
    // Nothing answers the drain.
    let nodes = settled_node_uncordoned(&admin).await;
    let sim = SimNode::new(true);
    let mut opts = SyncOptions::new(NODE);
    opts.poll_interval = Duration::from_millis(50);
    opts.drain_timeout = Duration::from_secs(2);
    opts.max_backoff = Duration::from_secs(60);
    let daemon = Daemon::new(node_client(&server).await, sim.engine(), opts);
    let task = tokio::spawn(async move { daemon.run(std::future::pending()).await });
    wait_done(&nodes, "rendered-worker-0").await;
    set_annotation(&nodes, ann::DESIRED_CONFIG, "rendered-worker-1").await;

    // In mco's namespace, which the Node's reference names, as upstream's daemon records them
    // in its own; none in `default`.
    let ns = mco_api::constants::names::DEFAULT_NAMESPACE;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin.clone(), ns);
    let want = "failed to drain node: worker-0 after 2s. Please see machine-config-controller logs for more information";
    let seen = eventually("RemoveSigtermProtection", 30, || async {
        let mut list = events.list(&Default::default()).await.ok()?.items;
        list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let reasons: Vec<(String, String, String)> = list
            .into_iter()
            .map(|e| {
                assert_eq!(e.involved_object.namespace.as_deref(), Some(ns), "{e:?}");
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                )
            })
            .collect();
        reasons
            .iter()
            .any(|(_, r, _)| r == "RemoveSigtermProtection")
            .then_some(reasons)
    })
    .await;
    // The failed update's events, from its start to its end: a retry after the backoff may
    // follow them.
    let mut tail: Vec<(&str, &str, &str)> = seen
        .iter()
        .map(|(t, r, m)| (t.as_str(), r.as_str(), m.as_str()))
        .skip_while(|(_, r, _)| *r != "AddSigtermProtection")
        .collect();
    if let Some(end) = tail
        .iter()
        .position(|(_, r, _)| *r == "RemoveSigtermProtection")
    {
        tail.truncate(end + 1);
    }
    assert_eq!(
        tail,
        vec![
            (
                "Normal",
                "AddSigtermProtection",
                "Adding SIGTERM protection"
            ),
            ("Normal", "Cordon", "Cordoned node to apply update"),
            ("Normal", "Drain", "Draining node to update config."),
            ("Warning", "FailedToDrain", want),
            (
                "Normal",
                "RemoveSigtermProtection",
                "Removing SIGTERM protection"
            ),
        ],
        "{seen:#?}"
    );
    let in_default: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin, "default");
    assert_eq!(
        in_default.list(&Default::default()).await.unwrap().items,
        vec![],
        "nothing in default"
    );
    // The event is sent beside the failure's writes, so the state may follow it.
    eventually("Degraded", 30, || async {
        let n = nodes.get(NODE).await.ok()?;
        (annotation(&n, ann::STATE) == "Degraded").then_some(())
    })
    .await;
    assert_eq!(
        sim.read("/etc/mco-test-file"),
        None,
        "nothing written undrained"
    );
    task.abort();
}

/// An RHCOS node whose booted deployment lacks its config's extensions: booted into its
/// desired config it is not Done (upstream's verifyExtensionPackages words); pointed at a
/// config without them, it is not held back by the one it leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_in_its_desired_config_is_not_done_without_its_extensions() {
    let (server, admin, mcs) = serve_with_crds().await;
    let mut with_ext = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    with_ext.spec.extensions = Some(vec!["usbguard".into()]);
    for m in [
        with_ext,
        mc("rendered-worker-1", "", ign(json!([]), json!([]))),
    ] {
        mcs.create(&PostParams::default(), &m).await.unwrap();
    }
    let nodes = settled_node_uncordoned(&admin).await;
    drain_controller(nodes.clone());
    let sim = SimNode::new(true);
    sim.write("/etc/os-release", &support::fixture("os-release/rhcos"));
    let task = start_daemon(node_client(&server).await, &sim);
    eventually("Degraded for the missing extension", 30, || async {
        let n = nodes.get(NODE).await.ok()?;
        let reason = annotation(&n, ann::REASON);
        (annotation(&n, ann::STATE) == "Degraded"
            && reason.contains("extension package verification failed")
            && reason.contains("usbguard"))
        .then_some(())
    })
    .await;
    // A target without the extension: the node updates to it (drained, written, its reboot
    // requested) instead of staying Degraded over the config it leaves.
    set_annotation(&nodes, ann::DESIRED_CONFIG, "rendered-worker-1").await;
    eventually(
        "the reboot into rendered-worker-1 requested",
        30,
        || async { SimRebooter::pending(&sim.fs).ok().flatten().map(|_| ()) },
    )
    .await;
    task.abort();
}

/// A machine the machine config server provisioned starts bootstrapping: Ignition wrote the
/// file, first boot stored the encapsulated config (its Ignition empty) as `currentconfig`, and
/// `node-annotations.json` is there. The daemon's first start stores the cluster's config in its
/// place, renames the annotations file, validates what Ignition wrote, and is Done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrapping_node_takes_the_clusters_config_as_current() {
    let (server, admin, mcs) = serve_with_crds().await;
    create_empty_and_file_configs(&mcs).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let node = NodeBuilder::new(NODE)
        .current_config("rendered-worker-1")
        .desired_config("rendered-worker-1")
        .state("Done")
        .build();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let mcns: Api<MachineConfigNode> = Api::all(admin.clone());
    let mcn: MachineConfigNode = serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1alpha1", "kind": "MachineConfigNode",
        "metadata": {"name": NODE},
        "spec": {"nodeRef": {"name": NODE}, "pool": {"name": "worker"}, "configVersion": {"desired": "rendered-worker-1"}},
    }))
    .unwrap();
    mcns.create(&PostParams::default(), &mcn).await.unwrap();
    drain_controller(nodes.clone());

    let sim = SimNode::new(false);
    sim.write("/etc/mco-test-file", "hello");
    let mut encapsulated = mcs.get("rendered-worker-1").await.unwrap();
    encapsulated.spec.config = Some(json!({"ignition": {"version": "3.5.0"}}));
    sim.write(
        paths::CURRENT_CONFIG,
        &serde_json::to_string(&encapsulated).unwrap(),
    );
    sim.write(
        paths::INITIAL_NODE_ANNOTATIONS,
        r#"{"machineconfiguration.openshift.io/currentConfig":"rendered-worker-1"}"#,
    );
    let client = node_client(&server).await;
    let task = start_daemon(client, &sim);
    let bak = format!("{}.bak", paths::INITIAL_NODE_ANNOTATIONS);
    eventually("node-annotations.json renamed", 30, || async {
        sim.read(&bak).map(drop)
    })
    .await;
    // Updated=True comes after the boot's validation: the disk matched the whole config.
    eventually("Updated=True", 30, || updated(&mcns)).await;
    let current: serde_json::Value =
        serde_json::from_str(&sim.read(paths::CURRENT_CONFIG).unwrap()).unwrap();
    assert_eq!(
        current["spec"]["config"]["storage"]["files"][0]["path"], "/etc/mco-test-file",
        "{current}"
    );
    assert!(sim.read(paths::INITIAL_NODE_ANNOTATIONS).is_none());
    let n = nodes.get(NODE).await.unwrap();
    assert_eq!(annotation(&n, ann::STATE), "Done");
    task.abort();
}

/// The OS image of `rendered-worker-0` in the image-mode tests, which the node boots at first.
const RENDERED_OS: &str = "registry.example.com/mco/machine-os-content:1.3.0";
/// An image an on-cluster image mode build produced for the pool.
const IMAGE: &str =
    "registry.example/os@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

async fn remove_annotation(nodes: &Api<Node>, k: &str) {
    let patch = json!({"metadata": {"annotations": {k: null}}});
    nodes
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// A node settled on `rendered-worker-0` (one file, [`RENDERED_OS`]) and booted into that OS
/// image, with the drain controller answering; its daemon is not started yet.
async fn node_on_the_rendered_os() -> (
    TestServer,
    Api<Node>,
    Api<MachineConfigNode>,
    SimNode,
    Client,
) {
    let (server, admin, mcs) = serve_with_crds().await;
    let rendered = mc(
        "rendered-worker-0",
        RENDERED_OS,
        ign(
            json!([file("/etc/mco-test-file", "hello", 0o644)]),
            json!([]),
        ),
    );
    mcs.create(&PostParams::default(), &rendered).await.unwrap();
    let (nodes, mcns) = settled_node(&admin).await;
    drain_controller(nodes.clone());
    let sim = SimNode::new(true);
    sim.write("/etc/mco-test-file", "hello");
    let refspec = format!("ostree-unverified-registry:{RENDERED_OS}");
    sim.sim_ostree()
        .rebase(RENDERED_OS, &RebaseMode::Pivot { refspec })
        .unwrap();
    complete_sim_reboot(&sim.fs).unwrap();
    let client = node_client(&server).await;
    (server, nodes, mcns, sim, client)
}

/// Waits for Done on `rendered-worker-0` with `currentImage` at `image` (absent for `""`) and
/// `Updated=True` after it.
async fn wait_done_on_image(nodes: &Api<Node>, mcns: &Api<MachineConfigNode>, image: &str) {
    eventually(&format!("node Done on image {image:?}"), 60, || async {
        let n = nodes.get(NODE).await.ok()?;
        let current_image = n
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ann::CURRENT_IMAGE));
        (annotation(&n, ann::STATE) == "Done"
            && annotation(&n, ann::CURRENT_CONFIG) == "rendered-worker-0"
            && current_image.map(String::as_str) == (!image.is_empty()).then_some(image)
            && annotation(&n, ann::DESIRED_DRAIN) == "uncordon-rendered-worker-0")
            .then_some(())
    })
    .await;
    eventually("Updated=True", 30, || updated(mcns)).await;
}

/// A daemon started on the settled node is given `desiredImage` [`IMAGE`] and runs the update
/// until it exits to reboot.
async fn image_update_up_to_its_reboot(
    nodes: &Api<Node>,
    mcns: &Api<MachineConfigNode>,
    sim: &SimNode,
    client: &Client,
) {
    let task = start_daemon(client.clone(), sim);
    wait_done_on_image(nodes, mcns, "").await;
    set_annotation(nodes, ann::DESIRED_IMAGE, IMAGE).await;
    let exit = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit, Exit::Rebooting);
}

/// What the disk says: `currentconfig`'s osImageURL and annotations, and `currentimage`.
fn on_disk(sim: &SimNode) -> (String, serde_json::Value, Option<String>) {
    let current: serde_json::Value =
        serde_json::from_str(&sim.read(paths::CURRENT_CONFIG).unwrap()).unwrap();
    (
        current["spec"]["osImageURL"].as_str().unwrap().to_string(),
        current["metadata"]["annotations"].clone(),
        sim.read(paths::CURRENT_IMAGE),
    )
}

fn no_image_mode_annotations(annotations: &serde_json::Value) -> bool {
    [ann::ORIGINAL_OS_IMAGE_URL, ann::OCL_OS_IMAGE_URL]
        .iter()
        .all(|k| annotations.get(k).is_none())
}

/// Upstream's on-cluster image mode: a node on `rendered-worker-0` gets `desiredImage` with the
/// same `desiredConfig`. It drains, rebases to the image, reboots and reports `currentImage`,
/// and keeps upstream's files: `currentconfig` with the rendered OS image, `currentimage` with
/// the image. Once `desiredImage` is removed it rebases back to the rendered OS image, and
/// `currentImage` and `currentimage` are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_enters_image_mode_and_leaves_it() {
    let (_server, nodes, mcns, sim, client) = node_on_the_rendered_os().await;
    image_update_up_to_its_reboot(&nodes, &mcns, &sim, &client).await;
    let n = nodes.get(NODE).await.unwrap();
    assert_eq!(
        annotation(&n, ann::LAST_APPLIED_DRAIN),
        "drain-rendered-worker-0",
        "drained for the image"
    );
    assert_eq!(annotation(&n, ann::POST_CONFIG_ACTION), "Rebooting");
    assert_eq!(
        annotation(&n, ann::CURRENT_IMAGE),
        "",
        "not before the reboot"
    );
    let staged = sim.sim_ostree().status().unwrap().staged.unwrap();
    assert_eq!(staged.os_image_url().as_deref(), Some(IMAGE));
    let (url, annotations, image) = on_disk(&sim);
    assert_eq!(
        url, RENDERED_OS,
        "currentconfig keeps the rendered OS image"
    );
    assert!(no_image_mode_annotations(&annotations), "{annotations}");
    assert_eq!(image.as_deref(), Some(IMAGE));

    complete_sim_reboot(&sim.fs).unwrap();
    assert_eq!(
        sim.sim_ostree().booted_os_image_url().unwrap().as_deref(),
        Some(IMAGE)
    );
    let task = start_daemon(client.clone(), &sim);
    wait_done_on_image(&nodes, &mcns, IMAGE).await;
    let n = nodes.get(NODE).await.unwrap();
    assert_eq!(annotation(&n, ann::POST_CONFIG_ACTION), "");
    assert_eq!(annotation(&n, ann::REASON), "");
    assert!(SimRebooter::pending(&sim.fs).unwrap().is_none());

    // Leaving image mode: back to the rendered config's OS image.
    remove_annotation(&nodes, ann::DESIRED_IMAGE).await;
    let exit = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit, Exit::Rebooting);
    let staged = sim.sim_ostree().status().unwrap().staged.unwrap();
    assert_eq!(staged.os_image_url().as_deref(), Some(RENDERED_OS));
    let (url, _, image) = on_disk(&sim);
    assert_eq!(url, RENDERED_OS);
    assert_eq!(image, None, "currentimage removed");
    complete_sim_reboot(&sim.fs).unwrap();
    let task = start_daemon(client, &sim);
    wait_done_on_image(&nodes, &mcns, "").await;
    task.abort();
    assert_eq!(
        sim.sim_ostree().booted_os_image_url().unwrap().as_deref(),
        Some(RENDERED_OS)
    );
    assert_eq!(sim.read("/etc/mco-test-file").as_deref(), Some("hello"));
}

/// A daemon killed after it wrote the image update (`currentconfig`, `currentimage`, the owed
/// reboot) but before its reboot request: the next start in the same boot validates nothing,
/// reports nothing Done and requests the reboot, and the boot after it completes on the image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_update_killed_before_its_reboot_resumes() {
    let (_server, nodes, mcns, sim, client) = node_on_the_rendered_os().await;
    image_update_up_to_its_reboot(&nodes, &mcns, &sim, &client).await;
    // The kill: the reboot was never asked for, and the boot is the same.
    assert!(sim.fs.remove_file(paths::SIM_REBOOT_REQUEST).unwrap());
    assert_eq!(on_disk(&sim).2.as_deref(), Some(IMAGE));

    let task = start_daemon(client.clone(), &sim);
    let exit = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit, Exit::Rebooting, "the owed reboot is requested again");
    assert!(SimRebooter::pending(&sim.fs).unwrap().is_some());
    let n = nodes.get(NODE).await.unwrap();
    assert_eq!(annotation(&n, ann::STATE), "Working");
    assert_eq!(annotation(&n, ann::CURRENT_IMAGE), "");
    assert_eq!(annotation(&n, ann::POST_CONFIG_ACTION), "Rebooting");

    complete_sim_reboot(&sim.fs).unwrap();
    let task = start_daemon(client, &sim);
    wait_done_on_image(&nodes, &mcns, IMAGE).await;
    task.abort();
    assert_eq!(
        sim.sim_ostree().booted_os_image_url().unwrap().as_deref(),
        Some(IMAGE)
    );
}

/// A takeover of a node upstream's daemon moved into image mode: its `currentconfig` without
/// annotations (the rendered OS image) and its `currentimage`. The daemon validates the booted
/// image against the image, not the rendered OS image, and is Done without an update; a node
/// booted into another image is reported as any OS mismatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_node_in_image_mode_is_taken_over_as_it_is() {
    let (_server, nodes, mcns, sim, client) = node_on_the_rendered_os().await;
    let admin_mcs: Api<MachineConfig> = Api::all(nodes.clone().into_client());
    let rendered = admin_mcs.get("rendered-worker-0").await.unwrap();
    sim.write(
        paths::CURRENT_CONFIG,
        &serde_json::to_string(&rendered).unwrap(),
    );
    sim.write(paths::CURRENT_IMAGE, &format!("{IMAGE}\n"));
    let refspec = format!("ostree-unverified-registry:{IMAGE}");
    sim.sim_ostree()
        .rebase(IMAGE, &RebaseMode::Pivot { refspec })
        .unwrap();
    complete_sim_reboot(&sim.fs).unwrap();
    for (k, v) in [(ann::DESIRED_IMAGE, IMAGE), (ann::CURRENT_IMAGE, IMAGE)] {
        set_annotation(&nodes, k, v).await;
    }
    let task = start_daemon(client.clone(), &sim);
    wait_done_on_image(&nodes, &mcns, IMAGE).await;
    assert!(!task.is_finished(), "no update, no reboot");
    task.abort();
    assert!(SimRebooter::pending(&sim.fs).unwrap().is_none());
    assert_eq!(
        annotation(&nodes.get(NODE).await.unwrap(), ann::LAST_APPLIED_DRAIN),
        "uncordon-rendered-worker-0",
        "never drained"
    );
    assert_eq!(sim.read(paths::CURRENT_IMAGE), Some(format!("{IMAGE}\n")));

    // Booted into another image than the one on disk: Degraded with upstream's message.
    let other = "registry.example/os@sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";
    let refspec = format!("ostree-unverified-registry:{other}");
    sim.sim_ostree()
        .rebase(other, &RebaseMode::Pivot { refspec })
        .unwrap();
    complete_sim_reboot(&sim.fs).unwrap();
    let task = start_daemon(client, &sim);
    let reason = eventually("Degraded for the wrong image", 30, || async {
        let n = nodes.get(NODE).await.ok()?;
        (annotation(&n, ann::STATE) == "Degraded").then(|| annotation(&n, ann::REASON))
    })
    .await;
    task.abort();
    assert_eq!(
        reason,
        format!(
            "unexpected on-disk state validating against rendered-worker-0: expected target osImageURL {IMAGE:?}, have {other:?}"
        )
    );
}

/// A node's image store whose pulls take `delay` each, recording them in order; a pull in
/// flight when its pass stops ends at once, having pulled nothing, as a killed `crictl pull`.
#[derive(Default)]
struct SlowImages {
    delay: Duration,
    held: Mutex<std::collections::BTreeSet<String>>,
    pulls: Mutex<Vec<String>>,
    stopped: AtomicUsize,
}

impl SlowImages {
    fn pulls(&self) -> Vec<String> {
        self.pulls.lock().unwrap().clone()
    }
}

/// [`SlowImages`] shared with the test, as the daemon's store.
struct SharedImages(Arc<SlowImages>);

impl ContainerImages for SharedImages {
    fn pull(&self, image: &str, stop: &AtomicBool) -> mco_daemon::Result<()> {
        self.0.pulls.lock().unwrap().push(image.to_string());
        let done = Instant::now() + self.0.delay;
        while Instant::now() < done {
            if stop.load(Ordering::SeqCst) {
                self.0.stopped.fetch_add(1, Ordering::SeqCst);
                return Err(mco_daemon::HostError::Command {
                    command: format!("crictl pull {image}"),
                    stderr: String::new(),
                    status: mco_daemon::host::cmd::STOPPED.into(),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.0.held.lock().unwrap().insert(image.to_string());
        Ok(())
    }

    fn present(&self, image: &str, _stop: &AtomicBool) -> mco_daemon::Result<bool> {
        Ok(self.0.held.lock().unwrap().contains(image))
    }
}

/// The pools `worker` and `infra`, each selecting its role's nodes and MachineConfigs (and so
/// its role's PinnedImageSets), and the node settled on `rendered-worker-0` with `roles`, Ready,
/// with room for images, and its MachineConfigNode.
async fn pinning_cluster(
    roles: &[&str],
) -> (TestServer, Client, Api<Node>, Api<MachineConfigNode>) {
    let (server, admin, mcs) = serve_with_crds().await;
    create_empty_and_file_configs(&mcs).await;
    let pools: Api<MachineConfigPool> = Api::all(admin.clone());
    for role in ["worker", "infra"] {
        let pool = PoolBuilder::new(role).role(role).build();
        pools.create(&PostParams::default(), &pool).await.unwrap();
    }
    let mut node = NodeBuilder::new(NODE)
        .current_config("rendered-worker-0")
        .desired_config("rendered-worker-0")
        .state("Done")
        .ready(true)
        .merge(json!({"status": {"allocatable": {"ephemeral-storage": "100Gi"}}}));
    for role in roles {
        node = node.role(role);
    }
    let nodes: Api<Node> = Api::all(admin.clone());
    nodes
        .create(&PostParams::default(), &node.build())
        .await
        .unwrap();
    let mcns: Api<MachineConfigNode> = Api::all(admin.clone());
    create_mcn(&mcns).await;
    (server, admin, nodes, mcns)
}

/// A PinnedImageSet for the pools of `role`.
fn pinned_set(name: &str, role: &str, images: &[String]) -> PinnedImageSet {
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "PinnedImageSet",
        "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": role}},
        "spec": {"pinnedImages": images.iter().map(|i| json!({"name": i})).collect::<Vec<_>>()},
    }))
    .unwrap()
}

/// `n` references by digest to `quay.io/example/<name>`.
fn images_of(name: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("quay.io/example/{name}@sha256:{i:064x}"))
        .collect()
}

/// A daemon for the node of [`pinning_cluster`] whose images are `store`'s.
async fn start_pinning_daemon(
    server: &TestServer,
    sim: &SimNode,
    store: &Arc<SlowImages>,
) -> tokio::task::JoinHandle<Exit> {
    let mut host = Host::sim(sim.dir.path()).unwrap();
    host.images = Box::new(SharedImages(Arc::clone(store)));
    let engine = Engine::new(host).unwrap();
    let mut opts = SyncOptions::new(NODE);
    opts.poll_interval = Duration::from_millis(50);
    opts.max_backoff = Duration::from_secs(1);
    let daemon = Daemon::new(node_client(server).await, engine, opts);
    tokio::spawn(async move { daemon.run(std::future::pending()).await.unwrap() })
}

/// `Some` once the node reports exactly `sets` pinned at their generations, all complete, and
/// pins exactly `images` in CRI-O's drop-in.
async fn pinned_exactly(
    mcns: &Api<MachineConfigNode>,
    sim: &SimNode,
    sets: &[&str],
    images: &[String],
) -> Option<()> {
    let want = (!images.is_empty()).then(|| crio_dropin(images));
    (sim.read(CRIO_PINNED_IMAGES_DROPIN) == want).then_some(())?;
    let status = mcns.get(NODE).await.ok()?.status?;
    (status.condition("PinnedImageSetsProgressing")?.status == "False").then_some(())?;
    let entries = status.pinned_image_sets.unwrap_or_default();
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    (names == sets && entries.iter().all(|e| e.is_current())).then_some(())
}

/// A set deleted while its images are being pulled stops the pass: the pulls in flight are
/// killed, no new one starts, and the next pass pins what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_image_set_deleted_mid_pass_is_not_pulled_to_the_end() {
    let (server, admin, _nodes, mcns) = pinning_cluster(&["worker"]).await;
    let sets: Api<PinnedImageSet> = Api::all(admin.clone());
    let big = images_of("big", 30);
    let small = images_of("small", 1);
    for s in [
        pinned_set("big", "worker", &big),
        pinned_set("small", "worker", &small),
    ] {
        sets.create(&PostParams::default(), &s).await.unwrap();
    }
    // Five at a time, the whole pass would take two seconds.
    let store = Arc::new(SlowImages {
        delay: Duration::from_millis(300),
        ..SlowImages::default()
    });
    let sim = SimNode::new(true);
    let _task = start_pinning_daemon(&server, &sim, &store).await;
    eventually("the first pulls", 30, || async {
        (!store.pulls().is_empty()).then_some(())
    })
    .await;
    sets.delete("big", &Default::default()).await.unwrap();
    eventually("the small set alone pinned", 30, || {
        pinned_exactly(&mcns, &sim, &["small"], &small)
    })
    .await;
    let pulls = store.pulls();
    let of_big = pulls.iter().filter(|i| big.contains(i)).count();
    assert!(
        of_big < big.len(),
        "{of_big} of the deleted set's {} images pulled: {pulls:#?}",
        big.len()
    );
    assert_eq!(pulls.iter().filter(|i| small.contains(i)).count(), 1);
    assert!(
        store.stopped.load(Ordering::SeqCst) > 0,
        "the stop reached the pulls in flight"
    );
}

/// A node moved to another pool (its labels changed, nothing else) takes that pool's sets
/// within seconds, not at the next resync minutes later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_moved_to_another_pool_pins_its_pinned_image_sets_within_seconds() {
    let (server, admin, nodes, mcns) = pinning_cluster(&["worker"]).await;
    let sets: Api<PinnedImageSet> = Api::all(admin.clone());
    let images = images_of("infra-agent", 1);
    sets.create(
        &PostParams::default(),
        &pinned_set("for-infra", "infra", &images),
    )
    .await
    .unwrap();
    let store = Arc::new(SlowImages::default());
    let sim = SimNode::new(true);
    let _task = start_pinning_daemon(&server, &sim, &store).await;
    eventually("the first pass, with nothing for a worker", 30, || {
        pinned_exactly(&mcns, &sim, &[], &[])
    })
    .await;
    let moved = json!({"metadata": {"labels": {"node-role.kubernetes.io/infra": ""}}});
    nodes
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&moved))
        .await
        .unwrap();
    eventually("the infra set pinned", 15, || {
        pinned_exactly(&mcns, &sim, &["for-infra"], &images)
    })
    .await;
    assert_eq!(store.pulls(), images);
}
