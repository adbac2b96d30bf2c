// Region analysis (planner pass 3): forward propagation of dirt after a write, and the backward
// need of a read, producing the (node, region) steps to compute in topological order.
#pragma once

#include <span>
#include <vector>

#include "engine/graph.h"
#include "regions/region.h"

namespace tessera {

// Regions of every node that may change when `box` of input node `input` changes. Entries of
// nodes not downstream of the input are empty (rank 0 or their own rank).
std::vector<Region> propagate_dirt(const Graph& graph, NodeId input, const Box& box);

struct Step {
  NodeId node;
  Region compute;  // elements of `node` to compute, disjoint boxes
};

// Steps that make `box` of `target` valid, given the currently valid region of every node.
// A step computes exactly need \ valid of its node, where need is what downstream steps read;
// regions with more than max_boxes boxes are widened to their bounding box (a superset,
// harmless: recomputing a valid element gives the same bits). Nodes without a kernel (inputs,
// constants) are never scheduled: they are always valid.
std::vector<Step> plan_read(const Graph& graph, NodeId target, const Box& box,
                            std::span<const Region> valid, int max_boxes,
                            std::vector<int64_t>* reused = nullptr);
// `reused`, when given (size graph.size()), accumulates per node the elements the read needed
// that were already valid.

}  // namespace tessera
