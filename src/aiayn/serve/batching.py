"""Micro-batching: the requests that arrive within ``max_wait`` seconds of each other run through the pipeline
as one batch, up to ``max_batch`` inputs; the model runs on one worker thread, the event loop only queues.

    event loop (HTTP)                      worker thread (the model)
    ---------------------                  --------------------------------------------------------
    parse, check -> Waiting.offer  --->    take: wait for a first job, then up to max_wait for more
          |  full: 503 Retry-After          group the jobs by key (beam size, top): one call per group
    await the answer  <-------------       the pipeline's method on the group's inputs, split back

:class:`Waiting` is the bounded queue both batchers share (this one and the continuous one of
:mod:`aiayn.serve.generation`): it counts inputs (texts, images, prompts), not requests, so one request of many
inputs weighs what many requests of one do. A group whose call fails on a bad input is run again one job at a
time, so only the request that sent it gets the error.
"""

from __future__ import annotations

import abc
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from aiayn.serve.metrics import Metrics


class Waiting:
    """A bounded FIFO queue of entries, each weighing its number of inputs; the event loop offers, a worker takes.

    Args:
        limit: the inputs it may hold (``--max-queue``); an offer past it is refused whole.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_queue must be >= 1, got {limit}")
        self.limit = limit
        self._entries: deque[tuple[Any, int]] = deque()
        self._size = 0
        self._closed = False
        self._ready = threading.Condition()

    def __len__(self) -> int:
        """The inputs waiting."""
        return self._size

    def offer(self, entries: list[tuple[Any, int]]) -> bool:
        """Queue ``(entry, weight)`` pairs together, or none of them (``False``: full or closed)."""
        weight = sum(w for _, w in entries)
        with self._ready:
            if self._closed or self._size + weight > self.limit:
                return False
            self._entries.extend(entries)
            self._size += weight
            self._ready.notify()
        return True

    def take(self, most: int, block: bool, gather: float,
             admit: Callable[[list[Any], Any], bool] | None = None) -> list[Any] | None:
        """Entries from the front, in order, while their weights sum to at most ``most`` (the first one always,
        when ``most`` > 0) and ``admit(taken, next)`` agrees.

        Args:
            block: wait for a first entry (an idle worker); else take only what is there (a busy one).
            gather: after the first entry, wait up to this many seconds for more, until ``most`` is reached.

        Returns:
            The entries; ``None`` once the queue is closed and empty (the worker then stops).
        """
        taken: list[Any] = []
        weight = 0
        deadline = None
        with self._ready:
            while True:
                while self._entries and most > 0:
                    entry, w = self._entries[0]
                    if (taken and weight + w > most) or (admit is not None and not admit(taken, entry)):
                        return taken
                    self._entries.popleft()
                    self._size -= w
                    taken.append(entry)
                    weight += w
                    if weight >= most:
                        return taken
                if self._closed:
                    return taken or (None if block else [])
                if not block or most <= 0:
                    return taken
                if not taken:
                    self._ready.wait()
                    continue
                deadline = deadline or time.monotonic() + gather
                left = deadline - time.monotonic()
                if left <= 0:
                    return taken
                self._ready.wait(left)

    def close(self) -> None:
        """Take no more offers; :meth:`take` hands out what is left, then ``None``."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()


class Worker(abc.ABC):
    """A thread that runs the model on what :class:`Waiting` holds; subclasses write :meth:`loop`."""

    def __init__(self, max_batch: int, max_wait: float, max_queue: int, metrics: Metrics) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_wait < 0:
            raise ValueError(f"max_wait must be >= 0 seconds, got {max_wait}")
        self.max_batch, self.max_wait, self.metrics = max_batch, max_wait, metrics
        self.waiting = Waiting(max_queue)
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self._prepared = threading.Event()
        self._failed: BaseException | None = None

    def start(self) -> None:
        """Start the thread (once: a later call only waits) and wait until it has run :meth:`prepare`; raise what
        that raised."""
        if not self._thread.is_alive() and not self._prepared.is_set():
            self._thread.start()
        self._prepared.wait()
        if self._failed is not None:
            raise self._failed

    def stop(self, timeout: float | None = None) -> None:
        """Take no new work, finish what was taken and queued, and end the thread."""
        self.waiting.close()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        import torch

        with torch.inference_mode():
            try:
                self.prepare()
            except BaseException as e:  # handed to start(), on the thread that waits for it
                self._failed = e
                return
            finally:
                self._prepared.set()
            self.loop()

    def prepare(self) -> None:
        """What the thread does before it takes work (on the worker thread, in inference mode, as :meth:`loop`):
        nothing here; a compiled step is warmed here, where it will run (CUDA graph trees keep their state per
        thread: a step recorded on another thread would be recorded again, its memory twice)."""
        return

    @abc.abstractmethod
    def loop(self) -> None:
        """Take work from :attr:`waiting` until it is closed and empty (on the worker thread)."""


@dataclass(eq=False)
class Job:
    """One request's inputs for a micro-batch, and where its answer goes.

    ``key``: jobs with equal keys share a call (a translation's beam size, a classifier's ``top``). ``reply`` is
    called on the worker thread with the list of results, one per input, or with the exception that refused them.
    """

    inputs: list[Any]
    key: Hashable
    reply: Callable[[list[Any] | BaseException], None]
    cancelled: bool = False


class MicroBatcher(Worker):
    """Runs ``call(key, inputs) -> results`` (one result per input) on batches of jobs.

    Args:
        call: the pipeline's method for the task, on the inputs of every job of one key.
        max_batch: inputs per call, at most (a single job larger than that runs alone).
        max_wait: seconds to wait after a first job for others to join it.
        max_queue: inputs that may wait.
    """

    def __init__(self, call: Callable[[Any, list[Any]], list[Any]], max_batch: int, max_wait: float,
                 max_queue: int, metrics: Metrics) -> None:
        super().__init__(max_batch, max_wait, max_queue, metrics)
        self.call = call

    def submit(self, job: Job) -> bool:
        """Queue ``job``; ``False`` when the queue is full (answer 503)."""
        ok = self.waiting.offer([(job, len(job.inputs))])
        self.metrics.gauges(len(self.waiting), 0)
        return ok

    def loop(self) -> None:
        while (jobs := self.waiting.take(self.max_batch, block=True, gather=self.max_wait)) is not None:
            self.metrics.gauges(len(self.waiting), sum(len(j.inputs) for j in jobs))
            groups: dict[Hashable, list[Job]] = {}
            for job in jobs:
                if not job.cancelled:
                    groups.setdefault(job.key, []).append(job)
            for key, group in groups.items():
                self._call(key, group)
            self.metrics.gauges(len(self.waiting), 0)

    def _call(self, key: Hashable, group: list[Job]) -> None:
        """One call for the group; if it fails and holds several jobs, each job alone (so one bad input fails
        only its own request)."""
        inputs = [x for job in group for x in job.inputs]
        try:
            results = self.call(key, inputs)
        except Exception as e:
            if len(group) > 1:
                for job in group:
                    self._call(key, [job])
            else:
                group[0].reply(e)
            return
        self.metrics.batched(len(inputs))
        start = 0
        for job in group:
            job.reply(list(results[start : start + len(job.inputs)]))
            start += len(job.inputs)


__all__ = ["Job", "MicroBatcher", "Waiting", "Worker"]
