// tandem inspect: renders the run's data (the JSON in #run-data) with plotly.js.
// Every string from the run is set as text (textContent, createTextNode), never as markup:
// trajectories are the policy's own bytes, and the policy is treated as an adversary.
"use strict";
const DATA = JSON.parse(document.getElementById("run-data").textContent);
const PLOT_CONFIG = {displaylogo: false, responsive: true, displayModeBar: "hover"};
const HEADLINE = ["reward_mean", "loss", "entropy", "step_time"];
const VERSION_COLOURS = ["#cfe3ff", "#ffe0b3", "#d4f5d4", "#f3d1f4", "#fff3b0", "#d0f0f5", "#f8d0d0", "#e0d8ff"];
let chartsDrawn = 0;

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}
function fmt(v) {
  if (typeof v !== "number") return v === null || v === undefined ? "-" : String(v);
  return Number.isInteger(v) ? String(v) : v.toPrecision(4);
}
function plot(div, traces, layout) {
  Plotly.newPlot(div, traces, Object.assign({margin: {l: 50, r: 10, t: 40, b: 35}, font: {size: 11}}, layout),
                 div.classList.contains("chart") ? Object.assign({}, PLOT_CONFIG, {displayModeBar: false}) : PLOT_CONFIG);
  chartsDrawn += 1;
}

// ------------------------------------------------------------------ header
function drawHeader() {
  document.getElementById("run-name").textContent = DATA.run.name;
  document.title = "tandem inspect: " + DATA.run.name;
  const summary = document.getElementById("run-summary");
  for (const [k, v] of Object.entries(DATA.run.summary)) {
    if (v === null || v === undefined || v === "") continue;
    const item = el("div"); item.append(el("dt", {}, k), el("dd", {}, v)); summary.append(item);
  }
  const notes = document.getElementById("notes");
  for (const note of DATA.notes) notes.append(el("li", {}, note));
}

// ------------------------------------------------------------------ metric curves
function metricChart(parent, key, extra) {
  const div = el("div", {class: "chart", "data-metric": key}); parent.append(div);
  const traces = [{x: DATA.metrics.steps, y: DATA.metrics.series[key], mode: "lines+markers", name: key,
                   marker: {size: 4}}];
  plot(div, traces.concat(extra || []), {title: {text: DATA.metrics.groups[key] + "/" + key, font: {size: 12}},
                                         showlegend: false, xaxis: {title: {text: "step"}}});
}
function varies(key) {
  const ys = DATA.metrics.series[key].filter(v => v !== null);
  return ys.length > 0 && ys.some(v => v !== ys[0]);
}
function drawMetrics() {
  const series = DATA.metrics.series, keys = Object.keys(series);
  const headline = document.getElementById("headline");
  for (const key of HEADLINE.filter(k => k in series)) {
    const extra = key === "reward_mean" && series.reward_std ? [{
      x: DATA.metrics.steps, y: series.reward_mean.map((m, i) => m === null ? null : m + series.reward_std[i]),
      mode: "lines", line: {width: 0}, hoverinfo: "skip"}, {
      x: DATA.metrics.steps, y: series.reward_mean.map((m, i) => m === null ? null : m - series.reward_std[i]),
      mode: "lines", line: {width: 0}, fill: "tonexty", fillcolor: "rgba(43,108,176,0.15)", hoverinfo: "skip"}] : [];
    metricChart(headline, key, extra);
  }
  const groups = [...new Set(keys.map(k => DATA.metrics.groups[k]))];
  const order = ["rollout", "train", "sync", "engine", "env"].filter(g => groups.includes(g));
  const tabs = document.getElementById("group-tabs");
  for (const group of order) {
    const button = el("button", {type: "button", "data-group": group}, group + "/");
    button.addEventListener("click", () => showGroup(group));
    tabs.append(button);
  }
  if (order.length) showGroup(order[0]);
}
function showGroup(group) {
  for (const b of document.querySelectorAll("#group-tabs button")) b.classList.toggle("active", b.dataset.group === group);
  const box = document.getElementById("group-charts");
  for (const old of box.querySelectorAll(".chart")) Plotly.purge(old);
  box.replaceChildren();
  const keys = Object.keys(DATA.metrics.series).filter(k => DATA.metrics.groups[k] === group).sort();
  const constant = [];
  for (const key of keys) {
    if (varies(key)) metricChart(box, key);
    else constant.push(key + " = " + fmt(DATA.metrics.series[key].find(v => v !== null)));
  }
  document.getElementById("constant-metrics").textContent =
    constant.length ? "Constant over the run (not drawn): " + constant.join(", ") : "";
}

