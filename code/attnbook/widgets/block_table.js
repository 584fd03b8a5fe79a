// A paged KV cache's pool: one cell per block, coloured by the sequence that holds it, with its reference count.
// The allocator is replayed here from the event list (the same rules as attnbook.paged_cache.PagedKVCache):
// free blocks form a stack that hands out block 0 first; a fork shares the prompt's blocks (count + 1);
// a write into a shared, partly filled last block copies it first (copy-on-write).

function replay(N, S, promptLen, events) {
  const free = [], ref = new Array(N).fill(0), tables = {}, lengths = {}, live = [];
  for (let b = N - 1; b >= 0; b--) free.push(b);
  let count = 0, copies = 0;
  const alloc = () => { const b = free.pop(); ref[b] = 1; return b; };
  const release = (b) => { ref[b] -= 1; if (ref[b] === 0) free.push(b); };
  function reserve(s, n) {                        // false (and no change) when the pool is too small
    const t = tables[s], start = lengths[s];
    const need = Math.ceil((start + n) / S) - t.length;
    const copy = n > 0 && start % S !== 0 && ref[t[t.length - 1]] > 1;
    if (need + (copy ? 1 : 0) > free.length) return false;
    if (copy) { const old = t[t.length - 1]; t[t.length - 1] = alloc(); release(old); copies += 1; }
    for (let i = 0; i < need; i++) t.push(alloc());
    lengths[s] = start + n;
    return true;
  }
  for (const e of events) {
    if (e === "new") {
      count += 1; tables[count] = []; lengths[count] = 0; live.push(count);
    } else if (e === "fork") {
      if (!("P" in tables)) {
        if (Math.ceil(promptLen / S) > free.length) continue;
        tables.P = []; lengths.P = 0; reserve("P", promptLen);
      }
      count += 1; tables[count] = [...tables.P]; lengths[count] = lengths.P; live.push(count);
      for (const b of tables.P) ref[b] += 1;
    } else if (e === "step") {
      for (const s of live) reserve(s, 1);
    } else if (e === "finish" && live.length) {
      const s = live.shift();
      for (const b of tables[s]) release(b);
      delete tables[s]; delete lengths[s];
    }
  }
  return { tables, lengths, ref, copies, free: free.length, live };
}

function render({ model, el }) {
  const N = model.get("num_blocks"), S = model.get("block_size"), P = model.get("prompt_len");
  el.classList.add("attnbook-widget");
  const controls = document.createElement("div");
  controls.className = "attnbook-controls";
  const buttons = [["new", "新序列"], ["fork", "共享提示"], ["step", "解码一步"], ["finish", "结束最早的"], ["reset", "清空"]];
  for (const [event, label] of buttons) {
    const b = document.createElement("button");
    b.textContent = label;
    b.className = `event-${event}`;
    b.addEventListener("click", () => {
      model.set("events", event === "reset" ? [] : [...model.get("events"), event]);
      model.save_changes();
    });
    controls.append(b);
  }
  const cols = 8, cw = 54, ch = 34, W = cols * cw + 4, rows = Math.ceil(N / cols), H = rows * ch + 4;
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", class: "pool" });
  const palette = ["#3b6ea5", "#d08c2c", "#5a9e4b", "#b0504f", "#7d5fa8", "#3f9c9c", "#a07040", "#888"];
  const cells = Array.from({ length: N }, (_, b) => {
    const x = 2 + (b % cols) * cw, y = 2 + Math.floor(b / cols) * ch;
    const rect = svgEl("rect", { x: x + 2, y: y + 2, width: cw - 4, height: ch - 4, rx: 3, class: "block" });
    const label = svgEl("text", { x: x + cw / 2, y: y + ch / 2 + 4, class: "label" });
    svg.append(rect, label);
    return { rect, label };
  });
  const tablesOut = document.createElement("div");
  tablesOut.className = "attnbook-readout tables";
  tablesOut.style.fontSize = "0.85em";
  const info = document.createElement("div");
  info.className = "attnbook-readout info";
  el.append(controls, svg, info, tablesOut);

  function draw() {
    const st = replay(N, S, P, model.get("events"));
    const owner = {};                               // block -> the first sequence whose table holds it
    for (const [s, t] of Object.entries(st.tables)) for (const b of t) if (!(b in owner) || s === "P") owner[b] = s;
    const names = Object.keys(st.tables);
    cells.forEach(({ rect, label }, b) => {
      const r = st.ref[b], s = owner[b];
      const colour = s === undefined ? "#fff" : s === "P" ? "#ddd" : palette[(Number(s) - 1) % palette.length];
      rect.setAttribute("fill", colour);
      rect.setAttribute("stroke", r > 1 ? "#222" : "#aaa");
      rect.setAttribute("stroke-width", r > 1 ? 3 : 1);
      rect.dataset.ref = r;
      label.textContent = r ? `${b}:${r}` : `${b}`;
      label.setAttribute("fill", s === undefined || s === "P" ? "#333" : "#fff");
    });
    const used = st.ref.filter((r) => r > 0).length;
    info.textContent = `已用 ${used} 块，空闲 ${st.free} 块；写时复制 ${st.copies} 次（格中：块号:引用计数）`;
    tablesOut.innerHTML = "";
    for (const s of names) {
      const line = document.createElement("div");
      line.textContent = `${s === "P" ? "系统提示" : "序列 " + s}：长度 ${st.lengths[s]}，块表 [${st.tables[s].join(", ")}]`;
      tablesOut.append(line);
    }
    if (!names.length) tablesOut.textContent = "池是空的：点“新序列”或“共享提示”。";
  }
  model.on("change:events", draw);
  draw();
}

export default { render };
