// relay dashboard: live updates over Server-Sent Events (no polling), progressive enhancement only.
"use strict";
(function () {
  const base = document.querySelector('meta[name="relay-base"]').content;
  const csrf = document.querySelector('meta[name="csrf-token"]').content;

  function ago(ts) {
    const d = Math.max(0, Date.now() / 1000 - ts);
    if (d >= 86400) return Math.floor(d / 86400) + "d ago";
    if (d >= 3600) return Math.floor(d / 3600) + "h ago";
    if (d >= 60) return Math.floor(d / 60) + "m ago";
    return Math.floor(d) + "s ago";
  }
  function duration(s) {
    if (s === null || s === undefined) return "-";
    if (s >= 3600) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
    if (s >= 60) return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
    return s.toFixed(1) + "s";
  }
  function usd(v) { return v === null || v === undefined ? "-" : "$" + v.toFixed(4); }
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const c of children || []) node.append(c);
    return node;
  }

  async function cancelJob(form) {
    const body = new URLSearchParams(new FormData(form));
    const res = await fetch(form.action, {
      method: "POST", body: body, credentials: "same-origin",
      headers: { "Accept": "application/json", "X-CSRF-Token": csrf },
    });
    if (!res.ok) { alert("Cancel failed: " + (await res.text())); return null; }
    return res.json();
  }

  function wireCancel(form, after) {
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const btn = form.querySelector("button");
      btn.disabled = true; btn.textContent = "Cancelling…";
      const row = await cancelJob(form);
      if (row) after(row); else { btn.disabled = false; btn.textContent = "Cancel"; }
    });
  }

  // jobs page -------------------------------------------------------------------------------
  function jobsPage() {
    const table = document.getElementById("jobs");
    const tbody = table.querySelector("tbody");
    const state = document.getElementById("live-state");
    const statuses = table.dataset.statuses ? table.dataset.statuses.split(",") : [];
    const agent = table.dataset.agent, principal = table.dataset.principal, q = table.dataset.q.toLowerCase();
    const worker = table.dataset.worker;
    const firstPage = table.dataset.page === "1";

    function matches(r) {
      if (statuses.length && !statuses.includes(r.status)) return false;
      if (agent && r.agent !== agent) return false;
      if (principal && r.principal !== principal) return false;
      if (worker && r.worker !== worker) return false;
      if (q && ![r.id, r.title, r.cwd, r.where, r.model, r.via].some((v) => String(v || "").toLowerCase().includes(q))) return false;
      return true;
    }
    function render(r) {
      const tr = el("tr", { id: "job-" + r.id, "data-sig": r.sig, "data-status": r.status, "data-created": r.created_at });
      const link = el("a", { href: base + "/jobs/" + r.id }, [el("code", {}, [r.id])]);
      tr.append(
        el("td", {}, [el("span", { class: "badge s-" + r.status }, [r.status])]),
        el("td", {}, [link, el("div", { class: "title" }, [r.title])]),
        el("td", {}, [r.agent]),
        el("td", { class: "principal" }, [r.principal]),
        el("td", { class: "via" }, [r.via || "-"]),
        el("td", {}, [r.model || "-"]),
        el("td", { class: "cwd", title: r.cwd }, [r.where || "-"]),
        el("td", { "data-ts": r.created_at }, [ago(r.created_at)]),
        el("td", {}, [duration(r.duration_s)]),
        el("td", {}, [usd(r.cost_usd)]),
      );
      const action = el("td");
      if (!r.final) {
        const form = el("form", { method: "post", action: base + "/jobs/" + r.id + "/cancel", class: "cancel" }, [
          el("input", { type: "hidden", name: "csrf", value: csrf }),
          el("button", { type: "submit" }, ["Cancel"]),
        ]);
        wireCancel(form, apply);
        action.append(form);
      }
      tr.append(action);
      return tr;
    }
    function apply(r) {
      const existing = document.getElementById("job-" + r.id);
      if (existing && existing.dataset.sig === r.sig) return; // already shown in this state
      if (existing) {
        if (matches(r)) existing.replaceWith(render(r)); else existing.remove();
        return;
      }
      if (!firstPage || !matches(r)) return;
      const empty = document.getElementById("jobs-empty");
      if (empty) empty.remove();
      // newest first: insert before the first row created earlier
      const rows = Array.from(tbody.rows);
      const after = rows.find((row) => parseFloat(row.dataset.created) < r.created_at);
      tbody.insertBefore(render(r), after || null);
    }
    tbody.querySelectorAll("form.cancel").forEach((f) => wireCancel(f, apply));
    const es = new EventSource(base + "/events/jobs?since=" + encodeURIComponent(table.dataset.since));
    es.addEventListener("open", () => { state.textContent = "live"; state.className = "on"; });
    es.addEventListener("error", () => { state.textContent = "reconnecting…"; state.className = "off"; });
    es.addEventListener("job", (ev) => apply(JSON.parse(ev.data)));
    setInterval(() => {
      tbody.querySelectorAll("td[data-ts]").forEach((td) => { td.textContent = ago(parseFloat(td.dataset.ts)); });
    }, 1000);
  }

  // job page --------------------------------------------------------------------------------
  function jobPage() {
    const pre = document.getElementById("transcript");
    const id = pre.dataset.job;
    const badge = document.getElementById("job-status");
    const cancelForm = document.getElementById("cancel-form");
    function showStatus(r) {
      badge.textContent = r.status; badge.className = "badge s-" + r.status;
      document.getElementById("f-model").textContent = r.model || "-";
      document.getElementById("f-duration").textContent = duration(r.duration_s);
      document.getElementById("f-cost").textContent = usd(r.cost_usd);
      if (r.final && cancelForm) cancelForm.remove();
      const held = document.getElementById("f-worker");
      if (r.worker && !held.querySelector("a")) {
        held.replaceChildren(el("a", { href: base + "/jobs?worker=" + encodeURIComponent(r.worker) }, [r.worker]));
      }
    }
    if (cancelForm) wireCancel(cancelForm, showStatus);
    const earlier = document.getElementById("earlier");
    if (earlier) {
      earlier.addEventListener("click", async () => {
        const start = parseInt(earlier.dataset.start, 10);
        const from = Math.max(0, start - 65536);
        const res = await fetch(base + "/jobs/" + id + "/transcript?offset=" + from + "&limit=" + (start - from),
                                { headers: { "Accept": "application/json" } });
        const page = await res.json();
        pre.prepend(document.createTextNode(page.text));
        earlier.dataset.start = String(from);
        if (from === 0) earlier.remove();
      });
    }
    if (pre.dataset.final === "true" && !pre.textContent.length) return;
    const es = new EventSource(base + "/events/jobs/" + id + "?offset=" + pre.dataset.offset);
    es.addEventListener("transcript", (ev) => {
      const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(document.createTextNode(JSON.parse(ev.data).text));
      if (stick) pre.scrollTop = pre.scrollHeight;
    });
    es.addEventListener("status", (ev) => showStatus(JSON.parse(ev.data)));
    es.addEventListener("done", (ev) => {
      const d = JSON.parse(ev.data);
      document.getElementById("envelope").textContent = JSON.stringify(d.envelope, null, 2);
      document.getElementById("stderr").textContent = d.stderr;
      const files = document.getElementById("files");
      files.replaceChildren(...(d.envelope.files_changed.length
        ? d.envelope.files_changed.map((f) => el("li", {}, [el("code", {}, [f])]))
        : [el("li", { class: "empty" }, ["none"])]));
      es.close();
    });
  }

  // workers page -----------------------------------------------------------------------------
  function workersPage() {
    const table = document.getElementById("workers");
    const tbody = table.querySelector("tbody");
    const state = document.getElementById("live-state");
    const active = (s) => s === "running" || s === "stopping";

    // A heartbeat older than the worker's lease is stale: flagged as the seconds pass, without a new event.
    function refresh() {
      let running = 0, stale = 0;
      for (const tr of tbody.rows) {
        const beat = tr.querySelector("td.beat");
        const age = Date.now() / 1000 - parseFloat(beat.dataset.ts);
        const isStale = beat.dataset.active === "true" && age > parseFloat(beat.dataset.lease);
        beat.querySelector(".age").textContent = ago(parseFloat(beat.dataset.ts));
        beat.querySelector(".flag").hidden = !isStale;
        tr.classList.toggle("stale", isStale);
        if (isStale) stale += 1; else if (beat.dataset.active === "true") running += 1;
      }
      document.getElementById("n-running").textContent = String(running);
      const n = document.getElementById("n-stale");
      n.textContent = String(stale);
      n.className = stale ? "flag" : "";
    }
    function render(w) {
      const jobs = base + "/jobs?worker=" + encodeURIComponent(w.id);
      const tr = el("tr", { id: "worker-" + w.id, "data-sig": w.sig });
      const lease = String(Math.round(w.lease_s * 10) / 10);
      const flag = el("span", { class: "flag" }, ["stale: older than its " + lease + " s lease"]);
      tr.append(
        el("td", {}, [el("a", { href: jobs, class: "name" }, [w.name]), el("div", { class: "title" }, [el("code", {}, [w.id])])]),
        el("td", {}, [w.host + " · pid " + w.pid]),
        el("td", {}, [el("span", { class: "badge w-" + w.state }, [w.state])]),
        el("td", { class: "beat", "data-ts": w.heartbeat_at, "data-lease": w.lease_s, "data-active": String(active(w.state)) },
           [el("span", { class: "age" }, [ago(w.heartbeat_at)]), " ", flag]),
        el("td", {}, [String(w.slots)]),
        el("td", { class: "running" }, [String(w.running)]),
        el("td", { class: "ran" }, [el("a", { href: jobs }, [String(w.ran)])]),
        el("td", {}, [w.agents]),
        el("td", {}, [w.labels || "-"]),
      );
      return tr;
    }
    function apply(w) {
      const existing = document.getElementById("worker-" + w.id);
      if (existing && existing.dataset.sig === w.sig) return; // already shown in this state
      const empty = document.getElementById("workers-empty");
      if (empty) empty.remove();
      if (existing) existing.replaceWith(render(w)); else tbody.prepend(render(w));
      refresh();
    }
    const all = table.dataset.all ? "?all=1" : "";
    const es = new EventSource(base + "/events/workers" + all);
    es.addEventListener("open", () => { state.textContent = "live"; state.className = "on"; });
    es.addEventListener("error", () => { state.textContent = "reconnecting…"; state.className = "off"; });
    es.addEventListener("worker", (ev) => apply(JSON.parse(ev.data)));
    setInterval(refresh, 1000);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const view = document.body.dataset.view;
    if (view === "jobs") jobsPage();
    if (view === "job") jobPage();
    if (view === "workers") workersPage();
  });
})();
