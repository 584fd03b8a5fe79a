"""Interactive figures that work in a live kernel (anywidget) and on the static HTML page (no kernel)."""

from .softmax_temperature import SoftmaxTemperatureWidget
from .static import StaticFallbackWidget

__all__ = ["SoftmaxTemperatureWidget", "StaticFallbackWidget"]
