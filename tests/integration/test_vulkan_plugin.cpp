// The Vulkan plugin through its raw ABI, for what the conformance cases cannot reach: several streams
// and events, copies bigger than a batch's upload space, overlapping device copies, thousands of
// launches without a sync, long softmax rows, errors found on the device and reported later, memory
// statistics and trimming, the memory and error rules of capture and replay, the on-disk pipeline
// cache, and KESTREL_VULKAN_PROFILE's count of replayed work.
//
// The engine finds the plugin (so the test runs wherever `kestrel devices` lists a Vulkan device and
// skips elsewhere); the test then opens the same library to call the ABI directly with its own
// contexts and streams.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kestrel/engine.h"
#include "cli_run.h"
#include "kestrel/plugin.h"

namespace {

const kestrel_plugin_api* find_vulkan_plugin() {
  for (const kestrel::PluginInfo& plugin : kestrel::Engine::global().plugins()) {
    if (plugin.name != "vulkan" || !plugin.loaded || plugin.devices.empty()) continue;
    void* library = dlopen(plugin.path.c_str(), RTLD_NOW | RTLD_LOCAL);  // already loaded: the same copy
    if (!library) return nullptr;
    auto entry = reinterpret_cast<kestrel_plugin_entry_fn>(dlsym(library, KESTREL_PLUGIN_ENTRY_SYMBOL));
    return entry ? entry() : nullptr;
  }
  return nullptr;
}

const kestrel_plugin_api* vk() {
  static const kestrel_plugin_api* api = find_vulkan_plugin();
  return api;
}

#define EXPECT_OK(call)                                                      \
  do {                                                                       \
    kestrel_status status_ = (call);                                         \
    EXPECT_EQ(status_, KESTREL_STATUS_OK) << #call << ": " << vk()->last_error(); \
  } while (0)

kestrel_tensor tensor(kestrel_buffer* buffer, std::vector<int64_t> shape, kestrel_dtype dtype = KESTREL_DTYPE_F32) {
  kestrel_tensor t{};
  t.struct_size = sizeof(t);
  t.buffer = buffer;
  t.dtype = dtype;
  t.rank = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

kestrel_op make_op(kestrel_op_kind kind, const void* params, std::vector<kestrel_tensor> inputs,
                   std::vector<kestrel_tensor> outputs) {
  kestrel_op op{};
  op.struct_size = sizeof(op);
  op.kind = kind;
  op.params = params;
  for (const auto& t : inputs) op.inputs[op.num_inputs++] = t;
  for (const auto& t : outputs) op.outputs[op.num_outputs++] = t;
  return op;
}

// One context and two streams on Vulkan device 0, released at the end of each test.
class VulkanPlugin : public testing::Test {
 protected:
  void SetUp() override {
    if (!vk()) GTEST_SKIP() << "no Vulkan device is loaded (see `kestrel devices`)";
    ASSERT_EQ(vk()->context_create(0, &context), KESTREL_STATUS_OK) << vk()->last_error();
    ASSERT_EQ(vk()->stream_create(context, &stream), KESTREL_STATUS_OK) << vk()->last_error();
    ASSERT_EQ(vk()->stream_create(context, &other), KESTREL_STATUS_OK) << vk()->last_error();
  }
  void TearDown() override {
    if (!context) return;
    for (kestrel_buffer* b : buffers) vk()->buffer_free(b);
    vk()->stream_destroy(stream);
    vk()->stream_destroy(other);
    vk()->context_destroy(context);
  }

  kestrel_buffer* alloc(uint64_t bytes) {
    kestrel_buffer* b = nullptr;
    EXPECT_OK(vk()->buffer_alloc(context, bytes, &b));
    buffers.push_back(b);
    return b;
  }
  void release(kestrel_buffer* b) {
    buffers.erase(std::find(buffers.begin(), buffers.end(), b));
    vk()->buffer_free(b);
  }
  template <class T>
  kestrel_buffer* upload(const std::vector<T>& values) {
    kestrel_buffer* b = alloc(values.size() * sizeof(T));
    EXPECT_OK(vk()->copy_host_to_device(stream, b, 0, values.data(), values.size() * sizeof(T)));
    return b;
  }
  template <class T = float>
  std::vector<T> download(kestrel_buffer* b, size_t count, kestrel_stream* on = nullptr) {
    std::vector<T> values(count);
    EXPECT_OK(vk()->copy_device_to_host(on ? on : stream, values.data(), b, 0, count * sizeof(T)));
    return values;
  }
  void launch(const kestrel_op& op, kestrel_stream* on = nullptr) { EXPECT_OK(vk()->launch(on ? on : stream, &op)); }
  kestrel_memory_stats stats() {
    kestrel_memory_stats m{};
    m.struct_size = sizeof(m);
    EXPECT_OK(vk()->memory_stats(context, &m));
    return m;
  }
  // x += 1 on n floats.
  kestrel_op increment(kestrel_buffer* x, kestrel_buffer* one, int64_t n) {
    return make_op(KESTREL_OP_BINARY, &add_params, {tensor(x, {n}), tensor(one, {n})}, {tensor(x, {n})});
  }

  kestrel_context* context = nullptr;
  kestrel_stream* stream = nullptr;
  kestrel_stream* other = nullptr;
  std::vector<kestrel_buffer*> buffers;
  kestrel_binary_params add_params{sizeof(kestrel_binary_params), KESTREL_BINARY_ADD};
};

TEST_F(VulkanPlugin, MemoryStatisticsCountBuffersAndTrimReturnsFreeBlocks) {
  const kestrel_memory_stats before = stats();
  std::vector<kestrel_buffer*> small;
  for (int i = 0; i < 5000; ++i) small.push_back(alloc(1000));  // more than drivers allow allocations
  const kestrel_memory_stats filled = stats();
  EXPECT_EQ(filled.alloc_count, before.alloc_count + 5000);
  EXPECT_GE(filled.allocated, before.allocated + 5000 * 1000);
  EXPECT_LE(filled.reserved, before.reserved + (128ull << 20)) << "small buffers share large blocks";
  for (kestrel_buffer* b : small) release(b);
  kestrel_buffer* big = alloc(100ull << 20);
  EXPECT_GE(stats().allocated, before.allocated + (100ull << 20));
  release(big);
  EXPECT_OK(vk()->memory_trim(context));
  const kestrel_memory_stats trimmed = stats();
  EXPECT_EQ(trimmed.allocated, 0u);
  EXPECT_EQ(trimmed.alloc_count, 0u);
  EXPECT_EQ(trimmed.reserved, 0u);
  EXPECT_GE(trimmed.peak_allocated, 100ull << 20);
}

TEST_F(VulkanPlugin, ThousandsOfLaunchesWithoutASyncRunInOrder) {
  const int64_t n = 1000;
  kestrel_buffer *x = upload(std::vector<float>(n, 0.0f)), *one = upload(std::vector<float>(n, 1.0f));
  const kestrel_op op = increment(x, one, n);
  for (int i = 0; i < 1500; ++i) launch(op);  // many batches in flight, the ring reused
  const std::vector<float> v = download(x, n);
  EXPECT_EQ(v.front(), 1500.0f);
  EXPECT_EQ(v.back(), 1500.0f);
}

TEST_F(VulkanPlugin, CopiesLargerThanTheUploadSpaceAndOverlappingCopies) {
  const size_t n = 10u << 20;  // 40 MB, more than one batch's upload space
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float(i % 100003);
  kestrel_buffer* b = upload(h);
  EXPECT_EQ(download(b, n), h);

  // memmove semantics both ways within one buffer
  EXPECT_OK(vk()->copy_device_to_device(stream, b, 4 * 10, b, 0, 4 * 1000));
  std::vector<float> v = download(b, 2000);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(v[10 + i], h[i]) << "forward overlap at " << i;
  std::vector<float> counting(2000);
  for (int i = 0; i < 2000; ++i) counting[i] = float(i);
  EXPECT_OK(vk()->copy_host_to_device(stream, b, 0, counting.data(), 4 * 2000));
  EXPECT_OK(vk()->copy_device_to_device(stream, b, 0, b, 4 * 10, 4 * 1000));
  v = download(b, 2000);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(v[i], float(i + 10)) << "backward overlap at " << i;
}

TEST_F(VulkanPlugin, ManySmallCopiesWithoutASync) {
  const int n = 1000;
  kestrel_buffer *b = alloc(n * 4), *c = alloc(n * 4);
  for (int i = 0; i < n; ++i) {
    const float value = float(i) * 2;  // the host's copy may change right after the call
    EXPECT_OK(vk()->copy_host_to_device(stream, b, i * 4, &value, 4));
  }
  for (int i = 0; i < n; ++i) EXPECT_OK(vk()->copy_device_to_device(stream, c, (n - 1 - i) * 4, b, i * 4, 4));
  const std::vector<float> v = download(c, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(v[n - 1 - i], float(i) * 2) << i;
}

TEST_F(VulkanPlugin, EventsOrderWorkAcrossStreams) {
  kestrel_buffer *x = alloc(4096), *y = alloc(4096);
  const kestrel_fill_params three{sizeof(kestrel_fill_params), 3.0};
  launch(make_op(KESTREL_OP_FILL, &three, {}, {tensor(x, {1024})}));
  kestrel_event* event = nullptr;
  EXPECT_OK(vk()->event_create(context, &event));
  EXPECT_OK(vk()->event_synchronize(event));  // never recorded: nothing to wait for
  EXPECT_OK(vk()->event_record(event, stream));
  EXPECT_OK(vk()->stream_wait_event(other, event));
  EXPECT_OK(vk()->copy_device_to_device(other, y, 0, x, 0, 4096));
  release(x);  // stream-ordered: the copy above still reads it
  kestrel_buffer* z = alloc(4096);  // may reuse x's memory, but only after the copy
  const std::vector<float> sevens(1024, 7.0f);
  EXPECT_OK(vk()->copy_host_to_device(stream, z, 0, sevens.data(), 4096));
  EXPECT_EQ(download(y, 1024, other), std::vector<float>(1024, 3.0f));
  EXPECT_OK(vk()->event_synchronize(event));
  vk()->event_destroy(event);
}

TEST_F(VulkanPlugin, SoftmaxOnLongRows) {
  const int64_t rows = 3, cols = 300001;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-10, 10);
  std::vector<float> h(rows * cols);
  for (float& value : h) value = uniform(rng);
  kestrel_buffer *in = upload(h), *out = alloc(h.size() * 4);
  for (int32_t log : {0, 1}) {
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    const kestrel_softmax_params params{sizeof(kestrel_softmax_params), log};
    const kestrel_op op = make_op(KESTREL_OP_SOFTMAX, &params, {tensor(in, {rows, cols})}, {tensor(out, {rows, cols})});
    ASSERT_TRUE(vk()->supports_op(context, &op));
    launch(op);
    const std::vector<float> v = download(out, h.size());
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = &h[r * cols];
      const double top = *std::max_element(row, row + cols);
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) sum += std::exp(row[j] - top);
      for (int64_t j = 0; j < cols; j += 997) {
        const double want = log ? row[j] - top - std::log(sum) : std::exp(row[j] - top) / sum;
        ASSERT_NEAR(v[r * cols + j], want, 1e-4 * std::max(1.0, std::abs(want))) << r << ", " << j;
      }
    }
  }
}

