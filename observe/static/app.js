// loopguard dashboard: plain JS, no dependencies, no build step. It reads
// the admin API next to it (api/), follows the live feed (api/events) and
// redraws the session list, the selected session's timeline and the charts.
"use strict";

const base = location.pathname.replace(/[^/]*$/, "");
const api = base + "api/";
const $ = (s) => document.querySelector(s);
const STATES = ["active", "looping", "warned", "constrained", "terminated", "recovered", "cut"];
const PALETTE = ["#b784e0", "#e0823d", "#e5b94a", "#4aa3e5", "#e0525a", "#54b97a", "#d46fa8", "#7fc7c0", "#c9a27a", "#8f9be8", "#e37f6f", "#9aa4ad"];
const catColor = {};
let selected = null;
let seq = 0;
let token = null;

// An admin token travels in the URL fragment (never sent to the server) and
// is kept for the tab only.
(function readToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("loopguard-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  token = sessionStorage.getItem("loopguard-token");
})();

function headers() {
  return token ? { Authorization: "Bearer " + token } : {};
}

async function get(path) {
  const res = await fetch(api + path, { headers: headers(), cache: "no-store" });
  if (res.status === 401) {
    const t = prompt("loopguard admin token");
    if (t) { token = t; sessionStorage.setItem("loopguard-token", t); return get(path); }
  }
  if (!res.ok) throw new Error(path + ": HTTP " + res.status);
  return res.json();
}

async function post(path, body) {
  const res = await fetch(api + path, {
    method: "POST", headers: Object.assign({ "Content-Type": "application/json" }, headers()),
    body: JSON.stringify(body || {}),
  });
  if (!res.ok) throw new Error(path + ": HTTP " + res.status);
  return res.json();
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k.nodeType ? k : String(k));
  return e;
}

function ago(t) {
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  if (s < 60) return Math.round(s) + "s";
  if (s < 3600) return Math.round(s / 60) + "m";
  return Math.round(s / 3600) + "h";
}

function clock(t) {
  return new Date(t).toLocaleTimeString([], { hour12: false });
}

function colorOf(cat) {
  if (!catColor[cat]) catColor[cat] = PALETTE[Object.keys(catColor).length % PALETTE.length];
  return catColor[cat];
}

function filters() {
  const q = new URLSearchParams();
  for (const f of ["category", "model", "state"]) {
    const v = $("#f-" + f).value;
    if (v) q.set(f, v);
  }
  return q;
}

function fillSelect(sel, values) {
  const cur = sel.value;
  const have = new Set([...sel.options].map((o) => o.value));
  for (const v of values) if (!have.has(v)) sel.append(el("option", { value: v }, v));
  sel.value = cur;
}

// ---- sessions ----

async function loadSessions() {
  const q = filters();
  q.set("limit", "200");
  const list = await get("sessions?" + q);
  const tbody = $("#sessions tbody");
  tbody.replaceChildren();
  for (const s of list.sessions) {
    const tr = el("tr", { "data-session": s.key, "data-state": s.state, class: s.key === selected ? "selected" : "",
      onclick: () => select(s.key) },
      el("td", { class: "mono", title: s.key }, short(s.key, 22)),
      el("td", {}, s.model || ""),
      el("td", {}, el("span", { class: "badge st-" + s.state }, s.state)),
      el("td", {}, s.requests), el("td", {}, s.detections), el("td", {}, s.interventions), el("td", {}, s.cuts),
      el("td", { class: "brief", title: s.brief || "" }, s.category ? el("span", { class: "badge", style: null }, s.category) : "", " ", s.brief || ""),
      el("td", { class: "muted" }, ago(s.last_seen)));
    tbody.append(tr);
  }
  $("#session-count").textContent = list.matched + " of " + list.total;
  const st = list.states || {};
  const looping = (st.looping || 0) + (st.warned || 0) + (st.constrained || 0);
  $("#totals").replaceChildren(
    el("span", {}, el("b", {}, list.total), "sessions"),
    el("span", {}, el("b", {}, looping), "looping now"),
    el("span", {}, el("b", {}, st.terminated || 0), "terminated"),
    el("span", {}, el("b", {}, st.recovered || 0), "recovered"));
}

