// The CPU backend: Kokkos on the default host execution space (Serial with Debian's Kokkos, OpenMP or
// Threads with a Kokkos built that way) and KokkosBlas -> OpenBLAS for matrix products.
//
// Everything runs synchronously on the calling thread's launch: streams are ordered trivially and
// events are not needed (the table leaves them NULL, which the ABI defines as exactly that).
#include <dlfcn.h>
#include <sys/sysinfo.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <new>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "cpu_comm.hpp"
#include "cpu_context.hpp"
#include "cpu_ops.hpp"
#include "kestrel/plugin_table.hpp"

namespace kestrel_cpu {

void Context::trim() {
  for (auto& [bytes, blocks] : free_blocks)
    for (void* block : blocks) std::free(block);
  free_blocks.clear();
  cached = 0;
}

}  // namespace kestrel_cpu

namespace kestrel_cpu {
namespace {

std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, key.size(), key) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(colon + 2);
    }
  return "";
}

uint64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  uint64_t kib = 0;
  std::string unit;
  while (in >> name >> kib >> unit)
    if (name == key + ":") return kib * 1024;
  return 0;
}

std::string instruction_set() {
  std::istringstream flags(" " + cpuinfo_field("flags") + " ");
  std::string arch = "x86_64", flag;
#if defined(__aarch64__)
  arch = "aarch64";
#endif
  while (flags >> flag)
    if (flag == "avx2" || flag == "fma" || flag == "avx512f" || flag == "asimd" || flag == "sve") arch += " " + flag;
  return arch;
}

void copy_string(char* dst, size_t size, const std::string& src) {
  std::strncpy(dst, src.c_str(), size - 1);
  dst[size - 1] = '\0';
}


// ---- ABI entries ----

const char* last_error() { return Boundary::last_error(); }

kestrel_status probe(kestrel_probe_result* result) {
  result->usable = 1;
  result->priority = 10;
  result->reason[0] = '\0';
  return KESTREL_STATUS_OK;
}

kestrel_status initialize() {
  return Boundary::guarded([] {
    // Kokkos cannot be initialised again after finalize, so this library stays loaded for the rest of
    // the process and finalises Kokkos at exit.
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&initialize), &self) && self.dli_fname)
      dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    watch_for_fork();
    if (!Kokkos::is_initialized()) {
      // Without warnings: Kokkos's OpenMP backend otherwise tells every command that OMP_PROC_BIND is
      // unset. Thread placement is the user's to choose (README, "Devices and backends").
#if KOKKOS_VERSION >= 30700
      Kokkos::initialize(Kokkos::InitializationSettings().set_disable_warnings(true));
#else
      Kokkos::InitArguments arguments;
      arguments.disable_warnings = true;
      Kokkos::initialize(arguments);
#endif
      std::atexit([] {
        if (Kokkos::is_initialized() && !in_forked_child()) Kokkos::finalize();
      });
    }
    // Counted now, before any GEMM: OpenBLAS's OpenMP build sets OpenMP's default thread count when a small
    // product asks it for one thread, and host_threads() reads that default.
    (void)host_threads();
  });
}

// KESTREL_CPU_DEVICES=N shows the host as N devices (like XLA's forced host device count), so
// multi-device code paths (copies between devices, data parallelism) can be exercised without GPUs.
int32_t configured_device_count() {
  const char* value = std::getenv("KESTREL_CPU_DEVICES");
  int parsed = value ? std::atoi(value) : 1;
  return parsed >= 1 && parsed <= 64 ? parsed : 1;
}

kestrel_status device_count(int32_t* count) {
  *count = configured_device_count();
  return KESTREL_STATUS_OK;
}

void check_device(int32_t device) {
  if (device < 0 || device >= configured_device_count())
    fail("no device cpu:" + std::to_string(device) + "; set KESTREL_CPU_DEVICES to show the host as several devices");
}

