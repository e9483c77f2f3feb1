"""The walkthrough runs (CI executes it), its Chinese version has exactly the same code, and the Chinese
README gives the same set-up commands as the English one."""

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def code_tokens(path):
    """The tokens of a Python file without its comments (where the two languages differ)."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    toks = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    out = []
    for t in toks:
        if t.type in skip:
            continue
        if t.type == tokenize.STRING and t.string.startswith('"""'):  # docstrings are prose too
            continue
        out.append(t.string)
    return out


def test_the_chinese_walkthrough_has_the_same_code():
    assert code_tokens(ROOT / "docs" / "walkthrough.zh.py") == code_tokens(ROOT / "docs" / "walkthrough.py")


def test_the_chinese_readme_gives_the_same_setup_commands():
    def blocks(path):
        text = path.read_text(encoding="utf-8")
        return [re.search(rf"<!-- {m} -->\n```sh\n(.*?)```", text, re.S).group(1)
                for m in ("readme:main", "readme:test")]

    assert blocks(ROOT / "README.zh-CN.md") == blocks(ROOT / "README.md")


def test_the_walkthrough_runs_and_every_check_in_it_passes():
    path = ROOT / "docs" / "walkthrough.py"
    if not path.is_file():
        pytest.skip("docs/ is not next to the tests")
    env = {**os.environ, "AIAYN_WALKTHROUGH_STEPS": "20"}  # its checks hold for any weights; a reader's run: 200
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600, check=False,
                         env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("  ok: ") == 7 and "done: every step above matched the library" in run.stdout


def test_the_quickstart_notebook_runs_every_cell_headless(monkeypatch):
    """docs/quickstart.ipynb: train, translate, draw attention, embed with MiniLM, export to transformers and
    generate the same text there; with fewer updates than a reader's run (the notebook reads
    ``AIAYN_QUICKSTART_STEPS``). Its own asserts (transformers writes what we write) run in the kernel."""
    nbformat = pytest.importorskip("nbformat", reason="needs nbclient and ipykernel (the test extras)")
    nbclient = pytest.importorskip("nbclient", reason="needs nbclient and ipykernel (the test extras)")
    pytest.importorskip("ipykernel", reason="needs nbclient and ipykernel (the test extras)")
    monkeypatch.setenv("AIAYN_QUICKSTART_STEPS", "20")
    notebook = nbformat.read(ROOT / "docs" / "quickstart.ipynb", as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute()  # raises on a failing cell
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "greedy" in text and "torch.Size([3, 384])" in text and "GPT2LMHeadModel" in text
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in outputs)  # the attention picture


def test_the_coming_from_transformers_block_runs_as_it_stands(tmp_path):
    """The README's first ten minutes of a transformers user: train, export, load in transformers, serve, chat with
    the openai client; run by bash as written, with 20 updates and a free port instead of 300 and 8000."""
    import shutil
    import socket

    for need in ("curl", "bash"):
        if shutil.which(need) is None:
            pytest.skip(f"needs {need}")
    for module in ("transformers", "openai", "uvicorn", "starlette"):
        pytest.importorskip(module)
    block = re.search(r"<!-- readme:transformers -->\n```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = block.replace("--steps 300", "--steps 20").replace("8000", str(port))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    # its own process group: if the block fails or hangs before `kill %1`, the server it started goes with it
    proc = subprocess.Popen(["bash", "-ec", script], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    run = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    assert any(line.startswith("march 5th, 2019 =") for line in lines)  # transformers' generate, decoded
    assert lines[-1].startswith("'") and float(lines[-1].rsplit(" ", 1)[1]) <= 0  # the reply and a log-probability
