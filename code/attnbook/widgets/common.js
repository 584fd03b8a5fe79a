// Helpers every widget module gets (prepended by StaticFallbackWidget; a module is one string).
const SVG = "http://www.w3.org/2000/svg";

function softmax(z, T = 1) {
  const m = Math.max(...z);                       // subtract the max: exp never overflows
  const e = z.map((v) => Math.exp((v - m) / T));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / s);
}

function entropy(p) {                             // nats; 0 log 0 = 0
  return -p.reduce((acc, v) => (v > 0 ? acc + v * Math.log(v) : acc), 0);
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function rangeRow(label, attrs, cls) {            // "label [slider] readout", one row of controls
  const row = document.createElement("div");
  row.className = "attnbook-controls";
  const input = Object.assign(document.createElement("input"), { type: "range", ...attrs });
  input.className = cls;
  input.setAttribute("aria-label", String(label).trim() || cls);  // what a screen reader says
  const out = document.createElement("span");
  out.className = `attnbook-readout ${cls}`;
  row.append(label, input, out);
  return { row, input, out };
}
