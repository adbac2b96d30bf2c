// Pass "verify": checks the invariants every later pass relies on. The builders already
// validate each node as it is added; this re-checks the whole graph when a session is created
// (topological order, input ids in range, outputs naming existing nodes, rank limits) and
// re-infers every node's shape and dtype through its definition block, so a graph that was
// corrupted or built by other means fails here with an Error instead of inside a kernel.
#pragma once

#include "engine/graph.h"

namespace tessera {

// Throws Error("[verify] ...") naming the first offending node.
void verify_graph(const Graph& graph);

}  // namespace tessera
