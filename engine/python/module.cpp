// The `kestrel` Python module (pybind11) on the C++ API: devices and memory statistics, tensors to and from
// numpy, run configs, and the trainer with a progress callback. Errors arrive as Python exceptions
// carrying the engine's message (ValueError for bad input, MemoryError, RuntimeError otherwise).
#include <fmt/format.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>

#include "kestrel/autograd.h"
#include "kestrel/engine.h"
#include "kestrel/export.h"
#include "kestrel/generate.h"
#include "kestrel/memory_plan.h"
#include "host_views.h"
#include "kestrel/trainer.h"

namespace py = pybind11;
using namespace kestrel;

namespace {

Device device_named(const std::string& name) {
  Engine& engine = Engine::global();
  return name == "auto" ? engine.best_device() : engine.device(name);
}

py::dict device_dict(const Device& device) {
  const DeviceInfo info = Engine::global().properties(device);
  py::list dtypes;
  for (DType d : info.dtypes) dtypes.append(dtype_name(d));
  py::dict out;
  out["id"] = device.str();
  out["name"] = info.name;
  out["kind"] = info.kind;
  out["memory_total"] = info.memory_total;
  out["memory_free"] = info.memory_free;
  out["compute_units"] = info.compute_units;
  out["arch"] = info.arch;
  out["runtime"] = info.runtime;
  out["dtypes"] = dtypes;
  return out;
}

py::list devices() {
  Engine& engine = Engine::global();
  py::list out;
  for (const std::string& backend : engine.available_backends())
    for (int i = 0; i < engine.device_count(backend); ++i) out.append(device_dict(engine.device(backend + ":" + std::to_string(i))));
  return out;
}

py::dict memory_stats(const std::string& device) {
  const MemoryStats m = Engine::global().memory_stats(device_named(device));
  py::dict out;
  out["allocated"] = m.allocated;
  out["reserved"] = m.reserved;
  out["peak_allocated"] = m.peak_allocated;
  out["alloc_count"] = m.alloc_count;
  return out;
}

// A numpy array (float32 or int64; other numeric types are converted to float32) -> a tensor on `device`.
Tensor from_numpy(const py::array& array, const std::string& device) {
  const bool integral = py::dtype::of<int64_t>().is(array.dtype()) || array.dtype().kind() == 'i' ||
                        array.dtype().kind() == 'u';
  Shape shape(array.shape(), array.shape() + array.ndim());
  if (integral) {
    if (array.dtype().kind() == 'u' && array.dtype().itemsize() == 8) {  // uint64 past 2^63 - 1 would wrap
      auto values = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(array);
      const uint64_t* v = values.data();
      for (py::ssize_t i = 0; i < values.size(); ++i)
        if (v[i] > uint64_t(std::numeric_limits<int64_t>::max()))
          throw InvalidArgument(fmt::format("Tensor.from_numpy: element {} of the uint64 array is {}, beyond int64 "
                                            "(tensors hold integers as int64)",
                                            i, v[i]));
    }
    auto contiguous = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
    if (!contiguous) throw InvalidArgument("Tensor.from_numpy: the integer array cannot be read as int64");
    return Tensor::from_host(contiguous.data(), shape, DType::i64, device_named(device));
  }
  auto contiguous = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(array);
  if (!contiguous) throw InvalidArgument("Tensor.from_numpy: the array is not numeric");
  return Tensor::from_host(contiguous.data(), shape, DType::f32, device_named(device));
}

// A tensor -> a new numpy array (f32 tensors as float32, i64 and i32 as int64, others as float32).
py::array to_numpy(const Tensor& tensor) {
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  if (tensor.dtype() == DType::i64 || tensor.dtype() == DType::i32) {
    py::array_t<int64_t> out(shape);
    tensor.copy_to_host_as(DType::i64, out.mutable_data());
    return out;
  }
  py::array_t<float> out(shape);
  tensor.copy_to_host_as(DType::f32, out.mutable_data());
  return out;
}

py::dict summary_dict(const TrainSummary& s) {
  py::dict out;
  out["device"] = s.device;
  out["steps"] = s.steps;
  out["epochs"] = s.epochs;
  out["train_loss"] = s.train_loss;
  out["test_loss"] = s.test.samples ? s.test.loss : NAN;
  out["test_accuracy"] = s.test.samples ? s.test.accuracy : NAN;
  out["samples_per_second"] = s.samples_per_second;
  out["seconds"] = s.seconds;
  out["cancelled"] = s.cancelled;
  out["out_dir"] = s.out_dir;
  return out;
}

py::dict eval_dict(const EvalResult& r) {
  py::dict out;
  out["loss"] = r.loss;
  out["accuracy"] = r.accuracy;
  out["samples"] = r.samples;
  return out;
}

// work()'s result, computed without holding the GIL: the engine's threads (the loader's, other ranks')
// and callbacks that take it themselves go on meanwhile.
template <class Work>
auto without_gil(const Work& work) {
  py::gil_scoped_release no_gil;
  return work();
}

// Trainer or MultiDeviceTrainer: a data-parallel evaluation waits for the other ranks, without the GIL.
template <class AnyTrainer>
py::dict evaluate(AnyTrainer& trainer) {
  return eval_dict(without_gil([&] { return trainer.evaluate(); }));
}

// progress(dict) is called after every optimizer step; returning False stops the run with a checkpoint.
// Trainer or MultiDeviceTrainer (whose rank 0 calls it).
template <class AnyTrainer>
py::dict fit(AnyTrainer& trainer, const std::function<py::object(py::dict)>& progress, bool resume) {
  TrainOptions options;
  options.quiet = true;
  options.resume = resume;
  if (progress)
    options.on_step = [&](const TrainProgress& p) {
      py::gil_scoped_acquire gil;
      py::dict state;
      state["step"] = p.step;
      state["total_steps"] = p.total_steps;
      state["epoch"] = p.epoch;
      state["loss"] = p.loss;
      state["accuracy"] = p.accuracy;
      py::object answer = progress(state);
      return answer.is_none() || answer.cast<bool>();
    };
  return summary_dict(without_gil([&] { return trainer.fit(options); }));
}

py::array predict(Trainer& trainer, const py::array& inputs) {
  Model& model = trainer.model();
  Tensor x = from_numpy(inputs, model.device().str());
  NoGradGuard no_grad;
  uint64_t unused = 0;
  return to_numpy(model.forward(x, false, 0, unused).value());
}

// How many leading bytes of `text` end on a whole UTF-8 character: a byte-level vocabulary's token may be
// part of one, and Python's str takes whole characters only.
size_t whole_characters(const std::string& text) {
  for (size_t back = 1; back <= std::min<size_t>(3, text.size()); ++back) {
    const auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    return length > back ? text.size() - back : text.size();
  }
  return text.size();
}

py::str decoded(const std::string& bytes) {  // invalid sequences as U+FFFD
  PyObject* text = PyUnicode_DecodeUTF8(bytes.data(), py::ssize_t(bytes.size()), "replace");
  if (!text) throw py::error_already_set();  // out of memory
  return py::reinterpret_steal<py::str>(text);
}

// Trainer::plan_memory as a dict; batch_size 0: the config's.
py::dict plan_memory(Trainer& trainer, int64_t batch_size) {
  const MemoryPlan plan = without_gil([&] { return trainer.plan_memory(batch_size); });
  py::dict out;
  out["device"] = plan.device;
  out["batch_size"] = plan.batch_size;
  out["micro_batch"] = plan.micro_batch;
  out["accumulate_steps"] = plan.accumulate_steps;
  out["parameters"] = plan.parameters;
  out["gradients"] = plan.gradients;
  out["optimizer_state"] = plan.optimizer_state;
  out["activations"] = plan.activations;
  out["step_temporary"] = plan.step_temporary;
  out["update_temporary"] = plan.update_temporary;
  out["eval_peak"] = plan.eval_peak;
  out["data_in_flight"] = plan.data_in_flight;
  out["predicted_peak"] = plan.predicted_peak;
  out["device_free"] = plan.device_free;
  out["fits"] = plan.fits;
  out["largest_micro_batch"] = plan.largest_micro_batch;
  out["suggested_accumulate_steps"] = plan.suggested_accumulate_steps;
  out["report"] = plan.report();
  return out;
}

// kestrel generate's sampling on the trainer's model (trained, or loaded with Trainer.load); on_text(str),
// where given, receives the text as it is sampled, whole characters at a time.
py::dict generate_text(Trainer& trainer, const std::string& prompt, int64_t tokens, double temperature, int64_t top_k,
                       uint64_t seed, bool cache, const std::function<void(py::str)>& on_text) {
  if (!trainer.vocabulary())
    throw InvalidArgument(fmt::format("{}: generate needs a language model trained on text data (\"dataset\": \"text\")",
                                      trainer.config().source));
  GenerateOptions options;
  options.prompt = prompt, options.tokens = tokens, options.temperature = temperature, options.top_k = top_k;
  options.seed = seed, options.cache = cache;
  std::string pending;  // sampled, not yet passed on: the start of a character
  std::function<void(const std::string&)> stream;
  if (on_text)
    stream = [&](const std::string& text) {
      pending += text;
      const size_t whole = whole_characters(pending);
      if (whole == 0) return;
      py::gil_scoped_acquire gil;
      on_text(decoded(pending.substr(0, whole)));
      pending.erase(0, whole);
    };
  const GenerateResult result =
      without_gil([&] { return generate(trainer.model(), *trainer.vocabulary(), options, stream); });
  if (!pending.empty()) on_text(decoded(pending));  // a character the model never finished
  py::dict out;
  out["text"] = decoded(result.text);
  out["tokens"] = result.tokens;
  out["seconds"] = result.seconds;
  out["tokens_per_second"] = result.tokens_per_second();
  return out;
}

}  // namespace

