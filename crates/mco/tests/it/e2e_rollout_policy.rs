//! End-to-end: `RolloutPolicy` on `mco up`, driven through `kubectl` and `mco`: a canary that
//! fails its node check halts and is rolled back, a passing canary is promoted after its soak,
//! a closed maintenance window holds a reboot but not an SSH key, halt and resume stay within
//! maxUnavailable, and bad policies are reported and govern nothing. All run on both servers
//! but the two that plant a pod nothing runs (`stuck_pod`), which only the embedded one allows.

use crate::e2e;

use e2e::*;
use serde_json::Value;
use std::collections::BTreeSet;

on_both_servers!(
    a_closed_window_holds_a_reboot_but_not_an_ssh_key,
    a_failing_http_probe_halts_the_canary,
    a_passing_canary_is_promoted_after_its_soak,
    auto_rollback_returns_a_failed_canary_by_itself,
    bad_policies_get_conditions_and_govern_nothing,
    canary_with_a_failing_node_check_halts_and_rollback_returns_it,
    halt_and_resume_mid_rollout_stay_within_max_unavailable,
    the_policy_node_check_timeout_reaches_the_daemon,
);

const WORKER_LABEL: &str = "pools.operator.machineconfiguration.openshift.io/worker";
const CHECKS_ANN: &str = "rollouts.mco.dev/node-checks";

fn policy(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: rollouts.mco.dev/v1alpha1
kind: RolloutPolicy
metadata:
  name: {name}
spec:
  poolSelector:
    matchLabels:
      {WORKER_LABEL}: \"\"
{spec}"
    )
}

