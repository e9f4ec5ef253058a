"""Which runtime should run the exact (float32) encoder on this CPU: torch, ONNX Runtime with
its full graph optimisation (one session with every thread, or one single-thread session per thread), and OpenVINO
with its float32 inference precision (throughput streams, or one) -- on the same texts, the same length-sorted
padded batches, after a warm-up, each checked first against torch float32 (lowest cosine >= 0.9999).

    python benchmarks/float32_runtimes.py Synthetic-Persona-Chat_valid.csv OUT.json [texts]

The texts: distinct Synthetic-Persona-Chat utterances (short), and the same texts joined four at a time (long).
"""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from adherence.bench._hardware import cpu_info
from adherence.bench.encoder import persona_chat_utterances
from adherence.models import Encoder
from adherence.models._onnx import encoder_file, openvino_core


def _timed(fn, texts, repeats=3):
    fn(texts[:128])  # warm-up
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn(texts)
        best = min(best, time.perf_counter() - t)
    return best, out


def _runner(enc, run_batches):
    """An encode of ``texts`` through ``run_batches(list of (ids, mask)) -> list of embeddings`` with the encoder's
    own tokenising and batching (what the encoder does around its runtime)."""

    def encode(xs):
        batches = list(enc._batches(xs, "bench"))
        embs = run_batches([(b["input_ids"].numpy(), b["attention_mask"].numpy()) for _, b in batches])
        out = np.empty((len(xs), enc.dim), np.float32)
        for (idx, _), e in zip(batches, embs):
            out[idx] = e
        return out

    return encode


def _split(workers, run_one):
    pool = ThreadPoolExecutor(len(workers)) if len(workers) > 1 else None

    def run(feeds):
        n = len(workers)
        if pool is None:
            return [run_one(workers[0], f) for f in feeds]
        parts = list(pool.map(lambda k: [run_one(workers[k], f) for f in feeds[k::n]], range(n)))
        out: list = [None] * len(feeds)
        for k, p in enumerate(parts):
            out[k::n] = p
        return out

    return run


def main(csv_path: str, out_path: str, n_texts: int = 2000) -> None:
    import onnxruntime as ort
    import openvino as ov

    threads = torch.get_num_threads()
    short = persona_chat_utterances(csv_path, limit=n_texts)
    workloads = {"short": short, "long": [" ".join(short[i : i + 4]) for i in range(0, len(short) - 3, 4)][:400]}
    enc = Encoder(None, progress=False, cache_bytes=0, runtime="torch")
    path = encoder_file(enc, "bf16")  # the float32 export (OpenVINO's bf16 path runs the same file)
    ids_feed = ("input_ids", "attention_mask")

    def ort_sessions(intra, count):
        o = ort.SessionOptions()
        o.intra_op_num_threads, o.inter_op_num_threads, o.log_severity_level = intra, 1, 3
        o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return [ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"]) for _ in range(count)]

    def ov_requests(streams):
        cm = openvino_core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                             "PERFORMANCE_HINT": "THROUGHPUT",
                                                             "NUM_STREAMS": str(streams)})  # fmt: skip
        requests = [cm.create_infer_request() for _ in range(streams)]
        # One inference on this thread first: two threads' first inferences at once deadlocked in OpenVINO's Python
        # binding (both in its first use of numpy's API; seen on the AVX512-BF16 EPYC). The engine's encoder, too,
        # passes inputs from its main thread before OpenVINO's threads read any result.
        one = np.ones((1, 8), np.int64)
        requests[0].infer(dict(zip(ids_feed, (one, one))))[0].copy()
        return requests

    runtimes = {
        "torch": lambda xs: enc.encode(xs).numpy(),
        f"onnxruntime {ort.__version__}, 1 session x {threads} threads": _runner(
            enc, _split(ort_sessions(threads, 1), lambda s, f: s.run(None, dict(zip(ids_feed, f)))[0])
        ),
        f"onnxruntime {ort.__version__}, {threads} sessions x 1 thread": _runner(
            enc, _split(ort_sessions(1, threads), lambda s, f: s.run(None, dict(zip(ids_feed, f)))[0])
        ),
        f"openvino {ov.__version__.split('-')[0]} f32, {threads} streams": _runner(
            enc, _split(ov_requests(threads), lambda r, f: r.infer(dict(zip(ids_feed, f)))[0].copy())
        ),
        f"openvino {ov.__version__.split('-')[0]} f32, 1 stream": _runner(
            enc, _split(ov_requests(1), lambda r, f: r.infer(dict(zip(ids_feed, f)))[0].copy())
        ),
    }
    results: dict = {}
    for wname, texts in workloads.items():
        lens = [len(enc.tokenizer(t, truncation=True, max_length=enc.max_length)["input_ids"]) for t in texts]
        ref = enc.encode(texts).numpy()
        rows = {}
        for name, fn in runtimes.items():
            seconds, emb = _timed(fn, texts)
            cos = float((emb * ref).sum(-1).min())
            rows[name] = {"texts_per_s": len(texts) / seconds, "min_cosine_to_torch": cos, "exact": cos >= 0.9999}
            print(wname, name, rows[name], flush=True)
        best_peer = max((r["texts_per_s"] for n, r in rows.items() if not n.startswith("torch") and r["exact"]))
        results[wname] = {
            "texts": len(texts),
            "unique_share": len(set(texts)) / len(texts),
            "tokens_mean": float(np.mean(lens)),
            "tokens_max": int(max(lens)),
            "runtimes": rows,
            "torch_over_fastest_other": rows["torch"]["texts_per_s"] / best_peer,
        }
    doc = {
        "bench": "float32 encoder runtimes",
        "criterion": "exact: lowest cosine to torch float32 >= 0.9999 (checked before timing counts)",
        "timing": "best of 3 encodes of every text after a warm-up; tokenising and batching inside the timer for all",
        "threads": threads,
        "workloads": results,
        "cpu": cpu_info(),
        "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__, "openvino": ov.__version__},
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:]))
