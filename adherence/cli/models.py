"""``adherence models``: model utilities (export the bundled GGUF judge for vLLM and servers)."""

from __future__ import annotations

import argparse
import sys

from .._options import model_name
from .main import Command


class ModelsCommand(Command):
    name = "models"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        sub = p.add_subparsers(dest="models", metavar="STEP", required=True)
        ex = sub.add_parser(
            "export-judge",
            help="write a GGUF judge (default: the bundled SmolLM2-135M-Instruct) as "
            "a transformers checkpoint that vLLM and OpenAI-compatible servers can load",
        )
        ex.add_argument("output", help="new directory to write (never replaced if it exists)")
        ex.add_argument(
            "--judge-model",
            type=model_name,
            help="a GGUF judge: a directory with one .gguf file, or bundled:... "
            "(default: the bundled SmolLM2-135M-Instruct)",
        )
        ex.add_argument(
            "--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="dtype of the saved weights"
        )

    def run(self, args: argparse.Namespace) -> int:
        from ..models import export_judge

        out = export_judge(args.output, args.judge_model, dtype=args.dtype)
        print(
            f"wrote {out}: load it with --backend vllm --judge-model {out}, or serve it with "
            f"python -m vllm.entrypoints.openai.api_server --model {out}",
            file=sys.stderr,
        )
        return 0
