//! End-to-end: MachineConfig rollouts on `mco up`, driven through `kubectl`:
//! file changes within maxUnavailable, rebootless changes, kernel arguments,
//! drift, a bad MachineConfig, pausing, and a PDB-blocked drain.

use crate::e2e;

use e2e::*;
use std::collections::HashMap;

on_both_servers!(
    file_machineconfig_rolls_out_within_max_unavailable,
    rebootless_ssh_key_and_registries_change,
    bad_machineconfig_render_degrades_and_touches_no_node,
    pdb_blocked_drain_is_visible_and_resolves,
);

/// Primary MCN phases in the order a rebooting update goes through them.
const PHASES: [&str; 5] = [
    "UpdatePrepared",
    "UpdateExecuted",
    "UpdatePostActionComplete",
    "UpdateComplete",
    "Updated",
];

fn file_machineconfig_rolls_out_within_max_unavailable(server: Server) {
    let c = Cluster::up(Opts {
        server,
        workers: 3,
        ..Opts::default()
    });
    let workers = c.workers();
    let nodes_w = c.watch("nodes");
    nodes_w.wait_initial(4);
    let mcn_w = c.watch("machineconfignodes");
    mcn_w.wait_initial(4);

    let old = c.pool_target("worker");
    c.apply(&example("99-worker-motd.yaml"));
    let new = c.wait_rollout("worker", &old, 120);

    // maxUnavailable (1 by default) held at every node event.
    let events = nodes_w.events();
    let of_workers =
        |ev: &serde_json::Value| workers.iter().any(|w| ev["metadata"]["name"] == w.as_str());
    let touched = events
        .iter()
        .filter(|ev| of_workers(ev) && annotation(ev, DESIRED_ANN) == new)
        .count();
    let worst = most_unavailable(&events, of_workers);
    assert!(
        touched >= 3,
        "the watch never saw the workers move to {new}"
    );
    assert!(
        worst <= 1,
        "{worst} workers unavailable at once (maxUnavailable 1)"
    );
    assert_eq!(worst, 1, "the watch never saw a worker updating");

    // The file is on every worker's disk.
    for w in &workers {
        assert_eq!(
            c.read_node_file(w, "/etc/motd").as_deref(),
            Some("Managed by mco. Local changes are reverted.\n"),
            "{w}"
        );
    }
    assert_eq!(c.read_node_file("master-0", "/etc/motd"), None);

    // The MCN phase sequence is complete and in order for every worker.
    let mut first_seen: HashMap<(String, &str), usize> = HashMap::new();
    let mut started: HashMap<String, usize> = HashMap::new();
    for (i, ev) in mcn_w.events().iter().enumerate() {
        let name = ev["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if !workers.contains(&name) {
            continue;
        }
        if !started.contains_key(&name) {
            if condition_status(ev, "Updated") != "True" {
                started.insert(name.clone(), i);
            } else {
                continue;
            }
        }
        for p in PHASES {
            let s = condition_status(ev, p);
            let active = s == "Unknown" || s == "True";
            let done = p != "Updated" || ev["spec"]["configVersion"]["desired"] == new;
            if active && done {
                first_seen.entry((name.clone(), p)).or_insert(i);
            }
        }
    }
    for w in &workers {
        let seq: Vec<Option<usize>> = PHASES
            .iter()
            .map(|p| first_seen.get(&(w.clone(), *p)).copied())
            .collect();
        assert!(
            seq.iter().all(Option::is_some),
            "{w}: phases missing from the MCN watch: {:?}",
            PHASES.iter().zip(&seq).collect::<Vec<_>>()
        );
        assert!(
            seq.windows(2).all(|p| p[0] <= p[1]),
            "{w}: phases out of order: {:?}",
            PHASES.iter().zip(&seq).collect::<Vec<_>>()
        );
    }

    // Each worker's daemon told the update's story in Node events, in upstream's reasons and
    // words, the last of them sent after the reboot by the new daemon.
    for w in &workers {
        let reboot = format!("Node will reboot into config {new}");
        let uncordon = format!("Update completed for config {new} and node has been uncordoned");
        let done = format!("Setting node {w}, currentConfig {new} to Done");
        let want = [
            ("ConfigDriftMonitorStopped", "Config Drift Monitor stopped"),
            ("AddSigtermProtection", "Adding SIGTERM protection"),
            ("Cordon", "Cordoned node to apply update"),
            ("Drain", "Draining node to update config."),
            ("RemoveSigtermProtection", "Removing SIGTERM protection"),
            ("Reboot", reboot.as_str()),
            (
                "ConfigDriftMonitorStarted",
                &format!("Config Drift Monitor started, watching against {new}"),
            ),
            ("Uncordon", uncordon.as_str()),
            ("NodeDone", done.as_str()),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(r, m)| (r.to_string(), m.to_string()))
            .collect();
        wait_for(&format!("{w}'s update events, ending {want:?}"), 60, || {
            daemon_events(&c, w).ends_with(&want).then_some(())
        });
    }
}

