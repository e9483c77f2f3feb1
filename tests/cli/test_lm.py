import math
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
import torch

import aiayn
import aiayn.recipes.lm
from aiayn import recipes
from aiayn.data import BPETokenizer, date_lines, load_tokenizer
from aiayn.pipelines.lm import generate, load_lm_run
from shared import DATA


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "aiayn", *args], capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """The default LM job, shortened for CI: made-up date lines, characters, a tiny GPT."""
    return recipes.train("lm", steps=500, eval_every=250, out=str(tmp_path_factory.mktemp("lm")), progress=False,
                         verbose=False)


@pytest.mark.slow
def test_the_default_lm_job_learns(lm_run):
    run = lm_run["run"]
    # Baselines from the data (the lm recipe's lines for seed 0): knowing only how often each character occurs, the
    # unigram entropy of the held-out text, costs 3.2 nats a character (a uniform guess, log 65, costs 4.2);
    # the best constant answer, the commonest character at each place of the training ISO dates, puts 51%
    # of the held-out date characters in place and gets no date exactly right. Seeds 0, 1, 2 reach 1.1-1.2
    # nats after 250 updates and put 75%, 72%, 71% of the characters in place after 500. Exact match (0.7-1.7%
    # on the three seeds) is too close to the constant's 0% to hold on every machine, so it is not asserted.
    tok = load_tokenizer(run / "tokenizer.json")
    counts = Counter(tok.encode("\n".join(date_lines(300, seed=1)) + "\n"))  # the held-out text
    freq = torch.tensor(list(counts.values()), dtype=torch.float64) / sum(counts.values())
    unigram_entropy = -(freq * freq.log()).sum().item()
    losses = [v["val_loss"] for v in lm_run["validation"]]
    assert losses[1] < losses[0] <= unigram_entropy - 1.0

    train_dates = [" " + line.split(" = ")[1] for line in date_lines(30_000, seed=0)]
    constant = "".join(Counter(place).most_common(1)[0][0] for place in zip(*train_dates))
    refs = [s["reference"] for s in lm_run["samples"]]

    def in_place(outputs: list[str]) -> float:
        return sum(a == b for out, ref in zip(outputs, refs) for a, b in zip(out, ref)) / sum(map(len, refs))

    assert in_place([s["output"] for s in lm_run["samples"]]) >= in_place([constant] * len(refs)) + 0.1
    assert {"model.safetensors", "best.safetensors", "tokenizer.json", "run.json", "history.csv", "args.json",
            "train_state.safetensors"} <= {p.name for p in run.iterdir()}


@pytest.fixture(scope="module")
def short_lm_run(tmp_path_factory):
    """A shorter run of the default LM job: long enough to write date lines, for what generation does with them."""
    return recipes.train("lm", steps=150, eval_every=150, out=str(tmp_path_factory.mktemp("lm-short")),
                         progress=False, verbose=False)


def test_generate_streams_and_stops_at_a_stop_string(short_lm_run):
    run = short_lm_run["run"]
    pieces = list(generate(run, "21.03.1948 =", max_new_tokens=30, do_sample=False, stop=["\n"]))
    assert len(pieces) > 3 and "\n" not in "".join(pieces)
    same = "".join(generate(run, "21.03.1948 =", max_new_tokens=30, do_sample=False, stop=["\n"]))
    assert same == "".join(pieces)
    seeded = [run_cli("generate", "--run", str(run), "--prompt", "1 May", "--max-new-tokens", "40",
                      "--seed", "3").stdout for _ in range(2)]
    assert seeded[0] == seeded[1] and seeded[0].strip()


def test_compile_gives_the_same_text_from_the_command_and_the_pipeline(short_lm_run, capsys):
    from aiayn.cli import main

    run = str(short_lm_run["run"])
    args = ["generate", "--run", run, "--prompt", "21.03.1948 =", "--max-new-tokens", "12", "--temperature", "0"]
    assert main(args) == 0
    eager = capsys.readouterr().out
    assert main([*args, "--compile"]) == 0
    assert capsys.readouterr().out == eager and eager.strip()
    p = aiayn.pipeline(run, compile=True)
    assert p.compile and p.generate(["21.03.1948 =", "1 May"], max_new_tokens=12, do_sample=False) == \
        aiayn.pipeline(run).generate(["21.03.1948 =", "1 May"], max_new_tokens=12, do_sample=False)


@pytest.mark.parametrize(("stop", "shown"), [(["-02"], " 190"), (["02-02"], " 190-"), (["0-0", "90"], " 1"),
                                           (["-03"], " 190-02-02"), (["x"], " 190-02-02")])
