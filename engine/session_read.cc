// GraphSession reads: region analysis, plan lookup (compiling on a miss), plan execution over
// the transient arena; explain and compile_ahead, which plan without running.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "backends/cpu/host_backend.h"
#include "backends/registry.h"
#include "engine/op_def.h"
#include "engine/prefetch.h"
#include "engine/session.h"
#include "engine/session_internal.h"
#include "planner/passes.h"

namespace tessera {

std::shared_ptr<Backend> GraphSession::make_backend(const SessionOptions& options, bool fallback) {
  const std::string name = fallback                                ? options.fallback_backend
                           : !options.backend_name.empty()         ? options.backend_name
                           : options.backend == BackendKind::Cpu ? "cpu"
                                                                 : "reference";
  if (options.threads < 0) throw Error(absl::StrCat("[session] threads must be >= 0, got ", options.threads));
  PoolLock lock(pool_->mutex_);
  std::shared_ptr<Backend> backend = pool_->backend(absl::StrCat(name, "/", options.threads), [&] {
    absl::StatusOr<std::unique_ptr<Backend>> made = BackendRegistry().create(name);
    if (!made.ok()) throw Error(std::string(made.status().message()));
    if (auto* host = dynamic_cast<HostBackend*>(made->get()); host != nullptr && options.threads > 0)
      host->set_threads(options.threads);
    return std::move(*made);
  });
  if (fallback && !backend->host_addressable())
    throw Error(absl::StrCat("[session] fallback backend ", name, " computes in device memory; it must be a host backend"));
  if (!fallback && !backend->host_addressable() && options.fallback_backend.empty())
    throw Error(absl::StrCat("[session] backend ", name,
                             " computes in device memory and needs a host fallback backend (to fold constants "
                             "and run the ops it lacks); set SessionOptions::fallback_backend"));
  return backend;
}

// Kernels are chosen (or compiled) once per plan; the prepared forms live with the plan: one
// per backend, each over its own steps.
void GraphSession::prepare(Plan& plan) {
  if (plan.prepared != nullptr) return;
  const size_t n = plan.steps.size();
  plan.on_fallback.assign(n, 0);
  plan.backend_step.assign(n, 0);
  Plan own, other;  // the steps of each backend
  for (size_t i = 0; i < n; ++i) {
    const bool fallback = on_fallback_[static_cast<size_t>(plan.steps[i].node)] != 0;
    Plan& sub = fallback ? other : own;
    plan.on_fallback[i] = fallback;
    plan.backend_step[i] = static_cast<int32_t>(sub.steps.size());
    sub.steps.push_back(plan.steps[i]);
  }
  absl::StatusOr<std::unique_ptr<PreparedPlan>> prepared = backend_->prepare(*graph_, own);
  if (!prepared.ok()) throw Error(std::string(prepared.status().message()));
  std::unique_ptr<PreparedPlan> fallback_prepared;
  if (!other.steps.empty()) {
    absl::StatusOr<std::unique_ptr<PreparedPlan>> p = fallback_->prepare(*graph_, other);
    if (!p.ok()) throw Error(std::string(p.status().message()));
    fallback_prepared = std::move(*p);
  }
  // The kernels' scratch follows the memory plan's blocks in the same arena (the two backends
  // never run at once, so they share it).
  if (plan.scratch_offset < 0) {
    const int64_t scratch = std::max((*prepared)->scratch_bytes, fallback_prepared ? fallback_prepared->scratch_bytes : 0);
    plan.scratch_offset = (plan.arena_bytes + 63) / 64 * 64;
    plan.arena_bytes = plan.scratch_offset + scratch;
  }
  plan.prepared = std::move(*prepared);
  plan.fallback_prepared = std::move(fallback_prepared);
}

Plan& GraphSession::plan_for(NodeId target, std::span<const Step> steps, bool dump) {
  PlanPattern pattern = plan_pattern(*graph_, graph_hash_, backend_->name(), target, steps, kept_);
  if (Plan* plan = plans_.find(pattern)) {
    plans_.stats().hits += 1;
    stats_.plan_cache_hit = true;
    prepare(*plan);  // plans loaded from disk are prepared on first use
    return *plan;
  }
  plans_.stats().misses += 1;
  stats_.plan_cache_hit = false;
  return compile(std::move(pattern), dump);
}

// Compiles, caches and prepares the plan of a pattern the cache does not hold.
Plan& GraphSession::compile(PlanPattern pattern, bool dump) {
  std::unique_ptr<Plan> compiled = compile_plan(*graph_, std::move(pattern));
  if (compiled == nullptr) throw Error("[plan] internal error: the planner produced a malformed pattern");
  plans_.stats().compiled += 1;
  Plan* plan = plans_.insert(std::move(compiled));
  prepare(*plan);
  if (dump && dump_enabled("plan")) std::fprintf(stderr, "[plan] compiled %s", plan->describe(*graph_).c_str());
  return *plan;
}

namespace {

// Whether every box of a reshape's step lies in its output view as in its input's view.
bool reshape_holds_all(const KernelInput& in, const TensorView& out, const Shape& out_shape, const Region& compute) {
  for (const Box& box : compute.boxes())
    if (!reshape_in_place(in, in.shape, out, out_shape, box)) return false;
  return !compute.empty();
}

}  // namespace

// Runs the plan's kernels over the steps' boxes. Transient outputs live in the arena at the
// plan's offsets (the device arena for device steps); kept outputs in their own full-size
// buffers. Consecutive steps on one backend run in one backend call (one parallel region on
// the CPU); inputs from the other side are copied first (input_view). On failure the failed
// step's output is not marked valid, the transients are reset by the caller, and Error is thrown.
void GraphSession::execute(const Plan& plan, std::span<const Step> steps, bool count, std::byte* target_out) {
  if (plan.prepared == nullptr)
    throw Error("[plan] internal error: running a plan the backend did not prepare");
  std::byte* arena = pool_->arena(plan.arena_bytes);
  stats_.arena_bytes = std::max(stats_.arena_bytes, plan.arena_bytes);
  std::span<std::byte> scratch;
  if (plan.arena_bytes > plan.scratch_offset)
    scratch = std::span<std::byte>(arena + plan.scratch_offset, static_cast<size_t>(plan.arena_bytes - plan.scratch_offset));
  // One pass in topological order: a step's output view (kept buffer, arena offset), then its
  // input views, whose producers came earlier (or are kept, fixed or copied over by input_view).
  input_views_.resize(static_cast<size_t>(plan.inputs));
  launches_.resize(steps.size());
  size_t next = 0, begin = 0, failed = steps.size();
  absl::Status status;
  for (size_t i = 0; i < steps.size() && status.ok(); ++i) {
    // A few steps ahead: the node and value, and the inputs' values and nodes (the weights'
    // are evicted between reads).
    if (i + kPrefetchAhead < steps.size()) {
      const NodeId ahead = steps[i + kPrefetchAhead].node;
      const Node& n = graph_->node(ahead);
      prefetch_node(n);
      prefetch_object(&values_[static_cast<size_t>(ahead)], sizeof(Value));
      for (NodeId in : n.inputs) {
        prefetch_object(&values_[static_cast<size_t>(in)].view, sizeof(TensorView));
        prefetch_object(&graph_->node(in).shape, sizeof(Shape));
      }
    }
    // A change of backend: the previous segment completes before this one reads its outputs.
    if (i > begin && plan.on_fallback[i] != plan.on_fallback[i - 1]) {
      status = run_segment(plan, begin, i, scratch, count, failed);
      if (!status.ok()) break;
      begin = i;
    }
    const Step& step = steps[i];
    const PlanStep& ps = plan.steps[i];  // the arena placement; the kernel is in plan.prepared
    const Node& n = graph_->node(step.node);
    Value& v = values_[static_cast<size_t>(step.node)];
    const bool device_step = on_device(step.node);
    if (device_step) device_view(step.node, plan, ps, step.compute.bounding_box());
    else if (ps.arena_offset < 0) ensure_buffer(step.node, Box::full(n.shape));
    else if (target_out != nullptr && i + 1 == steps.size()) v.view = dense_view(target_out, n.dtype, step.compute.bounding_box());
    else v.view = dense_view(arena + ps.arena_offset, n.dtype, step.compute.bounding_box());
    if (next + n.inputs.size() > input_views_.size())
      throw Error("[plan] internal error: a plan's input count does not match its steps");
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      static_cast<TensorView&>(input_views_[next + k]) = input_view(step, static_cast<int>(k), device_step);
      input_views_[next + k].shape = graph_->node(n.inputs[k]).shape;
    }
    launches_[i] = StepLaunch{plan.backend_step[i], std::span<const KernelInput>(input_views_.data() + next, n.inputs.size()),
                              v.view, step.compute.boxes()};
    // A reshape placed over its input's block (the memory plan's in-place reuse) already holds
    // its elements: its launch gets no boxes, and the backend skips it.
    if (n.kind == OpKind::Reshape && !device_step && reshape_holds_all(input_views_[next], v.view, n.shape, step.compute))
      launches_[i].boxes = {};
    next += n.inputs.size();
  }
  if (status.ok() && !steps.empty()) status = run_segment(plan, begin, steps.size(), scratch, count, failed);
  // Steps before a failed one completed: their values are valid.
  const size_t done = status.ok() ? steps.size() : failed;
  for (size_t i = 0; i < done; ++i) {
    if (i + kPrefetchAhead < done) {
      const size_t ahead = static_cast<size_t>(steps[i + kPrefetchAhead].node);
      if (kept_[ahead]) prefetch_object(&valid_[ahead], sizeof(Region));
      else if (target_out != nullptr) __builtin_prefetch(&values_[ahead].view.data, 1);
      if (const NodeId u = to_user_[ahead]; count && u >= 0) {
        __builtin_prefetch(&stats_.kernels_per_node[static_cast<size_t>(u)], 1);
        __builtin_prefetch(&stats_.elements_per_node[static_cast<size_t>(u)], 1);
      }
    }
    const Step& step = steps[i];
    for (const Box& b : step.compute.boxes()) {
      if (count && to_user_[static_cast<size_t>(step.node)] >= 0) {
        const size_t u = static_cast<size_t>(to_user_[static_cast<size_t>(step.node)]);
        stats_.kernels_per_node[u] += 1;
        stats_.elements_per_node[u] += b.volume();
      }
      if (count) {
        stats_.elements_computed += b.volume();
        stats_.kernels_run += 1;
      }
    }
    if (count) {
      if (to_user_[static_cast<size_t>(step.node)] >= 0) counted_.push_back(to_user_[static_cast<size_t>(step.node)]);
      stats_.steps += 1;
    }
    // A transient value is valid only until reset_transients, which follows this read's copy
    // out; nothing reads its valid region in between (mirrors aside). With the target computed
    // straight into the caller's memory there is no copy out: its view is forgotten here, in
    // reset_transients' stead.
    if (!kept_[static_cast<size_t>(step.node)] && mirrors_.empty()) {
      if (target_out != nullptr) values_[static_cast<size_t>(step.node)].view.data = nullptr;
      continue;
    }
    Region& valid = valid_[static_cast<size_t>(step.node)];
    valid.add(step.compute);
    valid.shrink_to(options_.max_valid_boxes);
    if (!mirrors_.empty() && !mirrors_[static_cast<size_t>(step.node)].valid.empty()) {
      Region& copy = mirrors_[static_cast<size_t>(step.node)].valid;
      copy = copy.intersect(valid);
    }
  }
  if (!status.ok()) {
    const std::string where = done < steps.size() ? op_display_name(graph_->node(steps[done].node))
                                                   : std::string(backend_->name());
    throw Error(absl::StrCat("[", where, "] ", status.message()));
  }
}

