// The sinusoidal position encoding, computed here with Math.sin / Math.cos (no kernel needed):
// PE(pos, 2i) = sin(pos w_i), PE(pos, 2i+1) = cos(pos w_i), w_i = base^(-2i/d).

function pe(pos, j, d, base) {
  const w = Math.pow(base, -2 * Math.floor(j / 2) / d);
  return j % 2 === 0 ? Math.sin(pos * w) : Math.cos(pos * w);
}

function panel(title, W, H) {
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img" });
  const t = svgEl("text", { x: 6, y: 13, style: "text-anchor: start" });
  t.textContent = title;
  svg.append(t);
  return svg;
}

function slider(label, max, aria) {
  const row = document.createElement("div");
  row.className = "attnbook-controls";
  const input = Object.assign(document.createElement("input"), { type: "range", min: 0, max, step: 1 });
  input.setAttribute("aria-label", aria);
  const out = document.createElement("span");
  out.className = "attnbook-readout";
  row.append(label, input, out);
  return { row, input, out };
}

function render({ model, el }) {
  const n = model.get("max_len"), d = model.get("d_model"), base = model.get("base");
  const W = 440, H = 130, pad = 24, mid = H / 2 + 6, amp = (H - 2 * pad) / 2;
  el.classList.add("attnbook-widget");
  const pos = slider("位置 pos ", n - 1, "位置 pos");
  const dim = slider("分量 j ", d - 1, "分量 j");
  pos.out.classList.add("pos");
  dim.out.classList.add("dim");
  const info = document.createElement("div");
  info.className = "attnbook-readout info";

  // Panel 1: the vector PE(pos), one bar per feature (selected feature j highlighted).
  const vec = panel("PE(pos)：每个分量一根柱（j 为偶数是 sin，奇数是 cos）", W, H);
  vec.classList.add("vector");
  vec.append(svgEl("line", { x1: pad, x2: W - pad, y1: mid, y2: mid, class: "axis" }));
  const bw = (W - 2 * pad) / d;
  const bars = Array.from({ length: d }, (_, j) => {
    const r = svgEl("rect", { x: pad + j * bw + bw * 0.1, width: bw * 0.8, y: mid, height: 0, class: "bar" });
    vec.append(r);
    return r;
  });

  // Panel 2: feature j as a function of position (a wave of wavelength 2π / w_i).
  const wave = panel("PE(n, j)：第 j 个分量随位置 n 的变化", W, H);
  wave.classList.add("wave");
  wave.append(svgEl("line", { x1: pad, x2: W - pad, y1: mid, y2: mid, class: "axis" }));
  const waveLine = svgEl("polyline", { class: "curve" });
  const waveDot = svgEl("circle", { r: 4, class: "marker" });
  wave.append(waveLine, waveDot);

  // Panel 3: PE(pos)·PE(n) for every position n: the same shape wherever pos is, peaked at n = pos.
  const dot = panel("PE(pos)·PE(n)：只取决于 n − pos", W, H);
  dot.classList.add("dot");
  dot.append(svgEl("line", { x1: pad, x2: W - pad, y1: mid, y2: mid, class: "axis" }));
  const dotLine = svgEl("polyline", { class: "curve" });
  const dotDot = svgEl("circle", { r: 4, class: "marker" });
  dot.append(dotLine, dotDot);

  el.append(pos.row, dim.row, info, vec, wave, dot);
  const xOf = (t) => pad + (t / Math.max(n - 1, 1)) * (W - 2 * pad);

  function draw() {
    const p = model.get("position"), j = model.get("dim");
    pos.input.value = p;
    dim.input.value = j;
    const v = Array.from({ length: d }, (_, k) => pe(p, k, d, base));
    v.forEach((x, k) => {
      const h = Math.abs(x) * amp;
      bars[k].setAttribute("y", x >= 0 ? mid - h : mid);
      bars[k].setAttribute("height", h);
      bars[k].setAttribute("class", k === j ? "bar alt" : "bar");
      bars[k].dataset.v = x.toPrecision(12);
    });
    vec.dataset.values = JSON.stringify(v);

    const ys = Array.from({ length: n }, (_, t) => pe(t, j, d, base));
    waveLine.setAttribute("points", ys.map((y, t) => `${xOf(t)},${mid - y * amp}`).join(" "));
    wave.dataset.values = JSON.stringify(ys);
    waveDot.setAttribute("cx", xOf(p));
    waveDot.setAttribute("cy", mid - ys[p] * amp);

    const dots = Array.from({ length: n }, (_, t) => v.reduce((s, x, k) => s + x * pe(t, k, d, base), 0));
    dotLine.setAttribute("points", dots.map((y, t) => `${xOf(t)},${mid - (y / d) * 2 * amp}`).join(" "));
    dot.dataset.values = JSON.stringify(dots);
    dotDot.setAttribute("cx", xOf(p));
    dotDot.setAttribute("cy", mid - (dots[p] / d) * 2 * amp);

    const i = Math.floor(j / 2), lambda = 2 * Math.PI * Math.pow(base, (2 * i) / d);
    pos.out.textContent = ` = ${p}`;
    dim.out.textContent = ` = ${j}`;
    info.textContent = `第 ${j} 个分量是 ${j % 2 ? "cos" : "sin"}，频率下标 i = ${i}，波长 ${lambda.toPrecision(4)}；` +
      `PE(${p}, ${j}) = ${v[j].toFixed(4)}`;
  }

  for (const [input, key] of [[pos.input, "position"], [dim.input, "dim"]]) {
    input.addEventListener("input", () => { model.set(key, Number(input.value)); model.save_changes(); });
  }
  model.on("change:position", draw);
  model.on("change:dim", draw);
  draw();
}

export default { render };
