// The labelling page: one sampled turn at a time; keys a / v / s label it (adherent, violation, skip), b or the
// left arrow goes back, u undoes the last label. Each label is on disk before the page moves on.
"use strict";
const token = document.querySelector('meta[name="adherence-token"]').content;
let state = null;
let index = 0;
const undoStack = [];

function text(id, value) { document.getElementById(id).textContent = value == null ? "" : String(value); }

async function getJSON(url) {
  const r = await fetch(url, {headers: {"Accept": "application/json"}});
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function showState(s) {
  state = s;
  text("progress", `${s.labelled} of ${s.size} sampled turns labelled` + (s.skipped ? `, ${s.skipped} skipped` : "") +
    ` · labeller ${s.labeller} · ${s.design} sample (seed ${s.seed}) of ${s.population} turns · ${s.file}`);
  const e = s.estimate;
  text("estimate", e ? `adherent share now: ${e.estimate.toFixed(3)} [${e.ci_low.toFixed(3)}, ${e.ci_high.toFixed(3)}] ` +
    `(${e.how}, ${e.n} labels)` : "adherent share: needs two labels");
  const a = s.agreement;
  if (a && a.n_shared) {
    const parts = [`${a.labellers.length} labellers on ${a.n_shared} shared turns`];
    if (a.percent_agreement != null) parts.push(`agreement ${a.percent_agreement.toFixed(3)}`);
    if (a.gwet_ac1 != null) parts.push(`Gwet's AC1 ${a.gwet_ac1.toFixed(3)}`);
    if (a.fleiss_kappa != null) parts.push(`Fleiss' kappa ${a.fleiss_kappa.toFixed(3)}`);
    if (a.cohen_kappa != null) parts.push(`Cohen's kappa ${a.cohen_kappa.toFixed(3)}`);
    text("agreement", parts.join(" · "));
  } else {
    text("agreement", "");
  }
}

async function show(i) {
  if (i >= state.size) {
    index = state.size;
    const skipped = state.skipped ? ` ${state.skipped} skipped (left out of every estimate; b goes back to them).` : "";
    text("where", `All ${state.size} sampled turns are done: ${state.labelled} labelled.${skipped}`);
    for (const id of ["role", "user", "assistant", "facts"]) text(id, "");
    text("next", (state.next || []).join("\n"));
    document.getElementById("finished").hidden = !(state.next || []).length;
    document.getElementById("turn-now").hidden = true;
    document.getElementById("role-box").hidden = true;
    document.getElementById("history").replaceChildren();
    return;
  }
  document.getElementById("finished").hidden = true;
  document.getElementById("turn-now").hidden = false;
  document.getElementById("role-box").hidden = false;
  index = Math.max(0, i);
  const t = await getJSON(`/api/label/turn?index=${index}`);
  text("where", `turn ${index + 1} of ${state.size}: conversation ${t.conversation_id}, turn ${t.turn_index}`);
  text("role", t.role);
  const hist = document.getElementById("history");
  hist.replaceChildren();
  for (const h of t.history) {
    const li = document.createElement("li");
    for (const [who, value] of [["user", h.user], ["assistant", h.assistant]]) {
      const w = document.createElement("p"); w.className = "who"; w.textContent = who;
      const p = document.createElement("p"); p.className = "text"; p.textContent = value || "";
      li.append(w, p);
    }
    hist.append(li);
  }
  text("user", t.user);
  text("assistant", t.assistant);
  const score = t.blind ? "hidden while labelling (--show-scores shows it)"
    : (t.score == null ? "none" : Number(t.score).toFixed(4));
  text("facts", `score ${score}` + (t.method ? ` (${t.method})` : "") + (t.label ? ` · your label: ${t.label}` : ""));
}

async function post(label) {
  const r = await fetch("/api/label", {
    method: "POST",
    headers: {"Content-Type": "application/json", "X-Adherence-Token": token},
    body: JSON.stringify({index, label}),
  });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

async function label(value) {
  if (index >= state.size) return;
  const s = await post(value);
  undoStack.push(index);
  showState(s);
  text("status", `saved: turn ${index + 1} is ${value}`);
  await show(index + 1);
}

async function undo() {
  if (!undoStack.length) { text("status", "nothing to undo"); return; }
  const i = undoStack.pop();
  index = i;
  showState(await post(null));
  text("status", `undone: turn ${i + 1}`);
  await show(i);
}

// One action at a time: a key pressed while a label is being saved (or a turn loaded) is dropped, never applied to
// the turn the page is about to leave -- one label per turn, none skipped.
let busy = false;

async function act(fn) {
  if (busy) return;
  busy = true;
  try { await fn(); } catch (err) { text("status", `error: ${err.message}`); } finally { busy = false; }
}

document.addEventListener("keydown", (ev) => {
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const k = ev.key;
  if (k === "a") act(() => label("adherent"));
  else if (k === "v") act(() => label("violation"));
  else if (k === "s") act(() => label("skip"));
  else if (k === "b" || k === "ArrowLeft") act(() => show(index - 1));
  else if (k === "ArrowRight") act(() => show(index + 1));
  else if (k === "u") act(undo);
  else return;
  ev.preventDefault();
});
for (const b of document.querySelectorAll("button[data-label]")) {
  b.addEventListener("click", () => act(() => label(b.dataset.label)));
}
document.getElementById("b-back").addEventListener("click", () => act(() => show(index - 1)));
document.getElementById("b-next").addEventListener("click", () => act(() => show(index + 1)));
document.getElementById("b-undo").addEventListener("click", () => act(undo));

act(async () => {
  showState(await getJSON("/api/label/state"));
  await show(state.position);
});
