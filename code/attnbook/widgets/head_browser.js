// One attention head's weights as an SVG heatmap (queries ↓, keys →), above it an overview canvas
// of every layer × head (click a map to open it), below it guided questions that score the open head.
// Python shipped every map (sentence × layer × head) as bytes round(w * 255), base64 (pack_maps).
// svgEl comes from common.js, which StaticFallbackWidget prepends.
const SCALE = 255;
// viridis at 0, 0.25, 0.5, 0.75, 1 (matplotlib's colour map, as the book's static figures use)
const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

function viridis(x) {
  const t = Math.min(1, Math.max(0, x)) * (STOPS.length - 1);
  const i = Math.min(STOPS.length - 2, Math.floor(t)), f = t - i;
  const c = STOPS[i].map((a, j) => Math.round(a + f * (STOPS[i + 1][j] - a)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function unpack(packed, tokens, L, H) {        // base64 -> weights[s][l][h][i][j] in 0..255
  const bytes = Uint8Array.from(atob(packed), (c) => c.charCodeAt(0));
  let k = 0;
  const rows = (n) => Array.from({ length: n }, () => Array.from(bytes.subarray(k, (k += n))));
  return tokens.map((toks) => Array.from({ length: L }, () => Array.from({ length: H }, () => rows(toks.length))));
}

function patternScore(w, pattern) {             // the mean of w[i][i-1], w[i][i+1] or w[i][0] (bytes / SCALE)
  const n = w.length, picks = [];
  for (let i = 0; i < n; i++) {
    const j = pattern === "previous" ? i - 1 : pattern === "next" ? i + 1 : 0;
    if (j >= 0 && j < n) picks.push(w[i][j] / SCALE);
  }
  return picks.reduce((a, b) => a + b, 0) / picks.length;
}

function drawOverview(canvas, maps, L, H, sel) {  // maps[l][h]: one pixel per weight, 2-pixel gaps
  const n = maps[0][0].length, step = n + 2;
  canvas.width = 2 + H * step;
  canvas.height = 2 + L * step;
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(canvas.width, canvas.height);
  img.data.fill(255);
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) {
    const rgb = viridis(maps[l][h][i][j] / SCALE).match(/\d+/g).map(Number);
    const k = 4 * ((2 + l * step + i) * canvas.width + 2 + h * step + j);
    img.data.set([...rgb, 255], k);
  }
  ctx.putImageData(img, 0, 0);
  ctx.strokeStyle = "#d62728";
  ctx.lineWidth = 1;
  ctx.strokeRect(2 + sel[1] * step - 0.5, 2 + sel[0] * step - 0.5, n + 1, n + 1);
}

function slider(label, n, cls) {
  const input = Object.assign(document.createElement("input"), { type: "range", min: 0, max: n - 1, step: 1 });
  input.className = cls;
  input.setAttribute("aria-label", label);
  return input;
}

function render({ model, el }) {
  const sentences = model.get("sentences"), tokens = model.get("tokens");
  const L = model.get("num_layers"), H = model.get("num_heads");
  const weights = unpack(model.get("weights"), tokens, L, H);
  el.classList.add("attnbook-widget");

  const row = () => Object.assign(document.createElement("div"), { className: "attnbook-controls" });
  const pickRow = row(), controls = row();
  const pick = document.createElement("select");
  pick.className = "sentence";
  pick.setAttribute("aria-label", "句子");
  sentences.forEach((s, i) => pick.append(new Option(s, i)));
  const layer = slider("层", L, "layer"), head = slider("头", H, "head");
  const which = document.createElement("span");
  which.className = "attnbook-readout which";
  pick.style.maxWidth = "100%";
  pickRow.append("句子 ", pick);
  controls.append("层 ", layer, " 头 ", head, which);
  const info = document.createElement("div");
  info.className = "attnbook-readout cell";
  info.textContent = "把鼠标移到格子上查看权重";
  const overview = Object.assign(document.createElement("canvas"), { className: "overview" });
  overview.style.cssText = "width: 100%; image-rendering: pixelated; cursor: pointer";
  overview.title = "每个小图是一层的一个头（行：层 1–6，列：头 1–12）；点击打开";
  const svg = svgEl("svg", { width: "100%", role: "img" });
  const asks = model.get("questions").map(([pattern, text, threshold]) => {
    const row = Object.assign(document.createElement("div"), { className: "question" });
    const button = Object.assign(document.createElement("button"), { textContent: "检查当前的头" });
    const result = Object.assign(document.createElement("span"), { className: "attnbook-readout result" });
    row.append(`${text} `, button, " ", result);
    button.addEventListener("click", () => {
      const l = model.get("layer"), h = model.get("head");
      const score = weights.reduce((a, ws) => a + patternScore(ws[l][h], pattern), 0) / weights.length;
      const ok = score >= threshold;
      result.textContent = `${ok ? "✓" : "✗"} 第 ${l + 1} 层第 ${h + 1} 个头：三句平均 ${score.toFixed(3)}` +
        (ok ? ` ≥ ${threshold}` : ` < ${threshold}，再找找`);
      Object.assign(result.dataset, { score, ok, layer: l, head: h });
    });
    return { row, result };
  });
  el.append(pickRow, controls, overview, svg, info, ...asks.map((a) => a.row));
  overview.addEventListener("click", (e) => {
    const box = overview.getBoundingClientRect(), step = tokens[model.get("sentence")].length + 2;
    const x = ((e.clientX - box.left) * overview.width) / box.width - 2;
    const y = ((e.clientY - box.top) * overview.height) / box.height - 2;
    const h = Math.floor(x / step), l = Math.floor(y / step);
    if (h < 0 || h >= H || l < 0 || l >= L) return;
    model.set("layer", l);
    model.set("head", h);
    model.save_changes();
  });

  function draw() {
    const s = model.get("sentence"), l = model.get("layer"), h = model.get("head");
    const toks = tokens[s], w = weights[s][l][h], n = toks.length;
    pick.value = s; layer.value = l; head.value = h;
    drawOverview(overview, weights[s], L, H, [l, h]);
    overview.dataset.selected = `${l},${h}`;
    for (const a of asks) { a.result.textContent = ""; for (const k of Object.keys(a.result.dataset)) delete a.result.dataset[k]; }
    which.textContent = ` 第 ${l + 1}/${L} 层 · 第 ${h + 1}/${H} 个头`;
    const left = 78, top = 78, cell = Math.min(26, 330 / n), side = n * cell;
    const W = left + side + 60, Ht = top + side + 34;
    svg.setAttribute("viewBox", `0 0 ${W} ${Ht}`);
    svg.replaceChildren();
    const title = svgEl("text", { x: left + side / 2, y: 12, class: "title" });
    title.textContent = `MiniLM 第 ${l + 1} 层第 ${h + 1} 个头（查询 ↓，键 →）`;
    svg.append(title);
    for (let i = 0; i < n; i++) {
      const ql = svgEl("text", { x: left - 4, y: top + (i + 0.5) * cell + 4, style: "text-anchor: end" });
      ql.textContent = toks[i];
      const kl = svgEl("text", { x: 0, y: 0, style: "text-anchor: start",
        transform: `translate(${left + (i + 0.5) * cell + 4}, ${top - 4}) rotate(-60)` });
      kl.textContent = toks[i];
      svg.append(ql, kl);
      for (let j = 0; j < n; j++) {
        const v = w[i][j] / SCALE;
        const r = svgEl("rect", { x: left + j * cell, y: top + i * cell, width: cell, height: cell,
          fill: viridis(v), class: "cell" });
        r.dataset.q = i; r.dataset.k = j; r.dataset.w = v;
        const tip = svgEl("title", {});
        tip.textContent = `${toks[i]} → ${toks[j]}: ${v.toFixed(3)}`;
        r.append(tip);
        r.addEventListener("mouseenter", () => { info.textContent = `查询 ${toks[i]} → 键 ${toks[j]}：权重 ${v.toFixed(3)}`; });
        svg.append(r);
      }
    }
    // colour bar: weights 0 ... 1 on the same scale for every head
    const bx = left + side + 16, steps = 20, bh = side / steps;
    for (let k = 0; k < steps; k++) {
      svg.append(svgEl("rect", { x: bx, y: top + side - (k + 1) * bh, width: 12, height: bh + 0.5,
        fill: viridis((k + 0.5) / steps) }));
    }
    for (const [v, y] of [[1, top + 4], [0, top + side]]) {
      const t = svgEl("text", { x: bx + 16, y, style: "text-anchor: start" });
      t.textContent = v.toFixed(1);
      svg.append(t);
    }
    const xl = svgEl("text", { x: left + side / 2, y: Ht - 6 });
    xl.textContent = "键 →";
    svg.append(xl);
  }

  const set = (key, value) => { model.set(key, Number(value)); model.save_changes(); };
  pick.addEventListener("change", () => set("sentence", pick.value));
  layer.addEventListener("input", () => set("layer", layer.value));
  head.addEventListener("input", () => set("head", head.value));
  for (const key of ["sentence", "layer", "head"]) model.on(`change:${key}`, draw);
  draw();
}

export default { render };
