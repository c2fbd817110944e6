"""`pip install .`: builds the extension module nanovllm._core with CMake (python/CMakeLists.txt) and packages
it with python/nanovllm. The CUDA backend is built when nvcc is found, as in the C++ build (CMake decides).

Environment (optional):
  NANOVLLM_BUILD_DIR  a CMake build tree to build in and reuse (default: build/python-<cpu|cuda>); pointing it
                      at the tree scripts/run_tests.sh made (build/cpu, build/cuda) rebuilds nothing but the module
  NANOVLLM_CMAKE_ARGS extra CMake arguments, e.g. "-DCMAKE_CUDA_ARCHITECTURES=90a"
  NANOVLLM_BUILD_JOBS parallel build jobs (default: the CPU count)
"""

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def cuda_path_env() -> dict:
    """PATH with /usr/local/cuda/bin when nvcc is there but not on PATH (what scripts/run_tests.sh does)."""
    env = dict(os.environ)
    if shutil.which("nvcc") is None and Path("/usr/local/cuda/bin/nvcc").exists():
        env["PATH"] = env.get("PATH", "") + os.pathsep + "/usr/local/cuda/bin"
    return env


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        env = cuda_path_env()
        has_nvcc = shutil.which("nvcc", path=env["PATH"]) is not None
        build_dir = Path(os.environ.get("NANOVLLM_BUILD_DIR") or ROOT / "build" / ("python-cuda" if has_nvcc else "python-cpu"))
        args = [f"-DPython_EXECUTABLE={sys.executable}", "-DNANOVLLM_PYTHON=ON"]
        if not (build_dir / "CMakeCache.txt").exists():
            args += ["-DCMAKE_BUILD_TYPE=Release", "-DNANOVLLM_BUILD_TESTS=OFF"]
            if shutil.which("ninja"):
                args += ["-G", "Ninja"]
        try:  # pybind11 from PyPI (isolated builds); Debian's pybind11-dev is found by CMake itself
            import pybind11

            args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        args += shlex.split(os.environ.get("NANOVLLM_CMAKE_ARGS", ""))
        jobs = os.environ.get("NANOVLLM_BUILD_JOBS") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), *args], check=True, env=env)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_core", "-j", jobs], check=True, env=env)
        built = build_dir / "python" / "nanovllm" / ("_core" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not built.exists():
            raise RuntimeError(f"{built} is missing after the build")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)


setup(ext_modules=[Extension("nanovllm._core", sources=[])], cmdclass={"build_ext": CMakeBuild})
