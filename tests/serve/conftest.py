"""Tiny runs to serve, and servers on the loopback: each listens on 127.0.0.1 on a free port, in a thread of the
test process (or, for shutdown, in a child process), and is always stopped at the end."""

import contextlib
import dataclasses
import threading
import time

import pytest
import torch

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")

import aiayn  # noqa: E402
from aiayn import recipes  # noqa: E402

QUIET = {"progress": False, "verbose": False, "steps": 1, "warmup": 1, "eval_every": 0, "model": {"d_model": 32}}


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """A language model with random weights (its greedy text depends on the prompt, which a 1-step run's does not),
    a BERT, a translation run, an image classifier and a detector: one update each."""
    out = str(tmp_path_factory.mktemp("serve-runs"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lm = recipes.train("lm", n_train=50, n_test=5, block=16, batch_size=4, out=out, **QUIET)["run"]
        torch.manual_seed(3)
        cfg = dataclasses.replace(aiayn.load(lm).cfg, tie_output=False)
        aiayn.save(aiayn.build(cfg), lm)
        return {
            "lm": lm,
            "mlm": recipes.train("mlm", n_train=50, n_test=5, batch_size=4, out=out, **QUIET)["run"],
            "translation": recipes.train("copy", n_train=60, n_test=5, max_tokens=128, out=out, **QUIET)["run"],
            "image": recipes.train("image", n_train=16, n_test=8, batch_size=8, out=out, **QUIET)["run"],
            "detect": recipes.train("detect", image_size=48, max_objects=1, n_test=2, batch_size=2, out=out,
                                    **QUIET)["run"],
        }
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def serving(app, timeout=30.0):
    """Run ``app`` under uvicorn in a thread on 127.0.0.1, a free port; yield its base URL; stop it at the end."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        assert not thread.is_alive(), "the server did not stop"


@pytest.fixture
def serve():
    """``with serve(pipeline, **settings) as (url, app):`` a live server of the pipeline."""
    from aiayn.serve import Settings, make_app

    @contextlib.contextmanager
    def start(pipe, **settings):
        app = make_app(pipe, Settings(name="tiny", **settings))
        with serving(app) as url:
            yield url, app

    return start
