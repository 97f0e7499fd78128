// mco dashboard: applies the deltas of /events to the server-rendered page in place, at most
// once per animation frame. Text from the cluster only ever goes through textContent and
// attributes, never innerHTML.
"use strict";
(function () {
  const LABELS = { updated: "Updated", updating: "Updating", degraded: "Degraded", unknown: "Not reported" };
  const grid = document.getElementById("grid");
  const live = document.getElementById("live");
  let queue = [];
  let scheduled = false;
  // The selected node's name, possibly before its cell exists (from the URL fragment).
  let selected = null;
  const stats = (window.mcoStats = { batches: 0, max: 0, times: [] });
  // The last view of every node, by name, for the detail panel.
  const nodes = new Map();
  // Grid cells and table rows by node name: a thousand nodes make a selector per update too slow.
  const cells = new Map();
  for (const b of grid.children) cells.set(b.dataset.node, b);
  const rowBody = document.querySelector("#mcn tbody");
  const rowsByName = new Map();
  for (const tr of rowBody.children) rowsByName.set(tr.dataset.row, tr);

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Sets what differs only: an unchanged write still costs the browser a style check.
  function attr(e, k, v) {
    if (e.getAttribute(k) !== v) e.setAttribute(k, v);
  }

  function text(e, v) {
    if (e.textContent !== v) e.textContent = v;
  }

  function setNode(b, n) {
    attr(b, "class", "node k-" + n.kind);
    attr(b, "data-node", n.name);
    attr(b, "data-pool", n.pool);
    attr(b, "data-phase", n.phase);
    attr(b, "data-current", n.current);
    attr(b, "data-desired", n.desired);
    attr(b, "data-message", n.message);
    attr(b, "aria-label", n.name + ": " + LABELS[n.kind] + ", " + n.phase);
    text(b.children[0], n.name);
    text(b.children[1], LABELS[n.kind]);
  }

  function cellOf(name) {
    return cells.get(name) || null;
  }

  // The first of `children` whose `key` sorts after `name`, to keep server order.
  function after(children, key, name) {
    return Array.from(children).find((c) => c.dataset[key] > name) || null;
  }

  function upsertNode(n) {
    nodes.set(n.name, n);
    let b = cellOf(n.name);
    if (!b) {
      b = el("button", { type: "button", class: "node" });
      b.append(el("span", { class: "nname" }), el("span", { class: "nphase" }));
      // Keep the grid in name order, as the server renders it.
      grid.insertBefore(b, after(grid.children, "node", n.name));
      cells.set(n.name, b);
    }
    setNode(b, n);
    if (selected === n.name) showDetail(n.name);
  }

  function byId(id) {
    return document.getElementById(id);
  }

  // The detail of node `name`: from the last view the server sent, else from its cell.
  function showDetail(name) {
    selected = name;
    const b = cellOf(name);
    for (const c of grid.querySelectorAll('[aria-pressed="true"]')) if (c !== b) c.removeAttribute("aria-pressed");
    if (!b) return;
    b.setAttribute("aria-pressed", "true");
    const n = nodes.get(name);
    byId("d-name").textContent = name;
    for (const k of ["pool", "phase", "current", "desired", "message"]) {
      byId("d-" + k).textContent = (n ? n[k] : b.dataset[k]) || "";
    }
    if (n) renderDetail(n);
  }

  function renderDetail(n) {
    byId("d-timeline").replaceChildren(...(n.timeline || []).map((p) => {
      const li = el("li", { "data-phase": p.phase });
      li.append(el("span", { class: "ph" }, p.phase), " ",
        el("span", { class: "st" }, p.state + " (" + p.status + ")"), " ",
        el("span", { class: "du" }, p.duration), " ",
        el("span", { class: "at" }, "since " + p.started));
      return li;
    }));

    const d = n.drain || null;
    const drain = byId("d-drain");
    drain.hidden = !d;
    drain.querySelector(".blocked-for").textContent = d && d.blocked_for ? "Blocked for " + d.blocked_for + "." : "";
    drain.querySelector(".budgets").replaceChildren(...(d ? d.budgets : []).map((b) => {
      const li = el("li", { "data-pdb": b.pdb });
      li.append(el("code", {}, b.pdb), ": ", el("span", { class: "budget" }, b.budget));
      return li;
    }));
    drain.querySelector(".pods").replaceChildren(...(d ? d.pods : []).map((p) => {
      const li = el("li", { "data-pod": p.pod });
      li.append(el("code", {}, p.pod));
      if (p.pdbs.length) li.append(" (PDB " + p.pdbs.join(", ") + ")");
      return li;
    }));
    const more = drain.querySelector(".more");
    more.hidden = !(d && d.more_pods);
    more.textContent = "and " + (d ? d.more_pods : 0) + " more pods";

    const findings = n.findings || [];
    const doctor = byId("d-doctor");
    doctor.hidden = findings.length === 0;
    for (const a of Array.from(doctor.querySelectorAll("article.finding"))) a.remove();
    for (const f of findings) {
      const a = el("article", { class: "finding" });
      a.append(el("h5", {}, f.title), el("p", { class: "cause" }, f.cause));
      const ul = el("ul", { class: "fixes" });
      for (const x of f.fixes) {
        const li = el("li", {}, x.how + ": ");
        li.append(el("code", {}, x.command));
        ul.append(li);
      }
      a.append(ul);
      doctor.append(a);
    }
  }

  // `#node=NAME` opens that node's detail, so it can be linked to.
  function fromFragment() {
    const m = /^#node=(.+)$/.exec(location.hash);
    if (!m) return;
    let name;
    try { name = decodeURIComponent(m[1]); } catch (_) { return; }
    showDetail(name);
  }

  // A governed pool's rollout, as html.rs renders it.
  function rollout(r) {
    const div = el("div", { class: "rollout", "data-phase": r.phase });
    const head = el("p", { class: "policy" }, "RolloutPolicy ");
    head.append(el("code", {}, r.policy), ": ", el("span", { class: "phase" }, r.phase));
    div.append(head);
    const h = r.halt;
    if (h) {
      let by = "";
      if (h.gate && h.node) by = " by gate " + h.gate + " on node " + h.node;
      else if (h.gate) by = " by gate " + h.gate;
      const p = el("p", { class: "halt", role: "alert", "data-gate": h.gate, "data-node": h.node },
        "Halted" + by + (h.time ? " at " + h.time : "") + ": ");
      p.append(el("span", { class: "msg" }, h.message));
      div.append(p);
    }
    if (r.pinned) div.append(el("p", { class: "pinned" }, r.pinned));
    if (r.canary_nodes.length) {
      div.append(el("p", { class: "canary" }, "Canary: " + r.canary_nodes.join(", ") + (r.more_canary ? " and " + r.more_canary + " more" : "")));
    }
    const ul = el("ul", { class: "gates", "aria-label": "Gates" });
    for (const g of r.gates) {
      const li = el("li", { "data-gate": g.name });
      li.append(el("code", {}, g.name), " " + g.detail);
      ul.append(li);
    }
    div.append(ul);
    if (r.window) div.append(el("p", { class: "window" }, r.window));
    if (r.next_window) div.append(el("p", { class: "next-window" }, "Waiting for the window at " + r.next_window));
    return div;
  }

  function setPools(pools) {
    const box = document.getElementById("pools");
    box.replaceChildren();
    if (pools.length === 0) box.append(el("p", {}, "No MachineConfigPools."));
    for (const p of pools) {
      const id = "pool-" + p.name;
      const s = el("section", { class: "pool", "data-pool": p.name, "aria-labelledby": id });
      s.append(el("h3", { id: id }, p.name));
      s.append(el("label", { for: "bar-" + p.name }, p.updated + "/" + p.total + " updated"));
      const bar = el("progress", { id: "bar-" + p.name, max: String(p.total), value: String(p.updated) });
      s.append(bar);
      const dl = el("dl");
      const flags = [p.paused ? "paused" : "", p.degraded ? "degraded" : "", p.halted ? "halted" : "",
        p.pinning ? `pinning images ${p.pinning[0]}/${p.pinning[1]}` : "",
        p.waiting_image ? `waiting for its image (${p.waiting_image})` : ""].filter(Boolean).join(", ") || "none";
      for (const [k, v, c] of [["Target", p.target, "target"], ["maxUnavailable", String(p.max_unavailable), "maxu"], ["ETA", p.eta, "eta"], ["Flags", flags, "flags"]]) {
        dl.append(el("dt", {}, k), el("dd", { class: c }, v));
      }
      s.append(dl);
      if (p.rollout) s.append(rollout(p.rollout));
      box.append(s);
    }
  }

  function removeRow(name) {
    const tr = rowsByName.get(name);
    if (tr) tr.remove();
    rowsByName.delete(name);
  }

  function setRows(rows, reset) {
    const keep = new Set(rows.map((r) => r[0]));
    if (reset) for (const name of Array.from(rowsByName.keys())) if (!keep.has(name)) removeRow(name);
    for (const r of rows) {
      let tr = rowsByName.get(r[0]);
      if (!tr) {
        tr = el("tr", { "data-row": r[0] });
        rowBody.insertBefore(tr, after(rowBody.children, "row", r[0]));
        rowsByName.set(r[0], tr);
      }
      // Cells are kept and only their changed text is set.
      while (tr.children.length > r.length) tr.lastChild.remove();
      r.forEach((c, i) => {
        if (i < tr.children.length) text(tr.children[i], c);
        else tr.append(el("td", {}, c));
      });
    }
  }

  function setEvents(events) {
    const body = document.querySelector("#events tbody");
    body.replaceChildren(...events.map((e) => {
      const tr = el("tr");
      for (const v of [e.time, e.type_, e.object, e.reason, e.message]) tr.append(el("td", {}, v));
      return tr;
    }));
  }

  function apply(d) {
    if (d.reset) {
      const keep = new Set(d.nodes.map((n) => n.name));
      for (const [name, b] of Array.from(cells)) {
        if (!keep.has(name)) {
          b.remove();
          cells.delete(name);
        }
      }
    }
    if (d.pools) setPools(d.pools);
    for (const n of d.nodes) upsertNode(n);
    for (const name of d.removed) {
      const b = cellOf(name);
      if (b) b.remove();
      cells.delete(name);
      removeRow(name);
    }
    if (d.rows.length || d.reset) setRows(d.rows, d.reset);
    if (d.events) setEvents(d.events);
  }

  function flush() {
    scheduled = false;
    const batch = queue;
    queue = [];
    const t0 = performance.now();
    for (const d of batch) apply(d);
    // Reading a layout property forces style and layout now, so the time includes them.
    void grid.offsetHeight;
    const ms = performance.now() - t0;
    document.body.dataset.lastBatchMs = ms.toFixed(1);
    document.body.dataset.applied = String(Number(document.body.dataset.applied || 0) + batch.length);
    // For the benchmark: every batch's time (the first 100,000).
    stats.batches += 1;
    stats.max = Math.max(stats.max, ms);
    if (stats.times.length < 100000) stats.times.push(ms);
  }

  const es = new EventSource("/events");
  es.addEventListener("fleet", (m) => {
    queue.push(JSON.parse(m.data));
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(flush);
    }
  });
  es.onopen = () => { live.textContent = "live"; };
  es.onerror = () => { live.textContent = "reconnecting…"; };

  grid.addEventListener("click", (e) => {
    const b = e.target.closest(".node");
    if (!b) return;
    showDetail(b.dataset.node);
    history.replaceState(null, "", "#node=" + encodeURIComponent(b.dataset.node));
  });
  window.addEventListener("hashchange", fromFragment);
  fromFragment();
  // Arrow keys move between cells; Home/End jump to the ends. Buttons already take Enter/Space.
  grid.addEventListener("keydown", (e) => {
    const cells = Array.from(grid.children);
    const i = cells.indexOf(document.activeElement);
    if (i < 0) return;
    const next = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: cells.length - 1 }[e.key];
    if (next === undefined) return;
    e.preventDefault();
    const c = cells[Math.max(0, Math.min(cells.length - 1, next))];
    if (c) c.focus();
  });
})();
