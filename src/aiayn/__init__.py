"""aiayn: "Attention Is All You Need" and the models it started, in one readable PyTorch package.

    import aiayn
    cfg = aiayn.preset("transformer-base", src_vocab_size=8000, tgt_vocab_size=8000)
    model = aiayn.build(cfg)
    aiayn.count_parameters(model)
    aiayn.save(model, "runs/x"); model = aiayn.load("runs/x")
    model = aiayn.from_hf(hf_model_or_folder)
"""

from aiayn.analysis import count_parameters
from aiayn.models import build, preset, presets
from aiayn.training.checkpoint import load, save

__version__ = "0.1.0"


def from_hf(source):
    """An aiayn model computing what a Hugging Face model (or a local Hugging Face folder) computes;
    see :func:`aiayn.convert.from_hf`."""
    from aiayn.convert import from_hf as convert

    return convert(source)


def embed(folder_or_run, texts):
    """``(N, C)`` L2-normalised sentence embeddings from a BERT folder or run; see :func:`aiayn.recipes.mlm.embed`."""
    from aiayn.recipes.mlm import embed as run

    return run(folder_or_run, texts)


__all__ = ["embed", "build", "preset", "presets", "count_parameters", "save", "load", "from_hf", "__version__"]
