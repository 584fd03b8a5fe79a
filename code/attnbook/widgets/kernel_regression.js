// Nadaraya–Watson kernel regression, computed here: weights = softmax(-(q - k_j)^2 / (2 w^2)),
// estimate = sum_j weights_j v_j. Top: data, estimate curve, nearest-station steps, global mean.
// Bottom: the weights over the data points for the current query.

function nadarayaWatson(q, ks, vs, w) {
  const p = softmax(ks.map((k) => -((q - k) ** 2) / (2 * w * w)));
  return { p, y: p.reduce((s, pj, j) => s + pj * vs[j], 0) };
}

function render({ model, el }) {
  const ks = model.get("positions"), vs = model.get("values");
  const x0 = model.get("x_min"), x1 = model.get("x_max");
  const xu = model.get("x_unit"), yu = model.get("y_unit");
  const n = ks.length, mean = vs.reduce((a, b) => a + b, 0) / n;
  const W = 440, L = 40, R = 12, H1 = 200, H2 = 110, top = 18, bottom = 26;
  const lo = Math.min(...vs), hi = Math.max(...vs), span = hi - lo || 1;
  const yMin = lo - 0.1 * span, yMax = hi + 0.1 * span;
  const xOf = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const yOf = (y) => top + ((yMax - y) / (yMax - yMin)) * (H1 - top - bottom);
  el.classList.add("attnbook-widget");

  const width = rangeRow("核宽 w ", { min: Math.log10(model.get("w_min")), max: Math.log10(model.get("w_max")),
    step: 0.01 }, "width");
  const query = rangeRow("查询位置 q ", { min: x0, max: x1, step: (x1 - x0) / 400 }, "query");
  const info = document.createElement("div");
  info.className = "attnbook-readout info";

  const plot = svgEl("svg", { viewBox: `0 0 ${W} ${H1}`, width: "100%", role: "img", class: "data" });
  const axisY = H1 - bottom;
  plot.append(svgEl("line", { x1: L, x2: W - R, y1: axisY, y2: axisY, class: "axis" }),
    svgEl("line", { x1: L, x2: L, y1: top, y2: axisY, class: "axis" }));
  const label = (svg, x, y, text, style = "") => {
    const node = svgEl("text", { x, y, style });
    node.textContent = text;
    svg.append(node);
    return node;
  };
  for (let i = 0; i <= 4; i++) {
    const x = x0 + (i / 4) * (x1 - x0);
    label(plot, xOf(x), axisY + 13, x.toFixed(0));
  }
  label(plot, W - R, H1 - 2, xu ? `位置（${xu}）` : "位置", "text-anchor: end");
  for (const y of [lo, hi]) label(plot, L - 4, yOf(y) + 4, y.toFixed(1), "text-anchor: end");
  label(plot, L + 4, 12, `${yu ? `值（${yu}）` : "值"}：估计（蓝点与曲线）、最近点（灰色阶梯）、平均（虚线）`, "text-anchor: start");

  // Grid of queries along the axis: the estimate curve and the nearest-station steps.
  const grid = Array.from({ length: 161 }, (_, i) => x0 + (i / 160) * (x1 - x0));
  const nearestOf = (x) => vs[ks.reduce((b, k, j) => (Math.abs(x - k) < Math.abs(x - ks[b]) ? j : b), 0)];
  plot.append(svgEl("polyline", { class: "ref nearest",
    points: grid.map((x) => `${xOf(x)},${yOf(nearestOf(x))}`).join(" ") }));
  plot.append(svgEl("line", { x1: L, x2: W - R, y1: yOf(mean), y2: yOf(mean), class: "ref mean" }));
  const curve = svgEl("polyline", { class: "curve" });
  curve.dataset.xs = JSON.stringify(grid);
  const cursor = svgEl("line", { y1: top, y2: axisY, class: "axis cursor" });
  const dot = svgEl("circle", { r: 4.5, class: "marker estimate" });
  const stations = ks.map((k, j) => svgEl("circle", { cx: xOf(k), cy: yOf(vs[j]), r: 3, class: "bar station" }));
  plot.append(curve, cursor, ...stations, dot);

  // Weights panel: one bar per data point, at its position.
  const bot = svgEl("svg", { viewBox: `0 0 ${W} ${H2}`, width: "100%", role: "img", class: "weights" });
  const base = H2 - 18, plotH = base - 30;
  bot.append(svgEl("line", { x1: L, x2: W - R, y1: base, y2: base, class: "axis" }));
  label(bot, L + 4, 12, "各数据点的权重 α_j（总和为 1）", "text-anchor: start");
  const bars = ks.map((k) => {
    const bar = svgEl("rect", { x: xOf(k) - 5, width: 10, y: base, height: 0, class: "bar" });
    const value = svgEl("text", { x: xOf(k), y: base - 3, class: "value" });
    const name = svgEl("text", { x: xOf(k), y: H2 - 5 });
    name.textContent = k.toFixed(0);
    bot.append(bar, value, name);
    return { bar, value };
  });
  const cursor2 = svgEl("line", { y1: 26, y2: base, class: "ref cursor" });
  bot.append(cursor2);
  el.append(width.row, query.row, info, plot, bot);

  function draw() {
    const w = model.get("width"), q = model.get("query");
    width.input.value = Math.log10(w);
    query.input.value = q;
    const ys = grid.map((x) => nadarayaWatson(x, ks, vs, w).y);
    curve.setAttribute("points", ys.map((y, i) => `${xOf(grid[i])},${yOf(y)}`).join(" "));
    curve.dataset.values = JSON.stringify(ys);
    const { p, y } = nadarayaWatson(q, ks, vs, w);
    for (const c of [cursor, cursor2]) { c.setAttribute("x1", xOf(q)); c.setAttribute("x2", xOf(q)); }
    dot.setAttribute("cx", xOf(q));
    dot.setAttribute("cy", yOf(y));
    p.forEach((pj, j) => {
      const h = pj * plotH;
      bars[j].bar.setAttribute("y", base - h);
      bars[j].bar.setAttribute("height", h);
      bars[j].bar.dataset.w = pj.toPrecision(15);
      bars[j].value.setAttribute("y", base - h - 3);
      bars[j].value.textContent = pj >= 0.005 ? pj.toFixed(2) : "";
      stations[j].setAttribute("r", 2.5 + 6 * Math.sqrt(pj));    // area grows with the weight
    });
    const top1 = p.indexOf(Math.max(...p));
    width.out.textContent = ` = ${w.toPrecision(3)} ${xu}`;
    query.out.textContent = ` = ${q.toFixed(1)} ${xu}`;
    Object.assign(info.dataset, { width: w, query: q, estimate: y.toPrecision(15) });
    info.textContent = `估计值 ${y.toFixed(2)} ${yu}；最大权重 ${p[top1].toFixed(3)}（位于 ${ks[top1]} ${xu}）；` +
      `最近点的值 ${nearestOf(q).toFixed(2)}，全体平均 ${mean.toFixed(2)} ${yu}`;
  }

  width.input.addEventListener("input", () => {
    model.set("width", Math.pow(10, Number(width.input.value)));
    model.save_changes();
  });
  query.input.addEventListener("input", () => { model.set("query", Number(query.input.value)); model.save_changes(); });
  model.on("change:width", draw);
  model.on("change:query", draw);
  draw();
}

export default { render };
