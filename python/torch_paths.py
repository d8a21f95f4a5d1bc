"""Prints what python/CMakeLists.txt needs from the installed torch, one KEY=value line each:
INC (include dirs, ';'-separated), LIBDIR, ABI (the C++11 ABI flag), DEFS (the pybind11 ABI
defines torch was built with, ';'-separated, as torch.utils.cpp_extension passes them so this
module shares torch's pybind11 internals) and CXXSTD (the C++ standard cpp_extension compiles
extensions with for this torch: 20 if it passes -std=c++20, else 17)."""
import inspect

import torch
import torch.utils.cpp_extension as ext

try:
    incs = ext.include_paths(device_type="cuda")
    libs = ext.library_paths(device_type="cuda")
except TypeError:  # older torch: a `cuda` flag instead of device_type
    incs = ext.include_paths(cuda=True)
    libs = ext.library_paths(cuda=True)
defs = []
for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
    value = getattr(torch._C, f"_PYBIND11_{name}", None)
    if value is not None:
        defs.append(f'PYBIND11_{name}="{value}"')
try:
    std = 20 if "-std=c++20" in inspect.getsource(ext) else 17
except (OSError, TypeError):
    std = 17
print("INC=" + ";".join(incs))
print("LIBDIR=" + libs[0])
print("ABI=" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))
print("DEFS=" + ";".join(defs))
print("CXXSTD=" + str(std))