def test_a_stop_string_of_several_characters_is_never_shown_in_part(stop, shown, monkeypatch):
    # the model writes " 190-02-02" a character at a time; a piece that may begin a stop string waits until the
    # next ones tell: cut if it is one, shown if not (and at the end)
    from types import SimpleNamespace

    from aiayn.pipelines import lm

    chars = " 190-02-02"
    tok = SimpleNamespace(eos_id=None, encode=lambda text: [0], decode=lambda ids: "".join(chars[i] for i in ids))
    monkeypatch.setattr(lm, "stream", lambda *a, **k: (torch.tensor([i]) for i in range(len(chars))))
    pieces = list(lm.stream_text(SimpleNamespace(cfg=SimpleNamespace(max_len=64)), tok, "p", stop=stop))
    assert "".join(pieces) == shown and all(pieces)


def test_an_lm_run_stopped_by_ctrl_c_resumes_to_the_weights_of_one_never_stopped(tmp_path, monkeypatch):
    common = {"steps": 12, "n_train": 500, "n_test": 10, "block": 32, "batch_size": 4, "eval_every": 6,
              "save_every": 100, "progress": False, "verbose": False,
              "model": {"d_model": 32, "n_layers": 2, "d_ff": 64, "dropout": 0.1}}
    straight = recipes.train("lm", out=str(tmp_path / "a"), **common)
    real = aiayn.recipes.lm.lm_batches

    def interrupted(*args, **kwargs):  # Ctrl-C while the 8th batch is in use
        for i, batch in enumerate(real(*args, **kwargs)):
            if i == 7:
                os.kill(os.getpid(), signal.SIGINT)
            yield batch

    monkeypatch.setattr(aiayn.recipes.lm, "lm_batches", interrupted)
    with pytest.raises(KeyboardInterrupt, match=r"after step 8.*aiayn train --resume"):
        recipes.train("lm", out=str(tmp_path / "b"), **common)
    monkeypatch.undo()
    resumed = recipes.resume(tmp_path / "b" / "lm-dates", progress=False, verbose=False)
    a, b = aiayn.load(straight["run"]).state_dict(), aiayn.load(resumed["run"]).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["loss"] for r in resumed["history"]] == [r["loss"] for r in straight["history"]]
    assert resumed["validation"] == straight["validation"]


def test_a_text_file_trains_with_byte_level_bpe(tmp_path):
    path = DATA / "tinyshakespeare" / "input.txt"
    if not path.is_file():
        pytest.skip("needs ../shared/data/tinyshakespeare")
    small = tmp_path / "small.txt"
    small.write_text(path.read_text()[:60_000])
    result = recipes.train("lm", data=str(small), vocab_size=500, steps=60, eval_every=30, block=64, batch_size=8,
                           out=str(tmp_path), progress=False, verbose=False)
    tok = load_lm_run(result["run"])[1]
    assert isinstance(tok, BPETokenizer)
    # Baseline: a uniform guess over the tokens (log 500 = 6.2 nats a token), where an untrained model starts.
    # Seeds 0, 1, 2 reach 5.0-5.1 nats after 60 updates: near the unigram entropy (4.95), which a run this
    # short does not beat by a margin, so the check is against the uniform guess, and that the loss falls.
    first, last = result["validation"]
    assert last["val_loss"] < first["val_loss"]
    assert last["val_loss"] <= math.log(tok.vocab_size) - 0.8
    assert result["sample"]


def test_val_data_validates_on_its_own_file_and_all_of_data_trains(tmp_path, capsys):
    from aiayn.recipes.lm import perplexity

    lines = date_lines(200, seed=1)
    train, val = tmp_path / "train.txt", tmp_path / "val.txt"
    train.write_text("\n".join(lines[:150]) + "\n")
    val.write_text("\n".join(lines[150:]) + "\n")
    result = recipes.train("lm", data=str(train), val_data=str(val), tokenizer="char", steps=2, warmup=1, block=16,
                           model={"d_model": 32, "max_len": 16}, out=str(tmp_path), progress=False)
    assert f"{len(train.read_text()):,} training tokens, {len(val.read_text()):,} held out" in capsys.readouterr().out
    # the last validation (the final weights, every block of val.txt) is `aiayn evaluate`'s number on val.txt
    assert result["validation"][-1]["val_loss"] == pytest.approx(perplexity(result["run"], val)["loss"], rel=1e-5)
    with pytest.raises(ValueError, match="val_data needs data"):
        recipes.config("lm", val_data=str(val))


