// The chapter's GPT (attnbook.DecoderOnlyLM: pre-LN layers, RoPE, tied output layer) run in the page, in float64
// on its float16 weights. Generation as DecoderOnlyLM.generate(max_context): a KV cache while the text fits the
// window, then the last max_context characters re-read at positions 0 .. max_context - 1.

function halfToFloat(h) {                         // IEEE binary16 -> number
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? NaN : s * Infinity;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

function unpackWeights(w) {                       // attnbook.gpt_export payload -> named Float32Arrays
  const bytes = Uint8Array.from(atob(w.data), (ch) => ch.charCodeAt(0));
  const half = new Uint16Array(bytes.buffer), flat = new Float32Array(half.length);  // little-endian
  for (let i = 0; i < half.length; i++) flat[i] = halfToFloat(half[i]);
  const t = {};
  for (const { name, shape, offset } of w.tensors) {
    t[name] = flat.subarray(offset, offset + shape.reduce((a, b) => a * b, 1));
  }
  if (w.config.tie_weights) t["lm_head.weight"] = t["embed.weight"];
  return t;
}

function mulberry32(seed) {                       // seeded uniforms in [0, 1); gpt_chat.py mirrors it
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

function gptRunner(w) {
  const c = w.config, t = unpackWeights(w), D = c.d_model, H = c.num_heads, Dh = D / H;
  const group = H / c.num_kv_heads, scale = 1 / Math.sqrt(Dh);
  const freqs = Array.from({ length: Dh / 2 }, (_, i) => Math.exp(-Math.log(c.rope_base) * (2 * i) / Dh));
  let cache = [];

  function linear(name, x) {                      // y = W x + b, W (out, in) row-major
    const W = t[name + ".weight"], b = t[name + ".bias"], n = x.length, m = W.length / n;
    const y = new Float64Array(m);
    for (let o = 0; o < m; o++) {
      let s = b ? b[o] : 0;
      for (let i = 0, r = o * n; i < n; i++) s += W[r + i] * x[i];
      y[o] = s;
    }
    return y;
  }
  function layerNorm(name, x) {                   // biased variance, eps 1e-5 (nn.LayerNorm)
    const n = x.length, mean = x.reduce((a, v) => a + v, 0) / n;
    const sd = Math.sqrt(x.reduce((a, v) => a + (v - mean) ** 2, 0) / n + 1e-5);
    const g = t[name + ".weight"], b = t[name + ".bias"];
    return x.map((v, i) => ((v - mean) / sd) * g[i] + b[i]);
  }
  function rotate(x, heads, pos) {                // RoPE on pairs (2i, 2i+1) of each head: attnbook.apply_rotary
    if (c.rope_base === null) return;
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < Dh / 2; i++) {
        const j = h * Dh + 2 * i, cos = Math.cos(pos * freqs[i]), sin = Math.sin(pos * freqs[i]);
        const x0 = x[j], x1 = x[j + 1];
        x[j] = x0 * cos - x1 * sin;
        x[j + 1] = x0 * sin + x1 * cos;
      }
    }
  }
  function reset() { cache = Array.from({ length: c.num_layers }, () => ({ k: [], v: [] })); }

  function step(id, keysOnly) {                   // one token at the next position -> hidden state, attention rows
    const pos = cache[0].k.length, att = [];        // keysOnly: fill the cache only (the last layer stops at K, V)
    const x = Float64Array.from(t["embed.weight"].subarray(id * D, (id + 1) * D));
    for (let l = 0; l < c.num_layers; l++) {
      const p = `layers.${l}.`, h = layerNorm(p + "norm1", x), kv = cache[l];
      const k = linear(p + "self_attn.w_k", h);
      rotate(k, c.num_kv_heads, pos);
      kv.k.push(k);
      kv.v.push(linear(p + "self_attn.w_v", h));
      if (keysOnly && l === c.num_layers - 1) return null;
      const q = linear(p + "self_attn.w_q", h);
      rotate(q, H, pos);
      const heads = new Float64Array(D), rows = [];
      for (let hd = 0; hd < H; hd++) {
        const qo = hd * Dh, g = Math.floor(hd / group) * Dh;     // the key/value head this query head reads
        const s = kv.k.map((kk) => {
          let d = 0;
          for (let i = 0; i < Dh; i++) d += q[qo + i] * kk[g + i];
          return d * scale;
        });
        const a = softmax(s);
        a.forEach((wj, j) => { const vv = kv.v[j]; for (let i = 0; i < Dh; i++) heads[qo + i] += wj * vv[g + i]; });
        rows.push(a);
      }
      const o = linear(p + "self_attn.w_o", heads);
      for (let i = 0; i < D; i++) x[i] += o[i];
      const f = linear(p + "ffn.linear1", layerNorm(p + "norm3", x)).map((v) => Math.max(0, v));
      const y = linear(p + "ffn.linear2", f);
      for (let i = 0; i < D; i++) x[i] += y[i];
      att.push(rows);
    }
    return { x, att };
  }
  const logits = (x) => Array.from(linear("lm_head", layerNorm("final_norm", x)));

  function forward(ids) {                         // logits at every position, no window (the model's forward)
    reset();
    return ids.map((id) => logits(step(id).x));
  }
  function next(ids, ctx) {                       // the last position's logits as generate reads them
    const start = Math.max(0, ids.length - ctx);
    if (start > 0 || cache[0].k.length >= ids.length) reset();
    for (let i = start + cache[0].k.length; i < ids.length - 1; i++) step(ids[i], true);
    const out = step(ids[ids.length - 1], false);
    return { z: logits(out.x), att: out.att, start };
  }
  reset();
  return { forward, next, reset };
}

