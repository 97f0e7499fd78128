//! The page, rendered on the server from a [`Fleet`]; `app.js` keeps it current from `/events`.
//! Every text from the cluster goes through [`escape`].

use std::fmt::Write as _;

use crate::view::{Fleet, Kind, NodeView, PoolView};

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
        flags.push("paused");
    }
    if p.degraded {
        flags.push("degraded");
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
</section>
"#,
        updated = p.updated,
        total = p.total,
        pct = percent(p),
        target = escape(&p.target),
        maxu = p.max_unavailable,
        eta = escape(&p.eta),
        flags = if flags.is_empty() {
            "none".to_string()
        } else {
            flags.join(", ")
        },
    );
}

/// One node's cell: focusable, labelled with its name and phase (not colour alone).
pub fn node_cell(n: &NodeView) -> String {
    let name = escape(&n.name);
    format!(
        r#"<button type="button" class="node k-{kind}" id="node-{name}" data-node="{name}" data-pool="{pool}" data-phase="{phase}" data-current="{current}" data-desired="{desired}" data-message="{message}" aria-label="{name}: {label}, {phase}"><span class="nname">{name}</span><span class="nphase">{klabel}</span></button>"#,
        kind = n.kind.as_str(),
        label = n.kind.label(),
        klabel = n.kind.label(),
        pool = escape(&n.pool),
        phase = escape(&n.phase),
        current = escape(&n.current),
        desired = escape(&n.desired),
        message = escape(&n.message),
    )
}

/// The whole page.
pub fn page(f: &Fleet) -> String {
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
        out.push_str(&node_cell(n));
        out.push('\n');
    }
    out.push_str(
        r#"</div>
<section id="detail" aria-labelledby="detail-h" tabindex="-1"><h3 id="detail-h">Node detail</h3>
<dl>
<dt>Node</dt><dd id="d-name">select a node</dd>
<dt>Pool</dt><dd id="d-pool"></dd>
<dt>Phase</dt><dd id="d-phase"></dd>
<dt>Current config</dt><dd id="d-current"></dd>
<dt>Desired config</dt><dd id="d-desired"></dd>
<dt>Message</dt><dd id="d-message"></dd>
</dl></section>
</section>
<section aria-labelledby="table-h"><h2 id="table-h">MachineConfigNodes</h2>
<table id="mcn"><caption>kubectl get machineconfignodes</caption><thead><tr>"#,
    );
    for h in &f.table.header {
        let _ = write!(out, r#"<th scope="col">{}</th>"#, escape(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for (name, cells) in &f.table.rows {
        let _ = write!(out, r#"<tr data-row="{}">"#, escape(name));
        for c in cells {
            let _ = write!(out, "<td>{}</td>", escape(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str(
        r#"</tbody></table></section>
<section aria-labelledby="events-h"><h2 id="events-h">Recent Events</h2>
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
    use crate::view::{EventView, McnTable};

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
            .insert(evil.into(), node(evil, &format!("\"{evil}")));
        f.pools.push(PoolView {
            name: evil.into(),
            updated: 1,
            total: 2,
            target: evil.into(),
            paused: true,
            degraded: false,
            max_unavailable: 1,
            eta: evil.into(),
        });
        f.table = McnTable {
            header: vec!["NAME".into()],
            rows: [(evil.to_string(), vec![evil.to_string()])].into(),
        };
        f.events.push(EventView {
            key: "k".into(),
            time: "t".into(),
            type_: "Warning".into(),
            object: evil.into(),
            reason: evil.into(),
            message: evil.into(),
        });
        let html = page(&f);
        // The only script element is the page's own.
        assert_eq!(html.matches("<script").count(), 1, "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(
            !html.contains("=\"\"&lt;"),
            "a quote in a message closed an attribute"
        );
    }

    #[test]
    fn cells_are_labelled_and_focusable() {
        let cell = node_cell(&node("w1", "m"));
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
        let html = page(&Fleet::default());
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
}
