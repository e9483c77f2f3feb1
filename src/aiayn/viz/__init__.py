"""Pictures (matplotlib, Agg, PNG): attention, positional encodings, masks, the training recipe, complexity.

    plot_attention_grid / plot_model_attention    every layer and head, tokens on the axes
    plot_positional                               sinusoidal encodings, both layouts, and their dot products
    plot_masks                                    padding, causal, combined, Swin's shifted windows
    plot_schedule / plot_label_smoothing          section 5.3's learning rate, section 5.4's target
    plot_complexity                               global vs window attention, measured and by formula
"""

from aiayn.viz.attention import attention_weights, plot_attention_grid, plot_model_attention
from aiayn.viz.complexity import plot_complexity
from aiayn.viz.masks import plot_masks
from aiayn.viz.positional import encoding_similarity, plot_positional
from aiayn.viz.schedule import plot_label_smoothing, plot_schedule, smoothed_target

__all__ = ["attention_weights", "encoding_similarity", "plot_attention_grid", "plot_complexity",
           "plot_label_smoothing", "plot_masks", "plot_model_attention", "plot_positional", "plot_schedule",
           "smoothed_target"]
