"""Any OpenAI-compatible chat server (vLLM serve, TGI, Ollama, llama.cpp) over async HTTP.

Bounded concurrency, retries with exponential backoff on connection errors,
timeouts, 429 and 5xx (a ``Retry-After`` header sets the wait), then the
request's row gets ``status=error`` while the others are kept; a malformed
response is an error of its row only. Before any row, ``OpenAIBackend.preflight``
checks that the server is reachable, accepts the credentials, serves the model
and returns log-probabilities when they are needed (``JudgeUnavailable``
otherwise), so a misconfigured job stops at once instead of failing every row.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import warnings
from typing import Optional, Sequence

from .._errors import JobError, OptionError
from .._optional import require
from ._backend import JudgeBackend, JudgeOutput, Sampling
from ._backend_options import ServerOptions
from ._prompts import JudgeRequest

__all__ = ["OpenAIBackend", "LogprobsUnsupported", "JudgeUnavailable"]

_MAX_RETRY_AFTER = 120.0


MAX_RESPONSE_BYTES = 16 * 2**20
_NO_LOGPROBS = "judge server: the response carries no token log-probabilities (an error body or logprobs: null)"


class LogprobsUnsupported(RuntimeError):
    """The server answered without log-probabilities."""


class JudgeUnavailable(JobError):
    """The judge server cannot serve this job (unreachable, unauthorised, model missing)."""


def _retry_after(headers, cap: float = _MAX_RETRY_AFTER) -> Optional[float]:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), at most ``cap``; None when absent."""
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        return min(cap, max(0.0, float(value)))
    except ValueError:
        pass
    try:
        import email.utils

        when = email.utils.parsedate_to_datetime(value).timestamp()
        return min(cap, max(0.0, when - time.time()))
    except (TypeError, ValueError, OverflowError):
        return None


