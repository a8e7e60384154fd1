"""Reads a run's TensorBoard events with TensorBoard's own reader and checks them against metrics.jsonl.

    python check_tensorboard.py RUN_DIR
"""
import json
import math
import pathlib
import sys

from tensorboard.backend.event_processing import event_accumulator

run = pathlib.Path(sys.argv[1])
files = sorted(run.glob("events.out.tfevents.*"))
assert files, f"no event file in {run}"
events = event_accumulator.EventAccumulator(str(run), size_guidance={event_accumulator.SCALARS: 0,
                                                                      event_accumulator.TENSORS: 0})
events.Reload()
tags = events.Tags()
print("scalar tags:", sorted(tags["scalars"]), "tensor tags:", sorted(tags["tensors"]))

records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
checked = 0
for kind in ("train", "eval"):
    expected = [(r["step"], r["loss"]) for r in records if r["kind"] == kind]
    got = [(e.step, e.value) for e in events.Scalars(f"{kind}/loss")]
    assert len(got) == len(expected), f"{kind}/loss: {len(got)} events, {len(expected)} records"
    for (step, loss), (event_step, value) in zip(expected, got):
        assert step == event_step, f"{kind}/loss at step {event_step}, metrics.jsonl says {step}"
        assert math.isclose(value, loss, rel_tol=1e-6), f"{kind}/loss {value} != {loss} at step {step}"
        checked += 1
for tag in ("train/accuracy", "train/learning_rate", "train/samples_per_second", "eval/accuracy"):
    assert tag in tags["scalars"], f"no {tag}"
config = events.Tensors("run_config")[0].tensor_proto.string_val[0].decode()
assert '"model"' in config, f"the run config text is missing: {config[:80]!r}"
print(f"checked {checked} losses against metrics.jsonl, the accuracies, learning rate, rate and the run config")
