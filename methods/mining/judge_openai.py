"""An OpenAI-compatible chat endpoint as the false-negative judge (plain ``urllib``).

``POST <base_url>/chat/completions`` with the prompt as one user message, the sampling's
``temperature``/``top_p``, ``max_tokens`` and the per-call ``seed`` (servers that honour it, such as
vLLM, then answer reproducibly).  Transport failures, timeouts, 429 and 5xx are retried with
exponential backoff (``Retry-After`` honoured); other 4xx and malformed bodies are not.  A call that
still fails becomes vote -1 with its error.  Calls are spread over ``workers`` threads and spaced to
at most ``rate`` requests per second.  The API key is read from the environment variable named by
``api_key_env`` when it is set (local servers need none).
"""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness.errors import ConfigError
from methods.mining.judge import PromptJudge, Reply, Sampling

RETRY_STATUS = (408, 409, 429, 500, 502, 503, 504)


class RateLimiter:
    """At most ``rate`` acquisitions per second (evenly spaced), shared by threads."""

    def __init__(self, rate: float | None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.interval = 0.0 if not rate else 1.0 / rate
        self.clock, self.sleep = clock, sleep
        self._next = 0.0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        if not self.interval:
            return
        with self._lock:
            now = self.clock()
            wait = self._next - now
            self._next = max(now, self._next) + self.interval
        if wait > 0:
            self.sleep(wait)


class OpenAIJudge(PromptJudge):
    def __init__(self, base_url: str, model: str, *, max_tokens: int = 8, timeout: float = 60.0, retries: int = 4,
                 backoff: float = 1.0, max_backoff: float = 60.0, rate: float | None = None, workers: int = 4,
                 api_key_env: str = "OPENAI_API_KEY", sleep: Callable[[float], None] = time.sleep):
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"judge endpoint must be an http(s) URL, got {base_url!r}")
        if not model:
            raise ConfigError("the openai judge needs a model name (openai:<url>#<model>)")
        if retries < 0 or workers < 1 or timeout <= 0 or (rate is not None and rate <= 0):
            raise ConfigError("openai judge: retries >= 0, workers >= 1, timeout > 0 and rate > 0 are required")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.max_tokens, self.timeout = model, max_tokens, timeout
        self.retries, self.backoff, self.max_backoff, self.workers = retries, backoff, max_backoff, workers
        self.limiter = RateLimiter(rate, sleep=sleep)
        self.sleep = sleep
        self.api_key = os.environ.get(api_key_env) if api_key_env else None
        self.requests = 0     # HTTP requests sent, retries included

    def identity(self) -> dict[str, Any]:
        # The endpoint and model name stand for the model; pin a served version in the name.
        return {"backend": "openai", "url": self.url, "model": self.model, "max_tokens": self.max_tokens}

    def complete(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int]) -> list[Reply]:
        def one(args: tuple[str, int]) -> Reply:
            return self._call(*args, sampling)

        if self.workers == 1 or len(prompts) == 1:
            return [one(a) for a in zip(prompts, seeds)]
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(one, zip(prompts, seeds)))

    def _request(self, body: bytes) -> urllib.request.Request:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return urllib.request.Request(self.url, data=body, headers=headers, method="POST")

    def _call(self, prompt: str, seed: int, sampling: Sampling) -> Reply:
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": prompt}],
                           "temperature": sampling.temperature, "top_p": sampling.top_p,
                           "max_tokens": self.max_tokens, "seed": seed % (2**31)}).encode("utf-8")
        error, wait = "no attempt", None   # wait: a server's Retry-After, else exponential backoff
        for attempt in range(self.retries + 1):
            if attempt:
                self.sleep(min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) if wait is None else wait)
            wait = None
            self.limiter.acquire()
            self.requests += 1
            try:
                with urllib.request.urlopen(self._request(body), timeout=self.timeout) as resp:
                    payload = resp.read()
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code} from {self.url}"
                if exc.code not in RETRY_STATUS:
                    return Reply(-1, error=error)
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
                wait = float(retry_after) if retry_after and retry_after.replace(".", "", 1).isdigit() else None
                continue
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                error = f"{type(exc).__name__} calling {self.url}: {getattr(exc, 'reason', exc)}"
                continue
            try:
                text = json.loads(payload)["choices"][0]["message"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                return Reply(-1, error=f"malformed reply from {self.url}: {payload[:200]!r}")
            return Reply(-1, text=text if isinstance(text, str) else "")
        return Reply(-1, error=f"{error} (after {self.retries + 1} attempts)")
