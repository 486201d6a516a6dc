"""rlx.conformance: the ONNX backend node cases (DIR/test_*/model.onnx with
test_data_set_0/{input,output}_<i>.pb), run with the same comparison as ``rlx conformance``
(floats: |got - want| <= 1e-4 + 1e-3 |want|, NaN equal to NaN; others exact).

Like the CLI, cases run out of this process by default: one worker process (a fresh Python
interpreter running ``_worker_main``) takes case after case over a pipe; a case that crashes
the library (a signal, an abort) or runs past the timeout takes only the worker down, becomes a
FAIL row naming the case and how the worker ended, and a new worker takes the next case.
``isolate=False`` runs the cases in this process instead."""
from __future__ import annotations

import glob
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from . import _rlx


@dataclass
class CaseResult:
    name: str
    status: str  # "PASS", "FAIL" or "UNSUPPORTED"
    detail: str = ""


# Element types compared by their bits, as ``rlx conformance`` does (one code per byte).
_BITWISE = {"f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz", "f8e8m0", "f4e2m1"}


def _compare_tensors(got, want) -> str:
    """rlx.Tensor outputs: the dtypes by rlx's names, then the values (floats widened to f32)."""
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.dtype in _BITWISE or got.dtype not in ("bf16", "f16", "f32", "f64"):
        return _compare(np.asarray(got.numpy()), np.asarray(want.numpy()))
    to = (lambda t: t.numpy()) if got.dtype == "f64" else (lambda t: t.to_float32())
    return _compare(to(got), to(want))


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
        # rlx.Tensors keep the element types NumPy has no name for (bf16, float8, int4, ...).
        feeds = {io["name"]: _rlx.load_onnx_tensor(os.path.join(data, f"input_{i}.pb"), as_tensor=True)
                 for i, io in enumerate(info["inputs"])}
        graph = _rlx.Graph.from_onnx(model_path, known_inputs=feeds)
        model = _rlx.compile(graph, device=device, num_threads=1)
        wants = [_rlx.load_onnx_tensor(os.path.join(data, f"output_{k}.pb"), as_tensor=True)
                 for k in range(len(info["outputs"]))]
        got = model.run({n: feeds[n] for n in model.input_names if n in feeds}, as_tensors=True)
    except _rlx.Error as e:
        return CaseResult(name, "UNSUPPORTED", str(e).splitlines()[0] if str(e) else "")
    if len(got) != len(wants):
        return CaseResult(name, "FAIL", f"{len(got)} outputs, expected {len(wants)}")
    for k, (g, w) in enumerate(zip(got, wants)):
        why = _compare_tensors(g, w)
        if why:
            return CaseResult(name, "FAIL", f"output {k} '{info['outputs'][k]['name']}': {why}")
    return CaseResult(name, "PASS")


def _worker_main() -> None:
    """The worker loop: reads "<device>\t<case dir>" lines on stdin and answers each with one
    JSON line [name, status, detail] on the original stdout. Whatever the library prints to
    stdout goes to stderr, so that it cannot corrupt the answers."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        device, case_dir = line.rstrip("\n").split("\t", 1)
        try:
            r = run_case(case_dir, device)
        except Exception as e:  # a Python-level failure of one case, not a crash
            r = CaseResult(os.path.basename(os.path.normpath(case_dir)), "FAIL", f"{type(e).__name__}: {e}")
        answers.write(json.dumps([r.name, r.status, r.detail]) + "\n")
        answers.flush()


# The worker's command line: this interpreter, importing this same rlx package.
_worker_command: Sequence[str] = (sys.executable, "-c", "from rlx.conformance import _worker_main; _worker_main()")


def _ended(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class _Worker:
    """One worker process and the bytes it has written but not yet been asked for."""

    def __init__(self) -> None:
        env = dict(os.environ)
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = package_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(list(_worker_command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.pending = b""
        self.answered = 0

    def ask(self, device: str, case_dir: str, timeout: float) -> Optional[CaseResult]:
        """The case's result; None when the worker died or timed out on it (then it is gone)."""
        name = os.path.basename(os.path.normpath(case_dir))
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(f"{device}\t{case_dir}\n".encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            return None
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None  # end of file: the worker died
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        self.answered += 1
        got_name, status, detail = json.loads(line)
        if got_name != name:
            raise _rlx.Error(f"rlx.conformance: internal: the worker answered for '{got_name}', asked '{name}'")
        return CaseResult(got_name, status, detail)

    def end(self) -> str:
        """Stops the worker (killing it if it still runs); how it ended."""
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                try:
                    f.close()
                except BrokenPipeError:
                    pass
        return _ended(code)


def _run_isolated(cases: List[str], device: str, timeout: float) -> List[CaseResult]:
    results: List[CaseResult] = []
    worker: Optional[_Worker] = None
    try:
        for case_dir in cases:
            if worker is None:
                worker = _Worker()
            start = time.monotonic()
            r = worker.ask(device, case_dir, timeout)
            if r is None:  # the case took the worker down, or hung
                timed_out = worker.proc.poll() is None and time.monotonic() - start >= timeout
                fresh = worker.answered == 0
                how = worker.end()
                code = worker.proc.returncode
                worker = None
                if fresh and not timed_out and code is not None and code > 0:
                    # A Python-level exit before any answer: the worker could not start (e.g. rlx
                    # does not import there), which every later case would repeat.
                    raise _rlx.Error(f"rlx.conformance: the worker process {how} before answering (its "
                                     f"stderr is above); command: {list(_worker_command)}")
                name = os.path.basename(os.path.normpath(case_dir))
                why = f"timed out after {timeout:g} s (worker killed)" if timed_out else f"the worker running it {how}"
                r = CaseResult(name, "FAIL", why)
            results.append(r)
    finally:
        if worker is not None:
            assert worker.proc.stdin is not None
            worker.proc.stdin.close()  # end of input: the worker's loop ends
            try:
                worker.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            worker.end()
    return results


def conformance(directory: str, device: str = "cpu", filter: Optional[str] = None, *, isolate: bool = True,
                timeout: float = 120.0) -> List[CaseResult]:
    """Runs every case ``DIR/test_*`` (those whose name contains `filter`) on `device`.

    isolate=True (default): in a worker process, so that a case that crashes or hangs (longer
    than `timeout` seconds) becomes a FAIL row naming it; isolate=False: in this process."""
    cases = sorted(d for d in glob.glob(os.path.join(directory, "test_*")) if os.path.isdir(d))
    if filter:
        cases = [d for d in cases if filter in os.path.basename(d)]
    if not cases:
        raise _rlx.Error(f"rlx.conformance: no test_* case folders in '{directory}'")
    if timeout <= 0:
        raise _rlx.Error(f"rlx.conformance: timeout must be positive, got {timeout}")
    if not isolate:
        return [run_case(d, device) for d in cases]
    return _run_isolated(cases, device, timeout)
