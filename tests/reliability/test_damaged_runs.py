"""Run folders damaged as a careless or hostile user would damage them.

Each case copies a tiny run into its own folder, breaks one thing, and runs the command on it: it must refuse
with exit status 2 and one line on stderr that names the file at fault, print no traceback, and leave every file
as it was (reliability_kit.assert_refused). ``Case`` runs ``python -m aiayn`` in a new process; ``quick`` runs
``aiayn.cli.main`` in this one, for the cases a process adds nothing to but seconds. Adding a case is one line.
"""

import pickle

import numpy as np
import pytest
from reliability_kit import (
    Case,
    aiayn,
    bomb_png,
    check_case,
    copy,
    edit_json,
    flip_byte,
    mkdir,
    nan_image,
    nan_weights,
    npy,
    png,
    quick,
    remove,
    run,
    sentencepiece_outside,
    steps,
    symlink,
    truncate,
    write,
)

GENERATE = ["generate", "--run", "lm", "--prompt", "the", "--max-new-tokens", "2", "--temperature", "0"]
TRANSLATE = ["translate", "--run", "copy", "abc"]
RESUME = ["train", "--resume", "lm", "--steps", "4", "--no-progress"]
TEXT = "the 3rd of march 1999 = 1999-03-03\n" * 20
NOTHING = mkdir("empty")


def classify(image: str) -> list[str]:
    return ["classify", "--run", "image", image]