TEST_F(VulkanPlugin, ABadLabelIsReportedAtTheNextSyncOnce) {
  std::vector<float> logits(20);
  for (int i = 0; i < 20; ++i) logits[i] = float(i % 7) * 0.25f;
  const std::vector<int64_t> labels{0, 4, 7, 1};
  kestrel_buffer *lg = upload(logits), *lb = upload(labels), *loss = alloc(16), *grad = alloc(80);
  launch(make_op(KESTREL_OP_SOFTMAX_CROSS_ENTROPY, nullptr,
                 {tensor(lg, {4, 5}), tensor(lb, {4}, KESTREL_DTYPE_I64)}, {tensor(loss, {4}), tensor(grad, {4, 5})}));
  EXPECT_EQ(vk()->stream_synchronize(stream), KESTREL_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vk()->last_error()).find("label 7 is out of range for 5 classes"), std::string::npos)
      << vk()->last_error();
  const std::vector<float> v = download(loss, 4);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_FALSE(std::isnan(v[0]) || std::isnan(v[1]) || std::isnan(v[3]));
  EXPECT_OK(vk()->stream_synchronize(stream));  // reported once
}

// ---- capture and replay ----

TEST_F(VulkanPlugin, ReplaysRunInOrderWithoutWaitingAndOnAnyStream) {
  const int64_t n = 4096;
  kestrel_buffer *x = upload(std::vector<float>(n, 0.0f)), *one = upload(std::vector<float>(n, 1.0f));
  const kestrel_op op = increment(x, one, n);
  ASSERT_EQ(vk()->capture_begin(stream), KESTREL_STATUS_OK) << vk()->last_error();
  for (int i = 0; i < 300; ++i) launch(op);  // several chunks
  kestrel_graph* graph = nullptr;
  ASSERT_EQ(vk()->capture_end(stream, &graph), KESTREL_STATUS_OK) << vk()->last_error();
  EXPECT_EQ(download(x, 1)[0], 0.0f) << "capturing runs nothing";
  for (int replay = 0; replay < 10; ++replay) EXPECT_OK(vk()->graph_launch(graph, stream));
  launch(op);  // eager work after the replays runs after them
  EXPECT_EQ(download(x, n).back(), 3001.0f);
  EXPECT_OK(vk()->graph_launch(graph, other));
  EXPECT_EQ(download(x, n, other).back(), 3301.0f);
  vk()->graph_destroy(graph);
}

