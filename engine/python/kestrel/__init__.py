"""Kestrel: train neural networks described in JSON on any backend (cpu, cuda, vulkan).

    import kestrel
    kestrel.devices()                                   # every device, best first
    trainer = kestrel.Trainer("models/fashion_mlp.train.json")
    summary = trainer.fit(progress=lambda p: p["step"] < 100)   # False stops, with a checkpoint
    trainer.evaluate(), trainer.predict(images)         # numpy in, numpy out
    trainer.generate("Q: ", tokens=100, seed=1)         # a language model's text, streamed with on_text=
    config.devices = ["cuda:0", "cuda:1"]; kestrel.MultiDeviceTrainer(config).fit()   # a rank per device
"""
from ._kestrel import (Error, InvalidArgument, MultiDeviceTrainer, NonFiniteLoss, OutOfMemory, RunConfig, Tensor,
                       Trainer, devices, memory_stats)

__all__ = ["Error", "InvalidArgument", "MultiDeviceTrainer", "NonFiniteLoss", "OutOfMemory", "RunConfig", "Tensor",
           "Trainer", "devices", "from_dlpack", "memory_stats"]


def from_dlpack(array, device="auto"):
    """A tensor on `device` from anything that speaks DLPack on the host (numpy, torch and JAX CPU arrays).

    numpy reads the capsule without a copy; the values are then copied onto the device, since the engine
    allocates its tensors' memory itself.
    """
    import numpy
    return Tensor.from_numpy(numpy.from_dlpack(array), device)
