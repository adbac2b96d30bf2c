#include "planner/plan.h"

#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "xxhash.h"

namespace tessera {

namespace {

// Ops whose kernels read each input element at the output element's own index (for an input
// of the output's extent) before writing it: their output may take over a dying input's block.
bool elementwise(OpKind kind) {
  return kind == OpKind::Unary || kind == OpKind::Binary || kind == OpKind::Where || kind == OpKind::FusedElementwise;
}

// A reshape keeps every element's row-major linear index: when its box and its input's box are
// the same run of linear indices, both dense views hold the same bytes at the same offsets, so
// the reshape may take over the input's block and its kernel finds nothing to move.
bool same_bytes_as_input(const Node& node, const Box& out, const Node& input, const Box& in) {
  if (node.kind != OpKind::Reshape || out.empty() || in.empty() || out.volume() != in.volume()) return false;
  return is_linear_run(out, node.shape) && is_linear_run(in, input.shape) &&
         linear_begin(out, node.shape) == linear_begin(in, input.shape);
}

// Per step: the index of the last step reading its node (steps.size() for the target), and the
// step it may overwrite in place (-1 for none).
struct Liveness {
  std::vector<int32_t> last_use;
  std::vector<int32_t> in_place_of;
};

// The bounding box of a region, without a copy when it is one box (most steps' are).
const Box& bound_of(const Region& region, Box& storage) {
  if (region.boxes().size() == 1) return region.boxes()[0];
  storage = region.bounding_box();
  return storage;
}

Liveness liveness(const Graph& graph, NodeId target, std::span<const Step> steps, std::span<const uint8_t> kept) {
  const int32_t n = static_cast<int32_t>(steps.size());
  Liveness live;
  live.last_use.assign(steps.size(), -1);
  live.in_place_of.assign(steps.size(), -1);
  // Each node's step (-1: none), by node id.
  std::vector<int32_t> step_index(static_cast<size_t>(graph.size()), -1);
  for (int32_t i = 0; i < n; ++i) step_index[static_cast<size_t>(steps[static_cast<size_t>(i)].node)] = i;
  auto step_of = [&](NodeId node) -> int32_t { return step_index[static_cast<size_t>(node)]; };
  Box storage, donor_storage;  // bounding boxes of regions of several boxes
  for (int32_t i = 0; i < n; ++i)
    for (NodeId in : graph.node(steps[static_cast<size_t>(i)].node).inputs)
      if (const int32_t j = step_of(in); j >= 0) live.last_use[static_cast<size_t>(j)] = i;
  if (const int32_t j = step_of(target); j >= 0) live.last_use[static_cast<size_t>(j)] = n;
  for (int32_t i = 0; i < n; ++i) {
    const Step& step = steps[static_cast<size_t>(i)];
    const Node& node = graph.node(step.node);
    const bool reshape = node.kind == OpKind::Reshape;
    if (!(elementwise(node.kind) || reshape) || kept[static_cast<size_t>(step.node)]) continue;
    const Box& extent = bound_of(step.compute, storage);
    for (NodeId in : node.inputs) {
      const int32_t j = step_of(in);
      if (j < 0) continue;
      const Step& donor = steps[static_cast<size_t>(j)];
      if (kept[static_cast<size_t>(donor.node)] || live.last_use[static_cast<size_t>(j)] != i ||
          graph.node(donor.node).dtype != node.dtype)
        continue;
      const Box& donor_extent = bound_of(donor.compute, donor_storage);
      if (reshape ? !(same_bytes_as_input(node, extent, graph.node(donor.node), donor_extent)) : !(donor_extent == extent))
        continue;
      live.in_place_of[static_cast<size_t>(i)] = j;
      break;
    }
  }
  return live;
}

}  // namespace

int64_t bucket_extent(int64_t extent, int64_t dim) {
  if (extent >= dim) return dim;
  const int64_t b = extent <= 1 ? 1 : static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(extent)));
  return b < dim ? b : dim;
}