kestrel_status device_properties(int32_t device, kestrel_device_properties* props) {
  return Boundary::guarded([&] {
    check_device(device);
    int hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
    int kokkos_threads = Exec().concurrency();
    std::string model = cpuinfo_field("model name");
    copy_string(props->name, sizeof(props->name), model.empty() ? std::string("CPU") : model);
    props->kind = KESTREL_DEVICE_KIND_CPU;
    struct sysinfo info {};
    sysinfo(&info);
    props->memory_total = uint64_t(info.totalram) * info.mem_unit;
    props->memory_free = meminfo_bytes("MemAvailable");
    copy_string(props->arch, sizeof(props->arch), instruction_set());
    props->compute_units = hardware_threads;
    std::ostringstream runtime;
    runtime << "Kokkos " << KOKKOS_VERSION / 10000 << "." << KOKKOS_VERSION / 100 % 100 << "." << KOKKOS_VERSION % 100
            << " " << Exec::name() << " (" << kokkos_threads << (kokkos_threads == 1 ? " thread)" : " threads)");
    // Which kernels OpenBLAS chose for this CPU (its Prescott fallback is ~5x slower than AVX-512), and
    // whose threads it runs on: OpenMP's are the ones an OpenMP Kokkos shares.
    using CoreName = char* (*)();
    using Parallel = int (*)();
    if (auto core = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"))) {
      runtime << ", OpenBLAS " << core();
      if (auto parallel = reinterpret_cast<Parallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel")))
        runtime << (parallel() == 2 ? " (OpenMP)" : parallel() == 1 ? " (pthreads)" : " (one thread)");
    }
    copy_string(props->runtime, sizeof(props->runtime), runtime.str());
    props->dtype_mask = (1u << KESTREL_DTYPE_COUNT) - 1;
    // OpenBLAS has no preferred row alignment. KESTREL_CPU_GEMM_ROW_ALIGNMENT=<bytes> asks for one as a
    // GPU does, so the engine's padded products (of 16-bit layers) run, and are tested, here too.
    if (props->struct_size >= KESTREL_STRUCT_SIZE(kestrel_device_properties, gemm_row_alignment))
      if (const char* bytes = std::getenv("KESTREL_CPU_GEMM_ROW_ALIGNMENT"))
        props->gemm_row_alignment = uint32_t(std::strtoul(bytes, nullptr, 10));
  });
}

kestrel_status context_create(int32_t device, kestrel_context** context) {
  return Boundary::guarded([&] {
    check_device(device);
    *context = new kestrel_context();
  });
}

void context_destroy(kestrel_context* context) { delete context; }

kestrel_status stream_create(kestrel_context* context, kestrel_stream** stream) {
  return Boundary::guarded([&] { *stream = new kestrel_stream{context}; });
}

void stream_destroy(kestrel_stream* stream) {
  Boundary::guarded([&] { wait_for_collectives(stream); });  // a failure was reported by whoever waited last
  delete stream;
}

kestrel_status stream_synchronize(kestrel_stream* stream) {
  if (stream->recording) {
    Boundary::message() = "stream_synchronize is not allowed while the stream is being captured; end the capture first";
    return KESTREL_STATUS_INVALID_ARGUMENT;
  }
  // Static engines may outlive Kokkos, which is finalised at exit: by then there is nothing to wait for.
  if (Kokkos::is_initialized()) Kokkos::fence();
  return Boundary::guarded([&] { wait_for_collectives(stream); });
}

kestrel_status buffer_alloc(kestrel_context* context, uint64_t bytes, kestrel_buffer** buffer) {
  return Boundary::guarded([&] {
    if (bytes > (uint64_t(1) << 62))  // rounding up would wrap
      fail("out of host memory allocating " + std::to_string(bytes) + " bytes", KESTREL_STATUS_OUT_OF_MEMORY);
    const uint64_t rounded = rounded_size(bytes);
    std::lock_guard<std::mutex> lock(context->mutex);
    const bool capturing = capture_owns_this_thread(*context);
    void* data = capturing ? take_from_capture(*context, rounded) : nullptr;
    auto cached = context->free_blocks.find(rounded);
    if (data) {
      // reused inside the capture that freed it
    } else if (cached != context->free_blocks.end() && !cached->second.empty()) {
      data = cached->second.back();
      cached->second.pop_back();
      context->cached -= rounded;
    } else {
      data = std::aligned_alloc(64, rounded);
      if (!data && context->cached) {  // give the cache back and try once more
        context->trim();
        data = std::aligned_alloc(64, rounded);
      }
      if (!data)
        fail("out of host memory allocating " + std::to_string(bytes) + " bytes", KESTREL_STATUS_OUT_OF_MEMORY);
    }
    *buffer = new kestrel_buffer{context, data, bytes};
    if (capturing) note_capture_allocation(*context, *buffer);
    context->allocated += rounded;
    context->count += 1;
    context->peak = std::max(context->peak, context->allocated);
  });
}

// The CPU's buffers are host memory: the engine may hand them out in place (numpy views, DLPack).
void* buffer_host_address(kestrel_buffer* buffer) { return buffer->data; }

void buffer_free(kestrel_buffer* buffer) noexcept {
  if (!buffer) return;
  kestrel_context* context = static_cast<kestrel_context*>(buffer->context);
  const uint64_t rounded = rounded_size(buffer->bytes);
  {
    std::lock_guard<std::mutex> lock(context->mutex);
    context->allocated -= rounded;
    context->count -= 1;
    try {  // kept for reuse; with no host memory left for the lists that keep it, given back
      if (capture_owns_this_thread(*context)) {
        give_to_capture(*context, buffer, rounded);
      } else {
        context->free_blocks[rounded].push_back(buffer->data);
        context->cached += rounded;
      }
    } catch (const std::bad_alloc&) {
      std::free(buffer->data);
    }
  }
  delete buffer;
}

kestrel_status copy_host_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset,
                                   const void* src, uint64_t bytes) {
  return Boundary::guarded([&] {
    if (stream->recording) refuse_while_capturing("copy_host_to_device");
    wait_for_collectives(stream);
    kestrel::plugin_sdk::check_copy_range(dst, dst_offset, bytes, "copy_host_to_device");
    std::memcpy(static_cast<char*>(dst->data) + dst_offset, src, bytes);
  });
}

