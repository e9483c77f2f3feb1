"""GPT-2 (Radford et al., 2019) and, with its switches, Llama and Mistral: one decoder-only model.

    model.py    GPTConfig, its presets (gpt2, gpt3-175b, llama, mistral, ...), the model
    hf.py       Hugging Face GPT-2, Llama and Mistral, both ways (gpt2.py and llama.py hold the key tables)
    counts.py   parameters and multiply-adds
    onnx.py     the model over a cache as one ONNX graph
"""

from aiayn.models.family import Family
from aiayn.models.gpt.model import GPT, HEADS, PRESETS, GPTConfig

FAMILY = Family(
    name="gpt", config=GPTConfig, model=GPT, presets=PRESETS, task="generate",
    hf_types=("gpt2", "llama", "mistral"), hf="aiayn.models.gpt.hf", counts="aiayn.models.gpt.counts",
    onnx="aiayn.models.gpt.onnx", tokens_loss=True,
)

__all__ = ["FAMILY", "GPT", "HEADS", "PRESETS", "GPTConfig"]
