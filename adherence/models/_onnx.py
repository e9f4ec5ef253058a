"""The encoder's CPU runtimes: the checkpoint converted once, then run by OpenVINO (float32, bf16) or, quantised
to int8, by ONNX Runtime.

The default float32 path runs where it ran fastest on each kind of CPU measured (``FLOAT32_RUNTIMES``, chosen at
load by ``float32_runtime``): OpenVINO with its float32 inference precision on every x86-64 kind (on the AMX Xeon,
the AVX2 EPYC and the AVX512-BF16 EPYC it outran torch on short and long texts: docs/encoders.md), over an
OpenVINO model converted from the torch checkpoint by OpenVINO's own PyTorch front end (no ONNX), so OpenVINO is a
core requirement; torch elsewhere (Arm, or an install without OpenVINO), and for token embeddings (BERTScore). Both
are exact (lowest cosine to sentence-transformers' float32 >= 0.9999; measured 0.9999998). The bf16 and int8 paths
run an ONNX export and need the extra (``pip install 'adherence[cpu-encoders]'``: ONNX Runtime and onnx).

``Encoder(precision="bf16")`` (``--encoder-precision bf16``) runs the float32 export through OpenVINO with
its bf16 inference precision (``INFERENCE_PRECISION_HINT``: OpenVINO picks which operations run in bf16 on
AMX or AVX512-BF16; refused on a CPU without them, where OpenVINO would run float32 under the same name),
the OpenVINO streams of the CPU's cores each taking every n-th batch. Its embeddings stayed within
float32's bar on the benchmark texts (lowest cosine >= 0.9999; docs/encoders.md states by how much).

``Encoder(precision="int8")`` (``--encoder-precision int8``) encodes sentences through an int8 copy of the
checkpoint: each linear layer's weights as int8 with one scale per output column, its input quantised
to 8 bits per row (per token, when it is computed), the integer product by ONNX Runtime's
``MatMulInteger``; attention, layer norms and pooling stay float32. A text's embedding does not depend
on the texts batched with it. ONNX Runtime picks its kernels for the CPU it runs on (AVX2, AVX-512,
VNNI, AMX); nothing is built for one CPU, and on a CPU without VNNI the weights use 7 bits
(``weight_levels``).

The export needs no network: torch's ONNX exporter traces the checkpoint, ``rowwise_int8`` rewrites
the graph for int8, and the file is kept in the user's cache (``$ADHERENCE_CACHE_DIR``, else
``$XDG_CACHE_HOME/adherence``, else ``~/.cache/adherence``) under a key of the checkpoint's files and the
exporter's versions, so each checkpoint is exported once per machine (seconds) and a second process
reuses it. The file is written under a temporary name and renamed when complete: two processes
exporting at once both end with a whole file.

The graph returns the pooled, unit-norm sentence embedding (the checkpoint's own pooling), so a batch
comes back as ``[texts, dim]`` float32.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
import threading
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from .._errors import OptionError

__all__ = [
    "BF16_BATCH_TOLERANCE",
    "CPU_ENCODERS_EXTRA",
    "FLOAT32_RUNTIMES",
    "PRECISIONS",
    "cache_dir",
    "cache_name",
    "encoder_file",
    "float32_runtime",
    "openvino_file",
    "encoder_precision_option",
    "runtime_version",
    "OnnxSentenceModel",
    "OpenVinoSentenceModel",
    "weight_levels",
]

#: Sentence-encoder precisions: ``float32`` (the checkpoint as trained, or the run dtype on a GPU), and the
#: CPU paths of this module: ``bf16`` (OpenVINO, on CPUs with bf16 products) and ``int8`` (ONNX Runtime).
PRECISIONS = ("float32", "bf16", "int8")
#: How far two bf16 cosine scores of the same texts, batched differently, may differ: a bf16 embedding moves
#: by ~1e-3 with the texts batched beside it (docs/encoders.md); checks comparing such scores allow this.
BF16_BATCH_TOLERANCE = 5e-3
_FORMAT = 3  # bump when the exported graph or the quantisation changes
#: The extra that installs what the bf16 and int8 paths need beyond the core (ONNX Runtime and onnx: about 100 MB
#: that the default float32 path does not use).
CPU_ENCODERS_EXTRA = "cpu-encoders"
#: The float32 path's runtime on each kind of CPU (``adherence.models._device.cpu_kind``), the fastest exact runtime
#: measured there (``benchmarks/float32_runtimes.py``, ``adherence bench cpu-encoder``: OpenVINO float32 over torch
#: on AMX, AVX512-BF16 and AVX2; AVX-512 without bf16 is not measured and takes its neighbours' choice). A kind not
#: listed runs torch.
FLOAT32_RUNTIMES = {"amx": "openvino", "avx512bf16": "openvino", "avx512": "openvino", "avx2": "openvino"}
#: The runtimes the float32 path can run on (``Encoder(runtime=...)`` names one; torch also serves GPUs).
FLOAT32_RUNTIME_NAMES = ("openvino", "torch")


def float32_runtime(requested: Optional[str] = None) -> str:
    """The runtime of the float32 CPU path: ``requested`` when given (``"openvino"`` or ``"torch"``), else this CPU
    kind's entry of ``FLOAT32_RUNTIMES`` where OpenVINO imports, else torch (Arm, or OpenVINO missing: exact, slower).
    """
    from .._optional import is_available
    from ._device import cpu_kind

    if requested is not None:
        if requested not in FLOAT32_RUNTIME_NAMES:
            raise OptionError(
                f"`runtime` must be one of {', '.join(FLOAT32_RUNTIME_NAMES)} for float32, got {requested!r}"
            )
        if requested == "openvino" and not is_available("openvino"):
            from .._errors import MissingDependencyError

            raise MissingDependencyError(
                "'openvino' is needed for the encoder's openvino runtime but is not installed; it is a requirement of "
                "adherence: pip install -c constraints.txt -e ."
            )
        return requested
    chosen = FLOAT32_RUNTIMES.get(cpu_kind(), "torch")
    return chosen if chosen != "openvino" or is_available("openvino") else "torch"


def encoder_precision_option():
    """The ``--encoder-precision`` option, declared here once for every command that encodes sentences."""
    from .._options import option

    return option(
        "float32",
        choices=PRECISIONS,
        help="sentence encoder on the CPU: float32 (the checkpoint as trained), bf16 (OpenVINO on a CPU with bf16 "
        "products, AMX or AVX512-BF16: several times faster, cosine to float32 >= 0.9999) or int8 (ONNX Runtime, "
        "any CPU), both from pip install 'adherence[cpu-encoders]'; their cosine to float32 and AUC changes are in "
        "docs/encoders.md; recorded in the run metadata",
    )


def cache_dir() -> Path:
    """Where exported encoders are kept: ``$ADHERENCE_CACHE_DIR``, ``$XDG_CACHE_HOME/adherence`` or ``~/.cache/adherence``."""
    root = os.environ.get("ADHERENCE_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "adherence"


def _checkpoint_key(path: Path, pooling: str, max_length: int, tools: tuple = ("onnxruntime",)) -> str:
    """A digest of the checkpoint's files (names, sizes, modification times), its pooling, torch's version and the
    versions of ``tools`` (the modules that convert or rewrite the graph)."""
    import torch

    versions = "|".join(__import__(t).__version__ for t in tools)
    h = hashlib.sha256(f"{_FORMAT}|{pooling}|{max_length}|{torch.__version__}|{versions}".encode())
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(path)}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def _publish(tmp: Path, dest: Path) -> None:
    os.replace(tmp, dest)


def _sentence_module(encoder):
    """The encoder as one torch module: forward, the checkpoint's pooling, normalisation; ``[texts, dim]`` out."""
    import torch
    from transformers import AutoModel

    class Sentence(torch.nn.Module):
        def __init__(self, enc) -> None:
            super().__init__()
            # Eager attention: its graph runs faster under ONNX Runtime than SDPA's on long texts and
            # gives the same embeddings (under OpenVINO the two ran level).
            self.model = AutoModel.from_pretrained(str(enc.resolved.path), attn_implementation="eager").eval()
            self.enc = enc

        def forward(self, input_ids, attention_mask):
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return torch.nn.functional.normalize(self.enc._pool(hidden.float(), attention_mask), dim=-1)

    return Sentence(encoder).eval()


