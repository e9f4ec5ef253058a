"""The judge backends' command-line options, declared once: the flags every judging command shares and the
constructor options they become (``judge_backend_options``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

from .._errors import OptionError
from .._fingerprint import COSMETIC
from .._options import option

__all__ = [
    "BACKEND_OPTIONS",
    "CAPABILITIES",
    "Capabilities",
    "ServerOptions",
    "TransformersOptions",
    "VLLMOptions",
    "capabilities",
    "cosmetic_options",
]

_DTYPES = ("auto", "float32", "bfloat16", "float16")


def base_urls(values) -> list:
    """The endpoints of ``--base-url`` (repeated, a list from a job file, or ``@FILE`` with one URL a line)."""
    if not values:
        return []
    out = []
    for v in [values] if isinstance(values, str) else values:
        if str(v).startswith("@"):
            from pathlib import Path

            from ..data import DataError

            try:
                lines = Path(v[1:]).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise DataError(f"cannot read the list of base URLs ({exc})", file=v[1:]) from None
            listed = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
            if not listed:
                raise DataError("the list of base URLs is empty (one http(s) URL a line)", file=v[1:])
            out += listed
        else:
            out.append(str(v))
    from urllib.parse import urlsplit

    for url in out:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise OptionError(f"--base-url must be an http:// or https:// URL with a host, got {url!r}")
    return out


@dataclass
class ServerOptions:
    """How the ``openai`` backend talks to its servers (none of it changes a verdict)."""

    max_qps: Optional[float] = option(
        None,
        type=float,
        metavar="Q",
        help="openai backend: requests started per second over all endpoints, for the whole job (with "
        "--executor ray, each worker gets an equal share; default: no cap)",
        affects_scores=False,
    )
    api_key: Optional[str] = option(
        None,
        help="openai backend: API key (default and preferred: $OPENAI_API_KEY -- a flag's value is visible to "
        "other users in the process list; it is never written to the run metadata)",
        affects_scores=False,
    )
    concurrency: int = option(16, help="openai backend: requests in flight", affects_scores=False)
    request_timeout: float = option(
        60.0,
        metavar="S",
        help="openai backend: seconds per request before it is retried",
        affects_scores=False,
    )
    max_retries: int = option(4, help="openai backend: retries per request after the first try", affects_scores=False)
    max_retry_after: float = option(
        30.0,
        metavar="S",
        help="openai backend: the longest wait a server's Retry-After gets (a row gives up after "
        "--request-timeout x (--max-retries + 1) seconds in all, its waits included)",
        affects_scores=False,
    )
    # Constructor options without a flag of their own here: the endpoints (--base-url, a list) and how long a job
    # waits with every endpoint down (the engine's --stall-timeout).
    base_url: Any = field(default=None, metadata=COSMETIC)
    stall_timeout: float = field(default=300.0, metadata=COSMETIC)

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.max_retries < 0 or not self.request_timeout > 0:
            raise OptionError("--concurrency must be >= 1, --max-retries >= 0 and --request-timeout > 0")
        if self.max_qps is not None and not self.max_qps > 0:
            raise OptionError(f"--max-qps must be > 0, got {self.max_qps}")
        if self.max_retry_after < 0:
            raise OptionError(f"--max-retry-after must be >= 0, got {self.max_retry_after}")

    @classmethod
    def from_args(cls, args, *, progress: bool = True, **extra) -> dict:
        """The ``openai`` backend's constructor options from the command's flags (checked before anything loads)."""
        from .._options import values

        urls = base_urls(args.base_url)
        if not urls:
            raise OptionError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        server = values(cls, args)
        cls(**server)
        return {
            "base_url": urls[0] if len(urls) == 1 else urls,
            **{k: v for k, v in server.items() if v is not None},
            **({"stall_timeout": args.stall_timeout} if getattr(args, "stall_timeout", None) else {}),
            **extra,
        }


@dataclass
class TransformersOptions:
    """The in-process backend's dtype (its device is the command's ``--device``)."""

    dtype: Optional[str] = option(
        None,
        flag="--judge-dtype",
        dest="judge_dtype",
        choices=(*_DTYPES, "float8"),
        help="transformers backend: weights and activations (default: bfloat16 on GPU, float32 on CPU; auto: "
        "bfloat16 on GPU and on CPUs with AVX512-BF16 or AMX, where it is about 2x faster with P(yes) within "
        "about 0.03, float32 on other CPUs, where bfloat16 is emulated and slower; float8: the body's linear "
        "layers as float8 e4m3 weights per output channel times activations quantised per token, the rest "
        "bfloat16 -- for GPUs with float8 tensor cores (H100 and newer); its P(yes) cost against bfloat16 is in "
        "the judge bench)",
    )
    # Where and how it runs, without a flag of their own here (--device is the command's).
    device: Optional[str] = field(default=None, metadata=COSMETIC)
    batch_tokens: Optional[int] = field(default=None, metadata=COSMETIC)
    progress: bool = field(default=True, metadata=COSMETIC)

    @classmethod
    def from_args(cls, args, *, progress: bool = True, **extra) -> dict:
        """The in-process backend's constructor options from the command's flags."""
        from .._options import values

        return {"device": getattr(args, "device", None), **values(cls, args), "progress": progress, **extra}


@dataclass
class VLLMOptions:
    """The offline vLLM engine's options."""

    dtype: Optional[str] = option(
        None,
        flag="--vllm-dtype",
        dest="vllm_dtype",
        choices=_DTYPES,
        help="vllm backend: engine dtype (default: vLLM's auto, bf16 on CPUs that support it)",
    )
    max_model_len: Optional[int] = option(
        None,
        flag="--vllm-max-model-len",
        dest="vllm_max_model_len",
        type=int,
        metavar="N",
        help="vllm backend: the engine's context (prompts are left-truncated to it)",
    )
    kv_cache_gb: Optional[float] = option(
        None,
        flag="--vllm-kv-cache-gb",
        dest="vllm_kv_cache_gb",
        type=float,
        metavar="GB",
        help="vllm backend on CPU: KV-cache size (VLLM_CPU_KVCACHE_SPACE; needed on small machines)",
        affects_scores=False,
    )
    gpu_memory_utilization: Optional[float] = option(
        None,
        flag="--vllm-gpu-memory",
        dest="vllm_gpu_memory",
        type=float,
        metavar="F",
        help="vllm backend on GPU: gpu_memory_utilization",
        affects_scores=False,
    )
    # How the engine is spread and reports, without a flag of their own here.
    tensor_parallel_size: Optional[int] = field(default=None, metadata=COSMETIC)
    distributed_executor_backend: Optional[str] = field(default=None, metadata=COSMETIC)
    progress: bool = field(default=True, metadata=COSMETIC)

    @classmethod
    def from_args(cls, args, *, progress: bool = True, **extra) -> dict:
        """The vLLM engine's constructor options from the command's flags: ``--vllm-engine-args`` (a JSON object of
        ``vllm.LLM`` keyword arguments) under the named ``--vllm-*`` options."""
        import json

        from .._options import values

        opts: dict = {"progress": progress}
        more = getattr(args, "vllm_engine_args", None)
        if isinstance(more, str):
            try:
                more = json.loads(more)
            except ValueError as exc:
                raise OptionError(f"--vllm-engine-args must be a JSON object ({exc})") from None
        if more is not None and not isinstance(more, dict):
            raise OptionError("--vllm-engine-args must be a JSON object of vllm.LLM keyword arguments")
        opts.update(more or {})
        opts.update({k: v for k, v in values(cls, args).items() if v is not None})
        opts.update(extra)
        return opts


