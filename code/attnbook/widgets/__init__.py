"""Interactive figures that work in a live kernel (anywidget) and on the static HTML page (no kernel)."""

from .block_table import BlockTableWidget
from .cross_attention import CrossAttentionWidget
from .dk_scaling import DkScalingWidget
from .gpt_chat import GptChatWidget
from .head_browser import AttentionHeadBrowser
from .kernel_regression import KernelRegressionWidget
from .online_softmax import OnlineSoftmaxWidget
from .positional_explorer import SinusoidalExplorerWidget
from .rope_scaling_explorer import RopeScalingWidget
from .rotary import RotaryWidget
from .sampling_explorer import SamplingWidget
from .softmax_temperature import SoftmaxTemperatureWidget
from .static import StaticFallbackWidget
from .tile_map import TileMapWidget

__all__ = ["AttentionHeadBrowser", "BlockTableWidget", "CrossAttentionWidget", "DkScalingWidget", "GptChatWidget",
           "KernelRegressionWidget",
           "OnlineSoftmaxWidget", "RopeScalingWidget", "RotaryWidget", "SamplingWidget", "SinusoidalExplorerWidget",
           "SoftmaxTemperatureWidget", "StaticFallbackWidget", "TileMapWidget"]
