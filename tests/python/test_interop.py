"""Zero-copy NumPy and DLPack interop (host memory)."""
import numpy as np
import pytest

import rlx


class DLPackOnly:
    """An object that offers only the DLPack protocol (as a PyTorch CPU tensor does)."""

    def __init__(self, array, device=(1, 0)):
        self.array = array
        self.device = device

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.device


def identity_model(shape, dtype="f32"):
    g = rlx.Graph()
    g.output(g.input("x", shape, dtype) + g.scalar(0, dtype))
    return rlx.compile(g)


def test_from_dlpack_shares_numpy_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = rlx.from_dlpack(a)
    assert t.dtype == "f32" and t.shape == (2, 3)
    view = np.asarray(memoryview(t))
    assert np.shares_memory(view, a)
    a[0, 0] = 42
    assert view[0, 0] == 42


def test_numpy_from_dlpack_of_rlx_tensor_shares_memory():
    t = rlx.Tensor(np.arange(4, dtype=np.int64))
    a = np.from_dlpack(t)
    b = np.asarray(memoryview(t))
    assert np.shares_memory(a, b)
    np.testing.assert_array_equal(a, [0, 1, 2, 3])
    assert t.__dlpack_device__() == (1, 0)


def test_model_outputs_as_tensors_go_through_dlpack():
    model = identity_model([3])
    (t,) = model.run({"x": np.array([1, 2, 3], np.float32)}, as_tensors=True)
    np.testing.assert_array_equal(np.from_dlpack(t), [1, 2, 3])
    # numpy outputs are DLPack producers themselves
    out = model(x=np.array([4, 5, 6], np.float32))
    np.testing.assert_array_equal(rlx.from_dlpack(out).numpy(), [4, 5, 6])


def test_dlpack_objects_as_inputs():
    model = identity_model([2, 2])
    a = np.array([[1, 2], [3, 4]], np.float32)
    np.testing.assert_array_equal(model(x=DLPackOnly(a)), a)
    strided = np.arange(16, dtype=np.float32).reshape(4, 4)[::2, 1::2]
    np.testing.assert_array_equal(model(x=DLPackOnly(strided)), strided)  # copied: strided
    np.testing.assert_array_equal(model(x=rlx.from_dlpack(a.T)), a.T)


@pytest.mark.parametrize("dtype", ["f32", "f16", "f64", "i8", "i16", "i32", "i64", "u8", "bf16", "bool", "u32"])
def test_dlpack_round_trip_every_dtype(dtype):
    base = np.array([[0, 1, 1], [0, 2, 3]])
    values = rlx.Tensor(base % 2 if dtype == "bool" else base, dtype)
    back = rlx.from_dlpack(values)
    assert back.dtype == dtype
    np.testing.assert_array_equal(back.numpy(), values.numpy())
    if dtype not in ("bf16", "bool"):  # NumPy 1.24 reads neither through DLPack
        np.testing.assert_array_equal(np.from_dlpack(values), values.numpy())


def test_dlpack_errors():
    with pytest.raises(rlx.Error, match="__dlpack_device__ says device type 2 but its capsule holds a tensor on "
                                        "device type 1"):
        rlx.from_dlpack(DLPackOnly(np.zeros(2, np.float32), device=(2, 0)))
    with pytest.raises(rlx.Error, match="DLPack device type 8; rlx takes host"):
        rlx.from_dlpack(DLPackOnly(np.zeros(2, np.float32), device=(8, 0)))
    capsule = np.zeros(2, np.float32).__dlpack__()
    rlx.from_dlpack(capsule)
    with pytest.raises(rlx.Error, match="imported once"):
        rlx.from_dlpack(capsule)
    with pytest.raises(rlx.Error, match="host tensors take no stream"):
        rlx.Tensor([1.0]).__dlpack__(stream=1)


def test_dlpack_array_api_keywords():
    t = rlx.Tensor(np.arange(3, dtype=np.float32))
    mine = np.asarray(memoryview(t))
    shared = rlx.from_dlpack(t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False))
    assert np.shares_memory(np.asarray(memoryview(shared)), mine)
    copied = rlx.from_dlpack(t.__dlpack__(copy=True))
    assert not np.shares_memory(np.asarray(memoryview(copied)), mine)
    np.testing.assert_array_equal(copied.numpy(), [0, 1, 2])
    with pytest.raises(rlx.Error, match=r"the tensor is on DLPack device \(1, 0\); it cannot be exported to \(2, 0\)"):
        t.__dlpack__(dl_device=(2, 0))


def test_inputs_read_in_place_are_left_unchanged():
    g = rlx.Graph()
    x = g.input("x", [4, 8])
    g.output(g.reshape(g.exp(g.relu(x * 2.0 + 1.0)), [32]), "y")  # in-place candidates
    g.output(g.softmax(x), "s")
    model = rlx.compile(g)
    a = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    before = a.copy()
    a.setflags(write=False)  # read-only arrays are accepted (rlx only reads inputs)
    y, s = model(x=a)
    np.testing.assert_array_equal(a, before)
    np.testing.assert_allclose(y, np.exp(np.maximum(before * 2 + 1, 0)).ravel(), rtol=1e-6)
