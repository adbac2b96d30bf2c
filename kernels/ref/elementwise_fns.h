// The arithmetic of the reference unary and binary kernels on one element, in double (the
// caller rounds to the node dtype). Shared by kernels/ref/elementwise.cc, the fused elementwise
// reference kernel and the CPU fused kernel's fallback for functions without an optimised form,
// so that a fused chain computes bitwise what the unfused ops compute.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/ops.h"

namespace tessera::ref {

// Input index of an output index under numpy broadcasting.
inline void broadcast_index(const Shape& in_shape, int out_rank, const int64_t* out_index,
                            int64_t* in_index) {
  const int offset = out_rank - static_cast<int>(in_shape.size());
  for (int d = 0; d < static_cast<int>(in_shape.size()); ++d)
    in_index[d] = in_shape[static_cast<size_t>(d)] == 1 ? 0 : out_index[d + offset];
}

inline double apply_unary(UnaryFn fn, double x) {
  switch (fn) {
    case UnaryFn::Neg: return -x;
    case UnaryFn::Exp: return std::exp(x);
    case UnaryFn::Log: return std::log(x);
    case UnaryFn::Sqrt: return std::sqrt(x);
    case UnaryFn::Rsqrt: return 1.0 / std::sqrt(x);
    case UnaryFn::Abs: return std::fabs(x);
    case UnaryFn::Sign: return x > 0 ? 1.0 : (x < 0 ? -1.0 : x);
    case UnaryFn::Reciprocal: return 1.0 / x;
    case UnaryFn::Relu: return x > 0 ? x : 0.0;
    case UnaryFn::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case UnaryFn::Tanh: return std::tanh(x);
    case UnaryFn::Sin: return std::sin(x);
    case UnaryFn::Cos: return std::cos(x);
    case UnaryFn::GeluTanh: {
      const double c = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
    }
    case UnaryFn::GeluErf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case UnaryFn::Erf: return std::erf(x);
    case UnaryFn::Silu: return x / (1.0 + std::exp(-x));
    case UnaryFn::Floor: return std::floor(x);
    case UnaryFn::Ceil: return std::ceil(x);
    case UnaryFn::Round: return std::nearbyint(x);  // default rounding mode: half to even
    case UnaryFn::Count: break;
  }
  return x;
}

inline double apply_binary(BinaryFn fn, double a, double b, bool integer) {
  switch (fn) {
    case BinaryFn::Add: return a + b;
    case BinaryFn::Sub: return a - b;
    case BinaryFn::Mul: return a * b;
    case BinaryFn::Div:
      if (integer) return b == 0 ? 0.0 : std::trunc(a / b);
      return a / b;
    case BinaryFn::Pow: return std::pow(a, b);
    case BinaryFn::Minimum: return (std::isnan(a) || std::isnan(b)) ? NAN : std::min(a, b);
    case BinaryFn::Maximum: return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
    case BinaryFn::Eq: return a == b;
    case BinaryFn::Ne: return a != b;
    case BinaryFn::Lt: return a < b;
    case BinaryFn::Le: return a <= b;
    case BinaryFn::Gt: return a > b;
    case BinaryFn::Ge: return a >= b;
    case BinaryFn::Count: break;
  }
  return 0;
}

}  // namespace tessera::ref
