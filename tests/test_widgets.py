"""The temperature widget: Python side, static fallback, and a real kernel's comm round trip."""

import json
import re

import pytest
import torch
from jupyter_client.manager import start_new_kernel

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


def _collect(kc, msg_id, timeout=30):
    """iopub messages of one execution, until the kernel goes idle."""
    out = []
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        out.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return out


def _run(kc, code):
    msgs = _collect(kc, kc.execute(code))
    errors = [m["content"] for m in msgs if m["msg_type"] == "error"]
    assert not errors, errors
    return msgs


def test_widget_in_a_live_kernel_syncs_temperature_both_ways():
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        msgs = _run(kc, "import attnbook\n"
                        "seen = []\n"
                        "w = attnbook.SoftmaxTemperatureWidget([2.0, 1.0, 0.1])\n"
                        "w.observe(lambda c: seen.append(c['new']), names='temperature')\n"
                        "display(w)")
        opens = [m for m in msgs if m["msg_type"] == "comm_open"
                 and m["content"]["data"]["state"].get("_model_name") == "AnyModel"]
        assert len(opens) == 1
        comm_id = opens[0]["content"]["comm_id"]
        shown = [m["content"]["data"] for m in msgs if m["msg_type"] == "display_data"]
        assert shown and shown[0][WIDGET_VIEW]["model_id"] == comm_id

        # Front end -> Python: what JupyterLab sends when the slider moves.
        kc.shell_channel.send(kc.session.msg("comm_msg", {
            "comm_id": comm_id,
            "data": {"method": "update", "state": {"temperature": 2.5}, "buffer_paths": []},
        }))
        msgs = _run(kc, "import time\n"
                        "for _ in range(50):\n"
                        "    if seen: break\n"
                        "    time.sleep(0.1)\n"
                        "print(w.temperature, seen, round(float(w.probabilities()[0]), 6))")
        stdout = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")
        p0 = float(torch.softmax(torch.tensor([2.0, 1.0, 0.1], dtype=torch.float64) / 2.5, -1)[0])
        assert stdout.split() == ["2.5", "[2.5]", f"{round(p0, 6)}"]

        # Python -> front end: setting the trait sends an update the page would redraw from.
        msgs = _run(kc, "w.temperature = 0.5")
        updates = [m["content"]["data"] for m in msgs if m["msg_type"] == "comm_msg"
                   and m["content"]["comm_id"] == comm_id]
        assert {"method": "update", "state": {"temperature": 0.5}, "buffer_paths": []} in updates
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
