"""Time the CPU sentence-encoder peers on given texts (run in the peers' own environment).

sentence-transformers' ONNX and OpenVINO backends pin an older transformers than adherence's
tests, so the peers live in their own virtual environment (``pip install ".[cpu-peers]"`` there) and
``adherence bench cpu-encoder --peers-python`` starts this file there once, with the checkpoint: its imports
and the checkpoint's ONNX export take seconds, and a bench asks it for each workload and each head-to-head
round. Nothing here imports adherence.

One request a line on standard input (JSON: ``texts``, a file holding the JSON list of texts; ``out``;
``emb_dir``; ``batches``; ``repeats``; ``only``, the peers to run, all when empty); one line on standard
output when its ``out`` is written (``{"done": out}``), after a first ``{"ready": ...}`` line. Each peer
runs at each batch size: one untimed warm-up encode, then ``repeats`` timed encodes of every text (only the
peer's encode call in the timer). The embeddings of each peer's fastest setting are written to ``emb_dir``
for the correctness check, which the caller does against its own float32 reference. A peer that cannot run
here is a row with its error. Standard input closed: the process ends.

    python _encoder_peers.py --model DIR [--isa avx2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from importlib.metadata import version
from pathlib import Path
from typing import Any

# Run as a file from adherence/bench: its directory (with modules named like the peers' own, e.g.
# encoder.py) must not shadow theirs.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402


def _timed(fn, repeats: int) -> float:
    fn()  # warm-up: first-call allocations and graph compilation
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _peers(model_dir: Path, work: Path, isa: str) -> dict:
    """name -> (backend, version, factory); a factory returns encode(texts, batch) -> float32 [n, d]."""
    from sentence_transformers import (
        SentenceTransformer,
        export_dynamic_quantized_onnx_model,
        export_optimized_onnx_model,
    )

    st_version = version("sentence-transformers")
    fe_version = _version_of("fastembed")

    def st_model(backend: Any, **kw):
        return SentenceTransformer(str(work), device="cpu", backend=backend, **kw)

    def st_encode(m):
        return lambda texts, bs: m.encode(texts, batch_size=bs, normalize_embeddings=True, show_progress_bar=False)

    def onnx_file(name: str) -> str:
        return f"onnx/{name}"

    def st_onnx(file: str):
        def make():
            return st_encode(st_model("onnx", model_kwargs={"file_name": onnx_file(file)}))

        return make

    def st_optimized(level: str):
        def make():
            base = st_model("onnx")
            export_optimized_onnx_model(base, level, str(work))
            return st_encode(st_model("onnx", model_kwargs={"file_name": onnx_file(f"model_{level}.onnx")}))

        return make

    def st_quantized():
        base = st_model("onnx")
        export_dynamic_quantized_onnx_model(base, isa, str(work))
        return st_encode(st_model("onnx", model_kwargs={"file_name": onnx_file(f"model_qint8_{isa}.onnx")}))

    def fastembed(file: str):
        def make():
            from fastembed import TextEmbedding
            from fastembed.common.model_description import ModelSource, PoolingType

            name = f"local/minilm-{file}"
            try:
                TextEmbedding.add_custom_model(
                    model=name,
                    pooling=PoolingType.MEAN,
                    normalization=True,
                    sources=ModelSource(hf="local/none"),
                    dim=384,
                    model_file=onnx_file(file),
                )
            except ValueError:
                pass  # already registered in this process
            m = TextEmbedding(model_name=name, specific_model_path=str(work))
            return lambda texts, bs: np.stack(list(m.embed(texts, batch_size=bs)))

        return make

    try:  # optimum's export of the checkpoint, saved as onnx/model.onnx beside it for the ONNX peers
        st_model("onnx").save_pretrained(str(work))
    except Exception as exc:  # without optimum each ONNX peer reports its own failure
        print(f"no ONNX export: {type(exc).__name__}: {exc}", file=sys.stderr)
    return {
        "sentence-transformers torch": ("torch", st_version, lambda: st_encode(st_model("torch"))),
        "sentence-transformers onnx": ("onnxruntime", st_version, st_onnx("model.onnx")),
        **{
            f"sentence-transformers onnx {lvl}": ("onnxruntime", st_version, st_optimized(lvl))
            for lvl in ("O1", "O2", "O3", "O4")
        },
        "sentence-transformers openvino": ("openvino", st_version, lambda: st_encode(st_model("openvino"))),
        # OpenVINO's CPU plugin computes in bf16 by default on CPUs with AMX or AVX512-BF16; this row asks for f32
        "sentence-transformers openvino (f32 hint)": (
            "openvino",
            st_version,
            lambda: st_encode(st_model("openvino", model_kwargs={"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}})),
        ),
        f"sentence-transformers onnx qint8 ({isa})": ("onnxruntime", st_version, st_quantized),
        "fastembed": ("onnxruntime", fe_version, fastembed("model.onnx")),
        f"fastembed qint8 ({isa})": ("onnxruntime", fe_version, fastembed(f"model_qint8_{isa}.onnx")),
    }


def _run(peers: dict, req: dict) -> list:
    """The rows of one request: each wanted peer timed at each batch size, its best embeddings saved."""
    texts = json.loads(Path(req["texts"]).read_text())
    emb_dir = Path(req["emb_dir"])
    emb_dir.mkdir(parents=True, exist_ok=True)
    wanted = set(req.get("only") or ())
    rows = []
    for i, (name, (backend, ver, make)) in enumerate(peers.items()):
        if wanted and name not in wanted:
            continue
        row = {"name": name, "version": ver, "backend": backend}
        try:
            encode = make()
            per_batch = {}
            for bs in req["batches"]:
                per_batch[bs] = len(texts) / _timed(lambda bs=bs: encode(texts, bs), req["repeats"])
            best = max(per_batch, key=per_batch.__getitem__)
            np.save(emb_dir / f"peer{i}.npy", np.asarray(encode(texts, best), dtype=np.float32))
            row.update(batch=best, texts_per_s=per_batch[best], per_batch=per_batch, embeddings=f"peer{i}.npy")
        except Exception as exc:  # a peer that cannot run here is reported, not fatal
            row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            row["traceback_tail"] = traceback.format_exc().splitlines()[-3:]
        print(json.dumps({k: v for k, v in row.items() if k != "traceback_tail"}), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", required=True, help="sentence-transformers checkpoint directory (copied; exports go to the copy)"
    )
    ap.add_argument(
        "--isa", default="avx2", help="ISA of sentence-transformers' qint8 export: avx2, avx512, avx512_vnni"
    )
    args = ap.parse_args(argv)
    # the replies go to the real standard output; whatever the libraries print (Python or C) goes to stderr
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(msg: dict) -> None:
        replies.write(json.dumps(msg) + "\n")
        replies.flush()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "model"
        shutil.copytree(args.model, work)
        peers = _peers(work, work, args.isa)
        reply({"ready": True, "versions": _versions()})
        for line in sys.stdin:
            req = json.loads(line)
            Path(req["out"]).write_text(json.dumps({"peers": _run(peers, req)}, indent=2))
            reply({"done": req["out"]})
    return 0


def _version_of(pkg: str):
    try:
        return version(pkg)
    except Exception:  # not installed in this environment
        return None


def _versions() -> dict:
    pkgs = ("sentence-transformers", "transformers", "torch", "onnxruntime", "optimum", "optimum-onnx", "optimum-intel")
    return {pkg: _version_of(pkg) for pkg in (*pkgs, "openvino", "fastembed")}


if __name__ == "__main__":
    raise SystemExit(main())
