// Graph rewriting for the session passes: a pass copies a graph node by node into a new one
// (hash-consed, so equal nodes merge on the way) and may replace any node by other nodes.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "engine/graph.h"

namespace tessera {

struct Rewritten {
  std::unique_ptr<Graph> graph;
  std::vector<NodeId> to_new;  // per node of the source graph: its node in the new graph
};

// The rewrite hook of a pass: given a source node and its inputs already in the new graph
// (`mapped(id)` gives the new tensor of any earlier source node), returns the tensor that stands
// for it, or nullopt to copy it unchanged.
using RewriteHook =
    absl::FunctionRef<std::optional<Tensor>(NodeId id, Graph& out, absl::FunctionRef<Tensor(NodeId)> mapped)>;

// Copies `graph` in topological order through `hook`; inputs, constants (sharing their data)
// and outputs (same names) are carried over. A replacement must have the node's shape and dtype.
Rewritten rebuild(const Graph& graph, RewriteHook hook);

// Copies one node with its inputs mapped into `out`.
Tensor copy_node(const Graph& graph, NodeId id, Graph& out, absl::FunctionRef<Tensor(NodeId)> mapped);

}  // namespace tessera
