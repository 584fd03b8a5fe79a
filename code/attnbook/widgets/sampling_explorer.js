// Next-token candidates under temperature -> top-k -> top-p, renormalised, and the token that a fixed
// uniform draw u picks. Python shipped the N most probable logits per prompt; keptProbs (sampling_rules.js)
// filters them here.

function render({ model, el }) {
  const prompts = model.get("prompts"), n = model.get("logits")[0].length;
  const W = 460, H = 200, pad = 26, top = 12, bw = (W - 2 * pad) / n, plotH = H - pad - top - 14;
  el.classList.add("attnbook-widget");

  const promptRow = document.createElement("div");
  promptRow.className = "attnbook-controls";
  const select = document.createElement("select");
  select.setAttribute("aria-label", "提示词");
  prompts.forEach((text, i) => {
    select.append(Object.assign(document.createElement("option"), { value: i, textContent: text }));
  });
  promptRow.append("开头 ", select);
  const t = rangeRow("温度 τ ", { min: -1, max: 0.7, step: 0.01 }, "temperature");
  const k = rangeRow("top-k ", { min: 0, max: n, step: 1 }, "top_k");
  const p = rangeRow("top-p ", { min: 0.05, max: 1, step: 0.01 }, "top_p");
  const out = document.createElement("div");
  out.className = "attnbook-readout drawn";

  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img" });
  svg.append(svgEl("line", { x1: pad, x2: W - pad, y1: H - pad, y2: H - pad, class: "axis" }));
  const bars = Array.from({ length: n }, (_, i) => {
    const x = pad + i * bw + bw * 0.1, w = bw * 0.8;
    const bar = svgEl("rect", { x, width: w, y: H - pad, height: 0, class: "bar" });
    const label = svgEl("text", { x: x + w / 2, y: H - pad + 14, class: "label" });
    svg.append(bar, label);
    return { bar, label };
  });
  el.append(promptRow, t.row, k.row, p.row, svg, out);

  function draw() {
    const i = model.get("prompt_index"), T = model.get("temperature");
    const K = model.get("top_k"), P = model.get("top_p");
    const tokens = model.get("tokens")[i], q = keptProbs(model.get("logits")[i], T, K, P);
    const u = model.get("uniforms")[i], pick = pickAt(q, u);
    select.value = i;
    t.input.value = Math.log10(T); t.out.textContent = `= ${T.toFixed(2)}`;
    k.input.value = K; k.out.textContent = K > 0 ? `= ${K}` : "关";
    p.input.value = P; p.out.textContent = P < 1 ? `= ${P.toFixed(2)}` : "关";
    const qmax = Math.max(...q);
    q.forEach((v, j) => {
      const h = (v / qmax) * plotH;
      bars[j].bar.setAttribute("y", H - pad - h);
      bars[j].bar.setAttribute("height", h);
      bars[j].bar.dataset.p = v.toPrecision(12);
      bars[j].bar.setAttribute("class", j === pick ? "bar alt" : "bar");
      bars[j].label.textContent = tokens[j] === "\n" ? "⏎" : tokens[j];
      bars[j].label.style.opacity = v > 0 ? 1 : 0.3;
    });
    const kept = q.filter((v) => v > 0).length;
    out.dataset.drawn = tokens[pick];
    out.textContent = `候选 ${kept}/${n} 个；u = ${u.toFixed(3)} 抽中「${tokens[pick] === "\n" ? "⏎" : tokens[pick]}」：` +
      `${prompts[i]}${tokens[pick] === "\n" ? "⏎" : tokens[pick]}`;
  }

  const set = (key, value) => { model.set(key, value); model.save_changes(); };
  select.addEventListener("change", () => set("prompt_index", Number(select.value)));
  t.input.addEventListener("input", () => set("temperature", Math.pow(10, Number(t.input.value))));
  k.input.addEventListener("input", () => set("top_k", Number(k.input.value)));
  p.input.addEventListener("input", () => set("top_p", Number(p.input.value)));
  for (const key of ["prompt_index", "temperature", "top_k", "top_p"]) model.on(`change:${key}`, draw);
  draw();
}

export default { render };
