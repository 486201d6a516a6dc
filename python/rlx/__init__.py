"""rlx: an ML compiler and runtime, from Python.

    import numpy as np, rlx
    model = rlx.load("model.onnx", device="cpu")       # or graph JSON, or an rlx.Graph
    y = model(x=np.ones((1, 4), np.float32))            # NumPy in, NumPy out

Build graphs with :class:`rlx.Graph`; inspect how they run with :func:`rlx.check` and
:func:`rlx.pass_report`. Every error rlx reports is an :class:`rlx.Error` (a RuntimeError).
"""
from __future__ import annotations

import os as _os
from typing import Any, Iterable, Mapping, Optional, Union

from . import _rlx
from ._rlx import (  # noqa: F401  (re-exported)
    Error,
    Generator,
    Graph,
    Model,
    Tensor,
    Value,
    ValueInfo,
    compile,
    device_stats,
    devices,
    dtype_name,
    dtypes,
    enable_profile,
    from_dlpack,
    knobs,
    load_onnx_tensor,
    load_safetensors,
    onnx_info,
    numpy_dtype,
    pass_names,
    save_safetensors,
    take_profile,
)
from .reports import CheckReport, PassReport, check, pass_report  # noqa: F401
from .conformance import CaseResult, conformance  # noqa: F401

__version__ = _rlx.__version__

PathLike = Union[str, "_os.PathLike[str]"]


def _is_onnx(source: Any) -> bool:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return True
    return _os.fspath(source).lower().endswith(".onnx")


def load_graph(source: Union[PathLike, Graph, bytes], *, dims: Optional[Mapping[str, int]] = None,
               weights: Union[None, PathLike, Mapping[str, Any]] = None,
               known_inputs: Optional[Mapping[str, Any]] = None) -> Graph:
    """The rlx.Graph of `source`: an ``.onnx`` model, a graph JSON file, an rlx.Graph (copied), or
    the bytes of an ONNX model.

    `dims` binds symbolic dims ({"batch": 1}): at import for ONNX, by specialization for
    the others. `weights` sets param values: a safetensors path or a dict name -> array.
    `known_inputs` (ONNX) gives input values the importer needs at import time, such as a
    Reshape's shape fed as an input; runs must then feed the same values.
    """
    if known_inputs is not None and (isinstance(source, Graph) or not _is_onnx(source)):
        raise Error("rlx.load: known_inputs applies to ONNX models only")
    onnx_kw = {"dims": dict(dims) if dims else None, "known_inputs": dict(known_inputs) if known_inputs else None}
    if isinstance(source, Graph):
        g = source.copy()
        if dims:
            g = g.specialize(dict(dims))
    elif isinstance(source, (bytes, bytearray, memoryview)):
        g = Graph.from_onnx_bytes(bytes(source), **onnx_kw)
    else:
        path = _os.fspath(source)
        if not _os.path.exists(path):
            raise Error(f"rlx.load: '{path}' does not exist")
        lower = path.lower()
        if lower.endswith(".onnx"):
            g = Graph.from_onnx(path, **onnx_kw)
        elif lower.endswith(".safetensors"):
            raise Error(f"rlx.load: '{path}' holds only weights; build the graph with rlx.Graph "
                        "(or load its JSON/ONNX) and pass weights='" + path + "'")
        else:
            g = Graph.load_json(path)
            if dims:
                g = g.specialize(dict(dims))
    if weights is not None:
        values = weights if isinstance(weights, Mapping) else load_safetensors(_os.fspath(weights))
        for name, value in values.items():
            g.set_weight(name, value)
    return g


def load(source: Union[PathLike, Graph, bytes], device: str = "cpu", precision: str = "fp32", *,
         dims: Optional[Mapping[str, int]] = None,
         weights: Union[None, PathLike, Mapping[str, Any]] = None,
         known_inputs: Optional[Mapping[str, Any]] = None, num_threads: int = 0, optimize: bool = True,
         pass_report: bool = False,
         disabled_passes: Iterable[str] = (), knobs: Optional[Mapping[str, Any]] = None,
         max_signatures: int = 8) -> Model:
    """Loads and compiles a model for `device` ("cpu", "cuda", "vulkan", "webgpu").

    `source` is an ``.onnx`` file, a graph JSON file, an rlx.Graph or ONNX bytes; `weights` a safetensors
    file or dict of arrays for its params; `dims` and `known_inputs` as in :func:`load_graph`.
    `precision` ("fp32", "tf32", "fp16", "bf16") is the
    numeric policy of GPU backends (the CPU computes in the graph's dtypes). `pass_report`
    prints the optimizer's per-pass report to stderr; `knobs` sets tuning knobs by name
    (rlx.knobs() lists them). The GIL is released while compiling, and Ctrl-C interrupts.

    An ONNX model that cannot be imported with its symbolic dims (a Conv on a symbolic spatial
    dim, a Slice or Range sized by the sequence length, ...) is specialized per input-shape
    signature: each call takes the dims from its arrays, and the first call of each signature
    imports and compiles the model (the `max_signatures` most recent are kept).
    """
    if known_inputs is None and weights is None and not isinstance(source, Graph) and _is_onnx(source):
        if isinstance(source, (bytes, bytearray, memoryview)):
            src: Any = bytes(source)
        else:
            src = _os.fspath(source)
            if not _os.path.exists(src):
                raise Error(f"rlx.load: '{src}' does not exist")
        return _rlx._load_onnx(src, device=device, precision=precision, num_threads=num_threads,
                               optimize=optimize, pass_report=pass_report,
                               disabled_passes=list(disabled_passes), knobs=dict(knobs) if knobs else None,
                               dims=dict(dims) if dims else None, max_signatures=max_signatures)
    g = load_graph(source, dims=dims, weights=weights, known_inputs=known_inputs)
    return _rlx.compile(g, device=device, precision=precision, num_threads=num_threads,
                        optimize=optimize, pass_report=pass_report,
                        disabled_passes=list(disabled_passes), knobs=dict(knobs) if knobs else None)


__all__ = [
    "Error", "Generator", "Graph", "Model", "Tensor", "Value", "ValueInfo", "CheckReport", "PassReport", "CaseResult",
    "load", "load_graph", "compile", "check", "pass_report", "conformance", "devices", "dtypes",
    "dtype_name", "numpy_dtype", "from_dlpack", "device_stats", "enable_profile", "take_profile", "knobs", "pass_names",
    "load_safetensors", "save_safetensors", "load_onnx_tensor", "onnx_info",
]
