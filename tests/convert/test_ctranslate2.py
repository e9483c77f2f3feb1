"""`aiayn export RUN --to ctranslate2 OUT` (aiayn.convert.ctranslate2): CTranslate2's own converter, on the Hugging
Face folder `--to hf` writes, makes a model whose greedy tokens are ours, for every family it runs (GPT-2, Llama,
Mistral, Marian, BART; ids named by the run's tokenizer or by their numbers); the folder holds the tokenizer files;
what CTranslate2 cannot run is refused before anything is written, and a failed export leaves nothing behind."""

import dataclasses
import json
import sys

import pytest
import torch

import aiayn
from aiayn.convert.ctranslate2 import QUANTIZATIONS, vocabularies
from aiayn.convert.folder import export
from aiayn.decoding.greedy import greedy
from aiayn.models.bert import BERT, BertConfig
from aiayn.models.gpt import GPT
from aiayn.models.gpt.model import PRESETS as GPT_PRESETS
from aiayn.models.transformer import Transformer
from aiayn.models.transformer.bart import PRESETS as BART_PRESETS
from aiayn.models.transformer.model import PRESETS as TRANSFORMER_PRESETS

transformers = pytest.importorskip("transformers")
ctranslate2 = pytest.importorskip("ctranslate2")  # pip install "aiayn[ctranslate2]" (the test extra has it)
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see conftest.py

V = 40  # <pad> 0, <s> 1, </s> 2, <unk> 3, then words
SMALL = {"d_model": 32, "d_ff": 64, "max_len": 64}
GPTS = {  # the presets, smaller
    "gpt-tiny (GPT-2)": dataclasses.replace(GPT_PRESETS["gpt-tiny"], vocab_size=V, n_layers=2, **SMALL),
    "llama-tiny (Llama)": dataclasses.replace(GPT_PRESETS["llama-tiny"], vocab_size=V, n_layers=2, **SMALL),
}
MARIAN = dataclasses.replace(TRANSFORMER_PRESETS["transformer-tiny"], src_vocab_size=V, tgt_vocab_size=V,
                             positional="sinusoidal-concat", dropout=0.0, **SMALL)
SEQ2SEQ = {
    "the paper's Transformer (Marian)": MARIAN,
    "bart-tiny (BART)": dataclasses.replace(BART_PRESETS["bart-tiny"], src_vocab_size=V, tgt_vocab_size=V, dropout=0.0,
                                            **SMALL),
    # OPUS-MT's layout: </s> 0, <pad> the last id, decoding started from <pad> (CTranslate2's own Marian loader
    # would drop that id from the vocabulary and start from a zero vector)
    "Marian laid out as OPUS-MT": dataclasses.replace(MARIAN, pad_id=V - 1, bos_id=V - 1, eos_id=0, activation="silu"),
    "Marian with separate vocabularies": dataclasses.replace(MARIAN, tgt_vocab_size=30, share_embeddings=False),
    # the paper's interleaved sinusoids, exported as Marian with the model dimension reordered
    "the paper's Transformer, interleaved sinusoids": dataclasses.replace(MARIAN, positional="sinusoidal"),
}
NEW = 12  # tokens generated


def randomized(model):
    """``model`` with random matrices and biases larger than at the start (a bias left out shows), so that
    random-weight decoding goes somewhere instead of repeating one token."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3, generator=gen)
            elif name.endswith("bias"):
                p.normal_(0, 0.2, generator=gen)
    return model.eval()


def word_tokenizer(path, size=V):
    """A word-level ``tokenizer.json`` (Hugging Face's ``tokenizers``): ``<pad> <s> </s> <unk> w4 ... w{size-1}``."""
    from tokenizers import Tokenizer, models

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{f"w{i}": i for i in range(4, size)}}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(path))


def run_of(model, folder, tokenizer=True):
    """A run folder of ``model``, with a word tokenizer (a translation run's two, one joint vocabulary)."""
    aiayn.save(model, folder)
    if tokenizer:
        for name in ["tokenizer.json"] if isinstance(model, GPT) else ["src_tokenizer.json", "tgt_tokenizer.json"]:
            word_tokenizer(folder / name)
    return folder


def until_end(rows, eos):
    """Each row of ids up to (without) its first ``eos``, as CTranslate2 gives them."""
    return [row[:row.index(eos)] if eos in row else row for row in rows]


def ours_generate(model, prompts):
    return until_end(model.generate(prompts, max_new_tokens=NEW, do_sample=False)[:, prompts.size(1):].tolist(),
                     model.cfg.eos_id)


