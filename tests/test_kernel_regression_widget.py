"""The kernel-regression widget: Nadaraya–Watson against its closed form and its two limits, the
static fallback, and a live kernel (the browser test is in test_browser_attention_basics.py)."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

import attnbook
from kernel_comm import LiveWidget

# The weather stations of the chapter 注意力机制基础 (km, °C).
STATIONS = [3.0, 11.0, 18.0, 30.0, 41.0, 47.0, 62.0, 75.0]
TEMPS = [14.2, 15.1, 16.8, 18.9, 17.5, 16.0, 12.4, 11.8]


def closed_form(q: float, w: float) -> tuple[list[float], float]:
    """alpha_j = exp(-(q - k_j)^2 / 2w^2) / sum, shifted by the smallest distance; scalar float64."""
    d = [(q - k) ** 2 for k in STATIONS]
    e = [math.exp(-(dj - min(d)) / (2 * w * w)) for dj in d]
    alpha = [x / sum(e) for x in e]
    return alpha, sum(a * v for a, v in zip(alpha, TEMPS))


def widget(**kw):
    return attnbook.KernelRegressionWidget(STATIONS, TEMPS, x_range=(0, 80), **kw)


@pytest.mark.parametrize("q, w", [(25.0, 10.0), (0.0, 3.0), (47.0, 0.7), (80.0, 40.0)])
def test_weights_and_estimate_equal_the_closed_form(q, w):
    kr = widget(width=w, query=q)
    alpha, y = closed_form(q, w)
    torch.testing.assert_close(kr.weights(), torch.tensor(alpha, dtype=torch.float64), rtol=1e-12, atol=1e-15)
    assert kr.estimate() == pytest.approx(y, rel=1e-12)
    xs = [0.0, 12.5, 33.3, 80.0]
    est, ws = kr.estimates(xs)
    for x, e_x, w_x in zip(xs, est, ws):
        a_x, y_x = closed_form(x, w)
        assert float(e_x) == pytest.approx(y_x, rel=1e-12) and w_x.tolist() == pytest.approx(a_x, rel=1e-10)


def test_narrow_width_is_the_nearest_neighbour():
    kr = widget(width=0.3)  # the slider's smallest width
    for q in [0.0, 7.5, 25.0, 36.0, 54.0, 69.0, 80.0]:      # no query on a midpoint between two stations
        kr.query = q
        nearest = min(range(len(STATIONS)), key=lambda j: abs(q - STATIONS[j]))
        assert kr.estimate() == pytest.approx(TEMPS[nearest], abs=1e-9)
        assert float(kr.weights()[nearest]) == pytest.approx(1.0, abs=1e-9)
    kr.query = (18.0 + 30.0) / 2                            # on a midpoint: the two neighbours share
    assert kr.weights()[2:4].tolist() == pytest.approx([0.5, 0.5], abs=1e-12)


def test_wide_width_tends_to_the_global_mean():
    mean = sum(TEMPS) / len(TEMPS)
    spread = max(abs(v - mean) for v in TEMPS)
    for w in (300.0, 3000.0, 3e5):
        kr = widget(width=w, w_range=(0.3, 3e5))
        for q in (0.0, 25.0, 80.0):
            kr.query = q
            # alpha_j in [e^-A / n, e^A / n], A = max_j (q - k_j)^2 / 2w^2, so |estimate - mean| <= (e^A - 1) spread
            A = max((q - k) ** 2 for k in STATIONS) / (2 * w * w)
            assert abs(kr.estimate() - mean) <= (math.exp(A) - 1) * spread + 1e-12
    assert abs(kr.estimate() - mean) < 1e-6
    kr300 = widget(width=300.0, query=25.0)
    assert abs(kr300.estimate() - mean) < 0.05                # at the slider's widest: the mean to 0.05 °C


def test_attend_with_the_chapter_score_gives_the_same_weights():
    kr = widget(width=10.0, query=25.0)
    q = torch.tensor([[[25.0]]], dtype=torch.float64)
    k = torch.tensor(STATIONS, dtype=torch.float64).view(1, -1, 1)
    scores = -(q - k.transpose(-2, -1)) ** 2 / (2 * 10.0**2)       # (1, 1, 8)
    torch.testing.assert_close(kr.weights(), torch.softmax(scores, -1)[0, 0])


@pytest.mark.parametrize("kwargs, message", [
    (dict(positions=[], values=[]), "non-empty"),
    (dict(positions=[1.0, float("inf")], values=[1.0, 2.0]), "finite"),
    (dict(positions=[1.0, 2.0], values=[1.0]), "2 positions for 1 values"),
    (dict(positions=[1.0, 2.0], values=[1.0, 2.0], width=0.0), "0 < w_min <= width"),
    (dict(positions=[1.0, 2.0], values=[1.0, 2.0], query=5.0), "x_min <= query <= x_max"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        attnbook.KernelRegressionWidget(**kwargs)


def test_static_fallback_carries_the_data_and_the_js_computes_the_weights():
    kr = widget(width=10.0, query=25.0, x_unit="km", y_unit="°C")
    page = kr._repr_mimebundle_()[0]["text/html"]
    state = json.loads(re.search(r"staticModel\((\{.*?\})\)", page).group(1))
    assert state["positions"] == STATIONS and state["values"] == TEMPS
    assert (state["width"], state["query"], state["x_min"], state["x_max"]) == (10.0, 25.0, 0.0, 80.0)
    assert "function nadarayaWatson(" in page and "export default" not in page
    assert not re.search(r"(src|href)=\"?https?://", page)
    assert len(page.encode()) < 60_000


def test_live_kernel_sees_the_sliders_and_moves_them():
    setup = (f"import attnbook, json\n"
             f"w = attnbook.KernelRegressionWidget({STATIONS}, {TEMPS}, width=10.0, query=25.0, x_range=(0, 80))")
    with LiveWidget(setup) as live:
        assert live.send({"width": 2.5, "query": 40.0}) == ["query", "width"]   # what the sliders send
        got = json.loads(live.run("print(json.dumps([w.width, w.query, w.estimate(), w.weights().tolist()]))"))
        alpha, y = closed_form(40.0, 2.5)
        assert got[:2] == [2.5, 40.0] and got[2] == pytest.approx(y, rel=1e-12)
        assert got[3] == pytest.approx(alpha, rel=1e-10, abs=1e-15)
        assert {"width": 0.5} in live.python_updates("w.width = 0.5")             # Python moves the slider