TEST_F(VulkanPlugin, GraphMemoryStaysWithTheGraphUntilItIsDestroyed) {
  const int64_t n = 1 << 16;
  const uint64_t bytes = n * 4;
  kestrel_buffer *x = upload(std::vector<float>(n, 1.0f)), *y = alloc(bytes);
  const kestrel_memory_stats before = stats();
  const kestrel_unary_params affine{sizeof(kestrel_unary_params), KESTREL_UNARY_AFFINE, 2.0, 5.0};
  ASSERT_EQ(vk()->capture_begin(stream), KESTREL_STATUS_OK) << vk()->last_error();
  kestrel_buffer* temporary = alloc(bytes);  // y = 2x + 5 through a temporary freed inside the capture
  launch(make_op(KESTREL_OP_UNARY, &affine, {tensor(x, {n})}, {tensor(temporary, {n})}));
  EXPECT_OK(vk()->copy_device_to_device(stream, y, 0, temporary, 0, bytes));
  release(temporary);
  kestrel_graph* graph = nullptr;
  ASSERT_EQ(vk()->capture_end(stream, &graph), KESTREL_STATUS_OK) << vk()->last_error();
  const kestrel_memory_stats captured = stats();
  EXPECT_EQ(captured.allocated, before.allocated);
  EXPECT_GE(captured.reserved, before.reserved) << "the graph's memory counts as reserved";

  // A buffer allocated now must not get the temporary's memory, which every replay writes.
  kestrel_buffer* outside = upload(std::vector<float>(n, -1.0f));
  EXPECT_OK(vk()->graph_launch(graph, stream));
  EXPECT_EQ(download(outside, n), std::vector<float>(n, -1.0f));
  EXPECT_EQ(download(y, n), std::vector<float>(n, 7.0f));

  vk()->graph_destroy(graph);
  for (kestrel_buffer* b : std::vector<kestrel_buffer*>(buffers)) release(b);
  EXPECT_OK(vk()->memory_trim(context));
  EXPECT_EQ(stats().reserved, 0u) << "graph_destroy returned the graph's memory";
}

