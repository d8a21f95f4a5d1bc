// anyep/python/csrc/ht_ext.h — torch bindings of the high-throughput runtime (anyep._C.HTBuffer).
#pragma once

#include <pybind11/pybind11.h>

namespace anyep::ext {

// Adds HTBuffer and ht_size_hint to the module.
void register_ht(pybind11::module_& m);

}  // namespace anyep::ext
