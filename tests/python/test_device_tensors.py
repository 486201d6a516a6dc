"""Device tensors through DLPack without a GPU: a CUDA DLPack tensor made here with ctypes (its
pointer is never dereferenced) is imported as an rlx.Tensor in device memory, and everything that
would read it on the host, or hand it to a device it is not on, is an rlx.Error (or a BufferError
for the buffer protocol). The GPU data path with PyTorch is test_cuda_dlpack.py."""
import ctypes
import gc

import numpy as np
import pytest

import rlx

KDL_CPU, KDL_CUDA = 1, 2
FAKE_PTR = 0x7F0000001000  # never dereferenced


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype = ctypes.c_void_p
_capsule_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]


class FakeCudaTensor:
    """A DLPack producer of an f32 tensor in "CUDA memory" (device `device_type`), recording the
    stream it was asked for and whether the consumer called its deleter."""

    def __init__(self, shape, strides=None, device_type=KDL_CUDA, device_id=0):
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        self.device = (device_type, device_id)
        self.deleted = False
        self.streams = []

        def deleter(_):
            self.deleted = True

        self._deleter = DELETER(deleter)  # kept alive with the producer
        self.managed = DLManagedTensor()
        dl = self.managed.dl_tensor
        dl.data = FAKE_PTR
        dl.device = DLDevice(device_type, device_id)
        dl.ndim = len(shape)
        dl.dtype = DLDataType(2, 32, 1)  # kDLFloat, 32 bits
        dl.shape = self.shape
        dl.strides = self.strides
        dl.byte_offset = 0
        self.managed.deleter = self._deleter

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)


def exported(capsule):
    """The DLTensor of a capsule rlx exported (data pointer, device)."""
    m = DLManagedTensor.from_address(_capsule_ptr(capsule, b"dltensor"))
    return m.dl_tensor.data, (m.dl_tensor.device.device_type, m.dl_tensor.device.device_id)


def test_cuda_dlpack_import_stays_on_the_device():
    src = FakeCudaTensor([2, 3], device_id=1)
    t = rlx.from_dlpack(src)
    assert src.streams == [1], "the producer is asked for its tensor on the legacy default stream"
    assert (t.device, t.device_ordinal, t.dtype, t.shape) == ("cuda", 1, "f32", (2, 3))
    assert t.__dlpack_device__() == (KDL_CUDA, 1)
    assert "device='cuda:1'" in repr(t)
    # Exported again without a copy: the same device pointer (stream -1: no synchronization;
    # None and 1 name the legacy default stream, which the tensor is already ordered on).
    for stream in (-1, None, 1):
        assert exported(t.__dlpack__(stream=stream)) == (FAKE_PTR, (KDL_CUDA, 1))
    del t
    gc.collect()
    assert src.deleted, "rlx calls the producer's deleter when the tensor is gone"


def test_host_access_to_a_device_tensor_is_an_error():
    t = rlx.from_dlpack(FakeCudaTensor([2, 3]))
    with pytest.raises(rlx.Error, match=r"f32\[2,3\] on cuda:0: the tensor is in device memory; copy it with to_host"):
        t.numpy()
    with pytest.raises(rlx.Error, match="in device memory"):
        np.asarray(t)
    with pytest.raises(BufferError, match=r"f32\[2,3\] on cuda:0 is in device memory; copy it with to_host"):
        memoryview(t)
    with pytest.raises(rlx.Error, match=r"Tensor::cast: the tensor f32\[2,3\] is in cuda memory \(device 0\)"):
        t.astype("f16")
    with pytest.raises(rlx.Error, match="is in cuda memory"):
        t.to_float32()
    with pytest.raises(rlx.Error, match="Tensor::clone: the tensor f32\\[2,3\\] is in cuda memory"):
        rlx.Tensor(t)
    # An exported device tensor goes nowhere else than its device, and is not copied.
    with pytest.raises(rlx.Error, match=r"on DLPack device \(2, 0\); it cannot be exported to \(1, 0\)"):
        t.__dlpack__(dl_device=(KDL_CPU, 0))
    with pytest.raises(rlx.Error, match="copy=True is not supported for CUDA tensors"):
        t.__dlpack__(copy=True)
    with pytest.raises(rlx.Error, match="stream 0 is ambiguous"):
        t.__dlpack__(stream=0)
    with pytest.raises(rlx.Error, match="must be an int or None"):
        t.__dlpack__(stream="default")


def test_device_work_without_a_gpu_says_why():
    if "cuda" not in rlx.devices():
        pytest.skip("this build has no CUDA backend")
    try:
        rlx.compile(add_graph(), device="cuda")
        pytest.skip("a CUDA device is present (test_cuda_dlpack.py covers it)")
    except rlx.Error as e:
        assert "no CUDA device" in str(e)
    t = rlx.from_dlpack(FakeCudaTensor([2, 3]))
    with pytest.raises(rlx.Error, match="no CUDA device"):
        t.to_host()
    with pytest.raises(rlx.Error, match="no CUDA device"):
        t.__dlpack__(stream=2)  # another stream than the producer's: needs the device to order them


def test_bad_cuda_capsules_are_errors():
    with pytest.raises(rlx.Error, match=r"strided CUDA tensor f32\[2,3\] \(strides \[1,2\] elements\).*contiguous"):
        rlx.from_dlpack(FakeCudaTensor([2, 3], strides=[1, 2]))
    with pytest.raises(rlx.Error, match="DLPack device type 8; rlx takes host \\(1\\) and CUDA \\(2\\) tensors"):
        rlx.from_dlpack(FakeCudaTensor([2, 3], device_type=8))
    src = FakeCudaTensor([4])
    capsule = src.__dlpack__()
    t = rlx.from_dlpack(capsule)  # a bare capsule: no producer stream known
    assert (t.device, t.shape) == ("cuda", (4,))
    with pytest.raises(rlx.Error, match="not an unconsumed DLPack capsule"):
        rlx.from_dlpack(capsule)


def add_graph():
    g = rlx.Graph()
    x = g.input("x", [2, 3])
    g.output(x + g.param("w", [2, 3]), "y")
    return g


def test_cpu_model_refuses_device_tensors():
    model = rlx.compile(add_graph())
    model.set_param("w", np.ones((2, 3), np.float32))
    fake = FakeCudaTensor([2, 3])
    with pytest.raises(rlx.Error, match=r"input 'x' is in cuda memory \(device 0\) but this graph was compiled for "
                                        r"cpu; copy it to the host first"):
        model(x=fake)
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(rlx.Error, match="device outputs were asked for, but this graph was compiled for cpu"):
        model.run({"x": x}, device_outputs=True)
    with pytest.raises(rlx.Error, match="device outputs were asked for"):
        model.run({"x": x}, out=[rlx.from_dlpack(FakeCudaTensor([2, 3]))])
    with pytest.raises(rlx.Error, match="out must be a list of device tensors"):
        model.run({"x": x}, out="y")
    with pytest.raises(rlx.Error, match=r"out\[0\] is 3; it must be an rlx.Tensor or a DLPack tensor"):
        model.run({"x": x}, out=[3])
    with pytest.raises(rlx.Error, match="params are copied from host tensors"):
        model.set_param("w", FakeCudaTensor([2, 3]))
    np.testing.assert_array_equal(model(x=x), np.ones((2, 3), np.float32))  # still runs


def test_device_stats_counts():
    s = rlx.device_stats()
    assert set(s) == {"uploads", "upload_bytes", "downloads", "download_bytes", "device_copies",
                      "device_copy_bytes", "flag_reads", "param_uploads"}
    assert all(isinstance(v, int) and v >= 0 for v in s.values())