TEST_F(VulkanPlugin, BreakingTheCaptureRulesIsRefusedClearly) {
  kestrel_buffer* x = upload(std::vector<float>(16, 1.0f));
  EXPECT_OK(vk()->stream_synchronize(stream));
  ASSERT_EQ(vk()->capture_begin(stream), KESTREL_STATUS_OK) << vk()->last_error();
  float host[16];
  EXPECT_NE(vk()->copy_device_to_host(stream, host, x, 0, sizeof(host)), KESTREL_STATUS_OK);
  EXPECT_NE(std::string(vk()->last_error()).find("captured"), std::string::npos) << vk()->last_error();
  EXPECT_NE(vk()->copy_host_to_device(stream, x, 0, host, sizeof(host)), KESTREL_STATUS_OK);
  EXPECT_NE(vk()->stream_synchronize(stream), KESTREL_STATUS_OK);
  EXPECT_NE(std::string(vk()->last_error()).find("captured"), std::string::npos) << vk()->last_error();
  EXPECT_NE(vk()->memory_trim(context), KESTREL_STATUS_OK);
  EXPECT_NE(vk()->capture_begin(other), KESTREL_STATUS_OK) << "one capture per context";
  kestrel_buffer* kept = alloc(64);
  kestrel_graph* graph = nullptr;
  EXPECT_EQ(vk()->capture_end(stream, &graph), KESTREL_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vk()->last_error()).find("1 buffer(s) allocated during the capture are still allocated"),
            std::string::npos)
      << vk()->last_error();
  release(kept);
  // The stream works as before.
  const kestrel_fill_params two{sizeof(kestrel_fill_params), 2.0};
  launch(make_op(KESTREL_OP_FILL, &two, {}, {tensor(x, {16})}));
  EXPECT_EQ(download(x, 16), std::vector<float>(16, 2.0f));
  EXPECT_OK(vk()->memory_trim(context));
}

