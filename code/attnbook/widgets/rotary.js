// Rotary position embedding, computed here: feature pair (2i, 2i+1) of a vector at position p is
// rotated by the angle p theta_i, theta_i = base^(-2i/D). Top: pair i of q and k before (dashed) and
// after rotation; bottom: the full score <rot(q, m), rot(k, n)> for every offset n - m.
const BLUE = "#3b6ea5", ORANGE = "#d08c2c";

function rotate(x, p, base) {                     // the whole vector at position p
  const D = x.length, y = x.slice();
  for (let i = 0; i < D / 2; i++) {
    const a = p * Math.pow(base, (-2 * i) / D), c = Math.cos(a), s = Math.sin(a);
    y[2 * i] = x[2 * i] * c - x[2 * i + 1] * s;
    y[2 * i + 1] = x[2 * i] * s + x[2 * i + 1] * c;
  }
  return y;
}

const dot = (a, b) => a.reduce((s, v, j) => s + v * b[j], 0);

function render({ model, el }) {
  const q = model.get("q"), k = model.get("k"), M = model.get("max_pos"), base = model.get("base");
  const D = q.length;
  el.classList.add("attnbook-widget");
  const mRow = rangeRow("查询位置 m ", { min: 0, max: M, step: 1 }, "m");
  const nRow = rangeRow("键位置 n ", { min: 0, max: M, step: 1 }, "n");
  const pRow = rangeRow("分量对 i ", { min: 0, max: D / 2 - 1, step: 1 }, "pair");
  const shifts = document.createElement("div");
  shifts.className = "attnbook-controls";
  const button = (text, cls) => Object.assign(document.createElement("button"), { textContent: text, className: cls });
  const down = button("m、n 同时 −1", "shift-down"), up = button("m、n 同时 +1", "shift-up");
  shifts.append(down, up);
  const info = document.createElement("div");
  info.className = "attnbook-readout info";

  // Plane of pair i: R is the radius of the longer of the two 2-vectors.
  const W = 440, S = 210, C = S / 2, R = 88;
  const plane = svgEl("svg", { viewBox: `0 0 ${W} ${S}`, width: "100%", role: "img", class: "plane" });
  plane.append(svgEl("circle", { cx: C, cy: C, r: R, class: "ref" }),
    svgEl("line", { x1: C - R - 8, x2: C + R + 8, y1: C, y2: C, class: "axis" }),
    svgEl("line", { x1: C, x2: C, y1: C - R - 8, y2: C + R + 8, class: "axis" }));
  const arrow = (colour, dashed) => {
    const line = svgEl("line", { x1: C, y1: C, stroke: colour, "stroke-width": dashed ? 1.2 : 2.2,
      "stroke-dasharray": dashed ? "4 3" : "none" });
    const tip = svgEl("circle", { r: dashed ? 2.5 : 4, fill: colour });
    plane.append(line, tip);
    return (x, y) => {
      for (const [a, v] of [["x2", C + x], ["y2", C - y]]) line.setAttribute(a, v);
      tip.setAttribute("cx", C + x);
      tip.setAttribute("cy", C - y);
    };
  };
  const q0 = arrow(BLUE, true), k0 = arrow(ORANGE, true), qr = arrow(BLUE, false), kr = arrow(ORANGE, false);
  const lines = Array.from({ length: 7 }, (_, j) => {
    const t = svgEl("text", { x: S + 10, y: 22 + j * 25, style: "text-anchor: start" });
    plane.append(t);
    return t;
  });

  // Score for every offset r = n - m (q at 0, k at r): the same curve for any m.
  const H = 150, L = 40, Rm = 12, top = 20, bottom = 22;
  const offs = Array.from({ length: 2 * M + 1 }, (_, j) => j - M);
  const qAt0 = rotate(q, 0, base), curveY = offs.map((r) => dot(qAt0, rotate(k, r, base)));
  const big = Math.max(...curveY.map(Math.abs)) || 1;
  const xOf = (r) => L + ((r + M) / (2 * M)) * (W - L - Rm), yOf = (v) => top + (1 - v / big) * (H - top - bottom) / 2;
  const offsets = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", class: "offsets" });
  const curve = svgEl("polyline", { class: "curve", points: offs.map((r, j) => `${xOf(r)},${yOf(curveY[j])}`).join(" ") });
  curve.dataset.values = JSON.stringify(curveY);
  const marker = svgEl("circle", { r: 4.5, class: "marker" });
  offsets.append(svgEl("line", { x1: L, x2: W - Rm, y1: yOf(0), y2: yOf(0), class: "axis" }),
    svgEl("line", { x1: xOf(0), x2: xOf(0), y1: top, y2: H - bottom, class: "ref" }), curve, marker);
  for (const [x, y, text, anchor] of [[L + 4, 12, `全部 ${D / 2} 对的分数 ⟨rot(q, m), rot(k, n)⟩ 随 n − m 的变化`, "start"],
    [xOf(-M), H - 6, String(-M), "middle"], [xOf(0), H - 6, "n − m = 0", "middle"], [xOf(M), H - 6, String(M), "middle"],
    [L - 4, yOf(big) + 4, big.toFixed(1), "end"], [L - 4, yOf(-big) + 4, (-big).toFixed(1), "end"]]) {
    const t = svgEl("text", { x, y, style: `text-anchor: ${anchor}` });
    t.textContent = text;
    offsets.append(t);
  }
  el.append(mRow.row, nRow.row, pRow.row, shifts, info, plane, offsets);

  function draw() {
    const m = model.get("m"), n = model.get("n"), i = model.get("pair");
    mRow.input.value = m; nRow.input.value = n; pRow.input.value = i;
    mRow.out.textContent = ` = ${m}`; nRow.out.textContent = ` = ${n}`; pRow.out.textContent = ` = ${i}`;
    down.disabled = Math.min(m, n) <= 0;
    up.disabled = Math.max(m, n) >= M;
    const rq = rotate(q, m, base), rk = rotate(k, n, base), score = dot(rq, rk);
    const a = 2 * i, theta = Math.pow(base, (-2 * i) / D);
    const scale = R / (Math.max(Math.hypot(q[a], q[a + 1]), Math.hypot(k[a], k[a + 1])) || 1);
    q0(q[a] * scale, q[a + 1] * scale); k0(k[a] * scale, k[a + 1] * scale);
    qr(rq[a] * scale, rq[a + 1] * scale); kr(rk[a] * scale, rk[a + 1] * scale);
    const pairScore = rq[a] * rk[a] + rq[a + 1] * rk[a + 1];
    const text = [[`分量对 i = ${i}：θ_i = ${theta.toPrecision(4)} 弧度`, "currentColor"],
      [`q（蓝）转过 mθ_i = ${(m * theta).toPrecision(4)}`, BLUE],
      [`k（橙）转过 nθ_i = ${(n * theta).toPrecision(4)}`, ORANGE],
      [`两者的夹角多了 (n − m)θ_i = ${((n - m) * theta).toPrecision(4)}`, "currentColor"],
      [`这一对贡献的分数：${pairScore.toFixed(4)}`, "currentColor"],
      [`全部分量对的分数 q·k：${score.toFixed(4)}`, "currentColor"],
      ["虚线：旋转前", "#888"]];
    text.forEach(([s, colour], j) => { lines[j].textContent = s; lines[j].setAttribute("fill", colour); });
    marker.setAttribute("cx", xOf(n - m));
    marker.setAttribute("cy", yOf(score));
    info.textContent = `n − m = ${n - m}，分数 ${score.toFixed(4)}`;
    Object.assign(info.dataset, { m, n, pair: i, score: score.toPrecision(15), pairScore: pairScore.toPrecision(15),
      rq: JSON.stringify(rq), rk: JSON.stringify(rk) });
  }

  const set = (changes) => {
    for (const [key, v] of Object.entries(changes)) model.set(key, v);
    model.save_changes();
  };
  mRow.input.addEventListener("input", () => set({ m: Number(mRow.input.value) }));
  nRow.input.addEventListener("input", () => set({ n: Number(nRow.input.value) }));
  pRow.input.addEventListener("input", () => set({ pair: Number(pRow.input.value) }));
  down.addEventListener("click", () => set({ m: model.get("m") - 1, n: model.get("n") - 1 }));
  up.addEventListener("click", () => set({ m: model.get("m") + 1, n: model.get("n") + 1 }));
  for (const key of ["m", "n", "pair"]) model.on(`change:${key}`, draw);
  draw();
}

export default { render };
