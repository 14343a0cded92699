"use strict";
// pinpoint inspect: one page, no network beyond its own server (none at all when exported). Data comes from the
// <script id="pinpoint-data"> block; in a served page, details and live updates come from the same server.
const DATA = JSON.parse(document.getElementById("pinpoint-data").textContent);
const DETAILS = DATA.details || {};
const PAGE = 100; // steps, events and messages drawn at a time: a 10,000-event trajectory draws 100 and waits
const LOW_P = 0.5; // a generated token below this probability is "low confidence"
const COLORS = ["#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#ec4899", "#14b8a6", "#84cc16", "#f97316", "#64748b"];

// -- small helpers ---------------------------------------------------------------------------------------------------
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
function svg(tag, attrs, ...kids) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const kid of kids.flat(Infinity)) if (kid !== null && kid !== undefined) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return el;
}
const fmt = (v, d = 2) => (v === null || v === undefined || v === "") ? "–" : (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(d)) : String(v));
const secs = (v) => (typeof v === "number" ? v.toFixed(v < 10 ? 2 : 1) + " s" : "–");
const card = (k, v, id) => h("div", {class: "card", id}, h("div", {class: "k"}, k), h("div", {class: "v"}, v));
function folded(text, limit = 1500, lines = 25) {
  text = text === null || text === undefined ? "" : String(text);
  if (text.length <= limit && text.split("\n").length <= lines) return h("pre", {}, text || "(empty)");
  const head = text.split("\n").slice(0, 8).join("\n").slice(0, 600);
  return h("details", {class: "fold"}, h("summary", {}, h("span", {class: "muted"}, `${text.length} characters, ${text.split("\n").length} lines (folded) `), h("code", {}, head.split("\n")[0].slice(0, 120))), h("pre", {}, text));
}
function diffView(patch) {
  if (!patch || !patch.trim()) return h("p", {class: "muted"}, "(empty patch)");
  return h("div", {class: "diff code"}, patch.split("\n").map((l) => h("div", {class: l.startsWith("+++") || l.startsWith("---") || l.startsWith("diff ") ? "file" : l.startsWith("@@") ? "hunk" : l.startsWith("+") ? "add" : l.startsWith("-") ? "del" : ""}, l || " ")));
}
function tip(el, text) {
  el.addEventListener("mouseenter", (e) => { const t = document.getElementById("tip"); t.textContent = text; t.hidden = false; move(e); });
  el.addEventListener("mousemove", move);
  el.addEventListener("mouseleave", () => { document.getElementById("tip").hidden = true; });
  function move(e) { const t = document.getElementById("tip"); t.style.left = Math.min(e.clientX + 14, innerWidth - 580) + "px"; t.style.top = (e.clientY + 14) + "px"; }
}

// -- data: details from the export, else from the server ---------------------------------------------------------
const cache = {};
async function detail(key) {
  if (DETAILS[key]) return DETAILS[key];
  if (cache[key]) return cache[key];
  if (!DATA.live) return null;
  const r = await fetch("api/detail?key=" + encodeURIComponent(key));
  if (!r.ok) return null;
  return (cache[key] = await r.json());
}

// -- router ----------------------------------------------------------------------------------------------------------
function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "t") return {kind: "t", key: parts.slice(1, -1).join("/") || parts[1], view: parts.length > 2 ? parts[parts.length - 1] : "timeline"};
  if (parts[0] === "rl") return {kind: "rl", key: parts.slice(1).join("/")};
  return {kind: "batch"};
}
const tHref = (key, view) => "#/t/" + key.split("/").map(encodeURIComponent).join("/") + "/" + (view || "timeline");
let renderSeq = 0;
async function render() {
  const seq = ++renderSeq;
  const r = route();
  const app = document.getElementById("app");
  document.getElementById("where").textContent = DATA.title || "";
  if (r.kind === "batch" && DATA.single && !location.hash) { location.replace(tHref(DATA.single)); return; }
  let view;
  if (r.kind === "t") view = await trajectoryPage(r.key, r.view);
  else if (r.kind === "rl") view = await episodePage(r.key);
  else view = batchPage();
  if (seq !== renderSeq) return;
  app.replaceChildren(view);
  const focus = document.querySelector("#files tr.focus");
  if (focus) focus.scrollIntoView({block: "center"}); // the Localization tab opens on its top suspect
  window.__pinpointRendered = performance.now();
  document.body.dataset.ready = String(seq);
}
window.addEventListener("hashchange", render);

// -- batch -----------------------------------------------------------------------------------------------------------
const BATCH_COLS = [["name", "name"], ["run", "run"], ["model", "model"], ["status", "status"], ["resolved", "resolved"],
  ["infra", "infra failure"], ["edited_lines", "edited lines"], ["f1", "F1"], ["cost_usd", "cost $"], ["elapsed_s", "wall s"],
  ["steps", "steps"], ["tokens", "tokens"], ["hit_line", "gold line rank"], ["candidates", "candidates"]];
// a `fix` run is judged by its own test command: no grading or gold columns, its tests' outcome instead
const GRADING_COLS = new Set(["resolved", "infra", "f1", "hit_line"]);
function batchCols(fixOnly) {
  if (!fixOnly) return BATCH_COLS;
  const cols = BATCH_COLS.filter(([k]) => !GRADING_COLS.has(k));
  cols.splice(4, 0, ["tests_ok", "tests pass"]);
  return cols;
}
const RL_COLS = [["task_id", "task"], ["sample", "sample"], ["status", "status"], ["reward", "reward"], ["reward_kind", "reward kind"],
  ["reason", "null reason"], ["steps", "steps"], ["prompt_tokens", "prompt tok"], ["response_tokens", "response tok"],
  ["trained_tokens", "masked-in tok"], ["logprobs", "logprobs"], ["llm_s", "llm s"], ["env_s", "env s"], ["file", "file"]];

