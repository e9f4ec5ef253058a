"""Where the judge engine's time goes on a GPU: cProfile of ``bench judge``'s engine run (a random
SmolLM2-135M-shaped judge, conversations of 10 turns), after the warm-up that compiles every batch length.

    python benchmarks/engine_profile.py 20000 profile.txt [cuda]

The first lines of the output give the run's wall time, the process's CPU time, the GPU's busy share (NVML)
and the judge's batches; then the functions by their own time and by cumulative time.
"""

import cProfile
import io
import pstats
import sys
import time

from adherence.bench.judge import _engine_run, random_backend


def main(turns: int, out_path: str, device: str = "cuda") -> None:
    backend = random_backend("smollm2-135m", device=device, dtype="bfloat16")
    warm = backend.warm_up()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    run = _engine_run(backend, turns, 10, 200, 100, seed=2)
    prof.disable()
    wall = time.perf_counter() - t
    report = io.StringIO()
    stats = pstats.Stats(prof, stream=report)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(60)
    head = (
        f"turns {turns} wall {wall:.2f}s (engine {run['wall_s']:.2f}s) process cpu {run['process_cpu_s']:.2f}s "
        f"gpu busy {run['gpu_utilisation_mean']} batches {run['forward_batches']} warm-up {warm['s']:.1f}s\n"
    )
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(head + report.getvalue())
    print(head, end="")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], *sys.argv[3:4])
