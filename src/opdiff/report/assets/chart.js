/* opdiff HTML report: the error-along-execution chart, drawn on a 2D canvas without any library, so that
   100,000 points show in tens of milliseconds (plotly needs seconds just to start). Log-scale y, one colour
   per verdict, the culprit's star, the selection's ring; hover shows a point, click picks it, drag zooms
   into a range of pairs, double-click shows all again, a legend entry hides or shows its verdict. */
"use strict";
window.opdiffChart = function (box, opt) {
  const M = {l: 64, r: 12, t: 16, b: 40}, H = 316, SUP = "⁰¹²³⁴⁵⁶⁷⁸⁹";
  const legend = document.createElement("div"), canvas = document.createElement("canvas"), tip = document.createElement("div");
  legend.className = "legend"; tip.className = "tip"; canvas.style.width = "100%"; canvas.style.height = H + "px";
  box.style.position = "relative"; box.append(legend, canvas, tip);
  const C = {data: null, hidden: new Set(), zoom: null, sel: null, grid: null, gw: 0, count: 0, px: null, py: null, drag: null};

  const pow10 = (k) => "10" + (k < 0 ? "⁻" : "") + String(Math.abs(k)).split("").map((d) => SUP[+d]).join("");
  function niceStep(span) {
    const e = Math.pow(10, Math.floor(Math.log10(Math.max(span, 1)))), f = span / e;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * e;
  }
  function frame() {  // pixel size and the scales of the visible range
    const w = Math.max(200, box.clientWidth), dpr = window.devicePixelRatio || 1, d = C.data;
    const [x0, x1] = C.zoom || [0, Math.max(1, d.n - 1)];
    let lo = Infinity, hi = -Infinity;
    for (let k = 0; k < d.x.length; k++) if (!C.hidden.has(d.c[k]) && d.x[k] >= x0 && d.x[k] <= x1) { const v = d.y[k]; if (v < lo) lo = v; if (v > hi) hi = v; }
    if (d.star != null && d.starY != null) { lo = Math.min(lo, d.starY); hi = Math.max(hi, d.starY); }
    if (!(lo <= hi)) { lo = d.floor; hi = 1; }
    const ylo = Math.floor(Math.log10(lo)) - 0.05, yhi = Math.ceil(Math.log10(Math.max(hi, lo * 10))) + 0.05;
    const pw = w - M.l - M.r, ph = H - M.t - M.b, pad = (x1 - x0) * 0.01 + 0.5;
    const sx = (x) => M.l + ((x - x0 + pad) / (x1 - x0 + 2 * pad)) * pw;
    const sy = (y) => M.t + (1 - (Math.log10(y) - ylo) / (yhi - ylo)) * ph;
    return {w, dpr, x0, x1, ylo, yhi, pw, ph, pad, sx, sy};
  }
  function axes(g, f) {
    g.strokeStyle = "#ddd"; g.fillStyle = "#444"; g.lineWidth = 1; g.font = "11px sans-serif";
    g.textAlign = "right"; g.textBaseline = "middle";
    const dec = Math.max(1, Math.ceil((f.yhi - f.ylo) / 8));
    for (let k = Math.ceil(f.ylo); k <= f.yhi; k += dec) {
      const y = f.sy(Math.pow(10, k));
      g.beginPath(); g.moveTo(M.l, y); g.lineTo(f.w - M.r, y); g.stroke(); g.fillText(pow10(k), M.l - 6, y);
    }
    g.textAlign = "center"; g.textBaseline = "top";
    const step = niceStep((f.x1 - f.x0) / 8);
    for (let x = Math.ceil(f.x0 / step) * step; x <= f.x1; x += step) {
      const px = f.sx(x);
      g.beginPath(); g.moveTo(px, M.t); g.lineTo(px, H - M.b); g.stroke(); g.fillText(x.toLocaleString(), px, H - M.b + 4);
    }
    g.fillText(opt.xlabel, M.l + f.pw / 2, H - 16);
    g.save(); g.translate(14, M.t + f.ph / 2); g.rotate(-Math.PI / 2); g.fillText(C.data.ylabel, 0, -6); g.restore();
    g.strokeStyle = "#888"; g.strokeRect(M.l, M.t, f.pw, f.ph);
  }
  function star(g, x, y, r) {
    g.beginPath();
    for (let k = 0; k < 10; k++) { const a = -Math.PI / 2 + k * Math.PI / 5, rr = k % 2 ? r * 0.45 : r; g.lineTo(x + rr * Math.cos(a), y + rr * Math.sin(a)); }
    g.closePath(); g.fillStyle = "#000"; g.fill(); g.strokeStyle = "#fff"; g.lineWidth = 1; g.stroke();
  }
  function draw() {
    const d = C.data; if (!d) return;
    const f = frame(), g = canvas.getContext("2d");
    canvas.width = Math.round(f.w * f.dpr); canvas.height = Math.round(H * f.dpr);
    g.setTransform(f.dpr, 0, 0, f.dpr, 0, 0); g.clearRect(0, 0, f.w, H);
    axes(g, f);
    const gw = C.gw = Math.ceil(f.w / 4), grid = C.grid = new Int32Array(gw * Math.ceil(H / 4)).fill(-1);
    C.px = new Float32Array(d.x.length); C.py = new Float32Array(d.x.length); C.count = 0;
    const small = d.x.length <= 5000;
    g.save(); g.beginPath(); g.rect(M.l, M.t, f.pw, f.ph); g.clip();
    for (let r = 0; r < opt.colors.length; r++) {  // verdicts in order, the later on top (as plotly's traces were)
      if (C.hidden.has(r)) continue;
      g.fillStyle = opt.colors[r]; g.globalAlpha = r === 0 ? 0.6 : 0.9;
      if (small) g.beginPath();
      for (let k = 0; k < d.x.length; k++) {
        if (d.c[k] !== r || d.x[k] < f.x0 || d.x[k] > f.x1) continue;
        const px = f.sx(d.x[k]), py = f.sy(d.y[k]);
        C.px[k] = px; C.py[k] = py; C.count++;
        if (small) { g.moveTo(px + 3, py); g.arc(px, py, 3, 0, 2 * Math.PI); } else g.fillRect(px - 1.5, py - 1.5, 3, 3);
        grid[Math.floor(py / 4) * gw + Math.floor(px / 4)] = k;
      }
      if (small) g.fill();
    }
    g.globalAlpha = 1;
    if (d.star != null && d.starY != null && d.star >= f.x0 && d.star <= f.x1) {
      const px = f.sx(d.star), py = f.sy(d.starY);
      star(g, px, py, 9); g.fillStyle = "#000"; g.textAlign = "center"; g.textBaseline = "bottom"; g.font = "11px sans-serif"; g.fillText("culprit", px, py - 10);
      C.starXY = [px, py];
    } else C.starXY = null;
    if (C.sel != null && C.sel.y != null && C.sel.i >= f.x0 && C.sel.i <= f.x1) {
      g.beginPath(); g.arc(f.sx(C.sel.i), f.sy(C.sel.y), 8, 0, 2 * Math.PI); g.strokeStyle = "#1f5fbf"; g.lineWidth = 3; g.stroke();
    }
    g.restore();
    if (C.drag) { g.fillStyle = "rgba(31,95,191,.15)"; g.fillRect(Math.min(C.drag.a, C.drag.b), M.t, Math.abs(C.drag.b - C.drag.a), f.ph); }
    C.f = f;
    renderLegend();
  }
  function renderLegend() {
    const d = C.data, counts = new Array(opt.colors.length).fill(0);
    for (let k = 0; k < d.c.length; k++) counts[d.c[k]]++;
    legend.innerHTML = opt.names.map((nm, r) => counts[r] ? `<span class="lg${C.hidden.has(r) ? " off" : ""}" data-r="${r}"><span class="sw" style="background:${opt.colors[r]}"></span>${nm} ${counts[r].toLocaleString()}</span>` : "").join("") +
      (d.star != null ? '<span class="lg"><span class="star">★</span>culprit</span>' : "") +
      (C.zoom ? ' <span class="muted">pairs ' + Math.round(C.zoom[0]).toLocaleString() + "–" + Math.round(C.zoom[1]).toLocaleString() + " (double-click: all)</span>" : "");
  }
  function hit(ev) {  // the point under the mouse (the culprit's star first), or null
    const rect = canvas.getBoundingClientRect(), mx = ev.clientX - rect.left, my = ev.clientY - rect.top, d = C.data;
    if (!d || !C.grid) return null;
    if (C.starXY && Math.hypot(mx - C.starXY[0], my - C.starXY[1]) <= 10) return d.star;
    let best = null, bd = 8;
    const cx = Math.floor(mx / 4), cy = Math.floor(my / 4);
    for (let gy = cy - 2; gy <= cy + 2; gy++) for (let gx = cx - 2; gx <= cx + 2; gx++) {
      if (gx < 0 || gy < 0 || gx >= C.gw) continue;
      const k = C.grid[gy * C.gw + gx];
      if (k >= 0) { const dd = Math.hypot(mx - C.px[k], my - C.py[k]); if (dd <= bd) { bd = dd; best = d.x[k]; } }
    }
    return best;
  }
  canvas.addEventListener("mousedown", (ev) => { const r = canvas.getBoundingClientRect(); C.drag = {a: ev.clientX - r.left, b: ev.clientX - r.left, moved: false}; });
  canvas.addEventListener("mousemove", (ev) => {
    const r = canvas.getBoundingClientRect();
    if (C.drag && ev.buttons) { C.drag.b = ev.clientX - r.left; C.drag.moved = C.drag.moved || Math.abs(C.drag.b - C.drag.a) > 5; if (C.drag.moved) draw(); return; }
    const i = hit(ev);
    if (i == null) { tip.style.display = "none"; canvas.style.cursor = "crosshair"; return; }
    canvas.style.cursor = "pointer"; tip.style.display = "block";
    tip.innerHTML = opt.label(i); tip.style.left = Math.min(ev.clientX - r.left + 12, r.width - 260) + "px"; tip.style.top = ev.clientY - r.top + legend.offsetHeight + 12 + "px";
  });
  canvas.addEventListener("mouseup", (ev) => {
    const dr = C.drag; C.drag = null;
    if (dr && dr.moved && C.f) {  // zoom into the dragged range of pairs
      const f = C.f, inv = (px) => f.x0 - f.pad + ((px - M.l) / f.pw) * (f.x1 - f.x0 + 2 * f.pad);
      const a = inv(Math.min(dr.a, dr.b)), b = inv(Math.max(dr.a, dr.b));
      if (b - a >= 1) C.zoom = [Math.max(0, a), b];
      draw(); return;
    }
    const i = hit(ev);
    if (i != null) opt.pick(i);
  });
  canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  canvas.addEventListener("dblclick", () => { C.zoom = null; draw(); });
  legend.addEventListener("click", (ev) => {
    const el = ev.target.closest(".lg"); if (!el || el.dataset.r === undefined) return;
    const r = +el.dataset.r; C.hidden.has(r) ? C.hidden.delete(r) : C.hidden.add(r); draw();
  });
  let width = box.clientWidth;
  window.addEventListener("resize", () => { if (box.clientWidth !== width) { width = box.clientWidth; draw(); } });

  return {
    // data: {n, x: pair indices, y: values > 0, c: verdict codes, star, starY, floor, ylabel}
    draw(data) { C.data = data; draw(); },
    mark(i, y) { C.sel = i == null ? null : {i, y}; draw(); },
    count: () => C.count,  // points drawn
    xy(i) {  // where pair i's point (or the culprit's star) is on the screen, in client coordinates
      const r = canvas.getBoundingClientRect(), f = C.f, d = C.data;
      if (!f || !d) return null;
      if (i === d.star && C.starXY) return [r.left + C.starXY[0], r.top + C.starXY[1]];
      const k = Array.prototype.indexOf.call(d.x, i);
      return k < 0 ? null : [r.left + f.sx(i), r.top + f.sy(d.y[k])];
    },
    canvas,
  };
};