def test_a_converted_gpt2_folder_generates_like_hugging_face(tmp_path):
    transformers = pytest.importorskip("transformers")  # the only test here that needs Hugging Face
    tok = BPETokenizer.train(["hello world, the quick brown fox jumps over the lazy dog"] * 20, vocab_size=300)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=tok.vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=4, eos_token_id=2,
        initializer_range=0.3)).eval()
    hf.save_pretrained(tmp_path / "hf")
    tok.save(tmp_path / "hf" / "tokenizer.json")
    out = run_cli("convert", "hf-gpt2", str(tmp_path / "hf"), str(tmp_path / "run"))
    assert out.returncode == 0, out.stderr
    text = "".join(generate(tmp_path / "run", "the quick", max_new_tokens=10, do_sample=False))
    prompt = torch.tensor([tok.encode("the quick")])
    expected = hf.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0, eos_token_id=2)
    assert text == tok.decode(expected[0, prompt.size(1):].tolist())
    p = aiayn.pipeline(tmp_path / "hf")  # the Hugging Face folder itself, converted in memory
    assert p.task == "text-generation" and p.generate("the quick", max_new_tokens=10, do_sample=False) == text
    # called, it answers what transformers' own text-generation pipeline answers on the same folder
    theirs = transformers.pipeline("text-generation", model=hf, tokenizer=transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tmp_path / "hf" / "tokenizer.json")))
    options = {"max_new_tokens": 10, "do_sample": False}
    assert p("the quick", **options) == theirs("the quick", **options, pad_token_id=0) == [
        {"generated_text": "the quick" + text}]
    bad = run_cli("convert", "hf-marian", str(tmp_path / "hf"), str(tmp_path / "x"))
    assert bad.returncode == 2 and "holds a 'gpt2' model, not 'marian'" in bad.stderr


def test_a_transformer_xl_trains_over_ordered_streams_and_scores_with_its_memory(tmp_path):
    from aiayn.recipes.lm import perplexity

    lines = date_lines(400, seed=2)
    train, val = tmp_path / "train.txt", tmp_path / "val.txt"
    train.write_text("\n".join(lines[:300]) + "\n")
    val.write_text("\n".join(lines[300:]) + "\n")
    small = {"d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64, "mem_len": 16, "dropout": 0.0}
    result = recipes.train("lm", data=str(train), val_data=str(val), tokenizer="char", preset="transfo-xl-char",
                           steps=300, warmup=10, eval_every=300, block=16, batch_size=8, model=small,
                           out=str(tmp_path), progress=False, verbose=False)
    run = result["run"]
    # Baseline: the unigram entropy of the date lines' characters is 3.2 nats (see the default job's test); seeds
    # 0-2 of this run reach 2.02-2.06 after 300 updates.
    assert result["validation"][-1]["val_loss"] < 2.5
    # A memory at least as long as a stream gives each token everything before it in its stream: scoring in
    # segments of 16 then equals one pass over each stream's whole text (the memory is the context, no more)
    model, tok = load_lm_run(run)
    ids = torch.tensor(tok.encode(val.read_text()))
    rows = 4
    per_row = (ids.numel() - 1) // rows // 16 * 16
    x = ids[: rows * ((ids.numel() - 1) // rows)].view(rows, -1)[:, :per_row]
    y = ids[1 : rows * ((ids.numel() - 1) // rows) + 1].view(rows, -1)[:, :per_row]
    with torch.no_grad():
        whole = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    scored = perplexity(run, val, batch_size=rows, mem_len=per_row)
    assert scored["tokens"] == x.numel()
    assert scored["loss"] == pytest.approx(whole, rel=1e-5)
    # with no memory each segment starts blind: worse than with the whole stream behind it
    assert perplexity(run, val, batch_size=rows, mem_len=0)["loss"] > scored["loss"]
    out = run_cli("evaluate", "--run", str(run), "--data", str(val), "--mem-len", "0", "--json")
    assert out.returncode == 0, out.stderr
    assert "".join(generate(run, "monday", max_new_tokens=8, do_sample=False)) != ""
    gpt = recipes.train("lm", data=str(train), tokenizer="char", steps=1, warmup=1, block=16,
                        model={"d_model": 16, "n_heads": 2, "n_layers": 1, "max_len": 16}, out=str(tmp_path / "gpt"),
                        progress=False, verbose=False)
    with pytest.raises(ValueError, match="keeps no memory"):
        perplexity(gpt["run"], val, mem_len=8)