/// Drop an executable health check into a node's `/etc/mco/health.d/`.
fn put_check(c: &Cluster, node: &str, name: &str, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = c.node_root(node).join("etc/mco/health.d");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn remove_check(c: &Cluster, node: &str, name: &str) {
    std::fs::remove_file(c.node_root(node).join("etc/mco/health.d").join(name)).unwrap();
}

fn policy_condition(c: &Cluster, name: &str, ty: &str) -> Option<(String, String)> {
    let p = c.try_get_json(&["rolloutpolicy", name])?;
    let cond = condition(&p, ty)?;
    Some((
        cond["status"].as_str()?.to_string(),
        cond["message"].as_str().unwrap_or_default().to_string(),
    ))
}

fn pool_entry(c: &Cluster, policy: &str, pool: &str) -> Option<Value> {
    let p = c.try_get_json(&["rolloutpolicy", policy])?;
    p["status"]["pools"]
        .as_array()?
        .iter()
        .find(|e| e["pool"] == pool)
        .cloned()
}

fn workers_json(c: &Cluster) -> Vec<Value> {
    c.get_json(&["nodes", "-l", "node-role.kubernetes.io/worker"])["items"]
        .as_array()
        .unwrap()
        .clone()
}

fn pointed_at(c: &Cluster, config: &str) -> BTreeSet<String> {
    workers_json(c)
        .iter()
        .filter(|n| annotation(n, DESIRED_ANN) == config)
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Every worker that a node watch ever saw pointed at `config`.
fn ever_pointed_at(w: &Watch, config: &str) -> BTreeSet<String> {
    w.events()
        .iter()
        .filter(|n| annotation(n, DESIRED_ANN) == config)
        .filter(|n| n["metadata"]["labels"]["node-role.kubernetes.io/worker"].is_string())
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn wait_valid(c: &Cluster, name: &str) {
    wait_for(&format!("policy {name} Valid"), 60, || {
        let (s, _) = policy_condition(c, name, "Valid")?;
        (s == "True").then_some(())
    });
}

fn canary_with_a_failing_node_check_halts_and_rollback_returns_it(server: Server) {
    let c = Cluster::up(Opts {
        server,
        workers: 4,
        ..Opts::default()
    });
    // Both canary nodes go at once.
    c.kubectl(&[
        "patch",
        "mcp",
        "worker",
        "--type=merge",
        "-p",
        r#"{"spec":{"maxUnavailable":2}}"#,
    ]);
    let workers = c.workers();
    for w in &workers {
        put_check(
            &c,
            w,
            "10-app",
            "#!/bin/sh\necho app not answering on :8080\nexit 1\n",
        );
    }
    c.apply(&policy(
        "canary",
        "  canary:\n    nodes: 2\n  soak: 1h\n  gates:\n    nodeChecks: {}\n",
    ));
    wait_valid(&c, "canary");
    let nodes_w = c.watch("nodes");
    nodes_w.wait_initial(5);

    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-canary", "worker", "/etc/canary", "v2"));
    let new = wait_for("a new target", 60, || {
        let t = c.pool_target("worker");
        (t != old).then_some(t)
    });
    let halted = wait_for("the pool halted", 120, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (condition_status(&p, "RolloutHalted") == "True")
            .then(|| condition_message(&p, "RolloutHalted"))
    });
    let canary = pointed_at(&c, &new);
    assert_eq!(canary.len(), 2, "the canary is 2 nodes: {canary:?}");
    let failed = canary
        .iter()
        .find(|n| halted.contains(&format!("on node {n}")))
        .unwrap_or_else(|| panic!("the condition names no canary node: {halted}"));
    assert!(halted.contains("nodeChecks"), "{halted}");
    assert!(halted.contains("health check 10-app failed"), "{halted}");
    assert!(halted.contains("app not answering on :8080"), "{halted}");
    // The failing node's MachineConfigNode carries the check's output.
    let mcn = c.mcn(failed);
    assert!(
        condition_message(&mcn, "Updated").contains("health check 10-app failed"),
        "{mcn}"
    );
    let entry = pool_entry(&c, "canary", "worker").expect("the policy's pool entry");
    assert_eq!(entry["phase"], "Halted", "{entry}");
    // mco status and mco doctor show it.
    let (_, status) = c.mco(&["status"]);
    assert!(status.contains("rollout halted"), "{status}");
    let (_, doctor) = c.mco(&["doctor"]);
    assert!(doctor.contains("mco rollback worker"), "{doctor}");

    // Both canary nodes finish their update; no other worker is ever pointed at the target.
    wait_for("the canary done", 60, || {
        workers_json(&c)
            .iter()
            .filter(|n| canary.contains(n["metadata"]["name"].as_str().unwrap()))
            .all(|n| annotation(n, CURRENT_ANN) == new && !annotation(n, CHECKS_ANN).is_empty())
            .then_some(())
    });
    assert_eq!(ever_pointed_at(&nodes_w, &new), canary);

    // Roll back: the two canary nodes return to the old config; the rest never moved.
    for w in &workers {
        remove_check(&c, w, "10-app");
    }
    let (ok, out) = c.mco(&["rollback", "worker"]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("rolling back to {old}")), "{out}");
    wait_for("every worker back on the old config", 120, || {
        workers_json(&c)
            .iter()
            .all(|n| {
                annotation(n, CURRENT_ANN) == old
                    && annotation(n, DESIRED_ANN) == old
                    && annotation(n, "machineconfiguration.openshift.io/state") == "Done"
            })
            .then_some(())
    });
    let pinned = wait_for("RollbackPinned", 60, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (condition_status(&p, "RollbackPinned") == "True")
            .then(|| condition_message(&p, "RollbackPinned"))
    });
    assert!(pinned.contains(&old) && pinned.contains(&new), "{pinned}");
    let (_, status) = c.mco(&["status"]);
    assert!(status.contains("rolled back"), "{status}");
    assert_eq!(c.pool_target("worker"), new, "the render is untouched");

    // Removing the bad MachineConfig makes the render agree: the pin ends.
    c.kubectl(&["delete", "machineconfig", "99-worker-canary"]);
    wait_for("the pin dropped", 90, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (annotation(&p, "rollouts.mco.dev/rollback-to").is_empty()
            && condition_status(&p, "RollbackPinned") == "False"
            && pool_settled(&p).as_deref() == Some(old.as_str()))
        .then_some(())
    });
}

