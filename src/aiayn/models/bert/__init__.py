"""BERT (Devlin et al., 2019): the Transformer's encoder, pre-trained by masking.

    model.py    BertConfig, its presets (bert-base, bert-large, bert-tiny), the model and its heads
    hf.py       Hugging Face BertModel, BertForMaskedLM, BertForPreTraining, BertForSequenceClassification
    counts.py   parameters and multiply-adds
"""

from aiayn.models.bert.model import BERT, HEADS, PRESETS, BertConfig, mean_pool
from aiayn.models.family import Family

FAMILY = Family(name="bert", config=BertConfig, model=BERT, presets=PRESETS, task="embed", hf_types=("bert",),
                hf="aiayn.models.bert.hf", counts="aiayn.models.bert.counts")

__all__ = ["BERT", "FAMILY", "HEADS", "PRESETS", "BertConfig", "mean_pool"]
