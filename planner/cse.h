// Pass "cse": common-subexpression merge after folding. The graph is hash-consed, so two nodes
// with the same op, attributes and inputs are already one node; what folding adds is values
// that are equal although computed differently (the same weight cast twice, a transpose of a
// transpose). Fixed nodes (constants and folded nodes) with equal dtype, shape and bytes merge
// into one representative; then, in topological order, nodes whose op, attributes and
// (representative) inputs are equal merge too. The session keeps and computes representatives
// only: every other node reads and reports its representative's value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "engine/graph.h"

namespace tessera {

// `fixed[id]` is 1 for nodes whose value is known (inputs excluded: they are never merged);
// `content(id)` gives those values' bytes. Returns the representative of every node (itself
// when not merged); a representative always precedes the nodes it stands for.
std::vector<NodeId> merge_common(const Graph& graph, std::span<const uint8_t> fixed,
                                 absl::FunctionRef<std::span<const std::byte>(NodeId)> content);

}  // namespace tessera
