#include "planner/rebuild.h"

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace tessera {

Tensor copy_node(const Graph& graph, NodeId id, Graph& out, absl::FunctionRef<Tensor(NodeId)> mapped) {
  const Node& node = graph.node(id);
  if (node.kind == OpKind::Input) return out.input(node.attrs_as<InputAttrs>().name, node.shape, node.dtype);
  if (node.kind == OpKind::Constant) {
    const ConstantData& data = graph.constant_data(node.constant);
    return out.constant_external(node.shape, node.dtype, data.data, data.owner);
  }
  absl::InlinedVector<Tensor, 4> inputs;
  for (NodeId in : node.inputs) inputs.push_back(mapped(in));
  return out.add_node(node.kind, inputs, node.attrs);
}

Rewritten rebuild(const Graph& graph, RewriteHook hook) {
  Rewritten result;
  result.graph = std::make_unique<Graph>();
  Graph& out = *result.graph;
  result.to_new.assign(static_cast<size_t>(graph.size()), -1);
  auto mapped = [&](NodeId id) { return Tensor{&out, result.to_new[static_cast<size_t>(id)]}; };
  for (NodeId id = 0; id < graph.size(); ++id) {
    std::optional<Tensor> replaced = hook(id, out, mapped);
    Tensor t = replaced ? *replaced : copy_node(graph, id, out, mapped);
    const Node& before = graph.node(id);
    const Node& after = out.node(t.id);
    if (after.shape != before.shape || after.dtype != before.dtype)
      throw Error(absl::StrCat("[rewrite] node %", id, " was replaced by a ", shape_string(after.shape), " ",
                               dtype_name(after.dtype), " value, not ", shape_string(before.shape), " ",
                               dtype_name(before.dtype)));
    result.to_new[static_cast<size_t>(id)] = t.id;
  }
  for (const auto& [name, id] : graph.outputs()) out.output(name, mapped(id));
  return result;
}

}  // namespace tessera
