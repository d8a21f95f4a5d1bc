"""pip install ./python: builds anyep._C with the repository's CMake (-DANYEP_PYTHON=ON) and
packages it with the pure-Python packages anyep and deep_ep, the benchmark scripts of `anyep bench
ll|ht` (anyep/bench/) and the `anyep` command (anyep/cli.py). Metadata: pyproject.toml.

On a machine with torch and the CUDA toolkit, with the build seeing the installed torch:
    pip install --no-build-isolation ./python
The libfabric proxy path is built when CMake finds libfabric (pkg-config or the default paths; add
CMAKE_ARGS="-DCMAKE_PREFIX_PATH=<prefix>" for another place); ANYEP_REQUIRE_LIBFABRIC=1 makes a
build without it an error. The version comes from project(anyep VERSION ...) in ../CMakeLists.txt,
the one place it is written."""
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The benchmarks `anyep bench ll|ht` runs (anyep/cli.py), shipped as anyep/bench/<name>: the
# repository's bench/ holds the one copy of each.
BENCH_SCRIPTS = {"bench_ll.py": "bench/ll/bench_ll.py", "bench_ht.py": "bench/ht/bench_ht.py"}


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(anyep\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", f.read())
    if not m:
        raise RuntimeError(f"anyep: no 'project(anyep VERSION x.y.z)' in {ROOT}/CMakeLists.txt")
    return m.group(1)


def require_torch():
    """The extension is compiled against the torch this interpreter imports (not a declared
    dependency: see pyproject.toml)."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise RuntimeError(
            f"anyep: building anyep._C needs torch importable by {sys.executable} ({e}); install torch first, then "
            "pip install --no-build-isolation ./python (a venv made from another venv's python sees the BASE "
            "interpreter's site-packages: add a .pth file naming the directory that holds torch)") from e


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        require_torch()
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        args = ["cmake", "-S", ROOT, "-B", build_dir, "-DANYEP_PYTHON=ON", "-DANYEP_TESTS=OFF", "-DANYEP_BENCH=OFF",
                f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        configure = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(configure.stdout)
        if configure.returncode != 0:
            raise RuntimeError(f"anyep: CMake configure failed (exit {configure.returncode}); its output is above")
        # What was found, said where pip -v shows it (and checked when asked).
        # The summary line is "-- anyep: GPU=<cuda|hip|none> libfabric=<ON|OFF> ..." (CMakeLists.txt).
        summary = [line for line in configure.stdout.splitlines()
                   if line.startswith("-- anyep: ") and " libfabric=" in line]
        libfabric = bool(summary) and "libfabric=ON" in summary[-1]
        print(f"anyep setup.py: {summary[-1][3:] if summary else 'no configuration summary from CMake'}")
        print("anyep setup.py: libfabric proxy path " + ("built" if libfabric else
              "NOT built: CMake found no libfabric (install libfabric-dev, or CMAKE_ARGS=-DCMAKE_PREFIX_PATH=...)"))
        if not libfabric and os.environ.get("ANYEP_REQUIRE_LIBFABRIC", "") == "1":
            raise RuntimeError("anyep: ANYEP_REQUIRE_LIBFABRIC=1 but CMake found no libfabric")
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "anyep_python", "-j",
                               str(os.cpu_count() or 2)])
        built = os.path.join(build_dir, "python", "anyep")
        so = [f for f in os.listdir(built) if f.startswith("_C") and f.endswith(".so")]
        if not so:
            raise RuntimeError(f"anyep: the CMake build produced no _C module in {built}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy(os.path.join(built, so[0]), dest)
        # The version and build facts CMake wrote (python/CMakeLists.txt), next to the module.
        shutil.copy(os.path.join(built, "_build_info.py"), os.path.join(os.path.dirname(dest), "_build_info.py"))


class BuildPy(build_py):
    """The pure-Python packages, plus the benchmark scripts as anyep/bench/*.py (an installed package
    runs them without a source tree)."""

    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "anyep", "bench")
        os.makedirs(dest, exist_ok=True)
        for name, rel in BENCH_SCRIPTS.items():
            src = os.path.join(ROOT, rel)
            if not os.path.isfile(src):
                raise RuntimeError(f"anyep: the benchmark script {src} is missing (setup.py runs from the repository)")
            self.copy_file(src, os.path.join(dest, name))


setup(
    version=project_version(),
    packages=["anyep", "deep_ep"],
    package_dir={"": "."},
    ext_modules=[Extension("anyep._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPy},
)
