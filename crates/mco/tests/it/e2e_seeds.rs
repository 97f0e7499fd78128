//! End-to-end: the seeds' scenarios, verbatim, with the real `kubectl`
//! against `mco up` (seed 002: MachineConfigNode views; seed 000: the node
//! that never adopted its OS, and the OS upgrade).

use crate::e2e;

use e2e::*;

on_both_servers!(
    seed_002_machineconfignode_views,
    os_upgrade_every_node_reboots_into_new_image,
    seed_000_never_adopted_os_diagnosed_forced_and_upgraded,
);

const HEADER: &str = "NAME       UPDATED   UPDATEPREPARED   UPDATEEXECUTED   UPDATEPOSTACTIONCOMPLETED   UPDATECOMPLETED   RESUMED";
const WIDE_EXTRA: [&str; 7] = [
    "UPDATECOMPATIBLE",
    "UPDATEFILESANDOS",
    "DRAINEDNODE",
    "CORDONEDNODE",
    "REBOOTNODE",
    "RELOADEDCRIO",
    "UNCORDONED",
];
const PRIMARY: [&str; 7] = [
    "NAME",
    "UPDATED",
    "UPDATEPREPARED",
    "UPDATEEXECUTED",
    "UPDATEPOSTACTIONCOMPLETED",
    "UPDATECOMPLETED",
    "RESUMED",
];