const TABLES = {}; // sort and filter per table, kept when a live update redraws the page
function sortableTable(id, rows, cols, link) {
  const state = TABLES[id] = TABLES[id] || {key: null, asc: true, filter: ""};
  const body = h("tbody");
  const count = h("span", {class: "muted", id: id + "-count"});
  const heads = cols.map(([k, label]) => h("th", {"data-key": k, onclick: () => { state.asc = state.key === k ? !state.asc : true; state.key = k; draw(); }}, label));
  const cell = (row, k) => {
    const v = row[k];
    if (k === cols[0][0] && link(row)) return h("td", {}, h("a", {href: link(row)}, fmt(v)));
    if (k === "cost_usd" && row.trajectory && typeof v !== "number") return h("td", {class: "muted"}, "unknown");
    if (k === "resolved" || k === "infra" || k === "tests_ok") return h("td", {class: v === true ? (k === "infra" ? "fail" : "pass") : v === false ? "" : "muted"}, v === true ? "yes" : v === false ? "no" : "–");
    return h("td", {class: typeof v === "number" ? "num" : ""}, fmt(v, k === "cost_usd" ? 4 : 2));
  };
  function draw() {
    const f = state.filter.toLowerCase();
    let shown = rows.filter((r) => !f || cols.some(([k]) => String(r[k] ?? "").toLowerCase().includes(f)));
    if (state.key) {
      const k = state.key, s = state.asc ? 1 : -1;
      shown = [...shown].sort((a, b) => {
        const x = a[k], y = b[k];
        if (x === y) return 0; if (x === null || x === undefined) return 1; if (y === null || y === undefined) return -1;
        return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * s;
      });
    }
    heads.forEach((th) => { th.className = th.dataset.key === state.key ? "sorted" + (state.asc ? " asc" : "") : ""; });
    body.replaceChildren(...shown.map((r) => h("tr", {"data-key": r.key}, cols.map(([k]) => cell(r, k)))));
    count.textContent = `${shown.length} of ${rows.length}`;
  }
  const filter = h("input", {type: "search", id: id + "-filter", placeholder: "filter (any column)", value: state.filter || null, oninput: (e) => { state.filter = e.target.value; draw(); }});
  draw();
  return h("div", {}, h("div", {class: "toolbar"}, filter, count), h("table", {class: "grid", id}, h("thead", {}, h("tr", {}, heads)), body));
}

function barPlot(title, items, opts = {}) { // items: [{label, value, note}]
  const W = 360, bar = 18, left = opts.left || 120, H = 20 + items.length * (bar + 4);
  const max = opts.max || Math.max(1e-9, ...items.map((d) => d.value));
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title});
  items.forEach((d, i) => {
    const y = 6 + i * (bar + 4), w = Math.max(1, (W - left - 50) * d.value / max);
    s.append(svg("text", {x: left - 4, y: y + 13, "text-anchor": "end"}, d.label.length > 22 ? d.label.slice(0, 21) + "…" : d.label),
      svg("rect", {x: left, y, width: w, height: bar, fill: d.color || COLORS[0], rx: 2}, svg("title", {}, `${d.label}: ${d.note || fmt(d.value)}`)),
      svg("text", {x: left + w + 4, y: y + 13}, d.note || fmt(d.value)));
  });
  return h("div", {class: "plot", "data-plot": opts.id || title}, h("h4", {}, title), items.length ? s : h("p", {class: "muted"}, opts.empty || "no data"));
}
function histPlot(title, hist, unit, id) {
  if (!hist.counts || !hist.counts.length) return h("div", {class: "plot", "data-plot": id}, h("h4", {}, title), h("p", {class: "muted"}, "no data"));
  const W = 360, H = 150, n = hist.counts.length, max = Math.max(...hist.counts), bw = (W - 40) / n;
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title});
  hist.counts.forEach((c, i) => {
    const bh = (H - 40) * c / max;
    s.append(svg("rect", {x: 30 + i * bw, y: H - 25 - bh, width: bw - 2, height: bh, fill: COLORS[2]}, svg("title", {}, `${fmt(hist.edges[i])}–${fmt(hist.edges[i + 1])} ${unit}: ${c}`)));
    if (c) s.append(svg("text", {x: 30 + i * bw + bw / 2 - 3, y: H - 28 - bh}, c));
  });
  s.append(svg("text", {x: 30, y: H - 8}, `${fmt(hist.edges[0])} ${unit}`), svg("text", {x: W - 10, y: H - 8, "text-anchor": "end"}, `${fmt(hist.edges[n])} ${unit}`));
  return h("div", {class: "plot", "data-plot": id}, h("h4", {}, title), s);
}
function curvePlot(title, ks, series, id, note) { // series: {name: [fractions per k]}
  const W = 360, H = 170, L = 34, B = 24, names = Object.keys(series).filter((k) => series[k].length);
  if (!names.length) return h("div", {class: "plot", "data-plot": id}, h("h4", {}, title), h("p", {class: "muted"}, note || "no gold known"));
  const x = (i) => L + i * (W - L - 20) / Math.max(1, ks.length - 1), y = (v) => H - B - v * (H - B - 10);
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title});
  [0, 0.5, 1].forEach((v) => s.append(svg("line", {x1: L, x2: W - 20, y1: y(v), y2: y(v), stroke: "#e5e7eb"}), svg("text", {x: 4, y: y(v) + 3}, v.toFixed(1))));
  ks.forEach((k, i) => s.append(svg("text", {x: x(i) - 3, y: H - 8}, "@" + k)));
  names.forEach((name, j) => {
    const pts = series[name].map((v, i) => `${x(i)},${y(v)}`).join(" ");
    s.append(svg("polyline", {points: pts, fill: "none", stroke: COLORS[j], "stroke-width": 2}));
    series[name].forEach((v, i) => s.append(svg("circle", {cx: x(i), cy: y(v), r: 3, fill: COLORS[j]}, svg("title", {}, `${name} Hit@${ks[i]}: ${v.toFixed(2)}`))));
    s.append(svg("text", {x: W - 120, y: 14 + j * 12, fill: COLORS[j]}, name));
  });
  return h("div", {class: "plot", "data-plot": id}, h("h4", {}, title), s, note ? h("div", {class: "muted"}, note) : null);
}

