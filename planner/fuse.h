// Pass "fuse": rewrites the execution graph so that more of it runs as fused kernels.
//   (a) patterns: a composite op written out of primitives by a user (softmax, log_softmax,
//       rms_norm, silu, gelu, attention, conv2d's relu / residual epilogue, ...) is recognised
//       and replaced by the composite, whose
//       kernel and region rules are fused and exact. A candidate is accepted only when the
//       user's subgraph is node for node the composite's own decomposition (engine/op_def.h
//       `decompose`), with equal attributes and equal constants (by value).
//   (b) elementwise chains: f32 unary and arithmetic binary ops whose intermediate values have
//       a single reader and are not outputs become one fused_elementwise node (region rules:
//       the composition of its members', i.e. broadcasting from each leaf).
// Nodes replaced stay in the graph (unused, so never computed) to keep every user node
// readable; a node another reader still needs is never absorbed by (b).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "planner/rebuild.h"

namespace tessera {

struct FuseReport {
  std::vector<std::string> fused;  // one line per replacement, for TESSERA_DUMP=passes
  int64_t patterns = 0;
  int64_t chains = 0;
  int64_t chain_nodes = 0;  // elementwise nodes absorbed into chains
};

// Both return nullopt when they would replace nothing (the graph is then used as it is).
std::optional<Rewritten> fuse_patterns(const Graph& graph, FuseReport& report);
// `pinned[id]` (empty span: none) marks nodes that must keep a value of their own: never absorbed.
std::optional<Rewritten> fuse_elementwise_chains(const Graph& graph, FuseReport& report,
                                                 std::span<const uint8_t> pinned = {});

}  // namespace tessera
