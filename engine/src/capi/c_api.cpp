// The C API (kestrel/c_api.h): errors, devices, tensors and run configs. Training is in c_trainer.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "c_boundary.h"
#include "c_objects.h"
#include "kestrel/engine.h"

namespace kestrel::capi {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

// Copies `text` into a fixed C buffer, cut to fit and NUL-terminated.
void copy_text(char* out, size_t size, const std::string& text) {
  const size_t n = std::min(size - 1, text.size());
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

Device device_named(const char* name) {
  need(name, "the device name");
  Engine& engine = Engine::global();
  const std::string spec = name;
  return spec == "auto" ? engine.best_device() : engine.device(spec);
}

}  // namespace kestrel::capi

using namespace kestrel;
using namespace kestrel::capi;

extern "C" {

const char* kes_last_error(void) { return last_error().c_str(); }

const char* kes_version(void) { return KESTREL_VERSION; }

kes_status kes_devices(kes_device_info* devices, int32_t capacity, int32_t* count) {
  return guarded([&] {
    need(count, "count");
    if (capacity < 0 || (capacity > 0 && !devices)) throw InvalidArgument("kes_devices: no room for the devices");
    Engine& engine = Engine::global();
    int32_t n = 0;
    for (const std::string& backend : engine.available_backends())
      for (int i = 0; i < engine.device_count(backend); ++i, ++n) {
        if (n >= capacity) continue;
        const Device device = engine.device(fmt::format("{}:{}", backend, i));
        const DeviceInfo info = engine.properties(device);
        kes_device_info& out = devices[n];
        copy_text(out.id, sizeof out.id, device.str());
        copy_text(out.name, sizeof out.name, info.name);
        copy_text(out.kind, sizeof out.kind, info.kind);
        copy_text(out.runtime, sizeof out.runtime, info.runtime);
        out.memory_total = info.memory_total;
        out.memory_free = info.memory_free;
        out.compute_units = info.compute_units;
      }
    *count = n;
  });
}

kes_status kes_device_memory(const char* device, kes_memory_stats* stats) {
  return guarded([&] {
    need(stats, "stats");
    const MemoryStats m = Engine::global().memory_stats(device_named(device));
    *stats = {m.allocated, m.reserved, m.peak_allocated};
  });
}

kes_status kes_tensor_create(const char* device, kes_dtype dtype, const int64_t* shape, int32_t rank, const void* data,
                             kes_tensor** tensor) {
  return guarded([&] {
    need(tensor, "tensor");
    need(data, "data");
    if (rank < 0 || rank > KESTREL_MAX_RANK || (rank > 0 && !shape))
      throw InvalidArgument(fmt::format("kes_tensor_create: rank {} (0 to {}, with a shape)", rank, KESTREL_MAX_RANK));
    if (dtype != KES_F32 && dtype != KES_I64) throw InvalidArgument("kes_tensor_create: dtype is KES_F32 or KES_I64");
    Shape dims(shape, shape + rank);
    for (int64_t d : dims)
      if (d < 0 || d > (int64_t{1} << 40)) throw InvalidArgument(fmt::format("kes_tensor_create: extent {} out of range", d));
    Tensor made = Tensor::from_host(data, dims, dtype == KES_F32 ? DType::f32 : DType::i64, device_named(device));
    *tensor = new kes_tensor{std::move(made)};
  });
}

kes_status kes_tensor_shape(const kes_tensor* tensor, int32_t* rank, int64_t* shape) {
  return guarded([&] {
    need(tensor, "tensor");
    need(rank, "rank");
    *rank = tensor->value.rank();
    if (shape) std::copy(tensor->value.shape().begin(), tensor->value.shape().end(), shape);
  });
}

kes_status kes_tensor_read(const kes_tensor* tensor, float* data, size_t capacity) {
  return guarded([&] {
    need(tensor, "tensor");
    need(data, "data");
    if (capacity < size_t(tensor->value.numel()))
      throw InvalidArgument(fmt::format("kes_tensor_read: room for {} floats, the tensor has {}", capacity,
                                        tensor->value.numel()));
    const std::vector<double> values = tensor->value.to_doubles();
    std::transform(values.begin(), values.end(), data, [](double v) { return static_cast<float>(v); });
  });
}

void kes_tensor_free(kes_tensor* tensor) { delete tensor; }

kes_status kes_config_load(const char* path, kes_config** config) {
  return guarded([&] {
    need(path, "path");
    need(config, "config");
    *config = new kes_config{RunConfig::load(path)};
  });
}

kes_status kes_config_parse(const char* json, const char* base_dir, kes_config** config) {
  return guarded([&] {
    need(json, "json");
    need(config, "config");
    // The source names a file in base_dir, against which relative paths (the model, data) resolve.
    const std::string source = std::string(base_dir && *base_dir ? base_dir : ".") + "/(run config text)";
    *config = new kes_config{RunConfig::parse(json, source)};
  });
}

kes_status kes_config_set_int(kes_config* config, const char* key, int64_t value) {
  return guarded([&] {
    need(config, "config");
    need(key, "key");
    RunConfig& c = config->value;
    const std::string k = key;
    auto at_least = [&](int64_t low) {
      if (value < low) throw InvalidArgument(fmt::format("kes_config_set_int: {} must be >= {}, got {}", k, low, value));
      return value;
    };
    if (k == "epochs") c.epochs = at_least(1);
    else if (k == "batch_size") c.batch_size = at_least(1);
    else if (k == "max_steps") c.max_steps = at_least(0);
    else if (k == "seed") c.seed = static_cast<uint64_t>(at_least(0));
    else if (k == "accumulate_steps") c.set_accumulate_steps(at_least(1));
    else if (k == "train_subset") c.data.train_subset = at_least(0);
    else if (k == "test_subset") c.data.test_subset = at_least(0);
    else
      throw InvalidArgument(fmt::format("kes_config_set_int: no integer setting '{}' (epochs, batch_size, max_steps, seed, "
                                        "accumulate_steps, train_subset, test_subset)",
                                        k));
  });
}

kes_status kes_config_set_text(kes_config* config, const char* key, const char* value) {
  return guarded([&] {
    need(config, "config");
    need(key, "key");
    need(value, "value");
    const std::string k = key;
    if (k == "out") {
      config->value.out_dir = value;
    } else if (k == "backend") {  // "cuda,cpu": a preference list, as --backend
      config->value.set_backends(value);
    } else if (k == "devices") {  // "cuda:0,cuda:1": a rank per device of this process
      config->value.set_devices(value);
    } else if (k == "vocabulary_file") {  // a run's vocabulary.json: generation without the corpus
      config->value.data.vocabulary_file = value;
    } else if (k == "precision") {  // mixed precision: bf16 or f16 products, or f32
      const std::string name = value;
      if (name != "f32" && name != "bf16" && name != "f16")
        throw InvalidArgument(fmt::format("kes_config_set_text: precision '{}' is not f32, bf16 or f16", name));
      config->value.precision = parse_dtype(name);
    } else {
      throw InvalidArgument(fmt::format(
          "kes_config_set_text: no text setting '{}' (out, backend, devices, vocabulary_file, precision)", k));
    }
  });
}

kes_status kes_config_set_number(kes_config* config, const char* key, double value) {
  return guarded([&] {
    need(config, "config");
    need(key, "key");
    const std::string k = key;
    if (k == "clip_grad_norm" || k == "weight_decay") {  // checked with the rest when a trainer is made
      (k == "clip_grad_norm" ? config->value.optimizer.clip_grad_norm : config->value.optimizer.weight_decay) = value;
      return;
    }
    if (k != "lr")
      throw InvalidArgument(
          fmt::format("kes_config_set_number: no number setting '{}' (lr, clip_grad_norm, weight_decay)", k));
    if (!(value >= 0 && value <= kMaxLearningRate))
      throw InvalidArgument(fmt::format("kes_config_set_number: lr must be in [0, {}], got {}", kMaxLearningRate, value));
    config->value.optimizer.lr = value;
  });
}

void kes_config_free(kes_config* config) { delete config; }

}  // extern "C"
