#include "kestrel/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "kestrel/ops.h"
#include "storage.h"

namespace kestrel {

std::string shape_str(const Shape& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

int64_t shape_numel(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)), shape_(std::move(shape)), strides_(std::move(strides)), offset_(offset),
      dtype_(dtype) {
  if (shape_.size() > KESTREL_MAX_RANK)
    throw InvalidArgument(fmt::format("tensor rank {} exceeds the maximum of {}", shape_.size(), KESTREL_MAX_RANK));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, const Device& device) {
  int64_t size = int64_t(dtype_size(dtype));
  for (int64_t extent : shape) {
    if (extent < 0) throw InvalidArgument("Tensor::empty: negative extent in shape " + shape_str(shape));
    if (__builtin_mul_overflow(size, extent, &size))  // every later element count and offset would wrap
      throw InvalidArgument("Tensor::empty: a " + std::string(dtype_name(dtype)) + " tensor of shape " + shape_str(shape) +
                            " would hold more than 2^63 bytes");
  }
  // Never allocate zero bytes: an empty tensor still has a (tiny) buffer, which keeps descriptors valid.
  uint64_t bytes = std::max<uint64_t>(uint64_t(size), 1);
  return Tensor(std::make_shared<Storage>(device, bytes), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const Device& device) { return full(shape, 0.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, const Device& device) {
  Tensor out = empty(shape, dtype, device);
  ops::fill_(out, value);
  return out;
}

Tensor Tensor::from_host(const void* data, const Shape& shape, DType dtype, const Device& device) {
  Tensor out = empty(shape, dtype, device);
  uint64_t bytes = out.numel() * dtype_size(dtype);
  if (bytes == 0) return out;
  DeviceRuntime& runtime = device.runtime();
  runtime.check(runtime.api().copy_host_to_device(runtime.stream(), out.storage_->buffer(), 0, data, bytes),
                "copying host data to the device");
  runtime.synchronize();  // the caller's memory may go away as soon as we return
  return out;
}

int64_t Tensor::size(int dim) const { return shape_.at(wrap_dim(dim, rank())); }

const Device& Tensor::device() const {
  if (!storage_) throw InvalidArgument("use of an undefined tensor");
  return storage_->device();
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!storage_) return "Tensor(undefined)";
  return fmt::format("Tensor({}, {}, {})", dtype_name(dtype_), shape_str(shape_), device().str());
}

Tensor Tensor::to(const Device& target) const {
  if (target == device()) return *this;
  Tensor source = contiguous();
  Tensor out = empty(shape_, dtype_, target);
  uint64_t bytes = numel() * dtype_size(dtype_);
  if (bytes == 0) return out;
  // Different plugins share no memory: stage through pinned host memory of the source device.
  DeviceRuntime& from = device().runtime();
  DeviceRuntime& to = target.runtime();
  void* staging = from.host_allocate(bytes);
  try {
    from.check(from.api().copy_device_to_host(from.stream(), staging, source.storage_->buffer(),
                                              source.offset_ * dtype_size(dtype_), bytes),
               "copying to the host");
    from.synchronize();
    to.check(to.api().copy_host_to_device(to.stream(), out.storage_->buffer(), 0, staging, bytes),
             "copying from the host");
    to.synchronize();
  } catch (...) {
    from.host_release(staging);
    throw;
  }
  from.host_release(staging);
  return out;
}

namespace {
// A new contiguous tensor holding t's elements in `dtype`.
Tensor copied_as(const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.shape(), dtype, t.device());
  ops::copy_(out, t);
  return out;
}
}  // namespace

// As torch's .to(): no copy where nothing changes (clone() copies).
Tensor Tensor::to(DType dtype) const { return dtype == dtype_ ? *this : copied_as(*this, dtype); }

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const { return copied_as(*this, dtype_); }

void Tensor::copy_from(const Tensor& source) {
  if (source.shape_ != shape_)
    throw InvalidArgument(fmt::format("copy_from: shape {} into {}", shape_str(source.shape_), shape_str(shape_)));
  ops::copy_(*this, source.device() == device() ? source : source.to(device()));
}

void Tensor::copy_to_host(void* destination) const {
  Tensor source = contiguous();
  uint64_t bytes = numel() * dtype_size(dtype_);
  if (bytes == 0) return;
  DeviceRuntime& runtime = device().runtime();
  runtime.check(runtime.api().copy_device_to_host(runtime.stream(), destination, source.storage_->buffer(),
                                                  source.offset_ * dtype_size(dtype_), bytes),
                "copying to the host");
  runtime.synchronize();
}

void Tensor::copy_to_host_as(DType dtype, void* destination) const {
  if (dtype == dtype_) return copy_to_host(destination);
  std::vector<unsigned char> raw(numel() * dtype_size(dtype_));
  copy_to_host(raw.data());
  convert_host_elements(raw.data(), dtype_, destination, dtype, numel());
}

std::vector<double> Tensor::to_doubles() const { return to_vector<double>(); }

void* Tensor::host_data() const {
  if (!defined()) return nullptr;
  DeviceRuntime& runtime = storage_->device().runtime();
  void* base = runtime.host_address(storage_->buffer());
  if (!base) return nullptr;
  runtime.synchronize();  // the launches that write it, on backends that run them asynchronously
  return static_cast<unsigned char*>(base) + offset_ * int64_t(dtype_size(dtype_));
}

int Tensor::wrap_dim(int dim, int rank_for_wrap) const {
  int wrapped = dim < 0 ? dim + rank_for_wrap : dim;
  if (wrapped < 0 || wrapped >= rank_for_wrap)
    throw InvalidArgument(fmt::format("dimension {} is out of range for {}", dim, describe()));
  return wrapped;
}

namespace {
// Whether `shape` is one a tensor can have: no negative extent, an element count inside int64.
bool holds_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t extent : shape)
    if (extent < 0 || __builtin_mul_overflow(n, extent, &n)) return false;
  return true;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  if (!is_contiguous())
    throw InvalidArgument(fmt::format("view{} of non-contiguous {}: call contiguous() or reshape()",
                                      shape_str(shape), describe()));
  Shape resolved = shape;
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      if (inferred >= 0) throw InvalidArgument("view: only one dimension may be -1");
      inferred = static_cast<int>(i);
    } else if (resolved[i] < 0 || __builtin_mul_overflow(known, resolved[i], &known)) {
      throw InvalidArgument(fmt::format("view: cannot view {} as {}", describe(), shape_str(shape)));
    }
  }
  if (inferred >= 0) resolved[inferred] = known == 0 ? 0 : numel() / known;
  if (shape_numel(resolved) != numel())
    throw InvalidArgument(fmt::format("view: cannot view {} ({} elements) as {}", describe(), numel(),
                                      shape_str(shape)));
  return Tensor(storage_, resolved, contiguous_strides(resolved), offset_, dtype_);
}

