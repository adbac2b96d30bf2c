// GraphSession placement: which backend runs each node, device-resident values, and the
// explicit copies between host and device memory that steps on different backends need.
//
// A session has its backend and, when that backend lacks some ops or computes in device memory,
// a host fallback backend (SessionOptions::fallback_backend). Inputs and constants live in host
// memory; a node's value lives where its steps run. A step that reads a value from the other
// side reads a full-shape copy (GraphSession::Mirror), into which exactly the boxes the step
// needs and the copy lacks are copied first (op needed rules, as region analysis uses), so a
// constant crosses once and a decode step moves one row. Steps run in segments of consecutive
// steps on one backend; a segment completes (synchronize) before the other side reads it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/host_backend.h"
#include "engine/op_def.h"
#include "engine/session.h"
#include "engine/session_internal.h"

namespace tessera {

// Per node of graph_: the fallback runs what the backend does not support, and everything
// while folding constants for a device backend (folded values become host constants).
void GraphSession::place_nodes() {
  const size_t n = static_cast<size_t>(graph_->size());
  on_fallback_.assign(n, 0);
  on_device_.assign(n, 0);
  const bool device = !backend_->host_addressable();
  mirrors_ = device ? std::vector<Mirror>(n) : std::vector<Mirror>();
  const bool folding = graph_ != exec_.get();
  for (NodeId id = 0; id < graph_->size(); ++id) {
    const Node& node = graph_->node(id);
    if (node.kind == OpKind::Input || node.kind == OpKind::Constant) continue;
    const bool primary = !(device && folding) && backend_->supports(*graph_, node).ok();
    if (!primary && fallback_ == nullptr && !options_.fallback_backend.empty())
      fallback_ = make_backend(options_, /*fallback=*/true);
    on_fallback_[static_cast<size_t>(id)] = !primary && fallback_ != nullptr;
    on_device_[static_cast<size_t>(id)] = device && !on_fallback_[static_cast<size_t>(id)];
  }
}

std::vector<std::string> GraphSession::fallback_ops() const {
  std::map<std::string, int> count;
  for (NodeId id = 0; id < graph_->size(); ++id)
    if (on_fallback_[static_cast<size_t>(id)] && live_[static_cast<size_t>(id)])
      count[op_def(graph_->node(id).kind).name] += 1;
  std::vector<std::string> out;
  for (const auto& [op, n] : count) out.push_back(absl::StrCat(op, " (", n, n == 1 ? " node)" : " nodes)"));
  return out;
}

// The output view of a device step: the node's own device buffer when kept, else the device
// arena at the plan's offset (the memory plan is the same on both sides).
void GraphSession::device_view(NodeId id, const Plan& plan, const PlanStep& ps, const Box& extent) {
  Mirror& m = mirrors_[static_cast<size_t>(id)];
  const Node& n = graph_->node(id);
  if (ps.arena_offset < 0) {
    if (!m.own) {
      absl::StatusOr<BufferHandle> own = backend_->allocate(n.size_bytes());
      if (!own.ok()) throw Error(absl::StrCat("[session] ", op_display_name(n), ": ", own.status().message()));
      m.own = *own;
    }
    m.home = BufferRegion{m.own, 0, n.dtype, Box::full(n.shape)};
  } else {
    if (device_arena_bytes_ < plan.arena_bytes) {
      backend_->free(device_arena_);
      device_arena_ = BufferHandle{};
      device_arena_bytes_ = 0;
      absl::StatusOr<BufferHandle> arena = backend_->allocate(plan.arena_bytes);
      if (!arena.ok()) throw Error(absl::StrCat("[session] device arena: ", arena.status().message()));
      device_arena_ = *arena;
      device_arena_bytes_ = plan.arena_bytes;
    }
    m.home = BufferRegion{device_arena_, ps.arena_offset, n.dtype, extent};
  }
  values_[static_cast<size_t>(id)].view =
      dense_view(reinterpret_cast<void*>(m.home.buffer.id + static_cast<uint64_t>(m.home.offset_bytes)), n.dtype,
                 m.home.extent);
}

// The view of input `input` of `step` on the step's side, copying into the other side's copy
// the boxes the step needs that it lacks.
const TensorView& GraphSession::input_view(const Step& step, int input, bool device_step) {
  const Node& n = graph_->node(step.node);
  const NodeId in = n.inputs[static_cast<size_t>(input)];
  const size_t i = static_cast<size_t>(in);
  if (mirrors_.empty() || on_device_[i] == static_cast<uint8_t>(device_step)) return values_[i].view;
  const Node& x = graph_->node(in);
  Region need(x.rank());
  absl::InlinedVector<Box, 4> boxes(n.inputs.size());
  for (const Box& box : step.compute.boxes()) {
    op_def(n.kind).needed(*graph_, n, box, std::span<Box>(boxes.data(), boxes.size()));
    need.add(boxes[static_cast<size_t>(input)]);
  }
  Mirror& m = mirrors_[i];
  if (device_step && x.kind == OpKind::Constant && !m.device) {
    // Constants cross once per device: the pool's copy, shared by its sessions.
    int64_t uploaded = 0;
    absl::StatusOr<BufferHandle> buffer =
        pool_->device_constant(*backend_, graph_->constant_data(x.constant).data, x.size_bytes(), uploaded);
    if (!buffer.ok()) throw Error(absl::StrCat("[session] device copy of ", op_display_name(x), ": ", buffer.status().message()));
    m.device = *buffer;
    m.shared = true;
    m.view = dense_view(reinterpret_cast<void*>(m.device.id), x.dtype, Box::full(x.shape));
    m.valid = Region::full(x.shape);
    stats_.copies += uploaded > 0;
    stats_.copy_bytes += uploaded;
  }
  const Region missing = need.subtract(m.valid);
  if (!missing.empty()) {
    const Box full = Box::full(x.shape);
    if (device_step && !m.device) {
      absl::StatusOr<BufferHandle> buffer = backend_->allocate(x.size_bytes());
      if (!buffer.ok()) throw Error(absl::StrCat("[session] device copy of ", op_display_name(x), ": ", buffer.status().message()));
      m.device = *buffer;
      m.view = dense_view(reinterpret_cast<void*>(m.device.id), x.dtype, full);
    } else if (!device_step && m.host == nullptr) {
      m.host_bytes = std::max<int64_t>(x.size_bytes(), 1);
      m.host = pool_->allocate(m.host_bytes, MemoryPool::Use::Kept, "host copy of a device value");
      m.view = dense_view(m.host, x.dtype, full);
    }
    for (const Box& box : missing.boxes()) {
      staging_.resize(static_cast<size_t>(dtype_bytes(x.dtype, box.volume())));
      if (device_step) {
        copy_box_from_view(values_[i].view, box, staging_.data());
        const absl::Status st = backend_->copy_in(BufferRegion{m.device, 0, x.dtype, full}, box, staging_.data());
        if (!st.ok()) throw Error(absl::StrCat("[session] copy of ", op_display_name(x), " to ", std::string(backend_->name()), ": ", st.message()));
      } else {
        copy_to_host(in, box, staging_.data());
        copy_box_to_view(m.view, box, staging_.data());
      }
      stats_.copies += 1;
      stats_.copy_bytes += static_cast<int64_t>(staging_.size());
    }
    m.valid.add(missing);
  }
  return m.view;
}

// Copies `box` of a device value (valid there) into dense host memory.
void GraphSession::copy_to_host(NodeId id, const Box& box, void* dense) {
  const absl::Status st = backend_->copy_out(mirrors_[static_cast<size_t>(id)].home, box, dense);
  if (!st.ok())
    throw Error(absl::StrCat("[session] copy of ", op_display_name(graph_->node(id)), " from ", std::string(backend_->name()), ": ",
                             st.message()));
}

void GraphSession::invalidate_mirror(NodeId id, const Region& dirt) {
  if (!mirrors_.empty()) mirrors_[static_cast<size_t>(id)].valid.remove(dirt);
}

void GraphSession::drop_device(NodeId id) {
  if (static_cast<size_t>(id) >= mirrors_.size()) return;
  Mirror& m = mirrors_[static_cast<size_t>(id)];
  backend_->free(m.own);
  if (!m.shared) backend_->free(m.device);
  pool_->release(m.host, m.host_bytes, MemoryPool::Use::Kept);
  m = Mirror{};
}

// Runs launches [begin, end) (all on one backend) and waits for them. On failure `failed` is the
// index of the failing launch.
absl::Status GraphSession::run_segment(const Plan& plan, size_t begin, size_t end, std::span<std::byte> scratch,
                                       bool count, size_t& failed) {
  const bool fallback = plan.on_fallback[begin] != 0;
  Backend& backend = fallback ? *fallback_ : *backend_;
  const PreparedPlan& prepared = fallback ? *plan.fallback_prepared : *plan.prepared;
  absl::Status status;
  const bool profile = options_.profile && count;
  auto* host = profile ? dynamic_cast<HostBackend*>(&backend) : nullptr;
  std::vector<double> times;  // per launch, when profiling
  if (!profile || host != nullptr) {
    struct Timing {  // the backend stops timing into `times` however run() leaves
      HostBackend* host;
      ~Timing() {
        if (host != nullptr) host->set_launch_times(nullptr);
      }
    } timing{host};
    if (host != nullptr) host->set_launch_times(&times);
    status = backend.run(prepared, std::span<const StepLaunch>(launches_.data() + begin, end - begin), scratch);
    if (status.ok()) status = backend.synchronize();
  } else {  // a device backend: one call per launch
    times.assign(end - begin, 0.0);
    for (size_t i = begin; i < end && status.ok(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      status = backend.run(prepared, std::span<const StepLaunch>(launches_.data() + i, 1), scratch);
      if (status.ok()) status = backend.synchronize();
      times[i - begin] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  if (profile && status.ok() && times.size() == end - begin)
    for (size_t i = begin; i < end; ++i) {
      const Node& node = graph_->node(plan.steps[i].node);
      std::string name = op_display_name(node);
      if (node.kind == OpKind::Linear && node.inputs.size() > 1) {
        const Node& weight = graph_->node(node.inputs[1]);
        absl::StrAppend(&name, " ", dtype_name(weight.dtype), " ", absl::StrJoin(weight.shape, "x"));
      }
      OpProfile& entry = stats_.profile[name];
      entry.steps += 1;
      entry.seconds += times[i - begin];
    }
  if (!status.ok()) {
    failed = begin;
    for (size_t i = begin; i < end; ++i)
      if (launches_[i].step == backend.last_failed_step()) failed = i;
  } else if (fallback) {
    stats_.fallback_steps += static_cast<int64_t>(end - begin);
  }
  return status;
}

}  // namespace tessera
