// The C API's training calls (kestrel/c_api.h): a Trainer behind a handle.
#include <cmath>

#include "c_boundary.h"
#include "c_objects.h"
#include "kestrel/autograd.h"

using namespace kestrel;
using namespace kestrel::capi;

extern "C" {

kes_status kes_trainer_create(const kes_config* config, kes_trainer** trainer) {
  return guarded([&] {
    need(config, "config");
    need(trainer, "trainer");
    auto made = std::make_unique<kes_trainer>();
    if (config->value.distributed.devices.empty())
      made->value = std::make_unique<Trainer>(config->value);
    else
      made->ranks = std::make_unique<MultiDeviceTrainer>(config->value);
    made->device = made->first().device().str();
    *trainer = made.release();
  });
}

kes_status kes_trainer_fit(kes_trainer* trainer, int32_t resume, kes_progress_fn progress, void* user_data,
                           kes_summary* summary) {
  return guarded([&] {
    need(trainer, "trainer");
    TrainOptions options;
    options.quiet = true;
    options.resume = resume != 0;
    if (progress)
      options.on_step = [&](const TrainProgress& p) {
        const kes_progress out{p.step, p.total_steps, p.epoch, p.loss, p.accuracy};
        return progress(&out, user_data) == 0;
      };
    const TrainSummary s = trainer->ranks ? trainer->ranks->fit(options) : trainer->value->fit(options);
    if (!summary) return;
    summary->steps = s.steps;
    summary->epochs = s.epochs;
    summary->train_loss = s.train_loss;
    summary->test_loss = s.test.samples ? s.test.loss : NAN;
    summary->test_accuracy = s.test.samples ? s.test.accuracy : NAN;
    summary->samples_per_second = s.samples_per_second;
    summary->cancelled = s.cancelled ? 1 : 0;
    copy_text(summary->out_dir, sizeof summary->out_dir, s.out_dir);
  });
}

kes_status kes_trainer_evaluate(kes_trainer* trainer, kes_evaluation* result) {
  return guarded([&] {
    need(trainer, "trainer");
    need(result, "result");
    const EvalResult r = trainer->ranks ? trainer->ranks->evaluate() : trainer->value->evaluate();
    *result = {r.loss, r.accuracy, r.samples};
  });
}

kes_status kes_trainer_load(kes_trainer* trainer, const char* path) {
  return guarded([&] {
    need(trainer, "trainer");
    need(path, "path");
    if (!trainer->ranks) return trainer->value->load_weights(path);
    for (int r = 0; r < trainer->ranks->size(); ++r) trainer->ranks->rank(r).load_weights(path);
  });
}

kes_status kes_trainer_predict(kes_trainer* trainer, const kes_tensor* inputs, kes_tensor** outputs) {
  return guarded([&] {
    need(trainer, "trainer");
    need(inputs, "inputs");
    need(outputs, "outputs");
    Model& model = trainer->first().model();
    const Tensor& x = inputs->value;
    const Tensor on_device = x.device() == model.device() ? x : x.to(model.device());
    NoGradGuard no_grad;
    uint64_t unused = 0;
    Tensor y = model.forward(on_device, /*training=*/false, 0, unused).value();
    *outputs = new kes_tensor{std::move(y)};
  });
}

const char* kes_trainer_device(const kes_trainer* trainer) { return trainer ? trainer->device.c_str() : ""; }

void kes_trainer_free(kes_trainer* trainer) { delete trainer; }

}  // extern "C"