TEST_F(VulkanPlugin, DeviceFoundErrorsInAReplayAreReportedAtTheNextSync) {
  std::vector<float> logits(20, 0.5f);
  kestrel_buffer *lg = upload(logits), *lb = upload(std::vector<int64_t>{0, 4, 2, 1}), *loss = alloc(16);
  kestrel_buffer *data = upload(std::vector<float>{10, 20, 30}), *index = upload(std::vector<int64_t>{2, 0}),
                 *gathered = alloc(8);
  const kestrel_index_params axis0{sizeof(kestrel_index_params), 0};
  ASSERT_EQ(vk()->capture_begin(stream), KESTREL_STATUS_OK) << vk()->last_error();
  launch(make_op(KESTREL_OP_SOFTMAX_CROSS_ENTROPY, nullptr, {tensor(lg, {4, 5}), tensor(lb, {4}, KESTREL_DTYPE_I64)},
                 {tensor(loss, {4})}));
  launch(make_op(KESTREL_OP_GATHER, &axis0, {tensor(data, {3}), tensor(index, {2}, KESTREL_DTYPE_I64)},
                 {tensor(gathered, {2})}));
  kestrel_graph* graph = nullptr;
  ASSERT_EQ(vk()->capture_end(stream, &graph), KESTREL_STATUS_OK) << vk()->last_error();

  EXPECT_OK(vk()->graph_launch(graph, stream));
  EXPECT_OK(vk()->stream_synchronize(stream));
  EXPECT_EQ(download(gathered, 2), (std::vector<float>{30, 10}));

  const std::vector<int64_t> bad_label{0, 9, 2, 1}, bad_index{2, -3};
  EXPECT_OK(vk()->copy_host_to_device(stream, lb, 0, bad_label.data(), 32));
  EXPECT_OK(vk()->copy_host_to_device(stream, index, 0, bad_index.data(), 16));
  EXPECT_OK(vk()->graph_launch(graph, stream));
  EXPECT_EQ(vk()->stream_synchronize(stream), KESTREL_STATUS_INVALID_ARGUMENT);
  const std::string first = vk()->last_error();
  EXPECT_NE(first.find("out of range"), std::string::npos) << first;
  EXPECT_OK(vk()->stream_synchronize(stream));  // every flag was read and cleared
  EXPECT_TRUE(std::isnan(download(loss, 4)[1]));

  EXPECT_OK(vk()->copy_host_to_device(stream, lb, 0, std::vector<int64_t>{0, 4, 2, 1}.data(), 32));
  EXPECT_OK(vk()->graph_launch(graph, stream));
  EXPECT_EQ(vk()->stream_synchronize(stream), KESTREL_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vk()->last_error()).find("index -3 is out of range for an axis of size 3"), std::string::npos)
      << vk()->last_error();
  vk()->graph_destroy(graph);
}

// ---- the pipeline cache file ----

