"""Builds the rlx extension (rlx._rlx) with this repository's CMake project and packages it with
python/rlx. Used by `pip install .` (pyproject.toml); see docs/python.md.

Environment:
  RLX_PIP_BUILD_DIR   CMake build folder (default: build/pip in the source tree; kept, so a
                      second install only relinks what changed)
  RLX_BUILD_JOBS      parallel build jobs (default: the number of CPUs)
  RLX_CMAKE_ARGS      extra CMake arguments, e.g. "-DRLX_CUDA=OFF -DRLX_VULKAN=OFF"
"""
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE = Path(__file__).parent.resolve()


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = Path(os.environ.get("RLX_PIP_BUILD_DIR", SOURCE / "build" / "pip")).resolve()
        jobs = os.environ.get("RLX_BUILD_JOBS", str(os.cpu_count() or 1))
        configure = ["cmake", "-S", str(SOURCE), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                     "-DRLX_BUILD_TESTS=OFF", "-DRLX_BUILD_BENCH=OFF", "-DRLX_PYTHON=ON",
                     f"-DPython3_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("RLX_CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "rlx_python", "-j", jobs])
        built = build_dir / "python" / "rlx" / Path(self.get_ext_filename(ext.name)).name
        if not built.exists():
            raise RuntimeError(f"the CMake build did not produce {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)


# setuptools' metadata folder (rlx.egg-info) goes under build/ (ignored), not the source root.
(SOURCE / "build").mkdir(exist_ok=True)

setup(
    options={"egg_info": {"egg_base": "build"}},
    packages=["rlx"],
    package_dir={"rlx": "python/rlx"},
    package_data={"rlx": ["*.pyi", "py.typed"]},
    ext_modules=[CMakeExtension("rlx._rlx")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
