// The cluster status page: polls /overview (JSON) every second and redraws. No framework.
"use strict";

const POLL_MS = 1000;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function fmt(v) { return v === null || v === undefined ? "–" : String(v); }

function drawNodes(data) {
  const tbody = document.querySelector("#nodes tbody");
  tbody.replaceChildren();
  const cluster = data.cluster || { nodes: {} };
  const replication = data.replication || {};
  const leaderId = cluster.leader;
  const nodes = Object.entries(cluster.nodes || {});
  if (!nodes.length) nodes.push([data.this.node, data.this]);
  // a follower the leader still counts but whose ZooKeeper session is gone (paused, cut off)
  for (const id of Object.keys(replication)) {
    if (!(id in (cluster.nodes || {}))) nodes.push([id, { role: "unreachable" }]);
  }
  for (const [id, n] of nodes) {
    // on the leader's page, a follower's lag is what the leader counts (its acknowledged entries)
    let lag = id in replication ? replication[id] : n.lag;
    if (id === leaderId) lag = 0;
    const role = n.role || "down";
    const link = n.http ? el("a", { href: "http://" + n.http + "/" }, n.http) : "–";
    tbody.append(el("tr", { "data-node": id },
      el("td", { class: "node" }, id + (id === data.this.node ? " (this)" : "")),
      el("td", { class: "role role-" + role }, role),
      el("td", {}, fmt(n.epoch)),
      el("td", {}, fmt(n.last_index)),
      el("td", {}, fmt(n.commit)),
      el("td", {}, fmt(n.applied)),
      el("td", { class: "lag" + (lag > 1000 ? " lag-high" : "") }, fmt(lag)),
      el("td", {}, link)));
  }
}

function drawStreams(data) {
  const box = document.getElementById("streams");
  box.replaceChildren();
  document.getElementById("streams-source").textContent =
    "(state applied on " + data.this.node + " up to entry " + data.this.applied + ")";
  if (!data.streams.length) box.append(el("p", { class: "muted" }, "no streams yet"));
  for (const s of data.streams) {
    const parts = el("table", { class: "partitions" },
      el("thead", {}, el("tr", {}, el("th", {}, "partition"), el("th", {}, "head transaction ID"))));
    const pb = el("tbody");
    s.heads.forEach((h, p) => pb.append(el("tr", {}, el("td", {}, p), el("td", {}, h))));
    parts.append(pb);
    const cons = el("table", { class: "consumers" },
      el("thead", {}, el("tr", {}, el("th", {}, "consumer"), el("th", {}, "partition"), el("th", {}, "offset"),
        el("th", { title: "checkpointed transactions after the offset (counted up to a cap)" }, "lag (txns)"),
        el("th", { title: "time between the offset and the partition's head" }, "lag (s)"))));
    const cb = el("tbody");
    for (const c of s.consumers) {
      cb.append(el("tr", { "data-consumer": c.consumer },
        el("td", {}, c.consumer), el("td", {}, c.partition), el("td", {}, c.offset),
        el("td", { class: "consumer-lag" }, fmt(c.lag_txns)), el("td", {}, c.lag_seconds.toFixed(3))));
    }
    cons.append(cb);
    const title = s.name + " — " + s.partitions + " partition" + (s.partitions === 1 ? "" : "s") +
      ", ttl " + s.ttl + " s";
    box.append(el("div", { class: "stream", "data-stream": s.name }, el("h3", {}, title), parts,
      s.consumers.length ? cons : el("p", { class: "muted" }, "no consumer offsets")));
  }
  const t = document.getElementById("truncated");
  t.hidden = !data.truncated;
  document.getElementById("limits").textContent = Object.entries(data.limits || {})
    .map(([k, v]) => k + " " + v).join(", ");
}

function drawApps(data) {
  const box = document.getElementById("apps");
  box.replaceChildren();
  const apps = data.applications || [];
  document.getElementById("apps-truncated").hidden = !data.applications_truncated;
  if (!apps.length) box.append(el("p", { class: "muted" }, "no stream-processing application yet"));
  for (const a of apps) {
    const live = a.members.filter(m => m.live);
    const members = el("table", { class: "members" },
      el("thead", {}, el("tr", {}, el("th", {}, "member"), el("th", {}, "state"), el("th", {}, "tasks"),
        el("th", {}, "queries at"),
        el("th", { title: "until the member's lease expires (engine time)" }, "lease (s)"))));
    const mb = el("tbody");
    for (const m of a.members) {
      const left = (m.deadline - data.engine_time) / 1000;
      mb.append(el("tr", { "data-member": m.member_id },
        el("td", {}, m.member_id),
        el("td", { class: "member-state " + (m.live ? "live" : "gone") }, m.live ? "live" : "gone"),
        el("td", { class: "member-tasks" }, m.tasks.join(", ") || "–"),
        el("td", {}, m.host ? m.host + ":" + m.port : "–"),
        el("td", {}, m.live ? left.toFixed(1) : "–")));
    }
    members.append(mb);
    const lag = el("table", { class: "app-lag" },
      el("thead", {}, el("tr", {}, el("th", {}, "input stream"), el("th", {}, "partition"), el("th", {}, "offset"),
        el("th", { title: "checkpointed transactions after the offset (counted up to a cap)" }, "lag (txns)"),
        el("th", { title: "time between the offset and the partition's head" }, "lag (s)"))));
    const lb = el("tbody");
    for (const r of a.lag) {
      lb.append(el("tr", { "data-stream": r.stream, "data-partition": r.partition },
        el("td", {}, r.stream), el("td", {}, r.partition), el("td", {}, r.offset),
        el("td", { class: "input-lag" }, fmt(r.lag_txns)), el("td", {}, r.lag_seconds.toFixed(3))));
    }
    lag.append(lb);
    const title = a.application_id + " — " + live.length + " live member" + (live.length === 1 ? "" : "s") +
      (a.unassigned.length ? ", unassigned tasks " + a.unassigned.join(", ") : "") +
      (a.truncated ? " (truncated)" : "");
    box.append(el("div", { class: "app", "data-app": a.application_id }, el("h3", {}, title),
      a.members.length ? members : el("p", { class: "muted" }, "no members"),
      a.lag.length ? lag : el("p", { class: "muted" }, "no input offsets yet")));
  }
}

function draw(data) {
  const c = data.cluster;
  document.getElementById("cluster-path").textContent = c ? c.cluster : "";
  document.getElementById("epoch").textContent = c ? c.epoch : data.this.epoch;
  document.getElementById("leader").textContent = c && c.leader ? c.leader : "none";
  document.getElementById("this-node").textContent = data.this.node + " (" + data.this.role + ")";
  document.getElementById("updated").textContent = "updated " + new Date(data.time * 1000).toLocaleTimeString();
  const err = document.getElementById("error");
  err.hidden = !data.cluster_error;
  err.textContent = data.cluster_error ? "ZooKeeper: " + data.cluster_error : "";
  drawNodes(data);
  drawStreams(data);
  drawApps(data);
  document.body.dataset.loaded = "1";
}

async function poll() {
  try {
    const r = await fetch("/overview", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    draw(await r.json());
  } catch (e) {
    const err = document.getElementById("error");
    err.hidden = false;
    err.textContent = "this node does not answer: " + e.message;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
