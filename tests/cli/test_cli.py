import json
import subprocess
import sys

import pytest

from aiayn.cli import main
from aiayn.cli.train import train, translate


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "aiayn", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """The copy task (The Annotated Transformer's first example), short enough for CI."""
    return train(task="copy", steps=800, warmup=100, max_tokens=512, n_train=20000, n_test=100,
                 out=tmp_path_factory.mktemp("r"), progress=False, verbose=False, dropout=0.0, d_model=64, d_ff=256)


def test_copy_task_learns_to_100_percent(copy_run):
    assert copy_run["exact_match"] == 1.0
    run = copy_run["run"]
    assert {"model.safetensors", "src_tokenizer.json", "tgt_tokenizer.json", "run.json", "attention.png"} <= {
        p.name for p in run.iterdir()}
    assert json.loads((run / "run.json").read_text())["exact_match"] == 1.0
    assert (run / "attention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_translate_from_a_saved_run(copy_run):
    assert translate(copy_run["run"], ["abcabc", "jihgfedc"]) == ["abcabc", "jihgfedc"]
    out = run_cli("translate", "--run", str(copy_run["run"]), "deadbeef")
    assert out.returncode == 0 and out.stdout.strip() == "deadbeef -> deadbeef"


def test_count_prints_parameters_by_part(capsys):
    assert main(["count", "transformer-base", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)["parameters"]
    assert table["total"] == sum(v for k, v in table.items() if k != "total") == 63_119_496
    assert table["embeddings"] == 37000 * 512
    assert main(["count", "transformer-big"]) == 0
    assert "attention" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["train", "--steps", "-3"], "--steps must be positive"),
    (["train", "--task", "nope"], "invalid choice: 'nope'"),
    (["train", "--bogus"], "unrecognized arguments: --bogus"),
    (["count", "transformer-bsae"], "did you mean 'transformer-base'"),
    (["translate", "--run", "/nonexistent", "x"], "holds no model.safetensors"),
])
def test_bad_command_lines_exit_2_with_one_line_and_no_traceback(args, message):
    out = run_cli(*args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 2


def test_no_arguments_prints_help():
    out = run_cli()
    assert out.returncode == 0 and "train" in out.stdout and "translate" in out.stdout


@pytest.mark.slow
def test_default_job_reaches_95_percent_exact_match(tmp_path):
    result = train(out=tmp_path, progress=False, verbose=False)
    assert result["exact_match"] >= 0.95
