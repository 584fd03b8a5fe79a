// The grid of (b, b) score tiles of tiled attention (query blocks ↓, key blocks →), classified here
// as tiled_attention treats them: causal -> skipped if the tile's first key comes after its last
// query, full if its last key is at or before its first query, masked otherwise.
const KIND_FILL = ["#ffffff", "#f2b880", "#4c72b0"];   // skipped, masked, full (the chapter's colours)

function tileKinds(T, b, causal) {
  const nb = Math.ceil(T / b), first = (r) => r * b, last = (r) => Math.min((r + 1) * b, T) - 1;
  return Array.from({ length: nb }, (_, r) => Array.from({ length: nb }, (_, c) => {
    if (!causal || last(c) <= first(r)) return 2;
    return first(c) > last(r) ? 0 : 1;
  }));
}

function bytes(x) {
  return x >= 2 ** 20 ? `${(x / 2 ** 20).toFixed(1)} MiB` : `${(x / 1024).toFixed(1)} KiB`;
}

function render({ model, el }) {
  const step = model.get("t_step"), sizes = model.get("block_sizes");
  el.classList.add("attnbook-widget");
  const tRow = rangeRow("序列长度 T ", { min: step, max: model.get("t_max"), step }, "seq-len");
  const bRow = rangeRow("块大小 b ", { min: 0, max: sizes.length - 1, step: 1 }, "block");
  const causalBox = Object.assign(document.createElement("input"), { type: "checkbox", className: "causal" });
  causalBox.setAttribute("aria-label", "因果掩码");
  const cRow = document.createElement("label");
  cRow.className = "attnbook-controls";
  cRow.append(causalBox, " 因果掩码");
  const info = document.createElement("div");
  info.className = "attnbook-readout info";
  info.style.whiteSpace = "pre-line";
  const side = 300, L = 8, top = 8, W = side + L + 140;
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${side + top + 26}`, width: "100%", role: "img", class: "tiles" });
  el.append(tRow.row, bRow.row, cRow, info, svg);

  function draw() {
    const T = model.get("seq_len"), b = model.get("block_size"), causal = model.get("causal");
    tRow.input.value = T; bRow.input.value = sizes.indexOf(b); causalBox.checked = causal;
    tRow.out.textContent = ` = ${T}`;
    bRow.out.textContent = ` = ${b}`;
    const kinds = tileKinds(T, b, causal), nb = kinds.length, cell = side / nb;
    svg.replaceChildren();
    kinds.forEach((row, r) => row.forEach((kind, c) => {
      const rect = svgEl("rect", { x: L + c * cell, y: top + r * cell, width: cell, height: cell,
        fill: KIND_FILL[kind], stroke: "#999", "stroke-width": nb > 32 ? 0.2 : 0.5, class: "tile" });
      rect.dataset.kind = kind;
      svg.append(rect);
    }));
    const legend = [["整块计算", 2], ["算后掩码", 1], ["跳过", 0]];
    legend.forEach(([text, kind], i) => {
      svg.append(svgEl("rect", { x: side + L + 14, y: top + 10 + 22 * i, width: 12, height: 12,
        fill: KIND_FILL[kind], stroke: "#999" }));
      const t = svgEl("text", { x: side + L + 32, y: top + 20 + 22 * i, style: "text-anchor: start" });
      t.textContent = text;
      svg.append(t);
    });
    for (const [x, y, text] of [[L + side / 2, side + top + 20, "键块 →"],
      [side + L + 14, top + 90, "查询块 ↓"]]) {
      const t = svgEl("text", { x, y, style: x > side ? "text-anchor: start" : "" });
      t.textContent = text;
      svg.append(t);
    }
    const flat = kinds.flat(), count = (k) => flat.filter((x) => x === k).length;
    const computed = count(1) + count(2), formula = causal ? (nb * (nb + 1)) / 2 : nb * nb;
    const full = 4 * T * T, tiled = 4 * (b * b + 2 * b + T);
    Object.assign(info.dataset, { nBlocks: nb, computed, masked: count(1), skipped: count(0), formula,
      fullBytes: full, tiledBytes: tiled });
    info.textContent = `n_b = ⌈T / b⌉ = ${nb}：计算 ${computed} / ${nb * nb} 块（公式 ` +
      `${causal ? "n_b(n_b+1)/2" : "n_b²"} = ${formula}），其中 ${count(1)} 块要掩码，跳过 ${count(0)} 块\n` +
      `至少要同时存放（float32）：完整分数矩阵 T² 个数 → ${bytes(full)}；分块 b² + 2b + T 个数（一块分数、` +
      `块内各行的 m 与 l、每行一个 logsumexp）→ ${bytes(tiled)}`;
  }

  tRow.input.addEventListener("input", () => { model.set("seq_len", Number(tRow.input.value)); model.save_changes(); });
  bRow.input.addEventListener("input", () => { model.set("block_size", sizes[Number(bRow.input.value)]); model.save_changes(); });
  causalBox.addEventListener("change", () => { model.set("causal", causalBox.checked); model.save_changes(); });
  for (const key of ["seq_len", "block_size", "causal"]) model.on(`change:${key}`, draw);
  draw();
}

export default { render };
