// The DLPack exchange structures (dlpack.h, ABI version 0.x), as passed in a
// "dltensor" PyCapsule by `__dlpack__()`. Only what a consumer reads.
// Layout fixed by the DLPack specification; do not reorder.
#ifndef STAGGER_CLIENT_PYTHON_DLPACK_ABI_H_
#define STAGGER_CLIENT_PYTHON_DLPACK_ABI_H_

#include <cstdint>

namespace stagger::python::dlpack {

enum DeviceType : int32_t {
  kCpu = 1,
  kCuda = 2,
  kCudaHost = 3,  // pinned host memory, readable by the CPU
  kCudaManaged = 13,
};

enum TypeCode : uint8_t {
  kInt = 0,
  kUInt = 1,
  kFloat = 2,
  kBfloat = 4,
  kComplex = 5,
  kBool = 6,
};

struct Device {
  int32_t device_type;
  int32_t device_id;
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; nullptr: compact row-major
  uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

}  // namespace stagger::python::dlpack

#endif  // STAGGER_CLIENT_PYTHON_DLPACK_ABI_H_
