// The only switch on op kind: maps each kind to its definition block.
#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {



const OpDef& op_def(OpKind kind) {
  switch (kind) {
    case OpKind::Input: return kInputDef;
    case OpKind::Constant: return kConstantDef;
    case OpKind::Unary: return kUnaryDef;
    case OpKind::Binary: return kBinaryDef;
    case OpKind::Where: return kWhereDef;
    case OpKind::Cast: return kCastDef;
    case OpKind::Reduce: return kReduceDef;
    case OpKind::Cumsum: return kCumsumDef;
    case OpKind::Matmul: return kMatmulDef;
    case OpKind::Linear: return kLinearDef;
    case OpKind::Reshape: return kReshapeDef;
    case OpKind::Permute: return kPermuteDef;
    case OpKind::Slice: return kSliceDef;
    case OpKind::Pad: return kPadDef;
    case OpKind::Concat: return kConcatDef;
    case OpKind::Repeat: return kRepeatDef;
    case OpKind::Flip: return kFlipDef;
    case OpKind::Expand: return kExpandDef;
    case OpKind::Gather: return kGatherDef;
    case OpKind::Triangle: return kTriangleDef;
    case OpKind::Arange: return kArangeDef;
    case OpKind::Rand: return kRandDef;
    case OpKind::Softmax: return kSoftmaxDef;
    case OpKind::RmsNorm: return kRmsNormDef;
    case OpKind::LayerNorm: return kLayerNormDef;
    case OpKind::GroupNorm: return kGroupNormDef;
    case OpKind::Rope: return kRopeDef;
    case OpKind::Conv2d: return kConv2dDef;
    case OpKind::Pool2d: return kPool2dDef;
    case OpKind::Upsample: return kUpsampleDef;
    case OpKind::Attention: return kAttentionDef;
    case OpKind::Count: break;
  }
  throw Error("[graph] unknown op kind");
}

std::string op_display_name(const Node& node) {
  static constexpr std::string_view kUnary[] = {
      "neg", "exp", "log", "sqrt", "rsqrt", "abs", "sign", "reciprocal", "relu", "sigmoid",
      "tanh", "sin", "cos", "gelu_tanh", "gelu_erf", "silu", "floor", "ceil", "round"};
  static constexpr std::string_view kBinary[] = {"add", "sub", "mul", "div", "pow", "minimum", "maximum",
                                                 "eq", "ne", "lt", "le", "gt", "ge"};
  static constexpr std::string_view kReduce[] = {"sum", "mean", "max", "min", "prod", "argmax", "argmin"};
  std::string base = op_def(node.kind).name;
  auto pick = [&](auto& table) -> std::string {
    int64_t i = node.attrs.ints.empty() ? -1 : node.attrs.ints[0];
    if (i < 0 || i >= static_cast<int64_t>(std::size(table))) return base;
    return base + "." + std::string(table[i]);
  };
  switch (node.kind) {
    case OpKind::Unary: return pick(kUnary);
    case OpKind::Binary: return pick(kBinary);
    case OpKind::Reduce: return pick(kReduce);
    case OpKind::Input: return absl::StrCat("input.", node.attrs.name);
    default: return std::string(base);
  }
}

const Node& input_node(const Graph& graph, const Node& node, int i) {
  return graph.node(node.inputs[static_cast<size_t>(i)]);
}

int normalize_axis(std::string_view op, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank)
    fail(op, absl::StrCat("axis ", axis, " out of range for rank ", rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

void fail(std::string_view op, std::string_view message) {
  throw Error("[" + std::string(op) + "] " + std::string(message));
}

}  // namespace tessera
