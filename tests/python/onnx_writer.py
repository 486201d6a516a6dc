"""A minimal ONNX ModelProto writer (protobuf wire format by hand), so the tests need no onnx
package. Covers what the test models use: float/int64 tensors, initializers, int/float/ints
attributes, inputs with static or symbolic dims.

Run as a script to (re)write tests/python/data/tiny_mlp.onnx, the committed model the tests
and examples/python/run_onnx.py use."""
from __future__ import annotations

import struct
import sys
from pathlib import Path
from typing import Iterable, List, Sequence, Tuple, Union

import numpy as np

FLOAT, INT64, FLOAT16 = 1, 7, 10  # TensorProto.DataType
_NP_TO_ONNX = {np.dtype(np.float32): FLOAT, np.dtype(np.int64): INT64, np.dtype(np.float16): FLOAT16}


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1  # negative int64 as two's complement
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, v: int) -> bytes:
    return _key(field, 0) + _varint(v)


def _bytes(field: int, data: Union[bytes, str]) -> bytes:
    if isinstance(data, str):
        data = data.encode()
    return _key(field, 2) + _varint(len(data)) + data


def _float(field: int, v: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", v)


def tensor(name: str, array: np.ndarray) -> bytes:
    """TensorProto with raw_data."""
    array = np.ascontiguousarray(array)
    out = b"".join(_int(1, d) for d in array.shape)
    out += _int(2, _NP_TO_ONNX[array.dtype]) + _bytes(8, name) + _bytes(9, array.tobytes())
    return out


def value_info(name: str, elem_type: int, dims: Sequence[Union[int, str]]) -> bytes:
    shape = b"".join(_bytes(1, _bytes(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    tensor_type = _int(1, elem_type) + _bytes(2, shape)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


def attr(name: str, value: Union[int, float, List[int]]) -> bytes:
    if isinstance(value, float):
        return _bytes(1, name) + _float(2, value) + _int(20, 1)
    if isinstance(value, list):
        return _bytes(1, name) + b"".join(_int(8, v) for v in value) + _int(20, 7)
    return _bytes(1, name) + _int(3, value) + _int(20, 2)


def node(op: str, inputs: Iterable[str], outputs: Iterable[str], **attrs) -> bytes:
    out = b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in outputs)
    out += _bytes(4, op) + b"".join(_bytes(5, attr(k, v)) for k, v in attrs.items())
    return out


def model(nodes: Sequence[bytes], inputs: Sequence[bytes], outputs: Sequence[bytes],
          initializers: Sequence[bytes] = (), opset: int = 17) -> bytes:
    graph = b"".join(_bytes(1, n) for n in nodes) + _bytes(2, "g")
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += b"".join(_bytes(11, i) for i in inputs) + b"".join(_bytes(12, o) for o in outputs)
    return _int(1, 8) + _bytes(2, "rlx-tests") + _bytes(7, graph) + _bytes(8, _bytes(1, "") + _int(2, opset))


def tiny_mlp() -> Tuple[bytes, dict]:
    """y = softmax(relu(x @ w + b)), h = relu(x @ w + b); x: f32[batch, 4]. Returns (bytes, weights)."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    nodes = [node("MatMul", ["x", "w"], ["xw"]), node("Add", ["xw", "b"], ["pre"]),
             node("Relu", ["pre"], ["h"]), node("Softmax", ["h"], ["y"], axis=-1)]
    data = model(nodes, [value_info("x", FLOAT, ["batch", 4])],
                 [value_info("h", FLOAT, ["batch", 3]), value_info("y", FLOAT, ["batch", 3])],
                 [tensor("w", w), tensor("b", b)])
    return data, {"w": w, "b": b}


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data" / "tiny_mlp.onnx"
    path.write_bytes(tiny_mlp()[0])
    print(f"wrote {path}")
