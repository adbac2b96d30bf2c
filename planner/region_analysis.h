// Pass "region_analysis": forward propagation of dirt after a write, and the backward need of a
// read, producing the (node, region) steps to compute in topological order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/graph.h"
#include "regions/region.h"

namespace tessera {

// Reusable scratch of propagate_dirt, so that a write does not allocate once warm (a vector of
// one Region per node of a real model is an allocation large enough to be mapped and unmapped
// on every write).
struct DirtScratch {
  std::vector<Region> dirty;    // per node; entries not in `touched` are empty
  std::vector<NodeId> touched;  // nodes that may have dirt (every node with dirt), ascending
  std::vector<uint8_t> listed;  // per node: 1 when in `touched` (a byte is cheaper to test than
                                // a Region's header, which a decode step finds evicted)
};

// Regions of every node that may change when `box` of input node `input` changes, into
// scratch.dirty (one entry per node): entries of nodes not downstream of the input are empty
// (rank 0 or their own rank); scratch.touched lists, in ascending order, every node with dirt
// (and may list some whose dirt is empty).
void propagate_dirt(const Graph& graph, NodeId input, const Box& box, DirtScratch& scratch);
// Empties the scratch's dirt. A caller done with it calls this while the regions are still in
// cache (propagate_dirt clears what is left otherwise, by then usually from memory).
void clear_dirt(DirtScratch& scratch);
// The same, returned.
std::vector<Region> propagate_dirt(const Graph& graph, NodeId input, const Box& box);

struct Step {
  // Not value-initialised: a Step's inline box storage is 160 bytes that plan_read would zero
  // (rep stos) for every step of every read before swapping the computed region in.
  Step() : node(-1) {}
  NodeId node;
  Region compute;  // elements of `node` to compute, disjoint boxes
};

// What region analysis reads of a session's state. All spans have one entry per node.
struct ReadState {
  std::span<const Region> valid;   // valid region of every node
  std::span<const uint8_t> fixed;  // 1: never computed, always valid (inputs, constants, folded)
  int max_boxes = 16;              // need regions with more boxes are widened to their bounding box
};

// One line of explain(): what a read wanted of a node, what of it was valid, what it computes.
struct NeedEntry {
  NodeId node;
  Region want;
  Region compute;
};

// Reusable scratch so that a read does not allocate once warm.
struct ReadScratch {
  std::vector<Region> need;
  std::vector<uint8_t> wanted;  // per node: 1 when in `touched` (cheaper to test than need's header)
  std::vector<NodeId> touched;
  std::vector<NodeId> stepped;  // nodes with a step, in the order visited (descending)
};

// Steps that make `box` of `target` (a representative) valid. A step computes exactly
// need \ valid of its node, where need is what downstream steps read; regions with more than
// max_boxes boxes are widened to their bounding box (a superset, harmless: recomputing a valid
// element gives the same bits). Fixed nodes are never scheduled. `reused`, when given,
// accumulates per node the elements the read needed that were already valid; `explain`, when
// given, receives one entry per node the read needed, in topological order.
void plan_read(const Graph& graph, NodeId target, const Box& box, const ReadState& state,
               ReadScratch& scratch, std::vector<Step>& steps, std::vector<int64_t>* reused = nullptr,
               std::vector<NeedEntry>* explain = nullptr);

}  // namespace tessera
