// The trace explorer's page (reports/explorer.py writes the data into this page as JSON): a list of
// questions per run, filterable and searchable; a question's steps in order; two runs side by side.
// Plain DOM code, nothing loaded from anywhere: the page works from a file, offline.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("explorer-data").textContent);
  const app = document.getElementById("app");
  const state = { run: 0, other: -1, correct: "all", retrieved: "all", search: "", question: null };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "onclick" || key === "oninput" || key === "onchange") node[key] = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function num(value, none) {
    if (value === null || value === undefined) return none === undefined ? "–" : none;
    return typeof value === "number" ? String(Math.round(value * 10000) / 10000) : String(value);
  }

  function byId(run, qid) {
    return data.runs[run].questions.find((q) => q.id === qid) || null;
  }

  function mark(q) {
    if (q.em === null || q.em === undefined) return el("span", { class: "muted" }, "no gold");
    return q.em >= 1 ? el("span", { class: "ok", "data-correct": "1" }, "✓") : el("span", { class: "bad", "data-correct": "0" }, "✗");
  }

  function shown(q) {
    if (state.correct === "wrong" && !(q.em !== null && q.em < 1)) return false;
    if (state.correct === "right" && !(q.em !== null && q.em >= 1)) return false;
    if (state.retrieved === "yes" && !(q.retrievals > 0)) return false;
    if (state.retrieved === "no" && q.retrievals > 0) return false;
    if (state.search) {
      const hay = [q.id, q.question, q.prediction, ...(q.gold || [])].join(" ").toLowerCase();
      if (!hay.includes(state.search.toLowerCase())) return false;
    }
    return true;
  }

  function runOptions(selected, withNone) {
    const options = data.runs.map((r, k) => el("option", { value: k, selected: k === selected }, r.method + " (" + r.type + ")"));
    if (withNone) options.unshift(el("option", { value: -1, selected: selected === -1 }, "none"));
    return options;
  }

  function header() {
    const parts = [el("h1", {}, data.title),
      el("p", { class: "muted" }, `${data.runs.length} runs of ${data.dataset}; questions ${data.start}–${data.end} of ${data.total}. ` +
        "Built from each run's predictions.jsonl and trace.jsonl: nothing here was recomputed.")];
    if (data.note) parts.push(el("p", { class: "note", id: "cap-note" }, data.note));
    parts.push(el("p", { class: "legend" }, "Shading: a unit the trigger scored, darker for a higher score within its sentence; ",
      el("span", { class: "swatch", style: "background: rgba(220,38,38,0.6)" }), "red and outlined: flagged by the trigger; ",
      el("span", { class: "swatch", style: "background: rgba(37,99,235,0.45)" }), "blue: scored, not flagged. Unshaded text: no score recorded. ",
      "Query words: ", el("span", { class: "query-word q" }, "in the question"), el("span", { class: "query-word g" }, "in the generated text"),
      el("span", { class: "query-word qg" }, "in both"), ". ", el("span", { class: "gold-badge" }, "gold"), " a passage containing a gold answer."));
    return parts;
  }

  function controls() {
    const rerender = () => render();
    return el("div", { class: "controls" },
      el("label", {}, "run ", el("select", { id: "run", onchange: (e) => { state.run = +e.target.value; rerender(); } }, runOptions(state.run, false))),
      el("label", {}, "side by side with ", el("select", { id: "other", onchange: (e) => { state.other = +e.target.value; rerender(); } }, runOptions(state.other, true))),
      el("label", {}, "answers ", el("select", { id: "correct", onchange: (e) => { state.correct = e.target.value; rerender(); } },
        ["all", "wrong", "right"].map((v) => el("option", { value: v, selected: state.correct === v }, v === "all" ? "all" : v + " only")))),
      el("label", {}, "retrieval ", el("select", { id: "retrieved", onchange: (e) => { state.retrieved = e.target.value; rerender(); } },
        [["all", "all"], ["yes", "retrieved"], ["no", "not retrieved"]].map(([v, t]) => el("option", { value: v, selected: state.retrieved === v }, t)))),
      el("label", {}, "search ", el("input", { id: "search", type: "search", value: state.search, placeholder: "question, answer or id",
        oninput: (e) => { state.search = e.target.value; renderList(); } })));
  }

  function listTable() {
    const run = data.runs[state.run];
    const other = state.other >= 0 ? data.runs[state.other] : null;
    const rows = run.questions.filter(shown).map((q) => {
      const o = other ? byId(state.other, q.id) : null;
      return el("tr", { class: "row", "data-qid": q.id, onclick: () => { state.question = q.id; render(); } },
        el("td", {}, q.id), el("td", {}, q.question), el("td", {}, (q.gold || []).join(" | ")), el("td", {}, q.prediction),
        el("td", {}, mark(q)), el("td", { class: "num" }, q.retrievals), el("td", { class: "num" }, num(q.tokens)),
        other ? el("td", {}, o ? mark(o) : "–") : null);
    });
    return el("table", { class: "questions", id: "questions" },
      el("thead", {}, el("tr", {}, ["id", "question", "gold", "prediction", "EM", "retrievals", "tokens"].map((h) => el("th", {}, h)),
        other ? el("th", {}, other.method + " EM") : null)),
      el("tbody", {}, rows),
      el("caption", { style: "caption-side: bottom; text-align: left", class: "muted", id: "count" },
        `${rows.length} of ${run.questions.length} questions shown`));
  }

  function renderList() {
    const old = document.getElementById("questions");
    if (old) old.replaceWith(listTable());
  }

  // ---- one step ------------------------------------------------------------------------------

  function shade(score, lo, hi, flagged) {
    const t = hi > lo ? (score - lo) / (hi - lo) : 0.5;
    return flagged ? `rgba(220,38,38,${(0.2 + 0.55 * t).toFixed(3)})` : `rgba(37,99,235,${(0.08 + 0.5 * t).toFixed(3)})`;
  }

  function scoreRange(rows) {
    const scores = rows.map((r) => r.score).filter((s) => typeof s === "number");
    return scores.length ? [Math.min(...scores), Math.max(...scores)] : [0, 0];
  }

  function unitSpan(text, row, index, lo, hi, detection) {
    const title = `score ${num(row.score)}` + (row.threshold !== undefined ? ` vs threshold ${num(row.threshold)}` : "") + (row.flagged ? " (flagged)" : "");
    return el("span", { class: "unit" + (row.flagged ? " flagged" : ""), "data-detection": detection, "data-unit": index, "data-score": num(row.score, "null"),
      "data-flagged": row.flagged ? "1" : "0", "data-threshold": row.threshold !== undefined ? num(row.threshold) : null,
      title, style: typeof row.score === "number" ? `background: ${shade(row.score, lo, hi, row.flagged)}` : null }, text);
  }

  function shadedText(step) {
    // every placed unit of every detection of the step (the sentences passed, then the one that fired),
    // each shaded on the scale of its own detection
    const text = step.text;
    const dets = step.detections || [];
    const marks = [];
    dets.forEach((det, d) => (det.marks || []).forEach(([a, b, k]) => marks.push([a, b, d, k])));
    const ranges = dets.map((det) => scoreRange(det.units));
    const cuts = new Set([0, text.length]);
    for (const [a, b] of marks) { cuts.add(a); cuts.add(b); }
    if (step.fired_span) { cuts.add(step.fired_span[0]); cuts.add(step.fired_span[1]); }
    const points = [...cuts].filter((p) => p >= 0 && p <= text.length).sort((x, y) => x - y);
    const box = el("div", { class: "text" });
    for (let i = 0; i + 1 < points.length; i++) {
      const [a, b] = [points[i], points[i + 1]];
      if (b <= a) continue;
      const piece = text.slice(a, b);
      const m = marks.find(([x, y]) => x <= a && b <= y);
      let node = m ? unitSpan(piece, dets[m[2]].units[m[3]], m[3], ranges[m[2]][0], ranges[m[2]][1], m[2]) : document.createTextNode(piece);
      if (step.fired_span && step.fired_span[0] <= a && b <= step.fired_span[1]) node = el("span", { class: "fired" }, node);
      box.append(node);
    }
    return box;
  }

  function unitList(rows, cls, detection) {
    const [lo, hi] = scoreRange(rows);
    return el("div", { class: "units " + (cls || "") }, rows.map((row, k) => unitSpan(row.unit, row, k, lo, hi, detection)));
  }

  function line(label, ...content) {
    return el("div", {}, el("span", { class: "row-label" }, label), ...content);
  }

  function passages(ids, qid) {
    const gold = new Set((data.gold_passages || {})[qid] || []);
    return ids.map((pid) => {
      const p = data.passages[pid] || { title: "", text: null };
      return el("div", { class: "passage" + (gold.has(pid) ? " gold" : ""), "data-pid": pid, "data-gold": gold.has(pid) ? "1" : "0" },
        el("span", { class: "pid" }, pid), " ", el("b", {}, p.title || ""), gold.has(pid) ? [" ", el("span", { class: "gold-badge" }, "gold")] : null,
        p.text !== null && p.text !== undefined ? el("div", { class: "muted" }, p.text) : null);
    });
  }

  function thresholdsOf(run) {
    const entries = Object.entries(run.thresholds || {});
    return entries.length ? entries.map(([k, v]) => `${k} ${num(v)}`).join(", ") : "none named in the run's settings";
  }

  function stepView(step, index, run, qid, diff) {
    const parts = [el("div", { class: "step-head" }, `step ${index + 1}: ${step.phase}`,
      step.facts ? el("span", { class: "facts" }, ` (${step.facts})`) : null,
      diff ? el("span", { class: "diff-label" }, "  ← first difference") : null)];
    if (step.text !== undefined) parts.push(shadedText(step));
    (step.detections || []).forEach((det, d) => {
      const flagged = det.units.filter((u) => u.flagged).length;
      const which = det.fired ? "trigger (fired)" : `passed ${det.sentence === null || det.sentence === undefined ? "" : "s" + det.sentence}`;
      parts.push(line(which, `${det.units.length} units scored, ${flagged} flagged; threshold: ` +
        (det.units.some((u) => u.threshold !== undefined) ? "per unit (hover a unit)" : thresholdsOf(run))));
      if (!det.marks) parts.push(line("units", unitList(det.units, "unplaced", d)));
      for (const [key, value] of Object.entries(det.extra || {})) parts.push(line(key, el("span", { class: "other" }, JSON.stringify(value))));
    });
    if (step.attribution) {
      parts.push(line("attribution", unitList(step.attribution.map(([u, s]) => ({ unit: u, score: s, flagged: false })), "attribution", "attribution")));
    }
    for (const g of step.gauges || []) {
      const t = Array.isArray(g.threshold) ? g.threshold.map((x) => num(x, "inf")).join(", ") : num(g.threshold, null);
      parts.push(el("div", { class: "gauge", "data-gauge": g.name }, el("span", { class: "row-label" }, g.name),
        `${num(g.value)}` + (t !== null ? ` vs ${t}` : "") + (g.verdict ? `: ${g.verdict}` : "")));
    }
    if (step.fired) parts.push(line("fired", el("span", { class: "fired-sentence" }, step.fired)));
    if (step.query !== undefined) {
      parts.push(line("query", el("span", { class: "query" }, step.query)));
      parts.push(line("built from", el("span", { class: "query-words" },
        step.query_words.map(([w, where]) => el("span", { class: "query-word " + where, title: where ? "" : "in neither" }, w)))));
    }
    if (step.retrieved) parts.push(line("retrieved", step.retrieved.length ? "" : "nothing"), ...passages(step.retrieved, qid));
    for (const [key, value] of step.other || []) parts.push(line(key, el("span", { class: "other" }, value)));
    return el("div", { class: "step" + (diff ? " first-diff" : ""), "data-step": index, "data-phase": step.phase }, parts);
  }

  function summary(q, run) {
    return el("div", { class: "summary" },
      line("method", `${run.method} (${run.type})`),
      line("prediction", el("b", {}, q.prediction), " ", mark(q), ` EM ${num(q.em)}, F1 ${num(q.f1)}, Acc ${num(q.acc)}`),
      line("counters", Object.entries(q.counters || {}).map(([k, v]) => `${k} ${num(v)}`).join(", ")));
  }

  function ending(q, run) {
    return el("div", { class: "ending" },
      line("output", el("span", { class: "other" }, q.output)),
      line("passages", q.passages.length ? "" : "none"), ...passages(q.passages, q.id));
  }

  function firstDifference(a, b) {
    const n = Math.max(a.steps.length, b.steps.length);
    for (let i = 0; i < n; i++) {
      if (!a.steps[i] || !b.steps[i] || a.steps[i].decision !== b.steps[i].decision) return i;
    }
    return -1;
  }

  function detail() {
    const run = data.runs[state.run];
    const q = byId(state.run, state.question);
    const back = el("button", { class: "back", id: "back", onclick: () => { state.question = null; render(); } }, "← all questions");
    const head = [back, el("h2", {}, `${q.id}: ${q.question}`), line("gold", (q.gold || []).join(" | ") || "none")];
    if (state.other < 0 || state.other === state.run) {
      return el("div", { id: "detail", "data-qid": q.id }, head, summary(q, run),
        el("h3", {}, "steps"), q.steps.map((s, i) => stepView(s, i, run, q.id, false)), ending(q, run));
    }
    const other = data.runs[state.other];
    const o = byId(state.other, q.id);
    if (!o) return el("div", { id: "detail" }, head, el("p", { class: "note" }, `${other.method} has no record of this question on this page.`));
    const at = firstDifference(q, o);
    const verdict = at < 0 ? (q.prediction === o.prediction ? "The two runs decided the same at every step."
      : "Same decisions at every step; the answers differ.") : `Their decisions first differ at step ${at + 1}.`;
    const grid = el("div", { class: "compare", id: "compare" },
      el("div", {}, el("h3", {}, run.method), summary(q, run)), el("div", {}, el("h3", {}, other.method), summary(o, other)));
    const n = Math.max(q.steps.length, o.steps.length);
    for (let i = 0; i < n; i++) {
      grid.append(q.steps[i] ? stepView(q.steps[i], i, run, q.id, i === at) : el("div", { class: "muted" }, "no step"));
      grid.append(o.steps[i] ? stepView(o.steps[i], i, other, o.id, i === at) : el("div", { class: "muted" }, "no step"));
    }
    grid.append(ending(q, run), ending(o, other));
    return el("div", { id: "detail", "data-qid": q.id }, head, el("p", { id: "first-difference", "data-step": at }, verdict), grid);
  }

  function settingsBlock() {
    return el("details", { class: "settings" }, el("summary", {}, "the runs' settings (from their provenance.json)"),
      data.runs.map((r) => el("div", {}, el("b", {}, `${r.method} (${r.type}) `), el("span", { class: "muted" }, r.directory),
        el("pre", {}, JSON.stringify(r.settings)))));
  }

  function render() {
    app.replaceChildren(...header(), controls(), state.question !== null && byId(state.run, state.question) ? detail() : listTable(), settingsBlock());
  }

  render();
})();
