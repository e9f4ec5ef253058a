"""``adherence bench``: paper reproductions and throughput benchmarks."""

from __future__ import annotations

import argparse
import json

from .._errors import OptionError
from .._options import file_path, model_name
from ._common import add_json_flag, comma_ints
from .main import Command


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.3f}"


def _device_and_output(sp: argparse.ArgumentParser, *, device: bool = True) -> None:
    """The flags every benchmark has: where it runs, and where its JSON is also written."""
    if device:
        sp.add_argument("--device", help="cuda, cpu, ... (default: cuda when available)")
    sp.add_argument("-o", "--output", type=file_path, help="also write the JSON here")


def _call(fn, args: argparse.Namespace, **given):
    """``fn`` called with the parsed flags named like its parameters, and ``given`` for those that differ."""
    import inspect

    kw = {n: getattr(args, n) for n in inspect.signature(fn).parameters if n not in given and hasattr(args, n)}
    return fn(**kw, **given)


def _positive(args: argparse.Namespace, *names: str) -> None:
    bad = [n for n in names if getattr(args, n) < 1]
    if bad:
        flags = [f"--{n.replace('_', '-')}" for n in names]
        raise OptionError(
            f"{', '.join(flags[:-1])} and {flags[-1]} must be >= 1" if len(flags) > 1 else f"{flags[0]} must be >= 1"
        )


def _words(text: str) -> list:
    return [w.strip() for w in text.split(",") if w.strip()]


