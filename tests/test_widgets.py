"""The temperature widget: Python side and static fallback (live round trip: test_widget_jupyterlab.py)."""

import json
import re

import pytest
import torch

import attnbook
from attnbook.widgets.static import StaticFallbackWidget

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_probabilities_follow_temperature():
    z = [2.0, 1.0, 0.1, -1.0]
    w = attnbook.SoftmaxTemperatureWidget(z)
    for T in (0.1, 1.0, 7.5):
        w.temperature = T
        ref = torch.softmax(torch.tensor(z, dtype=torch.float64) / T, dim=-1)
        torch.testing.assert_close(w.probabilities(), ref)
        ent = float(-(ref * ref.log()).sum())
        assert w.entropy() == pytest.approx(ent, rel=1e-12)


def test_observe_sees_temperature_changes():
    w = attnbook.SoftmaxTemperatureWidget([1.0, 0.0])
    seen = []
    w.observe(lambda change: seen.append(change["new"]), names="temperature")
    w.temperature = 0.3
    assert seen == [0.3]


@pytest.mark.parametrize("kwargs, message", [
    (dict(logits=[]), "non-empty"),
    (dict(logits=[1.0, float("nan")]), "finite"),
    (dict(logits=[1.0, 2.0], labels=["a"]), "1 labels for 2 logits"),
    (dict(logits=[1.0, 2.0], temperature=0.0), "0 < t_min"),
    (dict(logits=[1.0, 2.0], temperature=50.0), "t_max"),
    (dict(logits=[1.0, 2.0], temperature="2"), "got 0.05, '2', 20.0"),            # not a TypeError
    (dict(logits=[1.0, 2.0], temperature=float("nan")), "t_max, got 0.05, nan"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        attnbook.SoftmaxTemperatureWidget(**kwargs)


def test_bundle_has_widget_view_and_a_self_contained_static_fallback():
    w = attnbook.SoftmaxTemperatureWidget([3.0, 1.0], labels=["猫", "狗"], temperature=2.0)
    data, _ = w._repr_mimebundle_()
    assert data[WIDGET_VIEW]["model_id"] == w.model_id
    page = data["text/html"]
    assert '<script type="module">' in page and "export default" not in page
    assert "function render(" in page and "function staticModel(" in page
    state = json.loads(re.search(r"staticModel\((\{.*?\})\)", page).group(1))
    assert state == {"labels": ["猫", "狗"], "logits": [3.0, 1.0], "t_max": 20.0, "t_min": 0.05,
                     "temperature": 2.0}
    assert not re.search(r"(src|href)=\"?https?://", page)  # nothing fetched from another host


def test_static_fallback_requires_the_export_line():
    class Broken(StaticFallbackWidget):
        _esm = "function render() {}"

    with pytest.raises(ValueError, match="must end with"):
        Broken().static_html()


def test_every_widget_has_a_chinese_title_on_its_static_page():
    classes = [getattr(attnbook.widgets, n) for n in attnbook.widgets.__all__]
    widgets = [c for c in classes if isinstance(c, type) and issubclass(c, StaticFallbackWidget)
               and c is not StaticFallbackWidget]
    assert len(widgets) >= 11
    for cls in widgets:
        assert re.search(r"[\u4e00-\u9fff]", cls.title), cls.__name__      # the gallery page lists it by this name
    page = attnbook.SoftmaxTemperatureWidget([1.0, 2.0]).static_html()
    assert 'data-widget="SoftmaxTemperatureWidget" data-title="Softmax 的温度"' in page
    with pytest.raises(TypeError, match="needs a Chinese title"):
        type("Untitled", (StaticFallbackWidget,), {"_esm_file": "tile_map.js"})


def test_no_widget_replaces_a_method_of_the_widget_machinery():
    """A method named like one of ipywidgets' own (set_state, get_state, send, open, …) replaces it, and the
    kernel then drops every update the page sends (the sampling widget's set_state once did, silently)."""
    import anywidget
    import traitlets

    machinery = set(dir(anywidget.AnyWidget))
    bookkeeping = set(vars(type("Plain", (traitlets.HasTraits,), {})))       # what every traitlets class defines
    deliberate = {"_repr_mimebundle_"}                                        # the static fallback (tested above)
    for name in attnbook.widgets.__all__:
        for cls in getattr(attnbook.widgets, name).__mro__:
            if cls.__module__.startswith("attnbook"):
                clash = {n for n in vars(cls) if not n.startswith("__")} & machinery - bookkeeping - deliberate
                assert not clash, f"{cls.__name__} redefines {sorted(clash)} of anywidget.AnyWidget"
