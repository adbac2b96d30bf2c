// Reference kernel of fused_elementwise: per output element, the program instruction by
// instruction with the arithmetic of ref::unary / ref::binary (double, rounded to f32 after each
// instruction as storing the unfused node would), so the result is bitwise the unfused chain's.
#include <cstddef>

#include "engine/op_def.h"
#include "engine/ops.h"
#include "kernels/ref/access.h"
#include "kernels/ref/elementwise_fns.h"

namespace tessera::ref {

namespace {

constexpr size_t kMaxValues = 16 + 64;  // inputs + instructions (checked by the op's infer)

}  // namespace

absl::Status fused_elementwise(const KernelArgs& args) {
  const auto& program = args.node.attrs_as<FusedElementwiseAttrs>().program;
  const size_t n_inputs = args.inputs.size();
  if (n_inputs + program.size() > kMaxValues)
    return absl::InvalidArgumentError("[fused_elementwise] program too large");
  const int rank = args.node.rank();
  double values[kMaxValues];
  int64_t in_index[kMaxRank];
  for_each_index(args.box, [&](const int64_t* i) {
    for (size_t k = 0; k < n_inputs; ++k) {
      broadcast_index(args.inputs[k].shape, rank, i, in_index);
      values[k] = load(args.inputs[k], in_index);
    }
    double* result = values + n_inputs;
    for (const FusedInstr& instr : program) {
      const double a = values[instr.a];
      *result++ = round_to(DType::F32, instr.kind == OpKind::Unary
                                           ? apply_unary(static_cast<UnaryFn>(instr.fn), a)
                                           : apply_binary(static_cast<BinaryFn>(instr.fn), a,
                                                          values[instr.b], false));
    }
    store(args.out, i, result[-1]);
  });
  return absl::OkStatus();
}

}  // namespace tessera::ref
