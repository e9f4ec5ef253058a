"""Build the bundled persona example from the Synthetic-Persona-Chat validation split.

Synthetic-Persona-Chat (Jandaghi et al., 2023), CC BY 4.0. Writes, in the same CSV layout:

* ``human.csv``            conversations 0..N-1, unchanged (the reference corpus);
* ``sim_faithful.csv``     conversations N..2N-1, unchanged (a "simulation" that is human-like);
* ``sim_persona_drift.csv`` conversations N..2N-1 with every persona pair moved to the next
  conversation: the dialogues no longer follow their personas;
* ``sim_voice_swap.csv``   conversations N..2N-1 where User 2's k-th line comes from the User 2 of
  the (k+1)-th next conversation: User 2 speaks with many voices and no single persona.

Usage: python tools/make_persona_example.py ../shared/data/persona/Synthetic-Persona-Chat_valid.csv
"""

import csv
import sys
from pathlib import Path

N = 60
OUT = Path(__file__).resolve().parents[1] / "adherence" / "examples" / "persona"
COLUMNS = ["user 1 personas", "user 2 personas", "Best Generated Conversation"]


def _write(name, rows):
    with open(OUT / name, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows({k: r[k] for k in COLUMNS} for r in rows)


def _user2_lines(text):
    return [line for line in text.splitlines() if line.startswith("User 2:")]


def main(src):
    with open(src, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    human, later = rows[:N], rows[N : 2 * N]
    OUT.mkdir(parents=True, exist_ok=True)
    _write("human.csv", human)
    _write("sim_faithful.csv", later)
    drift = [
        dict(
            r,
            **{
                "user 1 personas": later[(i + 1) % N]["user 1 personas"],
                "user 2 personas": later[(i + 1) % N]["user 2 personas"],
            },
        )
        for i, r in enumerate(later)
    ]
    _write("sim_persona_drift.csv", drift)
    swapped = []
    user2 = [_user2_lines(r["Best Generated Conversation"]) for r in later]
    for i, r in enumerate(later):
        k, lines = 0, []
        for line in r["Best Generated Conversation"].splitlines():
            if line.startswith("User 2:"):
                donor = user2[(i + 1 + k) % N]  # the k-th line from the (k+1)-th next conversation
                line, k = (donor[k] if k < len(donor) else line), k + 1
            lines.append(line)
        swapped.append(dict(r, **{"Best Generated Conversation": "\n".join(lines)}))
    _write("sim_voice_swap.csv", swapped)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/persona/Synthetic-Persona-Chat_valid.csv")