fn a_passing_canary_is_promoted_after_its_soak(server: Server) {
    let c = Cluster::up(Opts {
        server,
        workers: 3,
        ..Opts::default()
    });
    for w in &c.workers() {
        put_check(&c, w, "10-ok", "#!/bin/sh\nexit 0\n");
    }
    c.apply(&policy(
        "soak",
        "  canary:\n    nodes: 1\n  soak: 3s\n  gates:\n    nodeReady:\n      timeout: 2m\n    nodeChecks: {}\n",
    ));
    wait_valid(&c, "soak");
    let nodes_w = c.watch("nodes");
    nodes_w.wait_initial(4);
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-soak", "worker", "/etc/soak", "v2"));
    let new = c.wait_rollout("worker", &old, 180);

    let entry = pool_entry(&c, "soak", "worker").expect("the policy's pool entry");
    let canary: Vec<String> = entry["canaryNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(canary.len(), 1, "{entry}");
    assert_eq!(entry["promoted"], true, "{entry}");
    assert_eq!(entry["phase"], "Complete", "{entry}");
    // In the watch, the canary finished (with a passing check) before any other worker was
    // pointed at the target.
    let events = nodes_w.events();
    let canary_done = events
        .iter()
        .position(|n| {
            n["metadata"]["name"] == canary[0].as_str()
                && annotation(n, CURRENT_ANN) == new
                && annotation(n, CHECKS_ANN).contains("\"passed\":true")
        })
        .expect("the canary finished");
    let first_other = events
        .iter()
        .position(|n| {
            n["metadata"]["name"] != canary[0].as_str()
                && n["metadata"]["labels"]["node-role.kubernetes.io/worker"].is_string()
                && annotation(n, DESIRED_ANN) == new
        })
        .expect("the others were targeted");
    assert!(
        canary_done < first_other,
        "another worker moved before the canary finished"
    );
    // The controller records events.k8s.io/v1 Events (`note`); a real server also serves
    // them as core/v1 (`message`).
    let promoted = wait_for("a Promoted event", 30, || {
        let events = c.try_get_json(&["events.events.k8s.io", "-A"])?;
        events["items"]
            .as_array()?
            .iter()
            .find(|e| e["reason"] == "Promoted")
            .map(|e| e["note"].as_str().unwrap_or_default().to_string())
    });
    assert!(promoted.contains("passed every gate for 3s"), "{promoted}");
}

/// A cron schedule that opens twelve hours from now: closed for the whole test.
fn closed_schedule() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let hour = (secs / 3600 + 12) % 24;
    format!("0 {hour} * * *")
}

