"""Sentence and token encoders over any Hugging Face encoder checkpoint.

Texts are tokenised once, sorted by length and batched by a token budget (padding only to the
longest text of each batch, so a sorted corpus pads almost nothing), bf16 on GPU and fp32 on CPU,
SDPA attention, pooling in float32, a progress bar, and a per-encoder cache so a text shared by many
turns is encoded once. Batches are built on the CPU while the GPU runs the previous one (pinned
host memory, non-blocking copies; nothing waits for the GPU until the embeddings are returned).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Optional, Sequence

from .._errors import OptionError
from ._device import pick_device, pick_dtype
from ._quiet import quiet_loading
from ._resolve import ResolvedModel, resolve_model

__all__ = ["Encoder"]


def _pooling_mode(path: Path) -> str:
    """The checkpoint's own pooling (sentence-transformers layout), mean when unspecified."""
    cfg = path / "1_Pooling" / "config.json"
    if cfg.exists():
        c = json.loads(cfg.read_text())
        if c.get("pooling_mode_cls_token"):
            return "cls"
        if c.get("pooling_mode_max_tokens"):
            return "max"
    return "mean"


def _max_length(path: Path, tokenizer) -> int:
    cfg = path / "sentence_bert_config.json"
    if cfg.exists():
        value = json.loads(cfg.read_text()).get("max_seq_length")
        if value:
            return int(value)
    return int(min(getattr(tokenizer, "model_max_length", 512) or 512, 512))


