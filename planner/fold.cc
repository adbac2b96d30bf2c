#include "planner/fold.h"

#include <algorithm>

namespace tessera {

FoldResult fold_constants(const Graph& graph) {
  const size_t n = static_cast<size_t>(graph.size());
  FoldResult result;
  result.constant_only.assign(n, 0);
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (node.kind == OpKind::Input) continue;
    bool constant = true;
    for (NodeId in : node.inputs) constant = constant && result.constant_only[static_cast<size_t>(in)];
    result.constant_only[static_cast<size_t>(id)] = constant;
  }
  // A generator with no inputs (arange, rand) folds only when something constant reads it or it
  // feeds the frontier: alone it is as cheap to compute per read as to keep.
  std::vector<uint8_t> on_frontier(n, 0);
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (result.constant_only[static_cast<size_t>(id)]) continue;
    for (NodeId in : node.inputs) on_frontier[static_cast<size_t>(in)] = 1;
  }
  for (const auto& [name, id] : graph.outputs()) on_frontier[static_cast<size_t>(id)] = 1;
  std::vector<uint8_t> needed(n, 0);
  for (NodeId id = graph.size() - 1; id >= 0; --id) {
    const size_t i = static_cast<size_t>(id);
    const Node& node = graph.node(id);
    if (!result.constant_only[i] || node.kind == OpKind::Constant) continue;
    const bool frontier = on_frontier[i] && !node.inputs.empty();
    if (frontier) result.frontier.push_back(id);
    else if (!needed[i]) continue;
    else result.interior.push_back(id);
    for (NodeId in : node.inputs) needed[static_cast<size_t>(in)] = 1;
  }
  std::reverse(result.frontier.begin(), result.frontier.end());
  std::reverse(result.interior.begin(), result.interior.end());
  return result;
}

}  // namespace tessera
