// The Python binding: stagger._stagger, re-exported by stagger/__init__.py.
//
//   ck = stagger.Checkpointer(servers="embedded:/tmp/c", job="j", rank=0,
//                             world_size=1)
//   h = ck.save({"w": numpy_array}, step=5); h.wait(); h.stats()
//   ck.load({"w": out_array}, step="latest")  -> step loaded
//   ck.steps()                                -> [complete steps]
//
// Arrays travel through the buffer protocol without a copy; they must be
// C-contiguous (and writable for load). A bad status raises stagger.Error
// with .code (e.g. "NOT_FOUND") and the status message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "client/cuda/cuda_copy.h"
#include "format/names.h"
#include "stagger/checkpointer.h"

namespace py = pybind11;

namespace stagger {
namespace {

py::object& ErrorType() {
  static py::object* type = new py::object();
  return *type;
}

[[noreturn]] void Raise(const Status& s) {
  std::string code = absl::StatusCodeToString(s.code());
  py::object e =
      ErrorType()(absl::StrCat(code, ": ", std::string(s.message())));
  e.attr("code") = code;
  PyErr_SetObject(ErrorType().ptr(), e.ptr());
  throw py::error_already_set();
}

template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(*r);
}
void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

// Maps a buffer's struct format and item size to a stagger dtype.
Result<std::string> DtypeOf(const py::buffer_info& b, const std::string& name) {
  std::string f = b.format;
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@'))
    f = f.substr(1);
  if (f == "f" && b.itemsize == 4) return std::string("F32");
  if (f == "d" && b.itemsize == 8) return std::string("F64");
  if (f == "e" && b.itemsize == 2) return std::string("F16");
  if (f == "?" && b.itemsize == 1) return std::string("BOOL");
  static const char* kSigned[] = {nullptr, "I8",    "I16",   nullptr, "I32",
                                  nullptr, nullptr, nullptr, "I64"};
  static const char* kUnsigned[] = {nullptr, "U8",    "U16",   nullptr, "U32",
                                    nullptr, nullptr, nullptr, "U64"};
  if (f.size() == 1 && b.itemsize <= 8) {
    if (std::string("bhilq").find(f[0]) != std::string::npos &&
        kSigned[b.itemsize]) {
      return std::string(kSigned[b.itemsize]);
    }
    if (std::string("BHILQ").find(f[0]) != std::string::npos &&
        kUnsigned[b.itemsize]) {
      return std::string(kUnsigned[b.itemsize]);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", name, "' has an unsupported element format '",
                   b.format, "' (itemsize ", b.itemsize, ")"));
}

// Maps a __cuda_array_interface__ typestr ("<f4", "|u1", ...) to a dtype.
Result<std::string> DtypeOfTypestr(const std::string& t,
                                   const std::string& name) {
  static const std::pair<const char*, const char*> kMap[] = {
      {"f8", "F64"}, {"f4", "F32"}, {"f2", "F16"}, {"i8", "I64"},
      {"i4", "I32"}, {"i2", "I16"}, {"i1", "I8"},  {"u8", "U64"},
      {"u4", "U32"}, {"u2", "U16"}, {"u1", "U8"},  {"b1", "BOOL"}};
  if (t.size() == 3 && t[0] != '>') {
    for (const auto& [k, v] : kMap) {
      if (t.compare(1, 2, k) == 0) return std::string(v);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor '", name, "' has an unsupported CUDA typestr '", t, "'"));
}

// A CUDA array (anything with __cuda_array_interface__: CuPy, Numba, torch
// CUDA tensors) as a TensorSpec; C-contiguous only.
TensorSpec CudaSpec(const std::string& name, const py::object& obj,
                    const py::dict& dtypes) {
  py::dict cai = obj.attr("__cuda_array_interface__");
  TensorSpec spec;
  spec.name = name;
  for (auto d : py::tuple(cai["shape"]))
    spec.shape.push_back(d.cast<int64_t>());
  std::string typestr = py::str(cai["typestr"]);
  spec.dtype = dtypes.contains(py::str(name))
                   ? std::string(py::str(dtypes[py::str(name)]))
                   : Check(DtypeOfTypestr(typestr, name));
  if (cai.contains("strides") && !cai["strides"].is_none()) {
    int64_t expect = std::stoi(typestr.substr(2));
    py::tuple strides = cai["strides"];
    for (size_t d = spec.shape.size(); d-- > 0;) {
      if (spec.shape[d] > 1 && strides[d].cast<int64_t>() != expect) {
        Raise(absl::InvalidArgumentError(
            absl::StrCat("tensor '", name, "' is not C-contiguous")));
      }
      expect *= spec.shape[d];
    }
  }
  uintptr_t ptr = py::tuple(cai["data"])[0].cast<uintptr_t>();
  spec.data = reinterpret_cast<void*>(ptr);
  spec.device = Device::kCuda;
  spec.device_index = ptr ? Check(client::CudaPointerDevice(spec.data)) : 0;
  return spec;
}

// Registers every entry of `tensors` ({name: buffer}); keeps the buffers in
// `held` while the Checkpointer uses them.
void RegisterAll(Checkpointer& ck, const py::dict& tensors, bool writable,
                 const py::dict& dtypes, std::vector<py::buffer_info>* held) {
  ck.ClearRegistrations();
  for (auto item : tensors) {
    std::string name = py::str(item.first);
    if (py::hasattr(item.second, "__cuda_array_interface__")) {
      Check(ck.Register(CudaSpec(
          name, py::reinterpret_borrow<py::object>(item.second), dtypes)));
      continue;
    }
    py::buffer buf = py::reinterpret_borrow<py::object>(item.second);
    py::buffer_info info = buf.request(writable);
    // C-contiguity check: strides must be those of a row-major array.
    py::ssize_t expect = info.itemsize;
    for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
      if (info.shape[d] > 1 && info.strides[d] != expect) {
        Raise(absl::InvalidArgumentError(
            absl::StrCat("tensor '", name, "' is not C-contiguous")));
      }
      expect *= info.shape[d];
    }
    TensorSpec spec;
    spec.name = name;
    if (dtypes.contains(item.first)) {
      spec.dtype = py::str(dtypes[item.first]);
      auto esize = format::DtypeSize(spec.dtype);
      if (!esize.ok()) {
        Raise(WithContext(esize.status(), absl::StrCat("tensor '", name, "'")));
      }
      if (static_cast<py::ssize_t>(*esize) != info.itemsize) {
        Raise(absl::InvalidArgumentError(absl::StrCat(
            "tensor '", name, "': dtype ", spec.dtype, " has ", *esize,
            "-byte elements but the array's are ", info.itemsize,
            " bytes; pass a view with matching element size")));
      }
    } else {
      spec.dtype = Check(DtypeOf(info, name));
    }
    spec.shape.assign(info.shape.begin(), info.shape.end());
    spec.data = info.ptr;
    Check(ck.Register(spec));
    held->push_back(std::move(info));
  }
}

int64_t ParseStep(const py::object& step) {
  if (py::isinstance<py::str>(step)) {
    if (step.cast<std::string>() == "latest") return kLatestStep;
    Raise(absl::InvalidArgumentError("step must be an int >= 0 or \"latest\""));
  }
  int64_t s = step.cast<int64_t>();
  if (s < 0) {
    Raise(
        absl::InvalidArgumentError(absl::StrCat("step must be >= 0, got ", s)));
  }
  return s;
}

struct PySaveHandle {
  SaveHandle handle;
  std::shared_ptr<std::vector<py::buffer_info>> held;
};

}  // namespace
}  // namespace stagger