#: Each backend's constructor options, typed: what decides a verdict is read from the fields' declarations.
BACKEND_OPTIONS: dict = {"transformers": TransformersOptions, "vllm": VLLMOptions, "openai": ServerOptions}


@dataclass(frozen=True)
class Capabilities:
    """What a judge backend can do, declared once beside its options (read without importing it): code outside a
    backend asks these, never its name.

    Attributes:
        deterministic_logprobs: its P(yes) is exact and the same on every call (in-process log-probabilities), so
            self-consistency samples of it are all alike.
        exact_token_counts: a dry run counts its tokens with the model's own tokenizer and prompt planner (others
            are estimated as characters / 4).
        prefix_sharing: it scores a conversation's turns over one shared prefix (``--no-prefix-sharing`` applies).
        device: it runs on the command's ``--device``.
        tensor_parallel: it can split one model over several GPUs (``--judge-tensor-parallel``).
        bundled_judge: it runs the bundled smoke-test judge (which then warns).
        default: the backend a judge uses when none is named.
    """

    deterministic_logprobs: bool = False
    exact_token_counts: bool = False
    prefix_sharing: bool = False
    device: bool = False
    tensor_parallel: bool = False
    bundled_judge: bool = False
    default: bool = False


CAPABILITIES: dict = {
    "transformers": Capabilities(
        deterministic_logprobs=True, exact_token_counts=True, prefix_sharing=True, device=True, bundled_judge=True,
        default=True,
    ),
    "vllm": Capabilities(deterministic_logprobs=True, tensor_parallel=True),
    "openai": Capabilities(),
}  # fmt: skip


def capabilities(backend: str) -> Capabilities:
    """``backend``'s declared capabilities (none for a name not registered: its constructor refuses it)."""
    return CAPABILITIES.get(backend, Capabilities())


def cosmetic_options(backend: str) -> frozenset:
    """The constructor options of ``backend`` that never change a verdict (``affects_scores=False`` where each is
    declared): where and how fast it runs, how it reports, how a server is reached. None for an unknown backend."""
    cls = BACKEND_OPTIONS.get(backend)
    if cls is None:
        return frozenset()
    return frozenset(f.name for f in fields(cls) if f.metadata.get("affects_scores", True) is False)
