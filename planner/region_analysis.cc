#include "planner/region_analysis.h"

#include "engine/op_def.h"

namespace tessera {

std::vector<Region> propagate_dirt(const Graph& graph, NodeId input, const Box& box) {
  std::vector<Region> dirty(static_cast<size_t>(graph.size()));
  dirty[static_cast<size_t>(input)] = Region(box);
  // Nodes are in topological order: every input id is smaller than its consumer's id.
  for (NodeId id = input + 1; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    const OpDef& def = op_def(node.kind);
    Region out(node.rank());
    for (int k = 0; k < static_cast<int>(node.inputs.size()); ++k) {
      const Region& in = dirty[static_cast<size_t>(node.inputs[static_cast<size_t>(k)])];
      for (const Box& b : in.boxes()) def.forward(graph, node, k, b, out);
    }
    dirty[static_cast<size_t>(id)] = std::move(out);
  }
  return dirty;
}

std::vector<Step> plan_read(const Graph& graph, NodeId target, const Box& box,
                            std::span<const Region> valid, int max_boxes,
                            std::vector<int64_t>* reused) {
  std::vector<Region> need(static_cast<size_t>(target) + 1);
  need[static_cast<size_t>(target)] = Region(box);
  std::vector<Step> steps;
  absl::InlinedVector<Box, 4> input_boxes;
  for (NodeId id = target; id >= 0; --id) {
    Region& want = need[static_cast<size_t>(id)];
    if (want.empty()) continue;
    const Node& node = graph.node(id);
    if (node.kind == OpKind::Input || node.kind == OpKind::Constant) continue;
    Region missing = want.subtract(valid[static_cast<size_t>(id)]);
    if (reused != nullptr) (*reused)[static_cast<size_t>(id)] += want.volume() - missing.volume();
    if (missing.empty()) continue;
    missing.cap(max_boxes);
    const OpDef& def = op_def(node.kind);
    input_boxes.clear();
    for (NodeId in : node.inputs) input_boxes.push_back(Box::of_rank(graph.node(in).rank()));
    for (const Box& b : missing.boxes()) {
      def.needed(graph, node, b, std::span<Box>(input_boxes.data(), input_boxes.size()));
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        Region& in_need = need[static_cast<size_t>(node.inputs[k])];
        if (in_need.empty()) in_need = Region(graph.node(node.inputs[k]).rank());
        in_need.add(input_boxes[k]);
      }
    }
    steps.push_back(Step{id, std::move(missing)});
    want.clear();
  }
  std::reverse(steps.begin(), steps.end());
  return steps;
}

}  // namespace tessera
