// module.cpp: kvlab._kvlab, the extension module of the kvlab Python package.
//
//   _kvlab.formats   bit-exact encode / decode of the number formats (host arrays)
//   _kvlab.ref       the CPU reference (host arrays): decode, append, quantize, DSV4 ops
//   _kvlab.gpu       the GPU kernels (CUDA arrays; only in a build with CUDA), and gpu/bench's
//                    timing harness (bench.cpp: the sweep's timer, callable in any process)
// The Python modules kvlab.formats / kvlab.ref / kvlab.ops wrap these with defaults, output
// allocation by the caller's array library and stream selection; this module only checks
// arrays, builds kvlab's argument structs and calls kvlab. Errors: kvlab::InvalidArgument ->
// kvlab.InvalidArgument (a ValueError), kvlab::Unsupported -> kvlab.Unsupported (a
// NotImplementedError), any other kvlab::Error (CUDA errors included) -> kvlab.Error (a
// RuntimeError), each with kvlab's message.
#include <nanobind/nanobind.h>

#include "reference/core/error.h"

namespace nb = nanobind;

namespace kvlab::py {
void bind_formats(nb::module_& m);
void bind_ref(nb::module_& m);
void bind_dsv4_ref(nb::module_& m);
#if KVLAB_HAVE_CUDA
void bind_gpu(nb::module_& m);
void bind_dsv4_gpu(nb::module_& m);
#endif
}  // namespace kvlab::py

NB_MODULE(_kvlab, m) {
  m.doc() = "kvlab's C++ (reference, formats, GPU kernels) for the kvlab Python package";
  // Most general first: nanobind tries the translators registered last first.
  nb::exception<kvlab::Error>(m, "Error", PyExc_RuntimeError);
  nb::exception<kvlab::InvalidArgument>(m, "InvalidArgument", PyExc_ValueError);
  nb::exception<kvlab::Unsupported>(m, "Unsupported", PyExc_NotImplementedError);
#if KVLAB_HAVE_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
  nb::module_ formats = m.def_submodule("formats", "number formats (host arrays)");
  kvlab::py::bind_formats(formats);
  nb::module_ ref = m.def_submodule("ref", "the CPU reference (host arrays)");
  kvlab::py::bind_ref(ref);
  kvlab::py::bind_dsv4_ref(ref);
#if KVLAB_HAVE_CUDA
  nb::module_ gpu = m.def_submodule("gpu", "the GPU kernels (CUDA arrays)");
  kvlab::py::bind_gpu(gpu);
  kvlab::py::bind_dsv4_gpu(gpu);
#endif
}