function short(s, n) {
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

// ---- one session ----

async function select(key) {
  selected = key;
  for (const tr of document.querySelectorAll("#sessions tbody tr")) tr.classList.toggle("selected", tr.dataset.session === key);
  await loadDetail();
}

async function loadDetail() {
  if (!selected) return;
  const key = selected;
  let d;
  try {
    d = await get("sessions/" + encodeURIComponent(key));
  } catch (e) {
    $("#detail").replaceChildren(el("p", { class: "error" }, String(e.message)));
    return;
  }
  if (key !== selected) return;
  const s = d.session;
  const mode = el("select", { id: "mode" },
    el("option", { value: "" }, "mode: default"),
    el("option", { value: "enforce" }, "enforce"),
    el("option", { value: "shadow" }, "shadow"),
    el("option", { value: "off" }, "off"));
  mode.value = (d.policy && d.policy.mode) || s.mode || "";
  mode.addEventListener("change", async () => { await post("sessions/" + encodeURIComponent(key) + "/mode", { mode: mode.value }); loadDetail(); });
  const reset = el("button", { id: "reset", onclick: async () => { await post("sessions/" + encodeURIComponent(key) + "/reset"); refreshSoon(); } }, "Reset session");
  const tl = el("ul", { class: "timeline", id: "timeline" });
  for (const e of d.timeline.slice().reverse()) tl.append(entryItem(e));
  const patterns = d.policy && d.policy.patterns ? Object.values(d.policy.patterns) : [];
  $("#detail").replaceChildren(
    el("h2", { class: "mono", "data-detail": key }, key),
    el("div", { class: "summary" },
      el("span", { class: "badge st-" + s.state }, s.state),
      el("span", {}, "model ", el("b", {}, s.model || "?")),
      el("span", {}, el("b", {}, s.requests), " requests"),
      el("span", {}, el("b", {}, s.detections), " detections"),
      el("span", {}, el("b", {}, s.interventions), " interventions"),
      el("span", {}, el("b", {}, s.cuts), " cuts"),
      el("span", {}, el("b", {}, s.recovered), " recovered / ", el("b", {}, s.looped_again), " looped again")),
    el("div", { class: "controls" }, reset, mode,
      patterns.length ? el("span", { class: "muted" }, patterns.length + " pattern(s) on the ladder") : null),
    tl);
}

function entryItem(e) {
  const what = el("span", { class: "what" });
  const cls = ["kind-" + e.kind];
  switch (e.kind) {
    case "request":
      what.append(el("span", { class: "muted" }, "step " + (e.steps || 0)));
      if (e.transport === "websocket") what.append(el("span", { class: "muted", title: "a turn on a Responses WebSocket" }, "websocket"));
      if (e.tool) what.append(el("span", { class: "mono" }, e.tool + "()"), el("span", { class: "muted mono", title: "call fingerprint" }, (e.fingerprint || "").slice(0, 8)));
      if (e.category) {
        cls.push("k-detect");
        what.append(el("span", { class: "badge", "data-category": e.category }, e.category + " " + Math.round((e.confidence || 0) * 100) + "%"));
      }
      if (e.action && e.action !== "none") {
        if (e.action !== "shadow") cls.push("k-intervention");
        what.append(el("span", { class: "badge a-" + e.action, "data-action": e.action },
          e.action + (e.action === "shadow" && e.would ? " (would " + e.would + ")" : "") + (e.level >= 0 ? " L" + e.level : "") + (e.reapplied ? " again" : "")));
      }
      if (e.budget) {
        // The session budget: its warning share, or BUDGET_EXCEEDED.
        const b = e.budget;
        what.append(el("span", { class: "badge k-budget", "data-budget": b.exceeded ? "exceeded" : "warning" },
          (b.exceeded ? "budget exceeded " : "budget ") + (b.used || 0) + "/" + b.limit + " " + b.kind));
      }
      if (e.brief) what.append(el("span", { class: "mono muted" }, e.brief));
      break;
    case "cut":
      what.append(el("span", { class: "badge k-cut", "data-action": "cut" }, "stream cut"), el("span", {}, e.category),
        el("span", { class: "muted" }, "at byte " + (e.offset || 0) + ", ~" + (e.tokens_saved || 0) + " tokens saved"));
      break;
    case "recovery":
      what.append(el("span", { class: "badge o-" + e.outcome, "data-outcome": e.outcome }, e.outcome.replace("_", " ")),
        el("span", {}, e.category + (e.level >= 0 ? " L" + e.level : "")), el("span", { class: "mono muted" }, e.brief || ""));
      break;
    case "judge": {
      // A check of the optional judge: its outcome, and for a stuck
      // verdict what it saw repeating (counted on the session's next turn).
      const outcome = e.outcome || "?";
      what.append(el("span", { class: "badge j-" + outcome, "data-outcome": outcome }, "judge " + outcome.replace("_", " ")),
        el("span", { class: "muted" }, "step " + (e.steps || 0)));
      if (e.category) {
        cls.push("k-detect");
        what.append(el("span", { class: "badge", "data-category": e.category }, e.category + " " + Math.round((e.confidence || 0) * 100) + "%"));
      }
      if (e.brief) what.append(el("span", { class: "mono muted" }, e.brief));
      break;
    }
    default:
      what.append(el("span", { class: "badge" }, "admin"), el("span", {}, e.note || ""));
  }
  // Replicas sharing a redis store show each other's entries: say whose.
  if (e.replica) what.append(el("span", { class: "muted mono replica", "data-replica": e.replica, title: "replica" }, "@" + e.replica));
  return el("li", { class: cls.join(" "), "data-kind": e.kind, "data-seq": e.seq }, el("span", { class: "muted mono" }, clock(e.at)), what);
}

// ---- charts ----

async function loadStats() {
  const q = filters();
  q.delete("state");
  const st = await get("stats?" + q);
  fillSelect($("#f-category"), st.categories || []);
  fillSelect($("#f-model"), st.models || []);
  const buckets = st.buckets.slice(-30);
  stacked($("#c-detections"), buckets, (b) => b.detections_by || {});
  stacked($("#c-cuts"), buckets, (b) => Object.assign({}, prefixed(b.cuts_by, "cut "), b.terminations ? { terminations: b.terminations } : {}));
  const rec = $("#recovery");
  rec.replaceChildren();
  if (!st.recovery || !st.recovery.length) rec.append(el("p", { class: "muted" }, "No intervention outcomes yet."));
  for (const r of st.recovery || []) {
    const n = r.recovered + r.looped_again;
    const bar = el("div", { class: "bar" }, el("span"));
    bar.firstChild.style.width = Math.round(r.rate * 100) + "%";
    rec.append(el("div", { class: "row", "data-recovery": r.category + ":" + r.level },
      el("span", {}, r.category + (r.level >= 0 ? " L" + r.level : "")), bar, el("span", {}, Math.round(r.rate * 100) + "% of " + n)));
  }
  const legend = $("#legend");
  legend.replaceChildren();
  for (const [c, col] of Object.entries(catColor)) {
    const sw = el("span");
    sw.style.background = col;
    legend.append(sw, c);
  }
}

function prefixed(m, p) {
  const out = {};
  for (const [k, v] of Object.entries(m || {})) out[p + k] = v;
  return out;
}

function stacked(canvas, buckets, series) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
  canvas.width = w * dpr;
  canvas.height = h * dpr;
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const data = buckets.map(series);
  let maxv = 1;
  for (const d of data) maxv = Math.max(maxv, Object.values(d).reduce((a, b) => a + b, 0));
  const left = 28, bottom = 16, top = 6;
  const bw = (w - left) / Math.max(1, data.length);
  g.fillStyle = "#8a96a3";
  g.font = "10px system-ui";
  g.fillText(String(maxv), 2, top + 8);
  g.fillText("0", 2, h - bottom);
  g.strokeStyle = "#2a333d";
  g.beginPath();
  g.moveTo(left, h - bottom + 0.5);
  g.lineTo(w, h - bottom + 0.5);
  g.stroke();
  data.forEach((d, i) => {
    let y = h - bottom;
    for (const k of Object.keys(d).sort()) {
      const bh = (d[k] / maxv) * (h - bottom - top);
      g.fillStyle = colorOf(k.replace(/^cut /, ""));
      g.fillRect(left + i * bw + 1, y - bh, Math.max(1, bw - 2), bh);
      y -= bh;
    }
  });
  if (buckets.length) {
    g.fillStyle = "#8a96a3";
    g.fillText(clock(buckets[0].start).slice(0, 5), left, h - 3);
    const last = clock(buckets[buckets.length - 1].start).slice(0, 5);
    g.fillText(last, w - g.measureText(last).width - 2, h - 3);
  }
}