function pickNext(z, o, draw) {                   // greedy: argmax; else inverse CDF of keptProbs at u
  if (o.greedy) return z.reduce((best, v, i) => (v > z[best] ? i : best), 0);
  return pickAt(keptProbs(z, o.temperature, o.top_k, o.top_p), draw());
}

const SHOWN = { "\n": "⏎", "<unk>": "□", "<pad>": "□" };

function render({ model, el }) {
  el.classList.add("attnbook-widget");
  el.style.maxWidth = "640px";
  const get = (k) => model.get(k), payload = get("weights") && get("weights").data ? get("weights")
    : (globalThis.attnbookGptWeights || {})[get("weights_file")];
  const show = (ch) => SHOWN[ch] || ch;

  const input = (attrs) => Object.assign(document.createElement("input"), attrs);
  const box = input({ type: "text", value: get("prompt"), className: "prompt" });
  box.setAttribute("aria-label", "开头");
  box.style.width = "16em";
  const go = Object.assign(document.createElement("button"), { textContent: "续写", className: "go" });
  const promptRow = document.createElement("div");
  promptRow.className = "attnbook-controls";
  promptRow.append("开头 ", box, go);
  const greedyBox = input({ type: "checkbox", className: "greedy" });
  const seedBox = input({ type: "number", min: 0, step: 1, className: "seed" });
  seedBox.style.width = "5em";
  const modeRow = document.createElement("div");
  modeRow.className = "attnbook-controls";
  const greedyLabel = document.createElement("label");
  greedyLabel.append(greedyBox, " 贪心（每步取最可能的字）");
  modeRow.append(greedyLabel, " 随机种子 ", seedBox);
  const T = rangeRow("温度 τ ", { min: -1, max: 0.7, step: 0.01 }, "temperature");
  const K = rangeRow("top-k ", { min: 0, max: 50, step: 1 }, "top_k");
  const P = rangeRow("top-p ", { min: 0.05, max: 1, step: 0.01 }, "top_p");
  const N = rangeRow("续写字数 ", { min: 5, max: 100, step: 1 }, "max_new");
  const message = document.createElement("div");
  message.className = "attnbook-readout message";
  message.style.color = "#a33";
  const text = document.createElement("div");
  text.className = "gpt-text";
  Object.assign(text.style, { fontSize: "18px", lineHeight: "1.7", margin: "0.4em 0", wordBreak: "break-all" });
  const panel = document.createElement("div");
  panel.className = "gpt-attention";
  panel.style.fontSize = "13px";
  el.append(promptRow, modeRow, T.row, K.row, P.row, N.row, message, text, panel);

  const runner = payload ? gptRunner(payload) : null;
  const stoi = runner ? new Map(payload.itos.map((ch, i) => [ch, i])) : null;
  let written = [], job = 0;                      // written: {ch, start, att, ids} per generated character

  function drawControls() {
    const greedy = get("greedy");
    greedyBox.checked = greedy;
    seedBox.value = get("seed");
    T.input.value = Math.log10(get("temperature")); T.out.textContent = `= ${get("temperature").toFixed(2)}`;
    K.input.value = get("top_k"); K.out.textContent = get("top_k") > 0 ? `= ${get("top_k")}` : "关";
    P.input.value = get("top_p"); P.out.textContent = get("top_p") < 1 ? `= ${get("top_p").toFixed(2)}` : "关";
    N.input.value = get("max_new"); N.out.textContent = `= ${get("max_new")}`;
    for (const r of [T, K, P]) { r.input.disabled = greedy || !runner; r.row.style.opacity = greedy ? 0.5 : 1; }
    seedBox.disabled = greedy || !runner;
    for (const e of [box, go, greedyBox, N.input]) e.disabled = !runner;
  }

  function span(ch, cls) {
    const s = document.createElement("span");
    s.className = cls;
    s.textContent = show(ch);
    return s;
  }

  function showAttention(i) {                     // every layer's and head's row of the position that wrote i
    const { ch, start, att, ids } = written[i];
    panel.replaceChildren();
    const head = document.createElement("div");
    head.textContent = `写出「${show(ch)}」时，各层各头对所读的 ${ids.length - start} 个字的注意力` +
      "（颜色越深权重越大，每行按最大值着色）：";
    panel.append(head);
    att.forEach((rows, l) => rows.forEach((a, h) => {
      const row = document.createElement("div");
      row.className = "att-row";
      row.dataset.layer = l; row.dataset.head = h;
      const label = document.createElement("span");
      label.textContent = `第 ${l + 1} 层 头 ${h + 1}  `;
      label.style.color = "#555";
      row.append(label);
      const top = Math.max(...a);
      a.forEach((wj, j) => {
        const s = span(payload.itos[ids[start + j]], "att-char");
        s.dataset.w = wj.toPrecision(6);
        s.title = `权重 ${wj.toFixed(3)}`;
        s.style.background = `rgba(208, 140, 44, ${(wj / top).toFixed(3)})`;
        row.append(s);
      });
      panel.append(row);
    }));
  }

  function generate(prompt, count, options, onChar) {   // -> generated characters; onChar(i) after each
    const draw = mulberry32(options.seed), ids = Array.from(prompt).map((ch) => stoi.get(ch) ?? stoi.get("<unk>"));
    const out = [];
    runner.reset();
    for (let n = 0; n < count; n++) {
      const { z, att, start } = runner.next(ids, get("max_context"));
      const id = pickNext(z, options, draw);
      out.push({ ch: payload.itos[id], start, att, ids: ids.slice() });
      ids.push(id);
      if (onChar) onChar(out.length - 1, out);
    }
    return out;
  }
  const options = () => ({ greedy: get("greedy"), temperature: get("temperature"), top_k: get("top_k"),
                           top_p: get("top_p"), seed: get("seed") });

  function run(animate) {
    const prompt = get("prompt"), mine = ++job;
    const unseen = [...new Set(Array.from(prompt).filter((ch) => !stoi.has(ch)))];
    message.textContent = unseen.length ? `模型没见过这些字：${unseen.map((ch) => `「${ch}」`).join("")}` +
      "——它们不在字表里，模型把它们都当作同一个“未知字”（显示为 □）读入。" : "";
    message.dataset.unseen = unseen.join("");
    text.replaceChildren(...Array.from(prompt).map((ch) => span(ch, "prompt-char")));
    panel.replaceChildren();
    if (!prompt) { message.textContent = "请先输入开头。"; return; }
    written = generate(prompt, get("max_new"), options());
    const add = (i) => {
      const s = span(written[i].ch, "gen-char");
      s.dataset.i = i;
      s.style.color = "#3b6ea5";
      s.style.cursor = "help";
      s.addEventListener("mouseenter", () => showAttention(i));
      text.append(s);
    };
    text.dataset.generated = written.map((w) => w.ch).join("");
    if (!animate) { written.forEach((_, i) => add(i)); return; }
    let i = 0;
    const tick = () => { if (mine !== job || i >= written.length) return; add(i++); setTimeout(tick, 40); };
    tick();
  }

  const set = (key, value) => { model.set(key, value); model.save_changes(); };
  box.addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.isComposing) go.click(); });
  go.addEventListener("click", () => { set("prompt", box.value); run(true); });
  greedyBox.addEventListener("change", () => set("greedy", greedyBox.checked));
  seedBox.addEventListener("change", () => set("seed", Math.max(0, Math.floor(Number(seedBox.value) || 0))));
  T.input.addEventListener("input", () => set("temperature", Math.pow(10, Number(T.input.value))));
  K.input.addEventListener("input", () => set("top_k", Number(K.input.value)));
  P.input.addEventListener("input", () => set("top_p", Number(P.input.value)));
  N.input.addEventListener("input", () => set("max_new", Number(N.input.value)));
  for (const key of ["greedy", "seed", "temperature", "top_k", "top_p", "max_new"]) {
    model.on(`change:${key}`, drawControls);
  }
  model.on("change:prompt", () => { box.value = get("prompt"); });
  drawControls();

  if (runner) {
    run(false);
    el.attnbookGpt = {                            // for tests and the curious: the model and the generator
      forward: (ids) => runner.forward(ids),
      encode: (s) => Array.from(s).map((ch) => stoi.get(ch) ?? stoi.get("<unk>")),
      generate: (prompt, count, o) => generate(prompt, count, { ...options(), ...o }).map((w) => w.ch).join(""),
    };
  } else {                                        // no weights (the PDF): Python's continuation, not interactive
    text.replaceChildren(...Array.from(get("prompt")).map((ch) => span(ch, "prompt-char")),
                         ...get("initial").map((ch) => span(ch, "gen-char")));
    message.textContent = `没有载入模型的权重文件 ${get("weights_file")}：` +
      "这里是构建时算出的续写，不能交互。";
  }
}

export default { render };
