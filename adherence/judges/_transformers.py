"""In-process judge on Hugging Face transformers, with prefix sharing across a conversation's turns.

Prefix sharing: the turns of one conversation share everything up to their
last piece (role, then the earlier exchanges), so they are packed into one
sequence — the shared trunk once, then each turn's own tail — with a
tree-shaped attention mask: a tail sees the trunk up to its own prefix and
itself, never another tail, and its position ids continue from its prefix.
The logits at each tail's last token are then those of that turn's own
prompt, and a conversation costs about its own length instead of the sum of
its prefixes. The LM head runs only on the rows that are read.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Optional, Sequence

from ..models import pick_device
from ._backend import JudgeBackend, JudgeOutput, Sampling
from ._paths import pack
from ._planner import PromptPlanner
from ._prompts import JudgeRequest

__all__ = ["TransformersBackend"]


#: Where a scoring call's host time goes, each counted in ``stats`` as ``<phase>_s`` seconds of the calling
#: thread's CPU time (``time.thread_time``: not the waits, not other threads): tokenising the prompts' pieces,
#: planning them (truncation, packs), laying out each batch (token tensors, the attention's block mask), the
#: forward passes as queued by the host, and reading the answers (the LM head's rows, the copy back). On CUDA
#: ``gpu_forward_s`` adds the device's own time in the forward passes, from CUDA events.
PHASES = ("tokenise", "plan", "layout", "forward", "read")


class TransformersBackend(JudgeBackend):
    """Judge with a causal LM loaded in-process.

    Args:
        model: local path (a transformers checkpoint, or a directory with one GGUF
            file), ``bundled:SmolLM2-135M-Instruct`` (default; a smoke-test judge), or a cached hub id.
        device: default CUDA when available, else CPU.
        dtype: default bf16 on CUDA, fp32 on CPU; ``float8``: bf16 with the body's linear layers in float8
            (``_float8``; made for GPUs with float8 tensor cores, a slow reference elsewhere).
        prefix_sharing: pack each conversation's turns into one forward pass.
        batch_tokens: padded tokens per forward pass (batch size x longest sequence); default 4096 on CPU
            (measured 15-20% faster than 16384 there: the activations stay in cache), 16384 on accelerators.
        max_context: prompt token limit (default: the model's ``max_position_embeddings``).
        pack_tokens: longest packed sequence; longer conversations are split into several packs.
        loaded: ``(model, tokenizer, name)`` already in memory instead of ``model``.
        tree_attention: run packed conversations through tree attention (trunk causal once, each tail
            against its prefix; no ``L x L`` mask) where the model allows it; False: the dense-mask reference.
            On CUDA the packed conversations of a batch are laid end to end and attention is FlexAttention
            over the tree's block mask; ``"flex"`` forces that path elsewhere (eager, a test reference),
            ``"sdpa"`` keeps the per-tail SDPA path on CUDA too.
    """

    name = "transformers"
    full_vocab = True
    _head_weights: Optional[tuple] = None  # the LM head in fp32 (``_head_fp32``)

    def __init__(
        self,
        model: Optional[str] = None,
        *,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        prefix_sharing: bool = True,
        batch_tokens: Optional[int] = None,
        max_context: Optional[int] = None,
        pack_tokens: int = 4096,
        progress: bool = True,
        loaded: Optional[tuple] = None,
        tree_attention=True,
    ) -> None:
        import torch

        from ._loading import load_model

        self.device = pick_device(device)
        self._set_precision(dtype)
        self.batch_tokens = int(batch_tokens or (4096 if str(self.device).startswith("cpu") else 16384))
        m, self.tokenizer, self.resolved = load_model(model, loaded, self.dtype, progress)
        self.model = m.to(device=self.device, dtype=self.dtype).eval()
        self._convert()
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        limit = getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.planner = PromptPlanner(
            self.tokenizer,
            max_context=int(max_context or limit),
            prefix_sharing=prefix_sharing,
            pack_tokens=pack_tokens,
        )
        # requests prepared per chunk where passes run asynchronously (``_chunks``): the next chunk's host work
        # overlaps the device's work on this one
        self.chunk_requests: Optional[int] = 1024 if self.device.type == "cuda" else None
        self.progress = progress
        self._variant_ids: dict = {}
        self._token_text: dict[int, str] = {}
        self._torch = torch
        self.stats: dict[str, Any] = {"forward_tokens": 0, "prompt_tokens": 0, "generated_tokens": 0, "batches": 0}
        self.stats.update({f"{p}_s": 0.0 for p in (*PHASES, "gpu_forward")})
        self._events: list = []  # (start, end) CUDA events around each forward pass, read after the sync
        from ._paths import choose_path
        from ._tree_attention import install

        # The attention path of packed conversations, chosen once (a probe pack through each path this model may
        # run, best first): every request of every call then takes it.
        self.attention = choose_path(
            self, tree_attention, bool(prefix_sharing and tree_attention and install(self.model))
        )
        self.stats = {k: 0 for k in self.stats}  # the probe is not the job's work
        self._events.clear()

    #: a conversation's trunk and tails as one packed sequence (``_paths.pack``; a bench check swaps in a wrong one)
    _pack = staticmethod(pack)

    @property
    def tree_attention(self) -> bool:
        """Packed conversations go through tree-shaped attention (flex or SDPA), not the dense mask."""
        return self.attention.tree

    @property
    def flex(self) -> bool:
        return self.attention.name == "flex"

    def use_attention(self, name: str) -> None:
        """Run packed conversations through ``name`` from now on (``flex``, ``tree-sdpa`` or ``dense-mask``) without
        a probe: the paths are compared on one model this way (a path the model cannot run raises ``Unsupported``
        at its first pass)."""
        from ._paths import DensePath, FlexPath, TreePath

        paths = {"flex": FlexPath, "tree-sdpa": TreePath, "dense-mask": DensePath}
        if name not in paths:
            raise ValueError(f"attention path {name!r}: one of {', '.join(paths)}")
        self.attention = FlexPath(self.device) if name == "flex" else paths[name]()

    def warm_up(self) -> dict:
        """Compile the attention for every padded batch length a job can meet (the flex path compiles one
        kernel per multiple of its bucket up to ``batch_tokens``, each on first use). A benchmark calls this
        before its timer, so compilation is reported apart from the run. Returns the lengths and seconds."""
        counted, t0 = dict(self.stats), time.perf_counter()
        with self._torch.inference_mode():
            lengths = self.attention.warm_up(self)
        self.stats = counted  # not the job's work
        self._events.clear()
        return {"lengths": lengths, "s": time.perf_counter() - t0 if lengths else 0.0}

    def describe(self) -> dict:
        out = super().describe()
        out.update(
            device=str(self.device),
            dtype="float8" if self.float8 else str(self.dtype).replace("torch.", ""),
            prefix_sharing=self.prefix_sharing,
            tree_attention=self.tree_attention,
            attention=self.attention.name,
            batch_tokens=self.batch_tokens,
            lm_head="float32 rows",
        )
        if self.fused["fused"] or self.fused["eager"]:
            out["fused"] = self.fused
        if self.float8:
            from ._float8 import DESCRIPTION

            out["quantization"] = DESCRIPTION
        return out

    # The planner's settings, read and set through the backend (what a user of the backend tunes).
    max_context = property(
        lambda self: self.planner.max_context, lambda self, v: setattr(self.planner, "max_context", int(v))
    )
    prefix_sharing = property(
        lambda self: self.planner.prefix_sharing, lambda self, v: setattr(self.planner, "prefix_sharing", v)
    )
    pack_tokens = property(
        lambda self: self.planner.pack_tokens, lambda self, v: setattr(self.planner, "pack_tokens", int(v))
    )

    @property
    def model_id(self) -> str:
        return self.resolved.name + (f"::{self.resolved.gguf_file}" if self.resolved.gguf_file else "")

    def variant_ids(self, variants: tuple) -> tuple:
        """Token ids (tensors on the model's device) whose normalised text is a yes / a no variant.

        Every vocabulary entry is decoded once per tokenizer and variant pair: ``"Yes"``,
        ``" yes"``, ``"YES"``, ``"▁yes"`` all count as yes.
        """
        key = (tuple(sorted(variants[0])), tuple(sorted(variants[1])))
        if key not in self._variant_ids:
            from ._parse import normalize_token

            n = max(len(self.tokenizer), int(getattr(self.model.config, "vocab_size", 0) or 0))
            texts = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
            yes = [i for i, t in enumerate(texts) if normalize_token(t) in variants[0]]
            no = [i for i, t in enumerate(texts) if normalize_token(t) in variants[1]]
            yes, no = [i for i in yes if i < n], [i for i in no if i < n]
            self._variant_ids[key] = tuple(
                self._torch.tensor(v, dtype=self._torch.long, device=self.device) for v in (yes, no)
            )
        return self._variant_ids[key]

    # ------------------------------------------------------------------ forward passes

    def _read_rows(self, hidden, rows, cols, top_k: int, variants: Optional[tuple] = None) -> tuple:
        """Top-k log-probs (and the exact yes/no log-sums when asked) at the read positions, as device
        tensors: nothing here waits for the device, so the next batch is prepared while this one runs."""
        torch = self._torch
        h = hidden[rows, cols].float()
        weight, bias = self._head_fp32()
        logits = torch.nn.functional.linear(h, weight, bias)  # the read rows in fp32, whatever the body's dtype
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        lp = torch.log_softmax(logits, dim=-1)
        top = torch.topk(lp, k=min(top_k, lp.shape[-1]), dim=-1)
        sums = None
        if variants is not None:
            sums = torch.stack(
                [
                    torch.logsumexp(lp[:, ids], dim=-1)
                    if ids.numel()
                    else torch.full((lp.shape[0],), float("-inf"), device=lp.device)
                    for ids in self.variant_ids(variants)
                ],
                dim=1,
            )
        return top.values, top.indices, sums

    def _head_fp32(self) -> tuple:
        """The LM head's weight and bias in fp32 (a copy kept once when the model is in a lower precision)."""
        if self._head_weights is None:
            head = self.model.get_output_embeddings()
            bias = getattr(head, "bias", None)
            self._head_weights = (
                head.weight.detach().float(),
                None if bias is None else bias.detach().float(),
            )
        return self._head_weights

    def _to_lists(self, read: tuple) -> list:
        """``[(top-k [(token, logprob)], (yes, no) or None)]`` from ``_read_rows`` (one device sync)."""
        values, indices, sums = read
        values, indices = values.cpu().tolist(), indices.cpu().tolist()
        tops = [[(self._decode_one(i), v) for v, i in zip(vs, ids)] for vs, ids in zip(values, indices)]
        if sums is None:
            return [(t, None) for t in tops]
        return [(t, (y, n)) for t, (y, n) in zip(tops, sums.cpu().tolist())]

    def _decode_one(self, i: int) -> str:
        text = self._token_text.get(i)
        if text is None:
            text = self._token_text[i] = self.tokenizer.decode([i])
        return text

    @contextlib.contextmanager
    def _phase(self, name: str):
        t = time.thread_time()
        try:
            yield
        finally:
            self.stats[f"{name}_s"] += time.thread_time() - t

    def _chunks(self, requests: Sequence[JudgeRequest]) -> list[list[int]]:
        """Request positions in chunks of whole conversations (``chunk_requests`` or more each; one chunk when
        it is None). On a GPU the passes of a chunk are queued without waiting for them, so the host
        tokenises and plans the next chunk while the device runs this one; a call prepared whole would leave
        the GPU idle until every prompt of the call was tokenised and planned."""
        n = self.chunk_requests
        if not n or len(requests) <= n:
            return [list(range(len(requests)))]
        by_group: dict = {}
        for i, r in enumerate(requests):
            by_group.setdefault((r.group, r.system), []).append(i)
        chunks: list[list[int]] = [[]]
        for members in by_group.values():
            if len(chunks[-1]) >= n:
                chunks.append([])
            chunks[-1].extend(members)
        return chunks

    def _timed_body(self, **inputs):
        """``_body`` counted as the forward phase, with CUDA events around it on CUDA."""
        with self._phase("forward"):
            if self.device.type != "cuda":
                return self._body(**inputs)
            start, end = (self._torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            out = self._body(**inputs)
            end.record()
            self._events.append((start, end))
            return out

    def _body(self, **inputs):
        """The model's body on one batch, with no key/value cache (a scoring pass is never continued: a
        cache would only append every layer's keys and values to a structure read by nobody)."""
        return self.model.base_model(use_cache=False, **inputs)

    def _device_ids(self, t):
        """A CPU tensor on the model's device: pinned and non-blocking on CUDA (no wait for queued work)."""
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)

    def _plain_batches(self, items: list, top_k: int, pending: list, variants=None) -> None:
        """Each prompt on its own row: right padding, a plain causal mask."""
        torch = self._torch
        items = sorted(items, key=lambda it: -len(it[1]))
        for batch in self._batched(items, key=lambda it: len(it[1])):
            with self._phase("layout"):
                L = max(len(ids) for _, ids in batch)
                input_ids = torch.full((len(batch), L), self.tokenizer.pad_token_id, dtype=torch.long)
                for r, (_, ids) in enumerate(batch):
                    input_ids[r, : len(ids)] = torch.tensor(ids)
                input_ids = self._device_ids(input_ids)
            # Right padding under a plain causal mask: a real token never sees the padding after it, so no
            # padding mask is needed and SDPA keeps its causal fast path (no materialised mask).
            out = self._timed_body(input_ids=input_ids)
            self.stats["forward_tokens"] += sum(len(ids) for _, ids in batch)
            self.stats["batches"] += 1
            with self._phase("read"):
                rows = torch.arange(len(batch), device=self.device)
                cols = self._device_ids(torch.tensor([len(ids) - 1 for _, ids in batch]))
                read = self._read_rows(out.last_hidden_state, rows, cols, top_k, variants)
            pending.append(([i for i, _ in batch], read))

    def cast(self, dtype: str) -> None:
        """Convert the loaded model in place to ``dtype`` (``float32``, ``bfloat16``, ``float16`` or ``float8``;
        float8 only from a higher precision, and for good): one checkpoint checked in fp32, then measured in
        a lower precision, without loading it twice."""
        if self.float8:
            raise ValueError("the model is already in float8")
        self._set_precision(dtype)
        self._convert()

    def _set_precision(self, dtype: Optional[str]) -> None:
        from ._loading import precision

        self.float8, self.dtype = precision(self.device, dtype)

    def _convert(self) -> None:
        """The loaded model in ``dtype`` (float8 linear layers when asked) with its fused kernels; the fp32 copy of
        the LM head is made again on the next read."""
        from ._loading import convert

        self.fused = convert(self.model, self.dtype, self.float8, self.batch_tokens)
        self._head_weights = None

    def _batched(self, items: list, key, bar: bool = True):
        """Greedy batches (items pre-sorted by decreasing length) with batch * longest <= batch_tokens."""
        from tqdm.auto import tqdm

        batches: list[list[Any]] = []
        current: list[Any] = []
        for it in items:
            if current and (len(current) + 1) * key(current[0]) > self.batch_tokens:
                batches.append(current)
                current = []
            current.append(it)
        if current:
            batches.append(current)
        if not bar:
            yield from batches
            return
        yield from tqdm(
            batches, desc="judging", unit="batch", disable=not self.progress or len(batches) < 3, leave=False
        )

    def first_token_logprobs(
        self, requests: Sequence[JudgeRequest], *, top_k: int = 20, variants: Optional[tuple] = None
    ) -> list[JudgeOutput]:
        torch = self._torch
        results: list = [None] * len(requests)
        plans: list = [None] * len(requests)
        pending: list = []
        with torch.inference_mode():
            for chunk in self._chunks(requests):
                reqs = [requests[i] for i in chunk]
                with self._phase("tokenise"):
                    self.planner.tokenize_all(reqs)
                with self._phase("plan"):
                    got = [self.planner.plan(r) for r in reqs]
                    plain, packs = self.planner.arrange(reqs, got)
                for i, p in zip(chunk, got):
                    plans[i] = p
                self.stats["prompt_tokens"] += sum(len(p.ids) for p in got if not p.error)
                mark = len(pending)
                if packs:
                    with self._phase("layout"):
                        seqs = sorted((self._pack(t, b) for t, b in packs), key=lambda q: -len(q[0]))
                    self.attention.run(self, seqs, top_k, pending, variants)
                if plain:
                    self._plain_batches(plain, top_k, pending, variants)
                for k in range(mark, len(pending)):  # the chunk's positions back to the call's
                    targets, read = pending[k]
                    pending[k] = ([chunk[t] for t in targets], read)
            with self._phase("read"):
                for targets, read in pending:  # the only waits for the device: after every batch is queued
                    for i, lp in zip(targets, self._to_lists(read)):
                        results[i] = lp
        if self._events:  # every event has completed: the copies back above waited for the last pass
            self.stats["gpu_forward_s"] += sum(a.elapsed_time(b) for a, b in self._events) / 1e3
            self._events.clear()
        return [
            JudgeOutput(error=p.error, truncated=p.truncated)
            if p.error
            else JudgeOutput(top_logprobs=r[0], yes_no=r[1], truncated=p.truncated)
            for p, r in zip(plans, results)
        ]

    def _generate(self, requests: Sequence[JudgeRequest], sampling: Sampling) -> list[JudgeOutput]:
        max_tokens, temperature, seed, stop = sampling.max_tokens, sampling.temperature, sampling.seed, sampling.stop
        torch = self._torch
        plans = [self.planner.plan(r, reserve=max_tokens) for r in requests]
        texts: list = [None] * len(requests)
        items = sorted([(i, p.ids) for i, p in enumerate(plans) if not p.error], key=lambda it: -len(it[1]))
        if seed is not None:
            torch.manual_seed(seed)
        pad = self.tokenizer.pad_token_id
        batches = list(self._batched(items, key=lambda it: len(it[1]) + max_tokens, bar=False))
        from tqdm.auto import tqdm
        from transformers import StoppingCriteria, StoppingCriteriaList

        # Token-level progress (with ETA) for long generations: one tick per decoding step of each batch.
        show = self.progress and len(batches) * max_tokens >= 64
        bar = tqdm(total=len(batches) * max_tokens, desc="generating", unit="step", leave=False, disable=not show)

        class _Tick(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                bar.update(1)
                return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        with torch.inference_mode():
            for batch in batches:
                L = max(len(ids) for _, ids in batch)
                input_ids = torch.full((len(batch), L), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), L), dtype=torch.long)
                for r, (_, ids) in enumerate(batch):
                    input_ids[r, L - len(ids) :] = torch.tensor(ids)  # left padding for generation
                    mask[r, L - len(ids) :] = 1
                kwargs = dict(max_new_tokens=max_tokens, pad_token_id=pad, do_sample=temperature > 0)
                if stop:  # each row stops at its first stop string; the batch ends when every row has
                    kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
                if temperature > 0:
                    kwargs["temperature"] = temperature
                else:
                    kwargs.update(temperature=None, top_p=None, top_k=None)
                if show:
                    kwargs["stopping_criteria"] = StoppingCriteriaList([_Tick()])
                done = bar.n
                out = self.model.generate(
                    input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device), **kwargs
                )
                bar.update(done + max_tokens - bar.n)  # a batch that stopped early still counts whole
                self.stats["prompt_tokens"] += int(mask.sum())
                self.stats["forward_tokens"] += int(mask.sum())
                new = out[:, L:]
                self.stats["generated_tokens"] += int((new != pad).sum())
                for r, (i, _) in enumerate(batch):
                    texts[i] = self.tokenizer.decode(new[r], skip_special_tokens=True)
        bar.close()
        return [
            JudgeOutput(error=p.error, truncated=p.truncated) if p.error else JudgeOutput(text=t, truncated=p.truncated)
            for p, t in zip(plans, texts)
        ]
