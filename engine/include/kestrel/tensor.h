// Tensors: a strided view of device memory that knows its device and dtype.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/device.h"
#include "kestrel/dtype.h"
#include "kestrel/error.h"
#include "kestrel/plugin.h"

namespace kestrel {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);  // "(64, 16, 14, 14)"
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);

class Storage;  // a device buffer, freed when the last tensor viewing it goes away

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, const Device& device);
  static Tensor zeros(const Shape& shape, DType dtype, const Device& device);
  static Tensor full(const Shape& shape, double value, DType dtype, const Device& device);
  // Copies `data` (contiguous, row-major, of `dtype`) to a new tensor on `device`.
  static Tensor from_host(const void* data, const Shape& shape, DType dtype, const Device& device);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, const Device& device);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t size(int dim) const;  // negative dims count from the end
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  const Device& device() const;
  bool is_contiguous() const;
  std::string describe() const;  // "Tensor(f32, (2, 3), cpu:0)"

  // Copies between devices go through pinned host memory when the backends differ.
  Tensor to(const Device& device) const;
  Tensor to(DType dtype) const;  // cast: a copy in `dtype`, or this tensor itself where it has that dtype
  Tensor contiguous() const;     // itself if already contiguous
  Tensor clone() const;
  void copy_from(const Tensor& source);  // same shape, any device/dtype/strides

  // Host read-back: row-major, in the tensor's dtype (copy_to_host) or converted (to_vector).
  void copy_to_host(void* destination) const;
  // Converts on the host, so it works for dtypes the device cannot compute in.
  void copy_to_host_as(DType dtype, void* destination) const;
  template <class T>
  std::vector<T> to_vector() const;
  std::vector<double> to_doubles() const;
  // Where this view's first element lies in host memory, when the backend's buffers are host memory (the
  // CPU's): the device's pending work is waited for first, so the values are current. nullptr when the
  // backend keeps its buffers elsewhere (copy then). Valid while any tensor on this storage lives; the
  // elements follow strides(), in elements.
  void* host_data() const;

  // Views share storage. A negative dim counts from the end.
  Tensor view(const Shape& shape) const;     // needs a contiguous tensor; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor transpose(int dim0, int dim1) const;
  Tensor permute(const std::vector<int>& dims) const;
  Tensor slice(int dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int dim, int64_t index) const;   // removes `dim`
  Tensor unsqueeze(int dim) const;
  Tensor unflatten(int dim, const Shape& sizes) const;  // `dim` split into `sizes` (their product its extent)
  Tensor expand(const Shape& shape) const;      // broadcast view with stride 0
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;

  // The descriptor handed to plugins.
  kestrel_tensor descriptor() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype);
  int wrap_dim(int dim, int rank_for_wrap) const;
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::f32;
};

template <class T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, const Device& device) {
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    throw InvalidArgument("Tensor::from_vector: " + std::to_string(values.size()) + " values for shape " +
                          shape_str(shape));
  return from_host(values.data(), shape, dtype_of<T>::value, device);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out(static_cast<size_t>(numel()));
  copy_to_host_as(dtype_of<T>::value, out.data());
  return out;
}

}  // namespace kestrel