class Encoder:
    """Encode texts into normalised sentence embeddings or per-token embeddings.

    Args:
        model: local path, ``bundled:all-MiniLM-L6-v2`` (default) or a cached hub id.
        device: ``"cuda"``, ``"cpu"``...; default CUDA when available.
        dtype: ``"bf16"``, ``"fp16"``, ``"fp32"``; default bf16 on GPU, fp32 on CPU.
        batch_size: most texts per forward pass (default 64 on CPU, 16 with int8, 4096 on accelerators).
        batch_tokens: most padded tokens per forward pass (texts x longest); default none on CPU (512
            with int8, 2048 with bf16), 65536 on accelerators.
        max_length: token limit (default: the checkpoint's ``max_seq_length``).
        progress: show a progress bar for long encodes.
        cache_bytes: memory of the text -> embedding cache (least recently used texts are
            dropped beyond it; 0 disables it). Default 256 MiB, about 120k texts at 384-d.
        precision: ``"float32"`` (default: the checkpoint as trained, exact; the run ``dtype`` on a GPU),
            ``"bf16"``: sentence embeddings on the CPU through OpenVINO with bf16 products (a CPU with AMX
            or AVX512-BF16; lowest cosine to float32 >= 0.9999 on the benchmark texts), or ``"int8"``:
            through an int8 copy of the checkpoint run by ONNX Runtime (any CPU; less exact). Both run an
            ONNX export kept in the user's cache (``adherence.models._onnx``; made on first use);
            docs/encoders.md states their speed and distance from float32. Token embeddings (BERTScore)
            stay float32.
        runtime: what runs float32 sentence embeddings on a CPU: ``"openvino"`` (float32 products) or ``"torch"``;
            default the fastest measured on this kind of CPU (``adherence.models._onnx.FLOAT32_RUNTIMES``:
            OpenVINO on x86-64, torch elsewhere). Both are exact; the run metadata records which ran. bf16 runs
            on OpenVINO, int8 on ONNX Runtime, a GPU on torch.

    Example::

        enc = Encoder()                        # the bundled all-MiniLM-L6-v2
        enc.encode(["hello", "hi there"])      # float32 [2, 384], unit norm
    """

    def __init__(
        self,
        model: Optional[str] = None,
        *,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        batch_size: Optional[int] = None,
        batch_tokens: Optional[int] = None,
        max_length: Optional[int] = None,
        progress: bool = True,
        cache_bytes: int = 256 << 20,
        precision: str = "float32",
        runtime: Optional[str] = None,
    ) -> None:
        import torch
        from transformers import AutoConfig, AutoTokenizer

        if batch_size is not None and batch_size < 1:
            raise OptionError(f"`batch_size` must be >= 1, got {batch_size}")
        if batch_tokens is not None and batch_tokens < 1:
            raise OptionError(f"`batch_tokens` must be >= 1, got {batch_tokens}")
        from ._onnx import PRECISIONS

        if precision not in PRECISIONS:
            raise OptionError(f"`encoder_precision` must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.resolved: ResolvedModel = resolve_model(model)
        self.device = pick_device(device)
        if precision != "float32" and self.device.type != "cpu":
            raise OptionError(
                f"--encoder-precision {precision} is a CPU path; on {self.device.type} the encoder runs in bf16 (drop the "
                "option, or add --device cpu)"
            )
        self.precision = precision
        self.progress = progress
        self.dtype = pick_dtype(self.device, dtype)
        self.runtime = self._pick_runtime(precision, runtime)
        path = self.resolved.path
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.config = AutoConfig.from_pretrained(str(path))
        self._model: Optional[Any] = None
        if self.runtime == "torch":
            self._model = self._load_model()
        self.pooling = _pooling_mode(path)
        self.max_length = int(max_length) if max_length else _max_length(path, self.tokenizer)
        accel = self.device.type != "cpu"
        # CPU (texts, padded tokens) per batch by runtime, the fastest on 2 cores: int8 16 short texts, 2 of 256
        # tokens; bf16 64 short texts, 8 of 256 tokens; OpenVINO float32 32 short texts (64 and 128 ran slower on
        # the AVX2 EPYC: a batch's activations stay in cache)
        cpu_texts, cpu_tokens = {
            "torch": (64, None),
            "openvino": (32, None) if precision == "float32" else (64, 2048),
            "onnxruntime": (16, 512),
        }[self.runtime]
        self.batch_size = int(batch_size or (4096 if accel else cpu_texts))
        self.batch_tokens = int(batch_tokens) if batch_tokens else (65536 if accel else cpu_tokens)
        self.dim = int(self.config.hidden_size)
        self.num_layers = int(getattr(self.config, "num_hidden_layers", 0))
        # Text -> embedding, least recently used first; bounded by bytes so a job over millions of
        # unique turns keeps flat memory (a text shared by many turns is still encoded once).
        self.cache_bytes = int(cache_bytes)
        self._cache: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._cache_used = 0
        self._backends: dict = {}  # max_length -> a fast tokenizer's backend set to truncate there
        self._runtime: Optional[Any] = None  # the CPU runtime that is not torch (adherence.models._onnx)
        if precision == "int8":
            from ._onnx import OnnxSentenceModel, encoder_file

            self._runtime = OnnxSentenceModel(encoder_file(self, "int8"))
        elif precision == "bf16":
            from ._onnx import OpenVinoSentenceModel, encoder_file

            self._runtime = OpenVinoSentenceModel(encoder_file(self, "bf16"))
        elif self.runtime == "openvino":
            from ._onnx import OpenVinoSentenceModel, openvino_file

            self._runtime = OpenVinoSentenceModel(openvino_file(self), precision="f32")

    def _pick_runtime(self, precision: str, runtime: Optional[str]) -> str:
        """The runtime of sentence embeddings: torch on an accelerator, the precision's own for bf16 / int8, and
        for float32 on a CPU the one named or the fastest measured for this kind of CPU."""
        from ._onnx import _RUNTIMES, float32_runtime

        if self.device.type != "cpu" or precision != "float32":
            own = "torch" if self.device.type != "cpu" else _RUNTIMES[precision]
            if runtime not in (None, own):
                where = self.device.type if self.device.type != "cpu" else f"--encoder-precision {precision}"
                raise OptionError(f"`runtime` {runtime!r} cannot run {where}: it runs on {own}")
            return own
        return float32_runtime(runtime)

    def _load_model(self):
        from transformers import AutoModel

        path, kwargs = str(self.resolved.path), {"dtype": self.dtype}
        with quiet_loading() if not self.progress else nullcontext():  # progress=False: no bar of transformers'
            try:
                model = AutoModel.from_pretrained(path, attn_implementation="sdpa", **kwargs)
            except (ValueError, ImportError):  # architectures without SDPA support
                model = AutoModel.from_pretrained(path, **kwargs)
        return model.eval().to(self.device)

    @property
    def model(self):
        """The torch checkpoint: loaded with the encoder where torch runs sentences; where another runtime runs
        them (OpenVINO, ONNX Runtime), only when token embeddings (BERTScore) first need it -- importing the
        architecture and loading it was most of a worker's 4 s start-up."""
        if self._model is None:
            self._model = self._load_model()
        return self._model

    def describe(self) -> dict:
        """The checkpoint (``ResolvedModel.describe``) and how sentences are encoded (precision, the runtime and its
        version, the kind of CPU that chose it), for run metadata."""
        from ._device import cpu_kind
        from ._onnx import runtime_version, weight_levels

        out = dict(self.resolved.describe(), precision=self.precision, runtime=runtime_version(self.runtime))
        if self.device.type == "cpu":
            out["cpu_kind"] = cpu_kind()
        if self._runtime is None:
            return out
        out["file"] = self._runtime.path.name
        if self.precision == "int8":
            out["quantization"] = f"int8 weights per output column (+-{weight_levels()}), 8-bit inputs per token"
        else:
            out["inference_precision"] = self._runtime.inference_precision
        return out

    @property
    def name(self) -> str:
        return self.resolved.name

    @property
    def token_limit(self) -> int:
        """The model's own token limit (position embeddings, capped by the tokenizer's ``model_max_length``).

        Sentence embeddings truncate at the checkpoint's ``max_seq_length`` (what it was trained
        with, 256 for all-MiniLM-L6-v2); token-level methods such as BERTScore use this longer
        limit, as the ``bert-score`` package does.
        """
        limit = int(getattr(self.config, "max_position_embeddings", 0) or 512)
        tok = getattr(self.tokenizer, "model_max_length", None)
        if tok and tok < 1_000_000:
            limit = min(limit, int(tok))
        return limit

    def _token_ids(self, texts: Sequence[str], max_length: int):
        """Token ids of every text (special tokens added, truncated at ``max_length``), as one flat int64
        array and the texts' lengths. A fast tokenizer runs through a copy of its Rust backend (one
        parallel ``encode_batch``, the same ids as calling the tokenizer): the Python wrapper's per-text
        conversion cost more than the model's forward pass on a GPU."""
        import itertools

        import numpy as np

        backend = self._backends.get(max_length)
        if backend is None and getattr(self.tokenizer, "is_fast", False):
            from tokenizers import Tokenizer

            backend = Tokenizer.from_str(self.tokenizer.backend_tokenizer.to_str())
            backend.no_padding()
            backend.enable_truncation(
                max_length, strategy="longest_first", direction=getattr(self.tokenizer, "truncation_side", "right")
            )
            self._backends[max_length] = backend
        if backend is not None:  # encode_batch_fast: the same ids without character offsets (tokenizers >= 0.21)
            encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
            ids = [e.ids for e in encode(list(texts))]
        else:
            ids = self.tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
        lens = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lens.sum()))
        return flat, lens

    def _batches(self, texts: Sequence[str], desc: str, max_length: Optional[int] = None):
        """Yield (indices, model inputs on the device) with texts sorted by decreasing token length."""
        import numpy as np
        import torch
        from tqdm.auto import tqdm

        flat, lens = self._token_ids(texts, max_length or self.max_length)
        if not flat.size:
            flat = np.zeros(1, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        order = np.argsort(-lens, kind="stable")
        batches, s = [], 0
        while s < len(order):
            longest = max(int(lens[order[s]]), 1)
            n = self.batch_size if not self.batch_tokens else max(1, min(self.batch_size, self.batch_tokens // longest))
            batches.append(order[s : s + n])
            s += n
        pad = self.tokenizer.pad_token_id or 0
        pin = self.device.type == "cuda"
        for idx in tqdm(batches, desc=desc, unit="batch", disable=not self.progress or len(batches) < 4, leave=False):
            pos = np.arange(max(int(lens[idx[0]]), 1))
            valid = pos[None, :] < lens[idx][:, None]
            input_ids = torch.from_numpy(np.where(valid, flat[np.where(valid, starts[idx][:, None] + pos, 0)], pad))
            mask = torch.from_numpy(valid.astype(np.int64))
            if pin:
                input_ids, mask = input_ids.pin_memory(), mask.pin_memory()
            yield (
                idx.tolist(),
                {
                    "input_ids": input_ids.to(self.device, non_blocking=pin),
                    "attention_mask": mask.to(self.device, non_blocking=pin),
                },
            )

    def _pool(self, hidden, mask):
        import torch

        if self.pooling == "cls":
            return hidden[:, 0]
        if self.pooling == "max":
            return hidden.masked_fill(mask.unsqueeze(-1) == 0, torch.finfo(hidden.dtype).min).max(dim=1).values
        m = mask.unsqueeze(-1).float()  # float32 sums: bf16 would round the sum of up to 256 tokens
        return (hidden.float() * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)

    def encode(self, texts: Sequence[str]):
        """Unit-norm sentence embeddings, float32 ``[len(texts), dim]`` on the encoder's device.

        Texts already encoded by this encoder come from its cache.
        """
        import torch

        texts = [t if isinstance(t, str) else "" for t in texts]
        if not texts:
            return torch.empty(0, self.dim, device=self.device)
        cached: dict = {}
        todo = []
        for t in dict.fromkeys(texts):
            v = self._cache.get(t)
            if v is None:
                todo.append(t)
            else:
                self._cache.move_to_end(t)
                cached[t] = v
        table = torch.empty(len(todo), self.dim, device=self.device)
        if todo:
            if self._runtime is not None:
                batches = list(self._batches(todo, "encoding"))
                embs = self._runtime.run([(b["input_ids"].numpy(), b["attention_mask"].numpy()) for _, b in batches])
                for (idx, _), emb in zip(batches, embs):
                    table[torch.as_tensor(idx)] = torch.from_numpy(emb)
            else:
                with torch.inference_mode():
                    for idx, batch in self._batches(todo, "encoding"):
                        out = self.model(**batch)
                        pooled = self._pool(out.last_hidden_state, batch["attention_mask"]).float()
                        rows = torch.as_tensor(idx).to(self.device, non_blocking=True)
                        table[rows] = torch.nn.functional.normalize(pooled, dim=-1)
            self._remember_all(todo, table)
        pos = {t: i for i, t in enumerate(todo)}
        if cached:
            pos.update((t, len(todo) + j) for j, t in enumerate(cached))
            table = torch.cat([table, torch.stack(list(cached.values()))])
        if len(pos) == len(texts) and not cached:
            return table  # every text new and distinct: already in input order
        index = torch.as_tensor([pos[t] for t in texts]).to(self.device)
        return table[index]

    def _remember_all(self, texts: list, table) -> None:
        """Cache the last texts of ``table`` that fit (the earlier ones would be evicted by them anyway);
        one copy of those rows, so the cache never pins the whole table."""
        if self.cache_bytes <= 0 or not texts:
            return
        per = self._entry_bytes(texts[-1], table[-1]) or 1
        n = min(len(texts), max(1, self.cache_bytes // per))
        for t, v in zip(texts[-n:], table[-n:].clone().unbind(0)):
            self._remember(t, v)

    def _remember(self, text: str, vec) -> None:
        if self.cache_bytes <= 0:
            return
        self._cache[text] = vec
        self._cache_used += self._entry_bytes(text, vec)
        while self._cache_used > self.cache_bytes and self._cache:
            old_text, old = self._cache.popitem(last=False)
            self._cache_used -= self._entry_bytes(old_text, old)

    @staticmethod
    def _entry_bytes(text: str, vec) -> int:
        return vec.numel() * vec.element_size() + len(text) + 200  # + key and dict-entry overhead

    @property
    def cache_size_bytes(self) -> int:
        """Bytes the text cache holds now (at most ``cache_bytes``)."""
        return self._cache_used

    def encode_tokens(
        self, texts: Sequence[str], *, layer: Optional[int] = None, strip: bool = True, max_length: Optional[int] = None
    ):
        """Per-token embeddings of ``layer`` (0 = embeddings, default the last layer).

        Tokenisation matches BERTScore's: the stripped text with the model's
        special tokens, truncated at ``max_length`` (default: the sentence limit;
        BERTScore passes the model's own ``token_limit``, 512 for all-MiniLM-L6-v2,
        as the ``bert-score`` package does). Returns ``(embeddings, token_ids)``: lists of float32
        tensors ``[n_tokens_i, dim]`` and of token-id lists.
        """
        import torch

        n_layers = self.num_layers
        layer = n_layers if layer is None else int(layer)
        if not 0 <= layer <= n_layers:
            raise OptionError(f"`layer` must be in [0, {n_layers}] for {self.name}, got {layer}")
        texts = [(t.strip() if strip else t) if isinstance(t, str) else "" for t in texts]
        embs: list = [None] * len(texts)
        ids: list = [None] * len(texts)
        with torch.inference_mode():
            for idx, batch in self._batches(texts, "encoding tokens", max_length):
                out = self.model(**batch, output_hidden_states=True)
                hidden = out.hidden_states[layer].float()
                mask = batch["attention_mask"].bool()
                for j, i in enumerate(idx):
                    embs[i] = hidden[j][mask[j]]
                    ids[i] = batch["input_ids"][j][mask[j]].tolist()
        return embs, ids