CASES = [
    # the run folder's lock: never followed, never written through
    Case("lock-is-a-symlink",
         steps(run("lm"), write("precious.txt", "keep me\n"), symlink("lm/.lock", "../precious.txt")), RESUME,
         [".lock"]),
    Case("lock-is-a-directory", steps(run("lm"), mkdir("lm/.lock")), RESUME, [".lock"]),
    # what --resume reads
    Case("args-json-a-list", steps(run("lm"), write("lm/args.json", "[1, 2]")), RESUME, ["args.json"]),
    quick("args-json-not-utf8", steps(run("lm"), write("lm/args.json", b"\xff\xfe{\x00")), RESUME, ["args.json"]),
    quick("args-json-bad-setting", steps(run("lm"), edit_json("lm/args.json", lambda a: {**a, "steps": "many"})),
          RESUME, ["args.json"]),
    Case("train-state-truncated", steps(run("lm"), truncate("lm/train_state.safetensors", 0.5)), RESUME,
         ["train_state.safetensors"]),
    Case("train-state-bit-flipped", steps(run("lm"), flip_byte("lm/train_state.safetensors")), RESUME,
         ["train_state.safetensors"]),
    quick("resume-missing", NOTHING, ["train", "--resume", "nowhere"], ["nowhere"]),
    quick("resume-with-other-settings", run("lm"), ["train", "--resume", "lm", "--lr", "0.5"], ["lr"]),
    quick("resume-to-fewer-steps", run("lm"), ["train", "--resume", "lm", "--steps", "1", "--no-progress"],
          ["steps"]),
    # the weights
    Case("checkpoint-of-another-family", steps(run("copy"), copy("lm:model.safetensors", "copy/model.safetensors")),
         TRANSLATE, ["model.safetensors"]),
    quick("checkpoint-of-another-family-generate",
          steps(run("lm"), copy("image:model.safetensors", "lm/model.safetensors")), GENERATE, ["model.safetensors"]),
    quick("checkpoint-is-a-pickle", steps(run("lm"), write("lm/model.safetensors", pickle.dumps({"w": [1.0] * 9}))),
          GENERATE, ["model.safetensors"]),
    quick("checkpoint-empty", steps(run("lm"), truncate("lm/model.safetensors", 0)), GENERATE, ["model.safetensors"]),
    quick("checkpoint-truncated", steps(run("lm"), truncate("lm/model.safetensors", 0.6)), GENERATE,
          ["model.safetensors"]),
    quick("checkpoint-bit-flipped", steps(run("lm"), flip_byte("lm/model.safetensors")), GENERATE,
          ["model.safetensors"]),
    quick("run-without-checkpoint", steps(run("lm"), remove("lm/model.safetensors")), GENERATE, ["model.safetensors"]),
    quick("run-missing", NOTHING, ["generate", "--run", "nowhere", "--max-new-tokens", "2"], ["nowhere"]),
    quick("run-is-a-file", write("notes.txt", "hello\n"), ["generate", "--run", "notes.txt"], ["notes.txt"]),
    quick("run-symlink-loop", steps(symlink("loop1", "loop2"), symlink("loop2", "loop1")),
          ["generate", "--run", "loop1"], ["loop1"]),
    quick("run-of-another-task", run("lm", "my-lm"), ["translate", "--run", "my-lm", "abc"], ["my-lm"]),
    # the tokenizer
    Case("tokenizer-of-another-vocabulary-generate",
         steps(run("lm"), copy("copy:src_tokenizer.json", "lm/tokenizer.json")), GENERATE, ["tokenizer.json"]),
    Case("tokenizer-of-another-vocabulary-evaluate",
         steps(run("lm"), copy("copy:src_tokenizer.json", "lm/tokenizer.json"), write("text.txt", TEXT)),
         ["evaluate", "--run", "lm", "--data", "text.txt"], ["tokenizer.json"]),
    Case("tokenizer-not-utf8", steps(run("lm"), write("lm/tokenizer.json", b"\xff\xfe\x00{\x00")), GENERATE,
         ["tokenizer.json"]),
    Case("tokenizer-not-json", steps(run("lm"), write("lm/tokenizer.json", '{"type": "char", "vocab": [')),
         GENERATE, ["tokenizer.json"]),
    Case("tokenizer-files-outside-the-run", sentencepiece_outside, TRANSLATE, ["src_tokenizer.json"]),
    # images aiayn classify cannot read
    Case("image-not-an-image", steps(run("image"), write("notimage.png", "hello, I am text\n")),
         classify("notimage.png"), ["notimage.png"]),
    Case("image-truncated-png", steps(run("image"), write("truncated.png", png()[:60])), classify("truncated.png"),
         ["truncated.png"]),
    Case("image-decompression-bomb", steps(run("image"), write("bomb.png", bomb_png())), classify("bomb.png"),
         ["bomb.png"]),
    Case("image-nan-pixels", steps(run("image"), write("nan.npy", nan_image())), classify("nan.npy"), ["nan.npy"]),
    quick("image-pickled-npy", steps(run("image"), write("pickle.npy", npy(np.array([{"a": 1}], dtype=object)))),
          classify("pickle.npy"), ["pickle.npy"]),
    quick("image-empty-file", steps(run("image"), write("empty.png", b"")), classify("empty.png"), ["empty.png"]),
    quick("image-a-folder", steps(run("image"), mkdir("pictures")), classify("pictures"), ["pictures"]),
    # inputs the models cannot take
    Case("translate-line-longer-than-positions", run("copy"), ["translate", "--run", "copy"], ["line 1"],
         stdin=b"abc" * 100 + b"\n"),
    quick("generate-prompt-longer-than-positions", run("lm"),
          ["generate", "--run", "lm", "--prompt", "the 3rd of march " * 40, "--max-new-tokens", "2"], ["prompt"]),
    quick("evaluate-data-missing", run("lm"), ["evaluate", "--run", "lm", "--data", "nowhere.txt"], ["nowhere.txt"]),
    quick("beam-zero", run("copy"), ["translate", "--run", "copy", "--beam", "0", "abc"], ["--beam"]),
    quick("max-new-tokens-negative", run("lm"), ["generate", "--run", "lm", "--max-new-tokens", "-1"],
          ["--max-new-tokens"]),
    quick("top-p-above-one", run("lm"), ["generate", "--run", "lm", "--top-p", "2", "--max-new-tokens", "2"],
          ["--top-p"]),  # the flag that set it (aiayn.decoding.settings)
    # an export of a run it cannot describe writes nothing (no OUT, no temporary folder)
    Case("export-run-json-garbage", steps(run("lm"), write("lm/run.json", "{garbage")),
         ["export", "lm", "--to", "hf", "exported"], ["run.json"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_damaged_run_is_refused_in_one_line_and_left_as_it_was(case, tmp_path, runs, capsys):
    check_case(case, tmp_path, runs, capsys)


def test_nan_weights_are_refused_or_flagged_on_load(tmp_path, runs):
    # A checkpoint saved with NaN weights (its digest is right: the file is what was written) generates nothing
    # useful; a careful command refuses it naming the file, or at least says so on stderr, never prints in silence.
    nan_weights("lm")(tmp_path, runs)
    result = aiayn(GENERATE, cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode == 2:
        assert len(result.stderr.strip().splitlines()) == 1 and "model.safetensors" in result.last, result.stderr
    else:
        assert result.returncode == 0 and "nan" in result.stderr.lower(), (
            f"exit {result.returncode}, and nothing on stderr says the weights are NaN: {result.stderr!r}")


def test_bytes_that_are_not_utf8_on_standard_input_are_refused_or_reported(tmp_path, runs):
    # `aiayn translate` as a filter: a line of Latin-1 among UTF-8 ones. Refused naming the line (2), or
    # translated with replacement characters and said so on stderr (naming the line); never silently.
    run("copy")(tmp_path, runs)
    result = aiayn(["translate", "--run", "copy"], cwd=tmp_path, stdin=b"abc\nd\xe9f \xff\nfed\n")
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode == 2:
        assert len(result.stderr.strip().splitlines()) == 1 and "line 2" in result.last, result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert "line 2" in result.stderr, f"undecodable input passed in silence: stderr {result.stderr!r}"
        assert len(result.stdout.splitlines()) == 3  # still one translation per input line