class BenchCommand(Command):
    writes = {"*": "the benchmark JSON"}
    name = "bench"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        sub = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
        rp = sub.add_parser("role-paper", help="role-adherence methods on a flat benchmark file at n = 15, 50, 150")
        rp.add_argument(
            "benchmark",
            type=file_path,
            help="flat benchmark JSON [{role, assistant, ground_truth_assistant, label}] or any turns table",
        )
        rp.add_argument("--sizes", default="15,50,150", help="comma-separated n (default 15,50,150)")
        rp.add_argument("--encoder", type=model_name, help="encoder path (default: bundled all-MiniLM-L6-v2)")
        rp.add_argument("--bertscore", action="store_true", help="include bertscore (with --encoder's model)")
        rp.add_argument("--bertscore-layer", type=int, help="hidden layer for bertscore (default: the last)")
        rp.add_argument("--nli-model", type=model_name, help="include nli with this local model")
        rp.add_argument("--device", help="cuda, cpu, ... (default: cuda when available)")
        add_json_flag(rp, "JSON instead of the table")
        _device_and_output(rp, device=False)
        kb = sub.add_parser(
            "kernels",
            help="fused scoring kernels vs torch eager: rows/s, GB/s, TFLOP/s and the ratio "
            "to the measured hardware peak (JSON)",
        )
        kb.add_argument("--batch", type=int, default=4096, help="candidate rows scored per call")
        kb.add_argument("--dim", type=int, default=384, help="embedding dimension")
        kb.add_argument("--refs", type=int, default=64, help="reference embeddings per row (kNN-max)")
        kb.add_argument("--vocab", type=int, default=500, help="distribution size (KL)")
        kb.add_argument(
            "--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="embedding dtype"
        )
        kb.add_argument("--repeats", type=int, default=10, help="timed repetitions (the median is reported)")
        kb.add_argument(
            "--pools",
            default="",
            help="comma-separated sizes of large shared kNN pools to time as "
            "well (e.g. 10000,100000,1000000; rows are chosen for ~2e14 FLOP per call)",
        )
        _device_and_output(kb)
        mb = sub.add_parser("maxsim", help="late-interaction MaxSim over 1000-document pools: queries/s (JSON)")
        mb.add_argument("--queries", type=int, default=32, help="persona queries, each against its own pool")
        mb.add_argument("--pool", type=int, default=1000, help="documents per query's pool (default 1000)")
        mb.add_argument("--corpus", type=int, default=5000, help="documents pools are drawn from")
        mb.add_argument("--doc-len", type=int, default=300, help="mean document tokens")
        mb.add_argument("--query-len", type=int, default=32, help="query tokens")
        mb.add_argument("--dim", type=int, default=384, help="token embedding dimension")
        mb.add_argument(
            "--dtype",
            default="float16",
            choices=["float32", "float16", "bfloat16"],
            help="stored token embedding dtype",
        )
        mb.add_argument("--repeats", type=int, default=5, help="timed repetitions (the median is reported)")
        mb.add_argument("--no-baseline", action="store_true", help="skip the padded per-query baseline")
        _device_and_output(mb)
        nb = sub.add_parser(
            "encoder", help="sentence encoder vs sentence-transformers on the same texts: texts/s (JSON)"
        )
        nb.add_argument("--texts", type=int, default=2000, help="distinct texts to encode")
        nb.add_argument(
            "--persona-csv",
            type=file_path,
            help="take the texts from a Synthetic-Persona-Chat CSV's utterances (default: synthetic chat-length texts)",
        )
        nb.add_argument("--encoder", type=model_name, help="encoder path (default: bundled all-MiniLM-L6-v2)")
        nb.add_argument(
            "--dtype", choices=["float32", "bfloat16", "float16"], help="our dtype (default: bf16 on GPU, fp32 on CPU)"
        )
        nb.add_argument("--repeats", type=int, default=3, help="timed repetitions (the median is reported)")
        _device_and_output(nb)
        cb = sub.add_parser(
            "cpu-encoder",
            help="sentence encoder on the CPU (float32, bf16, int8) against sentence-transformers' torch, ONNX O1-O4 and "
            "OpenVINO backends and fastembed, same texts: texts/s, cosines, AUC changes (JSON)",
        )
        cb.add_argument("persona_csv", type=file_path, help="Synthetic-Persona-Chat CSV (the texts)")
        cb.add_argument(
            "--peers-python",
            type=file_path,
            help="the Python of the peers' environment (docs/encoders.md); without it only ours run, unchecked",
        )
        cb.add_argument("--texts", type=int, default=2000, help="distinct utterances (the short workload)")
        cb.add_argument("--long", type=int, default=120, help="texts of 300-500 tokens (the long workload)")
        cb.add_argument("--batches", default="16,32,64,128", help="batch sizes tried on the short workload")
        cb.add_argument("--long-batches", default="8,32", help="batch sizes tried on the long workload")
        cb.add_argument(
            "--repeats",
            type=int,
            default=2,
            help="timed encodes per batch size (the median is kept); the CPU's rates take the fastest of 10 timings, "
            "5 with --repeats 1",
        )
        cb.add_argument(
            "--rounds", type=int, default=3, help="head-to-head rounds of the exact path and the fastest exact peer"
        )
        cb.add_argument("--no-accuracy", dest="accuracy", action="store_false", help="skip the AUC changes")
        cb.add_argument("--encoder", type=model_name, help="encoder path (default: bundled all-MiniLM-L6-v2)")
        _device_and_output(cb, device=False)
        pb = sub.add_parser(
            "persona",
            help="the EVAL4SIM protocol end to end on one corpus: wall time, where it "
            "goes, and agreement with a run elsewhere (JSON)",
        )
        pb.add_argument("reference", type=file_path, help="the corpus (e.g. Synthetic-Persona-Chat_valid.csv)")
        pb.add_argument(
            "--baseline",
            help="`adherence persona -o` JSON of the same corpus from another machine: AUCs "
            "checked against it, speedup over its time",
        )
        pb.add_argument("--repeats", type=int, default=10, help="random pools per query and pool size")
        pb.add_argument("--limit", type=int, help="read only the first N conversations")
        _device_and_output(pb)
        lb = sub.add_parser(
            "labels",
            help="logs without references on CPU: scope with no labels, the classifier at 50/100/200 labels, beside "
            "the trivial baselines and the bundled judge; hours per million turns (JSON)",
        )
        lb.add_argument("--persona-csv", type=file_path, help="Synthetic-Persona-Chat CSV for the swapped-reply set")
        lb.add_argument("--sizes", default="50,100,200", help="label counts the classifier is trained on")
        lb.add_argument("--seeds", type=int, default=5, help="label draws per count (default 5)")
        lb.add_argument("--support-conversations", type=int, default=400, help="conversations of the support log")
        lb.add_argument("--judge-turns", type=int, default=120, help="turns the bundled judge scores (0: none)")
        lb.add_argument("--throughput-turns", type=int, default=3000, help="turns of the timed classifier job")
        _device_and_output(lb, device=False)
        ob = sub.add_parser(
            "own-logs",
            help="the hand-written logs with on-topic violations: the classifier's AUC and decision on unlabelled "
            "turns at 50/100/150/200 labels, estimate coverage cross-fitted vs in-sample, beside scope and the "
            "trivial baselines (JSON)",
        )
        ob.add_argument("--sizes", default="50,100,150,200", help="label counts the classifier is trained on")
        ob.add_argument("--draws", type=int, default=50, help="label draws per count (default 50)")
        ob.add_argument(
            "--finetune-sizes",
            default="",
            help="also compare with a fine-tuned bi-encoder and a cross-encoder at these label counts (slow; needs "
            "sentence-transformers)",
        )
        ob.add_argument("--finetune-draws", type=int, default=3, help="draws per fine-tuned label count (default 3)")
        ob.add_argument("--pairs-per-turn", type=int, default=4, help="contrastive pairs per labelled turn and class")
        ob.add_argument(
            "--learner-sizes",
            default="",
            help="also measure classifier fit's learners as shipped (frozen; fine-tuned with each --learner-pairs) at "
            "these label counts (slow: minutes per draw)",
        )
        ob.add_argument("--learner-draws", type=int, default=3, help="draws per learner label count (default 3)")
        ob.add_argument("--learner-pairs", default="1,2", help="the fine-tuned learner's --pairs-per-turn values")
        ob.add_argument("--fit-learner", choices=["frozen", "fine-tuned"], default="frozen",
                        help="the learner of the timed classifier fit on 200 labels")  # fmt: skip
        _device_and_output(ob, device=False)
        bb = sub.add_parser(
            "bundled",
            help="the bundled judge in its dtype vs float8 on the bundled labelled sets (P(yes) change, AUC each) and "
            "the classifier's turns/s through the engine, on --device (JSON)",
        )
        bb.add_argument("--dtype", choices=["float32", "bfloat16"], help="the judge's dtype float8 is compared with "
                        "(default: bf16 on GPU, fp32 on CPU)")  # fmt: skip
        bb.add_argument("--limit", type=int, help="each labelled set's first N turns only (a rehearsal)")
        bb.add_argument("--classifier-turns", type=int, default=50_000, help="turns of the timed classifier job")
        bb.add_argument("--parts", default="judge,classifier", help="comma-separated: judge, classifier")
        _device_and_output(bb)
        eb = sub.add_parser("engine", help="engine turns/s, local vs ray, and peak memory (JSON)")
        eb.add_argument("--turns", type=int, default=1_000_000, help="synthetic turns in the large input")
        eb.add_argument("--small", type=int, help="the smaller input for the memory comparison (default turns/10)")
        eb.add_argument("--method", default="cosine", help="scoring method")
        eb.add_argument("--shard-size", type=int, default=100_000, help="turns per shard")
        eb.add_argument("--workers", type=int, default=1, help="Ray actors")
        eb.add_argument(
            "--executors", help="comma-separated executors to compare (default: local, and ray when it is installed)"
        )
        _device_and_output(eb, device=False)
        jb = sub.add_parser(
            "judge",
            help="judge turns/s without reuse (ratio to the measured matmul peak), with "
            "prefix sharing vs separate passes, and the cost of exact P(yes) (JSON; exit 1 when "
            "a correctness check fails)",
        )
        from .._options import add_arguments
        from ..judges import JudgeConfig

        add_arguments(jb, JudgeConfig, ["model"])
        jb.add_argument("--model", dest="judge_model", type=model_name, help=argparse.SUPPRESS)  # its older name
        jb.add_argument(
            "--random-config",
            choices=["llama-tiny", "smollm2-135m", "llama-3-8b"],
            help="random-weight model of a real architecture instead of --model",
        )
        jb.add_argument("--conversations", type=int, default=8, help="prefix workload: conversations")
        jb.add_argument("--turns", type=int, default=10, help="prefix workload: assistant turns per conversation")
        jb.add_argument("--role-tokens", type=int, default=200, help="words of each role (about one token each)")
        jb.add_argument("--turn-tokens", type=int, default=100, help="prefix workload: words per exchange")
        jb.add_argument("--unique", type=int, default=32, help="unique workload: prompts (nothing shared)")
        jb.add_argument("--prompt-tokens", type=int, default=1000, help="unique workload: tokens per prompt")
        jb.add_argument("--workloads", default="prefix,unique,full_vocab", help="comma-separated workloads")
        jb.add_argument(
            "--layouts",
            default="user,chained",
            help="prefix workload: judge prompt layouts to time, comma-separated (user, system, chained)",
        )
        jb.add_argument(
            "--check-conversations",
            type=int,
            default=4,
            help="conversations (of each layout) in the fp32 and low-precision checks of the bench model",
        )
        jb.add_argument(
            "--float8",
            action="store_true",
            help="also time the model cast to float8 (--judge-dtype float8), with its P(yes) difference from --dtype",
        )
        jb.add_argument("--batch-tokens", type=int, help="tokens per forward pass (default: the backend's)")
        jb.add_argument(
            "--engine-turns",
            type=int,
            default=0,
            help="also run the engine end to end on this many turns (GPU utilisation, CPU time per "
            "batch, the 1M-turn projection); 0: skip",
        )
        jb.add_argument(
            "--engine-config",
            default="smollm2-135m",
            choices=["llama-tiny", "smollm2-135m", "llama-3-8b"],
            help="random config of the engine run's judge",
        )
        jb.add_argument("--repeats", type=int, default=3, help="timed repetitions (the median is reported)")
        jb.add_argument("--device", help="cuda, cpu, ... (default: cuda when available)")
        jb.add_argument(
            "--dtype",
            choices=["float32", "bfloat16", "float16"],
            help="model dtype (default: bf16 on GPU, fp32 on CPU)",
        )
        _device_and_output(jb, device=False)
        jr = sub.add_parser(
            "judge-race",
            help="transformers vs vLLM (and a server) on the same prompts, model and "
            "dtype: turns/s without reuse and on multi-turn conversations (JSON)",
        )
        jr.add_argument(
            "--judge-model",
            type=model_name,
            required=True,
            help="a transformers judge directory (e.g. from `adherence models export-judge`)",
        )
        jr.add_argument("--backends", default="transformers,vllm", help="comma-separated: transformers, vllm, openai")
        jr.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="dtype of every backend")
        jr.add_argument("--unique", type=int, default=64, help="prompts in the no-reuse workload")
        jr.add_argument("--conversations", type=int, default=8, help="conversations in the multi-turn workload")
        jr.add_argument("--turns", type=int, default=8, help="assistant turns per conversation")
        jr.add_argument("--base-url", help="openai backend: the server (same model and dtype)")
        jr.add_argument("--served-model", help="openai backend: the server's model name")
        jr.add_argument("--vllm-kv-cache-gb", type=float, default=2.0, help="vllm on CPU: KV-cache size")
        _device_and_output(jr, device=False)

    def run(self, args: argparse.Namespace) -> int:
        if args.bench == "role-paper":
            from ..bench import role_paper

            sizes = comma_ints(args.sizes, "--sizes")
            if not sizes or min(sizes) < 2:
                raise OptionError("--sizes needs integers >= 2")
            res = role_paper(
                args.benchmark,
                sizes=sizes,
                encoder=args.encoder,
                bertscore=args.bertscore,
                bertscore_layer=args.bertscore_layer,
                nli_model=args.nli_model,
                device=args.device,
            )
            if args.output:
                self._write(res, args.output)
            if args.json:
                print(json.dumps(res, indent=2))
                return 0
            print(f"{'method':<17}{'n':>6}{'adherent':>10}{'violation':>11}{'separation':>12}{'AUC':>8}{'AP':>8}")
            for method, by_n in res.items():
                for key, m in by_n.items():
                    n = key.split("=")[1] + ("*" if "n_records" in m else "")
                    print(
                        f"{method:<17}{n:>6}{_fmt(m['adherent']):>10}{_fmt(m['violation']):>11}"
                        f"{_fmt(m['separation']):>12}{_fmt(m['auc']):>8}{_fmt(m['ap']):>8}"
                    )
            if any("n_records" in m for by_n in res.values() for m in by_n.values()):
                print("* the file has fewer records than n; all of them were used")
            for method, by_n in res.items():
                low = [k.split("=")[1] for k, m in by_n.items() if m["auc"] is not None and m["auc"] < 0.5]
                if low:
                    print(
                        f"note: {method}'s AUC is below 0.5 at n = {', '.join(low)}: its scores rank violations "
                        "above adherent turns on this file (higher still means adherent; 1 - AUC is how well the "
                        "reversed score would separate)."
                    )
                    if method == "pca_mahalanobis":
                        print(
                            "  why: PCA keeps at most n - 1 components, the references' own subspace; a turn unlike "
                            "every reference projects near its centre (small whitened distance, high score), while "
                            "a paraphrase of one reference lands where the references lie, at the rim of the "
                            "whitened cloud (large distance, low score). Use it with many more references than "
                            "components."
                        )
            return 0
        if args.bench == "engine":
            from ..bench import bench_engine

            if args.executors:
                executors = tuple(x.strip() for x in args.executors.split(",") if x.strip())
                if "ray" in executors:
                    from .._optional import require

                    require("ray", "ray", "--executors ray")
            else:
                import importlib.util

                executors = ("local", "ray") if importlib.util.find_spec("ray") else ("local",)
            return self._emit(_call(bench_engine, args, executors=executors), args.output)
        if args.bench == "judge":
            from ..bench import bench_judge

            _positive(
                args,
                "conversations",
                "turns",
                "role_tokens",
                "turn_tokens",
                "unique",
                "prompt_tokens",
                "repeats",
                "check_conversations",
            )
            res = _call(
                bench_judge,
                args,
                model=args.judge_model,
                workloads=_words(args.workloads),
                layouts=_words(args.layouts),
                on_progress=(lambda r: self._write(r, args.output)) if args.output else None,
            )
            return self._emit(res, args.output)
        if args.bench == "judge-race":
            from ..bench import bench_judge_race

            _positive(args, "unique", "conversations", "turns")
            res = _call(
                bench_judge_race,
                args,
                model=args.judge_model,
                backends=_words(args.backends),
                kv_cache_gb=args.vllm_kv_cache_gb,
            )
            return self._emit(res, args.output)
        if args.bench == "kernels":
            from ..bench import bench_kernels

            _positive(args, "batch", "dim", "refs", "vocab", "repeats")
            pools = comma_ints(args.pools, "--pools")
            if pools and min(pools) < 1:
                raise OptionError("--pools needs sizes >= 1")
            return self._emit(_call(bench_kernels, args, pools=pools), args.output)
        if args.bench == "encoder":
            from ..bench import bench_encoder

            _positive(args, "texts", "repeats")
            return self._emit(_call(bench_encoder, args, model=args.encoder), args.output)
        if args.bench == "cpu-encoder":
            from ..bench import bench_cpu_encoder

            _positive(args, "texts", "long", "repeats", "rounds")
            batches, long_batches = (
                comma_ints(args.batches, "--batches"),
                comma_ints(args.long_batches, "--long-batches"),
            )
            if min(batches + long_batches) < 1:
                raise OptionError("--batches and --long-batches need sizes >= 1")
            return self._emit(
                _call(bench_cpu_encoder, args, model=args.encoder, batches=batches, long_batches=long_batches),
                args.output,
            )
        if args.bench == "persona":
            from ..bench import bench_persona

            _positive(args, "repeats")
            if args.limit is not None and args.limit < 2:
                raise OptionError("--limit must be >= 2")
            return self._emit(_call(bench_persona, args), args.output)
        if args.bench == "labels":
            from ..bench import bench_labels

            sizes = comma_ints(args.sizes, "--sizes")
            _positive(args, "seeds", "support_conversations", "throughput_turns")
            return self._emit(_call(bench_labels, args, sizes=tuple(sizes)), args.output)
        if args.bench == "own-logs":
            from ..bench import bench_own_logs

            _positive(args, "draws", "finetune_draws", "pairs_per_turn", "learner_draws")
            ft = tuple(comma_ints(args.finetune_sizes, "--finetune-sizes")) if args.finetune_sizes else ()
            ls = tuple(comma_ints(args.learner_sizes, "--learner-sizes")) if args.learner_sizes else ()
            return self._emit(
                _call(bench_own_logs, args, sizes=tuple(comma_ints(args.sizes, "--sizes")), finetune_sizes=ft,
                      learner_sizes=ls, learner_pairs=tuple(comma_ints(args.learner_pairs, "--learner-pairs"))),
                args.output,
            )  # fmt: skip
        if args.bench == "bundled":
            from ..bench import bench_bundled

            _positive(args, "classifier_turns")
            return self._emit(_call(bench_bundled, args, parts=tuple(_words(args.parts))), args.output)
        if args.bench == "maxsim":
            from ..bench import bench_maxsim

            _positive(args, "queries", "pool", "corpus", "doc_len", "query_len", "dim", "repeats")
            return self._emit(_call(bench_maxsim, args, baseline=not args.no_baseline), args.output)
        raise OptionError(f"unknown benchmark {args.bench!r}")

    def _write(self, res: dict, output) -> None:
        """The JSON at ``output`` through the one owner-checked writer: replaced atomically (a reader never sees half a
        file; a benchmark that reports as it goes replaces its own file), never over a file adherence did not write."""
        from ..bench import cpu_info
        from ..engine import write_owned

        res.setdefault("cpu", cpu_info())  # every benchmark JSON names the CPU it ran on (model, SIMD flags)
        write_owned(output, json.dumps(res, ensure_ascii=False, indent=2, default=repr) + "\n", what=self.output_what())

    def _emit(self, res: dict, output) -> int:
        """Write and print the JSON; exit 1 when a correctness check it records failed (timings kept)."""
        from ..bench import cpu_info

        res.setdefault("cpu", cpu_info())
        if output:
            self._write(res, output)
        print(json.dumps(res, indent=2))
        if res.get("correct") is False:
            import sys

            checks = res.get("correctness", {})
            failed = [k for k, c in checks.items() if isinstance(c, dict) and c.get("passed") is False]
            if not failed and checks.get("passed") is False:
                failed = [checks.get("checked_against", "the check")]
            print(
                f"error: bench {res.get('bench')}: correctness check failed ({', '.join(failed) or 'see the JSON'}); "
                "the timings are in the JSON",
                file=sys.stderr,
            )
            return 1
        return 0
