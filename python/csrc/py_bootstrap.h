// anyep/python/csrc/py_bootstrap.h — connection records as Python bytes, and a
// transport::Bootstrap over a Python `allgather(bytes) ->
// list[bytes]` (the Buffer's torch.distributed group or mpi4py comm): the proxy's collective
// set-up runs through it, on the calling thread, holding the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/bootstrap/bootstrap.h"

namespace anyep::ext {

// A connection record as Python bytes, and every rank's records (gathered as bytes) back.
inline pybind11::bytes to_py_bytes(const std::vector<uint8_t>& v) {
  return pybind11::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}
inline std::vector<std::vector<uint8_t>> from_py_records(const std::vector<std::string>& records) {
  std::vector<std::vector<uint8_t>> v;
  for (const auto& s : records) v.emplace_back(s.begin(), s.end());
  return v;
}

inline std::unique_ptr<transport::Bootstrap> make_py_bootstrap(int rank, int size, pybind11::object allgather) {
  namespace py = pybind11;
  return transport::make_callback_bootstrap(static_cast<uint32_t>(rank), static_cast<uint32_t>(size),
                                            [allgather](const std::vector<uint8_t>& mine) {
                                              const py::list got(allgather(to_py_bytes(mine)));
                                              std::vector<std::vector<uint8_t>> all;
                                              for (const auto& item : got) {
                                                const std::string b = item.cast<std::string>();
                                                all.emplace_back(b.begin(), b.end());
                                              }
                                              return all;
                                            });
}

}  // namespace anyep::ext
