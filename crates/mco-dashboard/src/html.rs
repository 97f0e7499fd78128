//! The page, rendered on the server from a [`Fleet`]; `app.js` keeps it current from `/events`.
//! Every text from the cluster goes through [`escape`].

use std::fmt::Write as _;

use crate::view::{Fleet, Kind, NodeView, PoolView, RolloutView};

/// The page's script and style, embedded so the page needs nothing from the internet.
pub const APP_JS: &str = include_str!("../assets/app.js");
pub const STYLE_CSS: &str = include_str!("../assets/style.css");

/// `text` safe in HTML text and in double-quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn percent(p: &PoolView) -> usize {
    (p.updated * 100).checked_div(p.total).unwrap_or(0).min(100)
}

fn pool(out: &mut String, p: &PoolView) {
    let name = escape(&p.name);
    let mut flags = Vec::new();
    if p.paused {
        flags.push("paused".to_string());
    }
    if p.degraded {
        flags.push("degraded".to_string());
    }
    if p.halted {
        flags.push("halted".to_string());
    }
    if let Some([done, of]) = p.pinning {
        flags.push(format!("pinning images {done}/{of}"));
    }
    if let Some(why) = &p.waiting_image {
        flags.push(format!("waiting for its image ({why})"));
    }
    let _ = write!(
        out,
        r#"<section class="pool" data-pool="{name}" aria-labelledby="pool-{name}">
<h3 id="pool-{name}">{name}</h3>
<label for="bar-{name}">{updated}/{total} updated</label>
<progress id="bar-{name}" max="{total}" value="{updated}">{pct}%</progress>
<dl>
<dt>Target</dt><dd class="target">{target}</dd>
<dt>maxUnavailable</dt><dd class="maxu">{maxu}</dd>
<dt>ETA</dt><dd class="eta">{eta}</dd>
<dt>Flags</dt><dd class="flags">{flags}</dd>
</dl>
"#,
        updated = p.updated,
        total = p.total,
        pct = percent(p),
        target = escape(&p.target),
        maxu = p.max_unavailable,
        eta = escape(&p.eta),
        // A flag may carry a message a builder wrote: escaped as every other text.
        flags = if flags.is_empty() {
            "none".to_string()
        } else {
            escape(&flags.join(", "))
        },
    );
    if let Some(r) = &p.rollout {
        rollout(out, r);
    }
    out.push_str("</section>\n");
}

