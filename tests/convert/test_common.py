"""What every conversion shares (aiayn.convert.common), fed bad input: shard indexes that name files elsewhere,
configs that lack a key or claim sizes the weights do not have, config files that are not JSON objects."""

import json
import shutil

import pytest
import torch

import aiayn
from aiayn.convert.folder import convert
from aiayn.models.bert import hf as bert
from aiayn.models.detr import hf as detr
from aiayn.models.gpt import gpt2, llama
from aiayn.models.swin import hf as swin
from aiayn.models.transformer import hf as seq2seq
from aiayn.models.vit import hf as vit

transformers = pytest.importorskip("transformers")


def tiny_gpt2(folder, **overrides):
    cfg = {"vocab_size": 61, "n_positions": 16, "n_embd": 16, "n_layer": 2, "n_head": 2, "bos_token_id": 60,
           "eos_token_id": 60, **overrides}
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg)).eval()
    model.save_pretrained(folder, max_shard_size="10KB")  # shards and an index
    return model


@pytest.fixture
def sharded(tmp_path):
    folder = tmp_path / "hf"
    tiny_gpt2(folder)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    return folder, index


def rewrite_index(folder, index, shard, to):
    """The index with every weight of ``shard`` mapped to the file name ``to``."""
    weight_map = {k: to if v == shard else v for k, v in index["weight_map"].items()}
    (folder / "model.safetensors.index.json").write_text(json.dumps({**index, "weight_map": weight_map}))


def test_a_shard_outside_the_folder_is_refused(sharded, tmp_path):
    folder, index = sharded
    shard = sorted(set(index["weight_map"].values()))[0]
    shutil.copyfile(folder / shard, tmp_path / "elsewhere.safetensors")  # readable, were it not outside
    for name in ("../elsewhere.safetensors", str(tmp_path / "elsewhere.safetensors"),
                 "sub/../../elsewhere.safetensors"):
        rewrite_index(folder, index, shard, name)
        with pytest.raises(ValueError, match=rf"hf/model\.safetensors\.index\.json names the shard '{name}', which is "
                                             rf"not a file name inside"):
            aiayn.from_hf(folder)
    (folder / "link.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")
    rewrite_index(folder, index, shard, "link.safetensors")
    with pytest.raises(ValueError, match=r"names the shard 'link\.safetensors', a link to .*elsewhere\.safetensors, "
                                         r"outside"):
        aiayn.from_hf(folder)


def test_links_inside_the_folder_and_the_hugging_face_cache_s_own_links_are_followed(sharded, tmp_path):
    folder, index = sharded
    shard = sorted(set(index["weight_map"].values()))[0]
    (folder / "sub").mkdir()
    shutil.move(folder / shard, folder / "sub" / shard)
    (folder / shard).symlink_to(folder / "sub" / shard)
    aiayn.from_hf(folder)
    # the hub's cache: snapshots/REVISION/FILE -> ../../blobs/HASH
    repo = tmp_path / "models--someone--tiny"
    snapshot, blobs = repo / "snapshots" / "abc", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for file in folder.iterdir():
        if file.is_file():
            shutil.copyfile(file, blobs / f"hash-{file.name}")
            (snapshot / file.name).symlink_to(f"../../blobs/hash-{file.name}")
    aiayn.from_hf(snapshot)


@pytest.mark.parametrize(("index", "said"), [
    ("{not json", r"is not JSON"),
    ("[]", r"holds a JSON list, not a shard index"),
    ('{"metadata": {}}', r'has no "weight_map" of weight names to shard file names'),
    ('{"weight_map": ["model-1.safetensors"]}', r'has no "weight_map"'),
    ('{"weight_map": {"wte.weight": 3}}', r'has no "weight_map"'),
], ids=["not-json", "a-list", "no-weight-map", "a-list-map", "not-strings"])
def test_an_index_that_is_not_a_weight_map_is_refused_by_name(sharded, index, said):
    folder, _ = sharded
    (folder / "model.safetensors.index.json").write_text(index)
    with pytest.raises(ValueError, match=rf"hf/model\.safetensors\.index\.json {said}"):
        aiayn.from_hf(folder)


def test_a_config_without_a_key_the_converter_needs_is_refused_by_name(tmp_path):
    tiny_gpt2(tmp_path / "gpt2")
    config = json.loads((tmp_path / "gpt2" / "config.json").read_text())
    del config["n_embd"]
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"gpt2/config\.json has no 'n_embd', which a gpt2 model needs"):
        aiayn.from_hf(tmp_path / "gpt2")
    with pytest.raises(ValueError, match=r"gpt2/config\.json has no 'n_embd'"):  # as `aiayn convert` says it
        convert(tmp_path / "gpt2", tmp_path / "out")
    cfg = transformers.BertConfig(vocab_size=61, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=16)
    transformers.BertModel(cfg).save_pretrained(tmp_path / "bert")
    config = json.loads((tmp_path / "bert" / "config.json").read_text())
    del config["hidden_size"]
    (tmp_path / "bert" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"bert/config\.json has no 'hidden_size', which a bert model needs"):
        aiayn.from_hf(tmp_path / "bert")


