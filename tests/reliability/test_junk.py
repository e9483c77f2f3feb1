"""Junk that hypothesis draws, fed to the readers of text: a training text file, a TSV of translation pairs, a
``--config`` TOML file, ``--set`` values. Whatever it is, ``aiayn.cli.main`` ends with status 0 (it trained on it)
or 2 with one line on stderr; it never raises (a traceback, in a process) and never writes outside ``--out``.

In this process, not a new one per example: an exception escaping ``main`` is the traceback a process would
print, and a process per example would take seconds of importing torch each.
"""

import json
import math
import tempfile
from pathlib import Path

import pytest
from reliability_kit import in_process, snapshot

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")
given, settings = hypothesis.given, hypothesis.settings

# few examples (each may train a model for an update), no deadline (a first example warms up); the fixtures are
# constant across examples (capsys is read after each, monkeypatch sets one thing once)
FEW = settings(max_examples=10, deadline=None,
               suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])

# the smallest GPT and Transformer, one update, no validation before the end
TINY_GPT = ["--steps", "1", "--warmup", "1", "--eval-every", "0", "--no-progress", "--set", "d_model=16",
            "--set", "n_layers=1", "--set", "n_heads=2", "--set", "d_ff=32"]
LM = ["train", "lm", *TINY_GPT, "--n-train", "40", "--n-test", "2", "--block", "8", "--batch-size", "2",
      "--eval-blocks", "1", "--vocab-size", "300"]
TRANSLATION = ["train", "translation", "--steps", "1", "--warmup", "1", "--eval-every", "0", "--no-progress",
               "--tokenizer", "char", "--n-test", "1", "--max-tokens", "64", "--set", "d_model=16", "--set",
               "n_heads=2", "--set", "d_ff=32", "--set", "n_encoder_layers=1", "--set", "n_decoder_layers=1",
               "--set", "max_len=32"]


def clean_end(result, folder: Path, allowed: set[str]) -> None:
    """Status 0, 2 with one line on stderr, or 1 with one line saying the run diverged (a learning rate of a
    million trains to NaN weights); and nothing made in ``folder`` but ``allowed`` and ``out/``."""
    assert "Traceback" not in result.stderr, result.stderr
    diverged = result.returncode == 1 and "diverged" in result.stderr
    assert result.returncode in (0, 2) or diverged, f"exit {result.returncode}: {result.stderr[-2000:]}"
    if result.returncode != 0:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    stray = [p for p in snapshot(folder) if p not in allowed and p != "out" and not p.startswith("out/")]
    assert not stray, f"written outside --out: {stray}"


def attempt(args: list[str], files: dict[str, bytes], capsys) -> None:
    """Write ``files`` into a new folder, run ``aiayn ARGS`` there in this process, and hold it to a clean end."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name) / "case"
        folder.mkdir()
        for file, data in files.items():
            (folder / file).write_bytes(data)
        result = in_process(args, folder, capsys)
        hypothesis.event(f"exit {result.returncode}")  # pytest --hypothesis-show-statistics: how many trained
        clean_end(result, folder, set(files))


text_bytes = st.one_of(
    st.binary(max_size=2000),
    st.text(max_size=1500).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.lists(st.text(min_size=1, max_size=60), min_size=1, max_size=80).map(lambda ls: "\n".join(ls).encode(
        "utf-8", "surrogatepass")),
)


@FEW
@given(data=text_bytes, tokenizer=st.sampled_from(["char", "bpe"]))
def test_any_bytes_as_a_language_model_text(data, tokenizer, capsys):
    attempt([*LM, "--tokenizer", tokenizer, "--data", "text.txt", "--out", "out"], {"text.txt": data}, capsys)


words = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\u2028\u2029\x85"),
                min_size=1, max_size=20)  # no line or column breaks: a well-formed pair
tsv_bytes = st.one_of(
    st.binary(max_size=1500),
    st.lists(st.tuples(st.text(max_size=20), st.text(max_size=20)), max_size=30).map(
        lambda pairs: "".join(f"{s}\t{t}\n" for s, t in pairs).encode("utf-8", "surrogatepass")),
    st.lists(st.tuples(words, words), min_size=1, max_size=30).map(
        lambda pairs: "".join(f"{s}\t{t}\n" for s, t in pairs).encode()),
    st.lists(st.text(alphabet="ab \t\r\n", max_size=20), max_size=30).map(lambda ls: "\n".join(ls).encode()),
)


@FEW
@given(data=tsv_bytes)
def test_any_bytes_as_translation_pairs(data, capsys, monkeypatch):
    import aiayn.viz

    # the attention picture's drawing takes seconds of matplotlib; what it draws (the junk translated) is still made
    monkeypatch.setattr(aiayn.viz, "plot_attention_grid", lambda layers, rows, columns, path, **k: Path(path))
    attempt([*TRANSLATION, "--data", "pairs.tsv", "--out", "out"], {"pairs.tsv": data}, capsys)


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML's basic string's
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(value)


def toml(settings: dict, model: dict | None) -> bytes:
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in settings.items()]
    if model is not None:
        lines += ["[model]", *(f"{json.dumps(k)} = {toml_value(v)}" for k, v in model.items())]
    return ("\n".join(lines) + "\n").encode()


scalars = st.one_of(st.booleans(), st.integers(-3, 64), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=12), st.lists(st.integers(-2, 9), max_size=3))
# settings a user writes (not the size of the model or of the data, which the flags fix small, nor --minutes,
# which would fit a long run to a long budget); "name" and "data" as paths are refused or stay inside --out
keys = st.sampled_from(["steps", "warmup", "lr", "seed", "name", "tokenizer", "data", "beta2", "weight_decay",
                        "clip", "save_every", "average", "device", "bf16", "recipe", "stpes", "", "model.x"])
model_keys = st.sampled_from(["d_model", "n_layers", "n_heads", "dropout", "activation", "norm", "positional",
                              "nonsense"])


@FEW
@given(settings_=st.dictionaries(keys, scalars, max_size=5),
       model=st.none() | st.dictionaries(model_keys, scalars, max_size=3))
def test_any_settings_file(settings_, model, capsys):
    attempt([*LM, "--tokenizer", "char", "--config", "cfg.toml", "--out", "out"], {"cfg.toml": toml(settings_, model)},
            capsys)


@FEW
@given(data=st.binary(max_size=300))
def test_any_bytes_as_a_settings_file(data, capsys):
    attempt([*LM, "--tokenizer", "char", "--config", "cfg.toml", "--out", "out"], {"cfg.toml": data}, capsys)


def small(value: str) -> bool:
    """Whether ``value`` is not a number too large for a model to be built of it in this test's memory."""
    try:
        number = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return True
    return not isinstance(number, (int, float)) or isinstance(number, bool) or not abs(number) > 64


@FEW
@given(field=st.sampled_from(["d_model", "n_layers", "n_heads", "d_ff", "dropout", "max_len", "activation", "norm",
                              "positional", "eos_id", "nonsense"]),
       value=st.one_of(st.text(max_size=15), st.integers(-5, 64).map(str), st.sampled_from(
           ["", "null", "true", "[]", "{}", "1.5", "NaN", "-Infinity", "1e3", "[1, 2]", '"gelu"', "0", "16", "32",
            "0.1", "gelu", "relu", "rmsnorm", "layernorm", "learned", "rope"])).filter(small))
def test_any_value_of_set(field, value, capsys):
    attempt([*LM, "--tokenizer", "char", "--out", "out", "--set", f"{field}={value}"], {}, capsys)
