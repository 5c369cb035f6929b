/* opdiff HTML report: reads the embedded document (gzip + base64 JSON), draws the diagnosis, the
   error-along-execution chart, the module tree, the virtualised table and the pair details.
   chart.js draws the error chart; plotly (inlined from the installed plotly package, run when first needed)
   draws the selected pair's sample charts; nothing is fetched. */
"use strict";
(function () {
  const COLORS = ["#2e9d4f", "#e0a000", "#d62728", "#999999"];
  const S = {doc: null, n: 0, view: [], sel: null, sort: {col: 0, asc: true}, metric: "eu", module: null,
             filter: {res: "", op: "", module: "", name: ""}, chartReady: false, tree: null};
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  // text of names and diagnoses: escaped, with a break opportunity after each . / # _ so that long
  // module paths and record names wrap inside their panel instead of widening the page
  const brk = (s) => String(s ?? "").split(/(?<=[./#_])/).map(esc).join("<wbr>");
  const num = (x) => (x === "inf" ? Infinity : x === "-inf" ? -Infinity : x === "nan" ? NaN : x);

  // --- numbers, as opdiff's console shows them (base/numfmt.py) ---
  function fmt(x, d = 4) {
    x = num(x);
    if (x === null || x === undefined) return "-";
    if (typeof x !== "number") return String(x);
    if (Number.isNaN(x)) return "nan";
    if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
    if (Number.isInteger(x) && Math.abs(x) < 1e6) return String(x);
    const s = x.toPrecision(d);
    return s.includes("e") ? s.replace(/\.?0+e/, "e") : s.replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, "");
  }
  function fmtCos(omc) {  // cosine from 1 - cos, with enough digits near 1
    omc = num(omc);
    if (omc === null || omc === undefined || Number.isNaN(omc)) return "-";
    if (omc === 0) return "1";
    if (omc >= 1e-3) return fmt(1 - omc, 6);
    const digits = Math.min(16, Math.floor(-Math.log10(omc)) + 3);
    return (1 - omc).toFixed(digits);
  }
  const fmtU = (e) => (e === null || e === undefined ? "-" : fmt(e, 3) + " u");

  // --- loading ---
  async function load(id) {  // one of the page's two documents (report/html_data.split)
    const bin = atob($(id).textContent.trim());
    const bytes = new Uint8Array(bin.length);  // a plain loop: Uint8Array.from with a callback per byte is slow
    for (let k = 0; k < bin.length; k++) bytes[k] = bin.charCodeAt(k);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }

  // --- header and diagnosis ---
  function recLink(name) {
    if (!name) return "-";
    return `<span class="rec" data-name="${esc(name)}">${brk(name)}</span>`;
  }
  function tensorRows(title, rows) {
    if (!rows || !rows.length) return "";
    let h = `<tr><th colspan="6">${brk(title)}</th></tr>`;
    for (const t of rows) {
      const dt = t.dtype || {};
      h += `<tr><td>${recLink(t.target || t.golden)}</td><td class="n">${brk(dt.golden)}/${brk(dt.target)}</td>` +
        `<td class="n">${brk((t.shape || []).join("x"))}</td><td class="n">${t.error_units == null && t.error ? "differs" : fmtU(t.error_units)}</td>` +
        `<td class="n">cos ${t.cosine == null ? "-" : fmtCos(1 - num(t.cosine))}</td><td class="n">max abs ${fmt(t.max_abs_err)}</td></tr>`;
    }
    return h;
  }
  function renderDiagnosis(d) {
    const box = $("diag");
    if (!d) { box.innerHTML = '<h2>Comparison</h2><p class="muted">No diagnosis in this report (run <code>opdiff diagnose GOLDEN TARGET --html FILE</code>).</p>'; return; }
    const v = String(d.verdict || "?");
    let h = `<h2>Verdict <span class="badge v-${brk(v)}" id="verdict">${brk(v.toUpperCase())}</span> ${brk(d.summary || "")}</h2>`;
    const cu = d.culprit;
    const tgt = S.doc.target;
    if (cu) {
      const ci = S.doc.culprit;
      const dir = ci != null ? S.doc.records.dir[ci] : (cu.direction || "forward");
      h += `<p id="culprit"><b>Culprit:</b> module <span class="mod" data-module="${esc(cu.module || "")}">${brk(cu.module || "<root>")}</span>, ` +
        `op <code>${brk(cu.op)}</code>, step ${brk(tgt.step)} (rank ${brk(tgt.rank)}), ${brk(dir)}; target record ${recLink(cu.target)}</p>`;
    }
    const ev = d.evidence || {};
    let et = tensorRows("inputs", ev.inputs) + tensorRows("parameters", ev.parameters) + tensorRows("outputs", ev.outputs) + tensorRows("diverging", ev.diverging);
    if (et) h += `<b>Evidence</b><table>${et}</table>`;
    if (ev.settings && typeof ev.settings === "object" && Object.keys(ev.settings).length) {  // no empty heading
      h += "<p><b>Settings that differ:</b> " + Object.entries(ev.settings).map(([k, s]) => `${brk(k)}: ${brk(s && s.golden)} vs ${brk(s && s.target)}`).join("; ") + "</p>";
    }
    if (d.path_of_divergence && d.path_of_divergence.length) {
      h += "<b>Path of divergence</b> (culprit → model output)<table><tr><th>module</th><th>op</th><th>error</th><th>cosine</th></tr>";
      for (const p of d.path_of_divergence) h += `<tr><td>${p.target ? `<span class="rec" data-name="${esc(p.target)}">${brk(p.module || "<root>")}</span>` : brk(p.module || "<root>")}</td><td>${brk(p.op)}</td><td class="n">${fmtU(p.error_units)}</td><td class="n">${p.cosine == null ? "-" : fmtCos(1 - num(p.cosine))}</td></tr>`;
      h += "</table>";
    }
    if (d.candidates && d.candidates.length) {
      h += "<b>Candidates</b> (ranked)<table><tr><th>#</th><th>module</th><th>op</th><th>score</th><th>why</th></tr>";
      for (const c of d.candidates.slice(0, 8)) h += `<tr><td>${brk(c.rank)}</td><td><span class="mod" data-module="${esc(c.module || "")}">${brk(c.module || "<root>")}</span></td><td>${brk(c.op)}</td><td>${fmt(c.score == null && c.score_nonfinite ? c.score_nonfinite : c.score, 3)}</td><td>${brk(c.reason || "")}</td></tr>`;
      h += "</table>";
    }
    if (d.replay) h += d.replay.status === "ok" ? `<p><b>Replay:</b> ${brk(d.replay.conclusion)}</p>` : `<p class="muted">Replay skipped: ${brk(d.replay.reason)}</p>`;
    const cf = d.confirmation;
    if (cf && cf.method === "patch") {
      h += `<p><b>Confirmed by patch</b> (${brk(cf.status)}): model-output error ${fmt(cf.error_before, 3)} → ${fmt(cf.error_after, 3)} (tolerance ${fmt(cf.tolerance, 3)}, ${brk(cf.runs)} re-runs)</p>`;
      if (cf.culprits && cf.culprits.length) {
        h += "<table><tr><th>culprit needed</th><th>op</th><th>error without it</th><th>golden given its output</th></tr>";
        for (const c of cf.culprits) h += `<tr><td><span class="mod" data-module="${esc(c.module || "")}">${brk(c.module || "<root>")}</span></td><td>${brk(c.op || (c.inserted_ops && c.inserted_ops.length ? "target only: " + c.inserted_ops.join(", ") : ""))}</td><td class="n">${fmt(c.error_without, 3)}</td><td class="n">${fmt(c.error_golden_broken, 3)}</td></tr>`;
        h += "</table>";
      }
    } else if (cf) h += `<p class="muted">Confirmed by: ${cf.method === "replay" ? "replay of the culprit op" : "statistics only (the runs were not re-executed)"}</p>`;
    if (d.advice) h += `<p><b>Advice:</b> ${brk(d.advice)}</p>`;
    for (const w of d.warnings || []) h += `<p class="warn">warning: ${brk(w)}</p>`;
    box.innerHTML = h;
    box.querySelectorAll(".rec").forEach((el) => el.addEventListener("click", () => selectByName(el.dataset.name)));
    box.querySelectorAll(".mod").forEach((el) => el.addEventListener("click", () => selectModule(el.dataset.module)));
  }

  // --- filters and view ---
  function matches(i) {
    const f = S.filter, R = S.doc.records;
    if (f.res !== "" && R.res[i] !== +f.res) return false;
    if (f.op && R.op[i] !== f.op) return false;
    if (f.module) { const m = R.module[i] || ""; if (!(m === f.module || m.startsWith(f.module + "."))) return false; }
    if (f.name) {
      const s = R.name[i] + " " + (R.gname[i] || "");
      if (S.nameRe ? !S.nameRe.test(s) : !s.toLowerCase().includes(f.name.toLowerCase())) return false;
    }
    return true;
  }
  const SORT_KEYS = [
    (i) => i, (i) => S.doc.records.name[i], (i) => S.doc.records.op[i], (i) => [2, 1, 0, -1][S.doc.records.res[i]],
    (i) => num(S.doc.records.eu[i]) ?? -1, (i) => num(S.doc.records.omc[i]) ?? -1,
    (i) => num(S.doc.metrics.MaxAbsErr ? S.doc.metrics.MaxAbsErr[i] : null) ?? -1,
    (i) => num(S.doc.metrics.MaxRelativeErr ? S.doc.metrics.MaxRelativeErr[i] : null) ?? -1];
  function applyView() {
    const v = [];
    for (let i = 0; i < S.n; i++) if (matches(i)) v.push(i);
    const key = SORT_KEYS[S.sort.col], dir = S.sort.asc ? 1 : -1;
    if (S.sort.col !== 0 || !S.sort.asc) {
      v.sort((a, b) => { const x = key(a), y = key(b); const c = x < y ? -1 : x > y ? 1 : a - b; return c * dir; });
    }
    S.view = v;
    $("shown").textContent = `${v.length.toLocaleString()} of ${S.n.toLocaleString()} pairs`;
    renderTable(true);
    drawChart();
  }

  // --- virtualised table ---
  const ROW = 22, HEAD = 24, COLS = ["#", "name", "op", "result", "error", "cosine", "MaxAbsErr", "MaxRelErr (abs)"];
  function cells(i) {
    const R = S.doc.records, M = S.doc.metrics;
    const mae = M.MaxAbsErr ? M.MaxAbsErr[i] : null, mre = M.MaxRelativeErr ? M.MaxRelativeErr[i] : null;
    const huge = mre != null && (num(mre) > 1e3 || mre === "inf");
    return [i, esc(R.name[i]), esc(R.op[i]), `<span class="dot r${R.res[i]}"></span>${S.doc.results[R.res[i]]}`,
            fmtU(R.eu[i]), fmtCos(R.omc[i]), fmt(mae), fmt(mre) + (huge ? ` (${fmt(mae)})` : "")];
  }
  function renderTable(reset) {
    const box = $("tbl"), body = $("tbody");
    if (reset) { body.style.height = S.view.length * ROW + "px"; if (reset === true) box.scrollTop = 0; }
    const first = Math.max(0, Math.floor((box.scrollTop) / ROW) - 5);
    const last = Math.min(S.view.length, first + Math.ceil(box.clientHeight / ROW) + 10);
    let h = "";
    for (let k = first; k < last; k++) {
      const i = S.view[k], c = cells(i);
      h += `<div class="tr${i === S.sel ? " sel" : ""}" data-i="${i}" style="top:${k * ROW}px">` +
        c.map((x, j) => `<div class="c c${j}">${x}</div>`).join("") + "</div>";
    }
    body.innerHTML = h;
  }
  function initTable() {
    $("thead").innerHTML = COLS.map((c, j) => `<div class="c c${j}" data-j="${j}">${c}</div>`).join("");
    $("thead").addEventListener("click", (e) => {
      const j = +e.target.dataset.j; if (Number.isNaN(j)) return;
      S.sort = {col: j, asc: S.sort.col === j ? !S.sort.asc : j < 3};
      applyView();
    });
    $("tbl").addEventListener("scroll", () => renderTable(false));
    $("tbody").addEventListener("click", (e) => { const tr = e.target.closest(".tr"); if (tr) select(+tr.dataset.i, "table"); });
  }
  function scrollTableTo(i) {
    const k = S.view.indexOf(i);
    const box = $("tbl");
    if (k >= 0 && (k * ROW < box.scrollTop || (k + 1) * ROW > box.scrollTop + box.clientHeight - HEAD)) box.scrollTop = Math.max(0, k * ROW - box.clientHeight / 3);
    renderTable(false);
  }

  // --- chart: error along execution ---
  const FLOOR = {eu: 1e-2, omc: 1e-12};
  function yval(i) {
    const v = num(S.doc.records[S.metric][i]);
    if (v === null || v === undefined || Number.isNaN(v)) return null;
    if (!Number.isFinite(v)) return 1e30;
    return Math.max(v, FLOOR[S.metric]);
  }
  function drawChart() {  // chart.js: a canvas, drawn at once however many pairs are in view
    const R = S.doc.records, n = S.view.length, x = new Int32Array(n), y = new Float64Array(n), c = new Uint8Array(n);
    let m = 0;
    for (const i of S.view) { const v = yval(i); if (v !== null) { x[m] = i; y[m] = v; c[m] = R.res[i]; m++; } }
    const st = S.doc.culprit;
    if (!S.chart) S.chart = window.opdiffChart($("chart"), {colors: COLORS, names: S.doc.results, xlabel: "pair # (execution order)",
      pick: (i) => select(i, "chart"), label: (i) => `#${i} ${esc(R.name[i])}<br>${fmt(yval(i), 3)}`});
    S.chart.draw({n: S.n, x: x.subarray(0, m), y: y.subarray(0, m), c: c.subarray(0, m), star: st, starY: st == null ? null : (yval(st) ?? FLOOR[S.metric]),
                  floor: FLOOR[S.metric], ylabel: S.metric === "eu" ? "error (rounding units u)" : "1 − cosine"});
    S.chartReady = true; markSelected();
    requestAnimationFrame(() => setTimeout(drawn, 0));  // after the frame holding the chart was painted
  }
  function drawn() {  // the chart is on screen: say so (body[data-chart=drawn], timing.chart), then the rest once
    if (document.body.dataset.chart !== "drawn") {
      window.opdiff.timing.chart = performance.now();
      document.body.dataset.chart = "drawn";
    }
    if (S.pending) { const f = S.pending; S.pending = null; f(); }
  }
  function markSelected() {
    if (!S.chartReady) return;
    S.chart.mark(S.sel, S.sel == null ? null : yval(S.sel));
  }
  function needPlotly() {  // plotly.js is inlined as text and run only when the pair charts need it (seconds to start)
    const src = $("opdiff-plotly");
    if (window.Plotly || !src) return !!window.Plotly;
    const s = document.createElement("script");
    s.textContent = src.textContent;
    src.remove();
    document.head.appendChild(s);  // an inline script runs as it is inserted
    return !!window.Plotly;
  }

  // --- module tree ---
  function buildTree() {
    const root = {name: "", full: "", kids: new Map(), worst: -1, res: -1, n: 0};
    const R = S.doc.records;
    for (let i = 0; i < S.n; i++) {
      const m = R.module[i] || "";
      let node = root;
      const e = num(R.eu[i]), r = R.res[i] === 3 ? -1 : R.res[i];
      const upd = (nd) => { nd.n++; if (e != null && !Number.isNaN(e) && e > nd.worst) nd.worst = e; if (r > nd.res) nd.res = r; };
      upd(node);
      if (!m) continue;
      let full = "";
      for (const part of m.split(".")) {
        full = full ? full + "." + part : part;
        if (!node.kids.has(part)) node.kids.set(part, {name: part, full, kids: new Map(), worst: -1, res: -1, n: 0});
        node = node.kids.get(part);
        upd(node);
      }
    }
    S.tree = root;
  }
  function treeItem(nd) {
    const li = document.createElement("li");
    const has = nd.kids.size > 0;
    const col = nd.res >= 0 ? COLORS[nd.res] : COLORS[3];
    li.innerHTML = `<span class="tog">${has ? "▸" : ""}</span><span class="tn" data-module="${esc(nd.full)}"><span class="sw" style="background:${col}"></span>${esc(nd.name || "(model)")} <span class="muted">${nd.worst >= 0 ? fmtU(nd.worst) : ""} · ${nd.n}</span></span>`;
    li._node = nd;
    return li;
  }
  function expand(li) {
    const nd = li._node;
    if (li._open || !nd.kids.size) return;
    const ul = document.createElement("ul");
    for (const k of nd.kids.values()) ul.appendChild(treeItem(k));
    li.appendChild(ul); li._open = true; li.querySelector(".tog").textContent = "▾";
  }
  function collapse(li) { const ul = li.querySelector("ul"); if (ul) ul.remove(); li._open = false; li.querySelector(".tog").textContent = li._node.kids.size ? "▸" : ""; }
  function initTree() {
    buildTree();
    const ul = document.createElement("ul");
    const top = treeItem(S.tree);
    ul.appendChild(top); $("tree").appendChild(ul); expand(top);
    $("tree").addEventListener("click", (e) => {
      const li = e.target.closest("li"); if (!li) return;
      if (e.target.classList.contains("tog")) { li._open ? collapse(li) : expand(li); return; }
      if (e.target.closest(".tn")) selectModule(li._node.full);
    });
  }
  function revealModule(m) {  // expand the tree down to module m and mark it
    let li = $("tree").querySelector("li");
    if (!li) return;  // the tree is built right after the chart is drawn
    if (m) for (const part of m.split(".")) {
      expand(li);
      const next = [...li.querySelector("ul").children].find((c) => c._node.name === part);
      if (!next) break;
      li = next;
    }
    $("tree").querySelectorAll(".tn.sel").forEach((x) => x.classList.remove("sel"));
    const tn = li.querySelector(".tn"); tn.classList.add("sel");
    const box = $("tree"), r = tn.getBoundingClientRect(), b = box.getBoundingClientRect();
    if (r.top < b.top || r.bottom > b.bottom) box.scrollTop += r.top - b.top - box.clientHeight / 3;
  }
  function selectModule(m) {
    S.filter.module = m; $("f-module").value = m;
    applyView();
    revealModule(m);
    // the module's culprit record if it holds it, else its worst pair (FAIL first)
    const c = S.doc.culprit;
    if (c != null && S.view.includes(c)) { select(c, "tree"); return; }
    let best = null, bk = null;
    for (const i of S.view) { const k = [S.doc.records.res[i] === 3 ? -1 : S.doc.records.res[i], num(S.doc.records.eu[i]) ?? -1]; if (bk === null || k[0] > bk[0] || (k[0] === bk[0] && k[1] > bk[1])) { best = i; bk = k; } }
    if (best != null) select(best, "tree");
  }

  // --- details of the selected pair ---
  function renderDetails(i) {
    const R = S.doc.records, M = S.doc.metrics;
    let h = `<h2>Pair #${i} <span class="badge r${R.res[i]}">${S.doc.results[R.res[i]]}</span></h2><div class="dgrid"><div class="dtab">` +
      `<table><tr><td>target</td><td class="mono" id="d-name">${brk(R.name[i])}</td></tr>` +
      (R.gname[i] ? `<tr><td>golden</td><td class="mono">${brk(R.gname[i])}</td></tr>` : "") +
      `<tr><td>module</td><td>${brk(R.module[i] || "<root>")}</td></tr><tr><td>op</td><td>${brk(R.op[i])} (${brk(R.dir[i])})</td></tr>` +
      `<tr><td>dtype g/t</td><td>${esc(R.gdt[i])}/${esc(R.tdt[i])}</td></tr><tr><td>shape</td><td>[${esc(R.shape[i].join(","))}]</td></tr>` +
      `<tr><td>match / status</td><td>${brk(R.match[i])} / ${brk(R.status[i])}</td></tr>` +
      `<tr><td>error</td><td>${fmtU(R.eu[i])}</td></tr><tr><td>Cosine</td><td id="d-cos">${fmtCos(R.omc[i])}</td></tr>`;
    for (const k of Object.keys(M)) if (M[k][i] !== null && M[k][i] !== undefined) h += `<tr><td>${esc(k)}</td><td class="mono">${fmt(M[k][i], 6)}</td></tr>`;
    if (R.msg && R.msg[i]) h += `<tr><td>note</td><td>${brk(R.msg[i])}</td></tr>`;
    h += "</table></div>";
    const s = S.doc.samples[String(i)];
    const wait = s && S.later && !window.Plotly && $("opdiff-plotly");  // the opening pair: plotly not started yet
    h += (s && !$("opdiff-plotly") && !window.Plotly ? '<p class="muted">The sample charts need plotly (pip install "opdiff[report]") when the report is written.</p>' : "") +
      (wait ? '<p class="muted" id="pp-later"><a href="#" id="pp-draw">Draw the sample charts</a> (plotly starts when a pair is first opened: a few seconds)</p>' : "") +
      (s ? `<div id="pairplots"><div id="pp-scatter"></div><div id="pp-hist"></div></div>` :
      '<p class="muted">No value sample stored for this pair (samples are kept for the diagnosis\' tensors and the worst pairs).</p>') + "</div>";
    $("details").innerHTML = h;
    if (wait) $("pp-draw").addEventListener("click", (e) => { e.preventDefault(); needPlotly(); renderDetails(i); });
    if (s && !S.later && needPlotly()) {
      const g = s.g.map(num), t = s.t.map(num);
      const lo = Math.min(...g.filter(Number.isFinite)), hi = Math.max(...g.filter(Number.isFinite));
      // small charts: titles on the left, no plotly toolbar over them (drag zooms, double-click resets)
      const m = {l: 45, r: 5, t: 28, b: 35}, small = {displaylogo: false, displayModeBar: false, responsive: true};
      const title = (text) => ({text, font: {size: 12}, x: 0.02, xanchor: "left"});
      Plotly.newPlot("pp-scatter", [{type: "scatter", mode: "markers", x: g, y: t, marker: {size: 4, color: COLORS[R.res[i]]}, name: "values"},
        {type: "scatter", mode: "lines", x: [lo, hi], y: [lo, hi], line: {color: "#888", dash: "dot"}, name: "y = x"}],
        {title: title("target vs golden (sample)"), margin: m, showlegend: false, xaxis: {title: {text: "golden"}}, yaxis: {title: {text: "target"}}},
        small);
      Plotly.newPlot("pp-hist", [{type: "histogram", x: t.map((v, k) => v - g[k]), marker: {color: COLORS[R.res[i]]}, nbinsx: 40}],
        {title: title("target − golden (sample)"), margin: m, bargap: 0.05}, small);
    }
  }
  function select(i, from) {
    if (i == null || i < 0 || i >= S.n) return;
    S.sel = i;
    renderDetails(i);
    markSelected();
    if (from !== "table") scrollTableTo(i); else renderTable(false);
    if (from !== "tree") revealModule(S.doc.records.module[i] || "");
    document.body.dataset.selected = String(i);
  }
  function selectByName(name) {
    const R = S.doc.records;
    let i = R.name.indexOf(name);
    if (i < 0) i = R.gname.indexOf(name);
    if (i >= 0) select(i, "link");
  }

  // --- start ---
  function initFilters() {
    const ops = [...new Set(S.doc.records.op)].sort();
    $("f-op").innerHTML = '<option value="">all ops</option>' + ops.map((o) => `<option>${esc(o)}</option>`).join("");
    $("f-res").innerHTML = '<option value="">all results</option>' + S.doc.results.map((r, k) => `<option value="${k}">${r}</option>`).join("");
    const on = (id, key) => $(id).addEventListener("input", () => {
      S.filter[key] = $(id).value;
      if (key === "name") { try { S.nameRe = /[\\^$*+?()[\]{}|]/.test(S.filter.name) ? new RegExp(S.filter.name, "i") : null; $(id).style.outline = ""; } catch (e) { S.nameRe = null; $(id).style.outline = "2px solid #d62728"; } }
      applyView();
    });
    on("f-res", "res"); on("f-op", "op"); on("f-module", "module"); on("f-name", "name");
    $("f-metric").addEventListener("change", () => { S.metric = $("f-metric").value; drawChart(); });
  }
  function header() {
    const d = S.doc;
    $("title").textContent = d.title;
    $("sub").innerHTML = `golden <code>${esc(d.golden.path)}</code> vs target <code>${esc(d.target.path)}</code> · rank ${esc(d.target.rank)} step ${esc(d.target.step)} · mode ${esc(d.mode)} · thresholds ${esc(d.thresholds)}`;
    $("counts").innerHTML = d.results.map((r, k) => `<span class="badge r${k}">${r} ${(d.counts[r] || 0).toLocaleString()}</span>`).join("") +
      (d.first_fail != null ? ` first FAIL: <span class="rec mono" id="firstfail">#${d.first_fail}</span>` : "");
    const ff = $("firstfail"); if (ff) ff.addEventListener("click", () => select(d.first_fail, "link"));
  }
  async function main() {
    const t0 = performance.now(), T = window.opdiff.timing;  // ms since navigation started
    T.script = t0;
    try { S.doc = await load("opdiff-data"); } catch (e) { $("diag").innerHTML = `<p class="warn">This browser cannot read the report's data (${esc(e)}); use a current Chrome, Firefox, Edge or Safari.</p>`; return; }
    T.decoded = performance.now();
    S.n = S.doc.records.name.length;
    header(); renderDiagnosis(S.doc.diagnosis); initFilters(); initTable();
    T.init = performance.now();
    // the chart and the table's first rows first; the tree and the opening selection right after they are drawn
    S.pending = async () => {
      try { const more = await load("opdiff-data-more"); Object.assign(S.doc.metrics, more.metrics); S.doc.records.msg = more.msg; }
      catch (e) { S.doc.records.msg = []; }  // the details then show the table's metrics only
      T.more = performance.now();
      initTree();
      const start = S.doc.culprit ?? S.doc.first_fail;
      S.later = true;  // the opening pair's sample charts wait for plotly, started once the page is ready
      if (start != null) select(start, "start");
      S.later = false;
      window.opdiff.loadMs = performance.now() - t0;
      T.ready = performance.now();
      document.body.dataset.ready = "1";
      // then plotly (seconds to start on a slow machine; the page is frozen meanwhile) and the opening pair's charts
      setTimeout(() => { if (needPlotly() && S.sel != null) renderDetails(S.sel); T.plotly = performance.now(); }, 0);
    };
    applyView();
    T.view = performance.now();
  }
  window.opdiff = {state: S, select, selectByName, selectModule, fmt, fmtCos, timing: {}};
  document.addEventListener("DOMContentLoaded", main);
})();
