// tstreams console: one page, no build step. Reads /api/ (see docs/CONSOLE.md); read-only.
"use strict";

const params = new URLSearchParams(location.search);
const token = params.get("token");
const main = document.getElementById("main");
let timer = null;
let asOf = Infinity;  // the oldest as_of_ms of the page's answers (reused within the read budget)

async function api(path) {
  const headers = token ? {Authorization: "Bearer " + token} : {};
  const r = await fetch("/api/" + path, {headers});
  const body = await r.json();
  if (!r.ok) throw new Error(body.error + ": " + body.message);
  if (body.as_of_ms) asOf = Math.min(asOf, body.as_of_ms);
  return body;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c === null || c === undefined ? "" : String(c)));
  return e;
}

function table(id, columns, rows, rowAttrs) {
  const head = el("tr", {}, ...columns.map(([, title]) => el("th", {}, title)));
  const body = el("tbody");
  for (const r of rows) {
    const tr = el("tr", rowAttrs ? rowAttrs(r) : {});
    for (const [key, , render] of columns) {
      const v = render ? render(r) : r[key];
      tr.append(el("td", {class: typeof v === "number" ? "num " + key : key}, v));
    }
    body.append(tr);
  }
  return el("table", {id}, el("thead", {}, head), body);
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  const s = ms / 1000;
  if (Math.abs(s) < 120) return s.toFixed(1) + " s";
  if (Math.abs(s) < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function link(href, text) { return el("a", {href}, text); }
const enc = encodeURIComponent;

// ------------------------------------------------------------------ pages
async function overview() {
  const o = await api("overview");
  const n = o.node;
  const rows = [
    ["path", n.path], ["durability", n.durability], ["streams", n.streams], ["transactions", n.transactions],
    ["commits", n.commits], ["fsyncs", n.fsyncs],
    ["commits_per_s", o.commits_per_s === null ? "(sampling)" : o.commits_per_s.toFixed(1)],
    ["fsyncs_per_s", o.fsyncs_per_s === null ? "(sampling)" : o.fsyncs_per_s.toFixed(1)],
    ["map_used", bytes(n.map_used_bytes) + " of " + bytes(n.map_size_bytes) + " (limit " + bytes(n.map_limit_bytes) + ")"],
    ["disk", bytes(n.disk_bytes)],
  ];
  return [...(o.cluster ? clusterTable(o.cluster) : []),
          el("h2", {}, o.cluster ? "This node (" + o.cluster.this.node + ")" : "Node"),
          table("node", [["name", ""], ["value", ""]], rows.map(([name, value]) => ({name, value})),
                r => ({"data-field": r.name}))];
}

// A cluster node's view of its cluster (as its status page at / shows it): ZooKeeper's record
// of every node, and on the leader each follower's lag as the leader counts it.
function clusterTable(c) {
  const zk = c.cluster || {nodes: {}};
  const replication = c.replication || {};
  const nodes = Object.entries(zk.nodes || {});
  if (!nodes.length) nodes.push([c.this.node, c.this]);
  for (const id of Object.keys(replication)) if (!(id in (zk.nodes || {}))) nodes.push([id, {role: "unreachable"}]);
  const rows = nodes.map(([id, n]) => ({
    node: id + (id === c.this.node ? " (this)" : ""), id, role: n.role || "down", epoch: n.epoch,
    last_index: n.last_index, commit: n.commit, applied: n.applied,
    lag: id === zk.leader ? 0 : (id in replication ? replication[id] : n.lag)}));
  return [el("h2", {}, "Cluster " + (zk.cluster || "")),
          el("p", {id: "cluster-summary"}, c.cluster ? "leader " + (zk.leader || "none") + ", epoch " + zk.epoch
                                                     : "ZooKeeper not readable: " + c.cluster_error),
          table("cluster", [["node", "node"], ["role", "role"], ["epoch", "epoch"], ["last_index", "log position"],
                            ["commit", "commit"], ["applied", "applied"], ["lag", "lag (entries)"]],
                rows, r => ({"data-node": r.id}))];
}

async function streams() {
  const s = await api("streams");
  return [el("h2", {}, "Streams"),
          table("streams", [["name", "stream", r => link("#/streams/" + enc(r.name), r.name)],
                            ["partitions", "partitions"], ["ttl", "TTL (s)"], ["consumers", "consumers"],
                            ["created_time", "created"], ["description", "description"]],
                s.streams, r => ({"data-stream": r.name})),
          s.truncated ? el("p", {}, "(more streams not listed)") : ""];
}

async function stream(name) {
  const [s, q] = await Promise.all([api("streams/" + enc(name)), api("queues?stream=" + enc(name))]);
  return [el("h2", {}, "Stream " + s.name), el("p", {}, s.partitions + " partitions, TTL " + s.ttl + " s. " + s.description),
          table("partitions", [
            ["partition", "partition", r => link("#/streams/" + enc(s.name) + "/partitions/" + r.partition, String(r.partition))],
            ["head", "head"], ["head_time", "head time"],
            ["transactions", "transactions", r => atLeast(r.counts_capped) + r.transactions],
            ["items", "items", r => atLeast(r.counts_capped) + r.items],
            ["bytes", "bytes", r => atLeast(r.bytes_capped) + r.bytes],
            ["open_count", "open", r => atLeast(r.counts_capped) + r.open_count],
            ["open", "oldest open (age)", r => r.open.length ? r.open[0].id + " (" + duration(r.open[0].age_ms) + ")" : ""]],
            s.rows, r => ({"data-partition": r.partition})),
          s.rows.some(r => r.counts_capped || r.bytes_capped)
            ? el("p", {id: "read-cap"}, "≥: the console reads the newest " + s.read_cap + " records of a partition; tstreams streams describe counts all")
            : "",
          el("h3", {}, "Work queue groups"), queueTable(q), queueForm(s.name)];
}

// The work queue groups of an /api/queues answer, each linked to its page.
function queueTable(q) {
  if (!q.groups.length) return el("p", {id: "no-queues"}, "no work queue group");
  return el("div", {}, table("queues", [
    ["stream", "stream"],
    ["group", "group", r => link("#/queues/" + enc(r.stream) + "/" + enc(r.group), r.group)],
    ["pending", "pending"], ["in_flight", "in flight"], ["waiting", "waiting redelivery"],
    ["dead_lettered", "dead-lettered"], ["dead_letter", "dead letters to"],
    ["oldest_unsettled_age_ms", "oldest unsettled", r => duration(r.oldest_unsettled_age_ms)],
    ["next_redelivery", "next redelivery"]],
    q.groups, r => ({"data-queue": r.stream + "/" + r.group})), q.truncated ? el("p", {}, "(more not listed)") : "");
}

async function queues() {
  return [el("h2", {}, "Work queues"), queueTable(await api("queues"))];
}

async function schedulesPage(stream) {
  const s = await api("schedules" + (stream ? "?stream=" + enc(stream) : ""));
  const out = [el("h2", {}, "Pending schedules" + (stream ? " of " + stream : ""))];
  if (!s.schedules.length) out.push(el("p", {id: "no-schedules"}, "no pending schedule"));
  else out.push(table("schedules", [["id", "id"], ["stream", "stream", r => link("#/streams/" + enc(r.stream), r.stream)],
                                    ["partition", "partition"], ["items", "items"], ["due", "due"], ["in", "due in"],
                                    ["created", "created"]],
                      s.schedules, r => ({"data-schedule": r.id})));
  if (s.truncated) out.push(el("p", {}, "(only the first " + s.schedules.length + " due are listed)"));
  return out;
}

function queueForm(stream) {
  const group = el("input", {id: "queue-group", placeholder: "group"});
  const go = el("button", {id: "queue-show", onclick: () => { if (group.value) location.hash = "#/queues/" + enc(stream) + "/" + enc(group.value); }}, "show");
  return el("div", {class: "controls"}, "work queue group", group, go);
}

async function queuePage(stream, group) {
  const q = await api("streams/" + enc(stream) + "/queues/" + enc(group));
  const fields = ["pending", "in_flight", "waiting", "delivered", "redelivered", "acked", "nacked", "dead_lettered",
                  "terminated", "exhausted", "gone", "oldest_unsettled_age_ms", "next_redelivery", "ack_timeout_ms",
                  "max_deliveries", "dead_letter", "backoff_ms", "max_in_flight"];
  return [el("h2", {}, "Work queue " + q.group + " on " + q.stream),
          table("queue", [["name", ""], ["value", ""]], fields.filter(f => f in q).map(f => ({name: f, value: q[f]})),
                r => ({"data-field": r.name})),
          table("pending", [["partition", "partition"], ["pending", "pending items"]],
                Object.entries(q.pending_by_partition).map(([partition, pending]) => ({partition, pending})),
                r => ({"data-partition": r.partition}))];
}

const FORMATS = ["raw", "json", "msgpack", "hex", "record"];

async function browser(name, partition) {
  const fmt = params.get("format") || sessionStorage.getItem("format") || "raw";
  const key = "pos:" + name + "/" + partition;
  const pos = sessionStorage.getItem(key) || "after=0";  // "after=ID" or "since_ms=MS"
  const setPos = p => { if (p === null) sessionStorage.removeItem(key); else sessionStorage.setItem(key, p); render(); };
  const page = await api("streams/" + enc(name) + "/partitions/" + partition + "/messages?limit=" + enc(params.get("limit") || "20") + "&format=" +
                         enc(fmt) + "&" + pos);
  const select = el("select", {id: "format"}, ...FORMATS.map(f => el("option", {value: f, selected: f === fmt}, f)));
  select.onchange = () => { sessionStorage.setItem("format", select.value); render(); };
  const since = el("input", {id: "since", type: "datetime-local", step: "1"});
  since.onchange = () => { if (since.value) setPos("since_ms=" + new Date(since.value).getTime()); };
  const first = el("button", {id: "first", onclick: () => setPos(null)}, "first page");
  const next = el("button", {id: "next", disabled: !page.more, onclick: () => setPos("after=" + page.next_after)}, "next page");
  const rows = page.transactions.map(t => ({id: t.id, time: t.time, items: t.items}));
  const shown = table("messages", [["id", "transaction"], ["time", "opened"],
    ["items", "items", r => el("pre", {}, r.items.map(i => "error" in i ? "! " + i.error : JSON.stringify(i.value)).join("\n"))]],
    rows, r => ({"data-id": String(r.id)}));
  return [el("h2", {}, "Stream " + name + ", partition " + partition),
          el("div", {class: "controls"}, "format", select, "from", since, first, next,
             el("span", {id: "page-info"}, pos.replace("=", " ") + (page.blocked_by_open ? " (next waits on an open transaction)" : ""))),
          shown];
}

async function consumers() {
  const c = await api("consumers");
  return [el("h2", {}, "Consumers"),
          table("consumers", [["stream", "stream"],
            ["consumer", "consumer", r => link("#/consumers/" + enc(r.stream) + "/" + enc(r.consumer), r.consumer)],
            ["partitions", "partitions stored"], ["oldest_offset_time", "oldest offset"], ["expired_unread", "expired unread"]],
            c.consumers, r => ({"data-consumer": r.stream + "/" + r.consumer}))];
}

function atLeast(capped) { return capped ? "≥ " : ""; }

function waits(r) {
  if (!r.waits_on) return r.blocked_by_open ? "open transaction" : "";
  const w = r.waits_on;
  return el("span", {class: "waits", "data-blocker": String(w.id),
                     title: w.producer == null ? "its producer is not known (opened before the engine recorded it)"
                                                : "opened by producer " + w.producer},
            "txn " + w.id + ", age " + duration(w.age_ms) + ", expires in " + duration(w.expires_in_ms) +
            ", producer " + (w.producer == null ? "unknown" : w.producer));
}

function chart(history) {
  const W = 640, H = 160, P = 30;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "chart"); svg.setAttribute("id", "lag-chart");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  const series = Object.entries(history.partitions);
  const points = series.flatMap(([, s]) => s);
  const text = (x, y, t) => { const e = document.createElementNS(ns, "text"); e.setAttribute("x", x); e.setAttribute("y", y); e.textContent = t; svg.append(e); };
  if (!points.length) { text(P, H / 2, "no samples yet (one every " + history.interval_s + " s)"); return svg; }
  const t0 = Math.min(...points.map(p => p[0])), t1 = Math.max(...points.map(p => p[0]), t0 + 1);
  const vmax = Math.max(1, ...points.map(p => p[1] || 0));
  const last = Math.max(...series.map(([, s]) => s[s.length - 1][1] || 0));
  svg.setAttribute("data-last-max", last);
  text(2, 12, (vmax >= history.count_cap ? "≥ " : "") + vmax + " txns"); text(2, H - 4, "0");
  const colors = ["#2471a3", "#cb4335", "#229954", "#b9770e", "#7d3c98", "#17a589"];
  series.forEach(([partition, s], i) => {
    const path = document.createElementNS(ns, "polyline");
    path.setAttribute("fill", "none"); path.setAttribute("stroke", colors[i % colors.length]);
    path.setAttribute("data-partition", partition);
    path.setAttribute("points", s.map(p => [P + (W - 2 * P) * (p[0] - t0) / (t1 - t0),
                                            H - P / 2 - (H - P) * (p[1] || 0) / vmax].join(",")).join(" "));
    svg.append(path);
  });
  text(W - 120, 12, series.length + " partition(s), last " + duration(t1 - t0));
  return svg;
}

async function consumer(stream, name) {
  const [c, h] = await Promise.all([api("streams/" + enc(stream) + "/consumers/" + enc(name)),
                                    api("streams/" + enc(stream) + "/consumers/" + enc(name) + "/lag")]);
  return [el("h2", {}, "Consumer " + c.consumer + " on " + c.stream),
          el("p", {id: "total"}, "lag: " + atLeast(c.lag_capped) + c.lag_transactions + " transactions, " +
             atLeast(c.lag_capped) + c.lag_items + " items" + (c.lag_capped ? " (counted up to " + c.lag_cap + " transactions a partition)" : "")),
          chart(h),
          table("consumer-rows", [["partition", "partition"], ["offset", "offset"], ["offset_time", "offset time"],
            ["head", "head"], ["lag_transactions", "lag txns", r => atLeast(r.lag_capped) + r.lag_transactions],
            ["lag_items", "lag items", r => atLeast(r.lag_capped) + r.lag_items],
            ["lag_ms", "lag time", r => duration(r.lag_ms)], ["waits_on", "waits on open transaction", waits],
            ["expired_unread", "expired unread"]],
            c.rows, r => ({"data-partition": r.partition}))];
}

// "reason: n, …" of a dropped-records count ("none" when empty)
function reasons(counts) {
  const e = Object.entries(counts || {});
  return e.length ? e.map(([r, n]) => r + ": " + n).join(", ") : "none";
}

// A member's interactive-query server: its members list and its metrics (docs/STREAMS.md)
function queryLinks(m) {
  if (!m.query_url || !m.live) return "";
  return el("span", {}, link(m.query_url + "/v1/members", m.query_url), " ", link(m.query_url + "/metrics", "metrics"));
}

async function apps() {
  const a = await api("apps");
  const out = [el("h2", {}, "Stream-processing applications")];
  if (!a.applications.length) out.push(el("p", {id: "no-apps"}, "no application has run against this engine"));
  for (const app of a.applications) {
    const box = el("section", {"data-app": app.application_id}, el("h3", {}, app.application_id));
    box.append(table("", [["member_id", "member"], ["live", "state", m => m.live ? "live" : "expired"],
                          ["tasks", "tasks", m => m.tasks.join(", ")],
                          ["query_url", "interactive queries", queryLinks],
                          ["dropped", "dropped records", m => m.dropped ? reasons(m.dropped) : (m.metrics_error || "")]],
                      app.members, m => ({"data-member": m.member_id})));
    box.append(el("p", {class: "dropped"}, "dropped records (live members): " + reasons(app.dropped)));
    if (app.unassigned.length) box.append(el("p", {}, "unassigned tasks: " + app.unassigned.join(", ")));
    box.append(table("", [["stream", "input stream"], ["partition", "partition"], ["offset", "offset"],
                          ["lag_txns", "lag txns"], ["lag_seconds", "lag (s)"]],
                      app.lag, r => ({"data-input": r.stream + "/" + r.partition})));
    out.push(box);
  }
  if (a.truncated) out.push(el("p", {}, "(more not listed)"));
  return out;
}

// ------------------------------------------------------------------ routing
function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "streams" && parts.length === 4) return {nav: "streams", page: () => browser(parts[1], parts[3]), refresh: false};
  if (parts[0] === "streams" && parts.length === 2) return {nav: "streams", page: () => stream(parts[1]), refresh: true};
  if (parts[0] === "streams") return {nav: "streams", page: streams, refresh: true};
  if (parts[0] === "consumers" && parts.length === 3) return {nav: "consumers", page: () => consumer(parts[1], parts[2]), refresh: true};
  if (parts[0] === "consumers") return {nav: "consumers", page: consumers, refresh: true};
  if (parts[0] === "apps") return {nav: "apps", page: apps, refresh: true};
  if (parts[0] === "queues" && parts.length === 3) return {nav: "queues", page: () => queuePage(parts[1], parts[2]), refresh: true};
  if (parts[0] === "queues") return {nav: "queues", page: queues, refresh: true};
  if (parts[0] === "schedules") return {nav: "schedules", page: () => schedulesPage(parts[1]), refresh: true};
  return {nav: "overview", page: overview, refresh: true};
}

async function render() {
  clearTimeout(timer);
  const r = route();
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.id === "nav-" + r.nav);
  const status = document.getElementById("status");
  try {
    asOf = Infinity;
    const content = await r.page();
    main.replaceChildren(...content.filter(c => c !== ""));
    main.dataset.page = location.hash || "#/overview";
    const age = Date.now() - asOf;
    status.textContent = age > 3000 ? "figures as of " + duration(age) + " ago (the console's read budget)" : "";
  } catch (e) {
    status.textContent = String(e.message || e);
    main.replaceChildren(el("p", {class: "error", id: "error"}, String(e.message || e)));
  }
  if (r.refresh) timer = setTimeout(render, 2000);
}

window.addEventListener("hashchange", render);
render();
