// pronto dashboard: a small single-page app. Views are rebuilt from JSON fetched from /api; live
// updates arrive as server-sent events from /api/events (one per second) and are folded into the
// current view without reloading the page.
"use strict";

let CSRF = document.querySelector('meta[name="csrf-token"]').content;
// The error of an action without the session's CSRF token (dashboard.go, csrfRefused).
const CSRF_REFUSED = "missing or wrong CSRF token: reload the page";
const READ_ONLY = document.querySelector('meta[name="read-only"]').content === "1";
const STATES = ["available", "scheduled", "pending", "active", "retryable", "completed", "discarded", "cancelled"];
const TERMINAL_LIST = ["completed", "discarded", "cancelled"];
const TERMINAL = new Set(TERMINAL_LIST);
// WAITING are the states whose job's priority can still change (Client.JobSetPriority).
const WAITING = new Set(["available", "scheduled", "pending"]);
// PRIORITY_LEVELS are OJS's named priorities (pronto.PriorityHigh, ...).
const PRIORITY_LEVELS = { high: 10, normal: 0, low: -10 };
const main = document.getElementById("main");

// ---- helpers ---------------------------------------------------------------------------------------

// el builds an element; strings become text nodes, so data is never parsed as HTML.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v; // through the CSSOM: the CSP refuses style attributes
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined && k !== false) e.append(k instanceof Node ? k : String(k));
  return e;
}
const SVGNS = "http://www.w3.org/2000/svg";
function sv(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) k === "style" ? (e.style.cssText = v) : e.setAttribute(k, v);
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}

async function api(path, opts, retried) {
  opts = opts || {};
  const init = { credentials: "same-origin", headers: {} };
  if (opts.method) {
    init.method = opts.method;
    init.headers["X-CSRF-Token"] = CSRF;
    if (opts.body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
  }
  const r = await fetch(path, init);
  let data = null;
  try { data = await r.json(); } catch (_) { /* empty body */ }
  if (r.status === 401) { location.reload(); }
  if (r.status === 403 && data && data.error === CSRF_REFUSED && !retried) {
    // The token went stale (a server without an API key restarted): take the session's and retry.
    const t = await api("/api/csrf");
    CSRF = t.token;
    return api(path, opts, true);
  }
  if (!r.ok) {
    const e = new Error((data && data.error) || r.status + " " + r.statusText);
    e.status = r.status; // what a caller branches on: 404 gone, 409 changed meanwhile
    throw e;
  }
  return data;
}
const post = (path, body) => api(path, { method: "POST", body: body === undefined ? {} : body });

let toastTimer;
function toast(msg, bad) {
  const t = document.getElementById("toast");
  t.textContent = msg;
  t.className = "toast" + (bad ? " bad" : "");
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, bad ? 8000 : 3000);
}

function stateTag(s) { return el("span", { class: "state s-" + s, "data-state": s }, s); }
function fmtNum(n) { return n >= 10000 ? (n / 1000).toFixed(n >= 100000 ? 0 : 1) + "k" : String(n); }
function ago(iso) {
  if (!iso) return "";
  const d = (Date.now() - Date.parse(iso)) / 1000;
  const a = Math.abs(d), sfx = d >= 0 ? " ago" : " from now";
  if (a < 1) return "now";
  if (a < 60) return Math.round(a) + "s" + sfx;
  if (a < 3600) return Math.round(a / 60) + "m" + sfx;
  if (a < 86400) return Math.round(a / 3600) + "h" + sfx;
  return Math.round(a / 86400) + "d" + sfx;
}
function when(iso) { return iso ? el("span", { title: iso }, ago(iso)) : el("span", { class: "muted" }, "—"); }
function pretty(raw) {
  if (raw === undefined || raw === null) return el("span", { class: "muted" }, "none");
  return el("pre", {}, JSON.stringify(raw, null, 2));
}
// SINCE lists the relative ranges of the jobs list's time filter: the value is the duration ago.
const SINCE = { "5m": "last 5 minutes", "15m": "last 15 minutes", "1h": "last hour", "6h": "last 6 hours", "24h": "last 24 hours", "168h": "last 7 days" };
const TIME_KEYS = ["created_after", "created_before", "finished_after", "finished_before"];
// localInput turns an RFC 3339 time into a datetime-local input's value, in the browser's zone.
function localInput(iso) {
  const d = new Date(iso);
  if (isNaN(d)) return "";
  const p = (n) => String(n).padStart(2, "0");
  return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + "T" + p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
}
function shortID(id) { return id.slice(0, 8) + "…" + id.slice(-4); }
function jobLink(id) { return el("a", { href: "#/job/" + id, class: "mono", title: id }, shortID(id)); }
// tenantLink lists the tenant's jobs.
function tenantLink(t) { return el("a", { href: "#/jobs?tenant=" + encodeURIComponent(t), class: "tenant" }, t); }
// bulkToast reports a POST /api/bulk answer: what was done, what was refused and why, and what a
// request that stopped midway left untouched.
function bulkToast(action, r) {
  let msg = action + ": " + r.done + " done";
  if (r.failed.length) msg += ", " + r.failed.length + " refused (" + r.failed[0].error + ")";
  if (r.stopped) msg += ", " + r.not_attempted + " not attempted (" + r.stopped + ")";
  toast(msg, r.failed.length > 0 || !!r.stopped);
}
// bulkAll posts a bulk action on ids and, while the server answers that it stopped early to answer
// before its request deadline (partial, not_attempted: the last ones of those sent), posts those
// again, so that every job is attempted once; total, when given, adds up across calls, and the
// progress shown is named label (the action's own name by default).
async function bulkAll(action, ids, total, label) {
  total = total || { done: 0, failed: [], stopped: "", not_attempted: 0 };
  for (let rest = ids; rest.length;) {
    const x = await post("/api/bulk", { action, ids: rest });
    total.done += x.done;
    total.failed.push(...x.failed);
    if (x.stopped) {
      // The store stopped serving: what follows was not attempted, and is left for a later action.
      total.stopped = x.stopped;
      total.not_attempted = x.not_attempted;
      break;
    }
    if (!x.partial || !x.not_attempted) break;
    rest = rest.slice(rest.length - x.not_attempted);
    toast((label || action) + ": " + total.done + " done so far…");
  }
  return total;
}
// countText says how many jobs a GET /api/count answer holds: all that match, the first max of
// more, or those found before the server stopped reading (it reads at most scan_max jobs).
function countText(c) {
  if (c.capped) return "the first " + c.count + " (of more)";
  if (c.partial) return "the " + c.count + " found among the first " + c.read + " read (more may match)";
  return "all " + c.count;
}
function actBtn(label, fn, cls) {
  if (READ_ONLY) return null;
  return el("button", { class: "act " + (cls || ""), onclick: async (ev) => {
    const b = ev.currentTarget;
    b.disabled = true;
    try { await fn(); } catch (e) { toast(e.message, true); } finally { b.disabled = false; }
  } }, label);
}

// ---- live updates ----------------------------------------------------------------------------------