PYBIND11_MODULE(_stagger, m) {
  using namespace stagger;
  m.doc() = "stagger: checkpoints for deep-learning training";
  ErrorType() = py::reinterpret_steal<py::object>(
      PyErr_NewException("stagger.Error", PyExc_RuntimeError, nullptr));
  m.attr("Error") = ErrorType();

  py::class_<PySaveHandle>(m, "SaveHandle")
      .def("wait",
           [](PySaveHandle& h) {
             Status s;
             {
               py::gil_scoped_release release;
               s = h.handle.Wait();
             }
             Check(s);
           })
      .def("done", [](PySaveHandle& h) { return h.handle.Done(); })
      .def_property_readonly("step",
                             [](PySaveHandle& h) { return h.handle.step(); })
      .def("stats", [](PySaveHandle& h) {
        SaveStats s = h.handle.stats();
        py::dict d;
        d["stall_s"] = s.stall_s;
        d["durable_s"] = s.durable_s;
        d["bytes_raw"] = s.bytes_raw;
        d["bytes_shipped"] = s.bytes_shipped;
        d["chunks"] = s.chunks;
        d["snapshot_s"] = s.snapshot_s;
        d["staging_bytes"] = s.staging_bytes;
        d["staging_limited"] = s.staging_limited;
        d["chunks_unchanged"] = s.chunks_unchanged;
        d["chunks_delta"] = s.chunks_delta;
        d["bytes_snapshotted"] = s.bytes_snapshotted;
        py::dict mix;
        for (const auto& [name, n] : s.codec_chunks) mix[py::str(name)] = n;
        d["codec_chunks"] = mix;
        return d;
      });

  py::class_<Checkpointer>(m, "Checkpointer", py::dynamic_attr())
      .def(py::init([](const std::string& servers, const std::string& job,
                       uint32_t rank, uint32_t world_size, uint64_t chunk_size,
                       const std::string& codec, uint64_t staging_bytes,
                       int max_outstanding_saves, bool fail_when_busy) {
             CheckpointerOptions o;
             o.servers = servers;
             o.job = job;
             o.rank = rank;
             o.world_size = world_size;
             o.chunk_size = chunk_size;
             o.codec = codec;
             o.staging_bytes = staging_bytes;
             o.max_outstanding_saves = max_outstanding_saves;
             o.fail_when_busy = fail_when_busy;
             Result<std::unique_ptr<Checkpointer>> ck;
             {
               py::gil_scoped_release release;
               ck = Checkpointer::Open(o);
             }
             return Check(std::move(ck));
           }),
           py::arg("servers"), py::arg("job"), py::arg("rank") = 0,
           py::arg("world_size") = 1, py::arg("chunk_size") = 4u << 20,
           py::arg("codec") = "auto", py::arg("staging_bytes") = 0,
           py::arg("max_outstanding_saves") = 1,
           py::arg("fail_when_busy") = false)
      .def(
          "save",
          [](py::object self, const py::dict& tensors, int64_t step, bool lazy,
             const py::dict& dtypes, uintptr_t cuda_stream) {
            Checkpointer& ck = self.cast<Checkpointer&>();
            auto held = std::make_shared<std::vector<py::buffer_info>>();
            RegisterAll(ck, tensors, false, dtypes, held.get());
            Result<SaveHandle> h = absl::UnknownError("unset");
            {
              py::gil_scoped_release release;
              SaveOptions so;
              so.lazy = lazy;
              so.cuda_stream = reinterpret_cast<void*>(cuda_stream);
              h = ck.Save(step, so);
            }
            ck.ClearRegistrations();
            PySaveHandle handle{Check(std::move(h)), held};
            // Lazy: the copies still read the arrays; keep them alive until
            // before_update() even if the caller drops the handle.
            if (lazy) self.attr("_pending_snapshot") = py::cast(handle);
            return handle;
          },
          py::arg("tensors"), py::arg("step"), py::arg("lazy") = false,
          py::arg("dtypes") = py::dict(), py::arg("cuda_stream") = 0,
          "Snapshot the arrays as `step` and save them in the background. "
          "Returns once the snapshot is taken (lazy=True: once the copies are "
          "queued; call before_update() before modifying the arrays).")
      .def(
          "before_update",
          [](py::object self) {
            Checkpointer& ck = self.cast<Checkpointer&>();
            Status s;
            {
              py::gil_scoped_release release;
              s = ck.BeforeUpdate();
            }
            if (py::hasattr(self, "_pending_snapshot")) {
              py::delattr(self, "_pending_snapshot");
            }
            Check(s);
          },
          "Block until the last save's snapshot is complete.")
      .def("wait_all",
           [](Checkpointer& ck) {
             py::gil_scoped_release release;
             ck.WaitAll();
           })
      .def(
          "load",
          [](Checkpointer& ck, const py::dict& tensors, const py::object& step,
             const py::dict& dtypes) {
            int64_t s = ParseStep(step);
            std::vector<py::buffer_info> held;
            RegisterAll(ck, tensors, true, dtypes, &held);
            Result<int64_t> r = absl::UnknownError("unset");
            {
              py::gil_scoped_release release;
              r = ck.Load(s);
            }
            ck.ClearRegistrations();
            return Check(std::move(r));
          },
          py::arg("tensors"), py::arg("step") = "latest",
          py::arg("dtypes") = py::dict())
      .def(
          "steps",
          [](Checkpointer& ck, bool include_partial) {
            Result<std::vector<StepSummary>> r = absl::UnknownError("unset");
            {
              py::gil_scoped_release release;
              r = ck.Steps(include_partial);
            }
            std::vector<int64_t> out;
            for (const StepSummary& s : Check(std::move(r))) {
              out.push_back(s.step);
            }
            return out;
          },
          py::arg("include_partial") = false);
}
