"""The RoPE-scaling widget: its frequencies and curves against closed forms, transformers and rotated vectors;
the static fallback in chromium against Python after the controls move; a live kernel (the browser test on the
built chapter is test_browser_recent_attention.py)."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

import attnbook
from figure_words import english_words, load_allowed
from kernel_comm import LiveWidget
from widget_page import drag, set_slider

METHODS = ("none", "linear", "dynamic_ntk", "yarn")
D, BASE, L = 8, 10000.0, 16                       # the 位置编码 experiment: head size 32 / 4, RoPE base, train length


def closed_form(method: str, s: float, dim=D, base=BASE, length=L) -> tuple[list[float], float]:
    """Each method's frequencies and attention factor, written out in scalar float64."""
    w = [base ** (-2 * i / dim) for i in range(dim // 2)]
    T = math.ceil(s * length)
    if method == "linear":
        return [v / s for v in w], 1.0
    if method == "dynamic_ntk":                   # base (sT/L - (s-1))^(D/(D-2)): the fastest kept
        b = base * (s * T / length - (s - 1)) ** (dim / (dim - 2))
        return [b ** (-2 * i / dim) for i in range(dim // 2)], 1.0
    return w, 1.0                                 # yarn: against transformers below


@pytest.mark.parametrize("method", ["none", "linear", "dynamic_ntk"])
@pytest.mark.parametrize("s", [1.0, 2.5, 4.0, 16.0])
def test_frequencies_equal_the_closed_forms(method, s):
    w = attnbook.RopeScalingWidget(method=method, factor=s)
    freq, a = w.frequencies()
    ref, a_ref = closed_form(method, s)
    assert freq.tolist() == pytest.approx(ref, rel=1e-12) and a == a_ref == 1.0
    if method == "dynamic_ntk":                   # the slowest pair divided by s T / L - (s - 1), T = ceil(s L)
        assert float(freq[0]) == 1.0
        T = math.ceil(s * L)
        assert 10000.0 ** (-6 / 8) / float(freq[-1]) == pytest.approx(s * T / L - (s - 1), rel=1e-12)


@pytest.mark.parametrize("dim, base, length, s", [(8, 10000.0, 16, 4.0), (8, 10000.0, 16, 16.0),
                                                  (64, 10000.0, 4096, 8.0), (32, 500000.0, 2048, 2.5)])
def test_yarn_equals_transformers(dim, base, length, s):
    rope_utils = pytest.importorskip("transformers.modeling_rope_utils")
    from transformers import LlamaConfig
    config = LlamaConfig(hidden_size=2 * dim, num_attention_heads=2, head_dim=dim, max_position_embeddings=4 * length,
                         rope_parameters={"rope_theta": base, "rope_type": "yarn", "factor": s,
                                          "original_max_position_embeddings": length})
    ref, a_ref = rope_utils._compute_yarn_parameters(config)
    w = attnbook.RopeScalingWidget(dim, base, length, method="yarn", factor=s)
    freq, a = w.frequencies()
    torch.testing.assert_close(freq, ref.to(torch.float64), rtol=2e-6, atol=0)   # transformers: float32
    assert a == pytest.approx(a_ref, rel=1e-12) and a == pytest.approx(0.1 * math.log(s) + 1, rel=1e-12)


def ones_score(freq: torch.Tensor, a: float, d: float, positions_scale: float = 1.0) -> float:
    """Two all-ones vectors rotated pair by pair at positions 0 and d (2x2 rotation matrices), times a each."""
    total = 0.0
    for v in freq.tolist():
        angle = d * v / positions_scale
        R = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=torch.float64)
        total += float((a * torch.ones(2, dtype=torch.float64)) @ (R @ (a * torch.ones(2, dtype=torch.float64))))
    return total


@pytest.mark.parametrize("method", METHODS)
def test_curve_is_the_dot_product_of_rotated_ones(method):
    w = attnbook.RopeScalingWidget(method=method, factor=3.0)
    d = w.distances()
    assert d.tolist() == list(range(49))                     # every integer distance 0 .. T = 48
    freq, a = w.frequencies()
    got = w.scores()
    for j in (0, 1, 7, 16, 33, 48):
        assert float(got[j]) == pytest.approx(ones_score(freq, a, j), abs=1e-12)
    assert float(got[0]) == pytest.approx(D * a * a, rel=1e-12)
    unscaled = attnbook.RopeScalingWidget(method="none", factor=3.0).scores()
    torch.testing.assert_close(w.scores(scaled=False), unscaled, rtol=0, atol=0)
    if method == "linear":                                     # interpolation = the unscaled curve at d / s
        for j in (5, 17, 48):
            assert float(got[j]) == pytest.approx(ones_score(attnbook.rope_frequencies(D), 1.0, j, 3.0), abs=1e-12)


def test_long_contexts_are_sampled_evenly():
    w = attnbook.RopeScalingWidget(64, 10000.0, 4096, method="dynamic_ntk", factor=8.0)
    d = w.distances()
    assert w.length() == 32768 and len(d) == 513 and float(d[-1]) == 32768.0 and float(d[1]) == 64.0
    w.set_controls("dynamic_ntk", 1.5001)                               # s L = 6144.4: T rounds up
    assert w.length() == 6145 and float(w.distances()[-1]) == 6145.0


def test_unseen_pairs_follow_each_method():
    """Pair i has seen every angle in training when it turned a full circle (L w_i >= 2 pi), else the angles
    [0, L w_i]: with D = 8, L = 16 only pair 0 turned (L w_0 = 16)."""
    w = attnbook.RopeScalingWidget(method="none", factor=4.0)
    assert w.unseen_pairs() == [1, 2, 3]
    w.set_controls("linear", 4.0)
    assert w.unseen_pairs() == []                               # s L w_i / s = L w_i
    w.set_controls("dynamic_ntk", 4.0)
    assert w.unseen_pairs() == [1]                              # 13^(-1/3) s > 1: pair 1 is divided by less than s
    w.set_controls("yarn", 4.0)
    assert w.unseen_pairs() == []                               # pair 0 kept (it turned), the rest / s
    w.set_controls("none", 1.0)
    assert w.unseen_pairs() == []                               # no longer than training


@pytest.mark.parametrize("kwargs, message", [
    (dict(dim=7), "even integer >= 4, got 7"),
    (dict(dim=2), "even integer >= 4, got 2"),                 # NTK's exponent D / (D - 2)
    (dict(dim=True), "got True"),
    (dict(base=1.0), "base must be a finite number > 1, got 1.0"),
    (dict(base=float("inf")), "base must be"),
    (dict(train_len=0), "train_len must be a positive integer, got 0"),
    (dict(train_len=16.0), "got 16.0"),
    (dict(factor_max=1.0), r"factor_max must be a number in \(1, 1024\], got 1.0"),
    (dict(method="ntk"), r"method must be one of \('none', 'linear', 'dynamic_ntk', 'yarn'\), got 'ntk'"),
    (dict(factor=0.5), r"factor must be a number in \[1, 16.0\], got 0.5"),
    (dict(factor=17.0), r"\[1, 16.0\], got 17.0"),
    (dict(factor=float("nan")), "got nan"),
    (dict(factor="2"), "got '2'"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        attnbook.RopeScalingWidget(**kwargs)


def test_bad_controls_leave_the_widget_as_it_was():
    w = attnbook.RopeScalingWidget(method="linear", factor=2.0)
    for method, s in (("yarn", 20.0), ("PI", 2.0)):
        with pytest.raises(ValueError):
            w.set_controls(method, s)
    assert (w.method, w.factor) == ("linear", 2.0)
    with pytest.raises(ValueError, match=r"factor must be a number in \[1, 16.0\], got 20.0"):
        w.factor = 20.0                                         # set directly, as a cell might
    with pytest.raises(ValueError, match="method must be one of"):
        w.method = "ntk"
    assert (w.method, w.factor) == ("linear", 2.0)


def static_state(page_html: str) -> dict:
    return json.loads(re.search(r"staticModel\((\{.*?\})\)", page_html).group(1))


def test_static_fallback_carries_the_state_and_the_js():
    w = attnbook.RopeScalingWidget(method="dynamic_ntk", factor=2.0)
    page = w._repr_mimebundle_()[0]["text/html"]
    assert static_state(page) == {"base": 10000.0, "dim": 8, "factor": 2.0, "factor_max": 16.0, "method": "dynamic_ntk",
                                  "train_len": 16}
    assert "function scaledFrequencies(" in page and "export default" not in page
    assert not re.search(r"(src|href)=\"?https?://", page)
    assert len(page.encode()) < 60_000                         # tests/test_book.py: at most 60 KB a widget


# ---- the static page in chromium ----

ALLOWED = load_allowed()                          # NTK and YaRN are on it (7f4698c)


def open_widget(browser, tmp_path, w):
    (tmp_path / "widget.html").write_text(f"<!doctype html><meta charset='utf-8'><body>{w.static_html()}</body>",
                                          encoding="utf-8")
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto((tmp_path / "widget.html").as_uri())
    return page, errors, page.locator('[data-widget="RopeScalingWidget"]')


def compare(root, py) -> dict:
    """The page's method, s, frequencies, factor, distances, curves and orange pairs against the package."""
    info = root.locator(".attnbook-readout.info")
    py.set_controls(info.get_attribute("data-method"), float(info.get_attribute("data-factor")))
    freq, a = py.frequencies()
    assert json.loads(info.get_attribute("data-inv-freq")) == pytest.approx(freq.tolist(), rel=1e-9)
    assert float(info.get_attribute("data-attention-factor")) == pytest.approx(a, rel=1e-12)
    assert int(info.get_attribute("data-length")) == py.length()
    assert json.loads(info.get_attribute("data-distances")) == pytest.approx(py.distances().tolist(), rel=1e-12)
    assert json.loads(info.get_attribute("data-scores")) == pytest.approx(py.scores().tolist(), abs=1e-6)
    raw = json.loads(root.locator("svg.scores polyline.raw").get_attribute("data-values"))
    assert raw == pytest.approx(py.scores(scaled=False).tolist(), abs=1e-6)
    assert json.loads(info.get_attribute("data-unseen")) == py.unseen_pairs()
    orange = root.locator("svg.frequencies circle.dot").evaluate_all(
        "cs => cs.map((c, i) => c.getAttribute('fill') === '#d08c2c' ? i : -1).filter(i => i >= 0)")
    assert orange == py.unseen_pairs()
    return {"method": py.method, "factor": py.factor, "points": root.locator("svg.scores polyline.scaled")
            .get_attribute("points")}


@pytest.mark.browser
def test_static_page_matches_python_as_the_controls_move(browser, tmp_path):
    py = attnbook.RopeScalingWidget()
    page, errors, root = open_widget(browser, tmp_path, py)
    drawn = [compare(root, py)]
    assert drawn[0]["method"] == "yarn" and drawn[0]["factor"] == 4.0
    drag(page, root.locator("input.factor"), 0.8)                    # a real mouse drag of s
    drawn.append(compare(root, py))
    assert drawn[-1]["factor"] > 10 and drawn[-1]["points"] != drawn[0]["points"]
    for method, s in (("none", 4.0), ("linear", 2.5), ("dynamic_ntk", 8.0), ("dynamic_ntk", 1.0), ("yarn", 16.0), ("linear", 5.75)):
        root.locator(f"label.method-{method}").click()
        set_slider(root.locator("input.factor"), s)
        drawn.append(compare(root, py))
        assert (drawn[-1]["method"], drawn[-1]["factor"]) == (method, s)
    assert len({d["points"] for d in drawn}) == len(drawn)               # every move redrew the curve
    texts = root.evaluate("""w => { const out = [], walk = document.createTreeWalker(w, NodeFilter.SHOW_TEXT);
        while (walk.nextNode()) out.push(walk.currentNode.textContent);
        w.querySelectorAll('[aria-label]').forEach(e => out.push(e.getAttribute('aria-label'))); return out; }""")
    assert not {word for t in texts for word in english_words(t, ALLOWED)}
    page.close()
    assert errors == []


@pytest.mark.browser
def test_static_page_for_a_long_context(browser, tmp_path):
    py = attnbook.RopeScalingWidget(64, 500000.0, 4096, method="dynamic_ntk", factor=8.3, factor_max=32.0)
    page, errors, root = open_widget(browser, tmp_path, py)
    assert compare(root, py)["factor"] == 8.3 and py.length() == 33997           # T = ceil(s L), s L = 33996.8
    for method in METHODS:
        root.locator(f"label.method-{method}").click()
        set_slider(root.locator("input.factor"), 32)
        compare(root, py)
    page.close()
    assert errors == []


def test_live_kernel_follows_the_controls_and_moves_them():
    setup = "import attnbook, json\nw = attnbook.RopeScalingWidget(8, 10000.0, 16, method='yarn', factor=4.0)"
    with LiveWidget(setup) as live:
        assert live.send({"method": "linear", "factor": 6.5}) == ["factor", "method"]   # what the page sends
        got = json.loads(live.run("f, a = w.frequencies()\n"
                                  "print(json.dumps([w.method, w.factor, f.tolist(), a, w.scores()[-1].item()]))"))
        ref, _ = closed_form("linear", 6.5)
        assert got[:2] == ["linear", 6.5] and got[2] == pytest.approx(ref, rel=1e-12) and got[3] == 1.0
        assert got[4] == pytest.approx(ones_score(torch.tensor(ref, dtype=torch.float64), 1.0, 104), abs=1e-12)
        assert {"method": "dynamic_ntk", "factor": 2.0} in live.python_updates("w.set_controls('dynamic_ntk', 2.0)")
