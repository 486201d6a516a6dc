"""Fixtures of the rlx Python tests. ctest runs them with PYTHONPATH=<build>/python and
RLX_CLI=<build>/rlx (tests/python is registered by python/CMakeLists.txt)."""
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # onnx_writer


@pytest.fixture(scope="session")
def tiny_onnx() -> Path:
    return HERE / "data" / "tiny_mlp.onnx"


@pytest.fixture(scope="session")
def rlx_cli() -> str:
    cli = os.environ.get("RLX_CLI") or str(HERE.parents[1] / "build" / "release" / "rlx")
    if not os.path.exists(cli):
        pytest.skip(f"no rlx CLI at {cli} (set RLX_CLI)")
    return cli