def ct2_generate(out, tokens, **options):
    generator = ctranslate2.Generator(str(out), intra_threads=1)
    results = generator.generate_batch(tokens, max_length=NEW, include_prompt_in_result=False, beam_size=1, **options)
    return [r.sequences_ids[0] for r in results]


def words(cfg, size, gen):
    """``size`` random ids that are not special: none of the config's, nor the word tokenizer's ``<unk>``, and in
    both vocabularies."""
    low = 4 if cfg.pad_id == 0 else 1  # OPUS-MT's layout: </s> 0, <pad> the last id
    return torch.randint(low, min(cfg.src_vocab_size, cfg.tgt_vocab_size) - 1, size, generator=gen)


def reverser(cfg, steps=120):
    """A Transformer of ``cfg`` taught for a second or two to reverse its input, so that greedy decoding is not
    degenerate: outputs depend on the source and end at different lengths. Then its output bias favours <pad>,
    where it has one: ours keep <pad> out, so CTranslate2 must too."""
    torch.manual_seed(0)
    model = Transformer(cfg)
    gen = torch.Generator().manual_seed(1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        src = words(cfg, (16, int(torch.randint(3, 7, (1,), generator=gen))), gen)
        tgt = torch.cat([src.flip(1), torch.full((16, 1), cfg.eos_id)], dim=1)  # (16, n + 1)
        logits = model(src, torch.cat([torch.full((16, 1), cfg.bos_id), tgt[:, :-1]], dim=1))  # (16, n + 1, V)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    if cfg.output_bias:
        with torch.no_grad():
            model.generator.bias[cfg.pad_id] += 10.0
    return model.eval()


@pytest.fixture(scope="module")
def reversers():
    """``reversers(name)``: :func:`reverser` of ``SEQ2SEQ[name]``, trained once per module."""
    trained = {}

    def get(name):
        if name not in trained:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # a module fixture runs outside the one_thread fixture; see conftest.py
            try:
                trained[name] = reverser(SEQ2SEQ[name])
            finally:
                torch.set_num_threads(threads)
        return trained[name]

    return get


def sources(cfg, lengths=(6, 3, 5)):
    """Source rows of several lengths, and the batch padded with ``cfg.pad_id`` for ours."""
    gen = torch.Generator().manual_seed(5)
    rows = [words(cfg, (n,), gen).tolist() for n in lengths]
    padded = torch.full((len(rows), max(lengths)), cfg.pad_id)
    for i, row in enumerate(rows):
        padded[i, :len(row)] = torch.tensor(row)
    return rows, padded


def translate(out, rows, names):
    """CTranslate2's greedy translations of ``rows`` (ids), named by ``names``, back as ids."""
    translator = ctranslate2.Translator(str(out), intra_threads=1)
    index = {name: i for i, name in enumerate(names)}
    # min_decoding_length=0: ours may end at once; CTranslate2 makes one token at least unless told
    results = translator.translate_batch([[names[i] for i in row] for row in rows], beam_size=1, min_decoding_length=0,
                                         max_decoding_length=NEW)
    return [[index[t] for t in r.hypotheses[0]] for r in results]


def leftovers(folder):
    """Temporary or set-aside folders an export left beside ``folder``."""
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


@pytest.mark.parametrize("name", list(GPTS))
def test_a_gpt_s_greedy_tokens_in_ctranslate2_are_ours(tmp_path, name):
    model = randomized(GPT(GPTS[name]))
    out = export(run_of(model, tmp_path / "run"), tmp_path / "ct2", "ctranslate2")
    # the folder is whole: CTranslate2's model and the tokenizer transformers reads, which names its tokens
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.bin", "tokenizer.json",
                                                     "tokenizer_config.json", "vocabulary.json"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    prompts = torch.randint(4, V, (3, 5), generator=torch.Generator().manual_seed(4))
    theirs = ct2_generate(out, [tokenizer.convert_ids_to_tokens(row) for row in prompts.tolist()])
    ours = ours_generate(model, prompts)
    assert theirs == ours
    assert len({t for row in ours for t in row}) > 3  # not one token over and over: the comparison means something
    assert json.loads((out / "config.json").read_text())["eos_token"] == "</s>"


def test_a_mistral_s_window_holds_past_the_prompt(tmp_path):
    # CTranslate2 attends over the whole prompt at its first step and applies the window to the steps after:
    # prompts within the window, generation well past it. No end token (eos_id=None) and no tokenizer: ids are
    # named by their numbers, and end_token=[] runs CTranslate2 to the length, as ours runs.
    cfg = dataclasses.replace(GPTS["llama-tiny (Llama)"], attention_window=6, eos_id=None)
    model = randomized(GPT(cfg))
    out = export(run_of(model, tmp_path / "run", tokenizer=False), tmp_path / "ct2", "ctranslate2")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.bin", "vocabulary.json"]
    prompts = torch.randint(0, V, (3, 6), generator=torch.Generator().manual_seed(4))
    theirs = ct2_generate(out, [[str(i) for i in row] for row in prompts.tolist()], end_token=[])
    ours = model.generate(prompts, max_new_tokens=NEW, do_sample=False)[:, 6:].tolist()
    assert theirs == ours and all(len(row) == NEW for row in ours)


@pytest.mark.parametrize("name", [*list(SEQ2SEQ)[:2], "the paper's Transformer, interleaved sinusoids"])
def test_an_encoder_decoder_s_greedy_translations_in_ctranslate2_are_ours(tmp_path, reversers, name):
    model = reversers(name)
    out = export(run_of(model, tmp_path / "run"), tmp_path / "ct2", "ctranslate2")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.bin", "shared_vocabulary.json",
                                                     "tokenizer.json", "tokenizer_config.json"]
    rows, padded = sources(model.cfg)
    names = json.loads((out / "shared_vocabulary.json").read_text())
    assert names[:5] == ["<pad>", "<s>", "</s>", "<unk>", "w4"]  # the run's tokenizer names the ids
    ours = until_end(greedy(model, padded, max_len=NEW).tolist(), model.cfg.eos_id)
    assert translate(out, rows, names) == ours
    assert len({len(row) for row in ours}) > 1 and len({t for row in ours for t in row}) > 3  # not degenerate


