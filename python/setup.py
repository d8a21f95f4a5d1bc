"""pip install ./python  (on a machine with torch and the CUDA toolkit; use --no-build-isolation
so the build sees the installed torch). Builds anyep._C with the repository's CMake
(-DANYEP_PYTHON=ON) and packages it with the pure-Python packages anyep and deep_ep."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        args = ["cmake", "-S", ROOT, "-B", build_dir, "-DANYEP_PYTHON=ON", "-DANYEP_TESTS=OFF", "-DANYEP_BENCH=OFF",
                "-DANYEP_LIBFABRIC=OFF", f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        subprocess.check_call(args)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "anyep_python", "-j",
                               str(os.cpu_count() or 2)])
        built = os.path.join(build_dir, "python", "anyep")
        so = [f for f in os.listdir(built) if f.startswith("_C") and f.endswith(".so")]
        if not so:
            raise RuntimeError(f"anyep: the CMake build produced no _C module in {built}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy(os.path.join(built, so[0]), dest)


setup(
    name="anyep",
    version="0.1.0",
    description="Portable expert-parallel communication (DeepEP-compatible Buffer)",
    packages=["anyep", "deep_ep"],
    package_dir={"": "."},
    ext_modules=[Extension("anyep._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
)
