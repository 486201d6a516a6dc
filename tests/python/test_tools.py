"""check, pass report, devices, knobs, conformance, and interrupting a compile."""
import _thread
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import onnx_writer
import rlx


def mlp_graph():
    g = rlx.Graph()
    x = g.input("x", [2, 8])
    h = g.gelu(x @ g.param("w", [8, 8]) + g.param("b", [8]))
    g.output(g.softmax(h), "y")
    return g


def test_devices_and_pass_names():
    assert "cpu" in rlx.devices()
    assert "fuse_matmul_bias_act" in rlx.pass_names()
    names = [k["name"] for k in rlx.knobs()]
    assert "pass_report" in names


def test_check_reports_every_op_kind():
    report = rlx.check(mlp_graph(), "cpu")
    assert report.ok and bool(report) and report.unsupported == 0
    ops = {r["op"] for r in report.rows}
    assert "softmax" in ops
    text = str(report)
    assert "ok: every node runs on cpu" in text and "native" in text
    model = rlx.compile(mlp_graph())
    assert rlx.check(model).device == "cpu"


def test_pass_report_lists_passes():
    report = rlx.pass_report(mlp_graph(), "cpu")
    names = [r["name"] for r in report]
    assert "fuse_matmul_bias_act" in names
    fused = next(r for r in report if r["name"] == "fuse_matmul_bias_act")
    assert fused["nodes_after"] < fused["nodes_before"]
    assert "fuse_matmul_bias_act" in str(report)
    skipped = rlx.pass_report(mlp_graph(), "cpu", disabled_passes=["fuse_matmul_bias_act"])
    assert next(r for r in skipped if r["name"] == "fuse_matmul_bias_act")["skipped"]


def test_profile_tables_per_op_kind():
    if "webgpu" not in rlx.devices():
        with pytest.raises(rlx.Error, match="webgpu"):
            rlx.enable_profile("webgpu")
    try:
        rlx.enable_profile("cpu")
    except rlx.Error as e:  # builds whose CPU backend has no per-step profile
        assert "no per-step profile" in str(e)
        return
    g = rlx.Graph()
    x = g.input("x", [16, 16])
    g.output(g.softmax(x @ x))
    rlx.compile(g)(x=np.ones((16, 16), np.float32))
    table = rlx.take_profile("cpu")
    assert "matmul" in table and "softmax" in table
    assert rlx.take_profile("cpu") == ""


def write_case(root, name, nodes, inputs, outputs, in_values, out_values):
    case = root / name
    data = case / "test_data_set_0"
    data.mkdir(parents=True)
    (case / "model.onnx").write_bytes(onnx_writer.model(nodes, inputs, outputs))
    for i, v in enumerate(in_values):
        (data / f"input_{i}.pb").write_bytes(onnx_writer.tensor(f"in{i}", v))
    for i, v in enumerate(out_values):
        (data / f"output_{i}.pb").write_bytes(onnx_writer.tensor(f"out{i}", v))


