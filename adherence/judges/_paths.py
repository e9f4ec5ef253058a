"""The in-process judge's attention paths for packed conversations, one object each, chosen once at load.

A pack is a conversation's shared trunk once, then each turn's own tail (``_pack``). Three paths score packs, all to
the same log-probs within float noise:

- ``FlexPath``: the packs of a batch laid end to end in one row (up to ``batch_tokens``, padded to a multiple of
  ``bucket`` so a few compiled shapes serve every batch) through FlexAttention over the tree's block mask (CUDA);
- ``TreePath``: one pack a row, tree attention over SDPA (trunk causal once, each tail against its prefix);
- ``DensePath``: one pack a row under the dense ``B x L x L`` tree mask: the reference, and what every model runs.

``choose_path`` probes the requested paths in that order on a two-turn pack when the judge loads; the first that
this model's attention can run is the path of every call (a model whose attention bypasses transformers' attention
interface, or whose configuration names a sliding window, takes the dense mask). Each path owns its batching and
its forward; the backend gives it the model's body, the read of the answer rows and the batch limits.
"""

from __future__ import annotations

from typing import Any, Optional

from . import _tree_attention

__all__ = ["AttentionPath", "DensePath", "FlexPath", "TreePath", "choose_path", "pack"]


def pack(trunk: list, branches: list) -> tuple:
    """One packed sequence: ``(ids, position ids, [(request, read column)], (trunk length, [(start, length,
    prefix)]))``; a tail's positions continue from its own prefix, and it sees the trunk up to that prefix."""
    ids, pos = list(trunk), list(range(len(trunk)))
    reads, tails = [], []
    for i, prefix, tail in branches:
        tails.append((len(ids), len(tail), prefix))
        ids.extend(tail)
        pos.extend(range(prefix, prefix + len(tail)))
        reads.append((i, len(ids) - 1))
    return ids, pos, reads, (len(trunk), tails)


class AttentionPath:
    """How packed sequences go through the model: ``run`` queues their forward passes and the reads of their
    answer rows onto ``pending`` (``(request positions, device read)``), waiting for nothing."""

    name = "dense-mask"
    tree = False  # tree-shaped attention without a materialised mask (what ``describe`` calls tree_attention)

    def run(self, judge, seqs: list, top_k: int, pending: list, variants=None) -> None:
        raise NotImplementedError

    def warm_up(self, judge) -> list:
        """Compile what this path compiles for every batch length a job can meet; the lengths (none here)."""
        return []


class DensePath(AttentionPath):
    """One pack a row under the dense tree mask (the reference formulation; any model runs it)."""

    def run(self, judge, seqs: list, top_k: int, pending: list, variants=None) -> None:
        torch = judge._torch
        for batch in judge._batched(seqs, key=lambda s: len(s[0])):
            with judge._phase("layout"):
                input_ids, position_ids, layout = _rows(judge, batch)
            hidden = self.forward(judge, input_ids, position_ids, layout)
            judge.stats["forward_tokens"] += sum(len(s[0]) for s in batch)
            judge.stats["batches"] += 1
            with judge._phase("read"):
                rows, cols, targets = [], [], []
                for r, s in enumerate(batch):
                    for i, c in s[2]:
                        rows.append(r)
                        cols.append(c)
                        targets.append(i)
                rows_t, cols_t = judge._device_ids(torch.tensor(rows)), judge._device_ids(torch.tensor(cols))
                pending.append((targets, judge._read_rows(hidden, rows_t, cols_t, top_k, variants)))

    def forward(self, judge, input_ids, position_ids, layout: list):
        with judge._phase("layout"):
            mask = dense_tree_mask(judge._torch, layout, input_ids.shape[1], judge.dtype)[:, None].to(judge.device)
        return judge._timed_body(
            input_ids=input_ids.to(judge.device), attention_mask=mask, position_ids=position_ids.to(judge.device)
        ).last_hidden_state


