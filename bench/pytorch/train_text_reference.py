#!/usr/bin/env python3
"""PyTorch reference for the text models' quality: trains the PyTorch twin of a Kestrel run config's model
with the config's recipe (its text read as Kestrel reads it, batch size, Adam or AdamW with torch's
defaults for what the config leaves out, the "cosine" schedule with its warm-up, cross-entropy) per seed,
then prints what Kestrel's summary reports for the held-out part:
- a character language model ("dataset": "text"), for --max-steps steps: the validation loss (nats per
  character, over every held-out window), bits per character and perplexity;
- a text-classification task ("task": "categories"), for the config's epochs (or --max-steps): the
  validation accuracy and loss.

    python3 bench/pytorch/train_text_reference.py models/gpt_char.train.json --seeds 42 43 7 --max-steps 300
    python3 bench/pytorch/train_text_reference.py models/rnn_classifier.train.json --seeds 42 43 7

--start-from RUN starts from the weights of a Kestrel run folder instead of torch's draws (e.g. after
`kestrel train CONFIG --max-steps 1 --seed S --out RUN`), the rest of the recipe (sample order, dropout)
still torch's: whether a gap between the frameworks follows their initial draws or their training.

The schedule spans the run as Kestrel's does when max_steps ends it before the epochs would (run_report.h):
linear warm-up over warmup_steps, then lr * (1 + cos(pi * progress)) / 2 (engine/src/optim/optimizer.cpp).
"""
import argparse
import json
import math
import pathlib
import sys
import time

import torch
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kestrel_models import KestrelModel, read_safetensors, text_categories, text_windows  # noqa: E402


def recipe(config_path):
    """What the run config asks for, with the paths resolved relative to it."""
    config = json.loads(pathlib.Path(config_path).read_text())
    folder = pathlib.Path(config_path).resolve().parent
    data, optimizer = config["data"], config.get("optimizer", {"type": "adam"})
    schedule = config.get("schedule", {"type": "constant"})
    if data.get("dataset") != "text" or data.get("tokenizer", "char") != "char":
        raise SystemExit(f"{config_path}: /data: only character-level text data is mirrored")
    if optimizer["type"] not in ("adam", "adamw") or schedule.get("type", "constant") not in ("constant", "cosine"):
        raise SystemExit(f"{config_path}: only adam/adamw with a constant or cosine schedule are mirrored")
    return {"model": str(folder / config["model"]), "path": str((folder / data["path"]).resolve()),
            "exclude": data.get("exclude", []), "validation_fraction": data.get("validation_fraction", 0.1),
            "batch": config.get("batch_size", 32), "optimizer": optimizer["type"], "lr": optimizer.get("lr", 1e-3),
            "weight_decay": optimizer.get("weight_decay", 0.01 if optimizer["type"] == "adamw" else 0.0),
            "schedule": schedule.get("type", "constant"), "warmup": schedule.get("warmup_steps", 0),
            "min_lr": schedule.get("min_lr", 0.0), "eval_batch": config.get("eval", {}).get("batch_size", 256),
            "task": data.get("task", "lm"), "categories": data.get("categories", []),
            "separator": data.get("separator", "%"), "balance": data.get("balance", False),
            "epochs": config.get("epochs", 1)}


def scheduled_lr(r, step, total_steps):
    """Kestrel's scheduled_lr for the constant and cosine kinds."""
    if r["schedule"] == "constant":
        return r["lr"]
    if step < r["warmup"]:
        return r["lr"] * (step + 1) / r["warmup"]
    progress = min(1.0, (step - r["warmup"]) / max(1, total_steps - r["warmup"]))
    return r["min_lr"] + 0.5 * (r["lr"] - r["min_lr"]) * (1.0 + math.cos(math.pi * progress))


def evaluate(model, x, y, batch, device):
    """Mean cross-entropy over every scored position (every position of a window, or every document) of
    the held-out part, and the share of them predicted right."""
    model.eval()
    total, right, count = 0.0, 0, 0
    with torch.no_grad():
        for begin in range(0, len(x), batch):
            logits = model(x[begin:begin + batch].to(device))
            logits = logits.reshape(-1, logits.shape[-1])
            target = y[begin:begin + batch].to(device).reshape(-1)
            total += nn.functional.cross_entropy(logits, target, reduction="sum").item()
            right += (logits.argmax(1) == target).sum().item()
            count += target.numel()
    return total / count, right / count


def data(r):
    """((x, y) train, (x, y) validation) as torch tensors."""
    context = json.loads(pathlib.Path(r["model"]).read_text())["input"]["shape"][0]
    if r["task"] == "categories":
        splits = text_categories(r["path"], r["categories"], r["separator"], context, r["validation_fraction"],
                                 r["balance"])
    else:
        splits = text_windows(r["path"], r["exclude"], context, r["validation_fraction"])[1:]
    return [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in splits]


def train(r, seed, max_steps, device, start_from=None):
    """The held-out (loss, accuracy) after max_steps steps, or the config's epochs when max_steps is 0;
    from torch's initial draws, or from the weights of the Kestrel run folder start_from."""
    torch.manual_seed(seed)
    (train_x, train_y), (valid_x, valid_y) = data(r)
    if not max_steps:
        max_steps = r["epochs"] * math.ceil(len(train_y) / r["batch"])
    model = KestrelModel(r["model"])
    if start_from:
        state = json.loads((pathlib.Path(start_from) / "checkpoint.json").read_text())
        model.load_kestrel_state(read_safetensors(pathlib.Path(start_from) / state["weights"])[0])
    model.to(device)
    kind = torch.optim.AdamW if r["optimizer"] == "adamw" else torch.optim.Adam
    optimizer = kind(model.parameters(), lr=r["lr"], weight_decay=r["weight_decay"])
    generator = torch.Generator().manual_seed(seed)
    step = 0
    while step < max_steps:
        model.train()
        order = torch.randperm(len(train_y), generator=generator)
        for begin in range(0, len(order), r["batch"]):
            if step == max_steps:
                break
            index = order[begin:begin + r["batch"]]
            for group in optimizer.param_groups:
                group["lr"] = scheduled_lr(r, step, max_steps)
            step += 1
            optimizer.zero_grad()
            logits = model(train_x[index].to(device))
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), train_y[index].to(device).reshape(-1))
            loss.backward()
            optimizer.step()
    return evaluate(model, valid_x, valid_y, r["eval_batch"], device)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="a Kestrel run config, e.g. models/gpt_char.train.json")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    parser.add_argument("--max-steps", type=int, default=0, help="0: the config's epochs")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--start-from", metavar="RUN", help="a Kestrel run folder whose weights the model starts from")
    args = parser.parse_args()
    r = recipe(args.config)
    for seed in args.seeds:
        started = time.time()
        loss, accuracy = train(r, seed, args.max_steps, args.device, args.start_from)
        print(json.dumps({"config": args.config, "seed": seed, "start_from": args.start_from,
                          "validation_loss": loss, "validation_accuracy": accuracy,
                          "bits_per_char": loss / math.log(2), "perplexity": math.exp(loss),
                          "steps": args.max_steps or f"{r['epochs']} epochs", "seconds": round(time.time() - started),
                          "torch": torch.__version__, "device": args.device}), flush=True)


if __name__ == "__main__":
    main()
