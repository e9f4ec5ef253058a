"""The GGUF header walk checked against gguf's own reader on a file gguf's writer made (every kind of metadata
value, quantised and float tensors); the bundled judge's weights against transformers' load are in test_export."""

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from adherence.models._gguf import llama_state_dict, read_header  # noqa: E402


def _write(path, arch="llama", names=("token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight")):
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_string("general.name", "tiny ünïcode")
    w.add_float32("llama.rope.freq_base", 10000.5)
    w.add_bool("x.flag", True)
    w.add_uint64("x.big", 2**40 + 3)
    w.add_int32("x.neg", -7)
    w.add_token_list([f"tok{i}" for i in range(50)])  # an array of strings: skipped over
    w.add_array("x.numbers", [1, 2, 3])
    w.add_array("x.nested", [[1, 2], [3]])
    w.add_string("x.after", "read after the arrays")
    qtypes = [gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.F32]
    for name, qtype in zip(names, qtypes):
        x = rng.standard_normal((16, 64)).astype(np.float32) if qtype != qtypes[2] else rng.standard_normal(64)
        x = x.astype(np.float32)
        data = gguf.quants.quantize(x, qtype) if qtype != qtypes[2] else x
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_header_walk_equals_ggufs_reader(tmp_path):
    path = _write(tmp_path / "tiny.gguf")
    meta, tensors = read_header(path)
    ref = gguf.GGUFReader(str(path))
    scalars = {  # the metadata (not the reader's own GGUF.* header fields) that is not an array
        f.name: f.contents()
        for f in ref.fields.values()
        if not f.name.startswith("GGUF.") and f.types[0] != gguf.GGUFValueType.ARRAY
    }
    assert meta.keys() == scalars.keys()
    for k, v in scalars.items():
        assert meta[k] == pytest.approx(v) if isinstance(v, float) else meta[k] == v, k
    assert meta["general.name"] == "tiny ünïcode" and meta["x.big"] == 2**40 + 3 and meta["x.neg"] == -7
    assert meta["x.after"] == "read after the arrays" and "x.nested" not in meta
    assert [(t.name, t.dims, t.qtype, t.offset) for t in tensors] == [
        (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.data_offset)) for t in ref.tensors
    ]


def test_llama_weights_are_ggufs_dequantised_tensors_under_transformers_names(tmp_path):
    path = _write(tmp_path / "tiny.gguf")
    got = llama_state_dict(path)
    ref = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in gguf.GGUFReader(str(path)).tensors}
    assert set(got) == {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.norm.weight"}
    np.testing.assert_array_equal(got["model.embed_tokens.weight"], ref["token_embd.weight"])
    np.testing.assert_array_equal(got["model.norm.weight"], ref["output_norm.weight"])
    q = got["model.layers.0.self_attn.q_proj.weight"]  # 4 heads of 4 rows: each head's rows (0, 2, 1, 3)
    np.testing.assert_array_equal(q, ref["blk.0.attn_q.weight"].reshape(4, 2, 2, 64).swapaxes(1, 2).reshape(16, 64))


@pytest.mark.parametrize(
    "arch, names",
    [
        ("gpt2", ("token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight")),
        ("llama", ("token_embd.weight", "blk.0.attn_qkv.weight", "output_norm.weight")),
    ],
)
def test_another_layout_is_left_to_transformers(tmp_path, arch, names):
    assert llama_state_dict(_write(tmp_path / "other.gguf", arch, names)) is None


def test_a_file_that_is_not_gguf_is_refused_and_left_to_transformers(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_header(bad)
    assert llama_state_dict(bad) is None
    big_endian = tmp_path / "be.gguf"
    big_endian.write_bytes(b"GGUF" + (3).to_bytes(4, "big") + bytes(16))
    with pytest.raises(ValueError, match="GGUF version 50331648 is not read here"):
        read_header(big_endian)
    assert llama_state_dict(big_endian) is None
