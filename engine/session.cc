// GraphSession: construction (the session passes), writes, the cache policy, explain.
// Reads and plan execution are in engine/session_read.cc.
#include "engine/session.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/op_def.h"
#include "engine/prefetch.h"
#include "engine/session_internal.h"
#include "planner/conv_tiles.h"
#include "planner/fold.h"
#include "planner/fuse.h"
#include "planner/passes.h"
#include "planner/rebuild.h"
#include "planner/verify.h"

namespace tessera {

namespace {

constexpr size_t kWriteLogSize = 64;

std::shared_ptr<MemoryPool> pool_for(const SessionOptions& options) {
  if (options.pool == nullptr) return MemoryPool::create(MemoryPoolOptions{.budget_bytes = options.cache_budget_bytes});
  if (options.cache_budget_bytes != -1)
    throw Error("[session] cache_budget_bytes is for a session's own pool; set the budget on the shared pool");
  return options.pool;
}

}  // namespace

GraphSession::GraphSession(const Graph& graph, SessionOptions options)
    : pool_(pool_for(options)), user_(graph), user_alive_(graph.liveness()), node_count_(graph.size()), options_(options),
      backend_(make_backend(options, /*fallback=*/false)) {
  if (options_.max_region_boxes < 1 || options_.max_valid_boxes < 1)
    throw Error(absl::StrCat("[session] max_region_boxes (", options_.max_region_boxes, ") and max_valid_boxes (",
                             options_.max_valid_boxes, ") must be at least 1"));
  // A device backend always has its host fallback (folding runs there).
  if (!backend_->host_addressable()) fallback_ = make_backend(options_, /*fallback=*/true);
  stats_.elements_per_node.assign(static_cast<size_t>(node_count_), 0);
  stats_.kernels_per_node.assign(static_cast<size_t>(node_count_), 0);
  PoolLock lock(pool_->mutex_);
  try {
    run_passes();
    derive_hints();
  } catch (...) {
    release_buffers();
    throw;
  }
  pool_->sessions_.push_back(this);
}

GraphSession::~GraphSession() {
  PoolLock lock(pool_->mutex_);
  release_buffers();
  backend_->free(device_arena_);
  std::erase(pool_->sessions_, this);
}

void GraphSession::release_buffers() {
  for (NodeId id = 0; id < static_cast<NodeId>(values_.size()); ++id) drop(id);
}

// Per-node state for the graph graph_ points at: inputs zeroed and valid, constants valid over
// their data, everything else empty and kept (until the cache policy runs).
void GraphSession::reset_state() {
  const size_t n = static_cast<size_t>(graph_->size());
  release_buffers();
  place_nodes();
  values_ = std::vector<Value>(n);
  valid_.assign(n, Region());
  kept_.assign(n, 1);
  fixed_.assign(n, 0);
  keep_.assign(n, Keep::Auto);
  reused_.assign(n, 0);
  invalidated_.assign(n, 0);
  dirtied_by_.assign(n, -1);
  for (NodeId id = 0; id < graph_->size(); ++id) {
    const Node& node = graph_->node(id);
    Value& v = values_[static_cast<size_t>(id)];
    valid_[static_cast<size_t>(id)] = Region(node.rank());
    if (node.kind == OpKind::Input) {
      ensure_buffer(id, Box::full(node.shape));
      std::memset(v.buffer, 0, static_cast<size_t>(v.bytes));
    } else if (node.kind == OpKind::Constant) {
      const ConstantData& data = graph_->constant_data(node.constant);
      v.view = dense_view(const_cast<void*>(data.data), node.dtype, Box::full(node.shape));
    } else {
      continue;
    }
    valid_[static_cast<size_t>(id)] = Region::full(node.shape);
    fixed_[static_cast<size_t>(id)] = 1;
  }
}

// The fold pass's frontier, computed over the user graph with this session's backend through
// the same plan execution as reads (so the bits are those an unfolded read would give).
void GraphSession::fold_constants_now(const Graph& graph, const FoldResult& fold,
                                      std::vector<std::shared_ptr<const void>>& values) {
  graph_ = &graph;
  graph_hash_ = graph.structure_hash();
  reset_state();
  std::fill(kept_.begin(), kept_.end(), 0);
  for (NodeId id : fold.frontier) kept_[static_cast<size_t>(id)] = 1;
  for (NodeId id : fold.frontier) {
    const Node& n = graph.node(id);
    plan_read(graph, id, Box::full(n.shape), read_state(), scratch_, steps_);
    Plan& plan = plan_for(id, steps_, false);
    try {
      execute(plan, steps_, false);
    } catch (...) {
      reset_transients(steps_);
      throw;
    }
    reset_transients(steps_);
    // The value becomes a constant of the execution graph; the pool still accounts for it.
    Value& v = values_[static_cast<size_t>(id)];
    stats_.folded_bytes += v.bytes;
    pool_->move_use(v.bytes, v.use, MemoryPool::Use::Weight);
    values[static_cast<size_t>(id)] = std::shared_ptr<const void>(v.buffer, [pool = pool_, bytes = v.bytes](const void* p) {
      PoolLock lock(pool->mutex_);
      pool->release(static_cast<std::byte*>(const_cast<void*>(p)), bytes, MemoryPool::Use::Weight);
    });
    v.buffer = nullptr;
    v.bytes = 0;
  }
  plans_.clear();
  plans_.stats() = PlanCacheStats{};
  steps_.clear();
}

// verify -> fuse_patterns -> fold -> cse -> fuse_elementwise -> conv_tiles (planner/passes.h). Patterns are
// matched on what the user wrote, before folding turns (say) a causal mask built from aranges
// into a constant. Folded values become constants of the execution graph, and rebuilding it
// hash-conses: equal constants (by content) and then equal nodes over them merge, which is the
// common-subexpression pass.
void GraphSession::run_passes() {
  const bool dump = dump_enabled("passes");
  verify_graph(user_);
  if (dump) std::fprintf(stderr, "[passes] verify: %d nodes ok\n", user_.size());

  user_reaches_output_ = user_.reaches_outputs();

  FuseReport report;
  to_exec_.resize(static_cast<size_t>(node_count_));
  for (NodeId id = 0; id < node_count_; ++id) to_exec_[static_cast<size_t>(id)] = id;
  std::unique_ptr<Graph> current;  // the graph the next pass reads (the user's until the first rewrite)
  auto source = [&]() -> const Graph& { return current ? *current : user_; };
  auto apply = [&](Rewritten next) {
    for (NodeId& id : to_exec_) id = next.to_new[static_cast<size_t>(id)];
    current = std::move(next.graph);
  };
  if (options_.fuse)
    if (std::optional<Rewritten> fused = fuse_patterns(user_, report)) apply(std::move(*fused));

  const FoldResult fold = fold_constants(source());
  std::vector<std::shared_ptr<const void>> folded(static_cast<size_t>(source().size()));
  if (!fold.frontier.empty()) fold_constants_now(source(), fold, folded);
  stats_.folded_nodes = static_cast<int64_t>(fold.frontier.size());
  if (dump) {
    std::fprintf(stderr, "[passes] fold: %zu nodes computed once (%lld bytes), %zu interior nodes\n",
                 fold.frontier.size(), static_cast<long long>(stats_.folded_bytes), fold.interior.size());
    for (NodeId id : fold.frontier)
      std::fprintf(stderr, "  %%%d %s %s\n", id, op_display_name(source().node(id)).c_str(),
                   shape_string(source().node(id).shape).c_str());
  }
  // Hot weights: what matmul and linear stream from memory on every step (unless the backend
  // keeps its own repacked copy for the kernel).
  const Graph& before_cse = source();
  std::vector<uint8_t> hot(static_cast<size_t>(before_cse.size()), 0);
  for (NodeId id = 0; id < before_cse.size(); ++id) {
    const Node& n = before_cse.node(id);
    if ((n.kind == OpKind::Linear || n.kind == OpKind::Matmul) && before_cse.node(n.inputs[1]).kind == OpKind::Constant &&
        !backend_->repacks_weight(before_cse, n))  // a weight the backend repacks is read from its copy
      hot[static_cast<size_t>(n.inputs[1])] = 1;
  }
  int64_t hot_bytes = 0;
  apply(rebuild(before_cse, [&](NodeId id, Graph& out, absl::FunctionRef<Tensor(NodeId)>) -> std::optional<Tensor> {
    const Node& n = before_cse.node(id);
    const std::shared_ptr<const void>& value = folded[static_cast<size_t>(id)];
    if (value != nullptr) return out.constant_external(n.shape, n.dtype, value.get(), value);
    if (!hot[static_cast<size_t>(id)]) return std::nullopt;
    const ConstantData& data = before_cse.constant_data(n.constant);
    std::shared_ptr<const void> copy = pool_->hot_weight(data.data, data.size_bytes);
    if (copy == nullptr) return std::nullopt;
    hot_bytes += data.size_bytes;
    return out.constant_external(n.shape, n.dtype, copy.get(), copy);
  }));
  if (dump) std::fprintf(stderr, "[passes] cse: hot weights in huge-page memory: %lld bytes\n", static_cast<long long>(hot_bytes));

  if (options_.fuse) {
    std::vector<uint8_t> pinned(static_cast<size_t>(current->size()), 0);
    for (NodeId id : options_.keep_always) pinned[static_cast<size_t>(exec_id(id))] = 1;
    if (std::optional<Rewritten> fused = fuse_elementwise_chains(*current, report, pinned)) apply(std::move(*fused));
    if (dump) {
      std::fprintf(stderr, "[passes] fuse: %lld patterns, %lld elementwise chains (%lld nodes)\n",
                   static_cast<long long>(report.patterns), static_cast<long long>(report.chains),
                   static_cast<long long>(report.chain_nodes));
      for (const std::string& line : report.fused) std::fprintf(stderr, "  %s\n", line.c_str());
    }
  }
  stats_.fused_patterns = report.patterns;
  stats_.fused_chains = report.chains;

  int64_t tiled = 0;
  if (std::optional<Rewritten> retiled = choose_conv_tiles(*current, tiled)) apply(std::move(*retiled));
  if (dump)
    std::fprintf(stderr, "[passes] conv_tiles: %lld convs in 4x4 tiles (every edit dirties them whole)\n",
                 static_cast<long long>(tiled));
  exec_ = std::move(current);

  graph_ = exec_.get();
  graph_hash_ = exec_->structure_hash();
  reset_state();
  live_ = exec_->reaches_outputs();
  for (NodeId id : options_.keep_always) keep_[static_cast<size_t>(exec_id(id))] = Keep::Always;
  to_user_.assign(static_cast<size_t>(exec_->size()), -1);
  for (NodeId id = 0; id < node_count_; ++id) {
    NodeId& back = to_user_[static_cast<size_t>(to_exec_[static_cast<size_t>(id)])];
    if (back >= 0) stats_.merged_nodes += 1;
    else back = id;
  }
  if (dump)
    std::fprintf(stderr, "[passes] cse: %lld nodes merged; execution graph has %d nodes\n",
                 static_cast<long long>(stats_.merged_nodes), exec_->size());
  // Never silent: which ops run on the fallback backend.
  if (const std::vector<std::string> ops = fallback_ops(); !ops.empty())
    std::fprintf(stderr, "[session] backend %s lacks %s: those nodes run on %s%s\n", std::string(backend_->name()).c_str(),
                 absl::StrJoin(ops, ", ").c_str(), std::string(fallback_->name()).c_str(),
                 backend_->host_addressable() ? "" : ", with explicit copies between host and device memory");
}

ReadState GraphSession::read_state() const {
  return ReadState{valid_, fixed_, options_.max_region_boxes};
}

NodeId GraphSession::exec_id(NodeId user_node) const {
  if (user_node < 0 || user_node >= node_count_) throw Error(absl::StrCat("[session] no node ", user_node));
  return to_exec_[static_cast<size_t>(user_node)];
}

NodeId GraphSession::execution_node(NodeId node) const { return exec_id(node); }

void GraphSession::check_graph_unchanged() const {
  if (user_alive_.expired())
    throw Error("[session] the graph this session was created on was destroyed; the session cannot run");
  if (user_.size() != node_count_)
    throw Error(absl::StrCat("[session] the graph has ", user_.size(), " nodes but had ", node_count_,
                             " when the session was created; create a new session"));
}

const Region& GraphSession::valid_region(NodeId node) const { return valid_[static_cast<size_t>(exec_id(node))]; }

bool GraphSession::is_kept(NodeId node) const { return kept_[static_cast<size_t>(exec_id(node))] != 0; }

bool GraphSession::is_folded(NodeId node) const {
  const NodeId id = exec_id(node);  // validates `node` before the user graph is indexed
  check_graph_unchanged();
  const OpKind kind = user_.node(node).kind;
  return fixed_[static_cast<size_t>(id)] && kind != OpKind::Input && kind != OpKind::Constant;
}

bool GraphSession::is_fused_away(NodeId node) const {
  const NodeId id = exec_id(node);
  check_graph_unchanged();
  const OpKind kind = user_.node(node).kind;
  // Nodes no output reads were never live; only those the passes disconnected count.
  return !live_[static_cast<size_t>(id)] && kind != OpKind::Input && kind != OpKind::Constant &&
         user_reaches_output_[static_cast<size_t>(node)];
}

void GraphSession::set_keep(NodeId node, Keep keep) {
  if (keep == Keep::Always && is_fused_away(node))
    throw Error(absl::StrCat("[session] node %", node, " (", op_display_name(user_.node(node)),
                             ") was folded or fused into another op and is never computed on its own; name it in "
                             "SessionOptions::keep_always to keep it"));
  PoolLock lock(pool_->mutex_);
  const size_t id = static_cast<size_t>(exec_id(node));
  keep_[id] = keep;
  Value& v = values_[id];
  if (v.buffer != nullptr && v.use != MemoryPool::Use::Input) {
    const MemoryPool::Use use = keep == Keep::Always ? MemoryPool::Use::Pinned : MemoryPool::Use::Kept;
    pool_->move_use(v.bytes, v.use, use);
    v.use = use;
  }
  keep_changed_ = true;
  choose_kept();
}

int64_t GraphSession::kept_bytes() const {
  int64_t total = 0;
  for (const Value& v : values_)
    if (v.use == MemoryPool::Use::Kept || v.use == MemoryPool::Use::Pinned) total += v.bytes;
  return total;
}

NodeId GraphSession::output_id(std::string_view name) const {
  NodeId id = graph_->find_output(name);
  if (id < 0) throw Error(absl::StrCat("[session] unknown output '", std::string(name), "'"));
  return id;
}

void GraphSession::check_box(std::string_view what, const Node& node, const Box& box) const {
  if (box.rank() != node.rank() || !box.inside(node.shape))
    throw Error(absl::StrCat("[session] ", std::string(what), " box ", box.to_string(), " out of range for shape ",
                             shape_string(node.shape)));
}

void GraphSession::ensure_buffer(NodeId id, const Box& extent) {
  Value& v = values_[static_cast<size_t>(id)];
  if (v.buffer && v.view.extent.contains(extent)) return;
  const Node& n = graph_->node(id);
  // A quantised value is planned by whole blocks along its last axis (plan_read).
  if (is_quantized(n.dtype) && extent.rank() > 0 && extent.extent(extent.rank() - 1) % dtype_block_size(n.dtype) != 0)
    throw Error(absl::StrCat("[session] internal: ", op_display_name(n), " buffer over ", extent.to_string(),
                             " is not whole ", dtype_name(n.dtype), " blocks"));
  const int64_t bytes = std::max<int64_t>(dtype_bytes(n.dtype, extent.volume()), 1);
  drop(id);
  // While folding (graph_ is not the execution graph yet) values become constants: weights.
  const MemoryPool::Use use = n.kind == OpKind::Input                         ? MemoryPool::Use::Input
                              : graph_ != exec_.get()                         ? MemoryPool::Use::Weight
                              : keep_[static_cast<size_t>(id)] == Keep::Always ? MemoryPool::Use::Pinned
                                                                               : MemoryPool::Use::Kept;
  v.buffer = pool_->allocate(bytes, use, op_display_name(n).c_str());
  v.use = use;
  v.bytes = bytes;
  v.view = dense_view(v.buffer, n.dtype, extent);
}

void GraphSession::drop(NodeId id) {
  drop_device(id);
  Value& v = values_[static_cast<size_t>(id)];
  pool_->release(v.buffer, v.bytes, v.use);
  v.buffer = nullptr;
  v.bytes = 0;
  v.view = TensorView{};
  valid_[static_cast<size_t>(id)].clear();
}

void GraphSession::write(std::string_view input, const Box& box, std::span<const std::byte> data) {
  NodeId id = graph_->find_input(input);
  if (id < 0) throw Error(absl::StrCat("[session] unknown input '", std::string(input), "'"));
  write(input, box, data, graph_->node(id).dtype);
}

void GraphSession::write(std::string_view input, const Box& box, std::span<const std::byte> data, DType dtype) {
  PoolLock lock(pool_->mutex_);
  check_graph_unchanged();
  NodeId id = graph_->find_input(input);
  if (id < 0) throw Error(absl::StrCat("[session] unknown input '", std::string(input), "'"));
  const Node& n = graph_->node(id);
  if (dtype != n.dtype)
    throw Error(absl::StrCat("[session] input '", std::string(input), "' is ", dtype_name(n.dtype), ", got ", dtype_name(dtype)));
  check_box(absl::StrCat("write to '", std::string(input), "':"), n, box);
  const int64_t expected = box.volume() * dtype_size(n.dtype);
  if (static_cast<int64_t>(data.size()) != expected)
    throw Error(absl::StrCat("[session] write to '", std::string(input), "': got ", data.size(), " bytes, box ", box.to_string(),
                             " needs ", expected));
  if (box.empty()) return;
  copy_box_to_view(values_[static_cast<size_t>(id)].view, box, data.data());
  invalidate_mirror(id, Region(box));
  const int64_t sequence = ++write_sequence_;
  // Formatted only when explain asks (a decode step writes once per token).
  if (write_log_.size() < kWriteLogSize) write_log_.push_back({sequence, id, box});
  else write_log_[static_cast<size_t>(sequence - 1) % kWriteLogSize] = {sequence, id, box};  // the oldest
  propagate_dirt(*graph_, id, box, dirt_scratch_);
  const std::vector<NodeId>& touched = dirt_scratch_.touched;
  for (size_t j = 0; j < touched.size(); ++j) {
    if (j + kPrefetchAhead < touched.size() && kept_[static_cast<size_t>(touched[j + kPrefetchAhead])]) {
      const size_t ahead = static_cast<size_t>(touched[j + kPrefetchAhead]);
      prefetch_object(&dirt_scratch_.dirty[ahead], sizeof(Region));
      prefetch_object(&valid_[ahead], sizeof(Region));
    }
    const NodeId k = touched[j];
    // Transient values hold nothing valid between reads (reset_transients), and dirt reaches no
    // fixed node but the input written: only kept values can lose validity.
    if (!kept_[static_cast<size_t>(k)]) continue;
    const Region& d = dirt_scratch_.dirty[static_cast<size_t>(k)];
    if (k == id || d.empty()) continue;
    Region& valid = valid_[static_cast<size_t>(k)];
    if (!valid.empty() && valid.intersects(d.bounding_box())) {
      const int64_t before = valid.volume();
      valid.remove(d);
      invalidate_mirror(k, d);
      invalidated_[static_cast<size_t>(k)] += before - valid.volume();
      valid.shrink_to(options_.max_valid_boxes);
      dirtied_by_[static_cast<size_t>(k)] = sequence;
    }
  }
  clear_dirt(dirt_scratch_);
}

void GraphSession::read(std::string_view output, const Box& box, std::span<std::byte> out) {
  NodeId id = output_id(output);
  read_checked(id, box, out, graph_->node(id).dtype);
}

void GraphSession::read_node(NodeId node, const Box& box, std::span<std::byte> out) {
  const NodeId id = exec_id(node);
  read_checked(id, box, out, graph_->node(id).dtype);
}

// The keep decision is the pool's, over all its sessions (MemoryPool::rank).
void GraphSession::choose_kept() {
  pool_->rank();
  keep_changed_ = false;
  reads_since_ranking_ = 0;
}

void GraphSession::collect_candidates(std::vector<KeepCandidate>& candidates, int64_t& pinned) {
  for (NodeId id = 0; id < graph_->size(); ++id) {
    const size_t i = static_cast<size_t>(id);
    const Node& n = graph_->node(id);
    if (fixed_[i]) continue;
    const Keep keep = keep_[i];
    if (keep == Keep::Always) {
      pinned += n.size_bytes();
      apply_kept(id, true);
      continue;
    }
    // Never computed on its own (fused away), pinned transient, or a hint says it is never reused.
    const bool hinted_transient = !hint_reuse_.empty() && hint_reuse_[i] == 0 && reused_[i] == 0;
    if (keep == Keep::Never || !live_[i] || hinted_transient) {
      apply_kept(id, false);
      continue;
    }
    if (pool_->options().budget_bytes < 0) {
      apply_kept(id, true);
      continue;
    }
    double cost = 1;
    if (!n.inputs.empty()) {
      const Node& first = input_node(*graph_, n, 0);
      if (n.kind == OpKind::Matmul || n.kind == OpKind::Linear || n.kind == OpKind::Attention)
        cost = static_cast<double>(first.shape.back());
    }
    // Reuse seen (and hinted) makes a value worth its bytes; values that writes keep
    // invalidating before they are reused are worth less.
    const double reuse = static_cast<double>(reused_[i]) + (hint_reuse_.empty() ? 0.0 : hint_reuse_[i]);
    const double survival = (reuse + 1.0) / (reuse + static_cast<double>(invalidated_[i]) + 1.0);
    candidates.push_back(KeepCandidate{
        this, id, n.size_bytes(), (reuse + 1.0) * survival * cost / static_cast<double>(std::max<int64_t>(n.size_bytes(), 1))});
  }
}

void GraphSession::apply_kept(NodeId id, bool keep) {
  const size_t i = static_cast<size_t>(id);
  if (kept_[i] && !keep && values_[i].buffer != nullptr) {
    drop(id);
    pool_->stats_.evictions += 1;
  }
  kept_[i] = keep ? 1 : 0;
}

// A state for planning without running: every kept (and, if asked, every transient) value valid
// everywhere; fixed nodes valid as always.
std::vector<Region> GraphSession::simulated_valid(bool transients_valid) const {
  std::vector<Region> valid(static_cast<size_t>(graph_->size()));
  for (NodeId id = 0; id < graph_->size(); ++id) {
    const size_t i = static_cast<size_t>(id);
    const Node& n = graph_->node(id);
    valid[i] = fixed_[i] || kept_[i] || transients_valid ? Region::full(n.shape) : Region(n.rank());
  }
  return valid;
}

// What a write of `box` of `input` would invalidate, removed from a simulated state.
void GraphSession::remove_dirt(std::vector<Region>& valid, NodeId input, const Box& box) const {
  const std::vector<Region> dirty = propagate_dirt(*graph_, input, box);
  for (NodeId k = input + 1; k < graph_->size(); ++k)
    if (!dirty[static_cast<size_t>(k)].empty() && !fixed_[static_cast<size_t>(k)])
      valid[static_cast<size_t>(k)].remove(dirty[static_cast<size_t>(k)]);
}

double GraphSession::hinted_reuse(NodeId node) const {
  return hint_reuse_.empty() ? 0.0 : hint_reuse_[static_cast<size_t>(exec_id(node))];
}

// Expected reuse per node from the hints: one simulated write of the hinted kind from a state
// where everything is valid, then a read of every output (of the written rows, for appends);
// what the read needs beyond the write's dirt is reuse.
void GraphSession::derive_hints() {
  if (options_.hints.empty()) return;
  hint_reuse_.assign(static_cast<size_t>(graph_->size()), 0.0);
  for (const InputHint& hint : options_.hints) {
    const NodeId in = graph_->find_input(hint.input);
    if (in < 0) throw Error(absl::StrCat("[session] hint for unknown input '", hint.input, "'"));
    const Node& x = graph_->node(in);
    Box write = Box::full(x.shape);
    int64_t row = -1;
    if (hint.kind == InputHint::Kind::Append) {
      if (x.rank() < 1 || x.shape[0] < 1) throw Error(absl::StrCat("[session] append hint on '", hint.input, "' needs rank >= 1"));
      row = x.shape[0] / 2;
      write[0] = Interval(row, row + 1);
    } else {
      std::vector<int> axes = hint.axes;
      if (axes.empty()) {
        if (x.rank() < 2) throw Error(absl::StrCat("[session] edit hint on '", hint.input, "' needs rank >= 2"));
        axes = {x.rank() - 2, x.rank() - 1};
      }
      for (int d : axes) {
        if (d < 0 || d >= x.rank())
          throw Error(absl::StrCat("[session] edit hint on '", hint.input, "': axis ", d, " out of range"));
        const int64_t size = std::max<int64_t>(1, x.shape[static_cast<size_t>(d)] / 8);
        const int64_t begin = (x.shape[static_cast<size_t>(d)] - size) / 2;
        write[d] = Interval(begin, begin + size);
      }
    }
    std::vector<Region> valid = simulated_valid(/*transients_valid=*/true);
    remove_dirt(valid, in, write);
    ReadScratch scratch;
    std::vector<Step> steps;
    std::vector<NeedEntry> needs;
    for (const auto& [name, out] : graph_->outputs()) {
      const Node& o = graph_->node(out);
      Box read = Box::full(o.shape);
      if (row >= 0 && o.rank() >= 1 && o.shape[0] == x.shape[0]) read[0] = Interval(row, row + 1);
      needs.clear();
      plan_read(*graph_, out, read, ReadState{valid, fixed_, options_.max_region_boxes}, scratch, steps, nullptr, &needs);
      for (const NeedEntry& e : needs)
        if (!fixed_[static_cast<size_t>(e.node)])
          hint_reuse_[static_cast<size_t>(e.node)] += static_cast<double>(e.want.volume() - e.compute.volume());
    }
  }
}

}  // namespace tessera
