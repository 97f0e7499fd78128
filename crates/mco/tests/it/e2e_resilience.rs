//! End-to-end: rollouts that survive disturbance — a node joining mid-rollout,
//! a node daemon SIGKILLed mid-update, `mco up` itself restarted (SIGINT) or
//! crashed (SIGKILL).

use crate::e2e;

use e2e::*;

on_both_servers!(sigkilled_node_daemon_mid_update_converges);

fn worker_moved(c: &Cluster, old: &str) -> Option<String> {
    let nodes = c.try_get_json(&["nodes", "-l", "node-role.kubernetes.io/worker"])?;
    nodes["items"].as_array()?.iter().find_map(|n| {
        (annotation(n, DESIRED_ANN) != old)
            .then(|| n["metadata"]["name"].as_str().map(str::to_owned))?
    })
}

#[test]
fn new_node_joins_through_first_boot_during_a_rollout() {
    let c = Cluster::up(Opts {
        reboot_seconds: 1,
        ..Opts::default()
    });
    let old = c.pool_target("worker");
    c.apply(&file_mc(
        "99-worker-join",
        "worker",
        "/etc/join",
        "joined\n",
    ));
    wait_for("rollout started", 60, || worker_moved(&c, &old));
    c.sim(&["add-node", "w5", "--pool", "worker"]);
    c.wait_nodes_ready(4, 90);
    let new = wait_for("pool settled on the new config", 120, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        pool_settled(&p).filter(|t| *t != old)
    });
    assert_eq!(c.pool("worker")["status"]["machineCount"], 3);
    let w5 = c.node("w5");
    assert_eq!(annotation(&w5, CURRENT_ANN), new);
    assert_eq!(
        c.read_node_file("w5", "/etc/join").as_deref(),
        Some("joined\n")
    );
    // It joined through first boot: the encapsulated config was consumed.
    assert!(
        c.read_node_file("w5", "/etc/ignition-machine-config-encapsulated.json")
            .is_none(),
        "first boot left its config behind"
    );
}

/// The pid of the `mco daemon` process serving `node`, a child of `mco up`.
fn daemon_pid(c: &Cluster, node: &str) -> Option<u32> {
    let parent = c.pid();
    for e in std::fs::read_dir("/proc").ok()? {
        let e = e.ok()?;
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "daemon") && args.iter().any(|a| a.contains(node)) {
            return Some(pid);
        }
    }
    None
}

fn sigkilled_node_daemon_mid_update_converges(server: Server) {
    let c = Cluster::up(Opts {
        server,
        reboot_seconds: 1,
        node_processes: true,
        ..Opts::default()
    });
    let old = c.pool_target("worker");
    // Hold every drain on the web budget: the first worker to update stays mid-update (Working,
    // drain requested) until the budget is relaxed, so the kill cannot miss the window however
    // slow the machine is.
    c.set_web_budget(3);
    c.apply(&file_mc("99-worker-kill", "worker", "/etc/kill", "k\n"));
    // A worker without a web pod drains at once and may finish; the one to kill is a worker
    // whose drain the budget holds, as its MachineConfigNode says.
    let node = wait_for("a worker's drain held by the web budget", 120, || {
        let mcns = c.try_get_json(&["machineconfignodes"])?;
        mcns["items"].as_array()?.iter().find_map(|m| {
            let held = m["status"]["conditions"]
                .as_array()?
                .iter()
                .filter(|c| c["type"].as_str().unwrap_or("").contains("Drain"))
                .filter_map(|c| c["message"].as_str())
                .any(|s| s.contains("default/web"));
            let name = m["metadata"]["name"].as_str()?;
            (held && name.starts_with("worker")).then(|| name.to_owned())
        })
    });
    let target = annotation(&c.node(&node), DESIRED_ANN);
    let pid = wait_for("its daemon process", 30, || daemon_pid(&c, &node));
    let n = c.node(&node);
    assert_eq!(
        (
            annotation(&n, STATE_ANN).as_str(),
            annotation(&n, CURRENT_ANN) == target
        ),
        ("Working", false),
        "{node} is not mid-update before the kill: {:?}",
        n["metadata"]["annotations"]
    );
    let st = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -KILL {pid} failed");
    // The supervisor starts a new daemon; it takes the update up where the dead one left it,
    // still held by the budget.
    let after = wait_for("its daemon restarted", 30, || {
        daemon_pid(&c, &node).filter(|p| *p != pid)
    });
    let n = c.node(&node);
    assert_eq!(
        (
            annotation(&n, STATE_ANN).as_str(),
            annotation(&n, DESIRED_ANN) == target,
            annotation(&n, CURRENT_ANN) == target,
        ),
        ("Working", true, false),
        "{node} left its update after the kill: {:?}",
        n["metadata"]["annotations"]
    );
    c.set_web_budget(2);
    let new = wait_for("pool converged", 120, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        pool_settled(&p).filter(|t| *t != old)
    });
    for w in c.workers() {
        assert_eq!(annotation(&c.node(&w), CURRENT_ANN), new, "{w}");
        assert_eq!(
            c.read_node_file(&w, "/etc/kill").as_deref(),
            Some("k\n"),
            "{w}"
        );
    }
    assert_ne!(after, pid);
}

#[test]
fn restarting_mco_up_mid_rollout_resumes_and_finishes() {
    restart_mid_rollout(Cluster::stop);
}

#[test]
fn sigkilled_mco_up_mid_rollout_resumes_and_finishes() {
    restart_mid_rollout(Cluster::kill_hard);
}

/// A rollout under way, `mco up` ended by `end` (a clean stop or a crash) and started again
/// on the same data dir: the rollout resumes and finishes.
fn restart_mid_rollout(end: fn(&mut Cluster)) {
    let mut c = Cluster::up(Opts {
        workers: 3,
        reboot_seconds: 1,
        ..Opts::default()
    });
    let old = c.pool_target("worker");
    c.apply(&file_mc(
        "99-worker-restart",
        "worker",
        "/etc/restart",
        "r\n",
    ));
    let first = wait_for("rollout started", 60, || worker_moved(&c, &old));
    end(&mut c);
    c.start();
    let new = wait_for("pool finished after restart", 150, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        pool_settled(&p).filter(|t| *t != old)
    });
    c.wait_nodes_ready(4, 30);
    for w in c.workers() {
        assert_eq!(annotation(&c.node(&w), CURRENT_ANN), new, "{w}");
        assert_eq!(
            c.read_node_file(&w, "/etc/restart").as_deref(),
            Some("r\n"),
            "{w}"
        );
    }
    assert!(c.workers().contains(&first));
}
