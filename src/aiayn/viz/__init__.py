"""Pictures: attention weights (more come with the analysis issue)."""

from aiayn.viz.attention import plot_attention_grid

__all__ = ["plot_attention_grid"]