class OpenAIBackend(JudgeBackend):
    """Judge through ``POST {base_url}/chat/completions``, on one server or a fleet of them.

    With several URLs, requests go round-robin over the endpoints that are up; an endpoint that fails a
    request (connection error, timeout, 408/409/429/5xx, or an answer that is not a chat completion, such as
    a proxy's HTML page; a single server's malformed answer fails its row only) is backed off (1 s, doubling to 30 s, or its ``Retry-After``) and the request is
    retried on another, so a server killed mid-run costs no row. ``max_qps`` caps the requests started per
    second across the fleet.

    Time is bounded: a row gives up after ``timeout x (max_retries + 1)`` seconds in all, its waits for a
    ``Retry-After`` (each at most ``max_retry_after``) or for an endpoint to come back included; and when no
    endpoint has answered for ``stall_timeout`` seconds while every one is backed off, the backend raises
    ``JudgeUnavailable``, which stops the job (exit 1, finished shards kept for ``--resume``) instead of
    failing row after row.

    Args:
        model: the model name the server expects.
        base_url: e.g. ``http://127.0.0.1:8000/v1``, or a list of such URLs (a fleet serving the same model).
        api_key: bearer token (default ``$OPENAI_API_KEY``; none for local servers).
        concurrency: requests in flight.
        timeout: seconds per request.
        max_retries: retries per request after the first try.
        backoff: first retry delay in seconds (doubled each retry, with jitter).
        max_qps: requests started per second, over all endpoints (default: no cap).
        max_retry_after: the longest wait a server's ``Retry-After`` gets, in seconds.
        stall_timeout: seconds with every endpoint down and none answering before the job stops.
    """

    name = "openai"

    def __init__(
        self,
        model: Optional[str] = None,
        *,
        base_url=None,
        api_key: Optional[str] = None,
        concurrency: int = 16,
        request_timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_qps: Optional[float] = None,
        max_retry_after: float = 30.0,
        stall_timeout: float = 300.0,
    ) -> None:
        require("httpx", "openai", "the OpenAI-compatible judge backend")
        if not model:
            raise OptionError("the openai backend needs the server's model name: --judge-model NAME")
        if not base_url:
            raise OptionError("the openai backend needs the server address: --base-url http://HOST:PORT/v1")
        # the limits are the command line's, checked in one place
        ServerOptions(
            max_qps=max_qps,
            concurrency=concurrency,
            request_timeout=request_timeout,
            max_retries=max_retries,
            max_retry_after=max_retry_after,
        )
        if not stall_timeout > 0:
            raise OptionError(f"`stall_timeout` must be > 0 seconds, got {stall_timeout}")
        self.max_retry_after, self.stall_timeout = float(max_retry_after), float(stall_timeout)
        self._all_down_since: Optional[float] = None  # when every endpoint was last found backed off at once
        self._last_error = ""
        self.model = model
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self.base_urls = list(dict.fromkeys(u.rstrip("/") for u in urls if u))
        self.base_url = self.base_urls[0]
        self.max_qps = max_qps
        self._down = {u: (0.0, 0) for u in self.base_urls}  # url -> (backed off until, failures in a row)
        self._turn = 0
        self._next_start = 0.0
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.concurrency, self.timeout, self.max_retries, self.backoff = (
            concurrency,
            request_timeout,
            max_retries,
            backoff,
        )
        self.supports_logprobs = True
        self._seen_logprobs = False  # some response carried log-probs: the server has them
        self.calls = 0
        self.stats = {"prompt_tokens": 0, "generated_tokens": 0}  # from the servers' `usage`, when they send it

    @property
    def model_id(self) -> str:
        return f"openai:{'|'.join(sorted(self.base_urls))}::{self.model}"

    @property
    def cache_id(self) -> str:
        return f"openai::{self.model}"  # the served model's name; the endpoints are where, not what

    def _pick(self) -> tuple:
        """``(url, seconds to wait)``: the next endpoint that is up, round-robin; else the one back soonest.

        Raises:
            JudgeUnavailable: every endpoint has been down, none answering, for ``stall_timeout`` seconds.
        """
        now = time.monotonic()
        up = [u for u in self.base_urls if self._down[u][0] <= now]
        if up:
            self._turn += 1
            return up[self._turn % len(up)], 0.0
        if self._all_down_since is None:
            self._all_down_since = now
        elif now - self._all_down_since > self.stall_timeout:
            which = (
                "the judge server" if len(self.base_urls) == 1 else f"any of the {len(self.base_urls)} judge servers"
            )
            raise JudgeUnavailable(
                f"no answer from {which} for {self.stall_timeout:g} s (--stall-timeout; last: {self._last_error}); "
                "stopping: the finished shards are kept for --resume"
            )
        url = min(self.base_urls, key=lambda u: self._down[u][0])
        return url, self._down[url][0] - now

    def _mark(self, url: str, ok: bool, retry_after: Optional[float] = None) -> None:
        if ok:
            self._down[url] = (0.0, 0)
            self._all_down_since = None
            return
        fails = self._down[url][1] + 1
        pause = retry_after if retry_after is not None else min(30.0, self.backoff * 2**fails)
        self._down[url] = (time.monotonic() + pause, fails)

    async def _throttle(self) -> None:
        if self.max_qps:
            now = time.monotonic()
            start = max(now, self._next_start)
            self._next_start = start + 1.0 / self.max_qps
            if start > now:
                await asyncio.sleep(start - now)

    def build_payload(
        self,
        req: JudgeRequest,
        *,
        max_tokens: int,
        temperature: float,
        top_k: Optional[int],
        seed: Optional[int],
        stop: Optional[list] = None,
    ) -> dict:
        body = {"model": self.model, "messages": req.messages(), "max_tokens": max_tokens, "temperature": temperature}
        if stop:
            body["stop"] = list(stop)
        if top_k:
            body.update(logprobs=True, top_logprobs=top_k)
        if seed is not None:
            body["seed"] = seed
        return body

    @staticmethod
    def parse_logprobs(response: dict) -> list:
        """First token's top log-probs from a chat-completions response; raises if absent.

        An empty ``top_logprobs`` gives an empty list (the row is then unscored): the sampled
        token alone says nothing about the other answer's probability.
        """
        try:
            content = response["choices"][0]["logprobs"]["content"]
            first = content[0]
        except (KeyError, IndexError, TypeError):
            raise LogprobsUnsupported("the response carries no token log-probabilities") from None
        top = first.get("top_logprobs") or []
        return [(str(t["token"]), float(t["logprob"])) for t in top]

    @staticmethod
    def parse_text(response: dict) -> str:
        content = response["choices"][0]["message"].get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError(f"message content is {type(content).__name__}, not text")
        return content or ""

    # ----------------------------------------------------------------- preflight

    def preflight(self, *, logprobs: bool) -> None:
        """One cheap round trip per endpoint before any row: reachable, authorised, model served, log-probs
        when needed. In a fleet an endpoint that fails is backed off with a warning while one passes.

        Raises:
            JudgeUnavailable: what is wrong, in one line (of the first endpoint, when none passes).
            LogprobsUnsupported: ``logprobs`` is needed and a server returns none.
        """
        failures = []
        for url in self.base_urls:
            try:
                self._preflight_one(url, logprobs)
            except JudgeUnavailable as exc:
                failures.append(exc)
                self._mark(url, False, retry_after=30.0)
        if len(failures) == len(self.base_urls):
            raise failures[0]
        for failure in failures:
            warnings.warn(f"{failure}; that endpoint is skipped until it answers", stacklevel=2)

    def _preflight_one(self, where: str, logprobs: bool) -> None:
        import httpx

        try:
            with httpx.Client(timeout=self.timeout, headers=self._headers()) as client:
                r = client.get(f"{where}/models")
                if r.status_code in (401, 403):
                    raise JudgeUnavailable(
                        f"judge server {where} refused the credentials (HTTP {r.status_code}); "
                        "set --api-key or $OPENAI_API_KEY"
                    )
                if r.status_code == 200:
                    try:
                        served = [m.get("id") for m in r.json().get("data", [])]
                    except (ValueError, AttributeError):
                        served = None
                    if served and self.model not in served:
                        raise JudgeUnavailable(
                            f"judge server {where} does not serve model {self.model!r}; it serves: "
                            f"{', '.join(map(str, served[:10]))}"
                        )
                body = {
                    "model": self.model,
                    "messages": [{"role": "user", "content": "Answer YES or NO: is 2 > 1?"}],
                    "max_tokens": 1,
                    "temperature": 0.0,
                }
                if logprobs:
                    body.update(logprobs=True, top_logprobs=5)
                delay = self.backoff
                for attempt in range(self.max_retries + 1):  # a busy server is not a broken one
                    r = client.post(f"{where}/chat/completions", json=body)
                    if not (r.status_code in (408, 409, 429) or r.status_code >= 500) or attempt == self.max_retries:
                        break
                    wait = _retry_after(r.headers)
                    time.sleep(wait if wait is not None else delay)
                    delay *= 2
        except httpx.HTTPError as exc:
            raise JudgeUnavailable(
                f"cannot reach judge server {where} ({type(exc).__name__}: {exc}); "
                "check --base-url and that the server is running"
            ) from None
        if r.status_code in (401, 403):
            raise JudgeUnavailable(f"judge server {where} refused the credentials (HTTP {r.status_code})")
        if r.status_code == 404:
            raise JudgeUnavailable(
                f"judge server {where} has no /chat/completions (HTTP 404): is --base-url the "
                "OpenAI-compatible root, e.g. http://HOST:PORT/v1?"
            )
        if logprobs and r.status_code == 400 and "logprob" in r.text.lower():
            self.supports_logprobs = False
            raise LogprobsUnsupported(f"judge server {where} rejects logprobs: {r.text[:200]}")
        if r.status_code >= 400:
            raise JudgeUnavailable(f"judge server {where} failed a test request (HTTP {r.status_code}: {r.text[:200]})")
        try:
            data = r.json()
            self.parse_text(data)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise JudgeUnavailable(
                f"judge server {where} answered a test request with a malformed response ({exc})"
            ) from None
        if logprobs:
            try:
                self.parse_logprobs(data)
            except LogprobsUnsupported:
                self.supports_logprobs = False
                raise LogprobsUnsupported(f"judge server {where} returns no log-probabilities") from None
            self._seen_logprobs = True

    def _headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    async def _request(self, client, url: str, body: dict):
        """POST ``body``; the answer is read at most ``MAX_RESPONSE_BYTES`` far (a chat completion with
        top-20 log-probs is a few kB)."""
        import httpx

        async with client.stream("POST", url, json=body) as r:
            chunks, size = [], 0
            async for chunk in r.aiter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise httpx.DecodingError(
                        f"the answer exceeds {MAX_RESPONSE_BYTES // 2**20} MiB; refusing to read more"
                    )
                chunks.append(chunk)
        return httpx.Response(r.status_code, headers=r.headers, content=b"".join(chunks), request=r.request)

    async def _post(self, client, body: dict) -> dict:
        import httpx

        delay = self.backoff
        last = ""
        start = time.monotonic()
        budget = self.timeout * (self.max_retries + 1)  # the row's time, its waits included

        async def wait(seconds: float) -> None:
            if time.monotonic() - start + seconds > budget:
                raise RuntimeError(
                    f"gave up after {time.monotonic() - start:.0f} s, the row's budget of --request-timeout x "
                    f"(--max-retries + 1) = {budget:g} s: {last or 'no endpoint up'}"
                )
            await asyncio.sleep(seconds)

        for attempt in range(self.max_retries + 1):
            url, wait_up = self._pick()
            if wait_up > 0:
                await wait(wait_up)
            await self._throttle()
            retry_after = None
            try:
                try:
                    # The whole request -- connect, send, every byte of the answer -- within the timeout
                    # (httpx's own timeouts are per read: a server trickling a byte a second never trips them).
                    r = await asyncio.wait_for(
                        self._request(client, f"{url}/chat/completions", body), timeout=self.timeout
                    )
                except asyncio.TimeoutError:
                    raise httpx.ReadTimeout(f"no complete answer within --request-timeout {self.timeout:g} s") from None
                self.calls += 1
                if r.status_code == 400 and "logprob" in r.text.lower() and body.get("logprobs"):
                    raise LogprobsUnsupported(f"the server rejected logprobs: {r.text[:200]}")
                if r.status_code in (408, 409, 429) or r.status_code >= 500:
                    last = f"HTTP {r.status_code}: {r.text[:200]}"
                    retry_after = _retry_after(r.headers, self.max_retry_after)
                else:
                    r.raise_for_status()
                    try:
                        answer, why = r.json(), ""
                    except ValueError as exc:
                        answer, why = None, str(exc)
                    if isinstance(answer, dict) and "choices" in answer:
                        self._mark(url, True)
                        return answer
                    if len(self.base_urls) == 1:
                        # One server: its malformed answer fails this row only (asking it again would not help).
                        self._mark(url, True)
                        if answer is None:
                            raise RuntimeError(f"malformed response (not JSON: {why}): {r.text[:80]!r}")
                        return answer
                    # In a fleet, a 200 that is not a chat completion (a proxy's or load balancer's HTML page, an
                    # error body) means that endpoint is failing, like one that answers 502: route around it.
                    kind = r.headers.get("content-type", "no content type")
                    last = f"HTTP {r.status_code} with a body that is not a chat completion ({kind}): {r.text[:80]!r}"
            except (httpx.TransportError, httpx.TimeoutException, httpx.DecodingError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            except httpx.HTTPStatusError as exc:
                raise RuntimeError(f"HTTP {exc.response.status_code}: {exc.response.text[:200]}") from None
            if len(self.base_urls) > 1:
                last = f"{url}: {last}"
            self._last_error = last
            if len(self.base_urls) > 1:
                self._mark(url, False, retry_after)  # the next try goes to another endpoint if one is up
                continue
            if attempt < self.max_retries:
                self._mark(url, False, retry_after if retry_after is not None else delay)
                await wait(retry_after if retry_after is not None else delay * (1 + random.random() * 0.25))
                delay *= 2
        raise RuntimeError(f"failed after {self.max_retries + 1} tries: {last}")

    async def _run(self, requests, **kw) -> list[JudgeOutput]:
        import httpx

        sem = asyncio.Semaphore(self.concurrency)
        headers = self._headers()
        logprobs = kw.get("top_k") is not None
        async with httpx.AsyncClient(timeout=self.timeout, headers=headers) as client:

            async def one(req):
                async with sem:
                    body = self.build_payload(req, **kw)
                    try:
                        resp = await self._post(client, body)
                    except (LogprobsUnsupported, JudgeUnavailable):
                        raise
                    except RuntimeError as exc:
                        return JudgeOutput(error=f"judge server: {exc}")
                    self._count_usage(resp)
                    try:
                        if logprobs:
                            out = JudgeOutput(top_logprobs=self.parse_logprobs(resp))
                            self._seen_logprobs = True
                            return out
                        return JudgeOutput(text=self.parse_text(resp))
                    except LogprobsUnsupported:
                        # One response without log-probs (an error body, `logprobs: null`) costs its row; only a
                        # server that never sends any is one without log-probs (decided below).
                        return JudgeOutput(error=_NO_LOGPROBS)
                    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                        return JudgeOutput(error=f"judge server: malformed response ({type(exc).__name__}: {exc})")

            outs = list(await asyncio.gather(*(one(r) for r in requests)))
        if logprobs and outs and not self._seen_logprobs and all(o.error == _NO_LOGPROBS for o in outs):
            raise LogprobsUnsupported("the server returned no token log-probabilities for any request")
        return outs

    def _count_usage(self, resp) -> None:
        usage = resp.get("usage") if isinstance(resp, dict) else None
        if isinstance(usage, dict):
            for ours, theirs in (("prompt_tokens", "prompt_tokens"), ("generated_tokens", "completion_tokens")):
                v = usage.get(theirs)
                if isinstance(v, int) and v >= 0:
                    self.stats[ours] += v

    def _sync(self, requests, **kw) -> list[JudgeOutput]:
        try:
            return asyncio.run(self._run(requests, **kw))
        except LogprobsUnsupported:
            self.supports_logprobs = False
            raise

    def first_token_logprobs(
        self, requests: Sequence[JudgeRequest], *, top_k: int = 20, variants: Optional[tuple] = None
    ) -> list[JudgeOutput]:
        return self._sync(requests, max_tokens=1, temperature=0.0, top_k=top_k, seed=None)

    def _generate(self, requests: Sequence[JudgeRequest], sampling: Sampling) -> list[JudgeOutput]:
        return self._sync(
            requests,
            max_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            top_k=None,
            seed=sampling.seed,
            stop=list(sampling.stop) or None,
        )
