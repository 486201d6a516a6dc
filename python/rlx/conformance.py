"""rlx.conformance: the ONNX backend node cases (DIR/test_*/model.onnx with
test_data_set_0/{input,output}_<i>.pb), run in this process with the same comparison as
``rlx conformance`` (floats: |got - want| <= 1e-4 + 1e-3 |want|, NaN equal to NaN; others exact).
Unlike the CLI it does not fork: a case that crashes the library takes Python down with it."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from . import _rlx


@dataclass
class CaseResult:
    name: str
    status: str  # "PASS", "FAIL" or "UNSUPPORTED"
    detail: str = ""


def _compare(got: np.ndarray, want: np.ndarray) -> str:
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if got.dtype.kind == "f":
        a, b = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf
            ok = (a == b) | (np.abs(a - b) <= 1e-4 + 1e-3 * np.abs(b)) | (np.isnan(a) & np.isnan(b))
        if ok.all():
            return ""
        bad = np.flatnonzero(~ok.ravel())
        return f"{bad.size} of {a.size} elements off (first at flat index {bad[0]}: got {a.ravel()[bad[0]]}, expected {b.ravel()[bad[0]]})"
    if not np.array_equal(got, want):
        at = int(np.flatnonzero(got.ravel() != want.ravel())[0])
        return f"element {at} is {got.ravel()[at]}, expected {want.ravel()[at]}"
    return ""


def run_case(case_dir: str, device: str = "cpu") -> CaseResult:
    """Runs one ONNX node case directory as ``rlx conformance`` does: the inputs are also given
    to the importer as known values, only the inputs the compiled graph still reads are fed, and
    what rlx cannot import, store or run is UNSUPPORTED."""
    name = os.path.basename(os.path.normpath(case_dir))
    data = os.path.join(case_dir, "test_data_set_0")
    model_path = os.path.join(case_dir, "model.onnx")
    for f in [model_path] + [os.path.join(data, "output_0.pb")]:
        if not os.path.isfile(f):
            return CaseResult(name, "FAIL", f"broken case: no {os.path.relpath(f, case_dir)}")
    try:
        info = _rlx.onnx_info(model_path)
        for io in info["inputs"] + info["outputs"]:
            if "(" in io["type"] or io["type"] == "map":
                return CaseResult(name, "UNSUPPORTED", f"'{io['name']}' is a {io['type']} (only tensors are supported)")
        feeds = {io["name"]: _rlx.load_onnx_tensor(os.path.join(data, f"input_{i}.pb"))
                 for i, io in enumerate(info["inputs"])}
        graph = _rlx.Graph.from_onnx(model_path, known_inputs=feeds)
        model = _rlx.compile(graph, device=device, num_threads=1)
        wants = [_rlx.load_onnx_tensor(os.path.join(data, f"output_{k}.pb")) for k in range(len(info["outputs"]))]
        got = model.run({n: feeds[n] for n in model.input_names if n in feeds})
    except _rlx.Error as e:
        return CaseResult(name, "UNSUPPORTED", str(e).splitlines()[0] if str(e) else "")
    if len(got) != len(wants):
        return CaseResult(name, "FAIL", f"{len(got)} outputs, expected {len(wants)}")
    for k, (g, w) in enumerate(zip(got, wants)):
        why = _compare(g, w)
        if why:
            return CaseResult(name, "FAIL", f"output {k} '{info['outputs'][k]['name']}': {why}")
    return CaseResult(name, "PASS")


def conformance(directory: str, device: str = "cpu", filter: Optional[str] = None) -> List[CaseResult]:
    """Runs every case ``DIR/test_*`` (those whose name contains `filter`) on `device`."""
    cases = sorted(d for d in glob.glob(os.path.join(directory, "test_*")) if os.path.isdir(d))
    if filter:
        cases = [d for d in cases if filter in os.path.basename(d)]
    if not cases:
        raise _rlx.Error(f"rlx.conformance: no test_* case folders in '{directory}'")
    return [run_case(d, device) for d in cases]