function costSum(rows) { // a model with no price has an unknown cost, never $0
  const known = rows.filter((r) => typeof r.cost_usd === "number"), unknown = rows.filter((r) => r.trajectory && typeof r.cost_usd !== "number");
  if (!known.length) return "unknown";
  return "$" + known.reduce((a, r) => a + r.cost_usd, 0).toFixed(4) + (unknown.length ? ` (+ ${unknown.length} unknown)` : "");
}
function batchPage() {
  const rows = DATA.rows || [], p = DATA.plots || {}, out = h("div", {id: "batch"});
  document.getElementById("crumbs").replaceChildren("runs");
  if (rows.length) {
    const graded = rows.filter((r) => r.resolved !== null && r.resolved !== undefined);
    const resolved = graded.filter((r) => r.resolved).length;
    const f1s = rows.map((r) => r.f1).filter((v) => typeof v === "number");
    // `fix` runs are judged by their own test command, never graded against a reference: no grading cards for them
    const fixOnly = rows.every((r) => r.fix), tested = rows.filter((r) => typeof r.tests_ok === "boolean");
    const passing = tested.filter((r) => r.tests_ok).length;
    out.append(h("h2", {}, "Batch"), h("div", {class: "cards"}, card("instances", rows.length, "n-instances"),
      ...(fixOnly ? [] : [card("graded", graded.length),
        card("resolved", graded.length ? `${resolved} (${(100 * resolved / graded.length).toFixed(0)}%)` : "–", "n-resolved"),
        card("mean edit F1", f1s.length ? (f1s.reduce((a, b) => a + b, 0) / f1s.length).toFixed(2) : "–")]),
      ...(tested.length ? [card("tests pass on the final patch", `${passing} of ${tested.length}`, "n-tests-pass")] : []),
      card("cost", costSum(rows), "n-cost"),
      card("wall", secs(rows.reduce((a, r) => a + (r.elapsed_s || 0), 0)))));
    out.append(h("div", {class: "plots"},
      fixOnly ? null : barPlot("resolve rate per repository", (p.resolve || []).map((d) => ({label: d.repo, value: d.resolved / d.graded, note: `${d.resolved}/${d.graded}`})), {max: 1, id: "resolve", empty: "nothing graded yet"}),
      fixOnly && !p.hit_rows ? null : curvePlot("localization Hit@k (fused suspects vs gold)", p.hit_ks || [], {"line Hit@k": (p.hit || {}).line || [], "file Hit@k": (p.hit || {}).file || []}, "hit", p.hit_rows ? `${p.hit_rows} instance(s) with a known gold` : "no gold known"),
      histPlot("cost per instance", p.cost || {}, "$", "cost"), histPlot("wall time per instance", p.time || {}, "s", "time"),
      barPlot("statuses", Object.entries(p.statuses || {}).map(([k, v], i) => ({label: k, value: v, color: COLORS[i % COLORS.length]})), {id: "statuses"})));
    out.append(sortableTable("batch-table", rows, batchCols(fixOnly), (r) => r.trajectory ? tHref(r.key) : null));
  }
  const rl = (DATA.rl || {}).rows || [];
  if (rl.length) {
    const rp = DATA.rl.plots || {};
    out.append(h("h2", {}, "RL episodes"), h("div", {class: "cards"}, card("episodes", rl.length, "n-episodes"),
      card("mean reward", fmt(rp.mean_reward, 3)), card("null rewards", Object.values(rp.null_reasons || {}).reduce((a, b) => a + b, 0))));
    out.append(h("div", {class: "plots"}, histPlot("rewards", rp.reward_histogram || {}, "", "rewards"),
      barPlot("statuses", Object.entries(rp.statuses || {}).map(([k, v], i) => ({label: k, value: v, color: COLORS[i % COLORS.length]})), {id: "rl-statuses"}),
      barPlot("why the reward is null", Object.entries(rp.null_reasons || {}).map(([k, v]) => ({label: k, value: v, color: COLORS[3]})), {id: "null-reasons", left: 170, empty: "every episode has a reward"})));
    out.append(sortableTable("rl-table", rl, RL_COLS, (r) => "#/rl/" + encodeURIComponent(r.key)));
  }
  if (!rows.length && !rl.length) out.append(h("p", {class: "muted"}, "nothing here yet: no trajectory, prediction or RL row (the page follows the folder)"));
  return out;
}

