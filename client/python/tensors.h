// Python objects as stagger tensors, for the binding: buffer-protocol
// objects (numpy), CUDA arrays (`__cuda_array_interface__`: CuPy, Numba,
// torch CUDA tensors) and DLPack producers (`__dlpack__`: torch tensors on
// CPU or CUDA, including bf16, JAX, ...). All without a copy; every array
// must be C-contiguous.
//
// Error reporting: a bad status raises stagger.Error (a RuntimeError) with
// .code ("NOT_FOUND", ...) and the status message.
#ifndef STAGGER_CLIENT_PYTHON_TENSORS_H_
#define STAGGER_CLIENT_PYTHON_TENSORS_H_

#include <pybind11/pybind11.h>

#include <vector>

#include "stagger/checkpointer.h"
#include "stagger/status.h"

namespace stagger::python {

namespace py = pybind11;

// The stagger.Error type (set once at module init).
py::object& ErrorType();
[[noreturn]] void Raise(const Status& s);
void Check(const Status& s);
template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(*r);
}

// What keeps registered arrays alive while the Checkpointer reads them:
// buffer views, DLPack capsules and CUDA arrays.
struct Held {
  std::vector<py::buffer_info> buffers;
  std::vector<py::object> objects;
};

// Registers every entry of `tensors` ({name: array}) with `ck` (after
// clearing earlier registrations); `writable` for load. `dtypes` ({name:
// "BF16", ...}) overrides an element type (same element size). `shards`
// ({name: (global_shape, global_offset)}) says which slice of a global
// tensor an array holds (TensorSpec::global_shape, global_offset); a name
// without an entry is a per-rank tensor. Raises stagger.Error
// (INVALID_ARGUMENT) for a shard entry naming no array or a malformed one.
void RegisterAll(Checkpointer& ck, const py::dict& tensors, bool writable,
                 const py::dict& dtypes, const py::dict& shards, Held* held);

}  // namespace stagger::python

#endif  // STAGGER_CLIENT_PYTHON_TENSORS_H_