Tensor Tensor::reshape(const Shape& shape) const { return contiguous().view(shape); }

Tensor Tensor::transpose(int dim0, int dim1) const {
  std::vector<int> order(rank());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[wrap_dim(dim0, rank())], order[wrap_dim(dim1, rank())]);
  return permute(order);
}

Tensor Tensor::permute(const std::vector<int>& dims) const {
  if (static_cast<int>(dims.size()) != rank())
    throw InvalidArgument(fmt::format("permute: {} dims given for {}", dims.size(), describe()));
  Shape shape(rank()), strides(rank());
  std::vector<bool> used(rank(), false);
  for (int i = 0; i < rank(); ++i) {
    int d = wrap_dim(dims[i], rank());
    if (used[d]) throw InvalidArgument("permute: a dimension appears twice");
    used[d] = true;
    shape[i] = shape_[d];
    strides[i] = strides_[d];
  }
  return Tensor(storage_, shape, strides, offset_, dtype_);
}

Tensor Tensor::slice(int dim, int64_t start, int64_t end, int64_t step) const {
  int d = wrap_dim(dim, rank());
  if (step <= 0) throw InvalidArgument("slice: step must be positive");
  int64_t extent = shape_[d];
  if (start < 0) start += extent;
  if (end < 0) end += extent;
  start = std::clamp<int64_t>(start, 0, extent);
  end = std::clamp<int64_t>(end, start, extent);
  Shape shape = shape_, strides = strides_;
  shape[d] = (end - start + step - 1) / step;
  strides[d] = strides_[d] * step;
  return Tensor(storage_, shape, strides, offset_ + start * strides_[d], dtype_);
}

