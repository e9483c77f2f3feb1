"""One :class:`aiayn.GenerationConfig`: ``transformers``' names and defaults, checked once, the decoding method it asks
for, and ``generate(..., generation_config=cfg, **overrides)`` as ``transformers`` takes it."""

import dataclasses

import pytest
import torch

import aiayn
from aiayn.decoding.config import GenerationConfig

transformers = pytest.importorskip("transformers")


def test_every_field_is_transformers_own_with_its_default():
    theirs = transformers.GenerationConfig()
    defaults = transformers.GenerationConfig._get_default_generation_params()  # what an unset field means there
    for field in dataclasses.fields(GenerationConfig):
        assert hasattr(theirs, field.name), field.name
        if field.name != "max_length":  # theirs is 20 counting the prompt; ours None: 20 new tokens (its doc)
            want = defaults.get(field.name, getattr(theirs, field.name))
            assert want == getattr(GenerationConfig(), field.name), field.name


def test_the_mode_is_transformers_generation_mode():
    from transformers.generation.configuration_utils import GenerationMode

    for kw in ({}, {"do_sample": True}, {"num_beams": 3}):
        assert GenerationConfig(**kw).mode() == transformers.GenerationConfig(**kw).get_generation_mode().value
    assert GenerationConfig().mode(assistant=True) == GenerationMode.ASSISTED_GENERATION.value


@pytest.mark.parametrize("bad, words", [({"num_beams": 0}, "num_beams"), ({"top_p": 0.0}, "top_p"),
                                        ({"do_sample": True, "num_beams": 2}, "beam sampling"),
                                        ({"num_return_sequences": 3}, "num_return_sequences"),
                                        ({"early_stopping": "sometimes"}, "early_stopping"),
                                        ({"max_length": 0}, "max_length"), ({"num_assistant_tokens": 0}, "num_assist")])
def test_bad_settings_are_refused_by_name_when_made(bad, words):
    with pytest.raises(ValueError, match=words):
        GenerationConfig(**bad)
    with pytest.raises(ValueError, match=words):
        GenerationConfig().update(**bad)


def test_generate_reads_the_config_and_its_overrides():
    torch.manual_seed(0)
    model = aiayn.build(aiayn.preset("gpt-tiny", vocab_size=64, max_len=64, eos_id=None)).eval()
    ids = torch.tensor([[5, 9, 12, 7]])
    cfg = aiayn.GenerationConfig(max_new_tokens=6, num_beams=3, num_return_sequences=2)
    by_config = model.generate(ids, generation_config=cfg)
    assert torch.equal(by_config, model.generate(ids, max_new_tokens=6, num_beams=3, num_return_sequences=2))
    overridden = model.generate(ids, generation_config=cfg, num_beams=1, num_return_sequences=1)
    assert torch.equal(overridden, model.generate(ids, max_new_tokens=6))
    assert cfg.num_beams == 3  # frozen: an override makes a copy
    with pytest.raises(TypeError, match="does not support min_p"):
        model.generate(ids, generation_config=cfg, min_p=0.1)
