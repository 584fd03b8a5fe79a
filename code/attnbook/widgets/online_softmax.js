// Online softmax over one query row, one block of keys per step, computed here:
// m' = max(m, max_block s), c = e^{m - m'}, l' = l c + sum e^{s - m'}, o~' = o~ c + sum e^{s - m'} v.
// Top: the scores (read ones blue, this step's block orange, running max dashed); middle: the weights
// e^{s - m} / l so far, with the full softmax as outlines; bottom: one table row per step.

function onlineSteps(s, v, b) {                   // the state after each block: [{m, c, l, ot, o}]
  const out = [];
  let m = -Infinity, l = 0, ot = 0;
  for (let start = 0; start < s.length; start += b) {
    const blk = s.slice(start, start + b), mNew = Math.max(m, ...blk);
    const c = Math.exp(m - mNew);                 // m = -inf at the first block: c = 0
    const e = blk.map((x) => Math.exp(x - mNew));
    l = l * c + e.reduce((a, x) => a + x, 0);
    ot = ot * c + e.reduce((a, x, j) => a + x * v[start + j], 0);
    m = mNew;
    out.push({ m, c, l, ot, o: ot / l });
  }
  return out;
}

function render({ model, el }) {
  const s = model.get("scores"), v = model.get("values"), n = s.length;
  const full = softmax(s), oFull = full.reduce((a, p, j) => a + p * v[j], 0);
  el.classList.add("attnbook-widget");
  const bRow = rangeRow("块大小 b ", { min: 1, max: n, step: 1 }, "block");
  const tRow = rangeRow("已读的块 t ", { min: 0, step: 1 }, "step");
  const info = document.createElement("div");
  info.className = "attnbook-readout info";

  const W = 440, L = 30, R = 10, bw = (W - L - R) / n;
  const xOf = (j) => L + j * bw;
  const lo = Math.min(0, ...s), hi = Math.max(0, ...s);
  const H1 = 130, t1 = 20, b1 = 16, yS = (x) => t1 + ((hi - x) / (hi - lo || 1)) * (H1 - t1 - b1);
  const panel = (H, cls, title) => {
    const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", class: cls });
    const t = svgEl("text", { x: L, y: 12, style: "text-anchor: start" });
    t.textContent = title;
    svg.append(t);
    return svg;
  };
  const scoresSvg = panel(H1, "scores", "一个查询的分数 sⱼ（蓝：已读，橙：本块）；虚线：目前的最大值 m");
  scoresSvg.append(svgEl("line", { x1: L, x2: W - R, y1: yS(0), y2: yS(0), class: "axis" }));
  for (const x of [lo, hi]) {
    const t = svgEl("text", { x: L - 3, y: yS(x) + 4, style: "text-anchor: end" });
    t.textContent = x.toFixed(1);
    scoresSvg.append(t);
  }
  const sBars = s.map((x, j) => {
    const r = svgEl("rect", { x: xOf(j) + bw * 0.15, width: bw * 0.7, y: Math.min(yS(x), yS(0)),
      height: Math.abs(yS(x) - yS(0)), class: "ref" });
    scoresSvg.append(r);
    return r;
  });
  const mLine = svgEl("line", { class: "ref max", stroke: "#d08c2c", "stroke-width": 1.5 });
  const separators = svgEl("g", {});
  scoresSvg.append(mLine, separators);

  const H2 = 110, t2 = 20, b2 = 14, pMax = Math.max(...full), yP = (p) => H2 - b2 - (p / pMax) * (H2 - t2 - b2) * 0.9;
  const weightsSvg = panel(H2, "weights", "目前的权重 exp(sⱼ − m) / ℓ；虚线框：整行 Softmax");
  weightsSvg.append(svgEl("line", { x1: L, x2: W - R, y1: H2 - b2, y2: H2 - b2, class: "axis" }));
  const pBars = s.map((_, j) => {
    const x = xOf(j) + bw * 0.15, w = bw * 0.7;
    weightsSvg.append(svgEl("rect", { x, width: w, y: yP(full[j]), height: H2 - b2 - yP(full[j]), class: "ref" }));
    const r = svgEl("rect", { x, width: w, y: H2 - b2, height: 0, class: "bar" });
    weightsSvg.append(r);
    return r;
  });

  const table = document.createElement("table");
  table.className = "steps";
  table.style.fontSize = "0.8em";
  table.innerHTML = "<thead><tr><th>t</th><th>键</th><th>m<sub>t</sub></th>" +
    "<th>e<sup>m<sub>t−1</sub> − m<sub>t</sub></sup></th><th>ℓ<sub>t</sub></th>" +
    "<th>õ<sub>t</sub></th><th>o<sub>t</sub> = õ<sub>t</sub> / ℓ<sub>t</sub></th></tr></thead><tbody></tbody>";
  el.append(bRow.row, tRow.row, info, scoresSvg, weightsSvg, table);

  function draw() {
    const b = model.get("block_size"), steps = onlineSteps(s, v, b), nb = steps.length;
    const t = Math.min(model.get("step"), nb), seen = Math.min(t * b, n), now = t ? steps[t - 1] : null;
    bRow.input.value = b; tRow.input.max = nb; tRow.input.value = t;
    bRow.out.textContent = ` = ${b}（共 ${nb} 块）`;
    tRow.out.textContent = ` = ${t} / ${nb}`;
    s.forEach((_, j) => {
      const cls = j >= seen ? "ref" : j >= (t - 1) * b ? "bar alt" : "bar";
      sBars[j].setAttribute("class", cls);
      const p = j < seen ? Math.exp(s[j] - now.m) / now.l : 0;
      pBars[j].setAttribute("y", j < seen ? yP(p) : H2 - b2);
      pBars[j].setAttribute("height", j < seen ? H2 - b2 - yP(p) : 0);
      pBars[j].dataset.p = p.toPrecision(15);
    });
    separators.replaceChildren(...Array.from({ length: nb - 1 }, (_, i) => svgEl("line", {
      x1: xOf((i + 1) * b), x2: xOf((i + 1) * b), y1: t1, y2: H1 - b1, class: "ref" })));
    mLine.setAttribute("visibility", t ? "visible" : "hidden");
    if (t) for (const [a, val] of [["x1", L], ["x2", xOf(seen)], ["y1", yS(now.m)], ["y2", yS(now.m)]]) mLine.setAttribute(a, val);

    const body = table.tBodies[0];
    body.replaceChildren(...steps.slice(0, t).map((r, i) => {
      const row = document.createElement("tr");
      const cells = [i + 1, `${i * b}–${Math.min((i + 1) * b, n) - 1}`, r.m.toFixed(4), i ? r.c.toFixed(4) : "—",
        r.l.toFixed(4), r.ot.toFixed(4), r.o.toFixed(4)];
      row.innerHTML = cells.map((c) => `<td>${c}</td>`).join("");
      Object.assign(row.dataset, { m: r.m, c: r.c, l: r.l, ot: r.ot, o: r.o });
      return row;
    }));
    const state = now || { m: -Infinity, l: 0, ot: 0, o: NaN };
    Object.assign(info.dataset, { step: t, block: b, m: state.m, l: state.l, ot: state.ot, o: state.o, full: oFull });
    info.textContent = t === 0 ? `还没读任何键：m = −∞，ℓ = 0，õ = 0。整行 Softmax 的输出是 ${oFull.toFixed(6)}。`
      : `读了 ${seen} / ${n} 个键：m = ${now.m.toFixed(4)}，ℓ = ${now.l.toFixed(4)}，o = õ / ℓ = ${now.o.toFixed(6)}` +
        (t === nb ? `；整行 Softmax 的输出 ${oFull.toFixed(6)}，相差 ${Math.abs(now.o - oFull).toExponential(1)}` : "");
  }

  bRow.input.addEventListener("input", () => {
    const b = Number(bRow.input.value);
    model.set("block_size", b);
    model.set("step", Math.min(model.get("step"), Math.ceil(n / b)));
    model.save_changes();
  });
  tRow.input.addEventListener("input", () => { model.set("step", Number(tRow.input.value)); model.save_changes(); });
  model.on("change:block_size", draw);
  model.on("change:step", draw);
  draw();
}

export default { render };
