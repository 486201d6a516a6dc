"""rlx.Model: calls, run with output selection, metadata, params, state, threads."""
import threading
import time

import numpy as np
import pytest

import rlx


def linear_graph():
    g = rlx.Graph()
    x = g.input("x", ["batch", 3])
    w = g.param("w", [3, 2])
    b = g.param("b", [2])
    y = x @ w + b
    g.output(y, "y")
    g.output(g.relu(y), "r")
    return g


def test_call_run_and_output_selection():
    model = rlx.compile(linear_graph())
    w = np.arange(6, dtype=np.float32).reshape(3, 2) - 2
    b = np.array([0.5, -0.5], np.float32)
    model.set_param("w", w)
    model.set_param("b", b)
    x = np.ones((4, 3), np.float32)
    y, r = model(x=x)
    np.testing.assert_array_equal(y, x @ w + b)
    np.testing.assert_array_equal(r, np.maximum(x @ w + b, 0))
    (only_r,) = model.run({"x": x}, outputs=["r"])
    np.testing.assert_array_equal(only_r, r)
    (only_y,) = model.run({"x": x}, outputs="y")  # one name
    np.testing.assert_array_equal(only_y, y)
    np.testing.assert_array_equal(model.run({"x": x}, outputs=1)[0], r)
    r2, y2 = model.run({"x": x}, outputs=[1, 0])
    np.testing.assert_array_equal(y2, y)
    positional = model(x)
    np.testing.assert_array_equal(positional[0], y)


def test_metadata():
    model = rlx.compile(linear_graph())
    assert model.device == "cpu"
    assert model.input_names == ["x"]
    assert model.output_names == ["y", "r"]
    (x,) = model.inputs
    assert (x.name, x.dtype, x.shape) == ("x", "f32", ("batch", 3))
    assert [(o.name, o.shape) for o in model.outputs] == [("y", ("batch", 2)), ("r", ("batch", 2))]
    assert sorted(p.name for p in model.params) == ["b", "w"]
    assert "ValueInfo(name='x'" in repr(x)
    assert len(model.graph) > 0


def test_single_output_returns_an_array_not_a_tuple():
    g = rlx.Graph()
    g.output(g.exp(g.input("x", [2])))
    out = rlx.compile(g)(x=np.zeros(2, np.float32))
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, [1, 1])


def test_outputs_are_numpy_arrays_over_rlx_buffers():
    g = rlx.Graph()
    g.output(g.input("x", [3]) * 2.0)
    out = rlx.compile(g)(x=np.ones(3, np.float32))
    assert out.flags.c_contiguous and out.flags.writeable and out.flags.aligned
    assert type(out.base).__name__ == "PyCapsule"  # rlx's tensor, not a copy
    out[0] = 7  # owned by the caller now
    assert out[0] == 7


def test_non_contiguous_and_list_inputs():
    g = rlx.Graph()
    g.output(g.input("x", [2, 3]) + 0.0)
    model = rlx.compile(g)
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = base[:2, 1:]  # strided
    np.testing.assert_array_equal(model(x=view), view)
    fortran = np.asfortranarray(base[:2, :3])
    np.testing.assert_array_equal(model(x=fortran), base[:2, :3])
    np.testing.assert_array_equal(model(x=[[1, 2, 3], [4, 5, 6]]), [[1, 2, 3], [4, 5, 6]])
    swapped = np.arange(6, dtype=">f4").reshape(2, 3)  # big-endian bytes
    np.testing.assert_array_equal(model(x=swapped), np.arange(6).reshape(2, 3))


def test_bind_state_carries_an_output_to_the_next_run():
    g = rlx.Graph()
    acc = g.input("acc", [2])
    g.output(acc + g.input("step", [2]), "next")
    model = rlx.compile(g)
    model.bind_state("acc", "next")
    one = np.ones(2, np.float32)
    np.testing.assert_array_equal(model(acc=np.zeros(2, np.float32), step=one), [1, 1])
    np.testing.assert_array_equal(model(step=one), [2, 2])
    np.testing.assert_array_equal(model(step=one), [3, 3])
    model.reset_state()
    with pytest.raises(rlx.Error, match="acc"):
        model(step=one)


def test_params_from_graph_weights_and_load_weights(tmp_path):
    g = linear_graph()
    w = np.ones((3, 2), np.float32)
    b = np.zeros(2, np.float32)
    path = tmp_path / "w.safetensors"
    rlx.save_safetensors(str(path), {"w": w, "b": b}, {"format": "test"})
    model = rlx.load(g, weights=path)
    y, _ = model(x=np.ones((1, 3), np.float32))
    np.testing.assert_array_equal(y, [[3, 3]])
    loaded = rlx.load_safetensors(str(path))
    np.testing.assert_array_equal(loaded["w"], w)


def test_threads_share_a_model_safely():
    g = rlx.Graph()
    x = g.input("x", [64, 64])
    g.output(g.matmul(x, x))
    model = rlx.compile(g, num_threads=1)
    xs = [np.full((64, 64), i, np.float32) for i in range(4)]
    results = {}

    def work(i):
        for _ in range(20):
            results[i] = model(x=xs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        np.testing.assert_array_equal(results[i], xs[i] @ xs[i])


def test_pass_report_option_and_disabled_passes():
    model = rlx.load(linear_graph(), disabled_passes=["fuse_matmul_bias_act"], knobs={"pass_report": False})
    assert model.device == "cpu"
    with pytest.raises(rlx.Error, match="fuse_nothing"):
        rlx.load(linear_graph(), disabled_passes=["fuse_nothing"])
    with pytest.raises(rlx.Error, match="no_such_knob"):
        rlx.load(linear_graph(), knobs={"no_such_knob": 1})


def test_runs_release_the_gil():
    g = rlx.Graph()
    x = g.input("x", [384, 384])
    g.output(g.sum(g.tanh(x @ x) @ x))
    model = rlx.compile(g, num_threads=1)
    big = np.full((384, 384), 0.01, np.float32)
    model(x=big)
    done = threading.Event()

    def work():
        for _ in range(10):
            model(x=big)
        done.set()

    worker = threading.Thread(target=work)
    start = time.perf_counter()
    worker.start()
    spins = 0
    while not done.is_set():
        spins += 1  # runs only while the worker's C++ run does not hold the GIL
        time.sleep(0)
    worker.join()
    elapsed = time.perf_counter() - start
    # Holding the GIL, the worker would let this loop run only between its calls (one or two spins
    # each); released, the loop spins for the whole time (about ten times more).
    assert spins > 100, f"{spins} spins in {elapsed * 1e3:.1f} ms: the GIL was held during run"
