"""Prints, one per line, what python/CMakeLists.txt needs from the installed torch: include dirs
(';'-separated), the library dir, the C++ ABI flag, and the pybind11 ABI defines torch was built
with (the same ones torch.utils.cpp_extension passes, so this module shares torch's pybind11
internals)."""
import torch
import torch.utils.cpp_extension as ext

try:
    incs = ext.include_paths(device_type="cuda")
    libs = ext.library_paths(device_type="cuda")
except TypeError:  # older torch: a `cuda` flag instead of device_type
    incs = ext.include_paths(cuda=True)
    libs = ext.library_paths(cuda=True)
print(";".join(incs))
print(libs[0])
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
defs = []
for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
    value = getattr(torch._C, f"_PYBIND11_{name}", None)
    if value is not None:
        defs.append(f'PYBIND11_{name}="{value}"')
print(";".join(defs) if defs else "ANYEP_NO_PYBIND11_ABI_DEFINES=1")
