"""The server's counters, in Prometheus' text format (``GET /metrics``), kept without the Prometheus client:

    aiayn_requests_total{endpoint="/v1/completions",status="200"} 31
    aiayn_tokens_total{kind="prompt"} 412
    aiayn_tokens_total{kind="completion"} 2048
    aiayn_batch_size_bucket{le="8"} 90         # rows decoded together, one observation per step (or batch)
    aiayn_queue_depth 3                        # rows or inputs waiting to be batched
    aiayn_active_rows 16                       # rows being decoded now
    aiayn_request_seconds_bucket{endpoint="/v1/completions",le="0.5"} 12

Counters only grow; the histograms are cumulative, as Prometheus' are. The worker thread and the event loop both
write here, so every write takes the one lock.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    """Counts of observations at or below each bucket's upper bound, their sum and their number."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets, self.counts, self.sum, self.count = buckets, [0] * len(buckets), 0.0, 0

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.counts):
            self.counts[i] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str = "") -> list[str]:
        out, total = [], 0
        for bound, n in zip(self.buckets, self.counts):
            total += n
            out.append(f'{name}_bucket{{{labels}le="{bound:g}"}} {total}')
        tail = f"{{{labels.rstrip(',')}}}" if labels else ""
        return out + [f'{name}_bucket{{{labels}le="+Inf"}} {self.count}', f"{name}_sum{tail} {self.sum:.6f}",
                      f"{name}_count{tail} {self.count}"]


class Metrics:
    """What ``/metrics`` reports: requests by endpoint and status, tokens, batch sizes, queue depth, latency."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.tokens: dict[str, int] = defaultdict(int)
        self.batch = Histogram(BATCH_BUCKETS)
        self.latency: dict[str, Histogram] = {}
        self.queue_depth = 0
        self.active_rows = 0

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        """One answered request (or one refused: a 4xx or 503 counts too) and how long it took."""
        with self._lock:
            self.requests[endpoint, status] += 1
            self.latency.setdefault(endpoint, Histogram(SECONDS_BUCKETS)).observe(seconds)

    def count_tokens(self, prompt: int = 0, completion: int = 0) -> None:
        with self._lock:
            self.tokens["prompt"] += prompt
            self.tokens["completion"] += completion

    def batched(self, rows: int) -> None:
        """One step of the generation batch, or one micro-batch, of ``rows`` rows."""
        with self._lock:
            self.batch.observe(rows)

    def gauges(self, queue_depth: int, active_rows: int) -> None:
        with self._lock:
            self.queue_depth, self.active_rows = queue_depth, active_rows

    def text(self) -> str:
        """Everything, in Prometheus' text exposition format (version 0.0.4)."""
        with self._lock:
            lines = ["# HELP aiayn_requests_total Requests answered, by endpoint and HTTP status.",
                     "# TYPE aiayn_requests_total counter"]
            lines += [f'aiayn_requests_total{{endpoint="{e}",status="{s}"}} {n}'
                      for (e, s), n in sorted(self.requests.items())]
            lines += ["# HELP aiayn_tokens_total Prompt tokens read and completion tokens made.",
                      "# TYPE aiayn_tokens_total counter"]
            lines += [f'aiayn_tokens_total{{kind="{k}"}} {self.tokens[k]}' for k in ("prompt", "completion")]
            lines += ["# HELP aiayn_batch_size Rows run together: per generation step, or per micro-batch.",
                      "# TYPE aiayn_batch_size histogram", *self.batch.lines("aiayn_batch_size")]
            lines += ["# HELP aiayn_queue_depth Rows or inputs waiting to join a batch.",
                      "# TYPE aiayn_queue_depth gauge", f"aiayn_queue_depth {self.queue_depth}",
                      "# HELP aiayn_active_rows Rows being decoded now.", "# TYPE aiayn_active_rows gauge",
                      f"aiayn_active_rows {self.active_rows}",
                      "# HELP aiayn_request_seconds Time from a request's arrival to its last byte.",
                      "# TYPE aiayn_request_seconds histogram"]
            for endpoint, h in sorted(self.latency.items()):
                lines += h.lines("aiayn_request_seconds", f'endpoint="{endpoint}",')
        return "\n".join(lines) + "\n"


__all__ = ["Metrics"]