// -- one trajectory --------------------------------------------------------------------------------------------------
const VIEWS = [["timeline", "Timeline"], ["messages", "Messages"], ["localization", "Localization"], ["search", "Search"], ["verdict", "Verdict"]];
async function trajectoryPage(key, view) {
  const t = await detail(key);
  const crumbs = document.getElementById("crumbs");
  crumbs.replaceChildren(h("a", {href: "#/"}, "runs"), " / ", key);
  if (!t) return h("p", {class: "bad"}, `no trajectory ${key} here`);
  const hd = t.header, el = t.verdict.edited_lines || {};
  const lowInfo = confidence(t.events);
  const out = h("div", {id: "trajectory", "data-key": key},
    h("h2", {}, hd.instance_id, h("span", {class: "badge", id: "status"}, hd.status || "running")),
    h("div", {class: "cards"}, card("model", hd.model || "–"), card("steps", fmt(hd.steps), "c-steps"),
      card("tokens in / out", `${fmt(hd.prompt_tokens)} / ${fmt(hd.completion_tokens)}`, "c-tokens"),
      card("cost", hd.cost_usd === null || hd.cost_usd === undefined ? "unknown" : "$" + hd.cost_usd.toFixed(4)),
      card("wall", secs(hd.elapsed_s)), card("edited lines", `${fmt(el.total)} (+${fmt(el.added)} −${fmt(el.removed)})`, "c-edited"),
      card("events", t.events.length, "c-events"),
      card("low-confidence tokens", lowInfo.tokens ? `${lowInfo.low} of ${lowInfo.tokens}` : "no logprobs", "c-low")),
    hd.detail ? h("p", {class: "muted"}, hd.detail) : null, glance(t, key),
    h("div", {class: "tabs"}, VIEWS.map(([v, label]) => h("a", {href: tHref(key, v), id: "tab-" + v, class: v === view ? "on" : ""}, label))));
  const draw = {timeline: timelineView, messages: messagesView, localization: localizationView, search: searchView, verdict: verdictView}[view] || timelineView;
  out.append(h("div", {id: "view-" + view, class: "view"}, draw(t)));
  return out;
}
function glance(t, key) { // the three answers a reader comes for, each linking to its tab
  const L = t.localization, v = t.verdict, top = L.ranking[0], cands = t.search.flatMap((g) => g.nodes);
  const kept = cands.filter((c) => c.chosen), at = (pl) => pl ? `${pl[0]}:${pl[1]}${pl[2] > pl[1] ? "-" + pl[2] : ""}` : "–";
  const loc = L.gold_known ? (L.gold_rank ? `gold line ranks #${L.gold_rank} (${at(L.ranking[L.gold_rank - 1])})` : "no gold line among the suspects") : `top suspect ${at(top)} (gold unknown)`;
  const verdict = v.report ? (v.resolved ? "resolved" : (v.outcome || "unresolved")) : v.final_tests || v.fix ? `tests on the final patch ${finalTests(v, t.header)}` : "not graded";
  return h("p", {id: "glance"}, h("a", {href: tHref(key, "localization")}, "localization"), `: ${loc} · `,
    h("a", {href: tHref(key, "search")}, "search"), `: ${cands.length} candidate(s), ${kept.length ? "kept " + kept.map((c) => c.id).join(" → ") : "none kept"} · `,
    h("a", {href: tHref(key, "verdict")}, "verdict"), `: ${verdict}, ${fmt((v.edited_lines || {}).total)} edited line(s)`);
}
function confidence(events) {
  let tokens = 0, low = 0;
  for (const e of events) if (e.kind === "llm" && Array.isArray(e.logprobs)) for (const p of e.logprobs) { tokens++; if (Math.exp(p[1]) < LOW_P) low++; }
  return {tokens, low};
}

