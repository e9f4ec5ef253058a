"""Options declared once: the command line, job files and the Python API are derived from the fields of the option
dataclasses (flag, help, type, whether a value names a file, whether it decides scores)."""

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Optional

import pytest

from adherence._options import add_arguments, file_path, is_file_option, option, values
from adherence.cli._jobfile import apply_job_file
from adherence.cli.main import _parser
from adherence.engine import Engine, EngineOptions
from adherence.judges import JudgeConfig
from adherence.judges._backend_options import ServerOptions, TransformersOptions, VLLMOptions
from adherence.role import RoleConfig


@dataclass
class _Toy:
    size: int = option(3, help="how many")
    path: Optional[str] = option(None, type=file_path, help="a file")
    exact: bool = option(True, flag="--no-exact", negate=True, help="approximate")
    words: Optional[tuple] = option(None, type=str, nargs="+", metavar="W", help="words")
    hidden: int = 7


def test_flags_and_values_come_from_the_declaration():
    p = argparse.ArgumentParser()
    add_arguments(p, _Toy)
    actions = {a.dest: a for a in p._actions}
    assert set(actions) == {"help", "size", "path", "exact", "words"}  # undeclared fields have no flag
    assert actions["size"].help == "how many" and actions["size"].metavar == "SIZE"
    assert is_file_option(actions["path"]) and not is_file_option(actions["size"])
    got = values(_Toy, p.parse_args(["--size", "5", "--no-exact", "--words", "a", "b", "--path", "x.json"]))
    assert _Toy(**got) == _Toy(size=5, path="x.json", exact=False, words=("a", "b"))
    assert _Toy(**values(_Toy, p.parse_args([]))) == _Toy()  # the defaults are the dataclass's
    with pytest.raises(KeyError, match="declares no command-line option 'hidden'"):
        add_arguments(argparse.ArgumentParser(), _Toy, ["hidden"])


def _score_parser():
    return _parser("score").selected_parser


@pytest.mark.parametrize(
    "cls", [EngineOptions, RoleConfig, JudgeConfig, ServerOptions, TransformersOptions, VLLMOptions]
)
def test_every_declared_option_is_a_flag_of_score_with_the_declared_help(cls):
    actions: dict = {}
    for a in _score_parser()._actions:
        actions.setdefault(a.dest, a)  # the declared flag comes first; a short spelling of one value may follow
    declared = [f for f in dataclasses.fields(cls) if "cli" in f.metadata]
    assert declared
    for f in declared:
        dest = f.metadata["cli"]["dest"] or f.name
        assert dest in actions, dest
        assert actions[dest].help == f.metadata["cli"]["help"]


def test_a_backend_is_built_from_its_declared_flags():
    from adherence.cli._common import judge_backend_options

    args = _parser("score").parse_args(
        [
            "score",
            "x.jsonl",
            "--backend",
            "openai",
            "--base-url",
            "http://127.0.0.1:1/v1",
            "--request-timeout",
            "7",
            "--max-retry-after",
            "2",
            "--stall-timeout",
            "9",
        ]  # fmt: skip
    )
    opts = judge_backend_options(args)
    assert opts == {"base_url": "http://127.0.0.1:1/v1", "concurrency": 16, "request_timeout": 7.0, "max_retries": 4,
                    "max_retry_after": 2.0, "stall_timeout": 9.0}  # fmt: skip
    args = _parser("score").parse_args(["score", "x.jsonl", "--backend", "vllm", "--vllm-dtype", "bfloat16",
                                        "--vllm-kv-cache-gb", "2"])  # fmt: skip
    assert judge_backend_options(args, progress=False) == {"progress": False, "dtype": "bfloat16", "kv_cache_gb": 2.0}
    with pytest.raises(ValueError, match="--concurrency must be >= 1"):
        judge_backend_options(_parser("score").parse_args(
            ["score", "x", "--backend", "openai", "--base-url", "http://h/v1", "--concurrency", "0"]))  # fmt: skip


def test_the_parsed_command_line_builds_the_same_objects_as_the_python_api(tmp_path):
    argv = ["score", "in.jsonl", "-o", "o.parquet", "--method", "cosine", "--shard-size", "7", "--resume",
            "--references", "dataset", "--strict", "--judge-layout", "system", "--no-full-vocab",
            "--yes-tokens", "Yes", "Y", "--bootstrap", "10"]  # fmt: skip
    args = _parser("score").parse_args(argv)
    assert EngineOptions(**values(EngineOptions, args)) == EngineOptions(shard_size=7, resume=True, n_bootstrap=10)
    assert RoleConfig(**values(RoleConfig, args)) == RoleConfig(
        method="cosine", reference_pool="dataset", strict_mode=True
    )
    assert JudgeConfig(**values(JudgeConfig, args)) == JudgeConfig(
        layout="system", full_vocab=False, yes_tokens=("Yes", "Y")
    )


