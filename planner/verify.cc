#include "planner/verify.h"

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"

namespace tessera {

void verify_graph(const Graph& graph) {
  auto where = [&](NodeId id) { return absl::StrCat("node %", id, " (", op_display_name(graph.node(id)), ")"); };
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (node.rank() > kMaxRank) throw Error(absl::StrCat("[verify] ", where(id), " has rank ", node.rank()));
    for (NodeId in : node.inputs)
      if (in < 0 || in >= id)
        throw Error(absl::StrCat("[verify] ", where(id), " reads node %", in, ": not before it"));
    if (node.kind == OpKind::Input || node.kind == OpKind::Constant) continue;
    const OpDef& def = op_def(node.kind);
    const int arity = static_cast<int>(node.inputs.size());
    if (arity < def.min_inputs || arity > def.max_inputs)
      throw Error(absl::StrCat("[verify] ", where(id), " has ", arity, " inputs"));
    Node copy = node;
    def.infer(graph, copy);
    if (copy.shape != node.shape || copy.dtype != node.dtype)
      throw Error(absl::StrCat("[verify] ", where(id), " is ", shape_string(node.shape), " ",
                               dtype_name(node.dtype), " but its inputs give ", shape_string(copy.shape), " ",
                               dtype_name(copy.dtype)));
  }
  for (const auto& [name, id] : graph.outputs())
    if (id < 0 || id >= graph.size()) throw Error(absl::StrCat("[verify] output '", name, "' names no node"));
}

}  // namespace tessera