function gantt(steps) {
  const total = steps.reduce((a, s) => a + s.seconds, 0) || 1, W = 1000, H = 34;
  const nodes = [...new Set(steps.map((s) => s.node))], color = (n) => COLORS[nodes.indexOf(n) % COLORS.length];
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, id: "gantt", role: "img", "aria-label": "graph steps over time", preserveAspectRatio: "none"});
  // more steps than pixels: merge neighbours into one bar per pixel column, coloured by the longest node in it
  const buckets = steps.length > W ? W : steps.length, per = steps.length / buckets;
  for (let b = 0; b < buckets; b++) {
    const group = steps.slice(Math.floor(b * per), Math.floor((b + 1) * per)); if (!group.length) continue;
    const start = group[0].start, dur = group.reduce((a, x) => a + x.seconds, 0), main = group.reduce((m, x) => x.seconds > m.seconds ? x : m, group[0]);
    s.append(svg("rect", {x: W * start / total, y: 4, width: Math.max(0.8, W * dur / total), height: H - 8, fill: color(main.node)},
      svg("title", {}, group.length === 1 ? `${main.node} ${main.seconds.toFixed(3)} s at ${start.toFixed(1)} s` : `${group.length} steps, ${dur.toFixed(2)} s`)));
  }
  const totals = nodes.map((n) => [n, steps.filter((x) => x.node === n).reduce((a, x) => a + x.seconds, 0), steps.filter((x) => x.node === n).length]);
  return h("div", {class: "plot"}, h("h4", {}, `${steps.length} graph steps, ${total.toFixed(1)} s`), s,
    h("div", {class: "legend", id: "node-totals"}, totals.map(([n, sec, c]) => h("span", {"data-node": n}, h("i", {style: `background:${color(n)}`}), `${n} ×${c}: ${sec.toFixed(2)} s`))));
}
function eventView(e) {
  if (e.kind === "llm") {
    const lp = Array.isArray(e.logprobs) ? e.logprobs : [], low = lp.filter((p) => Math.exp(p[1]) < LOW_P).length;
    const body = h("div");
    const d = h("details", {class: "event llm", ontoggle: () => { if (d.open && !body.childElementCount) body.append(...llmBody(e)); }},
      h("summary", {}, h("b", {}, "model"), ` ${e.purpose || ""} · ${fmt(e.prompt_tokens)} in / ${fmt(e.completion_tokens)} out · ${secs(e.latency_s)}`,
        e.cost_usd ? ` · $${e.cost_usd.toFixed(4)}` : "", lp.length ? h("span", {class: "badge" + (low ? " low" : "")}, `${low} low-confidence of ${lp.length}`) : null,
        (e.tool_calls || []).map((c) => h("span", {class: "badge"}, "→ " + c.name))), body);
    return d;
  }
  if (e.kind === "tool") {
    return h("div", {class: "event tool" + (e.error ? " error" : "")}, h("b", {}, "tool "), h("code", {}, `${e.name}(${JSON.stringify(e.arguments || {}).slice(0, 300)})`),
      e.error ? h("span", {class: "badge low"}, "error") : null, folded(e.observation));
  }
  if (e.kind === "test") {
    return h("div", {class: "event test" + (e.ok ? "" : " error")}, h("b", {}, "test "), h("code", {}, e.command || ""),
      h("span", {class: "badge" + (e.ok ? "" : " low")}, `${e.ok ? "PASS" : "FAIL"} (${fmt(e.passed)} passed, ${fmt(e.failed)} failed, exit ${fmt(e.exit_code)})`), folded(e.output));
  }
  if (e.kind === "localize") {
    return h("div", {class: "event localize"}, h("b", {}, "localize "), Object.entries(e.signals || {}).map(([k, v]) => h("span", {class: "badge"}, `${k}: ${v.length}`)));
  }
  const rest = Object.assign({}, e); delete rest.kind;
  return h("div", {class: "event"}, h("b", {}, e.kind + " "), folded(JSON.stringify(rest, null, 1), 600, 12));
}
function llmBody(e) {
  const parts = [];
  if (Array.isArray(e.logprobs) && e.logprobs.length) {
    parts.push(h("div", {class: "muted"}, `tokens shaded by probability; outlined: p < ${LOW_P}; hover for the log-probability`));
    const toks = h("div", {class: "toks"});
    for (const [tok, lp] of e.logprobs) {
      const p = Math.exp(lp), span = h("span", {class: p < LOW_P ? "low" : "", style: `background: rgba(239,68,68,${(1 - p) * 0.55})`, title: `p=${p.toFixed(3)} logprob=${lp.toFixed(3)}`}, tok);
      toks.append(span);
    }
    parts.push(toks);
  } else parts.push(folded(e.content));
  for (const c of e.tool_calls || []) parts.push(h("div", {}, h("b", {}, "tool call "), h("code", {}, `${c.name}(${c.raw_arguments || JSON.stringify(c.arguments)})`), c.parse_error ? h("span", {class: "bad"}, " parse error: " + c.parse_error) : null));
  return parts;
}
function paged(items, drawOne, id) {
  const box = h("div", {id}), more = h("button", {class: "more"});
  let shown = 0;
  function next() {
    const chunk = items.slice(shown, shown + PAGE); shown += chunk.length;
    box.append(...chunk.map(drawOne));
    more.textContent = `show ${Math.min(PAGE, items.length - shown)} more (${shown} of ${items.length})`;
    more.hidden = shown >= items.length;
  }
  more.addEventListener("click", next); next();
  return h("div", {}, box, more);
}
function timelineView(t) {
  return h("div", {}, gantt(t.steps), h("h3", {}, "Steps"), paged(t.steps.map((s, i) => [s, i]), ([s, i]) => {
    const body = h("div");
    const d = h("details", {class: "step", "data-node": s.node, ontoggle: () => { if (d.open && !body.childElementCount) body.append(...s.events.map((j) => eventView(t.events[j]))); }},
      h("summary", {}, h("span", {class: "muted"}, `#${i + 1} `), h("span", {class: "node"}, s.node), ` ${secs(s.seconds)} at ${s.start.toFixed(1)} s · ${s.events.length} event(s)`, stepBadges(s.events.map((j) => t.events[j]))), body);
    return d;
  }, "steps"));
}
function stepBadges(events) { // what a closed step already tells: its model calls' tokens and low-confidence share
  const calls = events.filter((e) => e.kind === "llm");
  if (!calls.length) return null;
  const c = confidence(calls), out = calls.reduce((a, e) => a + (e.completion_tokens || 0), 0);
  return [h("span", {class: "badge"}, `${calls.length} model call(s), ${out} tokens out`),
    c.tokens ? h("span", {class: "badge" + (c.low ? " low" : "")}, `${c.low} low-confidence`) : null,
    events.some((e) => e.kind === "tool" && e.error) ? h("span", {class: "badge low"}, "tool error") : null];
}
function messageView(m, i) {
  const calls = (m.tool_calls || []).map((c) => h("div", {}, h("b", {}, "→ "), h("code", {}, `${(c.function || c).name}(${(c.function || {}).arguments || JSON.stringify(c.arguments || {})})`)));
  return h("div", {class: "msg " + (m.role || ""), "data-index": i}, h("div", {class: "role"}, `${i} ${m.role || "?"}`, m.tool_call_id ? h("span", {class: "muted"}, " " + m.tool_call_id) : null), folded(m.content), calls);
}
function messagesView(t) {
  return h("div", {}, h("p", {class: "muted"}, `${t.messages.length} messages as the model saw them (long ones folded; model calls with log-probabilities are under Timeline)`), paged(t.messages, messageView, "messages"));
}

