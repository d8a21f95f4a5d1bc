"""Prints torch's C++ include dirs, library dir and C++ ABI flag for python/CMakeLists.txt."""
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
