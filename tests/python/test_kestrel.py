"""The kestrel Python module: devices, tensors through numpy, run configs, training with a progress
callback that stops and resumes a run, evaluation, prediction, weights, and errors as exceptions."""
import json
import math
import os
import pathlib

import numpy as np
import pytest

import kestrel

MODELS = pathlib.Path(os.environ.get("KESTREL_SOURCE_DIR", pathlib.Path(__file__).parents[2])) / "models"


def small_config(tmp_path, epochs=2):
    config = kestrel.RunConfig.load(str(MODELS / "fashion_mlp.train.json"))
    config.epochs = epochs
    config.train_subset = 640
    config.test_subset = 200
    config.backends = ["cpu"]
    config.out_dir = str(tmp_path / "run")
    return config


def test_devices_and_memory():
    devices = kestrel.devices()
    assert any(d["id"] == "cpu:0" for d in devices)
    cpu = next(d for d in devices if d["id"] == "cpu:0")
    assert cpu["memory_total"] > 0 and "f32" in cpu["dtypes"]
    stats = kestrel.memory_stats("cpu")
    assert set(stats) == {"allocated", "reserved", "peak_allocated", "alloc_count"}


def test_tensors_round_trip_through_numpy():
    values = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    tensor = kestrel.Tensor.from_numpy(values, "cpu")
    assert tensor.shape == (3, 4) and tensor.dtype == "f32" and tensor.device == "cpu:0"
    np.testing.assert_array_equal(tensor.numpy(), values)
    ids = kestrel.Tensor.from_numpy(np.array([[1, 2, 3]], dtype=np.int64), "cpu")
    assert ids.dtype == "i64" and ids.numpy().tolist() == [[1, 2, 3]]
    # a float64 array arrives as f32, the engine's compute type
    np.testing.assert_allclose(kestrel.Tensor.from_numpy(np.array([0.5, 1.25])).numpy(), [0.5, 1.25])


def test_cpu_tensors_are_shared_without_a_copy():
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = kestrel.Tensor.from_numpy(values, "cpu")
    view, again = tensor.numpy(), tensor.numpy()
    assert np.shares_memory(view, again), "both views are the tensor's own memory"
    view[1, 2] = 42.0  # a write reaches the tensor, as with torch's Tensor.numpy()
    assert tensor.numpy(copy=True)[1, 2] == 42.0
    copy = tensor.numpy(copy=True)
    assert not np.shares_memory(copy, view)
    # DLPack: numpy reads the same memory; the capsule keeps the tensor alive after its handle goes.
    assert tensor.__dlpack_device__() == (1, 0)
    shared = np.from_dlpack(tensor)
    assert np.shares_memory(shared, view)
    del tensor, view, again
    assert shared.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 42.0]]
    ids = kestrel.Tensor.from_numpy(np.array([[7, 8]], dtype=np.int64), "cpu")
    assert np.from_dlpack(ids).dtype == np.int64 and np.from_dlpack(ids).tolist() == [[7, 8]]
    # Into the engine from any DLPack producer (by copy onto the device).
    back = kestrel.from_dlpack(np.linspace(0, 1, 5, dtype=np.float32), "cpu")
    assert back.shape == (5,) and np.allclose(back.numpy(), np.linspace(0, 1, 5))


def test_train_stop_resume_evaluate_predict(tmp_path):
    trainer = kestrel.Trainer(small_config(tmp_path))
    assert trainer.device == "cpu:0" and trainer.parameter_count == 535818
    seen = []

    def progress(state):
        seen.append(state["step"])
        return state["step"] < 4  # False at step 4: stop there

    stopped = trainer.fit(progress=progress)
    assert stopped["cancelled"] and stopped["steps"] == 4 and seen == [1, 2, 3, 4]
    assert math.isnan(stopped["test_loss"])
    done = trainer.fit(resume=True)
    assert not done["cancelled"] and done["steps"] == 20  # 2 epochs of 10 batches of 64
    assert 0 <= done["test_accuracy"] <= 1
    evaluation = trainer.evaluate()
    assert evaluation["samples"] == 200 and evaluation["loss"] == pytest.approx(done["test_loss"], rel=1e-6)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 20

    images = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
    scores = trainer.predict(images)
    assert scores.shape == (5, 10) and scores.dtype == np.float32

    # Weights from the run folder reproduce the same outputs in a fresh trainer.
    other = kestrel.Trainer(small_config(tmp_path / "other"))
    other.load(str(tmp_path / "run"))
    np.testing.assert_array_equal(other.predict(images), scores)


