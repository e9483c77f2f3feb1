"""DistilBERT (Sanh et al., 2019): BERT with half the layers, no token-type embeddings and no pooler.

    model.py    DistilBertConfig (a BertConfig), its presets (distilbert-base, distilbert-tiny), the model (a BERT)
    hf.py       Hugging Face DistilBertModel, DistilBertForMaskedLM, DistilBertForSequenceClassification
    counts.py   parameters and multiply-adds
"""

from aiayn.models.distilbert.model import HEADS, PRESETS, DistilBERT, DistilBertConfig
from aiayn.models.family import Family

FAMILY = Family(name="distilbert", config=DistilBertConfig, model=DistilBERT, presets=PRESETS, task="embed",
                hf_types=("distilbert",), hf="aiayn.models.distilbert.hf", counts="aiayn.models.distilbert.counts")

__all__ = ["FAMILY", "HEADS", "PRESETS", "DistilBERT", "DistilBertConfig"]