// -- localization on the code ----------------------------------------------------------------------------------------
function localizationView(t) {
  const L = t.localization, signals = Object.keys(L.signals || {}), on = new Set(signals.filter((s) => (L.signals[s] || []).length));
  const box = h("div", {id: "files"}), mode = h("div", {class: "mode", id: "fusion-mode"}), summary = h("p", {id: "loc-summary"});
  const toggles = signals.map((s) => h("label", {}, h("input", {type: "checkbox", "data-signal": s, checked: on.has(s), disabled: !(L.signals[s] || []).length,
    onchange: (e) => { e.target.checked ? on.add(s) : on.delete(s); draw(); }}), ` ${s} (${(L.signals[s] || []).length})`));
  function draw() {
    const all = signals.filter((s) => (L.signals[s] || []).length).every((s) => on.has(s));
    const scored = all || !signals.length ? fusedScores(L) : refused(L, [...on]);
    mode.textContent = all ? "fused list as the agent recorded it (every signal on)" : `re-fused in the page by reciprocal rank (k=60) over: ${[...on].join(", ") || "nothing"}`;
    const rank = scored.ranking.findIndex(([p, a, b]) => (L.files.find((f) => f.path === p) || {gold: []}).gold.some((n) => a <= n && n <= b));
    const hit = scored.ranking[rank], span = hit && hit[2] > hit[1] ? ` (inside a span of ${hit[2] - hit[1] + 1} lines, ${hit[1]}–${hit[2]})` : "";
    summary.replaceChildren(...[L.gold_known ? (rank >= 0 ? h("span", {}, "first gold line ranks ", h("b", {id: "gold-rank"}, "#" + (rank + 1) + span), " among the suspects (a span is one entry)") : h("span", {class: "bad", id: "gold-rank"}, `no gold line among the ${scored.ranking.length} ranked suspects`)) : h("span", {class: "muted"}, "gold unknown for this task"),
      L.origin ? h("span", {class: "muted"}, ` · code: ${L.origin}`) : null, L.note ? h("span", {class: "muted"}, ` · ${L.note}`) : null,
      L.rounds > 1 ? h("span", {class: "muted"}, ` · last of ${L.rounds} localization rounds`) : null].filter(Boolean));
    const order = [...L.files].sort((a, b) => (scored.fileRank[a.path] ?? 1e9) - (scored.fileRank[b.path] ?? 1e9));
    box.replaceChildren(...order.filter((f) => scored.fileRank[f.path] !== undefined || f.gold.length).map((f) => fileView(f, scored)));
    focusRow(box, scored.ranking)?.classList.add("focus");
  }
  draw();
  return h("div", {}, h("div", {class: "signals", id: "signals"}, h("b", {}, "signals"), toggles, mode), summary, box, executionTables(L), suspectTables(L));
}
function focusRow(box, ranking) { // the best-ranked suspect whose first line is drawn, else the patch's first changed line
  const row = (path, n) => box.querySelector(`section.file[data-path="${CSS.escape(path)}"] tr.line[data-line="${n}"]`);
  for (const [p, a] of ranking) { const r = row(p, a); if (r) return r; }
  return box.querySelector("tr.line.patched");
}
function fusedScores(L) { // line -> {score, rank, evidence}: the recorded fused list
  const lines = {}, fileRank = {};
  L.fused.forEach((s, i) => {
    if (fileRank[s.path] === undefined) fileRank[s.path] = i;
    for (let n = s.start_line; n <= s.end_line; n++) {
      const k = s.path + ":" + n; (lines[k] = lines[k] || {score: 0, ev: []});
      lines[k].score = Math.max(lines[k].score, s.score); if (lines[k].ev.length < 4) lines[k].ev.push(`fused #${i + 1} (${s.score.toFixed(3)}): ${s.evidence}`);
    }
  });
  return withRanks(lines, L.ranking, fileRank);
}
function refused(L, on) {
  const lines = {}, fileRank = {}, fileScore = {};
  for (const sig of on) (L.signals[sig] || []).forEach((s, i) => {
    const w = 1 / (60 + i + 1);
    fileScore[s.path] = Math.max(fileScore[s.path] || 0, w);
    for (let n = s.start_line; n <= s.end_line; n++) {
      const k = s.path + ":" + n; (lines[k] = lines[k] || {score: 0, ev: [], by: new Set()});
      if (lines[k].by.has(sig)) continue; // one contribution per signal: its best span over the line
      lines[k].by.add(sig); lines[k].score += w; lines[k].width = Math.min(lines[k].width || 1e9, s.end_line - s.start_line);
      lines[k].ev.push(`[${sig} #${i + 1}] ${s.evidence}`);
    }
  });
  Object.keys(fileScore).sort((a, b) => fileScore[b] - fileScore[a]).forEach((p, i) => { fileRank[p] = i; });
  const order = Object.keys(lines).sort((a, b) => lines[b].score - lines[a].score || lines[a].width - lines[b].width).map((k) => { const i = k.lastIndexOf(":"); return [k.slice(0, i), +k.slice(i + 1)]; });
  const ranking = []; // neighbouring lines of one file with the same score (one span's lines) are one entry
  for (const [p, n] of order) {
    const last = ranking[ranking.length - 1];
    if (last && last[0] === p && last[2] === n - 1 && lines[p + ":" + n].score === lines[p + ":" + last[1]].score) last[2] = n;
    else ranking.push([p, n, n]);
  }
  return withRanks(lines, ranking, fileRank);
}
function withRanks(lines, ranking, fileRank) { // ranking: [path, start, end] entries; a span's lines share its rank
  const max = Math.max(1e-12, ...Object.values(lines).map((v) => v.score));
  ranking.forEach(([p, a, b], i) => { for (let n = a; n <= b; n++) { const v = lines[p + ":" + n]; if (v && v.rank === undefined) { v.rank = i + 1; v.span = b > a ? [a, b] : null; } } });
  return {lines, ranking: ranking.filter(([p, a]) => lines[p + ":" + a]), fileRank, max};
}
function fileView(f, scored) {
  const rows = [], gold = new Set(f.gold), patched = new Set(f.patched || []);
  const head = h("h3", {}, f.path, f.gold.length ? h("span", {class: "badge", style: "color:#b45309"}, `★ gold ${f.gold.join(", ")}`) : null,
    patched.size ? h("span", {class: "badge patched-badge"}, `✎ patched ${[...patched].join(", ")}`) : null);
  if (!f.lines) {
    const marked = Object.entries(scored.lines).filter(([k]) => k.startsWith(f.path + ":")).map(([k, v]) => [+k.slice(f.path.length + 1), v]).sort((a, b) => a[0] - b[0]);
    return h("section", {class: "file", "data-path": f.path}, head, h("p", {class: "muted"}, `code not available; suspect lines: ${marked.length ? marked[0][0] + "–" + marked[marked.length - 1][0] : "none"}`));
  }
  const shown = new Set();
  for (const [a, b] of f.shown) for (let n = a; n <= b; n++) shown.add(n);
  const table = h("table", {class: "code"});
  let gap = [];
  const flush = () => {
    if (!gap.length) return;
    const hidden = gap; gap = [];
    const row = h("tr", {class: "gap", onclick: () => { row.replaceWith(...hidden.map((n) => lineRow(f, n, gold, scored, patched))); }}, h("td", {colspan: 4}, `… ${hidden.length} lines (${hidden[0]}–${hidden[hidden.length - 1]}) folded: click to unfold`));
    table.append(row);
  };
  f.lines.forEach((_, i) => { const n = i + 1; if (shown.has(n)) { flush(); table.append(lineRow(f, n, gold, scored, patched)); } else gap.push(n); });
  flush();
  return h("section", {class: "file", "data-path": f.path}, head, table);
}
function lineRow(f, n, gold, scored, patched) {
  const v = scored.lines[f.path + ":" + n], alpha = v ? 0.06 + 0.7 * Math.pow(v.score / scored.max, 3) : 0; // cubed: the top lines stand out
  const entry = v && v.rank ? (v.span ? "span" : "line") : null, mark = patched.has(n) ? " · PATCHED" : "";
  const tr = h("tr", {class: "line" + (gold.has(n) ? " gold" : "") + (patched.has(n) ? " patched" : ""), "data-line": n, "data-score": v ? v.score.toFixed(6) : "0", "data-rank": v && v.rank ? v.rank : null, "data-entry": entry},
    h("td", {class: "n"}, n), h("td", {class: "g"}), h("td", {class: "r"}, entry === "line" && v.rank <= 10 ? "#" + v.rank : ""), // a span is one entry: its lines are shaded, not numbered
    h("td", {class: "t", style: v ? `background: rgba(249,115,22,${alpha.toFixed(3)})` : null}, f.lines[n - 1] || " "));
  if (v) tip(tr, `line ${n}${v.rank ? " · rank #" + v.rank + (v.span ? ` (span ${v.span[0]}–${v.span[1]})` : "") : ""}${gold.has(n) ? " · GOLD" : ""}${mark}\n` + v.ev.join("\n"));
  else if (patched.has(n)) tip(tr, `line ${n} · PATCHED (no suspect covers it)`);
  else if (gold.has(n)) tip(tr, `line ${n} · GOLD (no suspect covers it)`);
  return tr;
}
function suspectTables(L) {
  const table = (list, id) => h("table", {class: "grid", id}, h("thead", {}, h("tr", {}, ["#", "location", "score", "signal", "evidence"].map((c) => h("th", {}, c)))),
    h("tbody", {}, list.slice(0, 30).map((s, i) => h("tr", {}, h("td", {class: "num"}, i + 1), h("td", {class: "code"}, `${s.path}:${s.start_line}${s.end_line !== s.start_line ? "-" + s.end_line : ""}`),
      h("td", {class: "num"}, s.score.toFixed(3)), h("td", {}, s.signal), h("td", {}, s.evidence)))));
  return h("div", {}, h("h3", {}, `Fused suspects (${L.fused.length})`), table(L.fused, "fused-table"),
    Object.entries(L.signals).map(([k, v]) => h("details", {}, h("summary", {}, `${k}: ${v.length} suspects`), table(v, "signal-" + k))));
}
function executionTables(L) {
  if (!(L.execution || []).length) return null;
  const row = (s, i) => h("tr", {}, h("td", {class: "num"}, i + 1), h("td", {class: "code"}, `${s.path}:${s.start_line}${s.end_line !== s.start_line ? "-" + s.end_line : ""}`),
    h("td", {class: "num"}, s.score.toFixed(3)), h("td", {}, s.evidence));
  const note = (x) => x.role + (x.status ? ` · ${x.status}` : "") + (x.summary ? ` · ${x.summary}` : "");
  return h("div", {id: "execution-signals"}, h("h3", {}, "Execution signals (top 10 each)"),
    L.execution.map((x) => h("div", {class: "exec-signal", "data-signal": x.name}, h("h4", {}, `${x.name} (${x.count} suspects) `, h("span", {class: "muted"}, note(x))),
      x.suspects.length ? h("table", {class: "grid", id: "exec-" + x.name}, h("thead", {}, h("tr", {}, ["#", "location", "score", "evidence"].map((c) => h("th", {}, c)))), h("tbody", {}, x.suspects.map(row)))
        : h("p", {class: "muted"}, "no suspects"))));
}

