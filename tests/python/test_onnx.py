"""A small ONNX model from Python vs NumPy and vs the rlx CLI (the C++ path)."""
import subprocess

import numpy as np
import pytest

import onnx_writer
import rlx


def reference(x, weights):
    h = np.maximum(x @ weights["w"] + weights["b"], 0)
    e = np.exp(h - h.max(-1, keepdims=True))
    return h, e / e.sum(-1, keepdims=True)


def test_committed_model_is_what_the_writer_makes(tiny_onnx):
    assert tiny_onnx.read_bytes() == onnx_writer.tiny_mlp()[0]


def test_tiny_onnx_matches_numpy(tiny_onnx):
    model = rlx.load(tiny_onnx)
    assert model.input_names == ["x"] and model.output_names == ["h", "y"]
    assert model.inputs[0].shape == ("batch", 4)
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    h, y = model(x=x)
    want_h, want_y = reference(x, onnx_writer.tiny_mlp()[1])
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)


def test_dims_bound_at_import(tiny_onnx):
    model = rlx.load(tiny_onnx.read_bytes(), dims={"batch": 2})
    assert model.inputs[0].shape == (2, 4)
    with pytest.raises(rlx.Error, match="dim 0"):
        model(x=np.zeros((3, 4), np.float32))


def test_from_onnx_bytes_with_an_int_attribute():
    data = onnx_writer.model([onnx_writer.node("Transpose", ["x"], ["y"], perm=[1, 0])],
                             [onnx_writer.value_info("x", onnx_writer.FLOAT, [2, 3])],
                             [onnx_writer.value_info("y", onnx_writer.FLOAT, [3, 2])])
    g = rlx.Graph.from_onnx_bytes(data)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(rlx.load(g)(x=x), x.T)


def test_same_numbers_as_the_cli(tiny_onnx, rlx_cli, tmp_path):
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    subprocess.run([rlx_cli, "run", str(tiny_onnx), "--input", f"x={tmp_path / 'x.npy'}", "--save-outputs", str(out),
                    "--threads", "1"], check=True, capture_output=True)
    h, y = rlx.load(tiny_onnx, num_threads=1)(x=x)
    np.testing.assert_array_equal(h, np.load(out / "h.npy"))
    np.testing.assert_array_equal(y, np.load(out / "y.npy"))


def test_vulkan_matches_cpu(tiny_onnx):
    if "vulkan" not in rlx.devices():
        pytest.skip("this build has no Vulkan backend")
    try:
        gpu = rlx.load(tiny_onnx, device="vulkan")
    except rlx.Error as e:
        if "no Vulkan device" in str(e):
            pytest.skip(str(e))
        raise
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    for got, want in zip(gpu(x=x), rlx.load(tiny_onnx)(x=x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # the per-step profile covers models compiled after it is enabled
    rlx.enable_profile("vulkan")
    profiled = rlx.load(tiny_onnx, device="vulkan", dims={"batch": 2})
    profiled(x=x)
    table = rlx.take_profile("vulkan")
    assert "ms" in table and "dispatches" in table
    assert rlx.take_profile("vulkan") == ""  # taken: cleared
    assert rlx._rlx._vulkan_validation_messages() == []  # RLX_VULKAN_VALIDATION=1 under ctest


def test_cuda_runs_or_says_why(tiny_onnx):
    if "cuda" not in rlx.devices():
        pytest.skip("this build has no CUDA backend")
    x = np.random.default_rng(6).standard_normal((2, 4)).astype(np.float32)
    try:
        gpu = rlx.load(tiny_onnx, device="cuda")
    except rlx.Error as e:
        assert "CUDA" in str(e)  # e.g. "no CUDA device: ..." on machines without a GPU
        return
    for got, want in zip(gpu(x=x), rlx.load(tiny_onnx)(x=x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_known_inputs_fix_shape_operands():
    data = onnx_writer.model([onnx_writer.node("Reshape", ["x", "shape"], ["y"])],
                             [onnx_writer.value_info("x", onnx_writer.FLOAT, [6]),
                              onnx_writer.value_info("shape", onnx_writer.INT64, [2])],
                             [onnx_writer.value_info("y", onnx_writer.FLOAT, [2, 3])])
    with pytest.raises(rlx.Error, match="known at import time"):
        rlx.load(data)
    shape = np.array([3, 2], np.int64)
    model = rlx.load(data, known_inputs={"shape": shape})
    x = np.arange(6, dtype=np.float32)
    feeds = {"x": x, "shape": shape} if "shape" in model.input_names else {"x": x}
    np.testing.assert_array_equal(model.run(feeds)[0], x.reshape(3, 2))
    with pytest.raises(rlx.Error, match="ONNX models only"):
        rlx.load(rlx.Graph(), known_inputs={"shape": shape})


def test_onnx_info(tiny_onnx):
    info = rlx.onnx_info(str(tiny_onnx))
    assert info["producer"] == "rlx-tests" and info["ir_version"] == 8
    assert info["inputs"] == [{"name": "x", "type": "float32", "shape": ("batch", 4)}]
    assert [o["name"] for o in info["outputs"]] == ["h", "y"]
    assert info["op_histogram"] == {"Add": 1, "MatMul": 1, "Relu": 1, "Softmax": 1}
    assert info["opsets"] == [("", 17)]


def test_webgpu_matches_cpu(tiny_onnx):
    if "webgpu" not in rlx.devices():
        pytest.skip("this build has no WebGPU backend")
    try:
        gpu = rlx.load(tiny_onnx, device="webgpu")
    except rlx.Error as e:
        if "no WebGPU device" in str(e):
            pytest.skip(str(e))
        raise
    x = np.random.default_rng(7).standard_normal((2, 4)).astype(np.float32)
    for got, want in zip(gpu(x=x), rlx.load(tiny_onnx)(x=x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    rlx.enable_profile("webgpu")
    profiled = rlx.load(tiny_onnx, device="webgpu", dims={"batch": 2})
    profiled(x=x)
    table = rlx.take_profile("webgpu")
    assert "ms" in table and "dispatches" in table
    assert rlx.take_profile("webgpu") == ""
