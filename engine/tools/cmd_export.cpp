// `kestrel export CONFIG --checkpoint RUN --onnx model.onnx`: a trained model for inference engines.
#include <fmt/format.h>

#include "commands.h"
#include "kestrel/export.h"
#include "kestrel/trainer.h"
#include "run_flags.h"

namespace kestrel::cli {

void add_export_command(CLI::App& app, Action& action) {
  static RunFlags run;
  static std::string onnx_path;
  auto* e = app.add_subcommand("export", "Write a trained model as ONNX (opset 17) for onnxruntime and other engines");
  add_run_flags(e, run);
  e->add_option("--checkpoint", run.checkpoint, "checkpoint.json, a run folder or a .safetensors file")->required();
  e->add_option("--onnx", onnx_path, "The .onnx file to write")->required();
  e->callback([&action] {
    action = [] {
      Trainer trainer(resolve(run));  // checks the checkpoint against the run config's model and data
      trainer.load_weights(run.checkpoint);
      export_onnx(trainer.model(), onnx_path);
      const ModelSpec& spec = trainer.model().spec();
      fmt::print("wrote {}: {} ({} parameters) from {}; input \"input\": {} samples of shape {}, any batch size\n",
                 onnx_path, spec.name(), spec.parameter_count(), run.checkpoint, dtype_name(spec.input_dtype()),
                 shape_str(spec.input_shape()));
      return 0;
    };
  });
}

}  // namespace kestrel::cli
