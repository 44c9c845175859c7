#include "client/python/tensors.h"

#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/cuda/cuda_copy.h"
#include "client/python/dlpack_abi.h"
#include "format/names.h"

namespace stagger::python {

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

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

namespace {

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

// The dtype override for `name` if `dtypes` has one, checked against the
// array's element size; else `fallback`.
std::string DtypeFor(const std::string& name, const py::dict& dtypes,
                     size_t itemsize, Result<std::string> fallback) {
  if (!dtypes.contains(py::str(name))) return Check(std::move(fallback));
  std::string dtype = py::str(dtypes[py::str(name)]);
  auto esize = format::DtypeSize(dtype);
  if (!esize.ok()) {
    Raise(WithContext(esize.status(), absl::StrCat("tensor '", name, "'")));
  }
  if (*esize != itemsize) {
    Raise(absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': dtype ", dtype, " has ", *esize,
                     "-byte elements but the array's are ", itemsize,
                     " bytes; pass a view with matching element size")));
  }
  return dtype;
}

// Maps a DLPack element type to a stagger dtype.
Result<std::string> DtypeOfDlpack(const dlpack::DataType& t,
                                  const std::string& name) {
  if (t.lanes == 1) {
    switch (t.code) {
      case dlpack::kFloat:
        if (t.bits == 16) return std::string("F16");
        if (t.bits == 32) return std::string("F32");
        if (t.bits == 64) return std::string("F64");
        break;
      case dlpack::kBfloat:
        if (t.bits == 16) return std::string("BF16");
        break;
      case dlpack::kInt:
      case dlpack::kUInt: {
        bool s = t.code == dlpack::kInt;
        if (t.bits == 8) return std::string(s ? "I8" : "U8");
        if (t.bits == 16) return std::string(s ? "I16" : "U16");
        if (t.bits == 32) return std::string(s ? "I32" : "U32");
        if (t.bits == 64) return std::string(s ? "I64" : "U64");
        break;
      }
      case dlpack::kBool:
        if (t.bits == 8) return std::string("BOOL");
        break;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", name, "' has an unsupported DLPack type (code ",
                   static_cast<int>(t.code), ", bits ",
                   static_cast<int>(t.bits), ", lanes ", t.lanes, ")"));
}

// A DLPack producer (`__dlpack__`) as a TensorSpec. The capsule goes to
// `held`: freeing it releases the producer's tensor.
TensorSpec DlpackSpec(const std::string& name, const py::object& obj,
                      const py::dict& dtypes, Held* held) {
  py::object capsule = obj.attr("__dlpack__")();
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    Raise(absl::InvalidArgumentError(
        absl::StrCat("tensor '", name,
                     "': __dlpack__() did not return an unused DLPack "
                     "capsule")));
  }
  auto* managed = static_cast<dlpack::ManagedTensor*>(
      PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  held->objects.push_back(capsule);
  const dlpack::Tensor& t = managed->dl_tensor;
  TensorSpec spec;
  spec.name = name;
  switch (t.device.device_type) {
    case dlpack::kCpu:
    case dlpack::kCudaHost:
      spec.device = Device::kHost;
      break;
    case dlpack::kCuda:
    case dlpack::kCudaManaged:
      spec.device = Device::kCuda;
      spec.device_index = t.device.device_id;
      break;
    default:
      Raise(absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' lives on DLPack device type ",
                       t.device.device_type, " (only CPU and CUDA)")));
  }
  const size_t itemsize = (t.dtype.bits * t.dtype.lanes + 7) / 8;
  spec.dtype = DtypeFor(name, dtypes, itemsize, DtypeOfDlpack(t.dtype, name));
  if (t.ndim < 0 || t.ndim > 64) {
    Raise(absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has ", t.ndim, " dimensions")));
  }
  int64_t expect = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expect) {
      Raise(absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' is not C-contiguous")));
    }
    expect *= t.shape[d];
  }
  spec.shape.assign(t.shape, t.shape + t.ndim);
  spec.data = static_cast<char*>(t.data) + t.byte_offset;
  return spec;
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
  spec.dtype = DtypeFor(name, dtypes, std::stoul(typestr.substr(2)),
                        DtypeOfTypestr(typestr, name));
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

// A sequence of ints (a shape or an offset) from a shard entry.
std::vector<int64_t> IntsOf(const py::handle& seq, const std::string& name,
                            const char* what) {
  std::vector<int64_t> out;
  try {
    for (auto d : py::iter(seq)) out.push_back(d.cast<int64_t>());
  } catch (const std::exception&) {  // not iterable, or not an int
    Raise(absl::InvalidArgumentError(absl::StrCat(
        "shard of tensor '", name, "': ", what, " must be a list of ints")));
  }
  return out;
}