// ---- live updates ----

let timer = null;
function refreshSoon() {
  if (timer) return;
  timer = setTimeout(async () => {
    timer = null;
    await Promise.all([loadSessions(), loadDetail(), loadStats()]).catch(() => {});
  }, 300);
}

// follow reads the SSE feed with fetch (EventSource cannot send the bearer
// token) and refreshes what the new entries touch.
async function follow() {
  const live = $("#live");
  for (;;) {
    try {
      const res = await fetch(api + "events?since=" + seq, { headers: headers(), cache: "no-store" });
      if (!res.ok || !res.body) throw new Error("HTTP " + res.status);
      live.textContent = "live";
      live.className = "live on";
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          for (const line of block.split("\n")) {
            if (line.startsWith("id: ")) seq = Math.max(seq, Number(line.slice(4)));
          }
          if (block.includes("\ndata: ") || block.startsWith("data: ")) refreshSoon();
        }
      }
    } catch (e) {
      // fall through to the retry below; polling keeps the page current
    }
    live.textContent = "reconnecting";
    live.className = "live off";
    await new Promise((r) => setTimeout(r, 2000));
  }
}

for (const s of STATES) $("#f-state").append(el("option", { value: s }, s));
for (const f of ["category", "model", "state"]) $("#f-" + f).addEventListener("change", refreshSoon);
refreshSoon();
setInterval(refreshSoon, 10000); // charts move with the clock even when nothing happens
follow();
