"""rlx.Graph: the builder, dtypes, symbolic dims, operators, JSON round trip."""
import numpy as np
import pytest

import rlx


def test_builder_infers_shapes_and_dtypes():
    g = rlx.Graph()
    x = g.input("x", ["batch", 4])
    w = g.param("w", [4, 3])
    y = g.relu(x @ w)
    assert y.shape == ("batch", 3)
    assert y.dtype == "f32"
    idx = g.argmax(y, 1)
    assert idx.dtype == "i64" and idx.shape == ("batch",)
    g.output(y, "y")
    g.output(idx, "idx")
    assert g.output_names == ["y", "idx"]
    assert [(i.name, i.dtype, i.shape) for i in g.input_info] == [("x", "f32", ("batch", 4))]
    assert [(p.name, p.shape) for p in g.param_info] == [("w", (4, 3))]
    assert "matmul" in str(g)
    g.verify()


def test_operators_and_scalars_compute_like_numpy():
    g = rlx.Graph()
    x = g.input("x", [2, 3])
    g.output((x * 2.0 + 1.0 - x / 4.0) ** 2.0, "a")
    g.output(-x, "b")
    g.output(1.0 - x, "c")
    model = rlx.compile(g)
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, b, c = model(x=xv)
    np.testing.assert_allclose(a, (xv * 2 + 1 - xv / 4) ** 2, rtol=1e-6)
    np.testing.assert_array_equal(b, -xv)
    np.testing.assert_array_equal(c, 1 - xv)


def test_builder_ops_match_numpy():
    rng = np.random.default_rng(0)
    g = rlx.Graph()
    x = g.input("x", [2, 5])
    gamma = g.constant(np.ones(5, np.float32))
    g.output(g.softmax(x), "softmax")
    g.output(g.sum(x, [1], keep_dims=True), "sum")
    g.output(g.reduce("max", x, [0]), "max")
    g.output(g.transpose(x, [1, 0]), "t")
    g.output(g.concat([x, x], 0), "cat")
    g.output(g.narrow(x, 1, 1, 3), "narrow")
    g.output(g.cast(x, "i32"), "cast")
    g.output(g.where(g.gt(x, 0.0), x, g.scalar(0.0)), "where")
    g.output(g.layer_norm(x, gamma, eps=1e-5), "ln")
    values, indices = g.topk(x, 2)
    g.output(indices, "topk")
    model = rlx.compile(g)
    xv = rng.standard_normal((2, 5)).astype(np.float32)
    out = dict(zip(model.output_names, model.run({"x": xv})))
    e = np.exp(xv - xv.max(1, keepdims=True))
    np.testing.assert_allclose(out["softmax"], e / e.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(out["sum"], xv.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(out["max"], xv.max(0))
    np.testing.assert_array_equal(out["t"], xv.T)
    np.testing.assert_array_equal(out["cat"], np.concatenate([xv, xv]))
    np.testing.assert_array_equal(out["narrow"], xv[:, 1:4])
    np.testing.assert_array_equal(out["cast"], xv.astype(np.int32))
    np.testing.assert_array_equal(out["where"], np.where(xv > 0, xv, 0))
    ln = (xv - xv.mean(1, keepdims=True)) / np.sqrt(xv.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out["ln"], ln, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out["topk"], np.argsort(-xv, 1)[:, :2])


def test_activation_methods_cover_every_kind():
    g = rlx.Graph()
    x = g.input("x", [3])
    for name in ["gelu", "silu", "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "neg", "abs",
                 "sin", "cos", "erf", "floor", "ceil", "reciprocal", "sign", "softplus"]:
        assert getattr(g, name)(x).shape == (3,)
    b = g.input("b", [3], "bool")
    assert g.not_(b).dtype == "bool"


def test_json_round_trip_keeps_weights(tmp_path):
    g = rlx.Graph()
    x = g.input("x", ["n", 2])
    w = g.param("w", [2, 2])
    g.output(x @ w, "y")
    wv = np.array([[1, 2], [3, 4]], np.float32)
    g.set_weight("w", wv)
    path = tmp_path / "g.json"
    g.save_json(str(path))
    g2 = rlx.Graph.load_json(str(path))
    assert g2.to_json() == g.to_json()
    assert g2.weight_names == ["w"]
    y = rlx.load(path)(x=np.eye(2, dtype=np.float32))
    np.testing.assert_array_equal(y, wv)
    assert rlx.Graph.from_json(g.to_json()).output_names == ["y"]


def test_specialize_binds_symbolic_dims():
    g = rlx.Graph()
    x = g.input("x", ["batch", 4])
    g.output(g.relu(x))
    assert g.specialize({"batch": 2}).input_info[0].shape == (2, 4)


def test_builder_errors_name_the_problem():
    g = rlx.Graph()
    a = g.input("a", [2, 3])
    b = g.input("b", [4, 5])
    with pytest.raises(rlx.Error, match="matmul"):
        g.matmul(a, b)
    with pytest.raises(rlx.Error, match="unknown dtype 'f31'"):
        g.input("c", [1], "f31")
    with pytest.raises(rlx.Error, match="negative"):
        g.input("d", [-1])
    other = rlx.Graph().input("z", [2, 3])
    with pytest.raises(rlx.Error, match="another rlx.Graph"):
        g.add(a, other)
    with pytest.raises(rlx.Error, match="unknown enum value 'median'"):
        g.reduce("median", a)


def test_json_side_file_and_dims(tmp_path):
    g = rlx.Graph()
    x = g.input("x", ["batch", 3])
    g.output(x @ g.param("w", [3, 3]), "y")
    g.set_weight("w", np.eye(3, dtype=np.float32) * 2)
    path = tmp_path / "side.json"
    g.save_json(str(path), inline_data=False)
    assert (tmp_path / "side.json.bin").exists()
    model = rlx.load(path, dims={"batch": 2})
    assert model.inputs[0].shape == (2, 3)
    np.testing.assert_array_equal(model(x=np.ones((2, 3), np.float32)), np.full((2, 3), 2, np.float32))
