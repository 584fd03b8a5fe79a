"""A widget that also renders without a kernel.

An anywidget's ESM module exports ``render({model, el})``. In a kernel, Jupyter calls it with the
real synced model. On the static book page there is no kernel and no widget manager, so the display
bundle also carries ``text/html``: the same module inlined in a ``<script type="module">``, called
with a small in-page model (``static_model.js``) that holds the state captured at display time.
The book's configuration tells myst-nb to prefer that ``text/html`` over the widget-view mime type.
"""

from __future__ import annotations

import html
import itertools
import json
import math
from numbers import Integral, Real
from pathlib import Path

import anywidget

HERE = Path(__file__).parent
_EXPORT_LINE = "export default { render };"
_ids = itertools.count()  # deterministic element ids: two builds give identical pages


def finite_floats(name: str, xs) -> list[float]:
    """A list or 1-d tensor as a non-empty list of finite floats (a widget's synced data); else ValueError."""
    xs = [float(v) for v in (xs.tolist() if hasattr(xs, "tolist") else xs)]
    if not xs or not all(math.isfinite(v) for v in xs):
        raise ValueError(f"{name} must be a non-empty flat list of finite numbers, got {len(xs)} values")
    return xs


def is_number(x) -> bool:
    """A real number, but not a bool (True would otherwise pass as 1)."""
    return isinstance(x, Real) and not isinstance(x, bool)


def index_in(name: str, value, n: int) -> int:
    """``value`` as an int in [0, n) (a layer, head, sentence …); else ValueError naming it and the range."""
    if isinstance(value, bool) or not isinstance(value, Integral) or not 0 <= value < n:
        raise ValueError(f"{name} must be an integer in [0, {n}), got {value!r}")
    return int(value)


class StaticFallbackWidget(anywidget.AnyWidget):
    """Base class: subclasses name their JS module in ``_esm_file`` (a file beside this one that ends
    with ``export default { render };``); it runs after the shared helpers of ``common.js`` and the files named
    in ``_esm_deps`` (e.g. ``sampling_rules.js``); and give their Chinese name in ``title`` (the page's
    ``data-title``, which the gallery page lists)."""

    title = ""
    _esm_deps: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs):
        if "_esm_file" in cls.__dict__:
            if not cls.__dict__.get("title"):
                raise TypeError(f"{cls.__name__} needs a Chinese title (class attribute 'title')")
            cls._esm = "\n".join((HERE / name).read_text(encoding="utf-8")
                                  for name in ("common.js", *cls._esm_deps, cls._esm_file))
            cls._css = (HERE / "widgets.css").read_text(encoding="utf-8")
        super().__init_subclass__(**kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"  # the default repr has a memory address: builds would differ

    def _static_state(self) -> dict:
        """The synced traits the subclass declared (the base widget's own traits left out)."""
        own = set(self.trait_names(sync=True)) - set(anywidget.AnyWidget.class_trait_names(sync=True))
        return {n: getattr(self, n) for n in sorted(own) if not n.startswith("_")}

    def static_html(self) -> str:
        """Self-contained HTML that runs the widget's own JS module in the page (no kernel)."""
        source = str(self._esm)  # anywidget has replaced the class's Path by the file's text
        if _EXPORT_LINE not in source:
            raise ValueError(f"{type(self).__name__}: the ESM module must end with '{_EXPORT_LINE}'")
        css = str(getattr(self, "_css", ""))
        element_id = f"attnbook-widget-{next(_ids)}"
        state = json.dumps(self._static_state(), ensure_ascii=False).replace("</", "<\\/")
        shim = (HERE / "static_model.js").read_text(encoding="utf-8")
        body = source.replace(_EXPORT_LINE, "")
        return (f'<div id="{element_id}" class="attnbook-static-widget" '
                f'data-widget="{html.escape(type(self).__name__)}" data-title="{html.escape(self.title)}"></div>\n'
                f"<style>{css}</style>\n"
                f'<script type="module">\n{shim}\n{body}\n'
                f'render({{ model: staticModel({state}), el: document.getElementById("{element_id}") }});\n'
                f"</script>")

    def _repr_mimebundle_(self, **kwargs):
        data, metadata = super()._repr_mimebundle_(**kwargs)
        data["text/html"] = self.static_html()
        return data, metadata