// Sets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    had_ = std::getenv(name) != nullptr;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(VulkanPlugin, PipelineCacheIsSavedAndADamagedFileIsReplaced) {
  namespace fs = std::filesystem;
  const fs::path home = fs::temp_directory_path() / ("kestrel_pipeline_cache_" + std::to_string(::getpid()));
  fs::remove_all(home);
  ScopedEnv cache_home("XDG_CACHE_HOME", home.string());
  // A context that compiles one pipeline and is destroyed, saving its cache.
  auto run_once = [&] {
    kestrel_context* ctx = nullptr;
    kestrel_stream* s = nullptr;
    ASSERT_EQ(vk()->context_create(0, &ctx), KESTREL_STATUS_OK) << vk()->last_error();
    ASSERT_EQ(vk()->stream_create(ctx, &s), KESTREL_STATUS_OK) << vk()->last_error();
    kestrel_buffer* b = nullptr;
    EXPECT_OK(vk()->buffer_alloc(ctx, 64, &b));
    const kestrel_fill_params one{sizeof(kestrel_fill_params), 1.0};
    const kestrel_op op = make_op(KESTREL_OP_FILL, &one, {}, {tensor(b, {16})});
    EXPECT_OK(vk()->launch(s, &op));
    EXPECT_OK(vk()->stream_synchronize(s));
    vk()->buffer_free(b);
    vk()->stream_destroy(s);
    vk()->context_destroy(ctx);
  };
  auto cache_files = [&] {
    std::vector<fs::path> files;
    if (fs::exists(home / "kestrel"))
      for (const auto& entry : fs::directory_iterator(home / "kestrel")) files.push_back(entry.path());
    return files;
  };

  {
    ScopedEnv off("KESTREL_VULKAN_PIPELINE_CACHE", "0");
    run_once();
    EXPECT_TRUE(cache_files().empty()) << "KESTREL_VULKAN_PIPELINE_CACHE=0 writes nothing";
  }
  run_once();
  std::vector<fs::path> files = cache_files();
  ASSERT_EQ(files.size(), 1u) << "one file, no temporaries left behind";
  EXPECT_EQ(files[0].filename().string().rfind("vulkan-pipelines-", 0), 0u) << files[0];
  const std::string saved = read_file(files[0]);
  ASSERT_GE(saved.size(), 8u);

  std::ofstream(files[0], std::ios::binary | std::ios::trunc) << "not a pipeline cache";
  run_once();  // ignores the damaged file and writes a good one
  EXPECT_EQ(read_file(files[0]).substr(0, 8), saved.substr(0, 8));
  EXPECT_EQ(cache_files().size(), 1u);
  fs::remove_all(home);
}

}  // namespace

// KESTREL_VULKAN_PROFILE=1 times the dispatches of every replay of a captured step, not only eager work:
// runs of two, three and four steps (the first eager, the second captured, the others replays) differ in
// their profiled launches by one replayed step each. Outside its graph a step launches only the optimizer
// update and a fill; fashion_mlp's forward and backward are dozens of dispatches more.
TEST_F(VulkanPlugin, TheProfileTimesReplayedSteps) {
  auto profiled_launches = [](int steps) -> long {
    const std::string out = (std::filesystem::temp_directory_path() / "kestrel_vulkan_profile").string();
    CliRun r = run_command(std::string("KESTREL_VULKAN_PROFILE=1 ") + KESTREL_CLI + " train " + KESTREL_SOURCE_DIR +
                           "/models/fashion_mlp.train.json --backend vulkan --train-subset " + std::to_string(64 * steps) +
                           " --test-subset 64 --batch-size 64 --epochs 1 --quiet --out " + out);
    EXPECT_EQ(r.status, 0) << r.output;
    const size_t line = r.output.find("(all shaders)");
    if (line == std::string::npos) {
      ADD_FAILURE() << "no profile total in:\n" << r.output;
      return -1;
    }
    const size_t start = r.output.rfind('\n', line) + 1;
    double seconds = 0;
    long launches = -1;
    std::sscanf(r.output.c_str() + start, "%lf %ld", &seconds, &launches);
    EXPECT_NE(r.output.find("(batches, first dispatch's start"), std::string::npos) << r.output;
    return launches;
  };
  const long two = profiled_launches(2), three = profiled_launches(3), four = profiled_launches(4);
  EXPECT_GE(three - two, 20) << two << " " << three << " " << four;
  EXPECT_EQ(four - three, three - two) << two << " " << three << " " << four;
}
