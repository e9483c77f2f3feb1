"""``aiayn serve RUN_OR_FOLDER_OR_ID``: arguments -> :func:`aiayn.pipeline` and :class:`aiayn.serve.Settings`,
then uvicorn on :func:`aiayn.serve.make_app`. SIGTERM (or Ctrl-C) stops taking requests, finishes those in
flight and exits 0.

    aiayn serve runs/lm-dates --port 8000 --max-batch 16 --max-wait-ms 50 --max-queue 256
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Any

from aiayn.cli.flags import DEVICE_HELP, DTYPE_HELP, INT8_HELP
from aiayn.defaults import DTYPES, MAX_WAIT_MS, SERVING

MISSING = "aiayn serve needs Starlette and uvicorn: pip install 'aiayn[serve]'"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``serve`` to the ``aiayn`` command's subparsers ``sub``; returns its parser."""
    p = sub.add_parser("serve", help="a model behind HTTP: OpenAI-compatible completions (streamed, continuously "
                                     "batched) and embeddings, translations, classifications, detections")
    p.add_argument("source", metavar="RUN_OR_FOLDER_OR_ID",
                   help="a run folder, a Hugging Face folder or model id (what aiayn.pipeline loads)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free one, printed)")
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument("--int8", action="store_true", help=INT8_HELP)
    p.add_argument("--dtype", choices=DTYPES, default=None, help=DTYPE_HELP)
    p.add_argument("--max-len", type=int, default=None,
                   help="a completion's prompt and new tokens, at most (default: the model's positions); with "
                        "--compile each slot's columns, which every step reads whole: keep it near what requests need")
    p.add_argument("--compile", action="store_true", help="a language model decodes over a static cache of "
                   "--max-batch slots with a torch.compile'd step, compiled before the server listens")
    p.add_argument("--max-batch", type=int, default=SERVING["max_batch"],
                   help="rows (generation) or inputs run together, at most")
    p.add_argument("--max-wait-ms", type=float, default=SERVING["max_wait_ms"],
                   help="how long a first request waits for others to batch with, when the model is idle")
    p.add_argument("--max-queue", type=int, default=SERVING["max_queue"],
                   help="rows or inputs that may wait; past it, 503 with Retry-After")
    p.add_argument("--max-inputs", type=int, default=SERVING["max_inputs"],
                   help="prompts, texts or images in one request, at most")
    p.add_argument("--name", default=None, help="the model's name in /v1/models and requests' model field "
                                                "(default: the folder's name, or the model id)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level")
    return p


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or Ctrl-C; 0 after a clean stop, 2 for bad arguments or a missing extra."""
    for flag in ("max_batch", "max_queue", "max_inputs"):
        if getattr(args, flag) < 1:
            return _refuse(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if not (math.isfinite(args.max_wait_ms) and 0 <= args.max_wait_ms <= MAX_WAIT_MS):
        return _refuse(f"--max-wait-ms must be a number of milliseconds in [0, {MAX_WAIT_MS}], got {args.max_wait_ms}")
    if not 0 <= args.port < 65536:
        return _refuse(f"--port must be in [0, 65535], got {args.port}")
    try:
        import uvicorn

        from aiayn.serve import Settings, make_app
    except ImportError:
        return _refuse(MISSING)
    from aiayn.pipelines import pipeline
    from aiayn.serve.memory import fix_mmap_threshold

    fix_mmap_threshold()  # before the model's tensors: resident memory stays flat under load

    pipe = pipeline(args.source, device=args.device, quantize="int8" if args.int8 else None,
                    compile=args.compile, dtype=args.dtype)
    try:
        settings = Settings(name=args.name or _name(args.source), max_batch=args.max_batch,
                            max_wait_ms=args.max_wait_ms, max_queue=args.max_queue, max_inputs=args.max_inputs,
                            max_len=args.max_len)
        app = make_app(pipe, settings)
    except ValueError as e:  # a setting refused by the server: named by its flag
        return _refuse(re.sub(r"\b(max_batch|max_wait_ms|max_queue|max_inputs|max_len)\b",
                              lambda m: "--" + m.group(1).replace("_", "-"), str(e)))
    try:  # the worker's thread, and its compiled step warmed there, before listening (the lifespan's start waits)
        app.state.server.worker.start()
    except Exception as e:  # a compiler that fails: say so and exit non-zero, not a server without a worker
        print(f"aiayn serve: error: the worker did not start: {type(e).__name__}: {e}", file=sys.stderr)
        return 1

    class Server(uvicorn.Server):
        """uvicorn's server, that drains on a signal (new requests: 503) and says where it listens."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.draining = True
            super().handle_exit(sig, frame)
            if hasattr(self, "_captured_signals"):  # a drained stop is a clean one: exit 0, not by the signal
                self._captured_signals.clear()

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            for server in getattr(self, "servers", []):
                for sock in server.sockets:
                    host, port = sock.getsockname()[:2]
                    print(f"aiayn serve: {settings.name} ({pipe.task}) on http://{host}:{port}", flush=True)

    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, lifespan="on",
                            timeout_graceful_shutdown=None)
    Server(config).run()
    return 0


def _name(source: str) -> str:
    """A folder's name, or a model id as given."""
    path = Path(source)
    return path.resolve().name if path.is_dir() else source


def _refuse(message: str) -> int:
    print(f"aiayn serve: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """``aiayn serve`` on its own (``python -m aiayn.cli.serve ARGS``): the same flags, for scripts and tests."""
    parser = argparse.ArgumentParser(prog="aiayn")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run(args)
    except (ValueError, OSError) as e:
        return _refuse(str(e))


if __name__ == "__main__":
    sys.exit(main())
