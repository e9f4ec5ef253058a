"""Write ``adherence/examples/support_log.jsonl`` and its truth (``support_log.truth.jsonl``): the generated
multi-role support log of ``adherence.bench._support_log`` (six roles, about one reply in six off its role).

    python tools/make_support_log.py [--conversations 120] [--seed 7] [--out adherence/examples]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from adherence.bench._support_log import make_support_log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=120)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "adherence" / "examples"))
    ap.add_argument("--name", default="support_log")
    a = ap.parse_args()
    chats, truth = make_support_log(a.conversations, a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{a.name}.jsonl", "w", encoding="utf-8") as fh:
        for c in chats:
            fh.write(json.dumps(c, ensure_ascii=False) + "\n")
    with open(out / f"{a.name}.truth.jsonl", "w", encoding="utf-8") as fh:
        for r in truth:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    bad = sum(r["label"] == "violation" for r in truth)
    print(f"wrote {len(chats)} conversations, {len(truth)} turns ({bad} violations) to {out}")


if __name__ == "__main__":
    main()
