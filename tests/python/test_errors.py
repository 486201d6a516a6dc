"""Every rlx::Error reaches Python as rlx.Error (a RuntimeError) with rlx's message."""
import numpy as np
import pytest

import rlx


@pytest.fixture(scope="module")
def model():
    g = rlx.Graph()
    g.output(g.input("x", ["batch", 3]) * 2.0, "y")
    return rlx.compile(g)


def test_error_is_a_runtime_error():
    assert issubclass(rlx.Error, RuntimeError)


def test_bad_path():
    with pytest.raises(rlx.Error, match="does not exist"):
        rlx.load("/nonexistent/model.onnx")
    with pytest.raises(rlx.Error, match="nonexistent"):
        rlx.Graph.from_onnx("/nonexistent/model.onnx")


def test_malformed_onnx(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x96\x01garbage that is not a model")
    with pytest.raises(rlx.Error):
        rlx.load(bad)


def test_safetensors_is_not_a_model(tmp_path):
    path = tmp_path / "w.safetensors"
    rlx.save_safetensors(str(path), {"w": np.zeros(2, np.float32)})
    with pytest.raises(rlx.Error, match="only weights"):
        rlx.load(path)


def test_bad_input_name(model):
    with pytest.raises(rlx.Error, match="'z'") as e:
        model(x=np.ones((1, 3), np.float32), z=np.ones(1, np.float32))
    assert "x" in str(e.value)


def test_missing_input(model):
    with pytest.raises(rlx.Error, match="'x'"):
        model()


def test_bad_shape(model):
    with pytest.raises(rlx.Error, match=r"input 'x': dim 1 is 4, the graph expects f32\[batch,3\]"):
        model(x=np.ones((2, 4), np.float32))
    with pytest.raises(rlx.Error, match="rank"):
        model(x=np.ones(3, np.float32))


def test_wrong_dtype(model):
    with pytest.raises(rlx.Error, match="input 'x': got dtype f64, the graph expects f32"):
        model(x=np.ones((1, 3), np.float64))
    with pytest.raises(rlx.Error, match="complex64 has no rlx dtype"):
        model(x=np.ones((1, 3), np.complex64))


def test_unknown_output_and_bad_arguments(model):
    x = np.ones((1, 3), np.float32)
    with pytest.raises(rlx.Error, match="unknown output 'q'.*'y'"):
        model.run({"x": x}, outputs=["q"])
    with pytest.raises(rlx.Error, match="out of range"):
        model.run({"x": x}, outputs=[3])
    with pytest.raises(rlx.Error, match="dict"):
        model.run([x])
    with pytest.raises(rlx.Error, match="positional"):
        model(x, x)


def test_set_param_errors():
    g = rlx.Graph()
    g.output(g.input("x", [2]) + g.param("p", [2]))
    model = rlx.compile(g)
    with pytest.raises(rlx.Error, match="set_param"):
        model.set_param("nope", np.zeros(2, np.float32))
    with pytest.raises(rlx.Error, match="dtype"):
        model.set_param("p", np.zeros(2, np.int32))
    with pytest.raises(rlx.Error):
        model.set_param("p", np.zeros(3, np.float32))
    with pytest.raises(rlx.Error, match="'p'"):
        model(x=np.zeros(2, np.float32))  # never set


def test_unknown_device_and_precision():
    g = rlx.Graph()
    g.output(g.input("x", [1]) + 1.0)
    with pytest.raises(rlx.Error, match="tpu"):
        rlx.compile(g, device="tpu")
    with pytest.raises(rlx.Error, match="unknown precision 'fp8'"):
        rlx.compile(g, precision="fp8")


def test_bad_dtype_arguments():
    with pytest.raises(rlx.Error, match="not a dtype"):
        rlx.dtype_name(object())
    with pytest.raises(rlx.Error, match="has no rlx dtype"):
        rlx.dtype_name(np.complex128)
    with pytest.raises(rlx.Error, match="unknown dtype 'float8'"):
        rlx.Graph().input("x", [1], "float8")