def _example_batch():
    import torch

    return torch.ones(2, 8, dtype=torch.int64), torch.ones(2, 8, dtype=torch.int64)


def _export_openvino(encoder, dest: Path) -> None:
    """Convert the encoder (forward + pooling + normalisation) with OpenVINO's PyTorch front end into a float32
    OpenVINO model at ``dest`` (``.xml``, its weights beside it in ``.bin``, kept float32: not compressed to fp16)."""
    import openvino as ov
    import torch

    ids, mask = _example_batch()
    shape = ov.PartialShape([-1, -1])
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notes on the checkpoint's Python branches
        model = ov.convert_model(
            _sentence_module(encoder),
            example_input={"input_ids": ids, "attention_mask": mask},
            input=[("input_ids", shape, ov.Type.i64), ("attention_mask", shape, ov.Type.i64)],
        )
    ov.save_model(model, str(dest), compress_to_fp16=False)


def export_float(encoder, dest: Path) -> None:
    """Trace the encoder (forward + pooling + normalisation) into a float32 ONNX file at ``dest``."""
    import torch

    ids, mask = _example_batch()
    dynamic = {
        "input_ids": {0: "texts", 1: "tokens"},
        "attention_mask": {0: "texts", 1: "tokens"},
        "embedding": {0: "texts"},
    }
    model = _sentence_module(encoder)
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        torch.onnx.export(
            model,
            (ids, mask),
            str(dest),
            dynamo=False,
            opset_version=17,
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes=dynamic,
        )