// es is the one event stream the page holds, retry the one timer that reopens a refused one, and
// lost when the stream broke (the server restarted or is gone), until the first update after it.
// watchdog is the timer that calls a stream silent for PING_MISSES ping intervals lost, and pingMs
// the interval the server's ping event gave (5 s until one arrives).
const live = { queues: [], history: [], listeners: new Set(), es: null, retry: 0, lost: 0, lastUpdate: 0, watchdog: 0, pingMs: 5000 };
const PING_MISSES = 3;
// retryLive reopens the stream es in 2 s through the one retry timer, once the API answers (a 401
// reloads the page into the login form).
function retryLive(es) {
  clearTimeout(live.retry);
  live.retry = setTimeout(async () => {
    try { await api("/api/overview"); } catch (_) { /* down: the new stream retries */ }
    if (live.es === es) connectLive();
  }, 2000);
}
// armWatchdog restarts the count of silence on es: a stream that stops delivering without closing
// (the server's host gone, no FIN; a stalled proxy) sends no error, and keep-alive comments reach no
// script, so only the server's pings tell a live stream from a frozen one.
function armWatchdog(es) {
  clearTimeout(live.watchdog);
  live.watchdog = setTimeout(() => {
    if (live.es !== es) return;
    es.close();
    serverLost();
    retryLive(es);
  }, PING_MISSES * live.pingMs);
}
function connectLive() {
  const ind = document.getElementById("live");
  // Never two streams nor two retry timers, however this was reached.
  clearTimeout(live.retry);
  if (live.es) live.es.close();
  const es = new EventSource("/api/events");
  live.es = es;
  // A stream that never opens nor errs (a proxy holding the request) counts as silent too.
  armWatchdog(es);
  es.addEventListener("ping", (m) => {
    if (live.es !== es) return;
    try { live.pingMs = JSON.parse(m.data).every_ms || live.pingMs; } catch (_) { /* keep the last */ }
    armWatchdog(es);
  });
  es.onopen = () => {
    if (ind.classList.contains("down")) { ind.textContent = ind.dataset.label || "store unreachable"; return; } // until a good update
    if (live.lost) return; // "live" once an update arrives: the server may still fail to read the store
    ind.textContent = "live"; ind.classList.add("on");
  };
  es.onerror = () => {
    if (live.es !== es) return;
    serverLost();
    if (es.readyState !== EventSource.CLOSED) return; // the browser retries by itself
    // A refused stream (401 after a logout or a new API key, a proxy's 502) is never retried by
    // the browser: ask the API, which reloads the page into the login form on 401, and reconnect.
    retryLive(es);
  };
  // The server could not read the store this tick: say so rather than show frozen counts as live.
  es.addEventListener("down", (m) => { if (live.es === es) armWatchdog(es); storeDown(JSON.parse(m.data)); });
  es.onmessage = (m) => {
    if (live.es === es) armWatchdog(es);
    const u = JSON.parse(m.data);
    live.lastUpdate = Date.now();
    const ind = document.getElementById("live");
    const recovered = live.lost || ind.classList.contains("down");
    if (live.lost) {
      live.lost = 0;
      serverBack();
    }
    storeUp();
    // A view opened during the outage failed its first read (or still waits on it) and so never
    // registered its live listener: open it again, or the page would claim "live" over an error.
    if (recovered && shownView && !shownView.loaded) route();
    live.queues = u.queues;
    live.history.push(u.point);
    if (live.history.length > 300) live.history.shift();
    for (const f of live.listeners) f(u);
  };
}

// serverLost says the page lost its stream: its numbers are those of the last update, not live.
function serverLost() {
  const ind = document.getElementById("live"), banner = document.getElementById("banner");
  ind.textContent = "disconnected: reconnecting";
  ind.classList.remove("on");
  if (live.lost) return;
  live.lost = Date.now();
  if (ind.classList.contains("down")) return; // the store's banner stays: it says more
  banner.textContent = "disconnected from the server: reconnecting" +
    (live.lastUpdate ? " (the numbers shown are from " + new Date(live.lastUpdate).toLocaleTimeString() + ")" : "");
  banner.dataset.kind = "server";
  banner.hidden = false;
}
// serverBack clears what serverLost showed, on the first update after it.
function serverBack() {
  const ind = document.getElementById("live"), banner = document.getElementById("banner");
  if (banner.dataset.kind === "server") { banner.hidden = true; delete banner.dataset.kind; }
  if (!ind.classList.contains("down")) { ind.textContent = "live"; ind.classList.add("on"); }
}

// storeDown marks the live indicator and shows the banner; d is the hub's classified problem,
// which names no host, user or database.
// Its label says whether the store cannot be reached or answered busy, read-only, ...
function storeDown(d) {
  const ind = document.getElementById("live"), banner = document.getElementById("banner");
  const label = d.label || "store unreachable";
  ind.textContent = label;
  ind.dataset.label = label;
  ind.classList.remove("on");
  ind.classList.add("down");
  banner.dataset.kind = "store";
  banner.textContent = (d.message.startsWith(label) ? d.message : label + ": " + d.message) +
    (d.since ? " (the numbers shown are from " + new Date(d.since).toLocaleTimeString() + ")" : "");
  banner.hidden = false;
}
// storeUp clears what storeDown showed, on the first good update.
function storeUp() {
  const ind = document.getElementById("live"), banner = document.getElementById("banner");
  if (banner.hidden && !ind.classList.contains("down")) return;
  ind.textContent = "live";
  ind.classList.remove("down");
  ind.classList.add("on");
  banner.hidden = true;
}

// ---- router ----------------------------------------------------------------------------------------

// routeGen numbers the route() calls: a view still loading when the user moved on belongs to an
// older one, and whatever it draws, listens to or throws after that is dropped.
let routeGen = 0;
// shownView is the view in <main>; its loaded is set once its first read has been drawn.
let shownView = null;
// newView is what a view draws into and listens through: its own container, which a newer route
// takes out of <main>, and a listen that registers nothing once the view is stale.
function newView() {
  const gen = ++routeGen;
  const view = {
    root: el("div", { class: "view" }),
    loaded: false,
    current: () => gen === routeGen,
    listen: (f) => { if (view.current()) live.listeners.add(f); },
  };
  return view;
}
function route() {
  const h = location.hash.slice(1) || "/";
  const [path, qs] = h.split("?");
  const params = new URLSearchParams(qs || "");
  const parts = path.split("/").filter(Boolean);
  document.getElementById("toast").hidden = true;
  live.listeners.clear();
  const view = newView();
  shownView = view;
  main.replaceChildren(view.root);
  const name = parts[0] || "overview";
  for (const a of document.querySelectorAll("nav a")) {
    const n = a.dataset.nav;
    a.classList.toggle("on", n === name || (n === "jobs" && name === "job") || (n === "workflows" && name === "workflow"));
  }
  const views = { overview, jobs, job, workflows, workflow, cron, ratelimits, deadletter };
  const v = views[name];
  if (!v) { view.root.append(el("h1", {}, "Not found")); view.loaded = true; return; }
  Promise.resolve(v(view, parts.slice(1), params)).then(() => { view.loaded = true; },
    (e) => { if (view.current()) view.root.append(el("p", { class: "error" }, e.message)); });
}

// ---- overview --------------------------------------------------------------------------------------

