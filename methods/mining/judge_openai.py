"""An OpenAI-compatible chat endpoint as the false-negative judge (plain ``urllib``).

``POST <base_url>/chat/completions`` with the prompt as one user message, the sampling's
``temperature``/``top_p``, ``max_tokens`` and the per-call ``seed`` (servers that honour it, such as
vLLM, then answer reproducibly).  Transport failures, timeouts, 429 and 5xx are retried with
exponential backoff (``Retry-After`` honoured); other 4xx and malformed bodies are not.  A call that
still fails becomes vote -1 with its error.  Calls are spread over ``workers`` threads and spaced to
at most ``rate`` requests per second.  The API key is read from the environment variable named by
``api_key_env`` when it is set (local servers need none).

The key never leaves the endpoint's origin: redirects are not followed (a 3xx answer raises
:class:`JudgeRedirectError`, naming only the origin it pointed to, and nothing is sent there), the
``Authorization`` header is an unredirected one besides, and the key appears in no ``repr``, error or
log line.  A base URL with ``user:password@`` in it is refused (credentials go in the environment).
"""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from harness.errors import ConfigError
from methods.mining.judge import PromptJudge, Reply, Sampling

RETRY_STATUS = (408, 409, 429, 500, 502, 503, 504)


class JudgeRedirectError(ConfigError):
    """The judge endpoint answered with a redirect, which is never followed (credentials stay home)."""


class _Secret:
    """A credential that shows in no ``repr``/``str`` (tracebacks, logs, ``vars()`` dumps)."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follow no redirect: a 3xx reaches the caller as an :class:`urllib.error.HTTPError`."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: Any, newurl: str) -> None:
        return None


def _redact(url: str) -> str:
    """The URL with any ``user:password@`` replaced by ``***@``."""
    head, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    if sep and "@" in netloc:
        return f"{head}://***@{netloc.rpartition('@')[2]}{slash}{tail}"
    return url


def origin(url: str) -> str:
    """``scheme://host:port`` of a URL (no user info, path or query), default ports filled in."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    scheme = parts.scheme.lower()
    port = port or {"http": 80, "https": 443}.get(scheme)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port else "")


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
            raise ConfigError(f"judge endpoint must be an http(s) URL, got {_redact(base_url)!r}")
        if "@" in urllib.parse.urlsplit(base_url).netloc:
            raise ConfigError(f"judge endpoint {_redact(base_url)}: credentials in the URL are refused; "
                              f"put the API key in the environment variable {api_key_env or 'OPENAI_API_KEY'}")
        if not model:
            raise ConfigError("the openai judge needs a model name (openai:<url>#<model>)")
        if retries < 0 or workers < 1 or timeout <= 0 or (rate is not None and rate <= 0):
            raise ConfigError("openai judge: retries >= 0, workers >= 1, timeout > 0 and rate > 0 are required")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.max_tokens, self.timeout = model, max_tokens, timeout
        self.retries, self.backoff, self.max_backoff, self.workers = retries, backoff, max_backoff, workers
        self.limiter = RateLimiter(rate, sleep=sleep)
        self.sleep = sleep
        key = os.environ.get(api_key_env) if api_key_env else None
        self._api_key = _Secret(key) if key else None
        self._opener = urllib.request.build_opener(_NoRedirect)
        self.requests = 0     # HTTP requests sent, retries included

    @property
    def has_api_key(self) -> bool:
        return self._api_key is not None

    def __repr__(self) -> str:
        return (f"OpenAIJudge(url={self.url!r}, model={self.model!r}, "
                f"api_key={'<secret>' if self._api_key else None})")

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
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"},
                                     method="POST")
        if self._api_key is not None:
            # unredirected: urllib would not copy it onto a redirect even if one were followed
            req.add_unredirected_header("Authorization", f"Bearer {self._api_key.reveal()}")
        return req

    def _redirect_error(self, code: int, location: str | None) -> JudgeRedirectError:
        target = origin(urllib.parse.urljoin(self.url, location)) if location else "no Location given"
        same = " (the same origin: fix the base URL's path or scheme)" if location and target == origin(self.url) \
            else ""
        return JudgeRedirectError(f"judge endpoint {self.url} redirected (HTTP {code}) to {target}{same}; "
                                  "redirects are not followed: the request and its credentials were not sent "
                                  "there (point the judge at the final URL)")

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
                with self._opener.open(self._request(body), timeout=self.timeout) as resp:
                    payload = resp.read()
            except urllib.error.HTTPError as exc:
                if 300 <= exc.code < 400:
                    location = exc.headers.get("Location") if exc.headers else None
                    exc.close()
                    raise self._redirect_error(exc.code, location) from None
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
