"""Record the judge messages pygaussia's role-adherence metric sends, for tests/fixtures/pygaussia_role_messages.json.

pygaussia is not on PyPI and needs LangChain, so this runs outside the project's environments:

    git clone https://github.com/gaussia-labs/pygaussia && git -C pygaussia checkout 33bef76
    python -m venv /tmp/pyg && /tmp/pyg/bin/pip install "langchain>=1.2" "langchain-core>=1.2.11" pydantic \
        tqdm jinja2 scipy loguru optuna
    PYTHONPATH=pygaussia/src /tmp/pyg/bin/python tools/record_pygaussia_prompts.py > tests/fixtures/pygaussia_role_messages.json

Each record goes through pygaussia's own ``RoleAdherence``/``LLMJudgeStrategy`` (its prompt builder,
history formatting and ``Judge.check_logprob_binary``); a chat model named ``ChatOpenAI`` (a provider it
accepts for logprobs) captures the messages and answers with a YES/NO first-token distribution.
The records are the conversations of adherence/examples/role_turns.jsonl (a turn with and without
history) plus edge cases: an empty user message, braces and newlines in the texts.
"""

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from gaussia.metrics.role_adherence import LLMJudgeStrategy
from gaussia.schemas import Batch
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

CAPTURED: list = []


class ChatOpenAI(BaseChatModel):  # the name is what pygaussia's provider check reads
    @property
    def _llm_type(self) -> str:
        return "recorder"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        CAPTURED.append(
            {
                "messages": [
                    {"role": {"system": "system", "human": "user"}[m.type], "content": m.content} for m in messages
                ],
                "params": {k: v for k, v in kwargs.items()},
            }
        )
        top = [{"token": "YES", "logprob": -0.5}, {"token": "NO", "logprob": -1.0}]
        msg = AIMessage(
            content="YES",
            response_metadata={"logprobs": {"content": [{"token": "YES", "logprob": -0.5, "top_logprobs": top}]}},
        )
        return ChatResult(generations=[ChatGeneration(message=msg)])


def _records() -> list[dict]:
    root = Path(__file__).resolve().parents[1]
    rows = [json.loads(line) for line in (root / "adherence/examples/role_turns.jsonl").read_text().splitlines()]
    convs: dict = defaultdict(list)
    for r in rows:
        convs[r["conversation_id"]].append(r)
    out = []
    for cid, turns in list(convs.items())[:4]:
        turns.sort(key=lambda r: r["turn_index"])
        out.append(
            {
                "conversation_id": cid,
                "role": turns[0]["role"],
                "turns": [{"user": t["user"], "assistant": t["assistant"]} for t in turns],
            }
        )
    out.append(
        {
            "conversation_id": "edge-empty-user",
            "role": "You are a terse assistant.",
            "turns": [
                {"user": "", "assistant": "Hello."},
                {"user": "Why {so} short?\nReally?", "assistant": "Brevity {is} {my} role.\n"},
            ],
        }
    )
    return out


def main() -> None:
    strategy = LLMJudgeStrategy(ChatOpenAI())
    rev = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(sys.modules["gaussia"].__file__).parent
    ).stdout.strip()
    records = []
    for conv in _records():
        history: list = []
        for i, t in enumerate(conv["turns"]):
            turn = Batch(
                qa_id=f"{conv['conversation_id']}-{i}",
                query=t["user"],
                assistant=t["assistant"],
                ground_truth_assistant="",
            )
            CAPTURED.clear()
            strategy.score(turn, list(history), conv["role"])
            history.append(turn)
            (call,) = CAPTURED
            records.append(
                {
                    "conversation_id": conv["conversation_id"],
                    "turn_index": i,
                    "role": conv["role"],
                    "turns": conv["turns"][: i + 1],
                    "messages": call["messages"],
                    "params": call["params"],
                }
            )
    json.dump(
        {
            "source": "gaussia-labs/pygaussia",
            "commit": rev or os.environ.get("PYGAUSSIA_COMMIT", "unknown"),
            "builder": "gaussia.metrics.role_adherence.LLMJudgeStrategy.score",
            "records": records,
        },
        sys.stdout,
        indent=1,
        ensure_ascii=False,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