function drawChart(svg, series, opts) {
  // series: [{values: [{t, v}], color}]; a polyline per series over the shared time range.
  const W = 600, H = 160, L = 40, B = 18, T = 8, R = 8;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.replaceChildren();
  // The window grows with the history, from one minute up to five.
  const now = Date.now(), first = series.reduce((m, s) => s.values.length ? Math.min(m, s.values[0].t) : m, now);
  const span = Math.min(5 * 60000, Math.max(60000, now - first)), t0 = now - span;
  let maxV = opts.min || 1;
  for (const s of series) for (const p of s.values) if (p.v > maxV) maxV = p.v;
  maxV = niceMax(maxV);
  const x = (t) => L + ((t - t0) / span) * (W - L - R);
  const y = (v) => T + (1 - v / maxV) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = (maxV * i) / 4;
    svg.append(sv("line", { class: "axis", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    svg.append(sv("text", { x: L - 4, y: y(v) + 3, "text-anchor": "end" }, fmtAxis(v)));
  }
  const step = span <= 120000 ? 15000 : 60000;
  for (let d = 0; d <= span; d += step) {
    const label = d === 0 ? "now" : step < 60000 ? "-" + d / 1000 + "s" : "-" + d / 60000 + "m";
    svg.append(sv("text", { x: Math.max(L, x(now - d)), y: H - 4, "text-anchor": d === 0 ? "end" : "middle" }, label));
  }
  for (const s of series) {
    const pts = s.values.filter((p) => p.t >= t0).map((p) => x(p.t).toFixed(1) + "," + y(p.v).toFixed(1));
    if (pts.length) svg.append(sv("polyline", { points: pts.join(" "), fill: "none", stroke: s.color, "stroke-width": 2, "vector-effect": "non-scaling-stroke" }));
  }
}
function niceMax(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
function fmtAxis(v) { return v >= 1000 ? (v / 1000).toFixed(1) + "k" : (Math.round(v * 100) / 100).toString(); }
const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

async function overview(view) {
  view.root.append(el("h1", {}, "Overview"));
  const tput = sv("svg", { id: "chart-throughput", role: "img", "aria-label": "throughput" });
  const lat = sv("svg", { id: "chart-latency", role: "img", "aria-label": "pickup latency" });
  const legend = (items) => el("div", { class: "legend" }, items.map(([c, t]) => el("span", {}, el("i", { style: "" , "data-c": c }), t)));
  const tl = legend([["--ok", "completed/s"], ["--bad", "failed/s"]]);
  const ll = legend([["--info", "mean pickup latency (ms)"]]);
  for (const i of [...tl.querySelectorAll("i"), ...ll.querySelectorAll("i")]) i.style.background = css(i.dataset.c);
  view.root.append(el("div", { class: "charts" },
    el("div", { class: "panel chart" }, el("h2", {}, "Throughput"), tl, tput),
    el("div", { class: "panel chart" }, el("h2", {}, "Pickup latency"), ll, lat)));
  const tableBox = el("div", { class: "tablewrap" });
  view.root.append(el("div", { class: "panel" }, el("h2", {}, "Queues"), tableBox));
  const clientsBox = el("div", { class: "tablewrap" });
  view.root.append(el("div", { class: "panel" }, el("h2", {}, "Clients"), clientsBox));
  const me = el("p", { class: "muted" });
  view.root.append(me);
  const o = await api("/api/overview");
  if (!view.current()) return; // the user moved on: the history stays as the stream left it
  if (live.history.length === 0) live.history = o.history || [];
  me.textContent = "This dashboard's client: " + o.client_id + (o.leader ? " (leader)" : "");

  const renderQueues = (qs) => {
    if (!qs.length) { tableBox.replaceChildren(el("p", { class: "muted", id: "no-queues" }, "No jobs yet.")); return; }
    const t = el("table", { id: "queues" },
      el("thead", {}, el("tr", {}, el("th", {}, "Queue"), STATES.map((s) => el("th", { class: "num" + (["pending", "cancelled", "scheduled"].includes(s) ? " opt" : "") }, s)), el("th", {}, ""))),
      el("tbody", {}, qs.map((q) => el("tr", { class: q.paused ? "paused" : "", "data-queue": q.name },
        el("td", { class: "txt" }, el("a", { href: "#/jobs?queue=" + encodeURIComponent(q.name) }, q.name)),
        STATES.map((s) => el("td", { class: "num" + (["pending", "cancelled", "scheduled"].includes(s) ? " opt" : ""), "data-q": q.name, "data-s": s },
          (q.counts[s] || 0) ? el("a", { href: "#/jobs?queue=" + encodeURIComponent(q.name) + "&state=" + s }, fmtNum(q.counts[s])) : "0")),
        el("td", {}, q.paused
          ? actBtn("Resume", async () => { await post("/api/queues/" + encodeURIComponent(q.name) + "/resume"); toast("Resumed " + q.name); })
          : actBtn("Pause", async () => { await post("/api/queues/" + encodeURIComponent(q.name) + "/pause"); toast("Paused " + q.name); }))))));
    tableBox.replaceChildren(t);
  };
  const renderCharts = () => {
    const h = live.history;
    drawChart(tput, [
      { color: css("--ok"), values: h.map((p) => ({ t: p.t, v: p.completed })) },
      { color: css("--bad"), values: h.map((p) => ({ t: p.t, v: p.failed })) }], { min: 1 });
    drawChart(lat, [{ color: css("--info"), values: h.filter((p) => p.latency_ms >= 0).map((p) => ({ t: p.t, v: p.latency_ms })) }], { min: 10 });
  };
  // The clients connected to the store: one row each, the leader marked, its queues with the jobs
  // running against the workers configured.
  const renderClients = (cs) => {
    if (!cs) return; // not readable this tick: keep the last rows
    if (!cs.length) { clientsBox.replaceChildren(el("p", { class: "muted", id: "no-clients" }, "No client is running.")); return; }
    clientsBox.replaceChildren(el("table", { id: "clients" },
      el("thead", {}, el("tr", {}, el("th", {}, "Client"), el("th", { class: "opt" }, "Process"), el("th", {}, "Queues (running / workers)"),
        el("th", { class: "num" }, "Running"), el("th", { class: "num" }, "Workers"), el("th", { class: "opt" }, "Version"), el("th", { class: "opt" }, "Started"))),
      el("tbody", {}, cs.map((c) => el("tr", { "data-client": c.id, class: c.leader ? "leader" : "" },
        el("td", { class: "mono txt" }, c.id, c.leader ? el("span", { class: "badge lead", title: "runs the cluster's maintenance" }, "leader") : null),
        el("td", { class: "opt mono" }, c.host ? c.host + (c.pid ? ":" + c.pid : "") : "—"),
        el("td", { class: "wrap" }, c.queues.length === 0 ? el("span", { class: "muted", title: "this client runs no workers (it inserts, or serves the HTTP API)" }, "no workers") :
          c.queues.map((q) => el("span", { class: "qchip", "data-q": q.name }, el("a", { href: "#/jobs?queue=" + encodeURIComponent(q.name) }, q.name), " " + q.running + " / " + q.max_workers))),
        el("td", { class: "num", "data-running": c.id }, c.running), el("td", { class: "num", "data-workers": c.id }, c.workers),
        el("td", { class: "opt muted" }, c.version || ""), el("td", { class: "opt" }, when(c.started_at)))))));
  };
  renderQueues(o.queues);
  renderClients(o.clients);
  renderCharts();
  view.listen((u) => { renderQueues(u.queues); renderClients(u.clients); renderCharts(); });
}

// ---- jobs ------------------------------------------------------------------------------------------

async function jobs(view, _, params) {
  view.root.append(el("h1", {}, "Jobs"));
  const f = {
    state: el("select", { name: "state", "aria-label": "state" }, el("option", { value: "" }, "any state"), STATES.map((s) => el("option", { value: s }, s))),
    queue: el("input", { name: "queue", placeholder: "queue" }),
    kind: el("input", { name: "kind", placeholder: "kind" }),
    tag: el("input", { name: "tag", placeholder: "tag" }),
    tenant: el("input", { name: "tenant", placeholder: "tenant" }),
    order: el("select", { name: "order", "aria-label": "order" }, el("option", { value: "desc" }, "newest first"), el("option", { value: "asc" }, "oldest first")),
  };
  for (const k of Object.keys(f)) f[k].value = params.get(k) || (k === "order" ? "desc" : "");
  // Time: created or finished, in the last N (kept relative in the address, so a reload moves with
  // the clock) or between two local times.
  const opt = (v, label) => el("option", { value: v }, label);
  const tf = {
    field: el("select", { name: "time", "aria-label": "time field" }, opt("", "any time"), opt("created", "created"), opt("finished", "finished")),
    since: el("select", { name: "since", "aria-label": "time range" }, Object.entries(SINCE).map(([v, l]) => opt(v, l)), opt("custom", "between…")),
    from: el("input", { type: "datetime-local", name: "from", "aria-label": "from", step: 1 }),
    to: el("input", { type: "datetime-local", name: "to", "aria-label": "until", step: 1 }),
  };
  for (const field of ["created", "finished"]) {
    const a = params.get(field + "_after"), b = params.get(field + "_before");
    if (!a && !b) continue;
    tf.field.value = field;
    if (a && !b && SINCE[a]) tf.since.value = a;
    else { tf.since.value = "custom"; tf.from.value = a ? localInput(a) : ""; tf.to.value = b ? localInput(b) : ""; }
  }
  const showTime = () => {
    tf.since.hidden = !tf.field.value;
    tf.from.hidden = tf.to.hidden = !tf.field.value || tf.since.value !== "custom";
  };
  showTime();
  const apply = () => {
    const q = new URLSearchParams();
    for (const k of Object.keys(f)) if (f[k].value && !(k === "order" && f[k].value === "desc")) q.set(k, f[k].value.trim());
    const field = tf.field.value;
    if (field && tf.since.value !== "custom") q.set(field + "_after", tf.since.value);
    if (field && tf.since.value === "custom") {
      if (tf.from.value) q.set(field + "_after", new Date(tf.from.value).toISOString());
      if (tf.to.value) q.set(field + "_before", new Date(tf.to.value).toISOString());
    }
    location.hash = "#/jobs" + (q.toString() ? "?" + q : "");
  };
  const form = el("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); apply(); } },
    f.state, f.queue, f.kind, f.tag, f.tenant, tf.field, tf.since, tf.from, tf.to, f.order, el("button", { type: "submit", class: "primary" }, "Filter"));
  f.state.addEventListener("change", apply);
  f.order.addEventListener("change", apply);
  tf.field.addEventListener("change", () => { showTime(); if (tf.since.value !== "custom") apply(); });
  tf.since.addEventListener("change", () => { showTime(); if (tf.since.value !== "custom") apply(); });
  const filter = new URLSearchParams();
  for (const k of ["state", "queue", "kind", "tag", "tenant", "order", ...TIME_KEYS]) if (params.get(k)) filter.set(k, params.get(k));
  const cursor = params.get("cursor") || "";
  const bar = el("div", { class: "bulkbar" });
  const box = el("div", { class: "tablewrap" });
  const pager = el("div", { class: "actions" });
  view.root.append(el("div", { class: "panel" }, form, bar, box, pager));

  const selected = new Set();
  let allMatching = false, matched = null, page = [];
  // matchText says how many jobs "everything the filter matches" is, as counted when selected.
  const matchText = () => countText(matched);
  const bulk = async (action) => {
    const n = allMatching ? matched.count : selected.size;
    const what = allMatching ? matchText() + " job" + (n === 1 ? "" : "s") + " matching the filter" : n + " job" + (n === 1 ? "" : "s");
    if (!confirm(action[0].toUpperCase() + action.slice(1) + " " + what + "?")) return;
    // "Everything the filter matches" is the jobs counted when the operator chose it, not what the
    // filter matches by the time the action arrives.
    const r = await bulkAll(action, allMatching ? matched.ids : [...selected]);
    bulkToast(action, r);
    selected.clear(); allMatching = false; matched = null;
    load();
  };
  const renderBar = () => {
    const n = allMatching ? matchText()[0].toUpperCase() + matchText().slice(1) + " matching" : selected.size + " selected";
    bar.replaceChildren(...[READ_ONLY ? "" : el("span", { id: "selcount" }, n),
      (selected.size || allMatching) ? [actBtn("Retry", () => bulk("retry")), actBtn("Cancel", () => bulk("cancel")), actBtn("Delete", () => bulk("delete"), "danger"),
        !allMatching && page.length && selected.size === page.length ? actBtn("Select all matching the filter", async () => {
          matched = await api("/api/count?" + filter);
          allMatching = true;
          renderBar();
        }) : null] : null].flat().filter(Boolean));
  };
  const load = async () => {
    const q = new URLSearchParams(filter);
    if (cursor) q.set("cursor", cursor);
    const r = await api("/api/jobs?" + q);
    page = r.jobs;
    const all = el("input", { type: "checkbox", "aria-label": "select page", class: "act", onchange: (e) => {
      for (const j of page) e.target.checked ? selected.add(j.id) : selected.delete(j.id);
      if (!e.target.checked) { allMatching = false; matched = null; }
      for (const c of box.querySelectorAll("tbody input")) c.checked = e.target.checked;
      renderBar();
    } });
    // The tenant column only when a job on the page has one.
    const tenants = page.some((j) => j.tenant);
    box.replaceChildren(page.length === 0 ? el("p", { class: "muted" }, "No jobs match.") : el("table", { id: "jobs" },
      el("thead", {}, el("tr", {}, el("th", {}, all), el("th", {}, "Job"), el("th", {}, "Kind"), el("th", {}, "Queue"), tenants ? el("th", {}, "Tenant") : null, el("th", {}, "State"),
        el("th", { class: "num opt" }, "Priority"), el("th", { class: "num" }, "Attempt"), el("th", { class: "opt" }, "Created"), el("th", { class: "opt" }, "Last error"))),
      el("tbody", {}, page.map((j) => el("tr", { "data-id": j.id },
        el("td", {}, el("input", { type: "checkbox", class: "act", "aria-label": "select " + j.id, checked: selected.has(j.id), onchange: (e) => {
          e.target.checked ? selected.add(j.id) : (selected.delete(j.id), allMatching = false);
          renderBar();
        } })),
        el("td", {}, jobLink(j.id)), el("td", { class: "txt" }, j.kind), el("td", { class: "txt" }, j.queue),
        tenants ? el("td", { class: "txt" }, j.tenant ? tenantLink(j.tenant) : "") : null, el("td", {}, stateTag(j.state)),
        el("td", { class: "num opt", "data-priority": j.priority }, j.priority), el("td", { class: "num" }, j.attempt + "/" + j.max_attempts), el("td", { class: "opt" }, when(j.created_at)),
        el("td", { class: "opt wrap muted" }, j.errors.length ? j.errors[0].message.slice(0, 120) : ""))))));
    const next = new URLSearchParams(filter);
    next.set("cursor", r.next);
    pager.replaceChildren(cursor ? el("a", { href: "#/jobs?" + filter }, "« First page") : "",
      r.next ? el("a", { href: "#/jobs?" + next, id: "next-page" }, "Next page »") : "");
    renderBar();
  };
  await load();
  // Refresh with the live stream, but not while the user has a selection to act on, and at most every 3 s.
  let lastLoad = Date.now();
  view.listen(() => {
    if (selected.size || allMatching || Date.now() - lastLoad < 3000) return;
    lastLoad = Date.now();
    load().catch(() => {});
  });
}

// ---- one job ---------------------------------------------------------------------------------------

async function job(view, parts) {
  const id = parts[0];
  const box = el("div", {});
  // stale says the last re-read failed: the job is shown as last read, not live.
  const stale = el("p", { class: "stale", id: "stale", hidden: true });
  view.root.append(stale, box);
  let last = "", gone = false;
  // prioDraft is a priority typed but not set yet, and the job's priority it was typed against.
  let prioDraft = null;
  // showGone replaces the job, deleted since it was read, and ends the page's re-reads.
  const showGone = () => {
    gone = true;
    stale.hidden = true;
    box.replaceChildren(el("h1", {}, "Job ", el("span", { class: "mono" }, id)),
      el("div", { class: "panel", id: "gone" }, el("p", {}, "This job no longer exists: it was deleted (by an operator, a bulk action or retention) after this page read it."),
        el("p", {}, el("a", { href: "#/jobs" }, "« All jobs"))));
  };
  const render = (j) => {
    stale.hidden = true;
    const sig = JSON.stringify(j);
    if (sig === last) return;
    last = sig;
    const act = (a, label, cls, confirmText) => actBtn(label, async () => {
      if (confirmText && !confirm(confirmText)) return;
      let r;
      try {
        r = await post("/api/jobs/" + id + "/" + a);
      } catch (e) {
        // Changed or deleted elsewhere since it was read: show what it is now, then the refusal.
        if (e.status === 404) showGone();
        if (e.status === 409) refresh();
        throw e;
      }
      toast(label + ": job is now " + r.state);
      if (a === "delete") { location.hash = "#/jobs"; return; }
      render(r);
    }, cls);
    // priorityControl changes the priority of a job waiting to run: a number, or a level picked from
    // the list; Set (or Enter) posts it. A value typed but not yet set survives the page's re-reads
    // while the job's priority stays what it was typed against.
    const priorityControl = (j) => {
      if (READ_ONLY || !WAITING.has(j.state)) return null;
      const draft = prioDraft && prioDraft.from === j.priority ? prioDraft.value : String(j.priority);
      const input = el("input", { type: "number", id: "priority-input", min: -100, max: 100, step: 1, value: draft, "aria-label": "new priority" });
      const level = el("select", { id: "priority-level", "aria-label": "priority level" }, el("option", { value: "" }, "custom"),
        Object.entries(PRIORITY_LEVELS).map(([name, n]) => el("option", { value: n }, name + " (" + n + ")")));
      const sync = () => { level.value = Object.values(PRIORITY_LEVELS).map(String).includes(input.value.trim()) ? input.value.trim() : ""; };
      sync();
      input.addEventListener("input", () => { prioDraft = { value: input.value, from: j.priority }; sync(); });
      level.addEventListener("change", () => { if (level.value !== "") { input.value = level.value; prioDraft = { value: input.value, from: j.priority }; } });
      const set = actBtn("Set", async () => {
        const v = input.value.trim();
        // An empty or fractional field would reach the server as 0 or be cut: say so here instead.
        if (!/^-?\d+$/.test(v)) throw new Error("priority " + JSON.stringify(v) + ": want a whole number from -100 to 100");
        let r;
        try {
          r = await post("/api/jobs/" + id + "/priority", { priority: Number(v) });
        } catch (e) {
          if (e.status === 404) showGone();
          if (e.status === 409) refresh();
          throw e;
        }
        prioDraft = null;
        toast("priority " + r.priority + " (was " + r.previous_priority + ")");
        render(r.job);
      });
      set.type = "button"; // the form's submit clicks it: a submit button would post twice
      set.id = "priority-set";
      return el("form", { class: "prio act", id: "priority-form", onsubmit: (e) => { e.preventDefault(); if (!set.disabled) set.click(); } }, input, level, set);
    };
    // The timeline: inserted, due, then each attempt's start and end (a failed attempt's start comes
    // from its error entry; entries older than started_at show only the failure), then the outcome.
    const tl = [["inserted", j.created_at, ""]];
    if (j.scheduled_at && j.scheduled_at !== j.created_at) tl.push(["due", j.scheduled_at, ""]);
    const ran = (from, to) => { const ms = Date.parse(to) - Date.parse(from); return ms >= 0 ? " after " + (ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s") : ""; };
    for (const e of j.errors) {
      if (e.started_at) tl.push(["attempt " + e.attempt + " started", e.started_at, "start", e.attempt]);
      tl.push(["attempt " + e.attempt + " failed" + (e.started_at ? ran(e.started_at, e.at) : "") + ": " + (e.type ? e.type + ": " : "") + e.message, e.at, "bad", e.attempt]);
    }
    // The current attempt's start, unless its failure above already shows it.
    if (j.started_at && !j.errors.some((e) => e.attempt === j.attempt && e.started_at && Date.parse(e.started_at) === Date.parse(j.started_at)))
      tl.push(["attempt " + j.attempt + " started" + (j.worker_id ? " on " + j.worker_id : ""), j.started_at, "start", j.attempt]);
    if (j.completed_at) tl.push([j.state + (j.started_at && j.state === "completed" ? ran(j.started_at, j.completed_at) : ""), j.completed_at, j.state === "completed" ? "good" : "bad"]);
    tl.sort((a, b) => Date.parse(a[1]) - Date.parse(b[1]));
    box.replaceChildren(
      el("h1", {}, "Job ", el("span", { class: "mono" }, j.id), " ", stateTag(j.state)),
      el("div", { class: "actions panel" },
        ["discarded", "cancelled"].includes(j.state) ? act("retry", "Retry", "primary") : null,
        j.state === "pending" ? act("activate", "Run now", "primary") : null,
        ["scheduled", "retryable"].includes(j.state) ? act("run-now", "Run now", "primary") : null,
        !TERMINAL.has(j.state) ? act("cancel", "Cancel", "", "Cancel this job?") : null,
        j.state !== "active" ? act("delete", "Delete", "danger", "Delete this job for good?") : null,
        READ_ONLY ? el("span", { class: "muted" }, "read-only") : null),
      el("div", { class: "grid2" },
        el("div", { class: "panel" }, el("dl", { class: "kv" })),
        el("div", { class: "panel" }, el("h2", {}, "Timeline"), el("ul", { class: "timeline", id: "timeline" },
          tl.map(([what, at, cls, attempt]) => el("li", { class: cls, "data-attempt": attempt || null }, el("div", {}, what), el("div", { class: "muted" }, when(at), " · ", at)))))),
      j.progress ? el("div", { class: "panel", id: "progress" }, el("h2", {}, "Progress"),
        typeof j.progress.value === "number" ? el("p", {}, el("span", { class: "bartrack wide" }, el("span", { class: "bar", style: "width:" + Math.round(100 * j.progress.value) + "%" })),
          el("span", { class: "pct" }, Math.round(100 * j.progress.value) + "%")) : null,
        j.progress.data ? pretty(j.progress.data) : null,
        el("p", { class: "muted" }, "reported ", when(j.progress.updated_at))) : "", // replaceChildren would print a null
      el("div", { class: "grid2" },
        el("div", { class: "panel" }, el("h2", {}, "Args"), pretty(j.args)),
        el("div", { class: "panel" }, el("h2", {}, "Result"), pretty(j.result))),
      el("div", { class: "panel" }, el("h2", {}, "Meta"), pretty(j.meta)),
      el("div", { class: "panel", id: "errors" }, el("h2", {}, "Errors (" + j.errors.length + ")"),
        j.errors.length === 0 ? el("p", { class: "muted" }, "No failed attempts.") :
          j.errors.slice().reverse().map((e) => el("div", { class: "attempt" },
            el("p", {}, el("b", {}, "Attempt " + e.attempt), e.started_at ? [" · started ", when(e.started_at), " · failed "] : " · ", when(e.at), e.type ? " · " + e.type : "", e.retryable === false ? " · not retryable" : ""),
            el("pre", { class: "errmsg" }, e.message), e.trace ? el("details", {}, el("summary", {}, "stack"), el("pre", {}, e.trace)) : null,
            e.details ? pretty(e.details) : null))));
    // The key/value list: built separately so values may be nodes.
    const dl = box.querySelector("dl.kv");
    for (const [k, v] of [["kind", j.kind], ["queue", el("a", { href: "#/jobs?queue=" + encodeURIComponent(j.queue) }, j.queue)], ["priority", [el("span", { id: "job-priority" }, j.priority), priorityControl(j)]],
      ["attempt", j.attempt + " of " + j.max_attempts], ["tags", j.tags.length ? j.tags.map((t) => el("a", { href: "#/jobs?tag=" + encodeURIComponent(t) }, t + " ")) : "—"],
      ["worker", j.worker_id || "—"], ["unique key", j.unique_key || "—"],
      ["workflow", j.workflow_id ? el("a", { href: "#/workflow/" + j.workflow_id, class: "mono" }, j.workflow_id) : "—"],
      ["parents", j.parent_ids && j.parent_ids.length ? j.parent_ids.map((p) => [jobLink(p), " "]) : "—"],
      ["rate key", j.rate_key || "—"], ["tenant", j.tenant ? tenantLink(j.tenant) : "—"], ["expires", j.expires_at ? when(j.expires_at) : "—"]]) {
      dl.append(el("dt", {}, k), el("dd", {}, v));
    }
  };
  // refresh re-reads the job, one read at a time (a call during a read reads again after it); a
  // read that fails leaves the job shown as last read, marked stale.
  let reading = false, again = false, lastLoad = 0, readAt = 0, due = false;
  const refresh = async () => {
    if (gone || !view.current()) return;
    if (reading) { again = true; return; }
    reading = true;
    due = false;
    lastLoad = Date.now();
    try {
      const j = await api("/api/jobs/" + id);
      if (gone || !view.current()) return;
      readAt = Date.now();
      render(j);
    } catch (e) {
      if (gone || !view.current()) return;
      if (e.status === 404) { showGone(); return; }
      stale.textContent = "Not live: reading the job again failed (" + e.message + "); shown as read at " + new Date(readAt).toLocaleTimeString() + ".";
      stale.hidden = false;
    } finally {
      reading = false;
      if (again) { again = false; refresh(); }
    }
  };
  render(await api("/api/jobs/" + id));
  readAt = lastLoad = Date.now();
  // An unfinished job is re-read each tick (one small read), and so is any job an event of this
  // dashboard's client names. A finished one can also be retried or deleted by any other process
  // (the CLI, another server, a Go service), which no event here names: those move the queue
  // counts the server pushes each tick, and when they moved it is re-read, at most every 2 s.
  // The first tick counts as a move: its counts may include changes made after the page was read.
  let lastSig = "";
  view.listen((u) => {
    if (gone) return;
    const sig = JSON.stringify(u.queues.map((q) => q.counts));
    if (sig !== lastSig) { due = true; lastSig = sig; }
    const state = box.querySelector("h1 .state");
    const named = u.jobs.some((c) => c.id === id || c.id === "*");
    if (named || (state && !TERMINAL.has(state.dataset.state))) refresh();
    else if (due && Date.now() - lastLoad >= 2000) refresh();
  });
}

// ---- workflows -------------------------------------------------------------------------------------

// stepsFailed counts the steps that did not complete (each fails the workflow).
function stepsFailed(w) { return (w.counts.discarded || 0) + (w.counts.cancelled || 0); }

// workflowNote says what a workflow's state owes to its callbacks, which the step counts do not
// show: failed by a discarded callback, or running with every step finished while a callback has
// yet to end. null when the steps tell it all.
function workflowNote(w) {
  const cb = w.callbacks || { total: 0, discarded: 0, open: 0 };
  const plural = (n, one) => n === 1 ? one : n + " " + one.replace("callback", "callbacks");
  if (cb.discarded > 0) return { key: "callback-failed", text: plural(cb.discarded, "callback") + " failed" };
  const stepsDone = TERMINAL_LIST.reduce((n, s) => n + (w.counts[s] || 0), 0) >= w.total;
  if (w.state === "running" && cb.open > 0 && stepsDone) return { key: "callback-waiting", text: "waiting on " + plural(cb.open, "callback") };
  return null;
}
function noteTag(note) { return note ? el("span", { class: "wfnote", "data-note": note.key }, note.text) : null; }

async function workflows(view, _, params) {
  view.root.append(el("h1", {}, "Workflows"));
  const cursor = params.get("cursor") || "";
  const box = el("div", { class: "panel tablewrap" });
  view.root.append(box);
  let shown = new Set();
  const load = async () => {
    const r = await api("/api/workflows" + (cursor ? "?cursor=" + encodeURIComponent(cursor) : ""));
    shown = new Set(r.workflows.map((w) => w.id));
    box.replaceChildren(...(r.workflows.length === 0 ? [el("p", { class: "muted" }, cursor ? "No more workflows." : "No workflows yet.")] : [
      el("table", { id: "workflows" }, el("thead", {}, el("tr", {}, ["Workflow", "Name", "Type", "State", "Steps", "Done", "Failed", "Created", "Finished"].map((h) => el("th", { class: ["Steps", "Done", "Failed"].includes(h) ? "num" : "" }, h)))),
        el("tbody", {}, r.workflows.map((w) => el("tr", { "data-id": w.id, "data-state": w.state },
          el("td", {}, el("a", { href: "#/workflow/" + w.id, class: "mono", title: w.id }, shortID(w.id))), el("td", { class: "txt" }, w.name), el("td", { class: "muted txt" }, w.type),
          el("td", {}, stateTag(w.state), noteTag(workflowNote(w))), el("td", { class: "num" }, w.total), el("td", { class: "num" }, (w.counts.completed || 0) + "/" + w.total),
          failedCell(w),
          el("td", {}, when(w.created_at)), el("td", {}, when(w.finished_at)))))),
      el("div", { class: "actions" }, cursor ? el("a", { href: "#/workflows" }, "« Newest") : "",
        r.next ? el("a", { href: "#/workflows?cursor=" + encodeURIComponent(r.next), id: "next-page" }, "Next page »") : "")]));
  };
  await load();
  // Live: the jobs of any process move the queue counts the server pushes each tick; when they
  // moved, the page is re-read (at most every 2 s) if it may have changed: it shows a running
  // workflow, or it is the first page, where new workflows appear.
  // The counts of the first tick may already include changes made after the page was read, so
  // that tick counts as a change.
  let lastLoad = Date.now(), due = false, lastSig = "";
  view.listen((u) => {
    const sig = JSON.stringify(u.queues.map((q) => q.counts));
    if (sig !== lastSig) {
      if (!cursor || box.querySelector('tr[data-state="running"]')) due = true;
      lastSig = sig;
    }
    if (u.jobs.some((c) => c.id === "*" || shown.has(c.workflow_id))) due = true;
    if (due && Date.now() - lastLoad >= 2000) { due = false; lastLoad = Date.now(); load().catch(() => {}); }
  });
}

// failedCell counts what failed the workflow: its steps that did not complete and its discarded
// callbacks, the latter named beside the number.
function failedCell(w) {
  const steps = stepsFailed(w), cbs = (w.callbacks || {}).discarded || 0;
  return el("td", { class: "num", "data-failed": steps + cbs, title: steps + " step(s), " + cbs + " callback(s)" },
    String(steps + cbs), cbs ? el("span", { class: "muted" }, " (" + cbs + " callback" + (cbs === 1 ? "" : "s") + ")") : null);
}

// callbacksText sums up a workflow's callbacks: how many, and how they ended or that they are open.
function callbacksText(cb) {
  const parts = [["completed", cb.completed], ["cancelled (condition not met)", cb.cancelled], ["discarded", cb.discarded], ["open", cb.open]]
    .filter(([, n]) => n > 0).map(([s, n]) => n + " " + s);
  return cb.total + (parts.length ? ": " + parts.join(", ") : "");
}

// layout places each job in the column of its depth (longest path from a root) and draws parent edges.
function drawGraph(jobs) {
  const byID = new Map(jobs.map((j) => [j.id, j]));
  const depth = new Map();
  const d = (j, seen) => {
    if (depth.has(j.id)) return depth.get(j.id);
    if (seen.has(j.id)) return 0;
    seen.add(j.id);
    let v = 0;
    for (const p of j.parent_ids || []) if (byID.has(p)) v = Math.max(v, d(byID.get(p), seen) + 1);
    depth.set(j.id, v);
    return v;
  };
  const cols = [];
  for (const j of jobs) { const k = d(j, new Set()); (cols[k] = cols[k] || []).push(j); }
  const NW = 170, NH = 44, GX = 60, GY = 16, P = 10;
  const rows = Math.max(...cols.map((c) => (c || []).length));
  const W = P * 2 + cols.length * NW + (cols.length - 1) * GX, H = P * 2 + rows * NH + (rows - 1) * GY;
  const pos = new Map();
  cols.forEach((c, ci) => (c || []).forEach((j, ri) => {
    const off = ((rows - c.length) * (NH + GY)) / 2;
    pos.set(j.id, { x: P + ci * (NW + GX), y: P + off + ri * (NH + GY) });
  }));
  const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, id: "wfgraph", width: W, height: H });
  for (const j of jobs) for (const p of j.parent_ids || []) {
    const a = pos.get(p), b = pos.get(j.id);
    if (!a || !b) continue;
    const x1 = a.x + NW, y1 = a.y + NH / 2, x2 = b.x, y2 = b.y + NH / 2, mx = (x1 + x2) / 2;
    svg.append(sv("path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` }));
  }
  for (const j of jobs) {
    const p = pos.get(j.id);
    const color = css({ completed: "--ok", discarded: "--bad", retryable: "--warn", active: "--info", available: "--purple", cancelled: "--idle" }[j.state] || "--muted");
    const label = j.kind.length > 22 ? j.kind.slice(0, 21) + "…" : j.kind;
    svg.append(sv("a", { href: "#/job/" + j.id, class: "node", "data-id": j.id, "data-state": j.state },
      sv("title", {}, j.kind + " · " + j.state + (j.run_on ? " · callback on " + j.run_on : "")),
      sv("rect", { x: p.x, y: p.y, width: NW, height: NH, rx: 6, stroke: color, "stroke-dasharray": j.run_on ? "4 3" : "" }),
      sv("text", { x: p.x + 10, y: p.y + 18 }, label),
      sv("text", { x: p.x + 10, y: p.y + 34, style: "fill:" + color }, j.state)));
  }
  return svg;
}

async function workflow(view, parts) {
  const id = parts[0];
  const box = el("div", {});
  view.root.append(box);
  let last = "";
  const load = async () => {
    const r = await api("/api/workflows/" + id);
    const sig = JSON.stringify(r);
    if (sig === last) return r;
    last = sig;
    const w = r.workflow;
    const note = workflowNote(w);
    // The callbacks the note is about, linked: the discarded ones, or those yet to end.
    const named = !note ? [] : r.jobs.filter((j) => j.run_on && (note.key === "callback-failed" ? j.state === "discarded" : !TERMINAL.has(j.state)));
    box.replaceChildren(
      el("h1", {}, "Workflow ", w.name, " ", stateTag(w.state), " ", noteTag(note)),
      note ? el("p", { class: "panel", id: "wfnote", "data-note": note.key },
        note.key === "callback-failed" ? (named.length === 1 ? "Failed by its callback, discarded after its retries: " : "Failed by its callbacks, discarded after their retries: ") : "Every step has finished; the workflow runs until its callbacks end: ",
        ...named.flatMap((j, i) => [i ? ", " : "", jobLink(j.id), " (on " + j.run_on + ", " + j.state + ")"])) : null,
      el("div", { class: "actions panel" }, el("span", { class: "mono muted" }, w.id),
        w.state === "running" ? actBtn("Cancel workflow", async () => { if (confirm("Cancel every unfinished job of this workflow?")) { await post("/api/workflows/" + id + "/cancel"); load(); } }, "danger") : null),
      el("div", { class: "panel graph tablewrap" }, drawGraph(r.jobs)),
      el("div", { class: "panel" }, el("dl", { class: "kv" }, el("dt", {}, "steps"), el("dd", {}, w.total),
        STATES.filter((s) => w.counts[s]).flatMap((s) => [el("dt", {}, s), el("dd", {}, w.counts[s])]),
        w.callbacks && w.callbacks.total ? [el("dt", {}, "callbacks"), el("dd", { id: "wfcallbacks" }, callbacksText(w.callbacks))] : [],
        el("dt", {}, "created"), el("dd", {}, when(w.created_at)), el("dt", {}, "finished"), el("dd", {}, when(w.finished_at)))));
    return r;
  };
  const r = await load();
  let running = r.workflow.state === "running";
  view.listen((u) => {
    if (running || u.jobs.some((c) => c.workflow_id === id || c.id === "*")) load().then((x) => { running = x.workflow.state === "running"; }).catch(() => {});
  });
}

// ---- cron, rate limits, dead letter ----------------------------------------------------------------

async function cron(view) {
  view.root.append(el("h1", {}, "Cron schedules"));
  const box = el("div", { class: "panel tablewrap" });
  view.root.append(box);
  const load = async () => {
    const r = await api("/api/cron");
    box.replaceChildren(r.cron.length === 0 ? el("p", { class: "muted" }, "No cron schedules.") :
      el("table", { id: "cron" }, el("thead", {}, el("tr", {}, ["Name", "Schedule", "Kind", "Enabled", "Next run", "Last run", "Runs", ""].map((h) => el("th", {}, h)))),
        el("tbody", {}, r.cron.map((c) => el("tr", {},
          el("td", { class: "txt", title: c.description || "" }, c.name), el("td", { class: "mono" }, c.expression + (c.timezone ? " (" + c.timezone + ")" : "")),
          el("td", { class: "txt" }, c.kind), el("td", {}, c.paused ? el("span", { class: "state s-cancelled" }, "paused") : el("span", { class: "state s-completed" }, "enabled")),
          el("td", {}, c.paused ? "—" : when(c.next_run_at)), el("td", {}, c.last_job_id ? el("a", { href: "#/job/" + c.last_job_id }, when(c.last_run_at)) : when(c.last_run_at)),
          el("td", { class: "num" }, c.run_count),
          el("td", {}, actBtn(c.paused ? "Resume" : "Pause", async () => { await post("/api/cron/" + encodeURIComponent(c.name) + "/" + (c.paused ? "resume" : "pause")); load(); })))))));
  };
  await load();
}

async function ratelimits(view) {
  view.root.append(el("h1", {}, "Rate limits"));
  const box = el("div", { class: "panel tablewrap" });
  view.root.append(box);
  const bar = (used, max) => max > 0 ? el("span", {}, el("span", { class: "bartrack" }, el("span", { class: "bar", style: "width:" + Math.min(100, (100 * used) / max) + "%" })), used + " / " + max) : el("span", { class: "muted" }, used + " (no limit)");
  const load = async () => {
    const r = await api("/api/ratelimits");
    box.replaceChildren(r.rate_limits.length === 0 ? el("p", { class: "muted" }, "No rate limits.") :
      el("table", { id: "ratelimits" }, el("thead", {}, el("tr", {}, ["Key", "Active / max", "Started this window / rate", "Period", "Waiting"].map((h) => el("th", {}, h)))),
        el("tbody", {}, r.rate_limits.map((l) => el("tr", {}, el("td", { class: "mono txt" }, l.key), el("td", {}, bar(l.active, l.max_active)),
          el("td", {}, bar(l.window_count, l.rate)), el("td", {}, l.period_ms ? l.period_ms / 1000 + "s" : "—"), el("td", { class: "num" }, l.waiting))))));
  };
  await load();
  let lastLoad = Date.now();
  view.listen(() => { if (Date.now() - lastLoad >= 2000) { lastLoad = Date.now(); load().catch(() => {}); } });
}

// replayAllDeadLetter replays the whole dead letter queue in parts: one request counts (and then
// replays) at most max jobs among scan_max read, and says where it stopped ("next"), so the next
// part goes on from there until nothing is left to read.
async function replayAllDeadLetter() {
  let c = await api("/api/count?deadletter=1");
  const more = c.next ? " (more follow: the replay goes on part by part through the whole list)" : "";
  if (c.count === 0 && !c.next) { toast("the dead-letter list is empty"); return; }
  if (!confirm("Replay every dead-letter job? " + c.count + " found in the first part" + more + ".")) return;
  const total = { done: 0, failed: [], stopped: "", not_attempted: 0 };
  for (;;) {
    if (c.ids.length) {
      await bulkAll("retry", c.ids, total, "replaying");
      // The store stopped serving: what follows was not attempted, and is left for a later replay.
      if (total.stopped) break;
    }
    if (!c.next) break;
    toast("replaying: " + total.done + " done so far…");
    c = await api("/api/count?deadletter=1&cursor=" + encodeURIComponent(c.next));
  }
  bulkToast("replay", total);
}

async function deadletter(view, _, params) {
  view.root.append(el("h1", {}, "Dead letter"));
  const box = el("div", { class: "panel tablewrap" });
  view.root.append(box);
  const cursor = params.get("cursor") || "";
  const load = async () => {
    const r = await api("/api/deadletter" + (cursor ? "?cursor=" + cursor : ""));
    // A page can be empty while more follow (it reads at most 1,000 discarded jobs to fill it).
    const nextLink = r.next ? el("a", { href: "#/deadletter?cursor=" + r.next }, "Next page »") : "";
    box.replaceChildren(...(r.jobs.length === 0 ? [el("p", { class: "muted" }, r.next ? "No dead-letter job on this page." : "The dead-letter list is empty."), nextLink] : [
      el("div", { class: "bulkbar" }, actBtn("Replay the " + r.jobs.length + " on this page", async () => {
        if (!confirm("Replay " + r.jobs.length + " jobs?")) return;
        bulkToast("replay", await bulkAll("retry", r.jobs.map((j) => j.id), null, "replaying"));
        load();
      }), r.next || cursor ? actBtn("Replay every dead-letter job", async () => {
        await replayAllDeadLetter();
        load();
      }) : null),
      el("table", { id: "deadletter" }, el("thead", {}, el("tr", {}, ["Job", "Kind", "Queue", "Failed", "Error", ""].map((h) => el("th", {}, h)))),
        el("tbody", {}, r.jobs.map((j) => el("tr", { "data-id": j.id }, el("td", {}, jobLink(j.id)), el("td", { class: "txt" }, j.kind), el("td", { class: "txt" }, j.queue),
          el("td", {}, when(j.completed_at)), el("td", { class: "wrap" }, j.errors.length ? j.errors[0].message.slice(0, 160) : ""),
          el("td", {}, actBtn("Replay", async () => { await post("/api/jobs/" + j.id + "/retry"); toast("replayed"); load(); })))))),
      nextLink]));
  };
  await load();
}

window.addEventListener("hashchange", route);
connectLive();
route();
