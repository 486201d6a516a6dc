"""rlx.check and rlx.pass_report: how a graph runs on a device, as data and as the CLI's text."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

from . import _rlx


def _graph_of(source: Any, dims: Optional[Mapping[str, int]]) -> "_rlx.Graph":
    if isinstance(source, _rlx.Model):
        return source.graph
    from . import load_graph
    return load_graph(source, dims=dims)


class CheckReport:
    """Per op kind: how many nodes the device runs natively, decomposed, or cannot run.
    ``str()`` is the table ``rlx check`` prints (without its "graph:" line)."""

    def __init__(self, data: Dict[str, Any]):
        self.device: str = data["device"]
        self.rows: List[Dict[str, Any]] = data["rows"]
        self.ops_in: int = data["ops_in"]
        self.ops_after: int = data["ops_after"]
        self.native: int = data["native"]
        self.decomposed: int = data["decomposed"]
        self.unsupported: int = data["unsupported"]
        self.ok: bool = data["ok"]
        self.reason: str = data["reason"]

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        lines = [f"device: {self.device}", f"ops: {self.ops_in} in, {self.ops_after} after optimization", "",
                 f"{'family':<13}{'op kind':<28}{'native':>8}{'decomposed':>12}{'unsupported':>13}"]
        for r in self.rows:  # in the CLI's order (by kernel family)
            lines.append(f"{r['family']:<13}{r['op']:<28}{r['native']:>8}{r['decomposed']:>12}{r['unsupported']:>13}")
        lines.append(f"{'total':<41}{self.native:>8}{self.decomposed:>12}{self.unsupported:>13}")
        lines.append("")
        lines.append(f"ok: every node runs on {self.device}" if self.ok else f"not runnable: {self.reason}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"CheckReport(device={self.device!r}, ok={self.ok}, native={self.native}, "
                f"decomposed={self.decomposed}, unsupported={self.unsupported})")


def check(source: Any, device: Optional[str] = None, *, dims: Optional[Mapping[str, int]] = None,
          optimize: bool = True) -> CheckReport:
    """How each op kind of a graph runs on `device` after optimization (as ``rlx check``).

    `source`: an rlx.Model (default device: its own), rlx.Graph, or a graph/ONNX path. Needs
    no device at hand: it asks the backend's claims only.
    """
    if device is None:
        device = source.device if isinstance(source, _rlx.Model) else "cpu"
    return CheckReport(_rlx._check(_graph_of(source, dims), device, optimize))


class PassReport(list):
    """The optimizer's passes for a device: dicts of name, ms, nodes_before, nodes_after, skipped.
    ``str()`` gives the same table as ``rlx check --pass-report``."""

    def __init__(self, rows: Iterable[Dict[str, Any]], text: str):
        super().__init__(rows)
        self.text = text

    def __str__(self) -> str:
        return self.text


def pass_report(source: Any, device: str = "cpu", *, dims: Optional[Mapping[str, int]] = None,
                disabled_passes: Iterable[str] = ()) -> PassReport:
    """Runs the optimizer for `device` on a graph (rlx.Model, rlx.Graph or path) and reports each pass."""
    rows, text = _rlx._pass_report(_graph_of(source, dims), device, list(disabled_passes))
    return PassReport(rows, text)