// ------------------------------------------------------------------ queues, lag, step time
function drawQueues() {
  const traces = [];
  for (const [engine, q] of Object.entries(DATA.queue)) {
    traces.push({x: q.t, y: q.waiting.map((w, i) => w + q.running[i]), mode: "lines", name: engine + " total"});
    traces.push({x: q.t, y: q.waiting, mode: "lines", name: engine + " waiting", line: {dash: "dot"}});
  }
  plot(document.getElementById("queue-chart"), traces,
       {xaxis: {title: {text: "seconds since the first sample"}}, yaxis: {title: {text: "requests"}}});
}
function drawLag() {
  const trained = DATA.samples.filter(s => s.source !== "eval");  // evaluation samples are never stale
  plot(document.getElementById("staleness-chart"),
       [{x: trained.map(s => s.staleness), type: "histogram", name: "samples"}],
       {title: {text: "staleness of the shown samples (steps)", font: {size: 12}}, bargap: 0.1});
  const lags = trained.flatMap(s => s.token_lag.filter(v => v !== null));
  plot(document.getElementById("token-lag-chart"), [{x: lags, type: "histogram", name: "tokens"}],
       {title: {text: "token lag of the shown samples' trained tokens", font: {size: 12}}, bargap: 0.1});
  const lagKeys = Object.keys(DATA.metrics.series).filter(k => /^token_lag_\d+$/.test(k)).sort();
  plot(document.getElementById("token-lag-steps-chart"),
       lagKeys.map(k => ({x: DATA.metrics.steps, y: DATA.metrics.series[k], type: "bar", name: k})),
       {barmode: "stack", title: {text: "trained tokens by lag, per step (metrics.jsonl)", font: {size: 12}}});
}
function drawStepTime() {
  const s = DATA.metrics.series, steps = DATA.metrics.steps, zero = steps.map(() => 0);
  const wait = s.trainer_wait_time || zero, train = s.train_time || zero, total = s.step_time || zero;
  const rest = total.map((t, i) => Math.max(0, (t || 0) - (wait[i] || 0) - (train[i] || 0)));
  plot(document.getElementById("step-time-chart"), [
    {x: steps, y: wait, type: "bar", name: "waiting for the batch"},
    {x: steps, y: train, type: "bar", name: "training"},
    {x: steps, y: rest, type: "bar", name: "rest"},
    {x: steps, y: s.rollout_time || zero, mode: "lines+markers", name: "rollout_time"},
    {x: steps, y: s.sync_time || zero, mode: "lines+markers", name: "sync_time"},
  ], {barmode: "stack", xaxis: {title: {text: "step"}}, yaxis: {title: {text: "seconds"}}});
}

// ------------------------------------------------------------------ evaluation
function drawEval() {
  const ev = DATA.eval, box = document.getElementById("eval-charts");
  const keys = Object.keys(ev.series).sort((a, b) => (a === "eval/pass@1" ? -1 : b === "eval/pass@1" ? 1 : a < b ? -1 : 1));
  if (!ev.steps.length) {
    document.getElementById("eval-none").textContent = "No evaluation in this run (eval.enabled = false, or none finished yet).";
    return;
  }
  const hover = ev.steps.map((s, i) => "step " + s + ", weights v" + ev.versions[i] + (ev.cut_short[i] ? " (cut short)" : ""));
  for (const key of keys) {
    const div = el("div", {class: "chart", "data-metric": key}); box.append(div);
    plot(div, [{x: ev.steps, y: ev.series[key], text: hover, mode: "lines+markers", name: key, marker: {size: 6},
                hovertemplate: "%{y}<br>%{text}<extra></extra>"}],
         {title: {text: key, font: {size: 12}}, showlegend: false, xaxis: {title: {text: "steps trained (weights evaluated)"}}});
  }
}

