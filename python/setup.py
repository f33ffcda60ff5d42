"""Builds librlhf.so with the repository's CMake and puts it inside the package.

`pip install ./python` (from the repository root) runs this: it configures and builds the
`rlhf_shared` target of the parent directory's CMakeLists.txt into build-python/ (Release), and
copies build-python/librlhf.so into the wheel next to rlhf/__init__.py. The machine needs the C
build dependencies (scripts/setup-deps.sh installs them).

RLHF_BUILD_DIR=DIR uses (and, if it has none, builds) the library in DIR instead, e.g. the
`build/` that `make` made: nothing is compiled twice. A relative DIR is taken from the
repository root (pip runs this file from a directory of its own choosing).
"""

import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def build_library():
    """Returns the path of a built librlhf.so."""
    build_dir = os.path.join(ROOT, os.environ.get("RLHF_BUILD_DIR") or "build-python")
    lib = os.path.join(build_dir, "librlhf.so")
    if os.environ.get("RLHF_BUILD_DIR") and os.path.exists(lib):
        return lib
    if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")) or not os.path.exists(
            os.path.join(ROOT, "include", "rlhf.h")):
        raise SystemExit(
            f"rlhf: {ROOT} is not the rlhf.c repository (no CMakeLists.txt / include/rlhf.h): "
            "install with `pip install ./python` from a checkout, or set RLHF_BUILD_DIR to a "
            "build directory holding librlhf.so"
        )
    if shutil.which("cmake") is None:
        raise SystemExit("rlhf: building librlhf.so needs cmake (bash scripts/setup-deps.sh)")
    jobs = os.environ.get("RLHF_BUILD_JOBS", str(min(os.cpu_count() or 1, 4)))
    subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release"])
    subprocess.check_call(["cmake", "--build", build_dir, "--target", "rlhf_shared", "-j", jobs])
    return lib


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "rlhf", "librlhf.so")
        shutil.copyfile(build_library(), target)
        os.chmod(target, 0o755)


class BinaryDistribution(Distribution):
    """The wheel holds a compiled library: it is platform-specific."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
