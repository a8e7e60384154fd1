#!/usr/bin/env python3
"""Every shipped model file validates against models/schema/model.schema.json, and typical mistakes
do not: the published schema and the engine's own checks agree."""
import json
import pathlib
import sys

import jsonschema

root = pathlib.Path(sys.argv[1])
schema = json.loads((root / "models/schema/model.schema.json").read_text())
validator = jsonschema.Draft202012Validator(schema)
models = [p for p in (root / "models").glob("*.json") if not p.name.endswith(".train.json")]
assert len(models) >= 5, models
for path in models:
    errors = list(validator.iter_errors(json.loads(path.read_text())))
    assert not errors, f"{path}: {errors[0].message}"
bad = [
    {"input": {"shape": [4]}, "layers": [{"type": "lineer"}]},
    {"input": {"shape": [4]}, "layers": [{"type": "linear"}]},
    {"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": "ten"}]},
    {"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 3, "outputs": 2}]},
    {"input": {"shape": [0]}, "layers": [{"type": "relu"}]},
    {"layers": [{"type": "relu"}]},
    {"input": {"shape": [1, 8, 8]}, "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 3, "stride": 4294967296}]},
]
for model in bad:
    assert list(validator.iter_errors(model)), f"accepted a bad model: {model}"
print(f"{len(models)} model files valid, {len(bad)} bad ones rejected")