// ------------------------------------------------------------------ trajectory browser
function segments(sample) {
  // The prompt, then runs of the response: loss mask 1 = the model's turn, 0 = observation / template.
  const out = [{kind: "prompt", start: 0, ids: sample.prompt_ids || []}];
  const ids = sample.response_ids || [], mask = sample.loss_mask || [];
  let turn = 0;
  for (let i = 0; i < ids.length;) {
    let j = i; while (j < ids.length && mask[j] === mask[i]) j++;
    out.push({kind: mask[i] ? "model" : "context", start: i, ids: ids.slice(i, j), turn: mask[i] ? ++turn : turn});
    i = j;
  }
  return out;
}
function turnsOf(sample) { return segments(sample).filter(s => s.kind === "model").length; }
function visibleText(text) {
  // Control characters (byte tokens of a random policy) as their visible symbols; newlines and tabs kept.
  return text.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, c => String.fromCharCode(c === "\u007f" ? 0x2421 : 0x2400 + c.charCodeAt(0)));
}
function tokenStyle(mode, sample, pos, trained) {
  if (!trained) return "background:#eee;color:#666";
  if (mode === "mask") return "background:#dbeafe";
  if (mode === "version") {
    const v = (sample.token_versions || [])[pos];
    const version = v === undefined ? sample.weight_version : v;
    return "background:" + VERSION_COLOURS[((version % 8) + 8) % 8];
  }
  if (mode === "logprob") {
    const p = Math.exp((sample.rollout_logprobs || [])[pos] || 0);
    return "background:hsl(" + Math.round(120 * p) + ",75%,82%)";
  }
  const lag = (sample.token_lag || [])[pos];
  return "background:" + (lag === 0 || lag === undefined ? "#d4f5d4" : lag === 1 ? "#fff3b0" : "#f8c9c9");
}
function tokenTitle(sample, pos, id, trained) {
  if (pos < 0) return "prompt token " + id;
  const parts = ["token " + id, trained ? "trained" : "not trained"];
  if (trained) {
    parts.push("logprob " + fmt((sample.rollout_logprobs || [])[pos]));
    const v = (sample.token_versions || [])[pos]; if (v !== undefined) parts.push("version " + v);
    const lag = (sample.token_lag || [])[pos]; if (lag !== undefined && lag !== null) parts.push("lag " + lag);
  }
  return parts.join(", ");
}
function drawTokens(box, sample, seg, mode) {
  const tokens = el("div", {class: "tokens"});
  seg.ids.forEach((id, k) => {
    const pos = seg.kind === "prompt" ? -1 : seg.start + k;
    const trained = seg.kind === "model";
    const text = DATA.vocab[String(id)];
    const span = el("span", {title: tokenTitle(sample, pos, id, trained)},
                    visibleText(text === undefined ? "\u27e8" + id + "\u27e9" : text));
    span.setAttribute("style", tokenStyle(mode, sample, pos, trained));
    tokens.append(span);
  });
  box.append(tokens);
}
function kvTable(obj) {
  const table = el("table", {class: "kv"});
  for (const [k, v] of Object.entries(obj || {})) {
    const row = el("tr"); row.append(el("td", {}, k));
    row.append(el("td", {}, typeof v === "object" && v !== null ? JSON.stringify(v) : fmt(v)));
    table.append(row);
  }
  return table;
}
function drawVerdict(box, sample) {
  const info = sample.reward_info || {};
  const verdict = el("div", {class: "verdict"});
  verdict.append(el("strong", {}, "reward " + fmt(sample.reward) + (info.reason ? ": " + info.reason : "")));
  if (info.tests && typeof info.tests === "object") {
    const list = el("ul");
    for (const [test, status] of Object.entries(info.tests))
      list.append(el("li", {class: status === "PASSED" ? "pass" : "fail"}, status + "  " + test));
    verdict.append(list);
  }
  const rest = Object.fromEntries(Object.entries(info).filter(([k]) => !["reason", "tests", "tamper"].includes(k)));
  verdict.append(kvTable(rest));
  box.append(verdict);
  const tamper = info.tamper;
  if (tamper && (!Array.isArray(tamper) || tamper.length)) {
    const t = el("div", {class: "tamper"}); t.append(el("strong", {}, "tamper evidence"));
    t.append(el("pre", {class: "json"}, JSON.stringify(tamper, null, 1))); box.append(t);
  }
}
function drawActions(box, sample) {
  const meta = sample.metadata || {}, env = meta.env || {}, agent = meta.agent || {};
  const actions = agent.actions || [], codes = agent.returncodes || [];
  if ((env.tool_calls || []).length) box.append(el("p", {}, "tool calls: " + env.tool_calls.join(", ")));
  if (actions.length) {
    const list = el("ol");
    actions.forEach((a, i) => list.append(el("li", {}, (a === "" ? "(no command: format error)" : a) +
                                                         (codes[i] === null || codes[i] === undefined ? "" : "  \u2192 rc " + codes[i]))));
    box.append(el("h4", {}, "commands")); box.append(list);
  }
  const harness = meta.harness || {}, calls = harness.calls || [], segOf = harness.segment_of_call || [];
  if (calls.length) {  // an outside harness's recorded calls (tandem/harness), in the order it made them
    const list = el("ol");
    calls.forEach((c, i) => list.append(el("li", {}, c.kind + " \u2192 segment " + segOf[i] + (c.extended ? " (extends)" : " (rendered whole)") +
      ": " + c.prompt_tokens + " prompt + " + c.completion_tokens + " completion tokens, v" + c.version + ", " +
      c.finish_reason + ": " + JSON.stringify(c.text))));
    box.append(el("h4", {}, "harness calls (" + harness.segments + " segment(s), " + harness.prefix_breaks + " prefix break(s))"));
    box.append(list);
  }
  const details = el("details"); details.append(el("summary", {}, "metadata"));
  details.append(el("pre", {class: "json"}, JSON.stringify(meta, null, 1))); box.append(details);
}
function showSample(sample, row) {
  for (const r of document.querySelectorAll("#sample-list tr.selected")) r.classList.remove("selected");
  if (row) row.classList.add("selected");
  const box = document.getElementById("sample-detail"), mode = document.getElementById("colour-by").value;
  box.replaceChildren(el("h3", {}, "step " + sample.step + ", sample " + sample.index + " (group " + sample.group_id +
                                  "), end: " + sample.end_reason + ", staleness " + sample.staleness));
  drawVerdict(box, sample);
  drawActions(box, sample);
  for (const seg of segments(sample)) {
    const part = el("div", {class: "segment " + seg.kind});
    const label = seg.kind === "prompt" ? "prompt" : seg.kind === "model" ? "model turn " + seg.turn
      : "observation / chat template";
    part.append(el("h4", {}, label + " (" + seg.ids.length + " tokens)"));
    drawTokens(part, sample, seg, mode);
    box.append(part);
  }
  box.dataset.sample = sample.step + ":" + sample.index;
}
function drawLegend() {
  const mode = document.getElementById("colour-by").value, legend = document.getElementById("legend");
  const entries = {
    mask: [["#dbeafe", "trained (loss mask 1)"], ["#eee", "not trained: prompt, observation, template"]],
    version: VERSION_COLOURS.map((c, v) => [c, "version " + v + " (mod 8)"]),
    logprob: [["hsl(0,75%,82%)", "p \u2248 0"], ["hsl(60,75%,82%)", "p \u2248 0.5"], ["hsl(120,75%,82%)", "p \u2248 1"]],
    lag: [["#d4f5d4", "lag 0"], ["#fff3b0", "lag 1"], ["#f8c9c9", "lag \u2265 2"]],
  }[mode];
  legend.replaceChildren(...entries.map(([c, label]) => { const s = el("span", {}, label); s.setAttribute("style", "background:" + c); return s; }));
}
function filtered() {
  const step = document.getElementById("filter-step").value, end = document.getElementById("filter-end").value;
  const lo = parseFloat(document.getElementById("filter-reward-min").value);
  const hi = parseFloat(document.getElementById("filter-reward-max").value);
  return DATA.samples.filter(s => (step === "" || String(s.step) === step) && (end === "" || s.end_reason === end) &&
    (isNaN(lo) || s.reward >= lo) && (isNaN(hi) || s.reward <= hi));
}
function drawList() {
  const body = document.querySelector("#sample-list tbody"), shown = filtered();
  body.replaceChildren();
  for (const s of shown) {
    const row = el("tr");
    for (const v of [s.step, s.index, s.group_id, fmt(s.reward), fmt(s.advantage)]) row.append(el("td", {}, v));
    row.append(el("td", {class: "end"}, s.end_reason));
    row.append(el("td", {}, turnsOf(s)), el("td", {}, (s.prompt_ids || []).length + (s.response_ids || []).length));
    row.addEventListener("click", () => showSample(s, row));
    body.append(row);
  }
  document.getElementById("sample-count").textContent = shown.length + " of " + DATA.samples.length + " trajectories";
  document.body.dataset.trajectories = String(shown.length);
}
function drawBrowser() {
  // training steps (numbers) first, then the evaluations (eval@N), each in step order
  const order = s => typeof s === "number" ? [0, s] : [1, parseInt(String(s).split("@")[1], 10)];
  const steps = [...new Set(DATA.samples.map(s => s.step))].sort((a, b) => {
    const [x, y] = [order(a), order(b)];
    return x[0] - y[0] || x[1] - y[1];
  });
  const ends = [...new Set(DATA.samples.map(s => s.end_reason))].sort();
  for (const s of steps) document.getElementById("filter-step").append(el("option", {value: s}, s));
  for (const e of ends) document.getElementById("filter-end").append(el("option", {value: e}, e));
  for (const id of ["filter-step", "filter-end", "filter-reward-min", "filter-reward-max"])
    document.getElementById(id).addEventListener("input", drawList);
  document.getElementById("colour-by").addEventListener("input", () => {
    drawLegend();
    const picked = document.getElementById("sample-detail").dataset.sample;
    const sample = DATA.samples.find(s => s.step + ":" + s.index === picked);
    if (sample) showSample(sample, document.querySelector("#sample-list tr.selected"));
  });
  drawLegend();
  drawList();
  const first = document.querySelector("#sample-list tbody tr");
  if (first) first.click();
}

drawHeader();
drawMetrics();
drawQueues();
drawLag();
drawStepTime();
drawEval();
drawBrowser();
document.body.dataset.charts = String(chartsDrawn);
document.body.dataset.ready = "1";