def test_a_marian_laid_out_as_opus_mt_is_ours_too(tmp_path, reversers):
    # no tokenizer: the ids are named by their numbers
    model = reversers("Marian laid out as OPUS-MT")
    out = export(run_of(model, tmp_path / "run", tokenizer=False), tmp_path / "ct2", "ctranslate2")
    names = json.loads((out / "shared_vocabulary.json").read_text())
    assert names == [str(i) for i in range(V)]
    rows, padded = sources(model.cfg)
    assert translate(out, rows, names) == until_end(greedy(model, padded, max_len=NEW).tolist(), model.cfg.eos_id)


def test_separate_source_and_target_vocabularies_are_named_by_number(tmp_path, reversers):
    model = reversers("Marian with separate vocabularies")
    run = run_of(model, tmp_path / "run")  # word tokenizers of 40 ids; the target's is cut to its 30
    word_tokenizer(run / "tgt_tokenizer.json", size=30)
    out = export(run, tmp_path / "ct2", "ctranslate2")
    source = json.loads((out / "source_vocabulary.json").read_text())
    target = json.loads((out / "target_vocabulary.json").read_text())
    assert (source, target) == ([str(i) for i in range(40)], [str(i) for i in range(30)])
    assert (out / "src_tokenizer.json").is_file() and (out / "tgt_tokenizer.json").is_file()  # copied as they are
    rows, padded = sources(model.cfg)
    ours = until_end(greedy(model, padded, max_len=NEW).tolist(), model.cfg.eos_id)
    translator = ctranslate2.Translator(str(out), intra_threads=1)
    results = translator.translate_batch([[str(i) for i in row] for row in rows], beam_size=1, min_decoding_length=0,
                                         max_decoding_length=NEW)
    assert [[int(t) for t in r.hypotheses[0]] for r in results] == ours


def test_in_int8_the_weights_shrink_and_the_model_generates(tmp_path):
    model = randomized(GPT(GPTS["llama-tiny (Llama)"]))
    run = run_of(model, tmp_path / "run")
    full = export(run, tmp_path / "float32", "ctranslate2")
    from aiayn.cli import main  # the command: `aiayn export RUN --to ctranslate2 OUT --quantization int8`

    assert main(["export", str(run), "--to", "ctranslate2", str(tmp_path / "int8"), "--quantization", "int8"]) == 0
    small = tmp_path / "int8"
    assert (small / "model.bin").stat().st_size < 0.6 * (full / "model.bin").stat().st_size
    generator = ctranslate2.Generator(str(small), compute_type="int8", intra_threads=1)
    result = generator.generate_batch([["w5", "w6", "w7"]], max_length=NEW, include_prompt_in_result=False,
                                      end_token=[])
    assert len(result[0].sequences_ids[0]) == NEW  # int8 rounding may change tokens, not whether it runs


