// RoPE scaling, computed here as attnbook.rope_scaling computes it, for a sequence of length T = ceil(s L):
// each pair's frequency under position interpolation, dynamic NTK or YaRN (top, log scale) and the score
// 2 a^2 sum_i cos(d w_i) of two all-ones vectors at distance d = 0 .. T (bottom). The page numbers the pairs
// r = 1 .. D/2 as the chapter's formulas do (theta_1 = 1 is the fastest; i is a position there); arrays and
// data-* attributes start at 0.
const GREY = "#999", BLUE = "#3b6ea5", ORANGE = "#d08c2c";
const METHOD_NAMES = { none: "不缩放", linear: "位置插值", dynamic_ntk: "动态 NTK", yarn: "YaRN" };
const MAX_POINTS = 512;

function ropeFrequencies(dim, base) {             // base^(-2i/dim), as exp (positional.sinusoidal_frequencies)
  return Array.from({ length: dim / 2 }, (_, i) => Math.exp((-Math.log(base) * (2 * i)) / dim));
}

const ntkBase = (dim, base, s, L, T) => base * Math.pow((s * T) / L - (s - 1), dim / (dim - 2));
const yarnMscale = (s) => (s <= 1 ? 1 : 0.1 * Math.log(s) + 1);

function scaledFrequencies(method, dim, base, s, L, T) {   // [inv_freq, attention factor]
  const w = ropeFrequencies(dim, base);
  if (method === "linear") return [w.map((v) => v / s), 1];
  if (method === "dynamic_ntk") return [ropeFrequencies(dim, ntkBase(dim, base, s, L, T)), 1];
  if (method === "yarn") {                       // beta_fast 32, beta_slow 1, truncated (yarn_scaling's defaults)
    const turning = (r) => (dim * Math.log(L / (r * 2 * Math.PI))) / (2 * Math.log(base));  // pair turning r times
    const low = Math.max(Math.floor(turning(32)), 0);
    let high = Math.min(Math.ceil(turning(1)), dim - 1);
    if (low === high) high += 0.001;
    return [w.map((v, i) => {
      const r = Math.min(Math.max((i - low) / (high - low), 0), 1);   // 0: keep w_i, 1: w_i / s
      return (v / s) * r + v * (1 - r);
    }), yarnMscale(s)];
  }
  return [w, 1];
}

function scoreCurve(w, a, distances) {            // 2 a^2 sum_i cos(d w_i)
  return distances.map((d) => 2 * a ** 2 * w.reduce((acc, v) => acc + Math.cos(d * v), 0));
}

const SUP = "⁰¹²³⁴⁵⁶⁷⁸⁹";
const power10 = (k) => (k === 0 ? "1" : `10${String(k).replace(/./g, (c) => (c === "-" ? "⁻" : SUP[c]))}`);
const short = (v) => (v === 0 ? "0" : Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3));

function text(parent, x, y, content, anchor = "middle", colour = "currentColor") {
  const node = svgEl("text", { x, y, style: `text-anchor: ${anchor}; fill: ${colour}` });  // CSS beats attributes
  node.textContent = content;
  parent.append(node);
  return node;
}