fn a_closed_window_holds_a_reboot_but_not_an_ssh_key(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    let workers = c.workers();
    let boots: Vec<String> = workers.iter().map(|w| c.boot_id(w)).collect();
    let window = |schedule: &str| {
        policy(
            "windows",
            &format!(
                "  windows:\n  - schedule: \"{schedule}\"\n    duration: 1h\n    timeZone: Europe/Berlin\n"
            ),
        )
    };
    c.apply(&window(&closed_schedule()));
    wait_valid(&c, "windows");

    // Rebootless: goes through although the window is closed.
    let old = c.pool_target("worker");
    c.apply(&example("99-worker-ssh.yaml"));
    let ssh = c.wait_rollout("worker", &old, 90);
    for (w, b) in workers.iter().zip(&boots) {
        assert_eq!(&c.boot_id(w), b, "{w} rebooted for an SSH key");
    }

    // A file: needs a reboot, waits for the window.
    c.apply(&file_mc("99-worker-window", "worker", "/etc/window", "v2"));
    let new = wait_for("a new target", 60, || {
        let t = c.pool_target("worker");
        (t != ssh).then_some(t)
    });
    let entry = wait_for("WaitingForWindow", 60, || {
        let e = pool_entry(&c, "windows", "worker")?;
        (e["phase"] == "WaitingForWindow" && e["target"] == new.as_str()).then_some(e)
    });
    assert!(entry["nextWindow"].is_string(), "{entry}");
    let waiting = entry["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "WaitingForWindow")
        .cloned()
        .unwrap();
    assert_eq!(waiting["status"], "True", "{entry}");
    assert!(
        waiting["message"]
            .as_str()
            .unwrap()
            .contains("the next window opens at"),
        "{entry}"
    );
    assert!(
        pointed_at(&c, &new).is_empty(),
        "a node moved outside the window"
    );
    let (_, status) = c.mco(&["status"]);
    assert!(status.contains("next window 20"), "{status}");

    // Open a window now: the rollout goes on.
    c.apply(&window("* * * * *"));
    c.wait_rollout("worker", &ssh, 120);
    for (w, b) in workers.iter().zip(&boots) {
        assert_ne!(&c.boot_id(w), b, "{w} did not reboot for the file");
    }
}

fn halt_and_resume_mid_rollout_stay_within_max_unavailable(server: Server) {
    let c = Cluster::up(Opts {
        server,
        workers: 4,
        reboot_seconds: 1,
        ..Opts::default()
    });
    c.kubectl(&[
        "patch",
        "mcp",
        "worker",
        "--type=merge",
        "-p",
        r#"{"spec":{"maxUnavailable":2}}"#,
    ]);
    c.apply(&policy("plain", "  soak: 0s\n"));
    wait_valid(&c, "plain");
    let nodes_w = c.watch("nodes");
    nodes_w.wait_initial(5);
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-halt", "worker", "/etc/halt", "v2"));
    let new = wait_for("a worker targeted", 60, || {
        let t = c.pool_target("worker");
        (t != old && !pointed_at(&c, &t).is_empty()).then_some(t)
    });
    let (ok, out) = c.mco(&["rollout", "halt", "worker"]);
    assert!(ok, "{out}");
    wait_for("the policy reports the halt", 60, || {
        let e = pool_entry(&c, "plain", "worker")?;
        (e["phase"] == "Halted").then_some(())
    });
    // Nodes in flight finish; no new one starts while halted.
    wait_for("in-flight nodes finish", 90, || {
        workers_json(&c)
            .iter()
            .all(|n| annotation(n, DESIRED_ANN) == annotation(n, CURRENT_ANN) && node_ready(n))
            .then_some(())
    });
    let while_halted = pointed_at(&c, &new);
    assert!(while_halted.len() < 4, "a halted pool kept rolling");
    let p = c.pool("worker");
    assert!(
        condition_message(&p, "RolloutHalted").contains("halted by hand"),
        "{p}"
    );
    assert_eq!(pointed_at(&c, &new), while_halted);

    let (ok, out) = c.mco(&["rollout", "resume", "worker"]);
    assert!(ok, "{out}");
    c.wait_pool_settled("worker", 120);

    // maxUnavailable (2) held at every node event.
    let worst = most_unavailable(&nodes_w.events(), |ev| {
        ev["metadata"]["labels"]["node-role.kubernetes.io/worker"].is_string()
    });
    assert!(worst <= 2, "{worst} workers unavailable at once");
    assert!(worst >= 1, "the watch saw no update");
    let p = c.pool("worker");
    assert_eq!(condition_status(&p, "RolloutHalted"), "False", "{p}");
}

fn bad_policies_get_conditions_and_govern_nothing(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    c.apply(&policy("first", "  canary:\n    nodes: 1\n  soak: 1h\n"));
    c.apply(&policy("second", "  canary:\n    nodes: 1\n  soak: 1h\n"));
    c.apply(&policy(
        "bad-cron",
        "  windows:\n  - schedule: \"61 25 * * *\"\n    duration: 1h\n",
    ));
    c.apply(&policy("negative", "  canary:\n    nodes: -2\n"));
    for name in ["first", "second"] {
        let (s, m) = wait_for(&format!("{name} Conflict"), 60, || {
            let got = policy_condition(&c, name, "Conflict")?;
            (got.0 == "True").then_some(got)
        });
        assert_eq!(s, "True");
        assert!(m.contains("pool worker is also selected by"), "{m}");
        assert!(m.contains("neither policy governs"), "{m}");
    }
    let (s, m) = wait_for("bad-cron Invalid", 60, || {
        policy_condition(&c, "bad-cron", "Valid")
    });
    assert_eq!(s, "False");
    assert!(
        m.contains("spec.windows[0].schedule: invalid cron schedule"),
        "{m}"
    );
    let (s, m) = wait_for("negative Invalid", 60, || {
        policy_condition(&c, "negative", "Valid")
    });
    assert_eq!(s, "False");
    assert!(
        m.contains("spec.canary.nodes: must not be negative, got -2"),
        "{m}"
    );

    // No policy governs the worker pool: a change rolls out as without any, in full.
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-free", "worker", "/etc/free", "v2"));
    c.wait_rollout("worker", &old, 120);
    for name in ["first", "second", "bad-cron", "negative"] {
        assert!(
            pool_entry(&c, name, "worker").is_none(),
            "{name} governs worker"
        );
    }
}

fn a_failing_http_probe_halts_the_canary(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    // Nothing listens on port 1: the probe is refused once the canary is updated.
    c.apply(&policy(
        "probe",
        "  canary:\n    nodes: 1\n  soak: 1h\n  gates:\n    http:\n    - url: http://127.0.0.1:1/healthz\n      timeout: 2s\n",
    ));
    wait_valid(&c, "probe");
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-probe", "worker", "/etc/probe", "v2"));
    let halted = wait_for("the pool halted", 120, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (condition_status(&p, "RolloutHalted") == "True")
            .then(|| condition_message(&p, "RolloutHalted"))
    });
    assert!(
        halted.starts_with("GET http://127.0.0.1:1/healthz: "),
        "{halted}"
    );
    let new = c.pool_target("worker");
    assert_ne!(new, old);
    assert_eq!(pointed_at(&c, &new).len(), 1, "only the canary moved");
    let entry = pool_entry(&c, "probe", "worker").unwrap();
    assert_eq!(entry["halt"]["gate"], "http", "{entry}");
}

