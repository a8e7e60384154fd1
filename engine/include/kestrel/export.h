// Exporting a model for deployment elsewhere: ONNX (opset 17), which onnxruntime, TensorRT and most
// inference engines read.
#pragma once
#include <string>

#include "kestrel/model.h"

namespace kestrel {

// Writes `model` with its current weights, as it computes in evaluation mode (dropout off, batch norm on
// its running statistics), to `path` atomically. The graph takes "input" (N, ...input shape) of f32 values
// or i64 token ids, for any batch size N, and gives "output" (N, ...). Throws InvalidArgument naming the
// model file, JSON path and kind of a layer with no ONNX form, or Error when the file cannot be written.
void export_onnx(Model& model, const std::string& path);

}  // namespace kestrel
