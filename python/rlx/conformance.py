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
    """Runs one ONNX node case directory."""
    name = os.path.basename(os.path.normpath(case_dir))
    data = os.path.join(case_dir, "test_data_set_0")
    try:
        inputs = [_rlx.load_onnx_tensor(p) for p in sorted(glob.glob(os.path.join(data, "input_*.pb")),
                                                            key=lambda p: int(p.rsplit("_", 1)[1][:-3]))]
        wants = [_rlx.load_onnx_tensor(p) for p in sorted(glob.glob(os.path.join(data, "output_*.pb")),
                                                          key=lambda p: int(p.rsplit("_", 1)[1][:-3]))]
    except _rlx.Error as e:
        return CaseResult(name, "FAIL", f"broken case: {e}")
    try:
        graph = _rlx.Graph.from_onnx(os.path.join(case_dir, "model.onnx"))
        model = _rlx.compile(graph, device=device)
        feeds = dict(zip(model.input_names, inputs))
        got = model.run(feeds)
    except _rlx.Error as e:
        return CaseResult(name, "UNSUPPORTED", str(e).splitlines()[0] if str(e) else "")
    if len(got) != len(wants):
        return CaseResult(name, "FAIL", f"{len(got)} outputs, expected {len(wants)}")
    for i, (g, w) in enumerate(zip(got, wants)):
        why = _compare(g, w)
        if why:
            return CaseResult(name, "FAIL", f"output {i}: {why}")
    return CaseResult(name, "PASS")


def conformance(directory: str, device: str = "cpu", filter: Optional[str] = None) -> List[CaseResult]:
    """Runs every case ``DIR/test_*`` (those whose name contains `filter`) on `device`."""
    cases = sorted(d for d in glob.glob(os.path.join(directory, "test_*")) if os.path.isdir(d))
    if filter:
        cases = [d for d in cases if filter in os.path.basename(d)]
    if not cases:
        raise _rlx.Error(f"rlx.conformance: no test_* case folders in '{directory}'")
    return [run_case(d, device) for d in cases]