// -- search tree -----------------------------------------------------------------------------------------------------
function searchView(t) {
  if (!t.search.length) return h("p", {class: "muted", id: "no-search"}, "no search ran in this trajectory (search.policy none, or the run ended first)");
  return h("div", {}, t.search.map((g, i) => {
    const kids = (parent) => g.nodes.filter((c) => c.parent === parent);
    const node = (c) => h("li", {class: "cand" + (c.chosen ? " chosen" : ""), "data-id": c.id}, candidate(c), kids(c.id).length ? h("ul", {class: "tree"}, kids(c.id).map(node)) : null);
    return h("div", {class: "search"}, h("h3", {}, `Search ${i + 1}: ${g.policies.join(" + ")} · ${g.nodes.length} candidate(s) · ${g.nodes.filter((c) => c.status === "evaluated").length} evaluated`),
      h("ul", {class: "tree top"}, h("li", {class: "root"}, h("span", {class: "rootbox"}, "start: the program before the search"), h("ul", {class: "tree"}, kids("start").map(node)))));
  }), h("p", {class: "muted"}, "green: the path the search kept (each level's best child, when it beat its parent)"));
}
function candidate(c) {
  const tested = c.passed !== null && c.passed !== undefined;
  return h("details", {class: "candidate", "data-id": c.id},
    h("summary", {}, h("b", {}, c.id), ` ${c.target || ""} · `, h("span", {class: c.ok ? "pass" : ""}, c.status || ""),
      tested ? h("span", {}, " · ", h("span", {class: "pass"}, `${c.passed} passed`), " / ", h("span", {class: c.failed ? "fail" : ""}, `${c.failed} failed`)) : h("span", {class: "muted"}, " · not run"),
      ` · ${c.edited_lines === null || c.edited_lines === undefined ? "–" : c.edited_lines} edited line(s)`, c.seconds ? ` · ${secs(c.seconds)}` : "",
      c.chosen ? h("span", {class: "badge chosen"}, "chosen") : null),
    c.reflection ? h("div", {}, h("b", {}, "reflection"), folded(c.reflection)) : null,
    h("div", {}, h("b", {}, "replacement"), h("pre", {}, c.replacement === null || c.replacement === undefined ? "(no code in the reply)" : c.replacement)),
    c.patch ? h("div", {}, h("b", {}, "diff"), diffView(c.patch)) : null,
    c.test_output ? h("div", {}, h("b", {}, "test output (tail)"), folded(c.test_output)) : null);
}

