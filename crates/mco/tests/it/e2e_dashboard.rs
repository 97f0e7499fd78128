//! End-to-end: the dashboard `mco up` serves, in a real headless Chromium through WebDriver:
//! every pool and node listed, a rollout followed live without a reload, a blocked drain and a
//! degraded node with their cause, a rollout a policy's gate halted, and keyboard navigation and
//! labels.

use crate::e2e;

use e2e::*;
use mco_testkit::browser::{Browser, Key};
use serde_json::Value;

on_both_servers!(
    dashboard_follows_a_rollout_live_in_a_browser,
    dashboard_shows_a_rollout_halted_by_a_gate,
    dashboard_shows_why_a_drain_is_blocked_and_a_node_is_degraded,
);

/// A window tall enough for the screenshots to hold the pools, the grid and a node's detail.
fn browser() -> Browser {
    Browser::start(1280, 1700).unwrap_or_else(|e| panic!("{e}"))
}

/// Where the tests write screenshots: the workspace's `target/`.
fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

fn node_names(c: &Cluster) -> Vec<String> {
    let mut names: Vec<String> = c.get_json(&["nodes"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// A JS string literal of `s`.
fn lit(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// Opens `node`'s detail by clicking its cell, and waits until the panel shows it.
fn open_detail(b: &Browser, node: &str) {
    b.js(&format!(
        "document.querySelector('#grid [data-node=\"' + CSS.escape({n}) + '\"]').click(); return true;",
        n = lit(node)
    ));
    b.wait_js(
        &format!("the detail of {node}"),
        10,
        &format!(
            "return document.getElementById('d-name').textContent === {};",
            lit(node)
        ),
    );
}

fn dashboard_follows_a_rollout_live_in_a_browser(server: Server) {
    let c = Cluster::up(Opts {
        server,
        workers: 3,
        reboot_seconds: 1,
        ..Opts::default()
    });
    c.wait_nodes_ready(4, 120);
    let b = browser();
    b.goto(&c.dashboard_url());

    // Every node and both pools.
    let nodes = node_names(&c);
    let want = serde_json::to_string(&nodes).unwrap();
    b.wait_js(
        "every node in the grid",
        30,
        &format!(
            "const want = {want};
             const have = Array.from(document.querySelectorAll('#grid .node')).map((b) => b.dataset.node);
             return JSON.stringify(have) === JSON.stringify(want);"
        ),
    );
    let pools = b.js(
        "return Array.from(document.querySelectorAll('#pools .pool')).map((p) => p.dataset.pool);",
    );
    assert_eq!(pools, serde_json::json!(["master", "worker"]));

    // From here on, record every state each cell shows; a reload would lose `__mark`.
    b.js("window.__mark = 'same page';
          window.__seen = {};
          const rec = () => {
            for (const n of document.querySelectorAll('#grid .node')) {
              const s = (window.__seen[n.dataset.node] ||= []);
              const k = n.className.replace(/.*k-/, '') + '|' + n.dataset.phase;
              if (s[s.length - 1] !== k) s.push(k);
            }
          };
          rec();
          new MutationObserver(rec).observe(document.getElementById('grid'),
            { subtree: true, attributes: true, childList: true });
          return true;");

    // A budget that allows no eviction holds the first drain that meets a web pod, so that one
    // worker is shown in a drain phase before its reboot, however fast the machine: the phases
    // before a reboot otherwise pass in milliseconds, and a loaded one shows only the reboot.
    c.set_web_budget(3);
    let old = c.pool_target("worker");
    c.apply(&example("99-worker-motd.yaml"));
    // Mid-rollout: a screenshot for people (and the README's image).
    b.wait_js(
        "a worker shown updating",
        120,
        "return document.querySelector('#grid .node.k-updating') !== null;",
    );
    let moving = b
        .js("return document.querySelector('#grid .node.k-updating').dataset.node;")
        .as_str()
        .unwrap()
        .to_owned();
    open_detail(&b, &moving);
    let shot = target_dir().join(format!("dashboard-rollout-{server:?}.png").to_lowercase());
    b.screenshot(&shot);
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000, "{shot:?}");

    b.wait_js(
        "a worker shown with its drain held",
        120,
        "return Array.from(document.querySelectorAll('#grid .node.k-updating'))
           .some((n) => (n.dataset.message || '').includes('default/web'));",
    );
    c.set_web_budget(2);
    let new = c.wait_rollout("worker", &old, 180);
    b.wait_js(
        "the worker pool shown done on the new config",
        30,
        &format!(
            "const p = document.querySelector('#pools [data-pool=\"worker\"]');
             const bar = p && p.querySelector('progress');
             return bar && bar.value === 3 && bar.max === 3
               && p.querySelector('.target').textContent === {new}
               && document.querySelectorAll('#grid .node[data-pool=\"worker\"].k-updated').length === 3;",
            new = lit(&new)
        ),
    );
    assert_eq!(
        b.js("return window.__mark || null;"),
        "same page",
        "the page reloaded"
    );
    let seen = b.js("return window.__seen;");
    let mut most_phases = 0;
    for w in c.workers() {
        let states: Vec<&str> = seen[&w]
            .as_array()
            .unwrap_or_else(|| panic!("{w} never recorded: {seen}"))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            states.iter().any(|s| s.starts_with("updating|")),
            "{w} was never shown updating: {states:?}"
        );
        assert!(
            states.last().is_some_and(|s| s.starts_with("updated|")),
            "{w} did not end updated: {states:?}"
        );
        let phases: std::collections::BTreeSet<&str> = states
            .iter()
            .filter(|s| s.starts_with("updating|"))
            .collect::<Vec<_>>()
            .into_iter()
            .copied()
            .collect();
        most_phases = most_phases.max(phases.len());
    }
    assert!(
        most_phases >= 2,
        "no worker was shown moving through phases: {seen}"
    );
    assert!(
        b.js("return Number(document.body.dataset.applied);")
            .as_f64()
            .is_some_and(|n| n >= 2.0),
        "the page applied no live updates"
    );

    // Labels: every control has an accessible name, the progress bars a <label>, the page a
    // language and one h1; the cells say their phase in words, not colour alone.
    let unnamed = b.js(
        "return Array.from(document.querySelectorAll('button, a, input, select'))
                          .filter((e) => !(e.getAttribute('aria-label') || e.textContent.trim()))
                          .map((e) => e.outerHTML.slice(0, 80));",
    );
    assert_eq!(unnamed, serde_json::json!([]), "controls without a name");
    let unlabelled = b.js("return Array.from(document.querySelectorAll('progress'))
                             .filter((p) => p.labels.length === 0).length;");
    assert_eq!(unlabelled, 0, "progress bars without a label");
    assert_eq!(b.js("return document.documentElement.lang;"), "en");
    assert_eq!(b.js("return document.querySelectorAll('h1').length;"), 1);
    let label = b.js("return document.querySelector('#grid [data-node=\"worker-0\"]').getAttribute('aria-label');");
    assert!(
        label
            .as_str()
            .is_some_and(|l| l.starts_with("worker-0: Updated")),
        "{label}"
    );

    // Keyboard: Tab reaches the grid, arrows move along it, End/Home jump, Enter opens a node.
    let focused =
        "const e = document.activeElement; return e && e.dataset ? (e.dataset.node || '') : '';";
    b.js("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); return true;");
    let mut reached = String::new();
    for _ in 0..60 {
        b.press(Key::Tab);
        reached = b.js(focused).as_str().unwrap_or_default().to_owned();
        if !reached.is_empty() {
            break;
        }
    }
    assert_eq!(reached, nodes[0], "Tab did not reach the grid's first node");
    b.press(Key::Right);
    assert_eq!(b.js(focused), nodes[1].as_str(), "ArrowRight");
    b.press(Key::End);
    assert_eq!(b.js(focused), nodes.last().unwrap().as_str(), "End");
    b.press(Key::Home);
    assert_eq!(b.js(focused), nodes[0].as_str(), "Home");
    b.press(Key::Right);
    b.press(Key::Enter);
    b.wait_js(
        "Enter to open the focused node",
        10,
        &format!(
            "return document.getElementById('d-name').textContent === {}
               && document.querySelector('#grid [aria-pressed=\"true\"]').dataset.node === {0};",
            lit(&nodes[1])
        ),
    );
    assert_eq!(
        b.js("return document.getElementById('d-pool').textContent;"),
        {
            if nodes[1].starts_with("master") {
                "master"
            } else {
                "worker"
            }
        }
    );
}

fn dashboard_shows_why_a_drain_is_blocked_and_a_node_is_degraded(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    c.wait_nodes_ready(3, 120);
    let b = browser();
    b.goto(&c.dashboard_url());
    b.wait_js(
        "the grid",
        30,
        "return document.querySelectorAll('#grid .node').length === 3;",
    );

    // A budget that allows no eviction holds the first drain that meets a web pod.
    c.set_web_budget(3);
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-dash", "worker", "/etc/dash", "x"));
    let node = b
        .wait_js(
            "a node whose drain the web budget holds",
            120,
            "const n = Array.from(document.querySelectorAll('#grid .node'))
               .find((n) => (n.dataset.message || '').includes('default/web'));
             return n ? n.dataset.node : null;",
        )
        .as_str()
        .unwrap()
        .to_owned();
    open_detail(&b, &node);
    let drain = b.wait_js(
        "the blocked drain's budget and pods in the detail",
        30,
        "const d = document.getElementById('d-drain');
         return d && !d.hidden && /default\\/web-/.test(d.textContent) ? d.textContent : null;",
    );
    let drain = drain.as_str().unwrap();
    assert!(drain.contains("default/web"), "no PDB named: {drain}");
    assert!(
        drain.contains("disruptionsAllowed 0"),
        "no budget shown: {drain}"
    );
    // The same panel a user links to.
    b.goto(&format!("{}#node={node}", c.dashboard_url()));
    b.wait_js(
        "the detail opened from the URL",
        30,
        &format!(
            "return document.getElementById('d-name').textContent === {}
               && !document.getElementById('d-drain').hidden;",
            lit(&node)
        ),
    );

    // Freeing the budget lets the drain go on; the panel says so without a reload.
    b.js("window.__mark = 'same page'; return true;");
    c.set_web_budget(2);
    c.wait_rollout("worker", &old, 180);
    b.wait_js(
        "the blocked drain gone from the detail",
        30,
        "return document.getElementById('d-drain').hidden;",
    );

    // A degraded node: its cause and `mco doctor`'s fix.
    let file = c
        .node_root("worker-0")
        .join("etc/containers/registries.conf");
    let orig = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, "drifted\n").unwrap();
    b.wait_js(
        "worker-0 shown degraded",
        90,
        "return document.querySelector('#grid [data-node=\"worker-0\"]').classList.contains('k-degraded');",
    );
    open_detail(&b, "worker-0");
    let message = b.text("#d-message");
    assert!(
        message.contains("content mismatch for file")
            && message.contains("/etc/containers/registries.conf"),
        "{message}"
    );
    let doctor = b.wait_js(
        "mco doctor's finding in the detail",
        30,
        "const d = document.getElementById('d-doctor');
         return d && !d.hidden && d.querySelector('.finding code') ? d.textContent : null;",
    );
    let doctor = doctor.as_str().unwrap();
    assert!(
        doctor.contains("/etc/containers/registries.conf"),
        "the cause does not name the file: {doctor}"
    );
    assert!(
        doctor.contains("machine-config-daemon-force"),
        "no fix with the force file: {doctor}"
    );
    assert_eq!(b.js("return window.__mark || null;"), "same page");
    b.screenshot(&target_dir().join(format!("dashboard-degraded-{server:?}.png").to_lowercase()));

    std::fs::write(&file, &orig).unwrap();
    b.wait_js(
        "worker-0 shown updated again",
        90,
        "return document.querySelector('#grid [data-node=\"worker-0\"]').classList.contains('k-updated')
           && document.getElementById('d-doctor').hidden;",
    );
}

fn dashboard_shows_a_rollout_halted_by_a_gate(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    // Nothing listens on port 1: the canary's probe is refused once it is updated.
    c.apply(
        "apiVersion: rollouts.mco.dev/v1alpha1
kind: RolloutPolicy
metadata:
  name: probe
spec:
  poolSelector:
    matchLabels:
      pools.operator.machineconfiguration.openshift.io/worker: \"\"
  canary:
    nodes: 1
  soak: 1h
  gates:
    http:
    - url: http://127.0.0.1:1/healthz
      timeout: 2s
",
    );
    wait_for("policy probe Valid", 60, || {
        let p = c.try_get_json(&["rolloutpolicy", "probe"])?;
        (condition(&p, "Valid")?["status"] == "True").then_some(())
    });
    let b = browser();
    b.goto(&c.dashboard_url());
    let worker = "document.querySelector('section.pool[data-pool=\"worker\"]')";
    b.wait_js(
        "the worker pool's policy and its gate",
        30,
        &format!(
            "const r = {worker}.querySelector('div.rollout');
             return r !== null && r.textContent.includes('probe')
               && r.querySelector('ul.gates > li[data-gate=\"http\"]') !== null;"
        ),
    );
    assert_eq!(
        b.js("return document.querySelector('section.pool[data-pool=\"master\"] div.rollout');"),
        Value::Null,
        "no policy governs master"
    );
    b.js("window.__mark = 'same page'; return true;");

    c.apply(&file_mc("99-worker-probe", "worker", "/etc/probe", "v2"));
    let halt = b.wait_js(
        "the halt naming the gate",
        180,
        &format!(
            "const h = {worker}.querySelector('div.rollout[data-phase=\"Halted\"] p.halt');
             return h ? h.textContent : null;"
        ),
    );
    let halt = halt.as_str().unwrap();
    assert!(halt.contains("gate http"), "{halt}");
    assert!(halt.contains("GET http://127.0.0.1:1/healthz"), "{halt}");
    assert!(
        b.text("section.pool[data-pool=\"worker\"] dd.flags")
            .contains("halted")
    );
    assert_eq!(b.js("return window.__mark || null;"), "same page");
    b.screenshot(&target_dir().join(format!("dashboard-halted-{server:?}.png").to_lowercase()));
}