Tensor Tensor::select(int dim, int64_t index) const {
  int d = wrap_dim(dim, rank());
  if (index < 0) index += shape_[d];
  if (index < 0 || index >= shape_[d])
    throw InvalidArgument(fmt::format("select: index {} out of range for dim {} of {}", index, dim, describe()));
  Shape shape = shape_, strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(storage_, shape, strides, offset_ + index * strides_[d], dtype_);
}

Tensor Tensor::unsqueeze(int dim) const {
  int d = wrap_dim(dim, rank() + 1);
  Shape shape = shape_, strides = strides_;
  int64_t stride = d < rank() ? strides_[d] * shape_[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return Tensor(storage_, shape, strides, offset_, dtype_);
}

Tensor Tensor::unflatten(int dim, const Shape& sizes) const {
  const int d = wrap_dim(dim, rank());
  if (sizes.empty() || !holds_elements(sizes) || shape_numel(sizes) != shape_[d])
    throw InvalidArgument(fmt::format("unflatten: dim {} of {} into {}", dim, describe(), shape_str(sizes)));
  Shape shape(shape_.begin(), shape_.begin() + d), strides(strides_.begin(), strides_.begin() + d);
  Shape inner(sizes.size());
  int64_t stride = strides_[d];  // the innermost of the new dims steps as `dim` did
  for (size_t i = sizes.size(); i-- > 0;) {
    inner[i] = stride;
    stride *= sizes[i];
  }
  shape.insert(shape.end(), sizes.begin(), sizes.end());
  strides.insert(strides.end(), inner.begin(), inner.end());
  shape.insert(shape.end(), shape_.begin() + d + 1, shape_.end());
  strides.insert(strides.end(), strides_.begin() + d + 1, strides_.end());
  return Tensor(storage_, shape, strides, offset_, dtype_);
}

Tensor Tensor::expand(const Shape& shape) const {
  if (!holds_elements(shape)) throw InvalidArgument(fmt::format("expand: {} to {}", describe(), shape_str(shape)));
  if (shape.size() < shape_.size())
    throw InvalidArgument(fmt::format("expand: {} to fewer dims {}", describe(), shape_str(shape)));
  size_t lead = shape.size() - shape_.size();
  Shape strides(shape.size(), 0);
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i] == shape[lead + i]) {
      strides[lead + i] = strides_[i];
    } else if (shape_[i] != 1) {
      throw InvalidArgument(fmt::format("expand: cannot broadcast {} to {}", describe(), shape_str(shape)));
    }
  }
  return Tensor(storage_, shape, strides, offset_, dtype_);
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  if (shape.size() != strides.size()) throw InvalidArgument("as_strided: shape and strides differ in rank");
  // The last element's offset, in checked arithmetic: a wrapped sum would pass the bounds test below.
  const uint64_t elements = storage_->bytes() / dtype_size(dtype_);
  bool empty = false, outside = offset < 0;
  uint64_t last = uint64_t(std::max<int64_t>(offset, 0));
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) throw InvalidArgument(fmt::format("as_strided: negative extent in {}", shape_str(shape)));
    if (strides[i] < 0) throw InvalidArgument("as_strided: negative strides are not supported");
    if (shape[i] == 0) empty = true;  // touches nothing
    uint64_t reach = 0;
    if (shape[i] > 0 && (__builtin_mul_overflow(uint64_t(shape[i] - 1), uint64_t(strides[i]), &reach) ||
                         __builtin_add_overflow(last, reach, &last)))
      outside = true;
  }
  if (outside || (!empty && last >= elements))
    throw InvalidArgument(fmt::format("as_strided: view {} reaches past the end of its storage", shape_str(shape)));
  return Tensor(storage_, shape, strides, offset, dtype_);
}

kestrel_tensor Tensor::descriptor() const {
  kestrel_tensor desc{};
  set_abi_size(desc);
  desc.buffer = storage_ ? storage_->buffer() : nullptr;
  desc.offset = static_cast<uint64_t>(offset_);
  desc.dtype = to_c(dtype_);
  desc.rank = rank();
  for (int i = 0; i < rank(); ++i) {
    desc.shape[i] = shape_[i];
    desc.strides[i] = strides_[i];
  }
  return desc;
}

}  // namespace kestrel
