"""Where the encoder's time goes on a GPU: cProfile of one encode of the encoder bench's texts, after a warm-up.

    python benchmarks/encoder_profile.py Synthetic-Persona-Chat_valid.csv profile.txt

The first line of the output gives the pass's wall time and, for comparison, the time of calling the
tokenizer through its Python wrapper on the same texts.
"""

import cProfile
import io
import pstats
import sys
import time

import torch

from adherence.bench.encoder import persona_chat_utterances
from adherence.models import Encoder, resolve_model


def main(csv_path: str, out_path: str) -> None:
    texts = persona_chat_utterances(csv_path)
    enc = Encoder(str(resolve_model(None).path), device="cuda", progress=False, cache_bytes=0)
    enc.encode(texts)
    torch.cuda.synchronize()
    t = time.perf_counter()
    enc.tokenizer(texts, truncation=True, max_length=enc.max_length)
    wrapper = time.perf_counter() - t
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    enc.encode(texts)
    torch.cuda.synchronize()
    prof.disable()
    wall = time.perf_counter() - t
    report = io.StringIO()
    pstats.Stats(prof, stream=report).sort_stats("cumulative").print_stats(35)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(f"texts {len(texts)} wall {wall:.3f}s tokenizer alone {wrapper:.3f}s\n" + report.getvalue())
    print(f"encoder profile: wall {wall:.3f}s, the tokenizer's Python wrapper alone {wrapper:.3f}s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
