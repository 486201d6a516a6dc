"""python/rlx/_rlx.pyi names exactly what the extension has (classes, functions, methods)."""
import ast
from pathlib import Path

import rlx
from rlx import _rlx

STUB = Path(__file__).resolve().parents[2] / "python" / "rlx" / "_rlx.pyi"
TYPE_ALIASES = {"Dim", "DTypeLike", "ArrayLike", "Operand"}


def stub_names():
    tree = ast.parse(STUB.read_text())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            top.add(node.name)
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            top.add(node.name)
        elif isinstance(node, (ast.AnnAssign, ast.Assign)):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            top.add(target.id)
    return top - TYPE_ALIASES, members


def test_stub_lists_every_module_name():
    top, _ = stub_names()
    actual = {n for n in dir(_rlx) if not n.startswith("__") or n == "__version__"}
    assert top == actual


def test_stub_lists_every_method():
    _, members = stub_names()
    for cls, names in members.items():
        actual = {n for n in vars(getattr(_rlx, cls)) if not n.startswith("_")}
        public_stub = {n for n in names if not n.startswith("_")}
        assert public_stub == actual, cls


def test_package_exports_exist():
    for name in rlx.__all__:
        assert hasattr(rlx, name), name
