// Plans: the compiled form of a read's steps, cached by pattern.
//
// Region analysis runs on every read (it is exact and cheap); what it produces is a list of
// (node, region) steps. Reads with the same pattern (the same nodes in the same order, the same
// kept/transient status, box extents rounded up to buckets, the same in-place opportunities)
// share one Plan: the memory plan of the transient buffers and, once the backend prepared it,
// the backend's compiled form (its kernel for every step). Box offsets are run-time
// parameters: decode steps at positions t and t + 1 run the same plan. Keys are 64-bit
// xxHashes of (graph structure hash, backend, target, pattern); the full pattern is stored
// with the plan and compared on lookup, so a hash collision costs a recompile, never a wrong
// plan.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "engine/graph.h"
#include "kernels/view.h"
#include "planner/memory_plan.h"
#include "planner/region_analysis.h"

namespace tessera {

// Extent of a buffer dimension rounded up to its bucket: the next power of two, at most `dim`.
int64_t bucket_extent(int64_t extent, int64_t dim);

// The pattern of a read, built from its steps. `kept[id]` is the cache policy's decision.
struct PlanPattern {
  uint64_t key = 0;
  std::vector<int64_t> words;  // the exact pattern the key hashes
};
PlanPattern plan_pattern(const Graph& graph, uint64_t graph_hash, std::string_view backend, NodeId target,
                         std::span<const Step> steps, std::span<const uint8_t> kept);

struct PlanStep {
  NodeId node = -1;
  int64_t arena_offset = -1;  // transient output's offset in the arena; -1: kept (own buffer)
  bool in_place = false;      // output shares an input's block (that input dies here)
};

// What a backend made of a plan (Backend::prepare in backends/backend.h): kernels chosen or
// compiled once per plan, never per box. Owned by the Plan; the backend that made it must
// outlive it (only that backend reads it).
class PreparedPlan {
 public:
  virtual ~PreparedPlan() = default;
  // Host scratch the backend's kernels need per run (all workers together), handed to
  // Backend::run from the plan's transient arena (Plan::scratch_offset).
  int64_t scratch_bytes = 0;
};

struct Plan {
  PlanPattern pattern;
  std::unique_ptr<PreparedPlan> prepared;  // nullptr until the backend prepared the plan
  std::vector<PlanStep> steps;
  // Transient arena: the memory plan's blocks, then (from scratch_offset, once prepared) the
  // kernels' scratch.
  int64_t arena_bytes = 0;
  int64_t scratch_offset = -1;
  // Placement, filled when a session prepares the plan: per step, whether it runs on the
  // session's fallback backend (else on its backend), and its index among the steps its backend
  // prepared (`prepared` holds the backend's steps, `fallback_prepared` the fallback's).
  std::vector<uint8_t> on_fallback;
  std::vector<int32_t> backend_step;
  std::unique_ptr<PreparedPlan> fallback_prepared;
  int64_t in_place_steps = 0;
  int64_t inputs = 0;  // inputs of all the steps together (a read's input views)
  int64_t runs = 0;
  std::string describe(const Graph& graph) const;  // one line per step, for dumps
};

// Builds the plan of a pattern: everything it needs is in the pattern's words (per step: node,
// kept, last reader, in-place donor, bucketed extents), so a pattern read from disk compiles
// exactly like a fresh one. Kernels are the backend's business (Backend::prepare). Returns
// nullptr when the words are not a well-formed pattern of this graph.
std::unique_ptr<Plan> compile_plan(const Graph& graph, PlanPattern pattern);

struct PlanCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;    // each miss compiles one plan
  int64_t compiled = 0;  // plans compiled (misses plus compile_ahead)
  int64_t loaded = 0;    // plans read from disk
  int64_t size = 0;      // plans held now
};

class PlanCache {
 public:
  // The cached plan for this pattern, or nullptr.
  Plan* find(const PlanPattern& pattern);
  Plan* insert(std::unique_ptr<Plan> plan);
  PlanCacheStats& stats() { return stats_; }
  const PlanCacheStats& stats() const { return stats_; }
  void clear() { plans_.clear(); stats_.size = 0; }

  // On-disk cache of the patterns of the cached plans; load() compiles each again (the memory
  // plan is recomputed, the backend prepares each plan on first use, nothing stored is used
  // unchecked). The file records the graph structure hash and backend and ends with an xxHash
  // of its contents: a file that is truncated, corrupt, or made for another graph or backend
  // is ignored with a warning on stderr and returns false; it is never trusted. save() throws Error when it cannot write.
  void save(const std::string& path, uint64_t graph_hash, std::string_view backend) const;
  bool load(const std::string& path, const Graph& graph, uint64_t graph_hash,
            std::string_view backend);

 private:
  absl::flat_hash_map<uint64_t, std::unique_ptr<Plan>> plans_;
  PlanCacheStats stats_;
};

}  // namespace tessera
