"""``aiayn serve``: a saved model behind HTTP, batched and streamed, with OpenAI's request and answer shapes.

    aiayn serve runs/lm-dates --port 8000            # pip install "aiayn[serve]"
    curl localhost:8000/v1/completions -d '{"prompt": "1 May", "max_tokens": 12, "temperature": 0}'

One process: the model is loaded once through :func:`aiayn.pipeline`, and runs on one worker thread while the
event loop parses and answers. Which endpoints exist follows the pipeline's task (:data:`ENDPOINTS`):

    app.py          the Starlette application: routes, request bodies, errors, streaming, draining
    schema.py       each endpoint's fields, checked; a wrong one is a 400 naming it (errors.py: the JSON shape)
    generation.py   continuous batching of a language model: rows join and leave at step boundaries
    batching.py     the bounded queue (503 when full) and micro-batching for the other tasks
    metrics.py      Prometheus' text: requests by status, tokens, batch sizes, queue depth, latency
    images.py       images read from the request's bytes, in memory
    memory.py       glibc's mmap threshold fixed, so resident memory stays flat under steady load

Serving writes nothing to disk. Nothing in the library imports this package; it needs the ``serve`` extra
(Starlette and uvicorn), which the core package does without.
"""

from aiayn.serve.app import ENDPOINTS, Settings, make_app

__all__ = ["ENDPOINTS", "Settings", "make_app"]
