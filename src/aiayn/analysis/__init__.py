"""Counting: parameters by part (FLOPs come with the analysis issue)."""

from aiayn.analysis.params import count_parameters, parameter_table

__all__ = ["count_parameters", "parameter_table"]
