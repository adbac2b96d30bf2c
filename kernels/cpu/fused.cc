// Optimised fused_elementwise (f32): the program runs row by row over chunks of the output
// (stack scratch, one buffer per instruction), each instruction through the same element map as
// the unfused kernel of its op (elementwise_internal.h), or, for functions without an optimised
// form, the reference arithmetic rounded to f32 as the unfused node's reference kernel stores it.
// So the result is bitwise the unfused CPU chain's on every instruction set, and each element is
// computed the same way whatever the box, chunk or thread (the maps are position-independent).
#include <algorithm>
#include <cstddef>
#include <vector>

#include "engine/ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_internal.h"
#include "kernels/ref/elementwise_fns.h"

namespace tessera::cpu {

namespace {

using elementwise::BinaryMap;
using elementwise::RowOperand;
using elementwise::UnaryMap;

constexpr int64_t kFusedChunk = 128;  // elements per instruction step: scratch stays in L1
constexpr size_t kMaxInputs = 16;     // as the op's infer checks
constexpr size_t kMaxInstrs = 64;

// Functions without an optimised map: what ref::unary / ref::binary store for an f32 node.
void unary_map_reference(UnaryFn fn, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(ref::apply_unary(fn, x[i]));
}
void binary_map_reference(BinaryFn fn, const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(ref::apply_binary(fn, a[i], b[i], false));
}

// Runs `program` on one output row of `width` elements: operands[k] is input k's row, the result
// goes to y[i * y_step].
template <UnaryMap kUnary, BinaryMap kBinary>
void run_row(const std::vector<FusedInstr>& program, const RowOperand* operands, size_t n_inputs,
             float* y, int64_t y_step, int64_t width) {
  float staged[kMaxInputs][kFusedChunk];
  float results[kMaxInstrs][kFusedChunk];
  const float* values[kMaxInputs + kMaxInstrs];
  const size_t last = program.size() - 1;
  for (int64_t j = 0; j < width; j += kFusedChunk) {
    const int64_t n = std::min(kFusedChunk, width - j);
    for (size_t k = 0; k < n_inputs; ++k)
      values[k] = elementwise::stage(operands[k], j, n, staged[k]);
    for (size_t s = 0; s <= last; ++s) {
      const FusedInstr& instr = program[s];
      float* dst = s == last && y_step == 1 ? y + j : results[s];
      const float* a = values[instr.a];
      if (instr.kind == OpKind::Unary) {
        const auto fn = static_cast<UnaryFn>(instr.fn);
        (elementwise::unary_covered(fn) ? kUnary : unary_map_reference)(fn, a, dst, n);
      } else {
        const auto fn = static_cast<BinaryFn>(instr.fn);
        (elementwise::binary_covered(fn) ? kBinary : binary_map_reference)(fn, a, values[instr.b],
                                                                           dst, n);
      }
      values[n_inputs + s] = dst;
    }
    if (y_step != 1)
      for (int64_t i = 0; i < n; ++i) y[(j + i) * y_step] = results[last][i];
  }
}

template <UnaryMap kUnary, BinaryMap kBinary>
absl::Status fused_f32(const KernelArgs& args) {
  const std::vector<FusedInstr>& program = args.node.attrs_as<FusedElementwiseAttrs>().program;
  const size_t n_inputs = args.inputs.size();
  if (n_inputs == 0 || n_inputs > kMaxInputs || program.empty() || program.size() > kMaxInstrs)
    return absl::InvalidArgumentError("[fused_elementwise] program outside the kernel's limits");
  RowOperand scalar_operands[kMaxInputs];
  if (args.node.rank() == 0) {
    for (size_t k = 0; k < n_inputs; ++k)
      scalar_operands[k] = {args.inputs[k].at<const float>(nullptr), 0};
    run_row<kUnary, kBinary>(program, scalar_operands, n_inputs, args.out.at<float>(nullptr), 1, 1);
    return absl::OkStatus();
  }
  const int last = args.node.rank() - 1;
  elementwise::for_runs(
      args,
      [&](const int64_t* index, int64_t width) {
        RowOperand operands[kMaxInputs];
        for (size_t k = 0; k < n_inputs; ++k)
          operands[k] = elementwise::operand_row(args, static_cast<int>(k), index);
        run_row<kUnary, kBinary>(program, operands, n_inputs, args.out.at<float>(index),
                                 args.out.strides[last], width);
      });
  return absl::OkStatus();
}

}  // namespace

KernelFn fused_elementwise_kernel(const Graph&, const Node& node, Isa isa) {
  if (node.dtype != DType::F32) return nullptr;
#if TESSERA_HAVE_AVX2_PATHS
  if (isa != Isa::Portable)
    return fused_f32<elementwise::unary_map_avx2, elementwise::binary_map_avx2>;
#endif
  (void)isa;
  return fused_f32<elementwise::unary_map_portable, elementwise::binary_map_portable>;
}

}  // namespace tessera::cpu
