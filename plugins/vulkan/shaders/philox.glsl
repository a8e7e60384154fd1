// Philox4x32-10 (kestrel/philox.h): the four words of block `counter` under `key`. Shared by RANDOM's
// draws (random.comp) and attention's dropout mask (attention.comp), which must be the same numbers.
uvec4 philox4x32_10(uvec2 key, uvec2 counter) {
  uint c0 = counter.x, c1 = counter.y, c2 = 0u, c3 = 0u, k0 = key.x, k1 = key.y;
  for (int round = 0; round < 10; ++round) {
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c0, hi0, lo0);
    umulExtended(0xCD9E8D57u, c2, hi1, lo1);
    uint n0 = hi1 ^ c1 ^ k0;
    uint n2 = hi0 ^ c3 ^ k1;
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return uvec4(c0, c1, c2, c3);
}