def weight_levels() -> int:
    """Largest int8 weight magnitude for this CPU: 127, or 63 without VNNI. There the u8 x s8 products are
    summed in pairs into int16 (``vpmaddubsw``), which 255 x 127 x 2 would overflow; 7-bit weights cannot
    (ONNX Runtime's "reduce range" for the same reason)."""
    from ._device import cpu_features

    flags = cpu_features()
    return 127 if {"avx512_vnni", "avx_vnni", "amx_int8"} & flags else 63


def rowwise_int8(src: Path, dest: Path, levels: int) -> int:
    """Rewrite each ``MatMul`` by a constant weight of the float32 graph at ``src`` into int8 with one scale
    per row of its input (per token) and one per output column of its weight; returns how many.

    ``x @ W`` becomes ``MatMulInteger(q(x), Wq) * s_x * s_W`` with ``s_x = max|x_row| / 127`` per row
    and ``q(x) = round(x / s_x) + 128`` as uint8 (zero point 128), ``s_W = max|W_col| / levels``. A
    per-row scale makes each text's embedding independent of the texts batched with it (ONNX Runtime's
    dynamic quantiser scales a whole batch by its largest value, so a text's embedding moves with its
    neighbours; ``adherence bench cpu-encoder`` measures both) and keeps it closer to float32.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    weights = {i.name: i for i in g.initializer}
    consts = {
        "rq_eps": np.float32(1e-12),
        "rq_127": np.float32(127.0),
        "rq_128": np.float32(128.0),
        "rq_zp": np.uint8(128),
    }
    nodes, used, n = [], set(), 0
    for node in g.node:
        w = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if w is None or len(w.dims) != 2:
            nodes.append(node)
            continue
        arr = numpy_helper.to_array(w).astype(np.float32)
        sw = np.maximum(np.abs(arr).max(axis=0), 1e-12) / levels
        p = f"rq{n}_"
        n += 1
        used.add(w.name)
        g.initializer.extend(
            [
                numpy_helper.from_array(np.round(arr / sw).astype(np.int8), p + "wq"),
                numpy_helper.from_array(sw.astype(np.float32), p + "sw"),
            ]
        )
        x, y = node.input[0], node.output[0]
        nodes += [
            helper.make_node("Abs", [x], [p + "abs"]),
            helper.make_node("ReduceMax", [p + "abs"], [p + "max"], axes=[-1], keepdims=1),
            helper.make_node("Max", [p + "max", "rq_eps"], [p + "maxe"]),
            helper.make_node("Div", ["rq_127", p + "maxe"], [p + "inv"]),  # 1 / s_x, per row
            helper.make_node("Div", [p + "maxe", "rq_127"], [p + "s"]),  # s_x
            helper.make_node("Mul", [x, p + "inv"], [p + "xs"]),
            helper.make_node("Round", [p + "xs"], [p + "xr"]),
            helper.make_node("Add", [p + "xr", "rq_128"], [p + "xu"]),
            helper.make_node("Cast", [p + "xu"], [p + "xq"], to=TensorProto.UINT8),
            helper.make_node("MatMulInteger", [p + "xq", p + "wq", "rq_zp"], [p + "acc"]),
            helper.make_node("Cast", [p + "acc"], [p + "accf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [p + "accf", p + "s"], [p + "y"]),
            helper.make_node("Mul", [p + "y", p + "sw"], [y]),
        ]
    kept = [i for i in g.initializer if i.name not in used]
    kept += [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(kept)
    onnx.save(model, str(dest))
    return n


#: The module that runs each CPU precision (float32's: ``float32_runtime``).
_RUNTIMES = {"bf16": "openvino", "int8": "onnxruntime"}


def runtime_version(module: str) -> str:
    """``"<runtime> <version>"`` of a runtime module (``"openvino 2026.4.1"``, ``"torch 2.13.0+cpu"``), for metadata;
    a precision names its runtime (``"bf16"`` -> openvino)."""
    module = _RUNTIMES.get(module, module)
    return f"{module} {__import__(module).__version__.split('-')[0]}"


def cache_name(name: str) -> str:
    """``name`` as a cache folder's name: its last path part, runs of other characters than word characters,
    ``.`` and ``-`` as ``_`` (``bundled:name`` -> ``bundled_name``)."""
    return re.sub(r"[^\w.-]+", "_", Path(name).name)


def _cache_folder(encoder, tools: tuple) -> Path:
    key = _checkpoint_key(encoder.resolved.path, encoder.pooling, encoder.max_length, tools)
    return cache_dir() / "encoders" / f"{cache_name(encoder.name)}-{key}"


def _say_export(encoder, runtime: str, folder: Path) -> None:
    if getattr(encoder, "progress", False):
        print(f"converting {encoder.name} for {runtime} into {folder} (once per machine) ...", file=sys.stderr)


def openvino_file(encoder) -> Path:
    """The float32 OpenVINO model (``.xml``; weights in the ``.bin`` beside it) the float32 path runs for
    ``encoder``'s checkpoint, converted into the cache on first use (seconds). Both files are written under a
    temporary folder and moved into place weights first, so a process that finds the ``.xml`` finds them whole."""
    folder = _cache_folder(encoder, ("openvino",))
    dest = folder / "openvino-float32.xml"
    if dest.exists():
        return dest
    folder.mkdir(parents=True, exist_ok=True)
    _say_export(encoder, "openvino", folder)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".export-") as tmp:
        xml = Path(tmp) / dest.name
        _export_openvino(encoder, xml)
        _publish(xml.with_suffix(".bin"), dest.with_suffix(".bin"))
        _publish(xml, dest)
    return dest


def encoder_file(encoder, precision: str) -> Path:
    """The ONNX file ``precision`` runs for ``encoder``'s checkpoint (``bf16``: the float32 export, which
    OpenVINO runs with bf16 products; ``int8``: the quantised graph), exported into the cache on first use."""
    from .._optional import require

    # the exporter, and ONNX Runtime (int8's runtime; its version is in the cache key): the extra installs both
    for module in ("onnxruntime", "onnx"):
        require(module, CPU_ENCODERS_EXTRA, f"--encoder-precision {precision}")
    levels = weight_levels()
    folder = _cache_folder(encoder, ("onnxruntime",))
    dest = folder / ("model-float32.onnx" if precision == "bf16" else f"model-int8-w{levels}.onnx")
    if dest.exists():
        return dest
    folder.mkdir(parents=True, exist_ok=True)
    _say_export(encoder, _RUNTIMES[precision], folder)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".export-") as tmp:
        fp32 = Path(tmp) / "model-float32.onnx"
        export_float(encoder, fp32)
        if precision == "bf16":
            _publish(fp32, dest)
            return dest
        q = Path(tmp) / dest.name
        if not rowwise_int8(fp32, q, levels):
            raise OptionError(f"{encoder.name}: no linear layer to quantise in its exported graph")
        _publish(q, dest)
    return dest


class OnnxSentenceModel:
    """ONNX Runtime sessions over an exported sentence encoder: one single-threaded session per thread of
    the job (torch's thread count, which the job sets), each running every n-th batch of a call. On small
    batches one-thread sessions side by side outran one session with every thread: a short text's
    matrices are too small to split well."""

    def __init__(self, path: Path, threads: Optional[int] = None) -> None:
        import onnxruntime as ort
        import torch

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.path = path
        n = max(1, int(threads or torch.get_num_threads()))
        self.sessions = [ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]) for _ in range(n)]
        self._pool: Optional[Any] = None

    def run(self, batches: list) -> list:
        """``[texts, dim]`` float32 unit-norm embeddings of each padded batch ``(input_ids, attention_mask)``."""
        n = len(self.sessions)

        def part(k: int) -> list:
            sess = self.sessions[k]
            return [sess.run(None, {"input_ids": ids, "attention_mask": mask})[0] for ids, mask in batches[k::n]]

        if n == 1 or len(batches) == 1:
            return (
                part(0)
                if n == 1
                else [self.sessions[0].run(None, dict(zip(("input_ids", "attention_mask"), batches[0])))[0]]
            )
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(n, thread_name_prefix="adherence-int8")
        parts = list(self._pool.map(part, range(n)))
        out: list = [None] * len(batches)
        for k, rows in enumerate(parts):
            out[k::n] = rows
        return out


def _usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS reports one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


#: A batch shape ``(texts, tokens)`` gets its own static-shape OpenVINO model once the batches of that shape
#: have carried this many tokens (about a second of encoding on two cores, against ~0.4 s to compile one):
#: with every dimension known, OpenVINO folds the position and token-type embeddings into constants and
#: fuses the element-wise operations into its generated kernels (``bench cpu-encoder`` times the path with
#: and without these models). Shapes seen less than that run on the one dynamic-shape model.
STATIC_AFTER_TOKENS = 32_768
#: At most this many static models per encoder: each is a compiled copy of the weights and its buffers
#: (~100-200 MB for MiniLM), so a job's most frequent shapes get one and the rest stay dynamic.
STATIC_MODELS = 4


#: OpenVINO's settings per inference precision: bf16 in throughput mode (the threads split into streams, each
#: running every n-th batch: short texts' matrices are too small to split well over threads); float32 as one
#: stream over every thread (``PERFORMANCE_HINT: LATENCY``), which outran two streams on the AMX Xeon and the AVX2
#: EPYC on short and long texts (``benchmarks/float32_runtimes.py``).
_OPENVINO_MODES = {"bf16": "THROUGHPUT", "f32": "LATENCY"}

_CORE: list = []  # the process's one OpenVINO Core (see openvino_core)
_CORE_LOCK = threading.Lock()


def openvino_core():
    """The process's one OpenVINO ``Core``, made on first use and kept until the process exits.

    Each ``Core`` loads its own CPU plugin, and the plugin points the calling thread's signal stack at memory of its
    own while it lives, putting back the stack it found when it is destroyed. Two plugins released in the order they
    were made (two encoders loaded, then dropped, in a notebook or a worker) left the stack pointing at the freed
    memory of the first: the next signal with a Python handler (Ctrl-C, an orchestrator's SIGTERM) then killed the
    process with a segmentation fault instead of ending it with 130 / 143. One plugin, never released, cannot."""
    with _CORE_LOCK:
        if not _CORE:
            import openvino as ov

            _CORE.append(ov.Core())
        return _CORE[0]


class _Outputs:
    """The embeddings of the call in progress, written by the inference queues' callback, batch ``k`` at ``k``."""

    def __init__(self) -> None:
        self.items: list = []

    def done(self, request, k: int) -> None:
        self.items[k] = request.get_output_tensor(0).data.copy()


class OpenVinoSentenceModel:
    """An OpenVINO compiled model over a float32 model (an ONNX export, or ``openvino_file``'s conversion) with
    ``precision``'s products: ``"bf16"`` (``INFERENCE_PRECISION_HINT``), in throughput mode, or ``"f32"``, one stream
    (``_OPENVINO_MODES``); a call's batches run on the model's streams, each taking every n-th batch. A batch
    shape that recurs (``STATIC_AFTER_TOKENS``) runs on a static-shape model compiled for it (``STATIC_MODELS``
    at most); a bf16 embedding moves with it as little as with another batching (``BF16_BATCH_TOLERANCE``),
    a float32 one by float32 rounding.

    Raises ``OptionError`` for bf16 on a CPU without bf16 products (OpenVINO would quietly run float32 there)."""

    def __init__(self, path: Path, threads: Optional[int] = None, precision: str = "bf16") -> None:
        import torch

        if precision not in _OPENVINO_MODES:
            raise OptionError(f"OpenVINO precision must be one of {', '.join(_OPENVINO_MODES)}, got {precision!r}")
        core = openvino_core()
        if precision == "bf16" and "BF16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
            raise OptionError(
                "--encoder-precision bf16 needs a CPU with bf16 products (AMX or AVX512-BF16); this one has none: "
                "use float32, or int8 for the fast path"
            )
        n = max(1, int(threads or torch.get_num_threads()))
        self.path = path
        config = {
            "INFERENCE_PRECISION_HINT": precision,
            "PERFORMANCE_HINT": _OPENVINO_MODES[precision],
            "INFERENCE_NUM_THREADS": n,
        }
        # OpenVINO pins its threads to the first cores; processes sharing a machine (Spark workers, Ray actors of
        # a CPU or less) would all pin to the same ones and leave the rest idle (two one-thread processes ran at
        # half speed), so threads are pinned only when this process's threads cover every CPU it may use
        config["ENABLE_CPU_PINNING"] = n >= _usable_cpus()
        self._core, self._config = core, config
        self.model = core.compile_model(str(path), "CPU", config)
        hint = self.model.get_property("INFERENCE_PRECISION_HINT")
        self.inference_precision = hint.to_string() if hasattr(hint, "to_string") else str(hint)  # "bf16", "f32"
        self.streams = int(self.model.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        self._out = _Outputs()
        self._queue = self._queue_of(self.model)
        #: how many static-shape models this one may compile (0: every batch on the dynamic-shape model)
        self.static_models = STATIC_MODELS
        self._static: dict = {}  # (texts, tokens) -> (compiled model, its queue)
        self._seen: Counter = Counter()  # tokens carried by each batch shape so far
        #: batches run on a static-shape model and on the dynamic one, over this model's life
        self.batches_run: Counter = Counter()
        self._lock = threading.Lock()  # one call at a time owns the queues and their outputs

    @property
    def pinned(self) -> bool:
        """Whether OpenVINO pins this model's threads to cores (see ``__init__``)."""
        return bool(self.model.get_property("ENABLE_CPU_PINNING"))

    @property
    def static_shapes(self) -> list:
        """The batch shapes ``(texts, tokens)`` that have a static-shape model, in the order compiled."""
        return list(self._static)

    def _queue_of(self, compiled):
        import openvino as ov

        queue = ov.AsyncInferQueue(compiled, self.streams)
        # The callback is a method of the outputs, not of this model: the queue keeps its callback alive from C++,
        # where Python's collector cannot see it, so a callback of this model's would keep the model, its compiled
        # models and their queues alive after the last reference to it was gone (a job's worth of memory per job).
        queue.set_callback(self._out.done)
        return queue

    def _compile_static(self, shape: tuple) -> None:
        model = self._core.read_model(str(self.path))
        model.reshape({"input_ids": list(shape), "attention_mask": list(shape)})
        compiled = self._core.compile_model(model, "CPU", self._config)
        self._static[shape] = (compiled, self._queue_of(compiled))

    def run(self, batches: list) -> list:
        """``[texts, dim]`` float32 unit-norm embeddings of each padded batch ``(input_ids, attention_mask)``."""
        with self._lock:
            here: Counter = Counter()
            for ids, _ in batches:
                here[ids.shape] += ids.size
            self._seen.update(here)
            # this call's shapes that have carried enough tokens, most tokens first, while there is room
            for shape in sorted(here, key=lambda s: -self._seen[s]):
                if len(self._static) >= self.static_models or self._seen[shape] < STATIC_AFTER_TOKENS:
                    break
                if shape not in self._static:
                    self._compile_static(tuple(shape))
            groups: dict = {}
            for k, (ids, _) in enumerate(batches):
                groups.setdefault(ids.shape if ids.shape in self._static else None, []).append(k)
            self._out.items = [None] * len(batches)
            # one queue at a time: each has a stream per core, so two at once would oversubscribe them
            for shape, ks in groups.items():
                queue = self._queue if shape is None else self._static[shape][1]
                try:
                    for k in ks:
                        ids, mask = batches[k]
                        queue.start_async({"input_ids": ids, "attention_mask": mask}, k)
                finally:
                    # An interrupt between two submissions (Ctrl-C, SIGTERM) must not leave a request running:
                    # its callback, on OpenVINO's thread, would call into an interpreter that is exiting and
                    # abort the process (exit -6 instead of 130 / 143).
                    queue.wait_all()
                self.batches_run["dynamic" if shape is None else "static"] += len(ks)
            out, self._out.items = self._out.items, []
        if any(o is None for o in out):  # pragma: no cover - a request that ended without its output
            raise RuntimeError(f"OpenVINO returned no embedding for {sum(o is None for o in out)} batch(es)")
        return out