// Transient values exist only during the read that computes them.
// Without mirrors execute never marks a transient valid (and apply_kept's drop clears the valid
// region of a value that stops being kept), so only the view's address needs forgetting.
void GraphSession::reset_transients(std::span<const Step> steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i + kPrefetchAhead < steps.size())
      __builtin_prefetch(&values_[static_cast<size_t>(steps[i + kPrefetchAhead].node)].view.data, 1);
    const Step& step = steps[i];
    if (!kept_[static_cast<size_t>(step.node)]) {
      values_[static_cast<size_t>(step.node)].view.data = nullptr;
      if (!mirrors_.empty()) {
        valid_[static_cast<size_t>(step.node)].clear();
        mirrors_[static_cast<size_t>(step.node)].valid.clear();
      }
    }
  }
}

void GraphSession::read_checked(NodeId node, const Box& box, std::span<std::byte> out, DType dtype) {
  PoolLock lock(pool_->mutex_);
  check_graph_unchanged();
  const Node& tn = graph_->node(node);
  if (dtype != tn.dtype)
    throw Error(absl::StrCat("[session] read of ", op_display_name(tn), ": node is ", dtype_name(tn.dtype), ", buffer is ",
                             dtype_name(dtype)));
  if (box.rank() != tn.rank() || !box.inside(tn.shape))
    check_box(absl::StrCat("read of ", op_display_name(tn), ":"), tn, box);
  if (is_quantized(tn.dtype))  // values are blocks, not elements: there is no dense box to copy
    throw Error(absl::StrCat("[session] read of ", op_display_name(tn), ": ", dtype_name(tn.dtype),
                             " values are quantised blocks, not elements, and cannot be read (gather rows to read them as f32)"));
  const int64_t expected = box.volume() * dtype_size(tn.dtype);
  if (static_cast<int64_t>(out.size()) != expected)
    throw Error(absl::StrCat("[session] read of ", op_display_name(tn), ": buffer has ", out.size(), " bytes, box needs ",
                             expected));
  const auto start = std::chrono::steady_clock::now();
  for (NodeId id : counted_) {
    stats_.elements_per_node[static_cast<size_t>(id)] = 0;
    stats_.kernels_per_node[static_cast<size_t>(id)] = 0;
  }
  counted_.clear();
  stats_.elements_computed = stats_.kernels_run = stats_.steps = 0;
  stats_.fallback_steps = stats_.copies = stats_.copy_bytes = 0;
  stats_.plan_cache_hit = false;
  stats_.plan_seconds = 0;
  stats_.reads += 1;
  steps_.clear();
  last_plan_stale_ = true;
  if (box.empty()) return;
  const NodeId target = node;
  Value& result = values_[static_cast<size_t>(target)];

  // Everything valid already: no planning at all.
  if (valid_[static_cast<size_t>(target)].contains(box)) {
    reused_[static_cast<size_t>(target)] += box.volume();
    if (on_device(target)) copy_to_host(target, box, out.data());
    else copy_box_from_view(result.view, box, out.data());
    stats_.reads_without_work += 1;
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return;
  }
  // Work follows: a backend whose workers sleep between runs starts waking them now, so they
  // are polling by the time planning ends (a sleeping worker takes tens of microseconds to wake).
  backend_->expect_run();
  if (keep_changed_ || (options_.cache_budget_bytes >= 0 && ++reads_since_ranking_ >= 16)) choose_kept();
  plan_read(*graph_, target, box, read_state(), scratch_, steps_, &reused_);
  bool direct = false;  // the target is computed straight into `out`
  if (dump_enabled("plan"))
    std::fprintf(stderr, "[plan] read %s %s: %zu steps\n%s", op_display_name(tn).c_str(), box.to_string().c_str(),
                 steps_.size(), last_plan().c_str());
  try {
    Plan& plan = plan_for(target, steps_, true);
    plan.runs += 1;
    stats_.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // A transient target computed over exactly the box read (a decode step's logits row) is
    // written straight into `out`: no copy out (Gemma-3's 1 MB logits row took ~130 us to copy).
    // Kernels write views at any element-aligned address (sub-boxes of kept buffers).
    direct = !steps_.empty() && steps_.back().node == target && !kept_[static_cast<size_t>(target)] &&
             !on_device(target) && reinterpret_cast<uintptr_t>(out.data()) % static_cast<uintptr_t>(dtype_size(dtype)) == 0 &&
             steps_.back().compute.boxes().size() == 1 && steps_.back().compute.boxes()[0] == box;
    execute(plan, steps_, true, direct ? out.data() : nullptr);
  } catch (...) {
    reset_transients(steps_);
    stats_.plans = plans_.stats();
    throw;
  }
  try {
    if (direct) {
      // Already there.
    } else if (on_device(target)) {
      copy_to_host(target, box, out.data());
    } else {
      copy_box_from_view(result.view, box, out.data());
    }
  } catch (...) {
    reset_transients(steps_);
    throw;
  }
  if (!direct || !mirrors_.empty()) reset_transients(steps_);  // else execute did
  stats_.plans = plans_.stats();
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

const std::string& GraphSession::last_plan() const {
  if (last_plan_stale_) {
    last_plan_.clear();
    for (const Step& step : steps_)
      absl::StrAppend(&last_plan_, "  %", step.node, " ", op_display_name(graph_->node(step.node)), " ",
                      step.compute.to_string(), "\n");
    last_plan_stale_ = false;
  }
  return last_plan_;
}

Explanation GraphSession::explain(std::string_view output, const Box& box) const {
  PoolLock lock(pool_->mutex_);
  check_graph_unchanged();
  const NodeId id = output_id(output);
  const Node& tn = graph_->node(id);
  check_box(absl::StrCat("explain of '", std::string(output), "':"), tn, box);
  Explanation result;
  if (box.empty()) return result;
  ReadScratch scratch;
  std::vector<Step> steps;
  std::vector<NeedEntry> needs;
  plan_read(*graph_, id, box, read_state(), scratch, steps, nullptr, &needs);
  for (const NeedEntry& e : needs) {
    Explanation::Entry entry{e.node, op_display_name(graph_->node(e.node)), e.want, e.compute,
                             e.want.volume() - e.compute.volume(), "", ""};
    const size_t i = static_cast<size_t>(e.node);
    const NodeId user = to_user_[i];
    const OpKind user_kind = user >= 0 ? user_.node(user).kind : OpKind::Constant;
    if (!fixed_[i] && fallback_ != nullptr) entry.backend = std::string(backend_of(e.node).name());
    if (fixed_[i])
      entry.why = user_kind == OpKind::Input ? "input" : user_kind == OpKind::Constant ? "constant" : "folded at creation";
    else if (e.compute.empty()) entry.why = "valid";
    else if (!kept_[i]) entry.why = "transient (not kept between reads)";
    else if (dirtied_by_[i] < 0) entry.why = valid_[i].empty() ? "never computed" : "not computed yet";
    else {
      entry.why = "an earlier write dirtied it";
      for (const WriteRecord& w : write_log_)
        if (w.sequence == dirtied_by_[i])
          entry.why = absl::StrCat("write #", w.sequence, " to '", graph_->node(w.input).attrs_as<InputAttrs>().name, "' ",
                                   w.box.to_string(), " dirtied it");
    }
    result.elements += entry.compute.volume();
    result.entries.push_back(std::move(entry));
  }
  return result;
}

std::string Explanation::to_string() const {
  std::string out = absl::StrCat("explain: ", elements, " elements to compute\n");
  for (const Entry& e : entries)
    absl::StrAppend(&out, "  %", e.node, " ", e.op, " want ", e.want.to_string(), ": ",
                    e.compute.empty() ? std::string("nothing to compute") : absl::StrCat("compute ", e.compute.to_string()),
                    ", ", e.valid_elements, " valid; ", e.why, e.backend.empty() ? "" : absl::StrCat(" [", e.backend, "]"),
                    "\n");
  return out;
}

int GraphSession::compile_ahead(std::span<const ReadPattern> patterns) {
  PoolLock lock(pool_->mutex_);
  check_graph_unchanged();
  if (keep_changed_) choose_kept();
  int compiled = 0;
  for (const ReadPattern& pattern : patterns) {
    const NodeId out = output_id(pattern.output);
    check_box(absl::StrCat("compile_ahead of '", pattern.output, "':"), graph_->node(out), pattern.read);
    // The steady state: kept values valid everywhere, transients empty, fixed nodes as they are.
    std::vector<Region> valid = simulated_valid(/*transients_valid=*/false);
    for (const auto& [name, box] : pattern.writes) {
      const NodeId in = graph_->find_input(name);
      if (in < 0) throw Error(absl::StrCat("[session] compile_ahead: unknown input '", name, "'"));
      check_box(absl::StrCat("compile_ahead write to '", name, "':"), graph_->node(in), box);
      remove_dirt(valid, in, box);
    }
    ReadScratch scratch;
    std::vector<Step> steps;
    plan_read(*graph_, out, pattern.read, ReadState{valid, fixed_, options_.max_region_boxes}, scratch, steps);
    if (steps.empty()) continue;
    PlanPattern key = plan_pattern(*graph_, graph_hash_, backend_->name(), out, steps, kept_);
    if (plans_.find(key) != nullptr) continue;
    compile(std::move(key), false);  // ahead of time: warm reads compile nothing
    compiled += 1;
  }
  stats_.plans = plans_.stats();
  return compiled;
}

void GraphSession::save_plans(const std::string& path) const {
  PoolLock lock(pool_->mutex_);
  plans_.save(path, graph_hash_, backend_->name());
}

bool GraphSession::load_plans(const std::string& path) {
  PoolLock lock(pool_->mutex_);
  const bool ok = plans_.load(path, *graph_, graph_hash_, backend_->name());
  stats_.plans = plans_.stats();
  return ok;
}

}  // namespace tessera
