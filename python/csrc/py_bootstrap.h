// anyep/python/csrc/py_bootstrap.h — a transport::Bootstrap over a Python `allgather(bytes) ->
// list[bytes]` (the Buffer's torch.distributed group or mpi4py comm): the proxy's collective
// set-up runs through it, on the calling thread, holding the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/bootstrap/bootstrap.h"

namespace anyep::ext {

inline std::unique_ptr<transport::Bootstrap> make_py_bootstrap(int rank, int size, pybind11::object allgather) {
  namespace py = pybind11;
  return transport::make_callback_bootstrap(
      static_cast<uint32_t>(rank), static_cast<uint32_t>(size), [allgather](const std::vector<uint8_t>& mine) {
        const py::list got(allgather(py::bytes(reinterpret_cast<const char*>(mine.data()), mine.size())));
        std::vector<std::vector<uint8_t>> all;
        for (const auto& item : got) {
          const std::string b = item.cast<std::string>();
          all.emplace_back(b.begin(), b.end());
        }
        return all;
      });
}

}  // namespace anyep::ext
