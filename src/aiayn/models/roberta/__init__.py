"""RoBERTa (Liu et al., 2019): BERT's network with positions counted from the padding and no next sentence.

    model.py    RobertaConfig (a BertConfig), its presets (roberta-base, roberta-large, roberta-tiny), the model
    hf.py       Hugging Face RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification
    counts.py   parameters and multiply-adds
"""

from aiayn.models.family import Family
from aiayn.models.roberta.model import HEADS, PRESETS, RoBERTa, RobertaConfig

FAMILY = Family(name="roberta", config=RobertaConfig, model=RoBERTa, presets=PRESETS, task="embed",
                hf_types=("roberta",), hf="aiayn.models.roberta.hf", counts="aiayn.models.roberta.counts")

__all__ = ["FAMILY", "HEADS", "PRESETS", "RoBERTa", "RobertaConfig"]