// -- verdict ---------------------------------------------------------------------------------------------------------
function finalTests(v, header) { // what the tests said on the final patch, or why they did not run
  const f = v.final_tests;
  if (f) return `${f.ok ? "PASS" : "FAIL"} (${fmt(f.passed)} passed, ${fmt(f.failed)} failed)`;
  return v.test_command ? `not run (the run ended ${header.status || "early"})` : "not run (no --test-cmd)";
}
function verdictView(t) { // a `fix` run has no reference and no grading: its tests on the final patch judge it
  const v = t.verdict, e = v.edit || {}, el = v.edited_lines || {};
  const graded = v.fix ? [] : [card("verdict", v.report ? (v.resolved ? "resolved" : (v.outcome || "unresolved")) : "not graded", "v-outcome")];
  const edit = v.fix ? [] : [card("edit precision", fmt(e.precision), "v-precision"), card("edit recall", fmt(e.recall), "v-recall"), card("edit F1", fmt(e.f1), "v-f1"),
    card("needed / gold lines", e.gold_lines !== undefined ? `${e.needed_lines} / ${e.gold_lines}` : "–")];
  const out = h("div", {}, h("div", {class: "cards"}, graded,
    v.final_tests || v.fix ? card("tests on the final patch", finalTests(v, t.header), "v-tests") : null,
    card("edited lines", `${fmt(el.total)} (+${fmt(el.added)} −${fmt(el.removed)}, ${fmt(el.files)} file(s))`, "v-edited"), edit),
    v.final_tests ? h("p", {class: "muted", id: "v-tests-source"}, `tests on the final patch: ${v.final_tests.source}`) : null,
    v.fix ? null : v.edit_origin ? h("p", {class: "muted"}, `edit metrics: ${v.edit_origin}`) : h("p", {class: "muted"}, "no reference patch known: no edit precision/recall"),
    v.detail ? h("p", {class: "muted"}, v.detail) : null,
    h("h3", {}, "Final patch"), h("div", {id: "final-patch"}, diffView(v.patch)),
    v.gold_patch ? h("details", {}, h("summary", {}, "reference patch"), diffView(v.gold_patch)) : null);
  if (v.tests.length) {
    out.append(h("h3", {}, "report.json per test"), h("table", {class: "grid", id: "report-tests"}, h("thead", {}, h("tr", {}, ["test", "set", "before (base commit)", "after (patched)"].map((c) => h("th", {}, c)))),
      h("tbody", {}, v.tests.map((r) => h("tr", {}, h("td", {class: "code"}, r.test), h("td", {}, r.group), h("td", {class: r.before}, r.before), h("td", {class: r.after}, r.after))))));
  } else if (!v.fix) out.append(h("p", {class: "muted", id: "report-tests"}, v.report ? "report.json lists no tests" : "no report.json for this instance (run with --evaluate or `pinpoint eval`)"));
  if (v.test_runs.length) {
    out.append(h("h3", {}, "The agent's test runs"), h("table", {class: "grid", id: "test-runs"}, h("thead", {}, h("tr", {}, ["#", "source", "command", "exit", "passed", "failed", "failing tests", "patch lines"].map((c) => h("th", {}, c)))),
      h("tbody", {}, v.test_runs.map((r, i) => h("tr", {class: i === v.final_run ? "final" : "", title: i === v.final_run ? "the last run on the final patch" : null}, h("td", {}, i + 1), h("td", {}, r.source || ""), h("td", {class: "code"}, r.command || ""), h("td", {class: "num"}, fmt(r.exit_code)),
        h("td", {class: "num pass"}, fmt(r.passed)), h("td", {class: "num" + (r.failed ? " fail" : "")}, fmt(r.failed)), h("td", {class: "code"}, (r.failed_tests || []).join("\n")), h("td", {class: "num"}, fmt(r.patch_edited_lines)))))));
  }
  return out;
}

// -- one RL episode --------------------------------------------------------------------------------------------------
async function episodePage(key) {
  document.getElementById("crumbs").replaceChildren(h("a", {href: "#/"}, "runs"), " / ", key);
  const d = await detail(key);
  if (!d) return h("p", {class: "bad"}, `no episode ${key} here`);
  const e = d.episode;
  return h("div", {id: "episode"}, h("h2", {}, `${e.task_id ?? "?"} · sample ${fmt(e.sample)}`),
    h("div", {class: "cards"}, card("status", fmt(e.status)), card("reward", fmt(e.reward, 3), "e-reward"), card("reward kind", fmt(e.reward_kind)), card("steps", fmt(e.steps)),
      card("prompt / response tokens", `${fmt(e.prompt_tokens)} / ${fmt(e.response_tokens)}`), card("masked-in tokens", fmt(e.trained_tokens)), card("llm / env s", `${fmt(e.llm_s)} / ${fmt(e.env_s)}`)),
    h("h3", {}, "reward info"), h("pre", {}, JSON.stringify(d.reward_info, null, 1)), h("h3", {}, "messages"), paged(d.messages, messageView, "messages"));
}

// -- live follow (served pages only) ---------------------------------------------------------------------------------
async function poll() {
  try {
    const r = await fetch("api/signature", {cache: "no-store"});
    const sig = (await r.json()).signature;
    if (sig !== DATA.signature) {
      const fresh = await (await fetch("api/index", {cache: "no-store"})).json();
      const r = route(), row = (rows) => JSON.stringify((rows || []).find((x) => x.key === r.key) || null);
      const same = r.kind !== "batch" && row(DATA.rows) === row(fresh.rows) && row((DATA.rl || {}).rows) === row((fresh.rl || {}).rows);
      Object.assign(DATA, fresh);
      for (const k of Object.keys(cache)) delete cache[k];
      if (!same) { const y = scrollY; await render(); scrollTo(0, y); } // an open trajectory redraws only when it changed
    }
    document.getElementById("live").textContent = "live · checked " + new Date().toLocaleTimeString();
  } catch (err) { document.getElementById("live").textContent = "live · server gone"; }
}
if (DATA.live) { document.getElementById("live").textContent = "live"; setInterval(poll, DATA.poll_ms || 2000); }
render();
