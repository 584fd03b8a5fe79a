// softmax(s) and softmax(s / sqrt(d_k)) as SVG bars. Python shipped the raw scores s = q·k_j
// for every d_k on the grid; the scaling, both softmaxes and the entropies are computed here.

function render({ model, el }) {
  const dks = model.get("dks"), scores = model.get("scores"), labels = model.get("labels");
  const n = labels.length, W = 440, H = 210, pad = 28, top = 34, bw = (W - 2 * pad) / n;
  const plotH = H - pad - top;
  el.classList.add("attnbook-widget");

  const controls = document.createElement("div");
  controls.className = "attnbook-controls";
  const slider = Object.assign(document.createElement("input"), {
    type: "range", min: 0, max: dks.length - 1, step: 1,
  });
  slider.setAttribute("aria-label", "键维度 d_k（对数刻度）");
  const dkOut = document.createElement("span");
  dkOut.className = "attnbook-readout dk";
  controls.append("键维度 d_k ", slider, dkOut);

  const stats = document.createElement("div");
  stats.className = "attnbook-readout stats";
  stats.style.whiteSpace = "pre-line";

  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img" });
  svg.append(svgEl("line", { x1: pad, x2: W - pad, y1: H - pad, y2: H - pad, class: "axis" }));
  const legend = [["bar alt", "softmax(q·k)"], ["bar", "softmax(q·k / √d_k)"]];
  legend.forEach(([cls, text], i) => {
    const x = pad + i * 190;
    svg.append(svgEl("rect", { x, y: 8, width: 12, height: 12, class: cls }));
    const t = svgEl("text", { x: x + 18, y: 18, style: "text-anchor: start" });
    t.textContent = text;
    svg.append(t);
  });
  const groups = labels.map((name, j) => {
    const x0 = pad + j * bw, w = bw * 0.36;
    const mk = (cls, x) => {
      const bar = svgEl("rect", { x, width: w, y: H - pad, height: 0, class: cls });
      const value = svgEl("text", { x: x + w / 2, y: H - pad - 4, class: "value" });
      svg.append(bar, value);
      return { bar, value };
    };
    const raw = mk("bar alt raw", x0 + bw * 0.12), scaled = mk("bar scaled", x0 + bw * 0.52);
    const label = svgEl("text", { x: x0 + bw / 2, y: H - pad + 16, class: "label" });
    label.textContent = name;
    svg.append(label);
    return { raw, scaled };
  });
  el.append(controls, svg, stats);

  function setBar(b, p) {
    const h = p * plotH;
    b.bar.setAttribute("y", H - pad - h);
    b.bar.setAttribute("height", h);
    b.bar.dataset.p = p.toPrecision(10);
    b.value.setAttribute("y", H - pad - h - 3);
    b.value.textContent = p.toFixed(2);
  }

  function draw() {
    const dk = model.get("d_k"), i = dks.indexOf(dk);
    if (i < 0) return;
    slider.value = i;
    const s = scores[i];
    const pRaw = softmax(s), pScaled = softmax(s.map((v) => v / Math.sqrt(dk)));
    groups.forEach((g, j) => { setBar(g.raw, pRaw[j]); setBar(g.scaled, pScaled[j]); });
    const spread = Math.max(...s) - Math.min(...s);
    dkOut.textContent = ` = ${dk}`;
    stats.textContent = `熵：未缩放 ${entropy(pRaw).toFixed(3)}，缩放后 ${entropy(pScaled).toFixed(3)} nats`
      + `（最大 ln ${n} = ${Math.log(n).toFixed(3)}）\n最大权重：未缩放 ${Math.max(...pRaw).toFixed(3)}，缩放后 `
      + `${Math.max(...pScaled).toFixed(3)}；原始分数极差 ${spread.toFixed(1)}`;
    stats.dataset.hRaw = entropy(pRaw).toPrecision(10);
    stats.dataset.hScaled = entropy(pScaled).toPrecision(10);
  }

  slider.addEventListener("input", () => {
    model.set("d_k", dks[Number(slider.value)]);
    model.save_changes();
  });
  model.on("change:d_k", draw);
  draw();
}

export default { render };
