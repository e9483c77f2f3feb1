"""Counting: parameters by part, and forward multiply-adds from closed-form formulas checked against measurement.

    counts("gpt3-175b")          # Counts: parameters and multiply-adds by part, from the formulas (no weights)
    measure(model, seq_len=32)   # the same, measured on a real (small) model with FlopCounterMode
    parameter_table(cfg)         # parameters by part, counted module by module on the meta device

One multiply-add (MAC) is 2 FLOPs; :mod:`aiayn.analysis.formulas` derives every formula and says which papers
count which.
"""

from aiayn.analysis.flops import measure
from aiayn.analysis.formulas import MAC_PARTS, PARAMETER_PARTS, Counts, counts
from aiayn.analysis.params import count_parameters, parameter_table
from aiayn.analysis.published import PUBLISHED

__all__ = ["MAC_PARTS", "PARAMETER_PARTS", "PUBLISHED", "Counts", "count_parameters", "counts", "measure",
           "parameter_table"]