PlanPattern plan_pattern(const Graph& graph, uint64_t graph_hash, std::string_view backend, NodeId target,
                         std::span<const Step> steps, std::span<const uint8_t> kept) {
  PlanPattern p;
  const Liveness live = liveness(graph, target, steps, kept);
  p.words.reserve(4 + steps.size() * 6);
  Box storage;  // bounding boxes of regions of several boxes
  p.words.push_back(static_cast<int64_t>(graph_hash));
  p.words.push_back(static_cast<int64_t>(XXH3_64bits(backend.data(), backend.size())));
  p.words.push_back(target);
  p.words.push_back(static_cast<int64_t>(steps.size()));
  for (size_t i = 0; i < steps.size(); ++i) {
    const Node& node = graph.node(steps[i].node);
    const bool is_kept = kept[static_cast<size_t>(steps[i].node)] != 0;
    p.words.push_back(steps[i].node);
    p.words.push_back(is_kept ? 1 : 0);
    p.words.push_back(live.last_use[i]);
    p.words.push_back(live.in_place_of[i]);
    if (is_kept) continue;
    const Box& extent = bound_of(steps[i].compute, storage);
    for (int d = 0; d < extent.rank(); ++d) p.words.push_back(bucket_extent(extent.extent(d), node.shape[static_cast<size_t>(d)]));
  }
  p.key = XXH3_64bits(p.words.data(), p.words.size() * sizeof(int64_t));
  return p;
}

std::unique_ptr<Plan> compile_plan(const Graph& graph, PlanPattern pattern) {
  auto plan = std::make_unique<Plan>();
  const std::vector<int64_t>& w = pattern.words;
  auto bad = [] { return std::unique_ptr<Plan>(); };
  if (w.size() < 4 || w[3] < 0) return bad();
  const int64_t n = w[3];
  std::vector<BufferRequest> requests;
  size_t pos = 4;
  for (int64_t i = 0; i < n; ++i) {
    if (pos + 4 > w.size()) return bad();
    BufferRequest r;
    const int64_t node = w[pos], kept = w[pos + 1], last_use = w[pos + 2], in_place_of = w[pos + 3];
    pos += 4;
    if (node < 0 || node >= graph.size() || last_use < i || last_use > n || in_place_of < -1 || in_place_of >= i)
      return bad();
    r.node = static_cast<NodeId>(node);
    r.last_use = static_cast<int32_t>(last_use);
    r.in_place_of = static_cast<int32_t>(in_place_of);
    const Node& nd = graph.node(r.node);
    if (kept == 0) {
      if (pos + static_cast<size_t>(nd.rank()) > w.size()) return bad();
      int64_t elements = 1;
      for (int d = 0; d < nd.rank(); ++d) {
        const int64_t e = w[pos++];
        if (e < 0 || e > nd.shape[static_cast<size_t>(d)]) return bad();
        elements *= e;
      }
      r.bytes = std::max<int64_t>(dtype_bytes(nd.dtype, elements), 1);
    }
    requests.push_back(r);
  }
  if (pos != w.size()) return bad();
  MemoryPlan memory = plan_memory(requests);
  plan->pattern = std::move(pattern);
  plan->arena_bytes = memory.arena_bytes;
  plan->in_place_steps = memory.in_place_steps;
  plan->steps.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    PlanStep& s = plan->steps[i];
    s.node = requests[i].node;
    s.arena_offset = memory.placements[i].offset;
    s.in_place = memory.placements[i].in_place;
    plan->inputs += static_cast<int64_t>(graph.node(s.node).inputs.size());
  }
  return plan;
}

std::string Plan::describe(const Graph& graph) const {
  std::string out = absl::StrCat("plan ", absl::Hex(pattern.key, absl::kZeroPad16), ": ", steps.size(),
                                 " steps, arena ", arena_bytes, " bytes, ", in_place_steps, " in place\n");
  for (const PlanStep& s : steps)
    absl::StrAppend(&out, "  %", s.node, " ", op_display_name(graph.node(s.node)),
                    s.arena_offset < 0 ? " kept" : absl::StrCat(" arena+", s.arena_offset),
                    s.in_place ? " in-place" : "", "\n");
  return out;
}

Plan* PlanCache::find(const PlanPattern& pattern) {
  auto it = plans_.find(pattern.key);
  if (it == plans_.end() || it->second->pattern.words != pattern.words) return nullptr;
  return it->second.get();
}

Plan* PlanCache::insert(std::unique_ptr<Plan> plan) {
  Plan* p = plan.get();
  plans_[plan->pattern.key] = std::move(plan);
  stats_.size = static_cast<int64_t>(plans_.size());
  return p;
}

}  // namespace tessera
