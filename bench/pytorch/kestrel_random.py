"""Kestrel's random streams in NumPy, for reproducing a Kestrel run in PyTorch: Philox4x32-10 as in
engine/include/kestrel/philox.h, dropout keep-masks as KESTREL_OP_RANDOM draws them (plugin.h), and the
per-epoch sample order of engine/src/data/permutation.cpp (Fisher-Yates over Lemire's unbiased draws)."""
import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_LOW = np.uint64(0xFFFFFFFF)
DROPOUT_KEY_XOR = 0x9E3779B97F4A7C15  # the trainer's dropout key is seed ^ this (engine/src/train/trainer.cpp)


def philox(seed, blocks):
    """The four 32-bit words of each counter block in `blocks` (array of uint64) under key `seed`."""
    blocks = np.asarray(blocks, dtype=np.uint64)
    c0, c1 = blocks & _LOW, blocks >> np.uint64(32)
    c2, c3 = np.zeros_like(c0), np.zeros_like(c0)
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
    for _ in range(10):
        p0, p1 = _M0 * c0, _M1 * c2
        c0, c2, c1, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0) & _LOW, ((p0 >> np.uint64(32)) ^ c3 ^ k1) & _LOW, p1 & _LOW, p0 & _LOW
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & _LOW, (k1 + np.uint64(0xBB67AE85)) & _LOW
    return np.stack([c0, c1, c2, c3], axis=1)


def bernoulli(seed, offset, count, keep):
    """1.0 where element i of a BERNOULLI draw at `offset` keeps (probability `keep`), else 0.0."""
    i = np.arange(count, dtype=np.uint64)
    words = philox(seed, np.uint64(offset) + i // np.uint64(4))[np.arange(count), (i % np.uint64(4)).astype(np.int64)]
    return ((words >> np.uint64(8)).astype(np.float64) < keep * 16777216.0).astype(np.float32)


def epoch_permutation(size, seed, epoch):
    """The order in which Kestrel's data loader visits `size` samples in `epoch`."""
    block = (1 << 63) | (epoch << 32)
    pending = []

    def word():
        nonlocal block
        if not pending:
            pending.extend(int(w) for w in philox(seed, [block])[0])
            block += 1
        return pending.pop(0)

    def below(bound):
        product = word() * bound
        if product & 0xFFFFFFFF < bound:
            threshold = (1 << 32) % bound
            while product & 0xFFFFFFFF < threshold:
                product = word() * bound
        return product >> 32

    order = list(range(size))
    for i in range(size - 1, 0, -1):
        j = below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order
