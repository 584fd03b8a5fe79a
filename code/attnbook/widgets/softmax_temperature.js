// softmax(z / τ) as SVG bars (τ: the temperature, `temperature` in code). The arithmetic runs here, so the chart works without a kernel.

function render({ model, el }) {
  const z = model.get("logits"), labels = model.get("labels");
  const n = z.length, W = 420, H = 190, pad = 28, bw = (W - 2 * pad) / n;
  el.classList.add("attnbook-widget");

  const controls = document.createElement("div");
  controls.className = "attnbook-controls";
  const slider = Object.assign(document.createElement("input"), {
    type: "range", step: "0.01",
    min: Math.log10(model.get("t_min")), max: Math.log10(model.get("t_max")),
  });
  slider.setAttribute("aria-label", "温度 τ（对数刻度）");
  const readout = document.createElement("span");
  readout.className = "attnbook-readout";
  controls.append("温度 τ ", slider, readout);

  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img" });
  svg.append(svgEl("line", { x1: pad, x2: W - pad, y1: H - pad, y2: H - pad, class: "axis" }));
  const p1 = softmax(z, 1);                      // T = 1 reference outline
  const bars = z.map((_, i) => {
    const x = pad + i * bw + bw * 0.15, w = bw * 0.7, h1 = p1[i] * (H - 2 * pad);
    svg.append(svgEl("rect", { x, width: w, y: H - pad - h1, height: h1, class: "ref" }));
    const bar = svgEl("rect", { x, width: w, y: H - pad, height: 0, class: "bar" });
    const value = svgEl("text", { x: x + w / 2, y: H - pad - 4, class: "value" });
    const label = svgEl("text", { x: x + w / 2, y: H - pad + 16, class: "label" });
    label.textContent = labels[i];
    svg.append(bar, value, label);
    return { bar, value };
  });
  el.append(controls, svg);

  function draw() {
    const T = model.get("temperature"), p = softmax(z, T);
    slider.value = Math.log10(T);
    p.forEach((pi, i) => {
      const h = pi * (H - 2 * pad);
      bars[i].bar.setAttribute("y", H - pad - h);
      bars[i].bar.setAttribute("height", h);
      bars[i].bar.dataset.p = pi.toPrecision(8);
      bars[i].value.setAttribute("y", H - pad - h - 4);
      bars[i].value.textContent = pi.toFixed(3);
    });
    readout.textContent = ` = ${T.toFixed(2)}　熵 = ${entropy(p).toFixed(3)} nats（最大 ln ${n} = ${Math.log(n).toFixed(3)}）`;
  }

  slider.addEventListener("input", () => {
    model.set("temperature", Math.pow(10, Number(slider.value)));
    model.save_changes();
  });
  model.on("change:temperature", draw);
  draw();
}

export default { render };
