"""Bad paths, flags, settings files, data files and Hugging Face folders.

Each case makes its bad input in its own folder and runs the command there: it must refuse with exit status 2
and one line on stderr naming the argument or file at fault, print no traceback, and leave every file as it was:
nothing written outside `--out` (or anywhere), no run overwritten, no half-written folder left behind.
``Case`` runs ``python -m aiayn`` in a new process; ``quick`` runs ``aiayn.cli.main`` in this one, for the
cases a process adds nothing to but seconds. Adding a case is one line.
"""

import os

import pytest
from reliability_kit import (
    TINY_LM,
    Case,
    check_case,
    edit_json,
    in_process,
    mkdir,
    quick,
    remove,
    run,
    sharded,
    steps,
    symlink,
    truncate,
    write,
)

TRAIN_LM = ["train", "lm", "--steps", "1", *TINY_LM]
EMPTY_NPY = b"\x93NUMPY\x01\x00v\x00{'descr': '|u1', 'fortran_order': False, 'shape': (0, 5), }" + b" " * 58 + b"\n"
NOTHING = mkdir("out")


def no_key(key: str):
    return lambda config: {k: v for k, v in config.items() if k != key}


CASES = [
    # the run folder's name must not lead outside --out
    Case("name-with-parent-dirs", NOTHING, [*TRAIN_LM, "--out", "out/deep", "--name", "../../x"], ["--name"]),
    Case("name-absolute", NOTHING, [*TRAIN_LM, "--out", "out", "--name", "{tmp}/elsewhere"], ["--name"]),
    Case("config-name-with-parent-dirs", write("cfg.toml", 'name = "../x"\n'),
         [*TRAIN_LM, "--out", "out/deep", "--config", "cfg.toml"], ["name"]),
    quick("name-empty", NOTHING, [*TRAIN_LM, "--out", "out", "--name", ""], ["--name"]),
    quick("name-dot", NOTHING, [*TRAIN_LM, "--out", "out", "--name", "."], ["--name"]),
    # where the run folder goes
    Case("out-dangling-symlink", symlink("runs-link", "missing-folder"), [*TRAIN_LM, "--out", "runs-link"],
         ["runs-link"]),
    quick("out-is-a-file", write("afile", "not a folder\n"), [*TRAIN_LM, "--out", "afile"], ["afile"]),
    # numbers
    quick("steps-zero", NOTHING, ["train", "lm", *TINY_LM, "--steps", "0", "--out", "out"], ["steps"]),
    quick("steps-negative", NOTHING, ["train", "lm", *TINY_LM, "--steps", "-5", "--out", "out"], ["steps"]),
    quick("steps-not-a-number", NOTHING, ["train", "lm", *TINY_LM, "--steps", "ten", "--out", "out"], ["--steps"]),
    quick("count-seq-len-zero", NOTHING, ["count", "gpt2", "--seq-len", "0"], ["--seq-len"]),
    # --set
    quick("set-unknown-field", NOTHING, [*TRAIN_LM, "--out", "out", "--set", "nonsense_field=3"],
          ["nonsense_field"]),
    quick("set-junk-value", NOTHING, [*TRAIN_LM, "--out", "out", "--set", "d_model=abc"], ["d_model"]),
    quick("set-without-equals", NOTHING, [*TRAIN_LM, "--out", "out", "--set", "d_model"], ["--set"]),
    quick("set-negative-layers", NOTHING, [*TRAIN_LM, "--out", "out", "--set", "n_layers=-1"], ["n_layers"]),
    # --config
    Case("config-model-not-a-table", write("cfg.toml", "model = 3\n"),
         [*TRAIN_LM, "--out", "out", "--config", "cfg.toml"], ["cfg.toml", "model"]),
    quick("config-syntax-error", write("cfg.toml", "steps = = 3\n"), [*TRAIN_LM, "--config", "cfg.toml"],
          ["cfg.toml"]),
    quick("config-not-utf8", write("cfg.toml", b"\xff\xfe= 3\n"), [*TRAIN_LM, "--config", "cfg.toml"], ["cfg.toml"]),
    quick("config-unknown-setting", write("cfg.toml", "stpes = 3\n"), [*TRAIN_LM, "--config", "cfg.toml"],
          ["stpes"]),
    quick("config-wrong-type", write("cfg.toml", 'lr = "fast"\n'), [*TRAIN_LM, "--config", "cfg.toml"], ["lr"]),
    quick("config-a-folder", mkdir("cfgdir"), [*TRAIN_LM, "--config", "cfgdir"], ["cfgdir"]),
    quick("config-missing", NOTHING, [*TRAIN_LM, "--config", "nowhere.toml"], ["nowhere.toml"]),
    quick("config-json-a-list", write("cfg.json", "[1, 2]"), [*TRAIN_LM, "--config", "cfg.json"], ["cfg.json"]),
    # data files
    quick("data-empty", write("empty.txt", ""), [*TRAIN_LM, "--out", "out", "--data", "empty.txt"], ["empty.txt"]),
    quick("data-only-blank-lines", write("blank.txt", "\n\n   \n\t\n\n"),
          [*TRAIN_LM, "--out", "out", "--data", "blank.txt"], ["blank.txt"]),
    quick("data-not-utf8", write("binary.txt", b"ab\xff\xfe\x00cd\n" * 50),
          [*TRAIN_LM, "--out", "out", "--data", "binary.txt"], ["binary.txt"]),
    quick("data-a-folder", write("texts/a.txt", "hello\n"), [*TRAIN_LM, "--out", "out", "--data", "texts"],
          ["texts"]),
    quick("data-pairs-without-tabs", write("pairs.tsv", "abc def\nghi\n"),
          ["train", "translation", "--data", "pairs.tsv", "--steps", "1", "--out", "out", "--no-progress"],
          ["pairs.tsv"]),
    # Hugging Face folders for aiayn convert
    Case("hf-shard-in-parent-folder", sharded(lambda tmp: "../x.safetensors"), ["convert", "hf", "out"],
         ["model.safetensors.index.json"]),
    Case("hf-shard-absolute-path", sharded(lambda tmp: str(tmp / "elsewhere" / "x.safetensors")),
         ["convert", "hf", "out"], ["model.safetensors.index.json"]),
    Case("hf-config-missing-key", steps(run("hf"), edit_json("hf/config.json", no_key("n_embd"))),
         ["convert", "hf", "out"], ["config.json", "n_embd"]),
    quick("hf-config-a-list", steps(run("hf"), write("hf/config.json", "[]")), ["convert", "hf", "out"],
          ["config.json"]),
    Case("hf-tokenizer-garbage", steps(run("hf"), write("hf/tokenizer.json", "{garbage")), ["convert", "hf", "out"],
         ["tokenizer.json"]),
    quick("hf-no-weights", steps(run("hf"), remove("hf/model.safetensors")), ["convert", "hf", "out"],
          ["model.safetensors"]),
    # writing over a run that is there: refused without --force (test_saving.py checks that --force replaces it)
    Case("export-into-a-folder-holding-a-run", steps(run("lm"), run("image", "existing")),
         ["export", "lm", "--to", "hf", "existing"], ["existing"]),
    Case("export-into-its-own-run-folder", run("lm", "my-run"), ["export", "my-run", "--to", "hf", "my-run"],
         ["my-run"]),
    Case("convert-into-a-folder-holding-a-run", steps(run("hf"), run("image", "existing")),
         ["convert", "hf", "existing"], ["existing"]),
    quick("convert-into-its-source-folder", run("hf", "hf-src"), ["convert", "hf-src", "hf-src"], ["hf-src"]),
    quick("average-of-different-models", steps(run("lm"), run("copy")),
          ["average", "lm/model.safetensors", "copy/model.safetensors", "--out", "avg.safetensors"],
          ["model.safetensors"]),
    # generation settings: checked once (aiayn.decoding.settings), named by the flag that set them
    *(quick(f"generate-{flag[2:]}-{value}", run("lm"), ["generate", "--run", "lm", "--prompt", "a", flag, value],
            [flag])
      for flag, value in [("--temperature", "nan"), ("--temperature", "inf"), ("--temperature", "1e-30"),
                          ("--temperature", "-1"), ("--top-p", "nan"), ("--top-p", "0"), ("--top-k", "-2"),
                          ("--repetition-penalty", "inf"), ("--num-beams", "100000"), ("--max-new-tokens", "0"),
                          ("--max-new-tokens", "5000")]),  # 5000: more than the model's positions leave
    quick("translate-beam-past-the-ceiling", run("copy"), ["translate", "--run", "copy", "--beam", "100000", "a b"],
          ["--beam"]),
    quick("translate-beam-wider-than-the-vocabulary", run("copy"), ["translate", "--run", "copy", "--beam", "64",
                                                                    "a b"], ["--beam", "vocabulary"]),
    quick("serve-max-wait-nan", run("lm"), ["serve", "lm", "--max-wait-ms", "nan"], ["--max-wait-ms"]),
    quick("serve-max-wait-inf", run("lm"), ["serve", "lm", "--max-wait-ms", "inf"], ["--max-wait-ms"]),
    quick("serve-max-len-one", run("lm"), ["serve", "lm", "--max-len", "1"], ["--max-len"]),
    quick("serve-max-len-past-the-positions", run("lm"), ["serve", "lm", "--max-len", "99999"], ["--max-len"]),
    # files
    quick("hf-safetensors-damaged", steps(run("hf"), truncate("hf/model.safetensors", 0.5)), ["convert", "hf", "out"],
          ["model.safetensors"]),
    quick("export-inside-its-own-run-folder", run("lm", "my-run"),
          ["export", "my-run", "--to", "hf", "my-run/exported"], ["my-run"]),
    quick("classify-an-image-without-pixels", steps(run("image"), write("empty.npy", EMPTY_NPY)),
          ["classify", "--run", "image", "empty.npy"], ["empty.npy"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_input_is_refused_in_one_line_and_nothing_is_written(case, tmp_path, runs, capsys):
    check_case(case, tmp_path, runs, capsys)


def test_a_dangling_symlink_named_as_the_run_folder_is_not_followed(tmp_path, capsys):
    # `--name lm1` where out/lm1 is a link to a folder that does not exist: training must not make the link's
    # target (outside --out). Refusing, naming it, is one careful answer; a new run beside it (out/lm1-2, as a
    # name that is taken gets) is the other. Either way the link stays as it was.
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "lm1").symlink_to(tmp_path / "elsewhere" / "target")
    result = in_process([*TRAIN_LM, "--out", "out", "--name", "lm1"], tmp_path, capsys)
    assert not (tmp_path / "elsewhere").exists(), "training followed the link out of --out"
    assert os.readlink(tmp_path / "out" / "lm1") == str(tmp_path / "elsewhere" / "target")
    if result.returncode == 2:
        assert len(result.stderr.strip().splitlines()) == 1 and "lm1" in result.last, result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert [p.name for p in (tmp_path / "out").iterdir() if p.is_dir() and not p.is_symlink()] == ["lm1-2"]


def test_every_help_shows_real_defaults(tmp_path, capsys):
    # `aiayn train RECIPE --help` lists each setting with its default: a field without one must not show as
    # dataclasses' sentinel (`<dataclasses._MISSING_TYPE object at 0x...>`)
    from aiayn import recipes

    commands = [["--help"], *([c, "--help"] for c in ("translate", "evaluate", "generate", "convert", "export",
                                                     "classify", "average", "count")),
                *(["train", name, "--help"] for name in recipes.names())]
    for argv in commands:
        result = in_process(argv, tmp_path, capsys)
        assert result.returncode == 0, (argv, result.stderr)
        assert "MISSING" not in result.stdout and "object at 0x" not in result.stdout, (argv, result.stdout)
