"""What `attn-mt serve` tells its operator: a log line per request and Prometheus metrics at /metrics.

The log line (logger `attn_mt.serving.requests`, INFO) names the method, the route, the status,
the sentences decoded and the milliseconds taken, never the text:

    POST /translate 200 3 sentences 41.7 ms

The status is the one the client was sent: the app's answer; 408 when serving/connections.py's
protocol answered it because its body did not arrive in time; 499 (nginx's "client closed request")
when the client left before any answer; 500 only when the app itself failed.

`GET /metrics` answers Prometheus' text format (prometheus-client) from the server's own registry:

- `attn_mt_requests_total{route, status}` and `attn_mt_request_seconds{route}` (a histogram);
- `attn_mt_rejections_total{status}`: requests refused before or instead of decoding (401, 403,
  408, 413, 415, 429, 503);
- `attn_mt_sentences_total`: sentences (or scored pairs) decoded for answered requests;
- `attn_mt_queue_depth`: requests whose sentences wait for a batch (the batcher's queue), read when
  scraped from the `queue_depth` callable the app hands over; `attn_mt_queued_work`: their work
  (serving/admission.py's units, what --max-queued-work bounds); `attn_mt_decoder_work_per_second`:
  the decoding speed admission control works from (the warm-up batch's at start, then a running
  average of the batches');
- `attn_mt_decoder_batches_total`, `attn_mt_decoder_sentences_total`, `attn_mt_decoder_dropped_total`,
  `attn_mt_decoder_refused_total`, `attn_mt_decoder_expired_total`, `attn_mt_decoder_stopped_total`:
  the decoding worker's own counts (the batches, sentences, jobs given up because their client left
  before the answer, jobs refused because the queue was full, jobs given up because their deadline
  passed first, and batches stopped between two search steps); a job given up is counted once, as
  dropped or as expired.

A route is its path for the app's routes and `other` for anything else (a 404), so that a client
cannot create a time series per URL it invents.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from attn_mt.web.http import StatusOf

REJECTIONS = frozenset({401, 403, 408, 413, 415, 429, 503})
CLIENT_GONE = 499  # the status (nginx's "client closed request") of a request whose client left unanswered
PROTOCOL_STATUS = "attn_mt_protocol_status"  # in the scope's state: what the protocol itself answered
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)  # seconds
SENTENCES_KEY = "attn_mt_sentences"  # where a route leaves its decoded sentences in the request's state
request_log = logging.getLogger("attn_mt.serving.requests")


def note_sentences(state: Any, count: int) -> None:
    """Record on a request's state (Starlette's `request.state`) how many sentences it decoded."""
    setattr(state, SENTENCES_KEY, getattr(state, SENTENCES_KEY, 0) + count)


class WorkerCounts(Collector):
    """The decoding worker's counters, read when Prometheus scrapes."""

    def __init__(self, worker: Any):
        self.worker = worker

    def collect(self) -> Iterable[CounterMetricFamily]:
        for name, what in (
            ("batches", "Batches the decoding worker has decoded."),
            ("sentences", "Sentences (or pairs) the decoding worker has decoded."),
            ("dropped", "Jobs given up because their client left before the answer."),
            ("refused", "Jobs refused (503) because the queue held too much work."),
            ("expired", "Jobs given up because their deadline passed first."),
            ("stopped", "Batches stopped between two search steps (all their jobs gone)."),
        ):
            yield CounterMetricFamily(f"attn_mt_decoder_{name}", what, value=getattr(self.worker, name, 0))


class Metrics:
    """The server's registry and the metrics of the module docstring."""

    def __init__(self, queue_depth: Callable[[], float], worker: Any):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "attn_mt_requests",
            "Requests answered, by route and status.",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "attn_mt_request_seconds",
            "Time from a request's arrival to the end of its answer.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.rejections = Counter(
            "attn_mt_rejections",
            "Requests refused (401, 403, 408, 413, 415, 429, 503).",
            ["status"],
            registry=self.registry,
        )
        self.sentences = Counter(
            "attn_mt_sentences", "Sentences (or pairs) decoded for requests.", registry=self.registry
        )
        depth = Gauge("attn_mt_queue_depth", "Requests waiting for a batch.", registry=self.registry)
        depth.set_function(queue_depth)
        work = Gauge(
            "attn_mt_queued_work", "Work of the sentences waiting for a batch.", registry=self.registry
        )
        work.set_function(lambda: getattr(worker, "queued_work", 0))
        speed = Gauge(
            "attn_mt_decoder_work_per_second",
            "The decoding speed admission control works from, in work units a second.",
            registry=self.registry,
        )
        speed.set_function(lambda: getattr(worker, "work_per_s", 0))
        self.registry.register(WorkerCounts(worker))

    def observe(self, route: str, status: int, seconds: float, sentences: int) -> None:
        """Count one answered request."""
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)
        if status in REJECTIONS:
            self.rejections.labels(str(status)).inc()
        self.sentences.inc(sentences)

    def response(self) -> Response:
        """GET /metrics: the registry in Prometheus' text format."""
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


def route_of(scope: Scope, routes: frozenset[str], prefixes: tuple[str, ...]) -> str:
    """The route a request is counted under: its path when the app serves it, `other` otherwise."""
    path = scope["path"]
    if path in routes:
        return path
    return next((prefix + "*" for prefix in prefixes if path.startswith(prefix)), "other")


class RequestLog:
    """ASGI middleware, outermost: one log line and the metrics of every request, refusals included."""

    def __init__(
        self, app: ASGIApp, metrics: Metrics, routes: frozenset[str], prefixes: tuple[str, ...] = ()
    ):
        self.app, self.metrics, self.routes, self.prefixes = app, metrics, routes, prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state = scope.setdefault("state", {})
        disconnected = False

        async def receiving() -> Message:
            nonlocal disconnected
            message = await receive()
            disconnected = disconnected or message["type"] == "http.disconnect"
            return message

        sending = StatusOf(send)
        try:
            await self.app(scope, receiving, sending)
        finally:
            status = sending.status
            if status is None:  # answered by the protocol, or by no one
                status = state.get(PROTOCOL_STATUS) or (CLIENT_GONE if disconnected else 500)
            seconds = time.perf_counter() - start
            sentences = int(state.get(SENTENCES_KEY, 0))
            route = route_of(scope, self.routes, self.prefixes)
            self.metrics.observe(route, status, seconds, sentences)
            request_log.info(
                "%s %s %d %d sentences %.1f ms", scope["method"], route, status, sentences, seconds * 1000
            )
