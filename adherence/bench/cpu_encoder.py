"""The sentence encoder on a CPU against every CPU peer, on the same texts and checkpoint, in one run.

Peers: sentence-transformers' torch, ONNX (unoptimised and optimisation levels O1-O4, and its dynamic int8
export) and OpenVINO backends, and fastembed (ONNX Runtime, float32 and int8). They pin an older
transformers than adherence's tests, so they run in their own environment (``peers_python``, see
docs/encoders.md) through ``_encoder_peers.py`` with the texts written to a file; each peer is timed
alone (its encode call only, after a warm-up) at each batch size of ``batches``, best batch kept.

Correctness first: our float32 embeddings against sentence-transformers' torch float32 (``1 - min
cosine <= 1e-4``, or the bench stops); every peer's lowest and mean cosine to that reference is
recorded, and a peer counts as *exact* when its lowest cosine is >= 0.9999 (the issue's float32
accuracy). Ours run at each precision (float32; bf16 through OpenVINO where the CPU has bf16 products;
int8), each row's cosines to our float32. ``exact_path`` is the fastest of ours that is exact and
``speedup`` it over the fastest exact peer (``float32_speedup``: our float32 over it); ``fast_path`` is the
fastest of ours at any accuracy, ``fast_path.speedup`` it over sentence-transformers' torch default
(batch 32) and ``fast_path.speedup_over_fastest`` over the fastest peer of any accuracy (a peer whose mean
cosine is under 0.9 computes another embedding, e.g. truncating elsewhere, and is marked, not compared).
The cost of bf16 and int8: lowest/mean cosine to float32 on each workload, how far an embedding moves
with its batch (``variants``) and the AUC changes of the role methods on labelled data (``auc_changes``).

Workloads: ``short``, the distinct Synthetic-Persona-Chat utterances (Jandaghi et al. 2023, CC BY 4.0);
``long``, consecutive utterances of one conversation joined to 300-500 tokens (every encoder truncates
at the checkpoint's ``max_seq_length``, 256 for all-MiniLM-L6-v2, the same for all).
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

from ._hardware import cpu_info, device_name, timed

__all__ = ["bench_cpu_encoder", "encoder_flops", "long_texts"]

EXACT_MIN_COSINE = 0.9999
#: The exact path's goal per workload, as a ratio to the fastest exact peer (recorded in each run's JSON).
EXACT_GOALS = {"short": 1.2, "long": 1.0}


def long_texts(csv_path, tokenizer, n: int, lo: int = 300, hi: int = 500) -> list:
    """``n`` texts of ``lo``-``hi`` tokens: consecutive utterances of one conversation joined by spaces."""
    from .encoder import persona_chat_utterances

    out: list = []
    cur: list = []
    count = 0
    for u in persona_chat_utterances(csv_path):
        k = len(tokenizer(u, add_special_tokens=False)["input_ids"])
        if count + k > hi:
            cur, count = [], 0
        cur.append(u)
        count += k
        if count >= lo:
            out.append(" ".join(cur))
            cur, count = [], 0
            if len(out) == n:
                break
    return out


def encoder_flops(config, lengths) -> dict:
    """Work of one forward of a BERT-style encoder (``config``: hidden, intermediate, layers, heads) over
    texts of ``lengths`` tokens, unpadded: ``linear`` FLOPs (Q, K, V, output and the two feed-forward
    products), ``attention`` FLOPs (scores and their weighted sum) and ``softmax`` elements (one exp each)."""
    h, f = config.hidden_size, config.intermediate_size
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    tokens = sum(int(n) for n in lengths)
    square = sum(int(n) * int(n) for n in lengths)
    return {
        "linear": 2 * tokens * layers * (4 * h * h + 2 * h * f),
        "attention": 2 * 2 * square * h * layers,
        "softmax": square * heads * layers,
    }


def _rates(config, dtype, rows: int = 2048, seq: int = 256, repeats: int = 10) -> dict:
    """What this CPU reaches, measured now: FLOP/s of one layer's linear products in ``dtype`` on ``rows``
    token rows (the faster of torch's kernels -- oneDNN: AMX or AVX-512 where the CPU has them -- and, in float32,
    numpy's BLAS; each in ``matmul_by_library``), and exps/s in float32 over a batch's attention scores
    (``rows // seq`` texts of ``seq`` tokens)."""
    import torch

    h, f = config.hidden_size, config.intermediate_size
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, h, generator=g).to(dtype)
    w = [torch.randn(n, k, generator=g).to(dtype) * 0.05 for n, k in ((h, h),) * 4 + ((f, h), (h, f))]

    def layer(times: int) -> None:
        for _ in range(times):
            for k in range(4):
                torch.nn.functional.linear(x, w[k])
            torch.nn.functional.linear(torch.nn.functional.linear(x, w[4]), w[5])

    scores = torch.randn(rows // seq * config.num_attention_heads, seq, seq, generator=g)
    out = torch.empty_like(scores)
    with torch.inference_mode():  # the fastest of ``repeats`` timings after a warm-up
        t_mm = min(timed(lambda: layer(times=4), repeats, "cpu")) / 4
        t_exp = min(timed(lambda: torch.exp(scores, out=out), repeats, "cpu"))
    flops = 2 * rows * (4 * h * h + 2 * h * f)
    by_library = {f"torch {torch.__version__}": flops / t_mm}
    if dtype == torch.float32:
        # numpy's BLAS too (OpenBLAS in numpy's wheels): on the AVX2 EPYC it ran these products faster than torch's
        # kernels, and a bound is the fastest this CPU is seen to run them
        xn, wn = x.numpy(), [m.numpy().T.copy() for m in w]

        def layer_np(times: int) -> None:
            for _ in range(times):
                for k in range(4):
                    xn @ wn[k]
                (xn @ wn[4]) @ wn[5]

        t_np = min(timed(lambda: layer_np(times=4), repeats, "cpu")) / 4
        by_library[f"numpy {np.__version__}"] = flops / t_np
    return {
        "dtype": str(dtype).replace("torch.", ""),
        "matmul_flops_per_s": max(by_library.values()),
        "matmul_by_library": by_library,
        "exp_per_s": scores.numel() / t_exp,
    }


def _bound(config, lengths: list, rates: dict) -> dict:
    """The fastest this CPU could encode ``lengths``' texts at ``rates``: every product at the measured
    matmul rate and every softmax element at the measured exp rate, nothing else (no normalisation,
    activation, padding or data movement), so a lower bound on the time of any implementation of the
    same arithmetic."""
    work = encoder_flops(config, lengths)
    seconds = (work["linear"] + work["attention"]) / rates["matmul_flops_per_s"] + work["softmax"] / rates["exp_per_s"]
    return {**rates, "work": work, "texts_per_s": len(lengths) / seconds}


def _best(fn, batches, repeats: int, n: int) -> tuple:
    per = {}
    for bs in batches:
        fn(bs)  # warm-up
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn(bs)
            times.append(time.perf_counter() - t)
        per[bs] = n / statistics.median(times)
    best = max(per, key=per.__getitem__)
    return best, per[best], per


def _cos(a: np.ndarray, ref: np.ndarray) -> tuple:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    c = (a * ref).sum(1)
    return float(c.min()), float(c.mean())


def _auc_changes(csv_path, work: Path, precisions=("float32", "int8")) -> dict:
    """AUC of cosine and knn on the bundled role example, and the persona protocol's bi-encoder nAUC,
    with the encoder at each of ``precisions`` (float32 first); ``change_<precision>`` is its AUC minus
    float32's."""
    from importlib.resources import files

    from sklearn.metrics import roc_auc_score

    from .. import score as score_api
    from ..persona import PersonaConfig, evaluate_persona

    example = str(files("adherence") / "examples" / "role_turns.jsonl")
    out: dict = {}
    for method in ("cosine", "knn"):
        aucs = {}
        for precision in precisions:
            t = score_api(example, None, method=method, encoder_precision=precision).to_pandas()
            aucs[precision] = float(roc_auc_score(t["label"] == "adherent", t["score"]))
        out[f"role example / {method}"] = _changes(aucs)
    naucs = {}
    for precision in precisions:
        cfg = PersonaConfig(
            methods=("bi_encoder",),
            primary="bi_encoder",
            dimensions=("adherence",),
            device="cpu",
            progress=False,
            encoder_precision=precision,
        )
        ((_, res),) = evaluate_persona(str(csv_path), config=cfg).items()
        naucs[precision] = float(res["adherence"]["curves"]["bi_encoder"]["nauc"])
    out["persona protocol / bi_encoder nAUC"] = _changes(naucs)
    return out


def _changes(aucs: dict) -> dict:
    return {**aucs, **{f"change_{k}": v - aucs["float32"] for k, v in aucs.items() if k != "float32"}}


def _batch_shift(enc, corpus: list, got: np.ndarray) -> dict:
    """How far a text's embedding moves between the default batches (``got``) and batch size 1: largest
    component change, and largest change of the cosine between consecutive texts (what a score sees)."""
    saved = enc.batch_size
    enc.batch_size = 1
    try:
        alone = enc.encode(corpus[:400]).numpy()
    finally:
        enc.batch_size = saved
    pair = lambda e: (e[:-1] * e[1:]).sum(1)  # noqa: E731
    return {"batch_shift": float(np.abs(alone - got[:400]).max()),
            "pair_cosine_shift": float(np.abs(pair(alone) - pair(got[:400])).max())}  # fmt: skip


def _variants(exact, fast, corpus: list, mid=None) -> dict:
    """The CPU paths on ``corpus`` at their default batches: ours int8, two other int8 graphs of the same
    checkpoint (7-bit weights, what CPUs without VNNI run, and ONNX Runtime's dynamic quantiser: one
    activation scale per batch, per-channel weights, as sentence-transformers' and fastembed's int8
    exports) and, where it runs, bf16 (``mid``): lowest and mean cosine to float32, texts/s, and how far a
    text's embedding moves with its batch (``_batch_shift``)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    from ..models import OnnxSentenceModel, export_float, rowwise_int8

    ref = exact.encode(corpus).numpy()
    out = {}

    def measure(enc) -> dict:
        enc.encode(corpus[:64])
        t = time.perf_counter()
        got = enc.encode(corpus).numpy()
        tps = len(corpus) / (time.perf_counter() - t)
        lo, mean = _cos(got, ref)
        return {"batch": enc.batch_size, "min_cosine": lo, "mean_cosine": mean, "texts_per_s": tps,
                **_batch_shift(enc, corpus, got)}  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        fp32, q7, dyn = Path(tmp) / "f.onnx", Path(tmp) / "q7.onnx", Path(tmp) / "dyn.onnx"
        export_float(exact, fp32)
        rowwise_int8(fp32, q7, 63)
        logging.disable(logging.WARNING)  # the quantiser's advice to pre-process
        try:
            quantize_dynamic(str(fp32), str(dyn), weight_type=QuantType.QInt8, per_channel=True,
                             extra_options={"DefaultTensorType": 1})  # fmt: skip
        finally:
            logging.disable(logging.NOTSET)
        saved = fast._runtime
        for name, path in (
            ("ours int8", saved.path),
            ("ours int8, 7-bit weights", q7),
            ("onnxruntime dynamic int8", dyn),
        ):
            fast._runtime = OnnxSentenceModel(path)
            try:
                out[name] = measure(fast)
            finally:
                fast._runtime = saved
    if mid is not None:
        out["ours bf16 (OpenVINO)"] = measure(mid)
    return out


def bench_cpu_encoder(
    *,
    persona_csv: str,
    peers_python: Optional[str] = None,
    texts: int = 2000,
    long: int = 120,
    batches=(16, 32, 64, 128),
    long_batches=(8, 32),
    repeats: int = 2,
    accuracy: bool = True,
    model: Optional[str] = None,
    rounds: int = 3,
) -> dict:
    """Benchmark dict (``bench="cpu-encoder"``): ours (float32, bf16 where the CPU has bf16 products, int8)
    and each peer, texts/s per workload; the exact path and the fastest exact peer timed in turn ``rounds``
    times."""
    import torch

    from .._errors import OptionError
    from ..models import Encoder, resolve_model
    from .encoder import persona_chat_utterances

    path = resolve_model(model).path
    exact = Encoder(str(path), device="cpu", progress=False, cache_bytes=0)
    fast = Encoder(str(path), device="cpu", progress=False, cache_bytes=0, precision="int8")
    try:
        mid: Optional[Encoder] = Encoder(str(path), device="cpu", progress=False, cache_bytes=0, precision="bf16")
        bf16_note = None
    except OptionError as exc:  # a CPU without bf16 products
        mid, bf16_note = None, f"bf16 not run: {exc}"
    # the float32 path as it runs on this CPU (its runtime chosen at load), and on torch where that is another
    ours_encoders = [("adherence float32", exact, f"{exact.runtime} float32")]
    if exact.runtime != "torch":
        on_torch = Encoder(str(path), device="cpu", progress=False, cache_bytes=0, runtime="torch")
        ours_encoders.append(("adherence float32, torch", on_torch, "torch float32"))
    if mid is not None:
        ours_encoders.append(("adherence bf16", mid, "openvino bf16"))
        # the same path with every batch on its one dynamic-shape model: what the static-shape models add
        one = Encoder(str(path), device="cpu", progress=False, cache_bytes=0, precision="bf16")
        assert one._runtime is not None
        one._runtime.static_models = 0
        ours_encoders.append(("adherence bf16, dynamic shapes only", one, "openvino bf16 (ablation)"))
    ours_encoders.append(("adherence int8", fast, "onnxruntime int8"))
    rate_repeats = min(10, 5 * repeats)  # the CPU's rates: the fastest of 10 timings (5 with repeats=1)
    workloads = {
        "short": persona_chat_utterances(persona_csv, texts),
        "long": long_texts(persona_csv, exact.tokenizer, long),
    }
    result: dict = {
        "bench": "cpu-encoder",
        "device": device_name("cpu"),
        "cpu": cpu_info(),
        "args": {"model": exact.name, "texts": texts, "long": long, "repeats": repeats, "batches": list(batches),
                 "long_batches": list(long_batches), "rate_repeats": rate_repeats, "source": Path(persona_csv).name},
        "versions": {"torch": torch.__version__, "python": platform.python_version(),
                     "onnxruntime": __import__("onnxruntime").__version__,
                     "openvino": __import__("openvino").__version__.split("-")[0]},
        "criterion": f"exact: lowest cosine to sentence-transformers torch float32 >= {EXACT_MIN_COSINE}",
        "workloads": {},
    }  # fmt: skip
    if bf16_note:
        result["bf16_note"] = bf16_note
    # this CPU's rates, measured before and after everything else (a bound takes the faster of the two)
    dtypes = (torch.float32, torch.bfloat16) if mid is not None else (torch.float32,)
    rates = {dt: _rates(exact.config, dt, repeats=rate_repeats) for dt in dtypes}
    lengths: dict = {}  # each workload's token counts, for its bound once the end's rates are in
    peers = _Peers(peers_python, path) if peers_python else None
    try:
        for wname, corpus in workloads.items():
            bsz = batches if wname == "short" else long_batches
            lens = [len(i) for i in exact.tokenizer(corpus, truncation=True, max_length=exact.max_length)["input_ids"]]
            w: dict = {"texts": len(corpus), "unique_share": len(set(corpus)) / len(corpus),
                       "tokens_mean": float(np.mean(lens)), "tokens_max": int(max(lens))}  # fmt: skip
            ref = exact.encode(corpus).numpy()
            ours = {}
            encoders = {label: enc for label, enc, _ in ours_encoders}
            for label, enc, backend in ours_encoders:

                def run(bs, enc=enc):
                    enc.batch_size = bs
                    return enc.encode(corpus)

                default = enc.batch_size
                bs, tps, per = _best(run, bsz, repeats, len(corpus))
                lo, mean = _cos(run(bs).numpy(), ref)
                enc.batch_size = default  # the variants below run each path at its default batch
                ours[label] = {"name": label, "backend": backend, "batch": bs, "texts_per_s": tps, "per_batch": per,
                               "min_cosine": lo, "mean_cosine": mean}  # fmt: skip
            w["ours"] = list(ours.values())
            w["baselines"] = peers.run(corpus, bsz, repeats, ref) if peers is not None else []
            st = next(
                (b for b in w["baselines"] if b["name"] == "sentence-transformers torch" and "error" not in b), None
            )
            if st is not None:
                if 1 - st["min_cosine"] > 1e-4:
                    raise RuntimeError(
                        f"our float32 embeddings differ from sentence-transformers: lowest cosine {st['min_cosine']}"
                    )
                w["st_torch_default_texts_per_s"] = st["per_batch"].get("32")
            ok = [b for b in w["baselines"] if "error" not in b]
            exact_peers = [b for b in ok if b["min_cosine"] >= EXACT_MIN_COSINE]
            # our exact path: the fastest of ours that keeps the bar (cosines to our float32, which matches
            # sentence-transformers' to 1e-4 above); an ablation row is not a path a user runs
            paths = {k: r for k, r in ours.items() if "ablation" not in r["backend"]}
            exact_ours = max(
                (r for r in paths.values() if r["min_cosine"] >= EXACT_MIN_COSINE), key=lambda r: r["texts_per_s"]
            )
            w["exact_path"] = exact_ours["name"]
            if exact_peers and peers is not None:
                top = max(exact_peers, key=lambda b: b["texts_per_s"])
                w["fastest_exact_peer"] = top["name"]
                w["speedup"] = exact_ours["texts_per_s"] / top["texts_per_s"]
                w["float32_speedup"] = ours["adherence float32"]["texts_per_s"] / top["texts_per_s"]
                # the same two again, alternately (the machine's speed drifts over a run of many minutes)
                w["head_to_head"] = _head_to_head(
                    exact_ours, encoders[exact_ours["name"]], top, corpus, peers, repeats, ref, rounds
                )
                # the goal: never behind the fastest exact peer, and 1.2x it on short texts where the bound leaves room
                goal = EXACT_GOALS[wname]
                w["exact_goal"] = {"speedup": goal, "texts_per_s": goal * top["texts_per_s"]}
            lengths[wname] = lens
            fast_row = max(paths.values(), key=lambda r: r["texts_per_s"])
            w["fast_path"] = {"name": fast_row["name"], "texts_per_s": fast_row["texts_per_s"],
                              "min_cosine": fast_row["min_cosine"], "mean_cosine": fast_row["mean_cosine"]}  # fmt: skip
            if w.get("st_torch_default_texts_per_s"):
                w["fast_path"]["speedup"] = fast_row["texts_per_s"] / w["st_torch_default_texts_per_s"]
                for r in ours.values():
                    r["vs_st_torch_default"] = r["texts_per_s"] / w["st_torch_default_texts_per_s"]
            for b in ok:
                if b["mean_cosine"] < 0.9:  # not the same embedding: e.g. another truncation length
                    b["note"] = "embeddings differ from the checkpoint's (mean cosine < 0.9): not compared"
            comparable = [b for b in ok if "note" not in b]
            if comparable:
                top_any = max(comparable, key=lambda b: b["texts_per_s"])
                w["fast_path"]["fastest_peer"] = top_any["name"]
                w["fast_path"]["speedup_over_fastest"] = fast_row["texts_per_s"] / top_any["texts_per_s"]
            result["workloads"][wname] = w
    finally:
        if peers is not None:
            peers.close()

    for dt in dtypes:  # the faster of the start's and the end's rates, each library's too
        again = _rates(exact.config, dt, repeats=rate_repeats)
        rates[dt]["matmul_by_library"] = {
            lib: max(v, again["matmul_by_library"].get(lib, 0.0)) for lib, v in rates[dt]["matmul_by_library"].items()
        }
        rates[dt] = {k: max(v, again[k]) if isinstance(v, float) else v for k, v in rates[dt].items()}
    for wname, w in result["workloads"].items():
        # the same arithmetic's limit on this CPU, measured in this run (bf16 products where the exact path
        # runs them)
        row = next(r for r in w["ours"] if r["name"] == w["exact_path"])
        dtype = torch.bfloat16 if row["backend"].startswith("openvino bf16") else torch.float32
        w["bound"] = _bound(exact.config, lengths[wname], rates[dtype])
        for r in [*w["ours"], *(b for b in w["baselines"] if "error" not in b)]:
            r["ratio_to_bound"] = r["texts_per_s"] / w["bound"]["texts_per_s"]
        if "exact_goal" in w:
            w["exact_goal"]["ratio_to_bound"] = w["exact_goal"]["texts_per_s"] / w["bound"]["texts_per_s"]
    result["variants"] = _variants(exact, fast, workloads["short"], mid)
    if accuracy:
        precisions = ("float32", "bf16", "int8") if mid is not None else ("float32", "int8")
        with tempfile.TemporaryDirectory() as tmp:
            result["auc_changes"] = _auc_changes(persona_csv, Path(tmp), precisions)
    result["baselines"] = result["workloads"]["short"]["baselines"]
    result["speedup"] = result["workloads"]["short"].get("speedup")
    result.update(_verdict(result["workloads"]))
    return result


def _verdict(workloads: dict) -> dict:
    """``correct``: our float32 path was checked against sentence-transformers' torch backend on every workload
    (it raised above where they differ); False with a ``correct_note`` where that peer did not run."""
    checked = all(
        any(b["name"] == "sentence-transformers torch" and "error" not in b for b in w["baselines"])
        for w in workloads.values()
    )
    if checked:
        return {"correct": True}
    return {"correct": False, "correct_note": "sentence-transformers' torch backend did not run on every workload: "
            "our float32 path was not checked against it"}  # fmt: skip


def _head_to_head(ours: dict, enc, peer: dict, corpus: list, peers: _Peers, repeats: int, ref, rounds: int = 3):
    """Our exact path and the fastest exact peer, each at its best batch, timed in turn ``rounds`` times: the
    ratio of each round and their median (a drift of the machine's speed touches both sides alike)."""

    def run(bs):
        enc.batch_size = bs
        return enc.encode(corpus)

    out, saved = [], enc.batch_size
    for _ in range(rounds):
        _, a, _ = _best(run, [ours["batch"]], repeats, len(corpus))
        (row,) = peers.run(corpus, [peer["batch"]], repeats, ref, only=(peer["name"],))
        if "error" in row:
            raise RuntimeError(f"{peer['name']} failed on its head-to-head rerun: {row['error']}")
        out.append({"ours": a, "peer": row["texts_per_s"], "speedup": a / row["texts_per_s"]})
    enc.batch_size = saved
    return {"ours": ours["name"], "peer": peer["name"], "rounds": out,
            "speedup": statistics.median(r["speedup"] for r in out)}  # fmt: skip


class _Peers:
    """``_encoder_peers.py`` under the peers' ``python``, started once for a bench (its imports and the
    checkpoint's ONNX export take seconds) and asked for each workload and each head-to-head round."""

    def __init__(self, python: str, model_dir: Path) -> None:
        flags = set(cpu_info()["simd"])
        isa = "avx512_vnni" if "avx512_vnni" in flags else "avx512" if "avx512f" in flags else "avx2"
        script = Path(__file__).with_name("_encoder_peers.py")
        self.python, self._tmp = python, tempfile.TemporaryDirectory()
        self._err = open(Path(self._tmp.name) / "stderr.txt", "w+")
        self._proc = subprocess.Popen(
            [python, str(script), "--model", str(model_dir), "--isa", isa],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env=_offline_env(),
        )
        try:
            self._reply()  # ready
        except BaseException:
            self.close()  # its temporary folder and stderr file too
            raise

    def _reply(self) -> dict:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait()
            self._err.seek(0)
            tail = self._err.read().strip().splitlines()[-1:]
            raise RuntimeError(f"the peers' run failed ({self.python}, exit {self._proc.returncode}): {tail}")
        return json.loads(line)

    def run(self, corpus: list, batches, repeats: int, ref: np.ndarray, only=()) -> list:
        """The peers' rows on ``corpus`` (``only``: those peers), each with its cosines to ``ref``."""
        assert self._proc.stdin is not None
        with tempfile.TemporaryDirectory(dir=self._tmp.name) as tmp:
            t = Path(tmp)
            (t / "texts.json").write_text(json.dumps(corpus))
            req = {"texts": str(t / "texts.json"), "out": str(t / "peers.json"), "emb_dir": str(t / "emb"),
                   "batches": list(batches), "repeats": repeats, "only": list(only)}  # fmt: skip
            try:
                self._proc.stdin.write(json.dumps(req) + "\n")
                self._proc.stdin.flush()
            except BrokenPipeError:
                pass  # it has ended: its reply says how
            self._reply()
            rows = []
            for row in json.loads((t / "peers.json").read_text())["peers"]:
                row = {k: v for k, v in row.items() if k != "traceback_tail"}
                if "embeddings" in row:
                    row["min_cosine"], row["mean_cosine"] = _cos(np.load(t / "emb" / row.pop("embeddings")), ref)
                    row["per_batch"] = {str(k): v for k, v in row["per_batch"].items()}
                rows.append(row)
            return rows

    def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()  # its loop ends
            except BrokenPipeError:
                pass
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._err.close()
        self._tmp.cleanup()


def _offline_env() -> dict:
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "true"}
