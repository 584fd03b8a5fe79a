// Cross-attention of an encoder–decoder: one input's map for a chosen layer and head (queries ↓ output
// tokens, keys → source tokens). A step slider picks an output token: its row is outlined and the source
// characters above are shaded by its weights. Python shipped every map as integer millionths.
// svgEl and rangeRow come from common.js, which StaticFallbackWidget prepends.
const SCALE = 1e6;

function shade(v) {                               // white (0) to the book's blue #3b6ea5 (1)
  const c = [59, 110, 165].map((x) => Math.round(255 - Math.min(1, Math.max(0, v)) * (255 - x)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function peak(row) {                              // the first key with the largest weight
  return row.indexOf(Math.max(...row));
}

function questionScore(weights, l, h, rows, spans) {   // share of (input, row) whose peak is in the input's span
  let hits = 0, total = 0;
  weights.forEach((w, i) => rows.forEach((r) => {
    if (r >= w[l][h].length) return;
    const j = peak(w[l][h][r]);
    hits += spans[i][0] <= j && j < spans[i][1] ? 1 : 0;
    total += 1;
  }));
  return hits / total;
}

function render({ model, el }) {
  const srcs = model.get("source_tokens"), tgts = model.get("target_tokens"), weights = model.get("weights");
  const L = model.get("num_layers"), H = model.get("num_heads");
  const text = (toks) => toks.filter((x) => x !== "<eos>").join("");
  el.classList.add("attnbook-widget");

  const pickRow = Object.assign(document.createElement("div"), { className: "attnbook-controls" });
  const pick = Object.assign(document.createElement("select"), { className: "example" });
  pick.setAttribute("aria-label", "例子");
  pick.style.maxWidth = "100%";
  srcs.forEach((s, i) => pick.append(new Option(`${s.join("")} → ${text(tgts[i])}`, i)));
  pickRow.append("输入 ", pick);
  const layer = rangeRow("层 ", { min: 0, max: L - 1, step: 1 }, "layer");
  const head = rangeRow("头 ", { min: 0, max: H - 1, step: 1 }, "head");
  const step = rangeRow("输出位置 ", { min: 0, step: 1 }, "step");
  const strip = Object.assign(document.createElement("div"), { className: "source-strip" });
  strip.style.cssText = "font-size: 1.3em; letter-spacing: 0.1em; margin: 0.3em 0";
  const info = Object.assign(document.createElement("div"), { className: "attnbook-readout info" });
  const svg = svgEl("svg", { width: "100%", role: "img" });
  el.append(pickRow, layer.row, head.row, step.row, strip, info, svg);

  let ask = null;
  if (model.get("question")) {
    const row = Object.assign(document.createElement("div"), { className: "question" });
    const button = Object.assign(document.createElement("button"), { textContent: "检查当前的头" });
    const result = Object.assign(document.createElement("span"), { className: "attnbook-readout result" });
    row.append(`${model.get("question")} `, button, " ", result);
    el.append(row);
    button.addEventListener("click", () => {
      const l = model.get("layer"), h = model.get("head"), threshold = model.get("question_threshold");
      const score = questionScore(weights, l, h, model.get("question_rows"), model.get("question_spans"));
      const ok = score >= threshold;
      result.textContent = `${ok ? "✓" : "✗"} 第 ${l + 1} 层第 ${h + 1} 个头：${(100 * score).toFixed(0)}% 的行` +
        (ok ? ` ≥ ${100 * threshold}%` : ` < ${100 * threshold}%，再找找`);
      Object.assign(result.dataset, { score, ok, layer: l, head: h });
    });
    ask = result;
  }

  function draw() {
    const e = model.get("example"), l = model.get("layer"), h = model.get("head");
    const src = srcs[e], tgt = tgts[e], w = weights[e][l][h], T = tgt.length, S = src.length;
    const t = Math.min(model.get("step"), T - 1), row = w[t].map((v) => v / SCALE), j = peak(w[t]);
    pick.value = e; layer.input.value = l; head.input.value = h;
    step.input.max = T - 1; step.input.value = t;
    layer.out.textContent = ` ${l + 1}/${L}`;
    head.out.textContent = ` ${h + 1}/${H}`;
    step.out.textContent = ` ${t + 1}/${T}：「${tgt[t]}」`;
    if (ask) { ask.textContent = ""; for (const k of Object.keys(ask.dataset)) delete ask.dataset[k]; }

    strip.replaceChildren(...src.map((c, k) => {
      const span = Object.assign(document.createElement("span"), { textContent: c, title: row[k].toFixed(6) });
      span.style.background = shade(row[k]);
      span.style.outline = k === j ? "2px solid #d62728" : "";
      span.dataset.w = row[k];
      return span;
    }));
    info.textContent = `写第 ${t + 1} 个输出「${tgt[t]}」时，权重最大的源字符是第 ${j + 1} 个「${src[j]}」（${row[j].toFixed(3)}）`;
    Object.assign(info.dataset, { example: e, layer: l, head: h, step: t, peak: j });

    const left = 44, top = 40, cell = Math.min(24, 340 / S), Wd = left + S * cell + 52, Ht = top + T * cell + 24;
    svg.setAttribute("viewBox", `0 0 ${Wd} ${Ht}`);
    svg.replaceChildren();
    const label = (x, y, s, style = "") => {
      const node = svgEl("text", { x, y, style });
      node.textContent = s;
      svg.append(node);
      return node;
    };
    label(left + (S * cell) / 2, 12, `交叉注意力：第 ${l + 1} 层第 ${h + 1} 个头（查询 ↓，键 →）`);
    src.forEach((c, k) => label(left + (k + 0.5) * cell, top - 6, c).classList.add("key"));
    tgt.forEach((c, i) => {
      const q = label(left - 4, top + (i + 0.5) * cell + 4, c, "text-anchor: end");
      q.classList.add("query");
      w[i].forEach((v, k) => {
        const r = svgEl("rect", { x: left + k * cell, y: top + i * cell, width: cell, height: cell,
          fill: shade(v / SCALE), class: "cell" });
        Object.assign(r.dataset, { q: i, k, w: v / SCALE });
        const tip = svgEl("title", {});
        tip.textContent = `${c} → ${src[k]}: ${(v / SCALE).toFixed(6)}`;
        r.append(tip);
        r.addEventListener("click", () => { model.set("step", i); model.save_changes(); });
        svg.append(r);
      });
    });
    svg.append(svgEl("rect", { x: left, y: top + t * cell, width: S * cell, height: cell, class: "current",
      style: "fill: none; stroke: #d62728; stroke-width: 2" }));
    const bx = left + S * cell + 10, bh = (T * cell) / 20;             // colour bar: 0 ... 1 for every head
    for (let k = 0; k < 20; k++) {
      svg.append(svgEl("rect", { x: bx, y: top + T * cell - (k + 1) * bh, width: 10, height: bh + 0.5,
        fill: shade((k + 0.5) / 20) }));
    }
    label(bx + 14, top + 8, "1", "text-anchor: start");
    label(bx + 14, top + T * cell, "0", "text-anchor: start");
    label(left + (S * cell) / 2, Ht - 6, "源序列（键 →）");
  }

  const set = (key, value) => { model.set(key, Number(value)); model.save_changes(); };
  pick.addEventListener("change", () => set("example", pick.value));
  layer.input.addEventListener("input", () => set("layer", layer.input.value));
  head.input.addEventListener("input", () => set("head", head.input.value));
  step.input.addEventListener("input", () => set("step", step.input.value));
  for (const key of ["example", "layer", "head", "step"]) model.on(`change:${key}`, draw);
  draw();
}

export default { render };
