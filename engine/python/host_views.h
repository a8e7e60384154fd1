// Tensors shared with Python without a copy where their memory is the host's (the CPU backend's
// buffers): numpy views and DLPack capsules, each keeping the tensor's storage alive.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "kestrel/tensor.h"

namespace kestrel::python {

// A numpy array over the tensor's own memory (writes reach the tensor), or None where the backend's
// memory is not the host's or numpy has no matching dtype.
pybind11::object numpy_view(const Tensor& tensor);

// The DLPack protocol (__dlpack__, __dlpack_device__): a "dltensor" capsule over the tensor's memory;
// BufferError for tensors whose memory the host cannot address.
pybind11::capsule to_dlpack(const Tensor& tensor);
pybind11::tuple dlpack_device(const Tensor& tensor);

}  // namespace kestrel::python