fn auto_rollback_returns_a_failed_canary_by_itself(server: Server) {
    let c = Cluster::up(Opts {
        server,
        workers: 3,
        ..Opts::default()
    });
    // Fails only on the new config, which writes /etc/autorb.
    for w in &c.workers() {
        put_check(
            &c,
            w,
            "10-autorb",
            "#!/bin/sh\nif test -e \"$MCO_ROOT/etc/autorb\"; then echo bad config; exit 1; fi\n",
        );
    }
    c.apply(&policy(
        "auto",
        "  canary:\n    nodes: 1\n  soak: 1h\n  autoRollback: true\n  gates:\n    nodeChecks: {}\n",
    ));
    wait_valid(&c, "auto");
    let nodes_w = c.watch("nodes");
    nodes_w.wait_initial(4);
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-autorb", "worker", "/etc/autorb", "v2"));
    let pinned = wait_for("the pool pinned back", 120, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (annotation(&p, "rollouts.mco.dev/rollback-to") == old).then_some(p)
    });
    let new = pinned["spec"]["configuration"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new, old);
    wait_for("every worker on the old config", 120, || {
        workers_json(&c)
            .iter()
            .all(|n| annotation(n, CURRENT_ANN) == old && annotation(n, DESIRED_ANN) == old)
            .then_some(())
    });
    assert_eq!(
        ever_pointed_at(&nodes_w, &new).len(),
        1,
        "only the canary moved"
    );
    let rolled_back = wait_for("a RolledBack event", 30, || {
        let events = c.try_get_json(&["events.events.k8s.io", "-A"])?;
        events["items"]
            .as_array()?
            .iter()
            .find(|e| e["reason"] == "RolledBack")
            .map(|e| e["note"].as_str().unwrap_or_default().to_string())
    });
    assert!(
        rolled_back.contains(&format!("rolling back to {old}")),
        "{rolled_back}"
    );
    wait_for("RollbackPinned, and the rollback not halted", 60, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (condition_status(&p, "RollbackPinned") == "True"
            && condition_status(&p, "RolloutHalted") != "True")
            .then_some(())
    });
}

fn the_policy_node_check_timeout_reaches_the_daemon(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    // Well within the default 60 s, past the policy's 1 s.
    for w in &c.workers() {
        put_check(&c, w, "10-slow", "#!/bin/sh\nexec sleep 5\n");
    }
    c.apply(&policy(
        "timeout",
        "  canary:\n    nodes: 1\n  soak: 1h\n  gates:\n    nodeChecks:\n      timeout: 1s\n",
    ));
    wait_valid(&c, "timeout");
    let old = c.pool_target("worker");
    c.apply(&file_mc(
        "99-worker-timeout",
        "worker",
        "/etc/timeout",
        "v2",
    ));
    let halted = wait_for("the pool halted", 120, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (condition_status(&p, "RolloutHalted") == "True")
            .then(|| condition_message(&p, "RolloutHalted"))
    });
    assert!(halted.contains("health check 10-slow failed"), "{halted}");
    assert!(halted.contains("timed out after 1s"), "{halted}");
    let new = c.pool_target("worker");
    assert_ne!(new, old);
    let canary = pointed_at(&c, &new);
    assert_eq!(canary.len(), 1, "only the canary moved: {canary:?}");
    let node = c.get_json(&["node", canary.first().unwrap()]);
    assert_eq!(
        annotation(&node, "rollouts.mco.dev/node-check-timeout"),
        "1",
        "{node}"
    );
}

