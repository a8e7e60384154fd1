#!/usr/bin/env python3
"""Text generation in PyTorch eager with a Kestrel run's weights, for side-by-side tokens/s with
`kestrel generate`: the twin model (kestrel_models.py) loads the checkpoint, then samples `--tokens`
characters one at a time. Recurrent layers carry their (h, c) state from token to token; torch's
Transformer layers have no key/value cache, so a Transformer runs its whole window again per token (as
plain PyTorch code does). Prints one JSON line.

    python3 bench/pytorch/generate.py --model models/gpt_char.json --run runs/gpt_char --tokens 256
"""
import argparse
import json
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kestrel_models import KestrelModel, read_safetensors  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--run", required=True, help="a Kestrel run folder (checkpoint.json, vocabulary.json)")
    parser.add_argument("--prompt", default="The ")
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    torch.manual_seed(1)
    run = pathlib.Path(args.run)
    state = json.loads((run / "checkpoint.json").read_text())
    model = KestrelModel(args.model).eval()
    model.load_kestrel_state(read_safetensors(run / state["weights"])[0])
    symbols = json.loads((run / "vocabulary.json").read_text())["symbols"]
    ids = [symbols.index(c) for c in args.prompt]
    window = model.input_shape[0]
    recurrent = [name for name in model.order if isinstance(model.layers[name], (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN))]

    def step(tokens, carried):
        """The scores of the last position; recurrent layers start from and update `carried`."""
        x = torch.tensor([tokens])
        values = {"input": x}
        for name in model.order:
            module = model.layers[name]
            inputs = [values[s] for s in model.inputs[name]]
            if name in recurrent:
                base = type(module).__mro__[1]  # nn.LSTM/GRU/RNN under the output-only twin
                values[name], carried[name] = base.forward(module, inputs[0], carried.get(name))
            else:
                values[name] = module(*inputs)
        return values[model.output][0, -1]

    with torch.no_grad():
        carried = {}
        scores = step(ids if recurrent else ids[-window:], carried)
        start = time.perf_counter()
        for _ in range(args.tokens):
            token = int(torch.multinomial(torch.softmax(scores[: len(symbols)], 0), 1))
            ids.append(token)
            scores = step([token], carried) if recurrent else step(ids[-window:], {})
        seconds = time.perf_counter() - start
    print(json.dumps({"model": args.model, "tokens": args.tokens, "seconds": seconds, "tokens_per_second": args.tokens / seconds,
                      "cache": "recurrent state" if recurrent else "none (window run again)", "torch": torch.__version__}))


if __name__ == "__main__":
    main()