fn columns(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

fn seed_002_machineconfignode_views(server: Server) {
    let c = Cluster::up(Opts {
        server,
        reboot_seconds: 2,
        ..Opts::default()
    });

    // 1. `get machineconfignodes`: the seed's header, one row per node, all Updated.
    let out = c.kubectl(&["get", "machineconfignodes"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], HEADER, "{out}");
    assert_eq!(lines.len(), 4, "{out}");
    for l in &lines[1..] {
        assert_eq!(
            &columns(l)[1..],
            ["True", "False", "False", "False", "False", "False"],
            "{out}"
        );
    }

    // The dashboard `mco up` serves shows the same table, every node and both pools.
    let names: Vec<String> = c
        .kubectl(&["get", "nodes", "-o", "name"])
        .lines()
        .map(|l| l.trim_start_matches("node/").to_string())
        .collect();
    assert_eq!(names.len(), 3);
    let page = wait_for("every node on the dashboard", 30, || {
        let (code, page) = c.dashboard_get("/");
        assert_eq!(code, 200, "{page}");
        let cells = page.matches("class=\"node k-").count();
        let all = names
            .iter()
            .all(|n| page.contains(&format!("data-node=\"{n}\"")));
        (all && cells == names.len()).then_some(page)
    });
    for head in PRIMARY {
        assert!(page.contains(&format!(">{head}</th>")), "{head}:\n{page}");
    }
    for pool in ["master", "worker"] {
        assert!(
            page.contains(&format!("data-pool=\"{pool}\" aria-labelledby")),
            "{page}"
        );
    }

    // `-o wide`: the seed's seven secondary columns, in order, after the primary ones.
    let wide = c.kubectl(&["get", "machineconfignodes", "-o", "wide"]);
    let head = columns(wide.lines().next().unwrap());
    assert_eq!(&head[..7], PRIMARY, "{wide}");
    assert_eq!(&head[7..], WIDE_EXTRA, "{wide}");

    // 2. The seed's jq pool filter, verbatim with <pool_name> = worker.
    let filtered = c.sh(
        "kubectl get machineconfignodes $(kubectl get machineconfignodes -o json | jq -r '.items[]|select(.spec.pool.name==\"worker\")|.metadata.name')",
    );
    let names: Vec<&str> = filtered.lines().skip(1).map(|l| columns(l)[0]).collect();
    assert_eq!(filtered.lines().next(), Some(HEADER), "{filtered}");
    assert_eq!(names, ["worker-0", "worker-1"], "{filtered}");

    // 3. describe: the fields the seed shows. kubectl picks v1, the preferred version; the
    // seed's v1alpha1 is one qualified name away, and both show the seed's fields.
    let desc = c.kubectl(&["describe", "machineconfignode/worker-0"]);
    assert!(
        desc.contains("API Version:  machineconfiguration.openshift.io/v1\n"),
        "{desc}"
    );
    let alpha = c.kubectl(&[
        "describe",
        "machineconfignodes.v1alpha1.machineconfiguration.openshift.io/worker-0",
    ]);
    assert!(
        alpha.contains("API Version:  machineconfiguration.openshift.io/v1alpha1"),
        "{alpha}"
    );
    for field in [
        "Name:         worker-0",
        "Kind:         MachineConfigNode",
        "Node Ref:",
        "Pool:",
        "Name:  worker",
        "Config Version:",
        "Desired:",
        "Current:",
        "Conditions:",
        "Last Transition Time:",
        "Type:                  Updated",
        "Health:",
        "Observed Generation:",
    ] {
        assert!(desc.contains(field), "describe lacks {field:?}:\n{desc}");
        assert!(
            alpha.contains(field),
            "v1alpha1 describe lacks {field:?}:\n{alpha}"
        );
    }

    // Mid-rollout: the same table shows phases in progress (Unknown) and done (True).
    let old = c.pool_target("worker");
    c.apply(&example("99-worker-motd.yaml"));
    let mut seen_unknown = false;
    let mut seen_true_phase = false;
    let mut seen_updating_on_dashboard = false;
    let mut tables = Vec::new();
    wait_for("rollout with phases visible and finished", 120, || {
        let t = c.kubectl(&["get", "machineconfignodes"]);
        assert_eq!(t.lines().next(), Some(HEADER), "{t}");
        for l in t.lines().skip(1) {
            let cols = columns(l);
            seen_unknown |= cols[1..].contains(&"Unknown");
            seen_true_phase |= cols[2..].contains(&"True");
        }
        if tables.last() != Some(&t) {
            tables.push(t);
        }
        let (_, fleet) = c.dashboard_get("/api/fleet");
        seen_updating_on_dashboard |= fleet.contains("\"kind\":\"updating\"");
        let p = c.try_get_json(&["mcp", "worker"])?;
        let done = pool_settled(&p).is_some_and(|t| t != old);
        done.then_some(())
    });
    assert!(
        seen_unknown && seen_true_phase,
        "no table showed both Unknown and True phases:\n{}",
        tables.join("\n")
    );
    assert!(
        seen_updating_on_dashboard,
        "the dashboard never showed an updating node"
    );
}

fn os_upgrade_every_node_reboots_into_new_image(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    let nodes = ["master-0", "worker-0", "worker-1"];
    let boots: Vec<String> = nodes.iter().map(|n| c.boot_id(n)).collect();
    let (m0, w0) = (c.pool_target("master"), c.pool_target("worker"));
    c.set_os_image(IMAGE_130);
    c.wait_rollout("master", &m0, 120);
    c.wait_rollout("worker", &w0, 120);
    for (n, boot) in nodes.iter().zip(&boots) {
        assert_ne!(&c.boot_id(n), boot, "{n} did not reboot");
        let st = c.sim(&["rpm-ostree", n, "status"]);
        let new = st
            .find(&format!("pivot://{IMAGE_130}"))
            .unwrap_or_else(|| panic!("{n} not on 1.3.0:\n{st}"));
        let prev = st
            .find(&format!("pivot://{IMAGE_122}"))
            .unwrap_or_else(|| panic!("{n} lost the previous deployment:\n{st}"));
        assert!(new < prev, "booted deployment is not listed first:\n{st}");
        assert!(
            st.trim_start().starts_with("State:") || st.contains("Deployments:"),
            "{st}"
        );
        let booted_line = st
            .lines()
            .find(|l| l.trim_start().starts_with("* "))
            .unwrap_or_else(|| panic!("no booted marker:\n{st}"));
        assert!(booted_line.contains(IMAGE_130), "{st}");
        assert!(
            st.contains("CustomOrigin: Managed by machine-config-operator"),
            "{st}"
        );
    }
}

fn seed_000_never_adopted_os_diagnosed_forced_and_upgraded(server: Server) {
    let c = Cluster::up(Opts {
        server,
        masters: 1,
        workers: 1,
        ..Opts::default()
    });
    c.sim(&[
        "add-node",
        "w9",
        "--pool",
        "worker",
        "--os",
        "uos",
        "--skip-firstboot-os",
    ]);
    let w0 = c.pool_target("worker");
    c.wait_nodes_ready(3, 60);
    // w9 may already be Degraded here (validated at boot): that is the seed's
    // state too, so the pool is not required to settle before the change.

    // A MachineConfig change makes the daemon check the OS: it is Degraded.
    c.apply(&file_mc(
        "99-worker-seed000",
        "worker",
        "/etc/seed000",
        "hello\n",
    ));
    let msg = wait_for("w9 Degraded", 60, || {
        let n = c.node("w9");
        let state = annotation(&n, "machineconfiguration.openshift.io/state");
        (state == "Degraded").then(|| annotation(&n, "machineconfiguration.openshift.io/reason"))
    });
    assert!(
        msg.contains(&format!(
            "expected target osImageURL \"{IMAGE_122}\", have \"\""
        )),
        "{msg}"
    );

    // mco doctor names the cause and the fix.
    let (_, doc) = c.mco(&["doctor", "w9"]);
    assert!(doc.contains("w9"), "{doc}");
    assert!(doc.contains("osImageURL") || doc.contains("never"), "{doc}");
    assert!(
        doc.contains("machine-config-daemon-force"),
        "doctor gives no fix:\n{doc}"
    );

    // The force file recovers it.
    std::fs::write(
        c.node_root("w9").join("run/machine-config-daemon-force"),
        "",
    )
    .unwrap();
    let new = wait_for("worker pool rolls out after the force file", 120, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        pool_settled(&p).filter(|t| *t != w0)
    });
    assert_eq!(
        annotation(&c.node("w9"), CURRENT_ANN),
        new,
        "w9 not on the new config"
    );
    assert_eq!(
        c.read_node_file("w9", "/etc/seed000").as_deref(),
        Some("hello\n")
    );

    // The OS upgrade then succeeds on it.
    c.set_os_image(IMAGE_130);
    c.wait_rollout("worker", &new, 120);
    let st = c.sim(&["rpm-ostree", "w9", "status"]);
    let booted = st
        .lines()
        .find(|l| l.trim_start().starts_with("* "))
        .unwrap_or_else(|| panic!("no booted marker:\n{st}"));
    assert!(booted.contains(&format!("pivot://{IMAGE_130}")), "{st}");
}