/// A pod on `node` that never becomes Ready: nothing in the embedded cluster runs it. It is
/// owned by the sim's DaemonSet, so drains leave it where it is, and labelled `app=stuck`.
fn stuck_pod(c: &Cluster, node: &str) {
    let ds_uid = wait_for("the node-agent DaemonSet", 60, || {
        let ds = c.try_get_json(&["daemonset", "node-agent", "-n", "kube-system"])?;
        ds["metadata"]["uid"].as_str().map(str::to_string)
    });
    c.apply(&format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: stuck-{node}
  namespace: kube-system
  labels:
    app: stuck
  ownerReferences:
  - apiVersion: apps/v1
    kind: DaemonSet
    name: node-agent
    uid: {ds_uid}
    controller: true
spec:
  nodeName: {node}
  containers:
  - name: stuck
    image: registry.example/stuck:1
"
    ));
}

fn wait_halted(c: &Cluster) -> String {
    wait_for("the pool halted", 120, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (condition_status(&p, "RolloutHalted") == "True")
            .then(|| condition_message(&p, "RolloutHalted"))
    })
}

// Embedded only: on a real cluster the simulated kubelet runs the stuck pod and the
// DaemonSet controller deletes a pod it did not make.
#[test]
fn a_pod_that_never_becomes_ready_on_the_canary_halts_the_pool() {
    let c = Cluster::up(Opts { ..Opts::default() });
    for w in &c.workers() {
        stuck_pod(&c, w);
    }
    c.apply(&policy(
        "pods",
        "  canary:\n    nodes: 1\n  soak: 1h\n  gates:\n    podsReady:\n      timeout: 5s\n",
    ));
    wait_valid(&c, "pods");
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-pods", "worker", "/etc/pods", "v2"));
    let halted = wait_halted(&c);
    let new = c.pool_target("worker");
    assert_ne!(new, old);
    let canary = pointed_at(&c, &new);
    assert_eq!(canary.len(), 1, "only the canary moved: {canary:?}");
    let node = canary.first().unwrap();
    assert!(
        halted.starts_with(&format!("gate podsReady failed on node {node}: ")),
        "{halted}"
    );
    assert!(
        halted.contains(&format!(
            "pods not Ready 5s after node {node} came back: kube-system/stuck-{node}"
        )),
        "{halted}"
    );
    let entry = pool_entry(&c, "pods", "worker").unwrap();
    assert_eq!(entry["halt"]["gate"], "podsReady", "{entry}");
    assert_eq!(pointed_at(&c, &new).len(), 1, "the halt held the rest");
}

// Embedded only, as the test above (its `stuck_pod`).
#[test]
fn only_a_short_budget_covering_the_pool_halts_it() {
    let c = Cluster::up(Opts { ..Opts::default() });
    c.apply(
        "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: stuck
  namespace: kube-system
spec:
  minAvailable: 1
  selector:
    matchLabels:
      app: stuck
",
    );
    // The budget is short, but its only pod runs on the master, outside the worker pool.
    stuck_pod(&c, "master-0");
    wait_for("the budget short", 60, || {
        let pdb = c.try_get_json(&["pdb", "stuck", "-n", "kube-system"])?;
        (pdb["status"]["desiredHealthy"] == 1 && pdb["status"]["currentHealthy"] == 0).then_some(())
    });
    c.apply(&policy(
        "budgets",
        "  canary:\n    nodes: 1\n  soak: 1h\n  gates:\n    podsReady:\n      timeout: 3s\n    pdbs: true\n",
    ));
    wait_valid(&c, "budgets");
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-pdbs", "worker", "/etc/pdbs", "v2"));
    let entry = wait_for("the canary soaking", 120, || {
        let e = pool_entry(&c, "budgets", "worker")?;
        (e["phase"] == "Soaking").then_some(e)
    });
    let new = c.pool_target("worker");
    assert_ne!(new, old);
    assert_eq!(entry["target"], new.as_str(), "{entry}");
    let p = c.pool("worker");
    assert_ne!(condition_status(&p, "RolloutHalted"), "True", "{p}");

    // A pod of the budget on a worker that has not moved: the budget now covers the pool.
    let canary = pointed_at(&c, &new);
    let other = c
        .workers()
        .into_iter()
        .find(|w| !canary.contains(w))
        .expect("a worker outside the canary");
    stuck_pod(&c, &other);
    let halted = wait_halted(&c);
    assert!(
        halted.contains("PodDisruptionBudget kube-system/stuck has 0 healthy pods of 1 desired"),
        "{halted}"
    );
    let entry = pool_entry(&c, "budgets", "worker").unwrap();
    assert_eq!(entry["halt"]["gate"], "pdbs", "{entry}");
    assert_eq!(pointed_at(&c, &new), canary, "the halt held the rest");
}