def test_conformance_runs_node_cases(tmp_path):
    F = onnx_writer.FLOAT
    a = np.array([1, -2, 3], np.float32)
    vi = [onnx_writer.value_info("a", F, [3])]
    vo = [onnx_writer.value_info("b", F, [3])]
    write_case(tmp_path, "test_relu", [onnx_writer.node("Relu", ["a"], ["b"])], vi, vo, [a], [np.maximum(a, 0)])
    write_case(tmp_path, "test_abs_wrong", [onnx_writer.node("Abs", ["a"], ["b"])], vi, vo, [a], [a])
    write_case(tmp_path, "test_nosuchop", [onnx_writer.node("NoSuchOp", ["a"], ["b"])], vi, vo, [a], [a])
    results = {r.name: r for r in rlx.conformance(str(tmp_path))}
    assert results["test_relu"].status == "PASS"
    assert results["test_abs_wrong"].status == "FAIL" and "elements off" in results["test_abs_wrong"].detail
    assert results["test_nosuchop"].status == "UNSUPPORTED" and "NoSuchOp" in results["test_nosuchop"].detail
    assert [r.name for r in rlx.conformance(str(tmp_path), filter="relu")] == ["test_relu"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(rlx.Error, match="no test_"):
        rlx.conformance(str(tmp_path / "empty"))


def test_conformance_isolates_a_crashing_case(tmp_path, monkeypatch):
    """A case that kills its worker (SIGSEGV, as a crash in the library would) or hangs past the
    timeout is a FAIL row naming it; the cases before and after it run in new workers."""
    import importlib
    import sys
    F = onnx_writer.FLOAT
    a = np.array([1, -2, 3], np.float32)
    vi = [onnx_writer.value_info("a", F, [3])]
    vo = [onnx_writer.value_info("b", F, [3])]
    for name in ["test_a_relu", "test_b_crash", "test_c_relu", "test_d_hang", "test_e_relu"]:
        write_case(tmp_path, name, [onnx_writer.node("Relu", ["a"], ["b"])], vi, vo, [a], [np.maximum(a, 0)])
    # The real worker loop, with run_case wrapped so that two cases end their worker.
    worker = ("import importlib, os, signal, time\n"
              "c = importlib.import_module('rlx.conformance')\n"
              "real = c.run_case\n"
              "def run_case(d, device):\n"
              "    if d.endswith('crash'): os.kill(os.getpid(), signal.SIGSEGV)\n"
              "    if d.endswith('hang'): time.sleep(600)\n"
              "    return real(d, device)\n"
              "c.run_case = run_case\n"
              "c._worker_main()\n")
    module = importlib.import_module("rlx.conformance")  # rlx.conformance is also the function
    monkeypatch.setattr(module, "_worker_command", (sys.executable, "-c", worker))
    results = rlx.conformance(str(tmp_path), timeout=3)
    got = {r.name: (r.status, r.detail) for r in results}
    assert [r.name for r in results] == ["test_a_relu", "test_b_crash", "test_c_relu", "test_d_hang", "test_e_relu"]
    assert got["test_b_crash"] == ("FAIL", "the worker running it was killed by signal SIGSEGV")
    assert got["test_d_hang"] == ("FAIL", "timed out after 3 s (worker killed)")
    for name in ["test_a_relu", "test_c_relu", "test_e_relu"]:
        assert got[name] == ("PASS", ""), name
    # In this process, the same cases (without the wrapper) all pass.
    assert {r.status for r in rlx.conformance(str(tmp_path), isolate=False)} == {"PASS"}
    with pytest.raises(rlx.Error, match="timeout must be positive"):
        rlx.conformance(str(tmp_path), timeout=0)
    # A worker that cannot start is an error, not a FAIL row per case.
    monkeypatch.setattr(module, "_worker_command", (sys.executable, "-c", "raise SystemExit(3)"))
    with pytest.raises(rlx.Error, match="the worker process exited with status 3 before answering"):
        rlx.conformance(str(tmp_path))


def big_graph(n):
    g = rlx.Graph()
    x = g.input("x", [4, 4])
    for i in range(n):
        x = g.tanh(x @ g.param(f"w{i}", [4, 4]) + 1.0)
    g.output(x)
    return g


def test_keyboard_interrupt_during_compile_is_raised():
    # A graph whose compile takes at least 1 s here, so that the interrupt sent after 0.05 s
    # surely arrives during the compile even on a loaded machine.
    n = 3000
    while True:
        g = big_graph(n)
        start = time.perf_counter()
        rlx.compile(g, optimize=True)
        full = time.perf_counter() - start
        if full >= 1.0 or n >= 24000:
            break
        n *= 2
    if full < 1.0:
        pytest.skip(f"compile took {full:.3f} s: too quick to interrupt reliably")
    timer = threading.Timer(0.05, _thread.interrupt_main)
    start = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        rlx.compile(g, optimize=True)
    assert time.perf_counter() - start < full  # raised before the compile would have ended


def test_conformance_suite_matches_the_cli_floor():
    """The ONNX node suite (../shared/onnx-node, when present) in a worker process: no case fails and
    at least as many pass as the CLI's committed floor (tests/onnx/conformance_floor.txt)."""
    root = Path(__file__).resolve().parents[2]
    suite = root.parent / "shared" / "onnx-node"
    if not suite.is_dir():
        pytest.skip(f"no ONNX node suite at {suite}")
    floor = int((root / "tests" / "onnx" / "conformance_floor.txt").read_text().split()[0])
    results = rlx.conformance(str(suite))
    failed = [f"{r.name}: {r.detail}" for r in results if r.status == "FAIL"]
    assert not failed, "\n".join(failed[:20])
    assert sum(r.status == "PASS" for r in results) >= floor


def test_check_prints_the_cli_table(tmp_path, rlx_cli):
    import subprocess

    g = mlp_graph()
    g.output(g.argmax(g.exp(g.input("z", [3, 4])), 1), "idx")
    path = tmp_path / "g.json"
    g.save_json(str(path))
    for device in ["cpu", "vulkan"]:
        if device not in rlx.devices():
            continue
        cli = subprocess.run([rlx_cli, "check", str(path), "--device", device], capture_output=True, text=True)
        lines = cli.stdout.rstrip("\n").splitlines()
        assert lines[0].startswith("graph:")
        assert str(rlx.check(path, device)).splitlines() == lines[1:]
