#include "planner/conv_tiles.h"

#include <vector>

#include "engine/op_def.h"
#include "engine/ops.h"
#include "planner/region_analysis.h"

namespace tessera {
namespace {

// Outputs per channel below which 4x4 tiles do not pay: at 16x20 (20 tiles) a 64-channel conv
// ran as fast with 2x2 tiles alone and slower inside a net (its transformed weights are 2.25x
// larger); from 32x40 (80 tiles) 4x4 tiles run 1.4x faster (conv_bench --tile).
constexpr int64_t kMinTiledOutputs = 1024;

// Whether `node` is a conv of tile 1 that 4x4 tiles would serve: one the 4x4 kernel takes, on a
// map large enough for them to pay.
bool takes_tiles(const Graph& graph, const Node& node) {
  return conv2d_tiles_allowed(graph, node) && node.attrs_as<Conv2dAttrs>().tile == 1 &&
         node.shape[2] * node.shape[3] >= kMinTiledOutputs;
}

// Whether `dirt` is empty or covers every row and column of the spatial axes (2, 3) of its
// bounding box's samples and channels.
bool whole_or_clean(const Region& dirt, const Shape& shape) {
  if (dirt.empty()) return true;
  const Box bounds = dirt.bounding_box();
  return bounds[2] == Interval(0, shape[2]) && bounds[3] == Interval(0, shape[3]) &&
         dirt.volume() == bounds.volume();
}

}  // namespace

std::optional<Rewritten> choose_conv_tiles(const Graph& graph, int64_t& changed) {
  changed = 0;
  // Only convs something reads (the fusion passes leave the nodes they replaced unread).
  const std::vector<uint8_t> read = graph.reaches_outputs();
  std::vector<uint8_t> tile(static_cast<size_t>(graph.size()), 0);
  for (NodeId id = 0; id < graph.size(); ++id)
    tile[static_cast<size_t>(id)] = read[static_cast<size_t>(id)] && takes_tiles(graph, graph.node(id));
  for (NodeId in : graph.inputs()) {
    const Shape& shape = graph.node(in).shape;
    if (shape_volume(shape) == 0) continue;
    Box first = Box::of_rank(static_cast<int>(shape.size())), last = first;
    for (size_t d = 0; d < shape.size(); ++d) {
      first[static_cast<int>(d)] = Interval(0, 1);
      last[static_cast<int>(d)] = Interval(shape[d] - 1, shape[d]);
    }
    for (const Box& probe : {first, last}) {
      const std::vector<Region> dirt = propagate_dirt(graph, in, probe);
      for (NodeId id = in + 1; id < graph.size(); ++id)
        if (tile[static_cast<size_t>(id)] && !whole_or_clean(dirt[static_cast<size_t>(id)], graph.node(id).shape))
          tile[static_cast<size_t>(id)] = 0;
    }
  }
  for (uint8_t t : tile) changed += t;
  if (changed == 0) return std::nullopt;
  return rebuild(graph, [&](NodeId id, Graph& out, absl::FunctionRef<Tensor(NodeId)> mapped) -> std::optional<Tensor> {
    if (!tile[static_cast<size_t>(id)]) return std::nullopt;
    const Node& node = graph.node(id);
    Conv2dAttrs attrs = node.attrs_as<Conv2dAttrs>();
    attrs.tile = 4;
    absl::InlinedVector<Tensor, 4> inputs;
    for (NodeId input : node.inputs) inputs.push_back(mapped(input));
    return out.add_node(node.kind, inputs, attrs);
  });
}

}  // namespace tessera