def test_the_vocabulary_of_a_folder_takes_its_specials_from_the_config_not_the_tokenizer(tmp_path):
    model = GPT(dataclasses.replace(GPTS["gpt-tiny (GPT-2)"], eos_id=7))
    hf = export(run_of(model, tmp_path / "run"), tmp_path / "hf", "hf")
    vocab, source = vocabularies(hf)
    assert source is None and vocab.eos_token == "w7" and vocab.unk_token == "<unk>"
    assert vocab.names[:4] == ["<pad>", "<s>", "</s>", "<unk>"]


def bert(_):
    return BERT(BertConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=1, d_ff=32, cls_id=1,
                           sep_id=2, mask_id=3))


@pytest.mark.parametrize(("make", "to", "quantization", "message"), [
    (bert, "ctranslate2", None, r"BERT \(family 'bert', task 'embed'\) cannot be exported to it"),
    (lambda t: GPT(dataclasses.replace(GPTS["gpt-tiny (GPT-2)"], head="classification")), "ctranslate2", None,
     r"GPT has head='classification', not 'lm'"),
    (lambda t: GPT(GPTS["gpt-tiny (GPT-2)"]), "ctranslate2", "int3", r"quantization='int3': expected one of int8"),
    (lambda t: GPT(GPTS["gpt-tiny (GPT-2)"]), "hf", "int8", r"quantization='int8' is for to='ctranslate2'"),
], ids=["bert", "classifier", "quantization", "quantization-for-hf"])
def test_what_ctranslate2_cannot_run_is_refused_before_anything_is_written(tmp_path, make, to, quantization, message):
    run = run_of(make(tmp_path), tmp_path / "run", tokenizer=False)
    with pytest.raises(ValueError, match=message):
        export(run, tmp_path / "out", to, quantization=quantization)
    assert not (tmp_path / "out").exists() and leftovers(tmp_path / "out") == []


def test_a_failed_export_leaves_nothing_behind(tmp_path, monkeypatch):
    # refused by the Hugging Face export (a pre-norm Transformer), inside the new folder
    model = Transformer(dataclasses.replace(MARIAN, norm_first=True))
    with pytest.raises(ValueError, match="norm_first=True"):
        export(run_of(model, tmp_path / "paper"), tmp_path / "out", "ctranslate2")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path / "out") == []
    # failing in CTranslate2's converter, the Hugging Face folder written: both temporary folders go
    import aiayn.convert.ctranslate2 as ct2

    def fail(hf):
        assert (hf / "model.safetensors").is_file()
        raise RuntimeError("the converter failed")

    monkeypatch.setattr(ct2, "vocabularies", fail)
    with pytest.raises(RuntimeError, match="the converter failed"):
        export(run_of(GPT(GPTS["gpt-tiny (GPT-2)"]), tmp_path / "lm"), tmp_path / "out", "ctranslate2")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path / "out") == []


def test_a_folder_that_holds_files_is_kept_unless_forced(tmp_path):
    run = run_of(GPT(GPTS["gpt-tiny (GPT-2)"]), tmp_path / "run")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"already holds notes\.txt"):
        export(run, out, "ctranslate2")
    assert (out / "notes.txt").read_text() == "mine"
    export(run, out, "ctranslate2", force=True)
    assert not (out / "notes.txt").exists() and (out / "model.bin").is_file() and leftovers(out) == []


def test_without_ctranslate2_the_error_names_the_extra(tmp_path, monkeypatch):
    run = run_of(GPT(GPTS["gpt-tiny (GPT-2)"]), tmp_path / "run")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "aiayn\[ctranslate2\]"'):
        export(run, tmp_path / "out", "ctranslate2")
    assert not (tmp_path / "out").exists()


def test_the_quantizations_offered_are_ctranslate2_s():
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    assert set(QUANTIZATIONS) == set(ACCEPTED_MODEL_TYPES)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RTLD_DEEPBIND and LD_DEBUG are glibc's")
def test_ctranslate2_calls_its_own_openmp_runtime_not_torchs():
    """Imported after torch, CTranslate2's library binds its OpenMP calls to the runtime it ships (torch's sits in
    the global scope and would otherwise win; its teams then slow torch's, benchmarks/ct2_interference.py)."""
    import os
    import subprocess
    from pathlib import Path

    shipped = Path(ctranslate2.__file__).parent.parent / "ctranslate2.libs"
    if not any(shipped.glob("libgomp*")):
        pytest.skip("this CTranslate2 build does not ship its own libgomp")
    code = "import torch; from aiayn.convert.ctranslate2 import require; require()"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LD_DEBUG": "bindings"},
                          capture_output=True, text=True, timeout=120, check=True)
    bound = [line for line in done.stderr.splitlines() if "libctranslate2" in line and "`GOMP_parallel'" in line]
    assert bound and all("ctranslate2.libs/libgomp" in line for line in bound), bound
