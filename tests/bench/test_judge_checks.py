"""The judge bench's checks tell a packing bug from rounding: a one-position RoPE error and a tail that sees
its whole trunk (later history) are injected into the real packing of a random model of SmolLM2-135M's
architecture (its layer shapes, 2 of its 30 layers: the checks' power is in each layer's attention, and bf16,
emulated on CPUs without bf16 products, costs minutes over all 30), and the checks that pass on the correct
packing fail on each bug. With 2 layers as with 4, each bug is far outside its check (positions+1 about 660x the
fp32 tolerance, a tail that sees its whole trunk about 11,000x it and about 27x the bf16 noise bound)."""

import numpy as np
import pytest

from adherence.bench.judge import (
    _requests,
    fp32_check,
    noise_bounds,
    noise_check,
    random_backend,
    synthetic_conversations,
)


def _positions_plus_one(pack):
    def bug(trunk, branches):
        ids, pos, reads, layout = pack(trunk, branches)
        n = len(trunk)
        return ids, pos[:n] + [p + 1 for p in pos[n:]], reads, layout

    return bug


def _tail_sees_whole_trunk(pack):
    def bug(trunk, branches):
        ids, pos, reads, (n, tails) = pack(trunk, branches)
        return ids, pos, reads, (n, [(start, length, n) for start, length, _ in tails])

    return bug


BUGS = {"positions+1": _positions_plus_one, "tail sees the whole trunk": _tail_sees_whole_trunk}


@pytest.fixture(scope="module")
def checked():
    backend = random_backend("smollm2-135m", device="cpu", dtype="float32", layers=2)
    convs = synthetic_conversations(2, 4, 20, seed=3, role_words=20)
    reqs = _requests(convs, "user") + _requests(convs, "chained")
    out = {"fp32": {}, "bf16": {}}
    check, reference = fp32_check(backend, reqs)
    out["fp32"]["correct"] = check
    pack = backend._pack
    for name, bug in BUGS.items():
        backend._pack = bug(pack)
        out["fp32"][name] = fp32_check(backend, reqs)[0]
        backend._pack = pack
    backend.cast("bfloat16")
    out["bf16"]["correct"] = noise_check(backend, reqs, reference, other_batch_tokens=256)
    backend._pack = _tail_sees_whole_trunk(pack)
    out["bf16"]["tail sees the whole trunk"] = noise_check(backend, reqs, reference, other_batch_tokens=256)
    backend._pack = pack
    return out


@pytest.mark.slow
def test_correct_packing_passes_both_checks(checked):
    fp32, bf16 = checked["fp32"]["correct"], checked["bf16"]["correct"]
    assert fp32["passed"] and fp32["max_abs_p_yes_difference"] <= 1e-5
    assert bf16["passed"] and bf16["dtype"] == "bfloat16"
    assert [p["turn_index"] for p in bf16["per_turn"]] == list(range(4))
    # bf16 really rounds: the noise the bound is built from is far above the fp32 check's tolerance
    assert bf16["separate_vs_fp32"]["max_abs_p_yes_difference"] > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_injected_bug_fails_the_fp32_check(checked, bug):
    c = checked["fp32"][bug]
    assert not c["passed"] and c["max_abs_p_yes_difference"] > 10 * c["tolerance"]


@pytest.mark.slow
def test_later_history_fails_the_bf16_noise_check(checked):
    c = checked["bf16"]["tail sees the whole trunk"]
    assert not c["passed"]
    assert any(p["packed_vs_fp32"] > p["bound"] for p in c["per_turn"])


def test_noise_bounds_per_turn_index():
    """The bound at each turn index is 2x the larger noise, from that index's turns only."""
    index = [0, 1, 0, 1]
    ref = np.array([0.5, 0.5, 0.5, 0.5])
    packed = np.array([0.51, 0.6, 0.5, 0.5])
    separate = np.array([0.5, 0.55, 0.5, 0.5])
    other = np.array([0.5, 0.55, 0.5, 0.48])
    t0, t1 = noise_bounds(index, packed, separate, other, ref)
    assert t0["packed_vs_fp32"] == pytest.approx(0.01) and t0["bound"] == pytest.approx(2e-6)
    assert t1["packed_vs_fp32"] == pytest.approx(0.1) and t1["bound"] == pytest.approx(0.1)
    assert t1["separate_batch_sizes"] == pytest.approx(0.02)
    assert not t0["passed"] and t1["passed"]
