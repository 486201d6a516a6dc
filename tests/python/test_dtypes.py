"""Every rlx dtype in and out: NumPy arrays, rlx.Tensor, bf16 as uint16 bits."""
import numpy as np
import pytest

import rlx

NUMPY = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i8": np.int8, "i16": np.int16,
         "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u32": np.uint32, "u64": np.uint64,
         "bool": np.bool_, "bf16": np.uint16}
# The storage-only dtypes as their stored bytes: float8/float4 bits, sub-byte integer values.
STORAGE = {"f8e4m3fn": np.uint8, "f8e4m3fnuz": np.uint8, "f8e5m2": np.uint8, "f8e5m2fnuz": np.uint8,
           "f8e8m0": np.uint8, "f4e2m1": np.uint8, "i4": np.int8, "u4": np.uint8, "i2": np.int8,
           "u2": np.uint8}


def test_every_rlx_dtype_has_a_numpy_dtype():
    assert sorted(rlx.dtypes) == sorted(list(NUMPY) + ["u16"] + list(STORAGE))
    for name, np_type in NUMPY.items():
        assert rlx.numpy_dtype(name) == np.dtype(np_type)
        assert rlx.dtype_name(np_type) == name
    assert rlx.dtype_name("float32") == "f32" and rlx.dtype_name("bfloat16") == "bf16"
    # u16 shares NumPy's uint16 with bf16's bits: a uint16 array reads as bf16 unless named
    assert rlx.numpy_dtype("u16") == np.dtype(np.uint16) and rlx.dtype_name("uint16") == "u16"
    for name, np_type in STORAGE.items():
        assert rlx.numpy_dtype(name) == np.dtype(np_type)


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_round_trip_through_a_graph(name):
    g = rlx.Graph()
    x = g.input("x", [2, "n"], name)
    g.output(g.concat([x, g.reverse(x, [1])], 0), "y")
    model = rlx.compile(g)
    assert model.inputs[0].dtype == name and model.outputs[0].dtype == name
    rng = np.random.default_rng(1)
    if name == "bool":
        xv = rng.integers(0, 2, (2, 3)).astype(np.bool_)
    elif name == "bf16":
        xv = rlx.Tensor(rng.standard_normal((2, 3)).astype(np.float32), "bf16").numpy()
    else:
        xv = (rng.standard_normal((2, 3)) * 10).astype(NUMPY[name])
    y = model(x=xv)
    assert y.dtype == np.dtype(NUMPY[name])
    np.testing.assert_array_equal(y, np.concatenate([xv, xv[:, ::-1]]))
    (t,) = model.run({"x": xv}, as_tensors=True)
    assert t.dtype == name and t.shape == (4, 3)
    np.testing.assert_array_equal(np.asarray(t), y)


def test_bf16_values():
    values = np.array([1.0, -2.5, 3.140625, 1e-3], np.float32)
    t = rlx.Tensor(values, dtype="bf16")
    assert t.dtype == "bf16" and t.numpy().dtype == np.uint16
    np.testing.assert_allclose(t.to_float32(), values, rtol=1e-2)
    np.testing.assert_array_equal(t.to_float32()[:3], values[:3])  # exact in bf16
    # the bits are the upper half of the f32 bits (round to nearest even)
    np.testing.assert_array_equal(t.numpy()[:3], (values[:3].view(np.uint32) >> 16).astype(np.uint16))
    g = rlx.Graph()
    x = g.input("x", [4], "bf16")
    g.output(g.cast(x * 2.0, "f32"))
    np.testing.assert_array_equal(rlx.compile(g)(x=t)[:3], values[:3] * 2)
    # lists for a bf16 input are converted through f32
    np.testing.assert_array_equal(rlx.compile(g)(x=[1.0, 2.0, 3.0, 4.0]), [2, 4, 6, 8])


def test_f16_math_and_cast():
    g = rlx.Graph()
    x = g.input("x", [3], "f16")
    g.output(g.cast(x, "f32") + 1.0)
    out = rlx.compile(g)(x=np.array([0.5, 1.5, 65504], np.float16))
    np.testing.assert_array_equal(out, [1.5, 2.5, 65505])


def test_tensor_type():
    t = rlx.Tensor([[1, 2], [3, 4]], "i32")
    assert (t.dtype, t.shape, t.ndim, t.size, t.nbytes, len(t)) == ("i32", (2, 2), 2, 4, 16, 2)
    assert repr(t) == "rlx.Tensor(i32[2,2])"
    m = memoryview(t)
    assert m.format == "i" and m.shape == (2, 2)
    np.testing.assert_array_equal(t.astype("f64").numpy(), [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float32), [[1, 2], [3, 4]])
    with pytest.raises(rlx.Error, match="complex"):
        rlx.Tensor(np.zeros(2, np.complex64))