/// The events the daemon of `node` sent about it, oldest first, as (reason, message): their
/// names end in the time they were made, in hexadecimal nanoseconds, as upstream's do. They are
/// in mco's namespace, as upstream's are in its own, read as docs/deploy.md says.
fn daemon_events(c: &Cluster, node: &str) -> Vec<(String, String)> {
    let selector =
        format!("involvedObject.kind=Node,involvedObject.name={node},source=machineconfigdaemon");
    let list = c.get_json(&["events", "-n", "mco-system", "--field-selector", &selector]);
    let mut events: Vec<(String, String, String)> = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            assert_eq!(e["reportingComponent"], "machineconfigdaemon", "{e}");
            (
                e["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    events.sort();
    events.into_iter().map(|(_, r, m)| (r, m)).collect()
}

fn rebootless_ssh_key_and_registries_change(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    let workers = c.workers();
    let boots: Vec<String> = workers.iter().map(|w| c.boot_id(w)).collect();

    // SSH key: applied without a reboot.
    let old = c.pool_target("worker");
    c.apply(&example("99-worker-ssh.yaml"));
    let r1 = c.wait_rollout("worker", &old, 90);
    for (w, b) in workers.iter().zip(&boots) {
        let keys = c
            .read_node_file(w, "/home/core/.ssh/authorized_keys.d/ignition")
            .or_else(|| c.read_node_file(w, "/home/core/.ssh/authorized_keys"))
            .unwrap_or_default();
        assert!(keys.contains("admin@example.com"), "{w}: {keys}");
        assert_eq!(&c.boot_id(w), b, "{w} rebooted for an SSH key change");
    }

    // registries.conf: crio reloaded, no reboot.
    c.apply(&example("99-worker-registries.yaml"));
    c.wait_rollout("worker", &r1, 90);
    for (w, b) in workers.iter().zip(&boots) {
        let reg = c
            .read_node_file(w, "/etc/containers/registries.conf")
            .unwrap();
        assert!(reg.contains("mirror.example.com:5000/quay"), "{w}: {reg}");
        assert_eq!(&c.boot_id(w), b, "{w} rebooted for registries.conf");
        let log = c
            .read_node_file(w, "/var/log/mco-sim/systemd.log")
            .unwrap_or_default();
        assert!(
            log.lines()
                .any(|l| l.contains("reload") && l.contains("crio")),
            "{w}: no crio reload recorded:\n{log}"
        );
    }
}

pub(crate) fn kargs(c: &Cluster, node: &str) -> Vec<String> {
    c.booted_deployment(node)["mco-sim-kernel-arguments"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn kernel_arguments_added_then_removed() {
    let c = Cluster::up(Opts::default());
    let old = c.pool_target("worker");
    c.apply(&example("05-worker-kernelarg-selinuxpermissive.yaml"));
    let r1 = c.wait_rollout("worker", &old, 90);
    for w in c.workers() {
        assert!(
            kargs(&c, &w).contains(&"enforcing=0".to_owned()),
            "{w}: {:?}",
            kargs(&c, &w)
        );
    }
    assert!(!kargs(&c, "master-0").contains(&"enforcing=0".to_owned()));
    c.kubectl(&["delete", "mc", "05-worker-kernelarg-selinuxpermissive"]);
    c.wait_rollout("worker", &r1, 90);
    for w in c.workers() {
        assert!(
            !kargs(&c, &w).contains(&"enforcing=0".to_owned()),
            "{w}: {:?}",
            kargs(&c, &w)
        );
    }
}

fn node_state(c: &Cluster, n: &str) -> (String, String) {
    let node = c.node(n);
    (
        annotation(&node, "machineconfiguration.openshift.io/state"),
        annotation(&node, "machineconfiguration.openshift.io/reason"),
    )
}

#[test]
fn drift_degrades_then_recovers_by_restoring_the_file() {
    let c = Cluster::up(Opts::default());
    let path = "etc/containers/registries.conf";
    let file = c.node_root("worker-0").join(path);
    let orig = std::fs::read_to_string(&file).unwrap();

    std::fs::write(&file, "drifted\n").unwrap();
    let reason = wait_for("worker-0 Degraded by drift", 60, || {
        let (s, r) = node_state(&c, "worker-0");
        (s == "Degraded").then_some(r)
    });
    assert!(reason.contains("content mismatch for file"), "{reason}");
    assert!(
        reason.contains("/etc/containers/registries.conf"),
        "{reason}"
    );

    // Restoring the file recovers the node.
    std::fs::write(&file, &orig).unwrap();
    wait_for("worker-0 Done after restore", 60, || {
        (node_state(&c, "worker-0").0 == "Done").then_some(())
    });

    assert_eq!(std::fs::read_to_string(&file).unwrap(), orig);
    c.wait_pool_settled("worker", 30);
}

#[test]
fn drift_recovers_by_force_file() {
    let c = Cluster::up(Opts::default());
    let path = "etc/containers/registries.conf";
    let file = c.node_root("worker-0").join(path);
    let orig = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, "drifted\n").unwrap();
    let reason = wait_for("worker-0 Degraded by drift", 60, || {
        let (s, r) = node_state(&c, "worker-0");
        (s == "Degraded").then_some(r)
    });
    assert!(reason.contains("content mismatch for file"), "{reason}");
    std::fs::write(
        c.node_root("worker-0")
            .join("run/machine-config-daemon-force"),
        "",
    )
    .unwrap();
    wait_for("worker-0 Done after force", 60, || {
        (node_state(&c, "worker-0").0 == "Done").then_some(())
    });
    assert_eq!(std::fs::read_to_string(&file).unwrap(), orig);
    c.wait_pool_settled("worker", 30);
}

fn bad_machineconfig_render_degrades_and_touches_no_node(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    let old = c.pool_target("worker");
    let bad = e2e::BAD_WORKER_MC;
    c.apply(bad);
    let msg = wait_for("RenderDegraded", 60, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (condition_status(&p, "RenderDegraded") == "True")
            .then(|| condition_message(&p, "RenderDegraded"))
    });
    assert!(msg.contains("bogus"), "{msg}");
    assert_eq!(c.pool_target("worker"), old, "a bad render was targeted");
    for w in c.workers() {
        let n = c.node(&w);
        assert_eq!(annotation(&n, DESIRED_ANN), old, "{w} was touched");
        assert_eq!(annotation(&n, CURRENT_ANN), old, "{w} was touched");
    }

    // Fixing it lets the rollout go on.
    c.apply(&bad.replace("  extensions: [bogus]\n", "").replace(
        "      version: 3.2.0\n",
        "      version: 3.2.0\n    storage:\n      files:\n      - path: /etc/fixed\n        mode: 420\n        contents:\n          source: data:,fixed\n",
    ));
    c.wait_rollout("worker", &old, 90);
    let p = c.pool("worker");
    assert_ne!(condition_status(&p, "RenderDegraded"), "True");
    for w in c.workers() {
        assert_eq!(c.read_node_file(&w, "/etc/fixed").as_deref(), Some("fixed"));
    }
}

#[test]
fn pause_and_unpause_mid_rollout() {
    let c = Cluster::up(Opts {
        workers: 3,
        reboot_seconds: 1,
        ..Opts::default()
    });
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-pause", "worker", "/etc/pause", "p"));
    // Pause as soon as the first worker is told to move.
    wait_for("a worker targeted", 60, || {
        let nodes = c.get_json(&["nodes", "-l", "node-role.kubernetes.io/worker"]);
        nodes["items"]
            .as_array()?
            .iter()
            .any(|n| annotation(n, DESIRED_ANN) != old)
            .then_some(())
    });
    let paused_gen = c.set_paused("worker", true);
    let new = c.pool_target("worker");
    // While paused, the pool finishes at most the nodes already moving and goes no further.
    let moved = |c: &Cluster| {
        c.get_json(&["nodes", "-l", "node-role.kubernetes.io/worker"])["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| annotation(n, DESIRED_ANN) == new)
            .count()
    };
    wait_for("in-flight nodes finish", 60, || {
        let nodes = c.get_json(&["nodes", "-l", "node-role.kubernetes.io/worker"]);
        nodes["items"]
            .as_array()?
            .iter()
            .all(|n| annotation(n, DESIRED_ANN) == annotation(n, CURRENT_ANN) && node_ready(n))
            .then_some(())
    });
    let while_paused = moved(&c);
    assert!(
        while_paused < 3,
        "a paused pool kept rolling: {while_paused}/3 moved"
    );
    // The controller's own evidence that it had its chance to move more: a status it wrote in
    // a pass that saw the pause (observedGeneration, upstream's paused Updating message) and
    // every in-flight node finished (updatedMachineCount). A pass that ignored the pause would
    // have targeted the next node in that same pass.
    wait_for("a controller pass after the pause", 60, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        let st = &p["status"];
        (st["observedGeneration"].as_i64()? >= paused_gen
            && condition_message(&p, "Updating").contains("Pool is paused")
            && st["updatedMachineCount"].as_u64()? == while_paused as u64)
            .then_some(())
    });
    let p = c.pool("worker");
    assert_ne!(pool_settled(&p).as_deref(), Some(new.as_str()));
    let (_, status) = c.mco(&["status"]);
    assert!(
        status.contains("paused"),
        "mco status does not show the pause:\n{status}"
    );
    assert_eq!(moved(&c), while_paused);

    c.set_paused("worker", false);
    let done = c.wait_pool_settled("worker", 90);
    assert_eq!(done, new);
    assert_eq!(moved(&c), 3);
}

fn pdb_blocked_drain_is_visible_and_resolves(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    // Tighten the sim's `web` budget so that it allows no eviction at all:
    // any drain that meets a web pod is held by it.
    c.set_web_budget(3);
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-pdb", "worker", "/etc/pdb", "x"));
    let (node, msg) = wait_for("a drain blocked by the web PDB in an MCN", 90, || {
        let mcns = c.try_get_json(&["machineconfignodes"])?;
        mcns["items"].as_array()?.iter().find_map(|m| {
            let msg = m["status"]["conditions"]
                .as_array()?
                .iter()
                .filter(|c| c["type"].as_str().unwrap_or("").contains("Drain"))
                .filter_map(|c| c["message"].as_str())
                .find(|s| s.contains("PodDisruptionBudget") || s.contains("default/web"))?
                .to_owned();
            Some((m["metadata"]["name"].as_str()?.to_owned(), msg))
        })
    });
    assert!(
        msg.contains("PodDisruptionBudget default/web"),
        "the Drained message does not name the PDB: {msg}"
    );
    let (_, status) = c.mco(&["status"]);
    assert!(
        status.contains(&node) && status.contains("default/web"),
        "mco status hides the blocked drain:\n{status}"
    );
    let (_, doc) = c.mco(&["doctor"]);
    assert!(
        doc.contains("PodDisruptionBudget default/web"),
        "mco doctor does not name the PDB:\n{doc}"
    );
    assert!(
        doc.contains(&node),
        "mco doctor does not name {node}:\n{doc}"
    );

    // Restoring the budget lets the drain finish once replacements are Ready.
    c.set_web_budget(2);
    c.wait_rollout("worker", &old, 120);
    let pods = c.get_json(&["pods", "-n", "default", "-l", "app=web"]);
    let ready = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| condition_status(p, "Ready") == "True")
        .count();
    assert!(ready >= 2, "web lost its budget: {ready} Ready");
}
