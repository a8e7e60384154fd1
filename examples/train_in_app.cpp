// Embedding Kestrel in an application: train, evaluate and predict in a few lines, then the same model
// driven by hand (forward, loss, backward, optimizer step) for custom loops.
//
//   build/bin/train_in_app models/fashion_mlp.train.json
#include <kestrel/functional.h>
#include <kestrel/trainer.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s RUN_CONFIG.json [OUT_DIR]\n", argv[0]);
    return 2;
  }
  try {
    // 1. The trainer: a run config (model, data, optimizer) on the best available backend.
    kestrel::RunConfig config = kestrel::RunConfig::load(argv[1]);
    config.epochs = 1;
    config.data.train_subset = 3000;  // a quick demonstration
    config.data.test_subset = 500;
    config.out_dir = argc > 2 ? argv[2] : "runs/train_in_app";
    kestrel::Trainer trainer(config);
    kestrel::TrainOptions options;
    options.quiet = true;
    kestrel::TrainSummary summary = trainer.fit(options);
    std::printf("trained on %s: test accuracy %.1f%%\n", summary.device.c_str(), summary.test.accuracy * 100);
    for (const kestrel::Prediction& p : trainer.predict(3))
      std::printf("  true %-12s predicted %-12s (%.0f%%)\n", trainer.class_name(p.label).c_str(),
                  trainer.class_name(p.top[0].first).c_str(), p.top[0].second * 100);

    // 2. By hand: one more optimizer step on a batch of the first 64 training samples.
    kestrel::Model& model = trainer.model();
    const auto& data = trainer.train_data();
    kestrel::Shape shape{64};
    shape.insert(shape.end(), data.sample_shape.begin(), data.sample_shape.end());
    kestrel::Tensor x = kestrel::Tensor::from_vector(
        std::vector<float>(data.features.begin(), data.features.begin() + 64 * data.sample_numel()), shape, model.device());
    kestrel::Tensor y = kestrel::Tensor::from_vector(
        std::vector<int64_t>(data.labels.begin(), data.labels.begin() + 64), {64}, model.device());
    kestrel::Optimizer sgd({kestrel::OptimizerKind::sgd, 0.01}, model.flat_parameters(), model.flat_gradients());
    uint64_t rng_offset = 0;
    model.zero_grad();
    kestrel::Var loss = kestrel::fn::cross_entropy(model.forward(x, true, 7, rng_offset), y);
    kestrel::backward(loss);
    sgd.step(0.01);
    std::printf("hand-written step: loss %.4f\n", loss.value().to_doubles()[0]);
    return summary.test.accuracy > 0.6 ? 0 : 1;
  } catch (const kestrel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
