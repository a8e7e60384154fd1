// The ABI's versioning rules, checked on the header and on every loaded plugin: struct_size is the end
// of the last field (so a field appended into what used to be tail padding is visible), a parameter
// block shorter than the reader's version is refused, and an op kind a plugin does not know is
// unsupported rather than a crash.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "kestrel/engine.h"
#include "kestrel/plugin.h"
#include "kestrel/plugin_struct_size.hpp"
#include "../plugin_tables.h"

namespace {

// kestrel_window_params as a later minor version might extend it: one int32_t appended.
struct WindowParamsWithAppendedField {
  size_t struct_size;
  int32_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  kestrel_pool_mode mode;
  int32_t appended;
};

TEST(PluginAbi, StructSizeIsTheEndOfTheLastField) {
  EXPECT_EQ(kestrel::abi_size<kestrel_sgd_params>, offsetof(kestrel_sgd_params, step) + sizeof(int64_t));
  EXPECT_EQ(kestrel::abi_size<kestrel_window_params>, offsetof(kestrel_window_params, mode) + sizeof(kestrel_pool_mode));
  EXPECT_EQ(kestrel::abi_size<kestrel_op>, sizeof(kestrel_op));  // ends in a pointer: no padding
  EXPECT_LE(kestrel::abi_size<kestrel_device_properties>, sizeof(kestrel_device_properties));
  EXPECT_EQ(kestrel::abi_init<kestrel_adam_params>().struct_size, kestrel::abi_size<kestrel_adam_params>);
}

TEST(PluginAbi, AFieldAppendedIntoTailPaddingIsDetectable) {
  // sizeof cannot tell the two versions apart: the new field sits where the padding was...
  ASSERT_EQ(sizeof(WindowParamsWithAppendedField), sizeof(kestrel_window_params));
  // ...the end of the last field can.
  const size_t old_size = KESTREL_STRUCT_SIZE(kestrel_window_params, mode);
  const size_t new_size = KESTREL_STRUCT_SIZE(WindowParamsWithAppendedField, appended);
  EXPECT_EQ(new_size, old_size + sizeof(int32_t));
  // A newer reader handed this host's block sees that `appended` is absent.
  const kestrel_window_params from_this_host = kestrel::abi_init<kestrel_window_params>();
  EXPECT_LT(from_this_host.struct_size, new_size);
  EXPECT_TRUE(kestrel::abi_complete(&from_this_host));
}

kestrel_tensor vector_f32(int64_t n) {
  kestrel_tensor t = kestrel::abi_init<kestrel_tensor>();
  t.dtype = KESTREL_DTYPE_F32;
  t.rank = 1;
  t.shape[0] = n;
  t.strides[0] = 1;
  return t;
}

// A plain SGD update over four f32 values (param, grad), with the given parameter block.
kestrel_op sgd_op(const kestrel_sgd_params* params) {
  kestrel_op op = kestrel::abi_init<kestrel_op>();
  op.kind = KESTREL_OP_SGD_UPDATE;
  op.num_inputs = 2;
  op.inputs[0] = op.inputs[1] = vector_f32(4);
  op.params = params;
  return op;
}

TEST(PluginAbi, EveryPluginRefusesAParameterBlockShorterThanItsVersion) {
  const auto tables = kestrel_test::loaded_plugin_tables();
  ASSERT_FALSE(tables.empty());
  for (const kestrel_plugin_api* api : tables) {
    kestrel_sgd_params params = kestrel::abi_init<kestrel_sgd_params>();
    params.lr = 0.1;
    kestrel_op op = sgd_op(&params);
    // Plugins that fuse the update accept the complete block; none may accept a truncated one.
    const int32_t complete = api->supports_op(nullptr, &op);
    params.struct_size = kestrel::abi_size<kestrel_sgd_params> - 1;
    EXPECT_EQ(api->supports_op(nullptr, &op), 0) << api->name;
    if (std::string(api->name) == "cpu") EXPECT_EQ(complete, 1);
  }
}

// A row-major (rows, cols) f32 descriptor in `buffer` from element `offset` (supports_op reads only the
// descriptor and compares buffers by address).
kestrel_tensor matrix_f32(kestrel_buffer* buffer, int64_t rows, int64_t cols, int64_t offset = 0) {
  kestrel_tensor t = kestrel::abi_init<kestrel_tensor>();
  t.buffer = buffer;
  t.offset = offset;
  t.dtype = KESTREL_DTYPE_F32;
  t.rank = 2;
  t.shape[0] = rows, t.shape[1] = cols;
  t.strides[0] = cols, t.strides[1] = 1;
  return t;
}

// ABI 1.16: the layer norm's backward may add dx to a gradient given as one more input, but never one
// that overlaps dx, which it writes while reading the other (the engine hands it another node's
// gradient); the plugins that add (the CPU's among them) take it apart from dx.
TEST(PluginAbi, NoPluginAddsIntoAGradientThatOverlapsDx) {
  const auto tables = kestrel_test::loaded_plugin_tables();
  ASSERT_FALSE(tables.empty());
  static char places[8];  // buffers' addresses only: supports_op never dereferences them
  auto buffer = [](int i) { return reinterpret_cast<kestrel_buffer*>(places + i); };
  const kestrel_layer_norm_params params = kestrel::abi_init<kestrel_layer_norm_params>();
  kestrel_op op = kestrel::abi_init<kestrel_op>();
  op.kind = KESTREL_OP_LAYER_NORM_BACKWARD;
  op.params = &params;
  op.num_inputs = 5;
  op.inputs[0] = matrix_f32(buffer(1), 3, 8);  // dy
  op.inputs[1] = matrix_f32(buffer(2), 3, 8);  // x
  op.inputs[2] = op.inputs[3] = vector_f32(3);  // mean, rstd
  op.inputs[2].buffer = op.inputs[3].buffer = buffer(3);
  op.num_outputs = 1;
  op.outputs[0] = matrix_f32(buffer(4), 3, 8, 8);  // dx: rows 1 to 3 of a buffer of 7
  for (const kestrel_plugin_api* api : tables) {
    op.inputs[4] = matrix_f32(buffer(5), 3, 8);  // apart
    const int32_t apart = api->supports_op(nullptr, &op);
    op.inputs[4] = matrix_f32(buffer(4), 3, 8, 8);  // dx itself
    EXPECT_EQ(api->supports_op(nullptr, &op), 0) << api->name;
    op.inputs[4] = matrix_f32(buffer(4), 3, 8, 16);  // half of it
    EXPECT_EQ(api->supports_op(nullptr, &op), 0) << api->name;
    op.inputs[4] = matrix_f32(buffer(4), 3, 8, 32);  // the rows after it, in the same buffer
    EXPECT_EQ(api->supports_op(nullptr, &op), apart) << api->name;
    if (std::string(api->name) == "cpu") EXPECT_EQ(apart, 1);
  }
}

TEST(PluginAbi, AnOpKindAPluginDoesNotKnowIsUnsupported) {
  for (const kestrel_plugin_api* api : kestrel_test::loaded_plugin_tables()) {
    kestrel_fill_params params = kestrel::abi_init<kestrel_fill_params>();
    kestrel_op op = kestrel::abi_init<kestrel_op>();
    op.kind = static_cast<kestrel_op_kind>(63);  // a fused family of some later minor version
    op.num_outputs = 1;
    op.outputs[0] = vector_f32(4);
    op.params = &params;
    EXPECT_EQ(api->supports_op(nullptr, &op), 0) << api->name;

    kestrel_context* context = nullptr;
    kestrel_stream* stream = nullptr;
    ASSERT_EQ(api->context_create(0, &context), KESTREL_STATUS_OK) << api->name;
    ASSERT_EQ(api->stream_create(context, &stream), KESTREL_STATUS_OK) << api->name;
    EXPECT_EQ(api->launch(stream, &op), KESTREL_STATUS_UNSUPPORTED) << api->name;
    EXPECT_FALSE(std::string(api->last_error()).empty()) << api->name;
    api->stream_destroy(stream);
    api->context_destroy(context);
  }
}

}  // namespace