PYBIND11_MODULE(_kestrel, m) {
  m.doc() = "Kestrel: train neural networks described in JSON on any backend (cpu, cuda, vulkan)";
  // The engine's errors as Python's: bad input is a ValueError, carrying the engine's message. pybind11
  // tries the translators last registered first, so the base class comes first.
  py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
  py::register_exception<OutOfMemory>(m, "OutOfMemory", PyExc_MemoryError);
  py::register_exception<NonFiniteLossError>(m, "NonFiniteLoss", PyExc_ArithmeticError);
  py::register_exception<InvalidArgument>(m, "InvalidArgument", PyExc_ValueError);

  m.def("devices", &devices, "Every device of every loaded backend, best first, as dicts");
  m.def("memory_stats", &memory_stats, py::arg("device") = "auto",
        "Bytes allocated, reserved and at peak on a device ('cpu', 'cuda:1', 'auto')");

  py::class_<Tensor>(m, "Tensor", "A tensor on a device")
      .def_static("from_numpy", &from_numpy, py::arg("array"), py::arg("device") = "auto",
                  "Copies a numpy array (float32, or int64 token ids) to a device")
      .def(
          "numpy",
          [](const Tensor& t, bool copy) {
            if (!copy)
              if (py::object view = python::numpy_view(t); !view.is_none()) return view;
            return py::object(to_numpy(t));
          },
          py::arg("copy") = false,
          "A numpy array over the tensor's own memory where that is the host's (the cpu backend's: writes "
          "reach the tensor, as torch's Tensor.numpy()); a new array on other devices or with copy=True")
      .def("__dlpack__", [](const Tensor& t, const py::args&, const py::kwargs&) { return python::to_dlpack(t); },
           "DLPack: the tensor's memory without a copy (numpy.from_dlpack, torch.from_dlpack); cpu tensors")
      .def("__dlpack_device__", &python::dlpack_device)
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", [](const Tensor& t) { return dtype_name(t.dtype()); })
      .def_property_readonly("device", [](const Tensor& t) { return t.device().str(); })
      .def("__repr__", &Tensor::describe);

  py::class_<RunConfig>(m, "RunConfig", "A run config (*.train.json): model, data, optimizer, ...")
      .def_static("load", &RunConfig::load, py::arg("path"))
      .def_static("parse", &RunConfig::parse, py::arg("json"), py::arg("source"),
                  "From JSON text; relative paths resolve against the folder of `source`")
      .def_readwrite("epochs", &RunConfig::epochs)
      .def_readwrite("batch_size", &RunConfig::batch_size)
      .def_readwrite("max_steps", &RunConfig::max_steps)
      .def_readwrite("seed", &RunConfig::seed)
      .def_property(
          "accumulate_steps", [](const RunConfig& c) { return c.accumulate_steps; },
          [](RunConfig& c, int64_t steps) { c.set_accumulate_steps(steps); },
          "Micro-batches per optimizer step; setting it replaces \"accumulate_steps\": \"auto\"")
      .def_readwrite("out_dir", &RunConfig::out_dir)
      .def_readwrite("backends", &RunConfig::backends)
      .def_property(
          "devices", [](const RunConfig& c) { return c.distributed.devices; },
          [](RunConfig& c, std::vector<std::string> devices) { c.distributed.devices = std::move(devices); },
          "Several devices of this process, a rank each (MultiDeviceTrainer); empty: one device")
      .def_property(
          "lr", [](const RunConfig& c) { return c.optimizer.lr; }, [](RunConfig& c, double lr) { c.optimizer.lr = lr; })
      .def_property(
          "clip_grad_norm", [](const RunConfig& c) { return c.optimizer.clip_grad_norm; },
          [](RunConfig& c, double norm) { c.optimizer.clip_grad_norm = norm; },
          "Clip the gradients' global L2 norm to this before each update, as torch's clip_grad_norm_ (0: no clipping)")
      .def_property(
          "train_subset", [](const RunConfig& c) { return c.data.train_subset; },
          [](RunConfig& c, int64_t n) { c.data.train_subset = n; })
      .def_property(
          "test_subset", [](const RunConfig& c) { return c.data.test_subset; },
          [](RunConfig& c, int64_t n) { c.data.test_subset = n; })
      .def_property(
          "precision", [](const RunConfig& c) { return std::string(dtype_name(c.precision)); },
          [](RunConfig& c, const std::string& name) {
            if (name != "f32" && name != "bf16" && name != "f16")
              throw InvalidArgument("RunConfig.precision: '" + name + "' is not f32, bf16 or f16");
            c.precision = parse_dtype(name);
          },
          "Mixed precision: \"bf16\" or \"f16\" (with loss scaling) products, f32 master weights; \"f32\": off")
      .def_property(
          "weight_decay", [](const RunConfig& c) { return c.optimizer.weight_decay; },
          [](RunConfig& c, double decay) { c.optimizer.weight_decay = decay; },
          "L2 for sgd and adam, decoupled for adamw")
      .def_property(
          "vocabulary_file", [](const RunConfig& c) { return c.data.vocabulary_file; },
          [](RunConfig& c, std::string path) { c.data.vocabulary_file = std::move(path); },
          "Text data: the vocabulary from a run's vocabulary.json, without reading the corpus (for generating "
          "with a trained model where its corpus is not)")
      .def_readonly("source", &RunConfig::source);

  py::class_<Trainer>(m, "Trainer", "Trains a run config's model on its data")
      .def(py::init([](const RunConfig& config) { return std::make_unique<Trainer>(config); }), py::arg("config"))
      .def(py::init([](const std::string& path) { return std::make_unique<Trainer>(RunConfig::load(path)); }),
           py::arg("path"))
      .def("fit", &fit<Trainer>, py::arg("progress") = nullptr, py::arg("resume") = false,
           "Trains; progress(dict) after every step may return False to stop (a checkpoint is written)")
      .def("evaluate", &evaluate<Trainer>)
      .def("predict", &predict, py::arg("inputs"), "The model's outputs for a batch of inputs (numpy in, numpy out)")
      .def("load", &Trainer::load_weights, py::arg("path"), "Weights from a .safetensors file, checkpoint.json or run folder")
      .def("export_onnx", [](Trainer& t, const std::string& path) { export_onnx(t.model(), path); }, py::arg("path"),
           "Writes the model with its weights as ONNX (opset 17): input 'input', output 'output', any batch size")
      .def("generate", &generate_text, py::arg("prompt"), py::arg("tokens") = 200, py::arg("temperature") = 1.0,
           py::arg("top_k") = 0, py::arg("seed") = 0, py::arg("cache") = true, py::arg("on_text") = nullptr,
           "Continues `prompt` with a language model trained on text, as `kestrel generate` does; on_text(str) "
           "receives the text as it is sampled. Returns {text, tokens, seconds, tokens_per_second}")
      .def("plan_memory", &plan_memory, py::arg("batch_size") = 0,
           "What training and evaluation will hold on the device (as `kestrel plan`): a dict of byte counts, "
           "whether it fits, the largest micro-batch that does, and the printed report")
      .def_property_readonly("device", [](const Trainer& t) { return t.device().str(); })
      .def_property_readonly("parameter_count", [](Trainer& t) { return t.model().spec().parameter_count(); });

  py::class_<MultiDeviceTrainer>(m, "MultiDeviceTrainer",
                                 "Trains a run config data-parallel over the devices its `devices` names, a rank each")
      .def(py::init([](const RunConfig& config) {  // the ranks' threads build their trainers
             return without_gil([&] { return std::make_unique<MultiDeviceTrainer>(config); });
           }),
           py::arg("config"))
      .def("fit", &fit<MultiDeviceTrainer>, py::arg("progress") = nullptr, py::arg("resume") = false,
           "Train on every device; rank 0's summary (progress is called on rank 0's steps)")
      .def("evaluate", &evaluate<MultiDeviceTrainer>)
      .def_property_readonly("size", &MultiDeviceTrainer::size)
      .def("rank", &MultiDeviceTrainer::rank, py::arg("rank"), py::return_value_policy::reference_internal,
           "Rank r's Trainer (its device, model, predictions; evaluate and fit here, which need every rank)");
}
