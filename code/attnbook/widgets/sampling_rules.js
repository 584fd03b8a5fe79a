// The sampling rules of attnbook.sampling (temperature -> top-k -> top-p, ties kept), shared by the widgets
// that sample: keptProbs(z, T, k, p) gives the renormalised probabilities (0 = dropped); k = 0 and p = 1 mean off;
// pickAt(q, u) is the index a uniform draw u picks (inverse CDF).

function keptProbs(z, T, k, p) {
  let s = z.map((v) => v / T);
  if (k > 0 && k < s.length) {                    // top-k: keep every logit >= the k-th largest (ties kept)
    const kth = [...s].sort((a, b) => b - a)[k - 1];
    s = s.map((v) => (v < kth ? -Infinity : v));
  }
  let q = softmax(s);
  if (p < 1) {                                    // top-p: the smallest most-probable set reaching p
    const sorted = [...q].sort((a, b) => b - a);
    let before = 0, m = 0;
    for (const v of sorted) { if (before < p) { m += 1; before += v; } else break; }
    const threshold = sorted[m - 1];
    const kept = q.map((v) => v >= threshold);
    const mass = q.reduce((a, v, i) => (kept[i] ? a + v : a), 0);
    q = q.map((v, i) => (kept[i] ? v / mass : 0));
  }
  return q;
}

function pickAt(q, u) {                           // the first index whose cumulative probability exceeds u
  let cdf = 0;
  for (let j = 0; j < q.length; j++) { cdf += q[j]; if (cdf > u) return j; }
  return q.length - 1;
}
