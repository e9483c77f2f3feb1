"""Pictures (matplotlib, Agg, PNG): attention, positional encodings, masks, the training recipe, complexity.

    plot_attention_grid / plot_model_attention    every layer and head, tokens on the axes
    plot_from_token / find_token                  lines from one token to every token, one panel per head
    plot_positional                               sinusoidal encodings, both layouts, and their dot products
    plot_masks                                    padding, causal, combined, Swin's shifted windows
    plot_lookahead                                the 5 x 5 look-ahead mask on "<Begin> I have a cat"
    plot_swin_windows / window_layout             Swin's toy windows: 81 vs 9 patches, 4 -> 9 -> 4 windows
    plot_schedule / plot_label_smoothing          section 5.3's learning rate, section 5.4's target
    plot_complexity                               global vs window attention, measured and by formula
    plot_layer_complexity                         Table 1: attention, LSTM, convolution, restricted, measured
    attention_html                                the interactive attention viewer, one self-contained page

Imported on first use (PEP 562): ``aiayn.viz.files`` (the names ``aiayn viz`` takes) loads without matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> the module of aiayn.viz that defines it
_LAZY = {
    "attention_weights": "attention", "plot_attention_grid": "attention", "plot_model_attention": "attention",
    "find_token": "attention", "plot_from_token": "attention",
    "plot_complexity": "complexity", "plot_layer_complexity": "complexity",
    "attention_html": "html",
    "plot_masks": "masks", "plot_lookahead": "masks",
    "plot_swin_windows": "swin", "window_layout": "swin",
    "encoding_similarity": "positional", "plot_positional": "positional",
    "plot_label_smoothing": "schedule", "plot_schedule": "schedule", "smoothed_target": "schedule",
}

if TYPE_CHECKING:
    from aiayn.viz.attention import (
        attention_weights,
        find_token,
        plot_attention_grid,
        plot_from_token,
        plot_model_attention,
    )
    from aiayn.viz.complexity import plot_complexity, plot_layer_complexity
    from aiayn.viz.html import attention_html
    from aiayn.viz.masks import plot_lookahead, plot_masks
    from aiayn.viz.positional import encoding_similarity, plot_positional
    from aiayn.viz.schedule import plot_label_smoothing, plot_schedule, smoothed_target
    from aiayn.viz.swin import plot_swin_windows, window_layout


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"aiayn.viz.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'aiayn.viz' has no attribute {name!r}")


__all__ = ["attention_html", "attention_weights", "encoding_similarity", "find_token",
           "plot_attention_grid", "plot_complexity", "plot_from_token", "plot_label_smoothing",
           "plot_layer_complexity", "plot_lookahead", "plot_masks", "plot_model_attention", "plot_positional",
           "plot_schedule", "plot_swin_windows", "smoothed_target", "window_layout"]
