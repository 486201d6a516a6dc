"""PyTorch CUDA tensors -> an rlx model on CUDA -> PyTorch CUDA tensors with no host copy: the
inputs are read device-to-device and the outputs stay in device memory (rlx.device_stats counts
every byte that crosses between host and device; the data path must move none), ordered after
the producer's stream. Skipped without PyTorch, a CUDA device, or rlx's CUDA backend."""
import numpy as np
import pytest

import rlx

torch = pytest.importorskip("torch", reason="PyTorch is not installed")


@pytest.fixture(scope="module")
def cuda_ready():
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    if "cuda" not in rlx.devices():
        pytest.skip("this rlx build has no CUDA backend")
    try:
        rlx.compile(mlp_graph(), device="cuda")
    except rlx.Error as e:
        pytest.skip(f"rlx cannot use the CUDA device: {e}")


def mlp_graph():
    g = rlx.Graph()
    x = g.input("x", ["batch", 128])
    h = g.gelu(x @ g.param("w", [128, 32]) + g.param("b", [32]))
    g.output(h, "h")
    g.output(g.softmax(h), "p")
    return g


def models():
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((128, 32)) * 0.1).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    gpu, cpu = rlx.compile(mlp_graph(), device="cuda"), rlx.compile(mlp_graph())
    for m in (gpu, cpu):
        m.set_param("w", w)
        m.set_param("b", b)
    return gpu, cpu


def moved(before, after, key):
    return after[key] - before[key]


def test_torch_to_rlx_to_torch_has_no_host_copy(cuda_ready):
    gpu, cpu = models()
    x = torch.randn(64, 128, device="cuda")
    want_h, want_p = cpu.run({"x": x.cpu().numpy()})
    gpu.run({"x": x}, device_outputs=True)  # the first run uploads the params
    before = rlx.device_stats()
    h, p = gpu.run({"x": x}, device_outputs=True)
    after = rlx.device_stats()
    assert moved(before, after, "upload_bytes") == 0, "bytes went host -> device"
    assert moved(before, after, "download_bytes") == 0, "bytes went device -> host"
    assert moved(before, after, "device_copy_bytes") == x.numel() * 4 + 2 * 64 * 32 * 4
    assert (h.device, p.device, h.shape, h.dtype) == ("cuda", "cuda", (64, 32), "f32")
    th, tp = torch.from_dlpack(h), torch.from_dlpack(p)
    assert th.is_cuda and tp.is_cuda
    assert moved(after, rlx.device_stats(), "download_bytes") == 0, "torch.from_dlpack copied nothing"
    np.testing.assert_allclose(th.cpu().numpy(), want_h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tp.cpu().numpy(), want_p, rtol=1e-4, atol=1e-5)
    # The memory stays valid while torch holds it, after rlx's tensor is gone.
    del h, p
    torch.cuda.synchronize()
    np.testing.assert_allclose(th.cpu().numpy(), want_h, rtol=1e-4, atol=1e-5)


def test_dlpack_round_trip_shares_memory(cuda_ready):
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    t = rlx.from_dlpack(x)
    assert (t.device, t.device_ordinal, t.shape) == ("cuda", x.device.index or 0, (3, 4))
    back = torch.from_dlpack(t)
    assert back.data_ptr() == x.data_ptr()
    before = rlx.device_stats()
    np.testing.assert_array_equal(t.to_host().numpy(), x.cpu().numpy())
    assert moved(before, rlx.device_stats(), "download_bytes") == 12 * 4, "to_host is the one counted copy"
    with pytest.raises(rlx.Error, match="strided CUDA tensor"):
        rlx.from_dlpack(x.t())


def test_outputs_into_torch_buffers(cuda_ready):
    gpu, cpu = models()
    x = torch.randn(16, 128, device="cuda")
    gpu.run({"x": x})
    p_buf = torch.empty(16, 32, device="cuda")
    before = rlx.device_stats()
    (got,) = gpu.run({"x": x}, outputs=["p"], out=[p_buf])
    after = rlx.device_stats()
    assert got is p_buf, "the caller's object is returned"
    assert moved(before, after, "upload_bytes") == 0 and moved(before, after, "download_bytes") == 0
    np.testing.assert_allclose(p_buf.cpu().numpy(), cpu.run({"x": x.cpu().numpy()}, outputs="p")[0],
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(rlx.Error, match=r"out\[0\] \(for output 1\) is f32\[16,31\], the output is f32\[16,32\]"):
        gpu.run({"x": x}, outputs=["p"], out=[torch.empty(16, 31, device="cuda")])


def test_rlx_waits_for_the_torch_stream(cuda_ready):
    """The input is produced on a side stream of torch behind a long computation: the run must be
    ordered after it (from_dlpack asks torch for the tensor on the legacy default stream, and the
    run's stream waits for that one)."""
    gpu, cpu = models()
    side = torch.cuda.Stream()
    big = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    for _ in range(3):
        with torch.cuda.stream(side):
            for _ in range(8):
                big = torch.tanh(big @ big * 1e-3)  # several ms of work first
            x = torch.full((32, 128), 0.5, device="cuda") + big[:32, :128] * 0
        with torch.cuda.stream(side):  # handed over while the side stream is still busy
            (p,) = gpu.run({"x": x}, outputs=["p"], device_outputs=True)
        side.synchronize()
        want = cpu.run({"x": np.full((32, 128), 0.5, np.float32)}, outputs="p")[0]
        np.testing.assert_allclose(torch.from_dlpack(p).cpu().numpy(), want, rtol=1e-4, atol=1e-5)


def test_cuda_tensor_to_cpu_model_names_the_input(cuda_ready):
    _, cpu = models()
    with pytest.raises(rlx.Error, match=r"input 'x' is in cuda memory \(device \d+\) but this graph was compiled for cpu"):
        cpu(x=torch.zeros(4, 128, device="cuda"))
