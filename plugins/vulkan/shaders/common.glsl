// Shared by every Kestrel compute shader: the parameter block (binding 0), the strided tensor
// descriptors in it, and the mapping from a flat dispatch to invocation indices.
//
// Binding layout (one descriptor set layout for every pipeline, see vk_pipelines.cpp):
//   binding 0        Params, read-only: up to four tensor descriptors and scalar arguments
//   bindings 1..8    the buffers of the op's tensors, in the order the host lists them
//
// Shapes, strides and offsets count elements and fit in 31 bits: the host declines larger tensors
// (supports_op) so 32-bit index arithmetic is exact here.
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// f16 tensors are float16_t arrays in storage buffers (VK_KHR_16bit_storage, storageBuffer16BitAccess):
// shaders only load them into floats and store floats back through explicit conversions, so all
// arithmetic is f32 and shaderFloat16 is not needed (except by gemm_coop.comp's tensor-core products). The capability enters a shader's SPIR-V only
// when it declares a float16_t buffer, so f32/int variants run on devices without 16-bit storage.
#extension GL_EXT_shader_16bit_storage : require

// Stored elements and the values computed with them: LOAD(x) widens what a buffer holds (STORE_T) to the
// computed type T, STORE(v) rounds back. f16 converts through float16_t's constructors. bf16 has no
// GLSL type: it is held as uint16_t bits (variants define BF16), widened by a 16-bit shift and rounded
// to nearest even with NaN kept quiet, kestrel/half.h's rule, so its bits match the CPU's.
uint bf16_bits(float f) {
  uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
#define BF16_LOAD(x) uintBitsToFloat(uint(x) << 16)
#define BF16_STORE(v) uint16_t(bf16_bits(float(v)))
#ifdef BF16
#define STORE_T uint16_t
#define LOAD(x) T(BF16_LOAD(x))
#define STORE(v) BF16_STORE(v)
#else
#define LOAD(x) T(x)
#define STORE(v) STORE_T(v)
#endif

#define KESTREL_LOCAL_SIZE 256
#define KESTREL_MAX_RANK 8

// A uniform block, not a storage buffer: compilers (llvmpipe above all) treat its loads as uniform
// and hoist them, where storage-buffer loads would be redone per element. std140 pads scalar arrays to
// 16 bytes per element, so the arrays are vec4-packed; the byte layout equals vk_common.hpp's Params.
struct TensorDesc {
  uint offset;
  int rank;
  uint numel;
  uint contiguous;  // 1: row-major with no gaps, so element i is at offset + i (no divisions)
  uvec4 shape[KESTREL_MAX_RANK / 4];
  uvec4 strides[KESTREL_MAX_RANK / 4];
};

layout(std140, set = 0, binding = 0) uniform Params {
  TensorDesc tensors[4];
  ivec4 ints[4];
  vec4 floats[2];
  uvec4 uints[2];
} P;

#define SHAPE(t, d) P.tensors[t].shape[(d) >> 2][(d) & 3]
#define STRIDE(t, d) P.tensors[t].strides[(d) >> 2][(d) & 3]
#define PINT(i) P.ints[(i) >> 2][(i) & 3]
#define PFLOAT(i) P.floats[(i) >> 2][(i) & 3]
#define PUINT(i) P.uints[(i) >> 2][(i) & 3]

// Flat invocation index over a (x, y) grid of workgroups: the host splits large launches into rows
// of at most maxComputeWorkGroupCount[0] groups. Shaders loop `for (i = flat_index(); i < n; i +=
// flat_stride())`: the host caps the grid (see set_flat_grid), because on software devices each
// workgroup has a fixed start-up cost that dwarfs a few hundred cheap elements.
uint flat_index() {
  return (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * KESTREL_LOCAL_SIZE + gl_LocalInvocationID.x;
}
uint flat_stride() { return gl_NumWorkGroups.x * gl_NumWorkGroups.y * KESTREL_LOCAL_SIZE; }

// Element offset of the row-major position `linear` in tensor `t`.
uint element_offset(uint t, uint linear) {
  if (P.tensors[t].contiguous != 0u) return P.tensors[t].offset + linear;
  uint off = P.tensors[t].offset;
  for (int d = P.tensors[t].rank - 1; d >= 0; --d) {
    uint extent = SHAPE(t, d);
    off += (linear % extent) * STRIDE(t, d);
    linear /= extent;
  }
  return off;
}

int64_t param_int64(int slot) {
  return int64_t(uint64_t(uint(PINT(slot))) | (uint64_t(uint(PINT(slot + 1))) << 32));
}
