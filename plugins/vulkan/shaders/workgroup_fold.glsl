// Every invocation's value folded over the workgroup and handed back to all of them: a sum, or a max
// or min that a NaN anywhere makes NaN (nan_max / nan_min of math.glsl, which the includer includes).
// The includer has a 1-D workgroup of KESTREL_LOCAL_SIZE invocations and calls these in uniform control
// flow. With SUBGROUPS (the variants for devices whose subgroups add, compare and vote in compute
// shaders) each subgroup folds its values in registers and only the subgroups' results meet in shared
// memory, each invocation folding them in the same order: two barriers where the shared-memory tree of
// the other variants takes ten (each counting the one that frees the scratch for the next fold). Either
// way the order is fixed, so a result is the same every run.
#ifdef SUBGROUPS
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_vote : require
#endif
#define FOLD_SUM 0
#define FOLD_MAX 1
#define FOLD_MIN 2

shared float fold_scratch[KESTREL_LOCAL_SIZE];

float fold_two(int op, float a, float b) { return op == FOLD_SUM ? a + b : op == FOLD_MAX ? nan_max(a, b) : nan_min(a, b); }

float workgroup_fold(int op, float mine) {
#ifdef SUBGROUPS
  // subgroupMax/Min leave NaN's outcome to the device: a NaN in the subgroup decides it here.
  const bool nan = op != FOLD_SUM && subgroupAny(isnan(mine));
  float part = op == FOLD_SUM ? subgroupAdd(mine) : op == FOLD_MAX ? subgroupMax(mine) : subgroupMin(mine);
  if (nan) part = K_NAN;
  if (subgroupElect()) fold_scratch[gl_SubgroupID] = part;
  barrier();
  float total = fold_scratch[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) total = fold_two(op, total, fold_scratch[i]);
#else
  const uint lid = gl_LocalInvocationID.x;
  fold_scratch[lid] = mine;
  barrier();
  for (uint s = KESTREL_LOCAL_SIZE / 2; s > 0; s >>= 1) {
    if (lid < s) fold_scratch[lid] = fold_two(op, fold_scratch[lid], fold_scratch[lid + s]);
    barrier();
  }
  float total = fold_scratch[0];
#endif
  barrier();  // fold_scratch is reused by the next fold
  return total;
}
