"""Fine-tuning: which weights are loaded, frozen and slowed, checked weight by weight."""

import dataclasses

import pytest
import torch

import aiayn
from aiayn.training import finetune


def bert(head: str, **changes) -> torch.nn.Module:
    torch.manual_seed(len(head))
    return aiayn.build(aiayn.preset("bert-tiny", **{"vocab_size": 50, "max_len": 16, "head": head, **changes}))


def test_transfer_loads_the_shared_weights_and_leaves_the_new_head_as_initialised():
    source, target = bert("pretraining"), bert("classification", num_labels=3)
    head_before = target.classifier.weight.clone()
    loaded = finetune.transfer(source, target)
    src = source.state_dict()
    for name, value in target.state_dict().items():
        if name in loaded:
            assert torch.equal(value, src[name]), name
        else:
            assert name.startswith("classifier."), name  # only the new head is not in the pre-trained model
    assert torch.equal(target.classifier.weight, head_before)
    assert not any(k.startswith(("mlm.", "nsp.")) for k in loaded)  # the pre-training heads stay behind


def test_transfer_refuses_a_shape_mismatch_by_name_and_another_kind_of_model():
    with pytest.raises(ValueError, match=r"embed.tokens.weight: \(50, 128\) in src, \(60, 128\) here"):
        finetune.transfer(bert("pretraining"), bert("classification", vocab_size=60), "src")
    gpt = aiayn.build(aiayn.preset("gpt-tiny", vocab_size=50))
    with pytest.raises(ValueError, match="src holds a GPT; this task trains a BERT"):
        finetune.transfer(gpt, bert("classification"), "src")
    with pytest.raises(ValueError, match="has no weight named as this model's"):
        finetune.transfer({"head.weight": torch.zeros(1)}, bert("classification"))


def test_freeze_stops_the_embeddings_and_the_lowest_blocks():
    model = bert("classification")
    frozen = finetune.freeze(model, 1)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert frozen and all(n.startswith(("embed.", "encoder.layers.0.")) for n in frozen)
    assert any(n.startswith("encoder.layers.1.") for n in trainable) and "classifier.weight" in trainable
    every = bert("classification")
    finetune.freeze(every, -1)
    assert {n for n, p in every.named_parameters() if p.requires_grad} == {
        "pooler.weight", "pooler.bias", "classifier.weight", "classifier.bias"}


def test_body_rate_slows_the_loaded_weights_and_drops_the_frozen_ones():
    source, model = bert("pretraining"), bert("classification")
    loaded = finetune.transfer(source, model)
    finetune.freeze(model, 1)
    optimizer = torch.optim.AdamW([{"params": list(model.parameters()), "weight_decay": 0.0}], lr=1e-3)
    slowed = finetune.body_rate(optimizer, model, loaded, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    rates = {names[id(p)]: g["lr"] for g in slowed.param_groups for p in g["params"]}
    assert rates["classifier.weight"] == 1e-3 and rates["encoder.layers.1.ff.fc1.weight"] == pytest.approx(1e-4)
    assert not any(n.startswith(("embed.", "encoder.layers.0.")) for n in rates)
    assert all(g["weight_decay"] == 0.0 for g in slowed.param_groups)  # each group keeps its options
    frozen = model.embed.tokens.weight.clone()
    model(torch.randint(5, 50, (2, 8))).sum().backward()
    slowed.step()
    assert torch.equal(model.embed.tokens.weight, frozen)


def test_source_reads_a_run_folder_and_a_hugging_face_folder(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = bert("pretraining")
    aiayn.save(model, tmp_path / "run")
    assert dataclasses.asdict(finetune.source(tmp_path / "run").cfg) == dataclasses.asdict(model.cfg)
    assert finetune.folder_of(tmp_path / "run" / "model.safetensors") == tmp_path / "run"
    hf = transformers.BertModel(transformers.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=1,
                                                        num_attention_heads=2, intermediate_size=64))
    hf.save_pretrained(tmp_path / "hf")
    assert finetune.source(tmp_path / "hf").cfg.vocab_size == 40
