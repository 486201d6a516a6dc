// The extension module rlx._rlx: rlx::Error as rlx.Error (a RuntimeError with the same
// message), then the bindings of each part (see bindings.h). python/rlx/__init__.py is the
// package users import.
#include "bindings.h"

PYBIND11_MODULE(_rlx, m) {
  namespace py = pybind11;
  m.doc() = "rlx: an ML compiler and runtime (the C++ extension; import rlx).";
  // Translated where it is thrown: every rlx::Error reaching Python keeps its message.
  py::register_exception<rlx::Error>(m, "Error", PyExc_RuntimeError);
  rlx::python::register_dtypes(m);
  rlx::python::register_tensor(m);
  rlx::python::register_graph(m);
  rlx::python::register_model(m);
  rlx::python::register_tools(m);
  rlx::python::register_generate(m);
  m.attr("__version__") = "0.1.0";
}