def test_a_job_file_names_an_option_by_its_flag_or_by_what_it_sets(tmp_path):
    for text in ("judge-layout: system\nno-full-vocab: true\n", "layout: system\nfull_vocab: false\n"):
        job = tmp_path / "job.yaml"
        job.write_text(text + "judge-cache: cache.sqlite\n")
        sub = _score_parser()
        got = apply_job_file(sub, str(job))
        assert got == {"layout": "system", "full_vocab": False, "cache": str(tmp_path / "cache.sqlite")}
        args = sub.parse_args(["x.jsonl"])
        assert (args.layout, args.full_vocab) == ("system", False)


def test_each_option_has_one_name_and_its_earlier_spelling_still_parses(tmp_path):
    """The flag is the Python name with dashes (``n_bootstrap``: ``--n-bootstrap``); an earlier flag is accepted,
    as a flag and as a job-file key, but the help shows one name."""
    names = {f.name for cls in (EngineOptions, RoleConfig, JudgeConfig, ServerOptions) for f in dataclasses.fields(cls)}
    assert {"n_bootstrap", "bertscore_idf", "top_logprobs", "request_timeout"} <= names
    assert not {"top_k", "timeout"} & names
    helps = _score_parser().format_help()
    assert "--n-bootstrap" in helps and "--bertscore-idf" in helps and "--top-logprobs" in helps
    assert "--bootstrap " not in helps and "--idf " not in helps
    for flag in ("--n-bootstrap", "--bootstrap"):
        args = _parser("score").parse_args(["score", "x.jsonl", flag, "3", "--idf", "--method", "bertscore"])
        assert EngineOptions(**values(EngineOptions, args)).n_bootstrap == 3
        assert RoleConfig(**values(RoleConfig, args)).bertscore_idf is True
    assert values(EngineOptions, _parser("score").parse_args(["score", "x.jsonl"]))["n_bootstrap"] == 1000
    job = tmp_path / "job.yaml"
    job.write_text("bootstrap: 4\nmodel: my-judge\ntop_logprobs: 5\n")
    sub = _score_parser()
    apply_job_file(sub, str(job))
    args = sub.parse_args(["x.jsonl"])
    assert (args.n_bootstrap, args.judge_model, args.top_logprobs) == (4, "my-judge", 5)
    job.write_text("dtype: float32\n")
    with pytest.raises(ValueError, match="'dtype' names --judge-dtype and --vllm-dtype"):
        apply_job_file(_score_parser(), str(job))


def test_what_a_backend_option_decides_is_its_declaration():
    """The options that never change a verdict are the declared ``affects_scores=False`` fields, so a resumed job
    may change them; a key no backend declares counts as score-deciding."""
    from adherence._fingerprint import score_hash
    from adherence.judges._backend import score_options

    for name, cls in (("openai", ServerOptions), ("transformers", TransformersOptions), ("vllm", VLLMOptions)):
        declared = {f.name: f.metadata.get("affects_scores", True) for f in dataclasses.fields(cls)}
        opts = {k: 1 for k in declared} | {"undeclared": 1}
        assert set(score_options(name, opts)) == {k for k, v in declared.items() if v} | {"undeclared"}
    base = RoleConfig(method="llm_judge", judge=JudgeConfig(backend="openai", backend_options={"request_timeout": 5}))
    slower = dataclasses.replace(base, judge=JudgeConfig(backend="openai", backend_options={"request_timeout": 50}))
    other = dataclasses.replace(base, judge=JudgeConfig(backend="openai", backend_options={"temperature": 1}))
    assert score_hash(base) == score_hash(slower) != score_hash(other)


def test_each_batch_option_has_one_meaning():
    e = Engine(method="cosine", batch_size=8, read_batch_rows=1000, shard_size=5, progress=False)
    assert e.config.batch_size == 8  # encoder texts per pass, as everywhere else
    assert e.options.read_batch_rows == 1000 and e.options.shard_size == 5
    with pytest.raises(ValueError, match="read_batch_rows"):
        EngineOptions(read_batch_rows=0)


def test_persona_flags_are_its_configs_declarations():
    from adherence.persona import PersonaConfig

    sub = _parser("persona").selected_parser
    actions = {a.dest: a for a in sub._actions}
    for f in dataclasses.fields(PersonaConfig):
        if "cli" in f.metadata:
            assert actions[f.name].help == f.metadata["cli"]["help"], f.name
    args = _parser("persona").parse_args(
        ["persona", "--reference", "r.csv", "--dimensions", "adherence, consistency", "--pool-sizes", "1,5,20"]
    )
    cfg = PersonaConfig(**values(PersonaConfig, args))
    assert cfg.dimensions == ("adherence", "consistency") and tuple(cfg.pool_sizes) == (1, 5, 20)
    with pytest.raises(SystemExit):  # argparse: exit 2 with the usage line
        _parser("persona").parse_args(["persona", "--reference", "r.csv", "--pool-sizes", "1,x"])
