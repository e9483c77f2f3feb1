"""The paper's encoder-decoder Transformer (Vaswani et al., 2017), and BART and Marian, which are the same model
with other switches set.

    model.py    TransformerConfig, its presets (transformer-base, transformer-big, ...), the model
    bart.py     BART's presets (Lewis et al., 2020)
    hf.py       Hugging Face MarianMTModel and BartForConditionalGeneration, both ways
    counts.py   parameters and multiply-adds (section 3)
    onnx.py     the encoder and one decoding step as ONNX graphs
"""

from aiayn.models.family import Family
from aiayn.models.transformer import bart
from aiayn.models.transformer.model import PRESETS, Transformer, TransformerConfig

FAMILY = Family(
    name="transformer", config=TransformerConfig, model=Transformer, presets={**PRESETS, **bart.PRESETS},
    task="translate", hf_types=("marian", "bart"), hf="aiayn.models.transformer.hf",
    counts="aiayn.models.transformer.counts", onnx="aiayn.models.transformer.onnx", tokens_loss=True,
)

__all__ = ["FAMILY", "PRESETS", "Transformer", "TransformerConfig"]
