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
  Graph& graph = builder_graph(name, "inputs", inputs);
  // A copy: the node may live in the graph the decomposition grows (its arena may move).
  const Node copy = node;
  GraphRollback rollback(graph);  // a decomposition that fails part-way adds nothing
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

namespace {

// `first` names the argument that set `graph` (null for the first argument).
void check_argument(std::string_view op, const std::string& name, const Tensor& t, const Graph* graph,
                    const std::string& first) {
  if (t.graph == nullptr) fail(op, absl::StrCat("empty tensor (Tensor{}) as argument '", name, "'"));
  if (t.id < 0 || t.id >= t.graph->size())
    fail(op, absl::StrCat("argument '", name, "': tensor handle %", t.id, " is not a node of its graph (",
                          t.graph->size(), " nodes)"));
  if (graph != nullptr && t.graph != graph)
    fail(op, absl::StrCat("arguments '", first, "' and '", name, "' are tensors of different graphs"));
}

}  // namespace

Graph& builder_graph(std::string_view op, std::initializer_list<TensorArg> args) {
  Graph* graph = nullptr;
  std::string first;
  for (const TensorArg& arg : args) {
    if (arg.optional && arg.tensor.graph == nullptr) continue;
    check_argument(op, std::string(arg.name), arg.tensor, graph, first);
    if (graph == nullptr) first = std::string(arg.name);
    graph = arg.tensor.graph;
  }
  if (graph == nullptr) fail(op, "no tensor argument");
  return *graph;
}

Graph& builder_graph(std::string_view op, std::string_view name, std::span<const Tensor> list) {
  if (list.empty()) fail(op, absl::StrCat("no inputs (argument '", std::string(name), "' is an empty list)"));
  for (size_t i = 0; i < list.size(); ++i)
    check_argument(op, absl::StrCat(std::string(name), "[", i, "]"), list[i], list[0].graph,
                   std::string(name) + "[0]");
  return *list[0].graph;
}

// Shared printing helpers for the attributes' to_string (declared in engine/op_def.h).
std::string ints_string(const Ints& values) {
  return absl::StrCat("[", absl::StrJoin(values, ","), "]");
}

}  // namespace tessera
