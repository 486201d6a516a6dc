"""ONNX models whose import needs concrete dims run from Python without dims: rlx.load
specializes them per input-shape signature (the dims come from each call's arrays)."""
import numpy as np
import pytest

import onnx_writer as w
import rlx


def bert_positions():
    """y = x + pos[:, :seq], the sequence length read from x's shape (Shape -> Gather -> Slice)."""
    pos = (np.arange(16, dtype=np.float32) * 0.5).reshape(1, 16)
    nodes = [w.node("Shape", ["x"], ["shape"]), w.node("Gather", ["shape", "one"], ["seq_len"]),
             w.node("Slice", ["pos", "zero", "seq_len", "one"], ["pos_s"]), w.node("Add", ["x", "pos_s"], ["y"])]
    inits = [w.tensor("pos", pos), w.tensor("one", np.array([1], np.int64)), w.tensor("zero", np.array([0], np.int64))]
    data = w.model(nodes, [w.value_info("x", w.FLOAT, ["batch", "seq"])], [w.value_info("y", w.FLOAT, ["batch", "seq"])],
                   inits)
    return data, pos


def strided_conv():
    k = np.random.default_rng(1).standard_normal((2, 1, 3, 3)).astype(np.float32)
    data = w.model([w.node("Conv", ["x", "k"], ["y"], strides=[2, 2])],
                   [w.value_info("x", w.FLOAT, ["n", 1, "h", "w"])], [w.value_info("y", w.FLOAT, ["n", 2, "oh", "ow"])],
                   [w.tensor("k", k)])
    return data, k


def test_sequence_lengths_without_dims(tmp_path):
    data, pos = bert_positions()
    path = tmp_path / "bert_pos.onnx"
    path.write_bytes(data)
    with pytest.raises(rlx.Error, match="symbolic"):
        rlx.Graph.from_onnx(str(path))  # the plain import needs the dims
    model = rlx.load(path)
    assert model.specialized and model.inputs[0].shape == ("batch", "seq")
    with pytest.raises(rlx.Error, match="call it first"):
        model.graph
    rng = np.random.default_rng(2)
    for seq in (3, 7, 3):
        x = rng.standard_normal((2, seq)).astype(np.float32)
        np.testing.assert_allclose(model(x=x), x + pos[:, :seq], rtol=1e-6)
        # the oracle: the same model imported with the dims given
        oracle = rlx.load(path, dims={"batch": 2, "seq": seq})
        assert not oracle.specialized
        np.testing.assert_array_equal(model(x=x), oracle(x=x))
    stats = model.cache_stats
    assert stats["imports"] == 2 and stats["hits"] >= 1 and stats["cached"] == 2
    assert model.graph.input_info[0].shape == (2, 3)  # the latest call's signature
    with pytest.raises(rlx.Error, match="bind_state"):
        model.bind_state("x", "y")


def test_conv_from_bytes_and_the_signature_cache_bound():
    data, k = strided_conv()
    model = rlx.load(data, max_signatures=1)
    assert model.specialized
    y1 = model(x=np.ones((1, 1, 7, 7), np.float32))
    assert y1.shape == (1, 2, 3, 3)
    np.testing.assert_allclose(y1[0, :, 0, 0], k.sum(axis=(1, 2, 3)), rtol=1e-5)
    assert model(x=np.ones((2, 1, 9, 5), np.float32)).shape == (2, 2, 4, 2)
    model(x=np.ones((1, 1, 7, 7), np.float32))
    assert model.cache_stats == {"runs": 3, "imports": 3, "hits": 0, "evictions": 2, "cached": 1}
    # a new weight: the next call imports again with it
    model.set_param("k", np.zeros_like(k))
    assert np.all(model(x=np.ones((1, 1, 7, 7), np.float32)) == 0)


def test_inputs_that_disagree_name_the_input():
    data, _ = bert_positions()
    model = rlx.load(data)
    with pytest.raises(rlx.Error, match=r"input 'x': expected f32\[batch,seq\], given f32\[2,3,1\]"):
        model(x=np.zeros((2, 3, 1), np.float32))
    with pytest.raises(rlx.Error, match="dtype"):
        model(x=np.zeros((2, 3), np.int64))


def test_models_that_import_symbolically_compile_once(tiny_onnx):
    model = rlx.load(tiny_onnx)
    assert not model.specialized and model.cache_stats is None
    assert model.outputs[0].shape == ("batch", 3)
