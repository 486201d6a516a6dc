"""Model.export_web: a web bundle from Python (the bundle itself runs in Chromium in tests/web)."""
import json

import numpy as np
import pytest

import rlx


def web_model(path, **kw):
    if "webgpu" not in rlx.devices():
        pytest.skip("this build has no WebGPU backend")
    try:
        return rlx.load(path, device="webgpu", **kw)
    except rlx.Error as e:
        if "no WebGPU device" in str(e):
            pytest.skip(str(e))
        raise


def test_export_web_writes_the_bundle(tiny_onnx, tmp_path):
    m = web_model(tiny_onnx, knobs={"webgpu_limits": "web"})
    info = m.export_web(str(tmp_path / "b"), dims={"batch": 2})
    assert info["files"] == ["model.json", "weights.bin", "rlx-web.js", "index.html"]
    assert info["dispatches"] >= 1 and info["kernels"] >= 1
    manifest = json.loads((tmp_path / "b" / "model.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["x"]
    assert manifest["inputs"][0]["dims"] == [2, 4]
    assert [o["name"] for o in manifest["outputs"]] == ["h", "y"]
    assert (tmp_path / "b" / "weights.bin").stat().st_size == info["weight_bytes"] == manifest["weights"]["bytes"]
    half = m.export_web(str(tmp_path / "h"), dims={"batch": 2}, f16_weights=True)
    assert half["weight_bytes"] < info["weight_bytes"]


def test_export_web_refusals(tiny_onnx, tmp_path):
    with pytest.raises(rlx.Error, match="compiled for cpu"):
        rlx.load(tiny_onnx).export_web(str(tmp_path / "c"), dims={"batch": 1})
    adapter = web_model(tiny_onnx)
    with pytest.raises(rlx.Error, match="webgpu_limits=web"):
        adapter.export_web(str(tmp_path / "a"), dims={"batch": 1})
    web = web_model(tiny_onnx, knobs={"webgpu_limits": "web"})
    with pytest.raises(rlx.Error, match="'batch'"):
        web.export_web(str(tmp_path / "d"))
    assert not (tmp_path / "d").exists()
