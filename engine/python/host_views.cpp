#include "host_views.h"

#include <fmt/format.h>

#include <cstdint>

namespace py = pybind11;

namespace kestrel::python {

namespace {

// DLPack's C structs as its specification (dlpack.h, v0.8) lays them out; numpy, PyTorch, JAX and
// CuPy read them.
struct DLDevice {
  int32_t device_type;  // kDLCPU 1, kDLCUDA 2, kDLVulkan 7
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// What a capsule lends: the tensor (its storage stays alive), its shape and strides, the struct.
struct Lent {
  Tensor tensor;
  Shape shape, strides;
  DLManagedTensor managed{};
};

DLDataType dlpack_dtype(DType dtype) {
  const uint8_t bits = uint8_t(dtype_size(dtype) * 8);
  switch (dtype) {
    case DType::f32:
    case DType::f64:
    case DType::f16: return {2, bits, 1};
    case DType::bf16: return {4, bits, 1};
    case DType::u8: return {1, bits, 1};
    default: return {0, bits, 1};  // i32, i64
  }
}

void* shared_address(const Tensor& tensor, const char* what) {
  void* data = tensor.host_data();
  if (!data)
    throw py::buffer_error(fmt::format("{}: {} lives in memory the host cannot address in place; Tensor.numpy() "
                                       "copies it",
                                       what, tensor.describe()));
  return data;
}

}  // namespace

py::object numpy_view(const Tensor& tensor) {
  py::dtype dtype;
  switch (tensor.dtype()) {
    case DType::f32: dtype = py::dtype::of<float>(); break;
    case DType::f64: dtype = py::dtype::of<double>(); break;
    case DType::i64: dtype = py::dtype::of<int64_t>(); break;
    case DType::i32: dtype = py::dtype::of<int32_t>(); break;
    default: return py::none();  // f16, bf16 and u8 arrive converted, by copy
  }
  void* data = tensor.host_data();
  if (!data) return py::none();
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end()), strides;
  for (int64_t s : tensor.strides()) strides.push_back(py::ssize_t(s * int64_t(dtype_size(tensor.dtype()))));
  // The array's base owns a copy of the tensor handle: the storage lives as long as the array.
  py::capsule owner(new Tensor(tensor), [](void* held) { delete static_cast<Tensor*>(held); });
  return py::array(dtype, shape, strides, data, owner);
}

py::capsule to_dlpack(const Tensor& tensor) {
  auto* lent = new Lent{tensor, tensor.shape(), tensor.strides()};
  try {
    DLTensor& t = lent->managed.dl_tensor;
    t.data = shared_address(tensor, "__dlpack__");
    t.device = {1, 0};
    t.ndim = tensor.rank();
    t.dtype = dlpack_dtype(tensor.dtype());
    t.shape = lent->shape.data();
    t.strides = lent->strides.data();
    t.byte_offset = 0;
  } catch (...) {
    delete lent;
    throw;
  }
  lent->managed.manager_ctx = lent;
  lent->managed.deleter = [](DLManagedTensor* self) { delete static_cast<Lent*>(self->manager_ctx); };
  // A consumer renames the capsule "used_dltensor" and calls the deleter itself when done; a capsule
  // dropped unconsumed still holds the tensor and lets it go here.
  return py::capsule(&lent->managed, "dltensor", [](PyObject* capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
      managed->deleter(managed);
    }
  });
}

py::tuple dlpack_device(const Tensor& tensor) {
  const std::string& backend = tensor.device().backend();
  const int32_t type = backend == "cpu" ? 1 : backend == "cuda" ? 2 : backend == "vulkan" ? 7 : 1;
  return py::make_tuple(type, backend == "cpu" ? 0 : tensor.device().index());
}

}  // namespace kestrel::python
