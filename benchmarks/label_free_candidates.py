"""Label-free scores tried for logs without labels, beside scope and the trivial baselines: AUC over every turn
(adherent the positive class, a score's own direction; under 0.5 ranks backwards) on the two hand-written logs with
on-topic violations and the generated support log.

- ``prohibition_whole`` / ``prohibition_sentence``: the system prompt's own prohibitions as negative prototypes --
  each sentence of the role holding "never", "do not", "don't", "must not", "cannot", "not", "only" or "no", with
  the negation taken out ("Never give dosing advice" -> "give dosing advice"), encoded; a reply's score is minus its
  highest cosine to one of them (the whole reply, or its closest sentence): close to a forbidden act, a violation;
- ``role_sentence``: the reply's highest cosine to one sentence of its role;
- ``overlap+scope``, ``overlap+prohibition``, ``overlap+scope+prohibition``: the role-overlap baseline combined with
  them by mean rank (no labels to weigh them).

    python benchmarks/label_free_candidates.py benchmarks/results/2026-12-08-cpu-label-free-candidates.json
"""

import json
import re
import sys

import numpy as np
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from adherence.bench._hardware import cpu_info
from adherence.bench.own_logs import _support, own_log_turns
from adherence.models import Encoder
from adherence.role._scope import reply_sentences, scope_parts, scope_score
from adherence.stats import text_baselines

NEGATION = re.compile(r"\b(never|not|don't|do not|cannot|can't|must not|only|no)\b", re.I)
TAKEN_OUT = re.compile(r"\b(never|do not|don't|must not|cannot|can't|not)\b\s*", re.I)

BASELINES = ("reply_length", "role_overlap", "user_overlap")

enc = Encoder(progress=False)


def encode(texts):
    return enc.encode(list(texts)).float().cpu().numpy().astype(np.float64)


def role_sentences(role):
    return [s.strip() for s in re.split(r"(?<=[.!?;])\s+", role) if s.strip()]


def rank(v):
    return rankdata(v) / len(v)


def candidates(table):
    a, r, u = (table.column(c).to_pylist() for c in ("assistant", "role", "user"))
    r = [x or "" for x in r]
    u = [x or "" for x in u]
    base = text_baselines({"assistant": a, "role": r, "user": u})
    out = {"scope": scope_score(*scope_parts(enc, r, u, a)), **base}
    acts, sents = {}, {}
    for role in dict.fromkeys(r):
        ss = role_sentences(role)
        banned = [TAKEN_OUT.sub("", s) for s in ss if NEGATION.search(s)]
        acts[role] = encode(banned) if banned else None
        sents[role] = encode(ss)
    reply = encode(a)
    parts = [reply_sentences(x) for x in a]
    owner = np.repeat(np.arange(len(a)), [len(p) for p in parts])
    sent = encode([s for p in parts for s in p])
    whole, worst, role_sent = np.zeros(len(a)), np.zeros(len(a)), np.zeros(len(a))
    for i, role in enumerate(r):
        role_sent[i] = (sents[role] @ reply[i]).max()
        if acts[role] is not None:
            whole[i] = -(acts[role] @ reply[i]).max()
            worst[i] = -(sent[owner == i] @ acts[role].T).max()
    out.update(prohibition_whole=whole, prohibition_sentence=worst, role_sentence=role_sent)
    ov = rank(base["role_overlap"])
    out["overlap+scope"] = ov + rank(out["scope"])
    out["overlap+prohibition"] = ov + rank(worst)
    out["overlap+scope+prohibition"] = ov + rank(out["scope"]) + rank(worst)
    return out


result = {"bench": "label-free candidates", "metric": "AUC over every turn, adherent positive", "logs": {}}
for name in ("claims_desk", "pharmacy_line", "support"):
    table, y, _ = _support() if name == "support" else own_log_turns(name)
    aucs = {k: round(float(roc_auc_score(y, v)), 3) for k, v in candidates(table).items()}
    # a baseline counts in its better direction (user overlap turned around is the strongest on one log)
    best_baseline = max(max(aucs[k], 1 - aucs[k]) for k in BASELINES)
    result["logs"][name] = {
        "turns": len(y),
        "violations": int((y == 0).sum()),
        "auc": aucs,
        "best_baseline_either_direction": round(best_baseline, 3),
        "beat_every_baseline": sorted(k for k, v in aucs.items() if v > best_baseline and k not in BASELINES),
    }
    print(name, aucs, flush=True)
result["cpu"] = cpu_info()
with open(sys.argv[1], "w") as fh:
    json.dump(result, fh, indent=1)
