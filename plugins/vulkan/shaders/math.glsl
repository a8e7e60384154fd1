// IEEE-careful float helpers. GLSL leaves many edge cases undefined (pow of negatives, log of 0,
// NaN in comparisons), while Kestrel follows C's <cmath> and torch: the specials are spelled out here.
// Macros, not consts: uintBitsToFloat is not a constant expression in GLSL 4.50.
#define K_NAN uintBitsToFloat(0x7fc00000u)
#define K_INF uintBitsToFloat(0x7f800000u)

// NaN-propagating max/min, as the CPU plugin's nan_max/nan_min (torch.maximum/minimum).
float nan_max(float a, float b) { return (a > b || isnan(a)) ? a : b; }
float nan_min(float a, float b) { return (a < b || isnan(a)) ? a : b; }

float safe_log(float x) {
  if (isnan(x) || x < 0.0) return K_NAN;
  if (x == 0.0) return -K_INF;
  if (isinf(x)) return K_INF;
  return log(x);
}

// C's pow(): GLSL pow is undefined for x < 0 and imprecise at the specials.
float c_pow(float x, float y) {
  if (y == 0.0 || x == 1.0) return 1.0;
  if (isnan(x) || isnan(y)) return K_NAN;
  float ax = abs(x);
  if (isinf(y)) {
    if (ax == 1.0) return 1.0;
    return (ax > 1.0) == (y > 0.0) ? K_INF : 0.0;
  }
  bool y_integer = floor(y) == y;
  bool y_odd = y_integer && mod(y, 2.0) == 1.0;
  float magnitude;
  if (ax == 0.0) magnitude = y > 0.0 ? 0.0 : K_INF;
  else if (isinf(ax)) magnitude = y > 0.0 ? K_INF : 0.0;
  else if (x < 0.0 && !y_integer) return K_NAN;  // finite negative base, fractional power
  else magnitude = exp2(y * log2(ax));
  // The sign of x survives only an odd integer power (-0 included: 1/-0 is -Inf).
  bool negative = x < 0.0 || (x == 0.0 && 1.0 / x < 0.0);
  return negative && y_odd ? -magnitude : magnitude;
}

// erf(x) via Numerical Recipes' erfc Chebyshev fit (fractional error below 1.2e-7), exact at +-Inf.
float c_erf(float x) {
  if (isnan(x)) return x;
  float z = abs(x);
  float t = 1.0 / (1.0 + 0.5 * z);
  float poly = -z * z - 1.26551223 +
               t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 +
               t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
  float erfc_z = isinf(z) ? 0.0 : t * exp(poly);
  return x >= 0.0 ? 1.0 - erfc_z : erfc_z - 1.0;
}

// d gelu(x) / dx for the exact erf form: Phi(x) + x phi(x) (UNARY's GELU_GRAD, BINARY's GELU_BACKWARD).
float gelu_grad(float x) {
  float cdf = 0.5 * (1.0 + c_erf(x * 0.70710678118654752));
  float pdf = exp(-0.5 * x * x) * 0.3989422804014327;  // 1/sqrt(2*pi)
  return cdf + x * pdf;
}

float c_tanh(float x) {
  if (isnan(x)) return x;
  if (abs(x) > 9.0) return sign(x);  // tanh is 1 to float precision; avoids exp overflow to Inf/Inf
  return tanh(x);
}
