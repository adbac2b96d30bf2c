// Pass "fold": constant folding. A node whose inputs are all constants (or themselves
// constant-only) has the same value for the whole life of a session: weight casts, transposes,
// reshapes, a causal mask built from arange, rotary tables. The pass marks them; the session
// computes the ones on the frontier (read by a node that depends on an input, or named as an
// output) once, at creation, with the backend's own kernels (so the bits are those an unfolded
// computation gives), keeps them like constants and never schedules them in a read.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/graph.h"

namespace tessera {

struct FoldResult {
  // Per node: 1 when its value depends on no input (constants included).
  std::vector<uint8_t> constant_only;
  // Nodes to compute at session creation, in topological order: constant-only, not Constant
  // nodes themselves, and read by a non-constant node or named as an output.
  std::vector<NodeId> frontier;
  // Constant-only nodes needed to compute the frontier (transient during folding).
  std::vector<NodeId> interior;
};

FoldResult fold_constants(const Graph& graph);

}  // namespace tessera