kestrel_status copy_device_to_host(kestrel_stream* stream, void* dst, kestrel_buffer* src, uint64_t src_offset,
                                   uint64_t bytes) {
  return Boundary::guarded([&] {
    if (stream->recording) refuse_while_capturing("copy_device_to_host");
    wait_for_collectives(stream);
    kestrel::plugin_sdk::check_copy_range(src, src_offset, bytes, "copy_device_to_host");
    std::memcpy(dst, static_cast<const char*>(src->data) + src_offset, bytes);
  });
}

kestrel_status copy_device_to_device(kestrel_stream* stream, kestrel_buffer* dst, uint64_t dst_offset,
                                     kestrel_buffer* src, uint64_t src_offset, uint64_t bytes) {
  return Boundary::guarded([&] {
    kestrel::plugin_sdk::check_copy_range(dst, dst_offset, bytes, "copy_device_to_device");
    kestrel::plugin_sdk::check_copy_range(src, src_offset, bytes, "copy_device_to_device");
    if (stream->recording) return record_copy(stream, dst, dst_offset, src, src_offset, bytes);
    wait_for_collectives(stream);
    std::memmove(static_cast<char*>(dst->data) + dst_offset, static_cast<const char*>(src->data) + src_offset, bytes);
  });
}

kestrel_status memory_stats(kestrel_context* context, kestrel_memory_stats* stats) {
  std::lock_guard<std::mutex> lock(context->mutex);
  stats->allocated = context->allocated;
  stats->reserved = context->allocated + context->cached + context->held_by_graphs;
  stats->peak_allocated = context->peak;
  stats->alloc_count = context->count;
  return KESTREL_STATUS_OK;
}

kestrel_status memory_trim(kestrel_context* context) {
  std::lock_guard<std::mutex> lock(context->mutex);
  // A capture's memory is its own (held_by_graphs); only the shared cache is released.
  context->trim();
  return KESTREL_STATUS_OK;
}

kestrel_status memory_reset_peak(kestrel_context* context) {
  std::lock_guard<std::mutex> lock(context->mutex);
  context->peak = context->allocated;
  return KESTREL_STATUS_OK;
}

struct Family {
  bool (*supports)(const kestrel_op&);
  void (*launch)(const kestrel_op&);
};

// Every family, required and fused.
const kestrel::plugin_sdk::FamilyTable<Family> families{KESTREL_REQUIRED_FAMILIES, KESTREL_FAMILY(linear),
                                                        KESTREL_FAMILY(softmax), KESTREL_FAMILY(softmax_cross_entropy),
                                                        KESTREL_FAMILY(optimizer), KESTREL_FAMILY(attention),
                                                        KESTREL_FAMILY(layer_norm), KESTREL_FAMILY(lstm_cell),
                                                        KESTREL_FAMILY(gru_cell), KESTREL_FAMILY(conv)};

int32_t supports_op(kestrel_context*, const kestrel_op* op) { return kestrel::plugin_sdk::supports(families, op); }

kestrel_status launch(kestrel_stream* stream, const kestrel_op* op) {
  return Boundary::guarded([&] {
    if (!op) fail("launch: no op");
    check_op(*op);
    if (stream->recording) {
      record_op(stream, *op);
    } else {
      wait_for_collectives(stream);
      run_op(*op);
    }
  });
}

}  // namespace

void check_op(const kestrel_op& op) {
  kestrel::plugin_sdk::check_launchable(
      supports_op(nullptr, &op), &op, "the cpu backend does not support this op with these dtypes, shapes or strides");
}

void run_op(const kestrel_op& op) {
  auto launch = families.find(op.kind)->launch;
  if (profiling())
    run_profiled(op, launch);
  else
    launch(op);
}

#ifndef KESTREL_CPU_MPI
void wait_for_collectives(kestrel_stream*) {}  // built without MPI: no collective is ever issued
#endif

}  // namespace kestrel_cpu

KESTREL_PLUGIN_ENTRY {
  using namespace kestrel_cpu;
  return kestrel::plugin_sdk::plugin_table("cpu", KESTREL_VERSION, [](kestrel_plugin_api& api) {
    KESTREL_SET_REQUIRED_ENTRIES(api);
    KESTREL_SET_MEMORY_CACHE_ENTRIES(api);
    KESTREL_SET_CAPTURE_ENTRIES(api);
    KESTREL_SET_HOST_ADDRESS_ENTRY(api);
#ifdef KESTREL_CPU_MPI
    KESTREL_SET_COLLECTIVE_ENTRIES(api);
#endif
    api.probe = probe;
    api.initialize = initialize;
  });
}
