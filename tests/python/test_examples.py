"""examples/python run and report what they should (the package from this interpreter's path)."""
import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"


def run(script, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_run_onnx_example():
    out = run("run_onnx.py", "--dim", "batch=3")
    assert "input  x: f32[batch,4]" in out
    assert re.search(r"^y: float32\[3, 3\] mean=0\.333333$", out, re.M)  # softmax rows sum to 1
    assert "ok: every node runs on cpu" in out


def test_build_graph_example(tmp_path):
    out = run("build_graph.py", str(tmp_path / "block.json"))
    err = float(re.search(r"max \|rlx - numpy\| = (\S+)", out).group(1))
    assert err < 1e-4
    assert (tmp_path / "block.json").exists()
