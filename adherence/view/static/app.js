// adherence view: the list of conversations (worst first), the distributions, and one conversation at a time.
// Every text from the data is set with textContent (never parsed as HTML).
"use strict";

const state = { offset: 0, limit: 50, rows: [], total: 0, current: -1 };
const $ = (sel) => document.querySelector(sel);
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function svgEl(tag, attrs = {}, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function fmt(v, digits = 4) {
  if (v === null || v === undefined) return "–";
  return typeof v === "number" ? v.toFixed(digits) : String(v);
}

function pct(v) {
  return v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%";
}

function filterQuery() {
  const p = new URLSearchParams();
  for (const [k, v] of new FormData($("#filters"))) if (v !== "") p.set(k, v);
  return p;
}

async function getJSON(path, params) {
  const r = await fetch(path + (params ? "?" + params.toString() : ""));
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function fill(select, values, label) {
  for (const [v, n] of values) {
    const text = label ? label(v) : v;
    select.append(el("option", { value: v }, `${text.length > 60 ? text.slice(0, 57) + "..." : text} (${n})`));
  }
}

async function loadSummary() {
  const s = await getJSON("/api/summary");
  $("#sources").textContent =
    `${s.turns.toLocaleString()} turns, ${s.conversations.toLocaleString()} conversations from ` +
    s.sources.map((x) => x.path).join(", ");
  const f = $("#filters");
  fill(f.elements.status, s.statuses);
  fill(f.elements.label, s.labels);
  state.labelsFile = s.labels_file || null;
  document.querySelectorAll(".labels-col").forEach((th) => { th.hidden = !state.labelsFile; });
  fill(f.elements.method, s.methods);
  fill(f.elements.role, s.roles);
}

async function loadList() {
  const p = filterQuery();
  p.set("offset", state.offset);
  p.set("limit", state.limit);
  const body = await getJSON("/api/conversations", p);
  state.rows = body.rows;
  state.total = body.total;
  const tbody = $("#conversations tbody");
  tbody.replaceChildren();
  body.rows.forEach((r, i) => {
    const tr = el("tr", { "data-index": i, "data-testid": "conversation-row" });
    tr.append(
      el("td", {}, r.conversation_id),
      el("td", {}, r.turns),
      el("td", { class: r.mean_score !== null && r.mean_score < 0.5 ? "bad" : "" }, fmt(r.mean_score)),
      el("td", { class: r.violations > 0 ? "bad" : "" }, pct(r.violations)),
      el("td", {}, r.problems + (r.abstained ? ` (+${r.abstained} abstained)` : "")),
      ...(state.labelsFile ? [el("td", { "data-testid": "labels-cell",
        class: r.agreement !== null && r.agreement !== undefined && r.agreement < 1 ? "bad" : "" },
        r.labelled === undefined ? "" : `${r.labelled}` + (r.agreement === null || r.agreement === undefined ? ""
          : ` (${pct(r.agreement)})`))] : []),
      el("td", {}, r.method || ""),
      el("td", { class: "rolecell", title: r.role || "" }, r.role || ""),
    );
    tr.addEventListener("click", () => openAt(i));
    tbody.append(tr);
  });
  const last = Math.min(state.offset + body.rows.length, state.total);
  $("#count").textContent = `${state.total.toLocaleString()} conversations match`;
  $("#page").textContent = state.total ? `${state.offset + 1}–${last} of ${state.total.toLocaleString()}` : "";
  $("#prev-page").disabled = state.offset === 0;
  $("#next-page").disabled = last >= state.total;
}

function bars(svg, items, { value, label, short = label, max = 1, color = "#3949ab" }) {
  svg.replaceChildren();
  const w = +svg.getAttribute("width"), h = +svg.getAttribute("height");
  const n = Math.max(items.length, 1), bw = (w - 40) / n;
  items.forEach((it, i) => {
    const v = value(it) || 0, bh = ((h - 40) * v) / (max || 1);
    const r = svgEl("rect", { x: 30 + i * bw, y: h - 25 - bh, width: Math.max(bw - 2, 1), height: bh, fill: color });
    r.append(svgEl("title", {}, `${label(it)}: ${typeof v === "number" ? v.toFixed(3) : v}`));
    svg.append(r);
    if (bw >= 14) svg.append(svgEl("text", { x: 30 + i * bw + 1, y: h - 12 }, short(it).slice(0, Math.floor(bw / 6))));
  });
  svg.append(svgEl("line", { x1: 30, x2: w - 10, y1: h - 25, y2: h - 25, stroke: "#999" }));
  svg.append(svgEl("text", { x: 0, y: 12 }, max.toFixed ? max.toFixed(2) : max));
}

async function loadDistributions() {
  const d = await getJSON("/api/distributions", filterQuery());
  const hist = $("#histogram");
  hist.replaceChildren();
  const labels = Object.keys(d.histogram);
  const colors = ["#3949ab", "#c62828", "#2e7d32", "#f9a825", "#6a1b9a", "#00838f"];
  const w = +hist.getAttribute("width"), h = +hist.getAttribute("height");
  const peak = Math.max(1, ...labels.flatMap((l) => d.histogram[l]));
  labels.forEach((l, k) => {
    const counts = d.histogram[l], bw = (w - 40) / counts.length;
    const pts = counts.map((c, i) => `${30 + (i + 0.5) * bw},${h - 25 - ((h - 45) * c) / peak}`).join(" ");
    hist.append(svgEl("polyline", { points: pts, fill: "none", stroke: colors[k % colors.length], "stroke-width": 2 }));
    const key = svgEl("text", { x: w - 150, y: 14 + 12 * k }, l.slice(0, 24));
    key.style.fill = colors[k % colors.length];
    hist.append(key);
  });
  hist.append(svgEl("line", { x1: 30, x2: w - 10, y1: h - 25, y2: h - 25, stroke: "#999" }));
  if (d.bins.lo !== null) {
    hist.append(svgEl("text", { x: 30, y: h - 10 }, fmt(d.bins.lo, 3)));
    hist.append(svgEl("text", { x: w - 40, y: h - 10 }, fmt(d.bins.hi, 3)));
  }
  bars($("#by-role"), d.by_role.map((r, i) => ({ ...r, n: i + 1 })), {
    value: (r) => r.violations, label: (r) => `role ${r.n} (${r.turns} turns): ${r.role || "(no role)"}`,
    short: (r) => String(r.n), color: "#c62828",
  });
  bars($("#by-turn"), d.by_turn, {
    value: (r) => r.violations, label: (r) => `turn ${r.turn_index}`, short: (r) => String(r.turn_index), color: "#6a1b9a",
  });
}

function fact(parent, name, value) {
  if (value === null || value === undefined || value === "") return;
  const s = el("span");
  s.append(el("b", {}, name + " "), document.createTextNode(String(value)));
  parent.append(s);
}

async function showConversation(source, id) {
  const c = await getJSON("/api/conversation", new URLSearchParams({ source, id }));
  $("#list-view").hidden = true;
  $("#conversation-view").hidden = false;
  $("#conversation-title").textContent = `conversation ${c.conversation_id}`;
  $("#role").textContent = c.role || "(no role)";
  const pos = state.current >= 0 ? state.offset + state.current + 1 : null;
  $("#position").textContent = pos ? `${pos} of ${state.total.toLocaleString()}` : "";
  const ol = $("#turns");
  ol.replaceChildren();
  for (const t of c.turns) {
    const kind = t.status !== "ok" ? "problem" : t.prediction === 0 ? "violation" : t.prediction === 1 ? "adherent" : "";
    const li = el("li", { class: kind, "data-testid": "turn" });
    li.append(el("div", { class: "who" }, `turn ${t.turn_index} · user`), el("div", { class: "text" }, t.user || ""));
    li.append(el("div", { class: "who" }, "assistant"), el("div", { class: "text" }, t.assistant || ""));
    const facts = el("div", { class: "facts" });
    fact(facts, "method", t.method);
    fact(facts, "score", t.score === null ? null : fmt(t.score));
    fact(facts, "prediction", t.prediction === 1 ? "adherent" : t.prediction === 0 ? "violation" : null);
    fact(facts, "status", t.status);
    fact(facts, "label", t.label);
    fact(facts, "calibrated", t.calibrated_score === null ? null : fmt(t.calibrated_score));
    fact(facts, "decided by stage", t.decided_by);
    for (const [k, v] of Object.entries(t)) if (/^stage\d+_score$/.test(k) && v !== null) fact(facts, k, fmt(v));
    fact(facts, "error", t.error);
    fact(facts, "reason", t.reason);
    li.append(facts);
    ol.append(li);
  }
}

function openAt(i) {
  const r = state.rows[i];
  if (!r) return;
  state.current = i;
  location.hash = `#c/${r.source}/${encodeURIComponent(r.conversation_id)}`;
}

async function step(delta) {
  let i = state.current + delta;
  if (i < 0 && state.offset > 0) {
    state.offset = Math.max(0, state.offset - state.limit);
    await loadList();
    i = state.rows.length - 1;
  } else if (i >= state.rows.length && state.offset + state.rows.length < state.total) {
    state.offset += state.limit;
    await loadList();
    i = 0;
  }
  if (i >= 0 && i < state.rows.length) openAt(i);
}

async function route() {
  const m = location.hash.match(/^#c\/(\d+)\/(.*)$/);
  if (m) {
    const id = decodeURIComponent(m[2]);
    const i = state.rows.findIndex((r) => String(r.source) === m[1] && r.conversation_id === id);
    state.current = i;
    await showConversation(m[1], id);
  } else {
    $("#conversation-view").hidden = true;
    $("#list-view").hidden = false;
  }
}

let timer = null;
function refresh() {
  clearTimeout(timer);
  timer = setTimeout(async () => {
    state.offset = 0;
    await Promise.all([loadList(), loadDistributions()]);
    document.body.dataset.ready = "1";
  }, 150);
}

document.addEventListener("DOMContentLoaded", async () => {
  $("#filters").addEventListener("input", () => {
    document.body.dataset.ready = "0";
    refresh();
  });
  $("#filters").addEventListener("submit", (e) => e.preventDefault());
  $("#prev-page").addEventListener("click", async () => {
    state.offset = Math.max(0, state.offset - state.limit);
    await loadList();
  });
  $("#next-page").addEventListener("click", async () => {
    state.offset += state.limit;
    await loadList();
  });
  $("#back").addEventListener("click", (e) => {
    e.preventDefault();
    location.hash = "";
  });
  document.addEventListener("keydown", (e) => {
    if ($("#conversation-view").hidden || e.target.closest("form")) return;
    if (e.key === "ArrowRight" || e.key === "j") step(1);
    else if (e.key === "ArrowLeft" || e.key === "k") step(-1);
    else if (e.key === "Escape") location.hash = "";
  });
  window.addEventListener("hashchange", route);
  await loadSummary();
  await Promise.all([loadList(), loadDistributions()]);
  await route();
  document.body.dataset.ready = "1";
});