def test_gradient_clipping_is_set_and_logged(tmp_path):
    config = small_config(tmp_path, epochs=1)
    assert config.clip_grad_norm == 0
    config.clip_grad_norm = 0.5
    config.max_steps = 3
    kestrel.Trainer(config).fit()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    norms = [r["grad_norm"] for r in records if r["kind"] == "train"]
    assert norms and all(n > 0 for n in norms)


def test_generate_streams_text_from_a_trained_language_model(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog, said the café's owner. " * 120)
    (tmp_path / "model.json").write_text(json.dumps({"name": "tiny_lm", "input": {"shape": [32], "dtype": "i64"}, "layers": [
        {"type": "embedding", "num_embeddings": 64, "embedding_dim": 16}, {"type": "gru", "hidden_size": 32},
        {"type": "linear", "out_features": 64}]}))
    run = {"model": "model.json", "data": {"dataset": "text", "path": str(corpus)}, "batch_size": 16, "max_steps": 5,
           "optimizer": {"type": "adam", "lr": 0.01}, "backend": {"preference": ["cpu"]}, "out": "run"}
    config = kestrel.RunConfig.parse(json.dumps(run), str(tmp_path / "run.train.json"))
    trainer = kestrel.Trainer(config)
    trainer.fit()
    pieces = []
    result = trainer.generate("the ", tokens=40, temperature=0.8, top_k=10, seed=7, on_text=pieces.append)
    assert result["tokens"] == 40 and len(result["text"]) == 40 and result["tokens_per_second"] > 0
    assert "".join(pieces) == result["text"]
    # The same seed gives the same text, with and without the cache; the model's state is not left behind.
    assert trainer.generate("the ", tokens=40, temperature=0.8, top_k=10, seed=7)["text"] == result["text"]
    assert trainer.generate("the ", tokens=40, temperature=0.8, top_k=10, seed=7, cache=False)["text"] == result["text"]
    # Where the corpus is not: the run's vocabulary.json and its weights give the same text.
    elsewhere = kestrel.RunConfig.parse(json.dumps(run), str(tmp_path / "run.train.json"))
    elsewhere.vocabulary_file = str(tmp_path / "run" / "vocabulary.json")
    loaded = kestrel.Trainer(elsewhere)
    loaded.load(str(tmp_path / "run"))
    assert loaded.generate("the ", tokens=40, temperature=0.8, top_k=10, seed=7)["text"] == result["text"]
    with pytest.raises(ValueError, match="prompt"):
        trainer.generate("Zebra", tokens=5)  # 'Z' is not in the corpus
    with pytest.raises(ValueError, match="text data"):
        kestrel.Trainer(small_config(tmp_path)).generate("the ", tokens=5)
    # Byte tokens: a character may take several; the stream passes on whole characters (invalid bytes as U+FFFD).
    model = json.loads((tmp_path / "model.json").read_text())
    model["layers"][0]["num_embeddings"] = model["layers"][2]["out_features"] = 256
    (tmp_path / "model.json").write_text(json.dumps(model))
    run["data"]["tokenizer"], run["out"] = "byte", "bytes"
    trainer = kestrel.Trainer(kestrel.RunConfig.parse(json.dumps(run), str(tmp_path / "run.train.json")))
    trainer.fit()
    pieces = []
    result = trainer.generate("café", tokens=60, seed=3, on_text=pieces.append)
    assert result["tokens"] == 60 and "".join(pieces) == result["text"]


def test_plan_memory_precision_and_weight_decay(tmp_path):
    config = small_config(tmp_path, epochs=1)
    assert config.precision == "f32" and config.weight_decay == 0
    config.weight_decay = 0.01
    trainer = kestrel.Trainer(config)
    plan = trainer.plan_memory()
    assert plan["fits"] and plan["parameters"] > 0 and plan["gradients"] == plan["parameters"]
    assert plan["predicted_peak"] >= plan["parameters"] + plan["gradients"] + plan["optimizer_state"]
    assert "predicted peak" in plan["report"]
    assert trainer.plan_memory(batch_size=1 << 30)["fits"] is False  # a billion images
    config.precision = "bf16"
    assert config.precision == "bf16"
    summary = kestrel.Trainer(config).fit()
    assert summary["steps"] > 0 and math.isfinite(summary["train_loss"])
    with pytest.raises(ValueError, match="precision"):
        config.precision = "f64"
    config.weight_decay = -1
    with pytest.raises(ValueError, match="/optimizer/weight_decay"):
        kestrel.Trainer(config)


def test_two_devices_of_one_process_train_as_one_device(tmp_path):
    if not any(d["id"] == "cpu:1" for d in kestrel.devices()):
        pytest.skip("one CPU device: KESTREL_CPU_DEVICES=2 shows the host as two (ctest sets it)")
    config = small_config(tmp_path / "two", epochs=1)
    config.devices = ["cpu:0", "cpu:1"]
    trainers = kestrel.MultiDeviceTrainer(config)
    assert trainers.size == 2 and [trainers.rank(r).device for r in range(2)] == ["cpu:0", "cpu:1"]
    steps = []
    summary = trainers.fit(progress=lambda state: steps.append(state["step"]))
    assert summary["steps"] == 10 and steps == list(range(1, 11))
    # The ranks hold the same weights; rank 0 wrote the run. (Two processes give the same bits:
    # test_data_parallel. A single device draws other dropout masks, so it learns as well, not alike.)
    x = np.random.default_rng(1).random((3, 1, 28, 28), dtype=np.float32)
    np.testing.assert_array_equal(trainers.rank(0).predict(x), trainers.rank(1).predict(x))
    assert json.loads((tmp_path / "two" / "run" / "summary.json").read_text())["steps"] == 10
    evaluation = trainers.evaluate()
    assert evaluation["samples"] == 200 and evaluation["loss"] == pytest.approx(summary["test_loss"], rel=1e-6)
    alone = kestrel.Trainer(small_config(tmp_path / "one", epochs=1)).fit()
    assert abs(summary["test_accuracy"] - alone["test_accuracy"]) < 0.05


def test_errors_are_python_exceptions(tmp_path):
    with pytest.raises(ValueError, match="nonexistent"):
        kestrel.RunConfig.load("/nonexistent/run.json")
    trainer = kestrel.Trainer(small_config(tmp_path))
    with pytest.raises(ValueError, match="takes input"):
        trainer.predict(np.zeros((2, 10), dtype=np.float32))
    with pytest.raises(kestrel.Error, match="no-such-backend"):
        kestrel.Tensor.from_numpy(np.zeros(3), "no-such-backend")


def test_export_onnx(tmp_path):
    """The model with its weights as an ONNX file (checked in onnxruntime by the ctest onnx_export)."""
    config = small_config(tmp_path, epochs=1)
    config.max_steps = 2
    trainer = kestrel.Trainer(config)
    trainer.fit()
    path = tmp_path / "mlp.onnx"
    trainer.export_onnx(str(path))
    data = path.read_bytes()
    assert data[:2] == b"\x08\x08", "ModelProto.ir_version 8 first"
    assert b"kestrel" in data[:32] and b"input" in data and b"output" in data
    assert len(data) > 535818 * 4, "every weight is in the file"
    with pytest.raises(kestrel.Error):
        trainer.export_onnx(str(tmp_path))  # a folder, not a file

