"""``aiayn serve`` as a process: SIGTERM stops taking requests, finishes the one in flight and exits 0, and
serving wrote nothing to disk (the working folder stays empty, the run folder unchanged)."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

# the server with each step slowed to 10 ms and no end-of-text token, so a request is still in flight when the
# signal comes (the model is a tiny one: it would otherwise be done at once)
SLOW = """
import sys, time
from aiayn.serve import generation as g
step, init = g.Batch.step, g.Batch.__init__
g.Batch.step = lambda self: (time.sleep(0.01), step(self))[1]
g.Batch.__init__ = lambda self, model, ends, metrics, *a, **k: init(self, model, set(), metrics, *a, **k)
from aiayn.cli.serve import main
sys.exit(main())
"""


def listing(folder):
    return {p.relative_to(folder): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_sigterm_finishes_what_is_in_flight_refuses_the_rest_and_writes_nothing(runs, tmp_path):
    run, cwd = runs["lm"], tmp_path / "cwd"
    cwd.mkdir()
    before = listing(run)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "AIAYN_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SLOW, str(run), "--port", "0", "--log-level", "warning",
                             "--name", "tiny"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    killer = threading.Timer(120, proc.kill)  # whatever happens, the process ends
    killer.start()
    try:
        line = proc.stdout.readline()
        found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        assert found, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = found.group(1)
        events, started = [], threading.Event()

        def stream():
            body = {"prompt": "x", "max_tokens": 150, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
                for data in r.iter_lines():
                    if data.startswith("data: "):
                        events.append(data[6:])
                        started.set()

        client = threading.Thread(target=stream)
        client.start()
        assert started.wait(30)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        try:  # the listening socket is closed (or, on a kept connection, a 503)
            late = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10)
            assert late.status_code == 503
        except httpx.TransportError:
            pass
        client.join(60)
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert events[-1] == "[DONE]"
    usage = json.loads(events[-2])["usage"]
    assert usage["completion_tokens"] == 150  # the one in flight got all its tokens
    assert json.loads(events[-3])["choices"][0]["finish_reason"] == "length"
    assert list(cwd.iterdir()) == [] and listing(run) == before


def test_serve_refuses_bad_flags_and_a_folder_without_a_model(runs, tmp_path, capsys):
    pytest.importorskip("uvicorn")
    from aiayn.cli.serve import main

    assert main([str(runs["translation"]), "--compile", "--port", "0"]) == 2  # refused before it listens
    assert "serve it without compile" in capsys.readouterr().err

    assert main([str(tmp_path), "--max-batch", "0"]) == 2
    assert "--max-batch must be >= 1" in capsys.readouterr().err
    assert main([str(tmp_path), "--port", "70000"]) == 2
    assert main([str(tmp_path / "nothing-here")]) == 2
    assert "aiayn serve: error:" in capsys.readouterr().err