def test_a_nested_config_without_a_key_names_where(tmp_path):
    backbone = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 8], depths=[1, 1], layer_type="basic",
                                         out_features=["stage2"])
    cfg = transformers.DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone,
                                  d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                                  decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=3,
                                  num_labels=2)
    transformers.DetrForObjectDetection(cfg).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["backbone_config"]["depths"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config\.json has no 'depths' in backbone_config, which a detr model needs"):
        aiayn.from_hf(tmp_path)


@pytest.mark.parametrize(("content", "said"), [
    (b"{not json", "is not JSON"), (b"\xff\xfe", "is not UTF-8 text"), (b"[1]", "holds a JSON list"),
], ids=["not-json", "not-utf8", "a-list"])
def test_a_config_json_that_is_not_an_object_is_refused_by_name(tmp_path, content, said):
    tiny_gpt2(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_bytes(content)
    for read in (aiayn.from_hf, lambda folder: convert(folder, tmp_path / "out")):
        with pytest.raises(ValueError, match=rf"hf/config\.json {said}"):
            read(tmp_path / "hf")


# A tiny model of every family the converters handle, and a size of its config to claim wrongly. Dimensions
# become 1_000_000 (divisible by the heads), vocabularies 10_000_000: real models of either size would take
# gigabytes to terabytes.
FAMILIES = {
    "gpt2": (lambda t: t.GPT2LMHeadModel(t.GPT2Config(vocab_size=61, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                                      bos_token_id=60, eos_token_id=60)), "vocab_size"),
    "llama": (lambda t: t.LlamaForCausalLM(t.LlamaConfig(vocab_size=61, hidden_size=16, intermediate_size=32,
                                                         num_hidden_layers=1, num_attention_heads=2,
                                                         max_position_embeddings=16, eos_token_id=60)),
              "vocab_size"),
    "mistral": (lambda t: t.MistralForCausalLM(t.MistralConfig(vocab_size=61, hidden_size=16, intermediate_size=32,
                                                               num_hidden_layers=1, num_attention_heads=2,
                                                               max_position_embeddings=16, sliding_window=8,
                                                               num_key_value_heads=1, eos_token_id=60)),
                "intermediate_size"),
    "bert": (lambda t: t.BertForMaskedLM(t.BertConfig(vocab_size=61, hidden_size=16, num_hidden_layers=1,
                                                      num_attention_heads=2, intermediate_size=32,
                                                      max_position_embeddings=16)), "hidden_size"),
    "marian": (lambda t: t.MarianMTModel(t.MarianConfig(vocab_size=61, d_model=16, encoder_layers=1, decoder_layers=1,
                                                        encoder_attention_heads=2, decoder_attention_heads=2,
                                                        encoder_ffn_dim=32, decoder_ffn_dim=32,
                                                        max_position_embeddings=16, pad_token_id=60,
                                                        decoder_start_token_id=60, eos_token_id=0)), "d_model"),
    "bart": (lambda t: t.BartForConditionalGeneration(t.BartConfig(vocab_size=61, d_model=16, encoder_layers=1,
                                                                   decoder_layers=1, encoder_attention_heads=2,
                                                                   decoder_attention_heads=2, encoder_ffn_dim=32,
                                                                   decoder_ffn_dim=32, max_position_embeddings=16)),
             "d_model"),
    "vit": (lambda t: t.ViTForImageClassification(t.ViTConfig(image_size=16, patch_size=4, hidden_size=16,
                                                              num_hidden_layers=1, num_attention_heads=2,
                                                              intermediate_size=32, num_labels=3)), "hidden_size"),
    "swin": (lambda t: t.SwinForImageClassification(t.SwinConfig(image_size=16, patch_size=2, embed_dim=8,
                                                                 depths=[1, 1], num_heads=[1, 2], window_size=2,
                                                                 num_labels=3)), "embed_dim"),
    "detr": (lambda t: t.DetrForObjectDetection(t.DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=3,
        num_labels=2, backbone_config=t.ResNetConfig(embedding_size=8, hidden_sizes=[8, 8], depths=[1, 1],
                                                     layer_type="basic", out_features=["stage2"]))), "d_model"),
}
MODELS = {gpt2: "GPT", llama: "GPT", bert: "BERT", seq2seq: "Transformer", vit: "ViT", swin: "Swin", detr: "DETR"}


@pytest.fixture
def built_on(monkeypatch):
    """The devices the converters build their models on: every model class they use, spied on."""
    devices = []
    for module, name in MODELS.items():
        real = getattr(module, name)

        def spy(cfg, real=real):
            devices.append(torch.get_default_device().type)
            return real(cfg)

        monkeypatch.setattr(module, name, spy)
    return devices


def test_a_config_claiming_a_vocabulary_the_weights_lack_is_refused_before_building_the_model(tmp_path, built_on):
    tiny_gpt2(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "vocab_size": 10_000_000}))
    with pytest.raises(ValueError) as refused:
        aiayn.from_hf(tmp_path)
    message = str(refused.value)
    assert "embed.tokens.weight: (61, 16), wanted (10000000, 16)" in message
    assert (f"their transformer.wte.weight is (61, 16) where {tmp_path}/config.json wants (10000000, 16), from its "
            f"vocab_size=10000000") in message
    assert built_on == ["meta"]  # the model was only ever built on the meta device, which allocates nothing


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_checks_the_config_s_sizes_against_the_weights_before_building(tmp_path, built_on, family):
    make, field = FAMILIES[family]
    torch.manual_seed(0)
    make(transformers).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    aiayn.from_hf(tmp_path)  # as it is, it converts
    built_on.clear()
    size = 10_000_000 if field == "vocab_size" else 1_000_000
    (tmp_path / "config.json").write_text(json.dumps({**config, field: size}))
    with pytest.raises(ValueError, match=rf"config\.json wants \(.*\), from its {field}={size}"):
        aiayn.from_hf(tmp_path)
    assert set(built_on) <= {"meta"}


def test_a_hugging_face_model_with_nan_weights_is_refused_by_name(tmp_path):
    # a blank attention page and a failure deep inside generate, otherwise
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=61, n_positions=16, n_embd=16, n_layer=1,
                                                                  n_head=2, bos_token_id=60, eos_token_id=60)).eval()
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight[0, 0] = float("nan")
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"NaN or infinite weights in .*fc.*nothing was loaded"):
        aiayn.from_hf(tmp_path)
