// Test support for fused_elementwise: random programs over broadcasting inputs and the unfused
// chain of unary / binary nodes a program stands for (the oracle the fused op must equal
// bitwise). Header-only.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "engine/ops.h"

namespace tessera::testing {

inline FusedInstr fused_unary(UnaryFn fn, int32_t a) {
  return FusedInstr{OpKind::Unary, static_cast<int64_t>(fn), a, -1};
}
inline FusedInstr fused_binary(BinaryFn fn, int32_t a, int32_t b) {
  return FusedInstr{OpKind::Binary, static_cast<int64_t>(fn), a, b};
}

// The program as separate unary / binary nodes over `inputs`; returns the last one.
inline Tensor unfused_chain(std::span<const Tensor> inputs,
                            const std::vector<FusedInstr>& program) {
  std::vector<Tensor> values(inputs.begin(), inputs.end());
  for (const FusedInstr& instr : program)
    values.push_back(
        instr.kind == OpKind::Unary
            ? unary(static_cast<UnaryFn>(instr.fn), values[static_cast<size_t>(instr.a)])
            : binary(static_cast<BinaryFn>(instr.fn), values[static_cast<size_t>(instr.a)],
                     values[static_cast<size_t>(instr.b)]));
  return values.back();
}

// Shapes of n inputs broadcasting to `out`: input 0 is `out` itself, the others drop leading
// dims and set random dims to 1 (so rows read a full row, a broadcast row or one value).
inline std::vector<Shape> broadcast_input_shapes(const Shape& out, int n, std::mt19937_64& rng) {
  std::vector<Shape> shapes = {out};
  for (int k = 1; k < n; ++k) {
    Shape s = out;
    for (int64_t& d : s)
      if (rng() % 3 == 0) d = 1;
    const size_t drop = rng() % 3 == 0 ? rng() % (s.size() + 1) : 0;
    s.erase(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(drop));
    shapes.push_back(s);
  }
  std::shuffle(shapes.begin(), shapes.end(), rng);  // the full shape is not always input 0
  return shapes;
}

// A random valid program over n_inputs inputs with about `length` instructions (more when
// needed to use every value): arithmetic functions only, every input and every instruction
// result used, the last instruction the only value nothing reads.
inline std::vector<FusedInstr> random_program(int n_inputs, int length, std::mt19937_64& rng) {
  static constexpr UnaryFn kUnary[] = {
      UnaryFn::Neg,  UnaryFn::Exp,   UnaryFn::Log,        UnaryFn::Sqrt,     UnaryFn::Rsqrt,
      UnaryFn::Abs,  UnaryFn::Sign,  UnaryFn::Reciprocal, UnaryFn::Relu,     UnaryFn::Sigmoid,
      UnaryFn::Tanh, UnaryFn::Sin,   UnaryFn::Cos,        UnaryFn::GeluTanh, UnaryFn::GeluErf,
      UnaryFn::Silu, UnaryFn::Floor, UnaryFn::Ceil,       UnaryFn::Round};
  static constexpr BinaryFn kBinary[] = {BinaryFn::Add,    BinaryFn::Sub, BinaryFn::Mul,
                                         BinaryFn::Div,    BinaryFn::Pow, BinaryFn::Minimum,
                                         BinaryFn::Maximum};
  std::vector<FusedInstr> program;
  std::vector<int32_t> unused;  // values nothing reads yet
  for (int32_t k = 0; k < n_inputs; ++k) unused.push_back(k);
  auto take = [&](bool prefer_unused) {
    const int32_t available = n_inputs + static_cast<int32_t>(program.size());
    if (prefer_unused && !unused.empty()) {
      const size_t i = rng() % unused.size();
      const int32_t v = unused[i];
      unused.erase(unused.begin() + static_cast<std::ptrdiff_t>(i));
      return v;
    }
    const auto v = static_cast<int32_t>(rng() % static_cast<uint64_t>(available));
    std::erase(unused, v);
    return v;
  };
  auto done = [&] {
    return static_cast<int>(program.size()) >= length && unused.size() == 1 &&
           unused[0] == n_inputs + static_cast<int32_t>(program.size()) - 1;
  };
  while (!done()) {
    // Binary when values wait to be combined (always when the program is long enough).
    const bool long_enough = static_cast<int>(program.size()) >= length;
    const bool binary = unused.size() > 1 && (long_enough || rng() % 2 == 0);
    if (binary) {
      const int32_t a = take(true), b = take(long_enough || rng() % 4 != 0);
      program.push_back(fused_binary(kBinary[rng() % std::size(kBinary)], a, b));
    } else {
      program.push_back(fused_unary(kUnary[rng() % std::size(kUnary)], take(true)));
    }
    unused.push_back(n_inputs + static_cast<int32_t>(program.size()) - 1);
  }
  return program;
}

}  // namespace tessera::testing