/// A governed pool's rollout: policy, phase, halt, gates, window. `app.js` builds the same.
fn rollout(out: &mut String, r: &RolloutView) {
    let _ = write!(
        out,
        r#"<div class="rollout" data-phase="{phase}">
<p class="policy">RolloutPolicy <code>{policy}</code>: <span class="phase">{phase}</span></p>
"#,
        phase = escape(&r.phase),
        policy = escape(&r.policy),
    );
    if let Some(h) = &r.halt {
        let by = if h.gate.is_empty() {
            String::new()
        } else if h.node.is_empty() {
            format!(" by gate {}", escape(&h.gate))
        } else {
            format!(" by gate {} on node {}", escape(&h.gate), escape(&h.node))
        };
        let at = if h.time.is_empty() {
            String::new()
        } else {
            format!(" at {}", escape(&h.time))
        };
        let _ = writeln!(
            out,
            r#"<p class="halt" role="alert" data-gate="{gate}" data-node="{node}">Halted{by}{at}: <span class="msg">{message}</span></p>"#,
            gate = escape(&h.gate),
            node = escape(&h.node),
            message = escape(&h.message),
        );
    }
    if let Some(m) = &r.pinned {
        let _ = writeln!(out, r#"<p class="pinned">{}</p>"#, escape(m));
    }
    if !r.canary_nodes.is_empty() {
        let more = if r.more_canary > 0 {
            format!(" and {} more", r.more_canary)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            r#"<p class="canary">Canary: {}{more}</p>"#,
            escape(&r.canary_nodes.join(", "))
        );
    }
    out.push_str("<ul class=\"gates\" aria-label=\"Gates\">\n");
    for g in &r.gates {
        let _ = writeln!(
            out,
            r#"<li data-gate="{name}"><code>{name}</code> {detail}</li>"#,
            name = escape(&g.name),
            detail = escape(&g.detail),
        );
    }
    out.push_str("</ul>\n");
    if let Some(w) = &r.window {
        let _ = writeln!(out, r#"<p class="window">{}</p>"#, escape(w));
    }
    if let Some(n) = &r.next_window {
        let _ = writeln!(
            out,
            r#"<p class="next-window">Waiting for the window at {}</p>"#,
            escape(n)
        );
    }
    out.push_str("</div>\n");
}

/// One node's cell: focusable, labelled with its name and phase (not colour alone), pressed
/// when its detail is shown.
pub fn node_cell(n: &NodeView, selected: bool) -> String {
    let name = escape(&n.name);
    format!(
        r#"<button type="button" class="node k-{kind}" id="node-{name}"{pressed} data-node="{name}" data-pool="{pool}" data-phase="{phase}" data-current="{current}" data-desired="{desired}" data-message="{message}" aria-label="{name}: {label}, {phase}"><span class="nname">{name}</span><span class="nphase">{klabel}</span></button>"#,
        kind = n.kind.as_str(),
        pressed = if selected {
            r#" aria-pressed="true""#
        } else {
            ""
        },
        label = n.kind.label(),
        klabel = n.kind.label(),
        pool = escape(&n.pool),
        phase = escape(&n.phase),
        current = escape(&n.current),
        desired = escape(&n.desired),
        message = escape(&n.message),
    )
}

/// ` hidden` when `hide`.
fn hidden(hide: bool) -> &'static str {
    if hide { " hidden" } else { "" }
}

/// The detail panel, of `n` or of no node yet. `app.js` fills the same elements when another
/// node is selected.
pub fn detail(n: Option<&NodeView>) -> String {
    let mut out = String::with_capacity(2048);
    let field = |v: fn(&NodeView) -> &str| n.map(|n| escape(v(n))).unwrap_or_default();
    let _ = write!(
        out,
        r#"<section id="detail" aria-labelledby="d-name" tabindex="-1"><h3 id="detail-h">Node detail</h3>
<dl>
<dt>Node</dt><dd id="d-name">{name}</dd>
<dt>Pool</dt><dd id="d-pool">{pool}</dd>
<dt>Phase</dt><dd id="d-phase">{phase}</dd>
<dt>Current config</dt><dd id="d-current">{current}</dd>
<dt>Desired config</dt><dd id="d-desired">{desired}</dd>
<dt>Message</dt><dd id="d-message">{message}</dd>
</dl>
<h4 id="d-timeline-h">Phases</h4>
<ol id="d-timeline" aria-labelledby="d-timeline-h">
"#,
        name = n
            .map(|n| escape(&n.name))
            .unwrap_or_else(|| "select a node".into()),
        pool = field(|n| &n.pool),
        phase = field(|n| &n.phase),
        current = field(|n| &n.current),
        desired = field(|n| &n.desired),
        message = field(|n| &n.message),
    );
    for p in n.iter().flat_map(|n| &n.timeline) {
        let _ = writeln!(
            out,
            r#"<li data-phase="{phase}"><span class="ph">{phase}</span> <span class="st">{state} ({status})</span> <span class="du">{duration}</span> <span class="at">since {started}</span></li>"#,
            phase = escape(&p.phase),
            state = escape(&p.state),
            status = escape(&p.status),
            duration = escape(&p.duration),
            started = escape(&p.started),
        );
    }
    let drain = n.and_then(|n| n.drain.as_ref());
    let _ = write!(
        out,
        r#"</ol>
<section id="d-drain" aria-labelledby="d-drain-h"{hide}><h4 id="d-drain-h">Drain blocked</h4>
<p class="blocked-for">{since}</p>
<h5>PodDisruptionBudgets</h5>
<ul class="budgets">
"#,
        hide = hidden(drain.is_none()),
        since = drain
            .filter(|d| !d.blocked_for.is_empty())
            .map(|d| format!("Blocked for {}.", escape(&d.blocked_for)))
            .unwrap_or_default(),
    );
    for b in drain.iter().flat_map(|d| &d.budgets) {
        let _ = writeln!(
            out,
            r#"<li data-pdb="{pdb}"><code>{pdb}</code>: <span class="budget">{budget}</span></li>"#,
            pdb = escape(&b.pdb),
            budget = escape(&b.budget),
        );
    }
    out.push_str(
        "</ul>
<h5>Pods that cannot be evicted</h5>
<ul class=\"pods\">\n",
    );
    for b in drain.iter().flat_map(|d| &d.pods) {
        let pdbs = if b.pdbs.is_empty() {
            String::new()
        } else {
            format!(" (PDB {})", escape(&b.pdbs.join(", ")))
        };
        let _ = writeln!(
            out,
            r#"<li data-pod="{pod}"><code>{pod}</code>{pdbs}</li>"#,
            pod = escape(&b.pod),
        );
    }
    let more = drain.map(|d| d.more_pods).unwrap_or(0);
    let _ = write!(
        out,
        r#"</ul>
<p class="more"{hide}>and {more} more pods</p>
</section>
"#,
        hide = hidden(more == 0),
    );
    let findings = n.map(|n| n.findings.as_slice()).unwrap_or_default();
    let _ = writeln!(
        out,
        r#"<section id="d-doctor" aria-labelledby="d-doctor-h"{}><h4 id="d-doctor-h">mco doctor</h4>"#,
        hidden(findings.is_empty())
    );
    for f in findings {
        let _ = write!(
            out,
            r#"<article class="finding"><h5>{title}</h5><p class="cause">{cause}</p><ul class="fixes">"#,
            title = escape(&f.title),
            cause = escape(&f.cause),
        );
        for x in &f.fixes {
            let _ = write!(
                out,
                "<li>{}: <code>{}</code></li>",
                escape(&x.how),
                escape(&x.command)
            );
        }
        out.push_str("</ul></article>\n");
    }
    out.push_str("</section>\n</section>\n");
    out
}

/// The whole page, with the detail of node `selected` if it exists.
pub fn page(f: &Fleet, selected: Option<&str>) -> String {
    let mut out = String::with_capacity(4096 + f.nodes.len() * 400);
    out.push_str(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mco dashboard</title>
<link rel="stylesheet" href="/assets/style.css">
</head>
<body>
<header><h1>mco dashboard</h1><p id="live" role="status" aria-live="polite">connecting…</p></header>
<main>
<section aria-labelledby="pools-h"><h2 id="pools-h">Pools</h2><div id="pools">
"#,
    );
    if f.pools.is_empty() {
        out.push_str("<p>No MachineConfigPools.</p>\n");
    }
    for p in &f.pools {
        pool(&mut out, p);
    }
    out.push_str(
        r#"</div></section>
<section aria-labelledby="nodes-h"><h2 id="nodes-h">Nodes</h2>
<ul class="legend" aria-label="Legend">
"#,
    );
    for k in Kind::ALL {
        let _ = writeln!(
            out,
            r#"<li><span class="swatch k-{}" aria-hidden="true"></span>{}</li>"#,
            k.as_str(),
            k.label()
        );
    }
    out.push_str(
        r#"</ul>
<p class="hint">Tab or arrow keys move between nodes; Enter shows a node's detail.</p>
<div id="grid" role="group" aria-label="Nodes by phase">
"#,
    );
    for n in f.nodes.values() {
        out.push_str(&node_cell(n, selected == Some(n.name.as_str())));
        out.push('\n');
    }
    out.push_str("</div>\n");
    out.push_str(&detail(selected.and_then(|s| f.nodes.get(s)).map(|n| &**n)));
    out.push_str(
        r#"</section>
<section class="below" aria-labelledby="table-h"><h2 id="table-h">MachineConfigNodes</h2>
<table id="mcn"><caption>kubectl get machineconfignodes</caption><thead><tr>"#,
    );
    for h in &f.table.header {
        let _ = write!(out, r#"<th scope="col">{}</th>"#, escape(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for (name, cells) in &f.table.rows {
        let _ = write!(out, r#"<tr data-row="{}">"#, escape(name));
        for c in cells.iter() {
            let _ = write!(out, "<td>{}</td>", escape(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str(
        r#"</tbody></table></section>
<section class="below" aria-labelledby="events-h"><h2 id="events-h">Recent Events</h2>
<table id="events"><thead><tr><th scope="col">Time</th><th scope="col">Type</th><th scope="col">Object</th><th scope="col">Reason</th><th scope="col">Message</th></tr></thead><tbody>
"#,
    );
    for e in &f.events {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&e.time),
            escape(&e.type_),
            escape(&e.object),
            escape(&e.reason),
            escape(&e.message)
        );
    }
    out.push_str(
        r#"</tbody></table></section>
</main>
<script src="/assets/app.js"></script>
</body>
</html>
"#,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{
        BlockerView, BudgetView, DrainView, EventView, FindingView, FixView, GateView, HaltView,
        McnTable, PhaseStep,
    };

    fn node(name: &str, message: &str) -> NodeView {
        NodeView {
            name: name.into(),
            pool: "worker".into(),
            kind: Kind::Degraded,
            phase: "waiting".into(),
            current: "rendered-worker-a".into(),
            desired: "rendered-worker-b".into(),
            message: message.into(),
            timeline: Vec::new(),
            drain: None,
            findings: Vec::new(),
        }
    }

    #[test]
    fn escape_covers_text_and_attributes() {
        assert_eq!(
            escape(r#"<script>"a"&'b'</script>"#),
            "&lt;script&gt;&quot;a&quot;&amp;&#39;b&#39;&lt;/script&gt;"
        );
        assert_eq!(escape("plain-name_0"), "plain-name_0");
    }

    #[test]
    fn hostile_names_and_messages_are_escaped_everywhere() {
        let evil = "<script>alert(1)</script>";
        let mut f = Fleet::default();
        f.nodes
            .insert(evil.into(), node(evil, &format!("\"{evil}")).into());
        f.pools.push(PoolView {
            name: evil.into(),
            updated: 1,
            total: 2,
            target: evil.into(),
            paused: true,
            degraded: false,
            max_unavailable: 1,
            eta: evil.into(),
            halted: false,
            rollout: None,
            pinning: Some([1, 2]),
            waiting_image: Some(evil.into()),
        });
        f.table = McnTable {
            header: vec!["NAME".into()],
            rows: [(
                evil.to_string(),
                std::sync::Arc::new(vec![evil.to_string()]),
            )]
            .into(),
        };
        f.events.push(EventView {
            key: "k".into(),
            time: "t".into(),
            type_: "Warning".into(),
            object: evil.into(),
            reason: evil.into(),
            message: evil.into(),
        });
        let html = page(&f, None);
        assert!(
            html.contains(r#"<dd class="flags">paused, pinning images 1/2, waiting for its image (&lt;script&gt;alert(1)&lt;/script&gt;)</dd>"#),
            "{html}"
        );
        // The only script element is the page's own.
        assert_eq!(html.matches("<script").count(), 1, "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(
            !html.contains("=\"\"&lt;"),
            "a quote in a message closed an attribute"
        );
    }

    fn governed(name: &str, evil: &str) -> PoolView {
        PoolView {
            name: name.into(),
            updated: 1,
            total: 3,
            target: "rendered-worker-b".into(),
            paused: false,
            degraded: false,
            max_unavailable: 1,
            eta: "ETA unknown".into(),
            halted: true,
            pinning: None,
            waiting_image: None,
            rollout: Some(RolloutView {
                policy: evil.into(),
                phase: "Halted".into(),
                target: "rendered-worker-b".into(),
                canary_nodes: vec![evil.into()],
                more_canary: 2,
                halt: Some(HaltView {
                    gate: "nodeChecks".into(),
                    node: evil.into(),
                    message: format!("check 10-fail failed: \"{evil}"),
                    time: "2026-01-01T00:00:00Z".into(),
                }),
                gates: vec![
                    GateView {
                        name: "nodeReady".into(),
                        detail: "within 10m00s".into(),
                    },
                    GateView {
                        name: "http".into(),
                        detail: format!("GET http://x/{evil} expects 200 within 10s"),
                    },
                ],
                window: Some("next window 2026-01-02 02:00Z".into()),
                next_window: Some(evil.into()),
                pinned: Some(evil.into()),
            }),
        }
    }

    #[test]
    fn a_governed_pool_shows_its_rollout_and_escapes_it() {
        let evil = "<script>alert(1)</script>";
        let f = Fleet {
            pools: vec![governed("worker", evil)],
            ..Fleet::default()
        };
        let html = page(&f, None);
        assert_eq!(html.matches("<script").count(), 1, "{html}");
        let sec = &html[html
            .find(r#"<section class="pool" data-pool="worker""#)
            .unwrap()..];
        let sec = &sec[..sec.find("</section>").unwrap()];
        let e = "&lt;script&gt;alert(1)&lt;/script&gt;";
        for needle in [
            r#"<dd class="flags">halted</dd>"#,
            r#"<div class="rollout" data-phase="Halted">"#,
            &format!(r#"RolloutPolicy <code>{e}</code>: <span class="phase">Halted</span>"#),
            &format!(
                r#"<p class="halt" role="alert" data-gate="nodeChecks" data-node="{e}">Halted by gate nodeChecks on node {e} at 2026-01-01T00:00:00Z: <span class="msg">check 10-fail failed: &quot;{e}</span></p>"#
            ),
            &format!(r#"<p class="pinned">{e}</p>"#),
            &format!(r#"<p class="canary">Canary: {e} and 2 more</p>"#),
            r#"<ul class="gates" aria-label="Gates">"#,
            r#"<li data-gate="nodeReady"><code>nodeReady</code> within 10m00s</li>"#,
            &format!(
                r#"<li data-gate="http"><code>http</code> GET http://x/{e} expects 200 within 10s</li>"#
            ),
            r#"<p class="window">next window 2026-01-02 02:00Z</p>"#,
            &format!(r#"<p class="next-window">Waiting for the window at {e}</p>"#),
        ] {
            assert!(sec.contains(needle), "{needle} not in {sec}");
        }
    }

    #[test]
    fn an_ungoverned_pool_has_no_rollout_and_a_manual_halt_names_no_node() {
        let mut p = governed("worker", "x");
        let r = p.rollout.as_mut().unwrap();
        r.halt = Some(HaltView {
            gate: "manual".into(),
            node: String::new(),
            message: "halted by mco rollout halt".into(),
            time: String::new(),
        });
        r.window = None;
        let html = page(
            &Fleet {
                pools: vec![p],
                ..Fleet::default()
            },
            None,
        );
        assert!(
            html.contains(r#"data-node="">Halted by gate manual: <span class="msg">halted by"#),
            "{html}"
        );
        assert!(!html.contains(r#"class="window""#));
        let mut plain = governed("worker", "x");
        plain.rollout = None;
        plain.halted = false;
        let html = page(
            &Fleet {
                pools: vec![plain],
                ..Fleet::default()
            },
            None,
        );
        assert!(!html.contains("class=\"rollout\""), "{html}");
        assert!(html.contains(r#"<dd class="flags">none</dd>"#));
    }

    #[test]
    fn cells_are_labelled_and_focusable() {
        let cell = node_cell(&node("w1", "m"), false);
        assert!(cell.starts_with("<button"), "{cell}");
        assert!(
            cell.contains(r#"aria-label="w1: Degraded, waiting""#),
            "{cell}"
        );
        assert!(
            cell.contains(">Degraded<"),
            "the phase is text, not colour alone"
        );
    }

    #[test]
    fn page_has_legend_headings_and_local_assets_only() {
        let html = page(&Fleet::default(), None);
        for k in Kind::ALL {
            assert!(html.contains(k.label()), "legend lacks {k:?}");
        }
        for h in [
            "<h1>",
            "id=\"pools-h\"",
            "id=\"nodes-h\"",
            "id=\"events-h\"",
        ] {
            assert!(html.contains(h), "{h}");
        }
        assert!(!html.contains("http://") && !html.contains("https://"));
    }

    fn troubled(name: &str, evil: &str) -> NodeView {
        let mut n = node(name, evil);
        n.timeline = vec![PhaseStep {
            phase: evil.into(),
            status: "Unknown".into(),
            state: "in progress".into(),
            started: "00:01:00Z".into(),
            duration: "4m00s".into(),
        }];
        n.drain = Some(DrainView {
            blocked_for: "4m00s".into(),
            pods: vec![BlockerView {
                pod: format!("ns/{evil}"),
                pdbs: vec![format!("ns/{evil}")],
            }],
            more_pods: 0,
            budgets: vec![BudgetView {
                pdb: format!("ns/{evil}"),
                budget: "disruptionsAllowed 0, healthy 1/1, minAvailable 1".into(),
            }],
        });
        n.findings = vec![FindingView {
            title: evil.into(),
            cause: format!("\"{evil}"),
            fixes: vec![FixView {
                how: evil.into(),
                command: format!("kubectl get pdb -n ns '{evil}'"),
            }],
        }];
        n
    }

    #[test]
    fn the_detail_escapes_cluster_text_in_its_new_sections() {
        let evil = "<script>alert(1)</script>";
        let mut f = Fleet::default();
        f.nodes.insert("w1".into(), troubled("w1", evil).into());
        f.nodes.insert("w2".into(), node("w2", "m").into());
        let html = page(&f, Some("w1"));
        assert_eq!(html.matches("<script").count(), 1, "{html}");
        let d = &html[html.find(r#"<section id="detail""#).unwrap()..];
        for needle in [
            r#"<section id="detail" aria-labelledby="d-name""#,
            r#"<dd id="d-name">w1</dd>"#,
            r#"<li data-phase="&lt;script&gt;alert(1)&lt;/script&gt;">"#,
            "in progress (Unknown)",
            r#"<span class="du">4m00s</span>"#,
            r#"<section id="d-drain" aria-labelledby="d-drain-h"><h4"#,
            "<code>ns/&lt;script&gt;alert(1)&lt;/script&gt;</code>",
            "disruptionsAllowed 0, healthy 1/1, minAvailable 1",
            "Blocked for 4m00s.",
            r#"<section id="d-doctor" aria-labelledby="d-doctor-h"><h4"#,
            r#"<article class="finding"><h5>&lt;script&gt;"#,
            r#"<p class="cause">&quot;&lt;script&gt;"#,
            "<code>kubectl get pdb -n ns &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;</code>",
        ] {
            assert!(d.contains(needle), "{needle} not in {d}");
        }
        assert!(
            html.contains(r#"id="node-w1" aria-pressed="true""#),
            "the selected cell is pressed"
        );
        assert_eq!(html.matches("aria-pressed").count(), 1);
    }

    #[test]
    fn without_a_selection_the_drain_and_doctor_are_hidden() {
        let mut f = Fleet::default();
        f.nodes.insert("w1".into(), troubled("w1", "x").into());
        for html in [
            page(&f, None),
            page(&f, Some("nope")),
            detail(Some(&node("w2", "m"))),
        ] {
            assert!(
                html.contains(r#"<section id="d-drain" aria-labelledby="d-drain-h" hidden>"#),
                "{html}"
            );
            assert!(
                html.contains(r#"<section id="d-doctor" aria-labelledby="d-doctor-h" hidden>"#),
                "{html}"
            );
            assert!(html.contains(r#"<ol id="d-timeline""#));
            assert!(!html.contains("<li data-phase"));
        }
        assert!(page(&f, None).contains(r#"<dd id="d-name">select a node</dd>"#));
    }
}