// Sets spec.global_shape and global_offset from `shards[spec.name]`, if any.
// The slice itself is validated by Register.
void ApplyShard(const py::dict& shards, TensorSpec* spec) {
  py::str key(spec->name);
  if (!shards.contains(key)) return;
  py::object entry = shards[key];
  if (!py::isinstance<py::sequence>(entry) || py::len(entry) != 2) {
    Raise(absl::InvalidArgumentError(
        absl::StrCat("shard of tensor '", spec->name,
                     "' must be a pair (global_shape, global_offset)")));
  }
  py::sequence pair = entry;
  spec->global_shape = IntsOf(pair[0], spec->name, "global_shape");
  spec->global_offset = IntsOf(pair[1], spec->name, "global_offset");
}

// Registers `spec` with its shard (if any), naming the tensor on failure.
void RegisterOne(Checkpointer& ck, const py::dict& shards, TensorSpec spec) {
  ApplyShard(shards, &spec);
  Check(ck.Register(spec));
}

}  // namespace

namespace {

// Registers one entry of `tensors` (RegisterAll's body).
void RegisterEntry(Checkpointer& ck, const std::string& name,
                   const py::object& obj, bool writable, const py::dict& dtypes,
                   const py::dict& shards, Held* held) {
  if (py::hasattr(obj, "__cuda_array_interface__")) {
    // Held like the others: a lazy save reads the memory after save()
    // returns, when the caller may have dropped its last reference.
    held->objects.push_back(obj);
    RegisterOne(ck, shards, CudaSpec(name, obj, dtypes));
    return;
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    if (py::hasattr(obj, "__dlpack__")) {
      RegisterOne(ck, shards, DlpackSpec(name, obj, dtypes, held));
      return;
    }
    const std::string type = py::str(obj.get_type().attr("__name__"));
    if (py::isinstance<py::int_>(obj) || py::isinstance<py::float_>(obj) ||
        py::isinstance<py::bool_>(obj) || py::isinstance<py::list>(obj) ||
        py::isinstance<py::tuple>(obj) || py::isinstance<py::str>(obj)) {
      Raise(absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "' is a plain ", type,
          ": this binding saves arrays only; wrap it (numpy.asarray(value)) "
          "or save plain values with stagger.torch.save_state_dict")));
    }
    Raise(absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' is a ", type,
                     ": expected an array with the buffer protocol (numpy), "
                     "__cuda_array_interface__ or __dlpack__")));
  }
  if (writable) {
    // A load writes into the arrays.
    py::object flags = py::getattr(obj, "flags", py::none());
    if (!flags.is_none() && py::hasattr(flags, "writeable") &&
        !py::bool_(flags.attr("writeable"))) {
      Raise(absl::InvalidArgumentError(
          absl::StrCat("tensor '", name,
                       "' is read-only: a load fills the arrays it is "
                       "given in place (pass a writable copy)")));
    }
  }
  py::buffer_info info = py::buffer(obj).request(writable);
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
  spec.dtype = DtypeFor(name, dtypes, info.itemsize, DtypeOf(info, name));
  spec.shape.assign(info.shape.begin(), info.shape.end());
  spec.data = info.ptr;
  held->buffers.push_back(std::move(info));
  RegisterOne(ck, shards, std::move(spec));
}

}  // namespace

// Registers every entry of `tensors`; see tensors.h.
void RegisterAll(Checkpointer& ck, const py::dict& tensors, bool writable,
                 const py::dict& dtypes, const py::dict& shards, Held* held) {
  ck.ClearRegistrations();
  for (auto item : shards) {
    if (!tensors.contains(item.first)) {
      Raise(absl::InvalidArgumentError(absl::StrCat(
          "shards names tensor '", std::string(py::str(item.first)),
          "', which is not among the tensors")));
    }
  }
  for (auto item : tensors) {
    std::string name = py::str(item.first);
    py::object obj = py::reinterpret_borrow<py::object>(item.second);
    try {
      RegisterEntry(ck, name, obj, writable, dtypes, shards, held);
    } catch (py::error_already_set& e) {
      if (e.matches(ErrorType())) throw;
      // What the array's own library raised (torch: "Can't export tensors
      // that require gradient", a dtype DLPack lacks; a buffer that cannot
      // be had): a stagger.Error naming the tensor, as every other error.
      std::string why = e.what();
      why = why.substr(0, why.find('\n'));  // not pybind11's "At:" trace
      e.restore();
      PyErr_Clear();
      std::string hint;
      if (why.find("require") != std::string::npos) {
        hint = " (a parameter: pass p.detach())";
      } else if (why.find("Bool") != std::string::npos) {
        hint = " (pass t.view(torch.uint8), or save through stagger.torch)";
      }
      Raise(absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' (a ",
                       std::string(py::str(obj.get_type().attr("__name__"))),
                       ") cannot be used: ", why, hint)));
    } catch (const std::exception& e) {
      Raise(absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' cannot be used: ", e.what())));
    }
  }
}

}  // namespace stagger::python
