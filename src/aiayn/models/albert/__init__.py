"""ALBERT (Lan et al., 2020): BERT with a factorised embedding and one encoder layer shared by every layer.

    model.py    AlbertConfig (a BertConfig), its presets (albert-base, albert-large, albert-tiny), the model
    hf.py       Hugging Face AlbertModel, AlbertForMaskedLM, AlbertForPreTraining, AlbertForSequenceClassification
    counts.py   parameters (the shared layer once) and multiply-adds (it N times)
"""

from aiayn.models.albert.model import ALBERT, PRESETS, AlbertConfig
from aiayn.models.family import Family

FAMILY = Family(name="albert", config=AlbertConfig, model=ALBERT, presets=PRESETS, task="embed", hf_types=("albert",),
                hf="aiayn.models.albert.hf", counts="aiayn.models.albert.counts")

__all__ = ["ALBERT", "FAMILY", "PRESETS", "AlbertConfig"]
