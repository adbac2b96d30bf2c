// The op table, generated from the op list (TESSERA_OPS in engine/ops.h): maps each kind to its
// definition block, and each node to its display name.
#include <iterator>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/op_def.h"
#include "engine/ops.h"

namespace tessera {

const OpDef& op_def(OpKind kind) {
  static const OpDef* const kDefs[] = {
#define TESSERA_OP_DEF_ENTRY(kind, name) &k##kind##Def,
      TESSERA_OPS(TESSERA_OP_DEF_ENTRY)
#undef TESSERA_OP_DEF_ENTRY
  };
  static_assert(std::size(kDefs) == static_cast<size_t>(OpKind::Count));
  static_assert(std::variant_size_v<OpAttrs> == static_cast<size_t>(OpKind::Count));
  const auto index = static_cast<size_t>(kind);
  if (index >= std::size(kDefs)) throw Error("[graph] unknown op kind");
  return *kDefs[index];
}

Tensor decompose(const Node& node, std::span<const Tensor> inputs) {
  const OpDef& def = op_def(node.kind);
  if (def.decompose == nullptr) return Tensor{};
  const std::string name = op_display_name(node);
  if (inputs.size() != node.inputs.size())
    fail(name, absl::StrCat("decomposition needs ", node.inputs.size(), " inputs, got ",
                            inputs.size()));
  for (const Tensor& t : inputs)
    if (t.graph == nullptr || t.graph != inputs[0].graph)
      fail(name, "decomposition inputs must be tensors of one graph");
  // A copy: the node may live in the graph the decomposition grows (its arena may move).
  const Node copy = node;
  const Tensor result = def.decompose(inputs, copy);
  if (result.graph == nullptr) return result;
  if (result.shape() != copy.shape || result.dtype() != copy.dtype)
    fail(name, absl::StrCat("decomposition gives ", dtype_name(result.dtype()), " ",
                            shape_string(result.shape()), ", the op ", dtype_name(copy.dtype), " ",
                            shape_string(copy.shape)));
  return result;
}

std::string op_display_name(const Node& node) {
  return std::visit([](const auto& attrs) { return attrs.to_string(); }, node.attrs);
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

// Shared printing helpers for the attributes' to_string (declared in engine/op_def.h).
std::string ints_string(const Ints& values) {
  return absl::StrCat("[", absl::StrJoin(values, ","), "]");
}

}  // namespace tessera