class TreePath(DensePath):
    """One pack a row through tree attention over SDPA (no ``L x L`` mask)."""

    name = "tree-sdpa"
    tree = True

    def forward(self, judge, input_ids, position_ids, layout: list):
        with _tree_attention.layout(layout) as lay:
            ids, pos = judge._device_ids(input_ids), judge._device_ids(position_ids)
            out = judge._timed_body(input_ids=ids, position_ids=pos)
        if lay.calls == 0:
            raise _tree_attention.Unsupported(
                "the model's attention does not go through transformers' attention interface"
            )
        return out.last_hidden_state


class FlexPath(AttentionPath):
    """Packs end to end in one row per batch through FlexAttention, padded to a multiple of ``bucket``."""

    name = "flex"
    tree = True

    def __init__(self, device) -> None:
        # on CUDA few padded lengths, so few compiled kernels; elsewhere (eager, a test reference) short rows
        self.bucket = 1024 if device.type == "cuda" else 128

    def padded(self, n: int) -> int:
        """A batch's length: ``n`` tokens rounded up to a multiple of ``bucket``."""
        return -(-n // self.bucket) * self.bucket

    def run(self, judge, seqs: list, top_k: int, pending: list, variants=None) -> None:
        from tqdm.auto import tqdm

        torch = judge._torch
        batches: list[list[Any]] = []
        current: list[Any] = []
        size = 0
        for s in seqs:
            if current and size + len(s[0]) > judge.batch_tokens:
                batches.append(current)
                current, size = [], 0
            current.append(s)
            size += len(s[0])
        if current:
            batches.append(current)
        show = judge.progress and len(batches) >= 3
        for batch in tqdm(batches, desc="judging", unit="batch", leave=False, disable=not show):
            with judge._phase("layout"):
                lay, ids_d, pos_d, cols, targets, T = self._layout(judge, batch)
            with _tree_attention.layout(lay):
                hidden = judge._timed_body(input_ids=ids_d, position_ids=pos_d).last_hidden_state
            if not lay.calls:
                raise _tree_attention.Unsupported("the model's attention does not go through the attention interface")
            judge.stats["forward_tokens"] += T
            judge.stats["batches"] += 1
            with judge._phase("read"):
                rows = torch.zeros(len(cols), dtype=torch.long, device=judge.device)
                read = judge._read_rows(hidden, rows, judge._device_ids(torch.tensor(cols)), top_k, variants)
            pending.append((targets, read))

    def _layout(self, judge, batch: list) -> tuple:
        torch = judge._torch
        T = sum(len(s[0]) for s in batch)
        Tp = self.padded(T)
        ids = torch.full((Tp,), judge.tokenizer.pad_token_id, dtype=torch.long)
        pos = torch.zeros(Tp, dtype=torch.long)
        doc = torch.full((Tp,), -1, dtype=torch.long)
        tid = torch.full((Tp,), -1, dtype=torch.long)
        lim = torch.zeros(Tp, dtype=torch.long)
        cols, targets, off = [], [], 0
        for d, (sids, spos, reads, (trunk, tails)) in enumerate(batch):
            n = len(sids)
            ids[off : off + n] = torch.tensor(sids)
            pos[off : off + n] = torch.tensor(spos)
            doc[off : off + n] = d
            lim[off : off + trunk] = off
            for b, (start, length, prefix) in enumerate(tails):
                tid[off + start : off + start + length] = b
                lim[off + start : off + start + length] = off + prefix
            for i, c in reads:
                cols.append(off + c)
                targets.append(i)
            off += n
        lay = _tree_attention.FlexLayout(judge._device_ids(doc), judge._device_ids(tid), judge._device_ids(lim))
        return lay, judge._device_ids(ids)[None], judge._device_ids(pos)[None], cols, targets, T

    def warm_up(self, judge) -> list:
        """One pack of each padded length up to ``batch_tokens`` (a trunk and a one-token tail): the flex path
        compiles one kernel per length, each on first use."""
        tok = int(judge.tokenizer.pad_token_id or 0)
        lengths = list(range(self.bucket, self.padded(judge.batch_tokens) + 1, self.bucket))
        for n in lengths:
            pending: list = []
            self.run(judge, [([tok] * n, list(range(n)), [(0, n - 1)], (n - 1, [(n - 1, 1, n - 1)]))], 1, pending)
            for _, read in pending:
                judge._to_lists(read)
        return lengths


def choose_path(judge, requested: Any, installed: bool) -> AttentionPath:
    """The first path this model runs, probed in order on a pack of two one-token turns on a two-token trunk:
    flex (where ``requested`` allows it: on CUDA, or ``"flex"``), tree attention over SDPA, the dense mask.
    ``installed``: tree attention was installed into the model (it allows it: no sliding window, an attention
    implementation that goes through the interface)."""
    candidates: list[AttentionPath] = []
    if installed and requested:
        if (
            requested != "sdpa"
            and _tree_attention.flex_available()
            and (requested == "flex" or judge.device.type == "cuda")
        ):
            candidates.append(FlexPath(judge.device))
        candidates.append(TreePath())
    tok = int(judge.tokenizer.pad_token_id or 0)
    probe = ([tok] * 4, [0, 1, 2, 2], [(0, 2), (1, 3)], (2, [(2, 1, 2), (3, 1, 2)]))
    torch = judge._torch
    for path in candidates:
        if isinstance(path, FlexPath):
            _tree_attention.reserve(judge.device, path.padded(max(judge.batch_tokens, judge.pack_tokens)))
        try:
            with torch.inference_mode():
                path.run(judge, [probe], 1, [], None)
            return path
        except _tree_attention.Unsupported as exc:
            _tree_attention.log.info("%s attention off for %s (%s)", path.name, judge.model_id, exc)
    return DensePath()


def _rows(judge, batch: list) -> tuple:
    """A batch of packs one a row (right padding): ids, position ids, and each row's tree layout."""
    torch = judge._torch
    B, L = len(batch), max(len(s[0]) for s in batch)
    input_ids = torch.full((B, L), judge.tokenizer.pad_token_id, dtype=torch.long)
    position_ids = torch.zeros((B, L), dtype=torch.long)
    for r, (ids, pos, _, _) in enumerate(batch):
        input_ids[r, : len(ids)] = torch.tensor(ids)
        position_ids[r, : len(ids)] = torch.tensor(pos)
    return input_ids, position_ids, [s[3] for s in batch]


def dense_tree_mask(torch, layout: list, L: int, dtype: Optional[Any]):
    """The reference formulation of the tree ``layout`` (per row: trunk length and ``(start, length, prefix)`` of
    each tail): a ``B x L x L`` additive mask in ``dtype``."""
    seg_t = torch.full((len(layout), L), -2, dtype=torch.long)  # -1 trunk, b tail b, -2 padding
    pref_t = torch.zeros((len(layout), L), dtype=torch.long)
    for r, (trunk, tails) in enumerate(layout):
        seg_t[r, :trunk] = -1
        for b, (start, n, prefix) in enumerate(tails):
            seg_t[r, start : start + n] = b
            pref_t[r, start : start + n] = prefix
    q = torch.arange(L)[None, :, None]
    k = torch.arange(L)[None, None, :]
    sq, sk = seg_t[:, :, None], seg_t[:, None, :]
    trunk_k = sk == -1
    allowed = (trunk_k & (sq == -1) & (k <= q)) | (trunk_k & (sq >= 0) & (k < pref_t[:, :, None]))
    allowed |= (sq >= 0) & (sk == sq) & (k <= q)
    allowed |= (sq == -2) & (k == q)  # padding rows see themselves only (no all-masked rows)
    neg = torch.finfo(dtype).min
    return torch.where(allowed, torch.tensor(0.0, dtype=dtype), torch.tensor(neg, dtype=dtype))
