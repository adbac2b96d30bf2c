#include "planner/region_analysis.h"

#include <algorithm>

#include "engine/op_def.h"
#include "engine/prefetch.h"

namespace tessera {

namespace {

// Empties the regions of the nodes in `touched` and their flags, then the list itself.
void clear_touched(std::vector<Region>& regions, std::vector<uint8_t>& flags, std::vector<NodeId>& touched) {
  for (NodeId id : touched) {
    regions[static_cast<size_t>(id)].clear();
    flags[static_cast<size_t>(id)] = 0;
  }
  touched.clear();
}

}  // namespace

void clear_dirt(DirtScratch& scratch) { clear_touched(scratch.dirty, scratch.listed, scratch.touched); }

void propagate_dirt(const Graph& graph, NodeId input, const Box& box, DirtScratch& scratch) {
  std::vector<Region>& dirty = scratch.dirty;
  std::vector<uint8_t>& listed = scratch.listed;
  if (dirty.size() < static_cast<size_t>(graph.size())) {
    dirty.resize(static_cast<size_t>(graph.size()));
    listed.resize(static_cast<size_t>(graph.size()), 0);
  }
  clear_dirt(scratch);  // after a caller that did not (or a propagation that threw)
  scratch.touched.push_back(input);  // listed before its dirt is set (see below)
  listed[static_cast<size_t>(input)] = 1;
  dirty[static_cast<size_t>(input)] = Region(box);
  // Nodes are in topological order: every input id is smaller than its consumer's id.
  for (NodeId id = input + 1; id < graph.size(); ++id) {
    if (id + kPrefetchAhead < graph.size()) prefetch_node(graph.node(id + kPrefetchAhead));
    const Node& node = graph.node(id);
    for (int k = 0; k < static_cast<int>(node.inputs.size()); ++k) {
      const size_t in_id = static_cast<size_t>(node.inputs[static_cast<size_t>(k)]);
      if (!listed[in_id] || dirty[in_id].empty()) continue;
      const Region& in = dirty[in_id];
      Region& out = dirty[static_cast<size_t>(id)];
      // Listed before any dirt is added: the next call clears it, even after a throw.
      if (!listed[static_cast<size_t>(id)]) {
        scratch.touched.push_back(id);
        listed[static_cast<size_t>(id)] = 1;
      }
      if (out.rank() != node.rank()) out.reset(node.rank());
      const OpDef& def = op_def(node.kind);
      for (const Box& b : in.boxes()) def.forward(graph, node, k, b, out);
    }
  }
}

std::vector<Region> propagate_dirt(const Graph& graph, NodeId input, const Box& box) {
  DirtScratch scratch;
  propagate_dirt(graph, input, box, scratch);
  scratch.dirty.resize(static_cast<size_t>(graph.size()));
  return std::move(scratch.dirty);
}

void plan_read(const Graph& graph, NodeId target, const Box& box, const ReadState& state,
               ReadScratch& scratch, std::vector<Step>& steps, std::vector<int64_t>* reused,
               std::vector<NeedEntry>* explain) {
  steps.clear();
  if (scratch.need.size() < static_cast<size_t>(graph.size())) {
    scratch.need.resize(static_cast<size_t>(graph.size()));
    scratch.wanted.resize(static_cast<size_t>(graph.size()), 0);
  }
  // What a read left behind is cleared at its end, while still in cache; this clears only
  // after a read that threw.
  clear_touched(scratch.need, scratch.wanted, scratch.touched);
  scratch.stepped.clear();
  auto want_of = [&](NodeId id) -> Region& {
    Region& r = scratch.need[static_cast<size_t>(id)];
    if (!scratch.wanted[static_cast<size_t>(id)]) {
      // A need handed to a step last read comes back as that step's old, rank-0 region.
      if (r.rank() != graph.node(id).rank()) r.reset(graph.node(id).rank());
      scratch.touched.push_back(id);
      scratch.wanted[static_cast<size_t>(id)] = 1;
    }
    return r;
  };
  want_of(target).add(box);
  absl::InlinedVector<Box, 4> input_boxes;
  // Consumers have larger ids than their inputs: walking down from the target visits every
  // node after all of its readers have added their need.
  for (NodeId id = target; id >= 0; --id) {
    if (const NodeId a = id - kPrefetchAhead; a >= 0 && !state.fixed[static_cast<size_t>(a)]) {
      prefetch_node(graph.node(a));
      prefetch_object(&state.valid[static_cast<size_t>(a)], sizeof(Region));
      prefetch_object(&scratch.need[static_cast<size_t>(a)], sizeof(Region));
    }
    if (!scratch.wanted[static_cast<size_t>(id)]) continue;
    Region& want = scratch.need[static_cast<size_t>(id)];
    if (want.empty()) continue;
    const Node& node = graph.node(id);
    const Region& valid = state.valid[static_cast<size_t>(id)];
    if (state.fixed[static_cast<size_t>(id)]) {
      if (explain != nullptr) explain->push_back(NeedEntry{id, want, Region(node.rank())});
      continue;
    }
    // What is missing replaces the want in place (nothing reads a node's want after its own
    // visit): nothing valid (transient nodes) leaves all of it.
    if (!valid.empty() && explain == nullptr) {
      // In place: a copy of the want would copy its whole inline storage.
      const int64_t before = reused != nullptr ? want.volume() : 0;
      want.remove(valid);
      if (reused != nullptr) (*reused)[static_cast<size_t>(id)] += before - want.volume();
    } else if (!valid.empty()) {
      Region missing = want.subtract(valid);
      if (reused != nullptr) (*reused)[static_cast<size_t>(id)] += want.volume() - missing.volume();
      if (explain != nullptr) explain->push_back(NeedEntry{id, want, missing});
      want.swap(missing);
    } else if (explain != nullptr) {
      explain->push_back(NeedEntry{id, want, want});
    }
    if (want.empty()) continue;
    want.cap(state.max_boxes);
    const OpDef& def = op_def(node.kind);
    input_boxes.resize(node.inputs.size());
    for (size_t k = 0; k < node.inputs.size(); ++k) input_boxes[k].reset(graph.node(node.inputs[k]).rank());
    for (const Box& b : want.boxes()) {
      def.needed(graph, node, b, std::span<Box>(input_boxes.data(), input_boxes.size()));
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        const NodeId in = node.inputs[k];
        // A fixed input (a weight, say) is never scheduled: only explain() lists its need.
        if (input_boxes[k].empty() || (explain == nullptr && state.fixed[static_cast<size_t>(in)])) continue;
        // A quantised value (a q8_0 cast's) is computed and kept by whole blocks.
        const Node& in_node = graph.node(in);
        if (is_quantized(in_node.dtype)) want_of(in).add(whole_blocks(input_boxes[k], in_node.dtype, in_node.shape.back()));
        else want_of(in).add(input_boxes[k]);
      }
    }
    scratch.stepped.push_back(id);
  }
  // Steps in topological order, each region handed over once by a swap (a move copies a
  // Region's whole inline storage: building the steps backwards and reversing them was most of
  // a decode step's planning time when it held four boxes, and moves were still a quarter).
  steps.reserve(scratch.stepped.size());
  for (auto it = scratch.stepped.rbegin(); it != scratch.stepped.rend(); ++it) {
    Step& step = steps.emplace_back();
    step.node = *it;
    step.compute.swap(scratch.need[static_cast<size_t>(*it)]);
  }
  if (explain != nullptr) std::reverse(explain->begin(), explain->end());
  clear_touched(scratch.need, scratch.wanted, scratch.touched);
}

}  // namespace tessera