function render({ model, el }) {
  const dim = model.get("dim"), base = model.get("base"), L = model.get("train_len");
  const sMax = model.get("factor_max"), pairs = dim / 2, w0 = ropeFrequencies(dim, base);
  el.classList.add("attnbook-widget");

  const methodRow = document.createElement("div");
  methodRow.className = "attnbook-controls method";
  methodRow.setAttribute("role", "radiogroup");
  methodRow.setAttribute("aria-label", "缩放方法");
  methodRow.append("方法 ");
  const name = `attnbook-rope-method-${Math.random().toString(36).slice(2)}`;
  const radios = Object.fromEntries(Object.entries(METHOD_NAMES).map(([key, label]) => {
    const input = Object.assign(document.createElement("input"), { type: "radio", name, value: key });
    const wrap = document.createElement("label");
    wrap.className = `method-${key}`;
    wrap.append(input, label);
    methodRow.append(wrap);
    return [key, input];
  }));
  const sRow = rangeRow("缩放倍数 s ", { min: 1, max: sMax, step: 0.25 }, "factor");
  const info = document.createElement("div");
  info.className = "attnbook-readout info";
  const infoLines = [document.createElement("div"), document.createElement("div")];
  info.append(...infoLines);

  // Top: log10 of each pair's frequency; the range covers every method at every s.
  const W = 460, H1 = 180, left = 44, right = 12, top1 = 42, bottom1 = 30;
  const tMax = Math.ceil(sMax * L), turn = (2 * Math.PI) / L;   // dynamic NTK at s_max divides the most
  const wMin = w0[pairs - 1] / Math.max(sMax, (sMax * tMax) / L - (sMax - 1));
  const kLo = Math.floor(Math.log10(Math.min(wMin, turn))), kHi = Math.ceil(Math.log10(Math.max(1, turn)));
  const xPair = (i) => left + 10 + (pairs === 1 ? 0 : (i / (pairs - 1)) * (W - left - right - 20));
  const yFreq = (v) => top1 + ((kHi - Math.log10(v)) / (kHi - kLo)) * (H1 - top1 - bottom1);
  const freq = svgEl("svg", { viewBox: `0 0 ${W} ${H1}`, width: "100%", role: "img", class: "frequencies" });
  freq.setAttribute("aria-label", "各分量对的旋转频率");
  text(freq, left, 12, "每个分量对的旋转频率 θ_r（对数刻度）", "start");
  text(freq, left, 25, "○ 不缩放  ● 当前方法（橙：转角超出训练所见）", "start", GREY);
  const every = Math.ceil((kHi - kLo) / 6);                     // at most 7 decade labels
  for (let k = kLo; k <= kHi; k++) {
    freq.append(svgEl("line", { x1: left, x2: W - right, y1: yFreq(10 ** k), y2: yFreq(10 ** k), class: "grid" }));
    if ((kHi - k) % every === 0) text(freq, left - 4, yFreq(10 ** k) + 4, power10(k), "end");
  }
  freq.append(svgEl("line", { x1: left, x2: W - right, y1: yFreq(turn), y2: yFreq(turn), class: "ref" }));
  text(freq, W - right, yFreq(turn) - 3, "训练长度内恰转一圈：θ = 2π/L", "end", GREY);
  for (const i of pairs <= 16 ? [...Array(pairs).keys()] : [0, pairs - 1]) text(freq, xPair(i), H1 - 14, String(i + 1));
  text(freq, (left + W) / 2, H1 - 2, "分量对 r");
  const rawLine = svgEl("polyline", { class: "curve raw", "stroke-dasharray": "3 2",
    points: w0.map((v, i) => `${xPair(i)},${yFreq(v)}`).join(" ") });
  const scaledLine = svgEl("polyline", { class: "curve scaled" });
  freq.append(rawLine, scaledLine);
  for (const [i, v] of w0.entries()) {
    freq.append(svgEl("circle", { cx: xPair(i), cy: yFreq(v), r: 4, class: "raw", fill: "white", stroke: GREY }));
  }
  const dots = w0.map((_, i) => {
    const dot = svgEl("circle", { cx: xPair(i), r: 3.5, class: "dot" });
    dot.append(svgEl("title", {}));                            // the numbers, on hover
    freq.append(dot);
    return dot;
  });

  // Bottom: the score against the distance, unscaled (grey) and scaled (blue); shaded beyond L.
  const H2 = 200, top2 = 36, bottom2 = 30;
  const curves = svgEl("svg", { viewBox: `0 0 ${W} ${H2}`, width: "100%", role: "img", class: "scores" });
  curves.setAttribute("aria-label", "分数随距离的变化");
  text(curves, left, 12, "两个全 1 向量相距 d 时的分数 2a²Σcos(dθ_r)", "start");
  text(curves, left, 25, "灰线：不缩放  蓝线：当前方法  灰底：训练中没见过的距离", "start", GREY);
  const beyond = svgEl("rect", { y: top2, height: H2 - top2 - bottom2, class: "beyond", fill: "#eee" });
  const zero = svgEl("line", { x1: left, x2: W - right, class: "axis" });
  const trainLine = svgEl("line", { y1: top2, y2: H2 - bottom2, class: "ref" });
  const rawCurve = svgEl("polyline", { class: "curve raw" });
  const curve = svgEl("polyline", { class: "curve scaled" });
  curves.append(beyond, zero, trainLine, rawCurve, curve);
  const labels = Object.fromEntries(["x0", "xL", "xT", "yTop", "yZero", "yBottom"]
    .map((key) => [key, text(curves, 0, 0, "")]));
  text(curves, (left + W) / 2, H2 - 2, "距离 d");
  el.append(methodRow, sRow.row, info, freq, curves);

  function draw() {
    const method = model.get("method"), s = model.get("factor"), T = Math.ceil(s * L);   // s >= 1: T >= L
    radios[method].checked = true;
    sRow.input.value = s;
    sRow.out.textContent = ` = ${s.toFixed(2)}（T = ${T}）`;
    const [w, a] = scaledFrequencies(method, dim, base, s, L, T);
    const unseen = w.map((v, i) => i).filter((i) => s * w[i] > w0[i] * (1 + 1e-9) && L * w0[i] < 2 * Math.PI);
    scaledLine.setAttribute("points", w.map((v, i) => `${xPair(i)},${yFreq(v)}`).join(" "));
    dots.forEach((dot, i) => {
      dot.setAttribute("cy", yFreq(w[i]));
      dot.setAttribute("fill", unseen.includes(i) ? ORANGE : BLUE);
      dot.firstChild.textContent = `θ_${i + 1}：${w0[i].toPrecision(3)} → ${w[i].toPrecision(3)}；` +
        `训练长度内转 ${((L * w0[i]) / (2 * Math.PI)).toPrecision(3)} 圈，距离 s·L 处转 ${((s * L * w[i]) / (2 * Math.PI)).toPrecision(3)} 圈`;
    });

    const n = Math.min(T, MAX_POINTS) + 1, distances = Array.from({ length: n }, (_, j) => (j * T) / (n - 1));
    const scores = scoreCurve(w, a, distances), raw = scoreCurve(w0, 1, distances);
    const yMax = Math.max(...scores, ...raw), yMin = Math.min(0, ...scores, ...raw);
    const xD = (d) => left + (d / T) * (W - left - right);
    const yS = (v) => top2 + ((yMax - v) / (yMax - yMin || 1)) * (H2 - top2 - bottom2);
    const points = (ys) => ys.map((v, j) => `${xD(distances[j])},${yS(v)}`).join(" ");
    curve.setAttribute("points", points(scores));
    rawCurve.setAttribute("points", points(raw));
    curve.dataset.values = JSON.stringify(scores);
    rawCurve.dataset.values = JSON.stringify(raw);
    for (const [k, v] of [["x", xD(L)], ["width", Math.max(W - right - xD(L), 0)]]) beyond.setAttribute(k, v);
    for (const [k, v] of [["x1", xD(L)], ["x2", xD(L)]]) trainLine.setAttribute(k, v);
    for (const [k, v] of [["y1", yS(0)], ["y2", yS(0)]]) zero.setAttribute(k, v);
    const place = (key, x, y, content, anchor = "middle") => {
      Object.entries({ x, y, style: `text-anchor: ${anchor}` }).forEach(([k, v]) => labels[key].setAttribute(k, v));
      labels[key].textContent = content;
    };
    place("x0", xD(0), H2 - 16, "0");
    const near = xD(L) - xD(0) < 40;                              // "L = …" would cover "0"
    place("xL", near ? xD(L) + 2 : xD(L), H2 - 16, T > L ? `L = ${L}` : "", near ? "start" : "middle");
    place("xT", xD(T), H2 - 16, T === L || xD(T) - xD(L) > 40 ? String(T) : "", "end");   // clear of "L = …"
    place("yTop", left - 4, yS(yMax) + 4, short(yMax), "end");
    place("yZero", left - 4, yS(0) + 4, yS(yMin) - yS(0) > 12 ? "0" : "", "end");   // unless it hits yBottom
    place("yBottom", left - 4, yS(yMin) + 4, short(yMin), "end");

    const ratio = (i) => (w0[i] / w[i]).toFixed(2);
    let line = `${METHOD_NAMES[method]}：最快的 θ_1 ÷ ${ratio(0)}，最慢的 θ_${pairs} ÷ ${ratio(pairs - 1)}`;
    if (method === "dynamic_ntk") line += `（底数 ${short(base)} → ${short(ntkBase(dim, base, s, L, T))}）`;
    line += `；注意力系数 a = ${a.toFixed(3)}，分数乘 a² = ${(a * a).toFixed(3)}。`;
    infoLines[0].textContent = `训练长度 L = ${L}，序列长 T = ⌈s·L⌉ = ${T}。` + line;
    infoLines[1].textContent = unseen.length
      ? `距离到 s·L 时转角超出训练所见的分量对：i = ${unseen.map((i) => i + 1).join("、")}（橙点）。`
      : "距离到 s·L 时，每个分量对的转角都在训练见过的范围内。";
    Object.assign(info.dataset, { method, factor: s, length: T, attentionFactor: a, invFreq: JSON.stringify(w),
      distances: JSON.stringify(distances), scores: JSON.stringify(scores), unseen: JSON.stringify(unseen) });
  }

  const set = (changes) => {
    for (const [key, v] of Object.entries(changes)) model.set(key, v);
    model.save_changes();
  };
  for (const [key, input] of Object.entries(radios)) {
    input.addEventListener("change", () => input.checked && set({ method: key }));
  }
  sRow.input.addEventListener("input", () => set({ factor: Number(sRow.input.value) }));
  for (const key of ["method", "factor"]) model.on(`change:${key}`, draw);
  draw();
}

export default { render };
