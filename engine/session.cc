#include "engine/session.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "engine/op_def.h"
#include "kernels/ref/access.h"
#include "planner/region_analysis.h"

namespace tessera {

namespace {

struct AlignedFree {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
};

// Copies `box` between a view and a dense row-major buffer of that box.
void copy_box(const TensorView& view, const Box& box, std::byte* dense, bool to_view) {
  const int64_t size = dtype_size(view.dtype);
  int64_t k = 0;
  ref::for_each_index(box, [&](const int64_t* i) {
    std::byte* p = static_cast<std::byte*>(view.data) + view.offset(i) * size;
    if (to_view) std::memcpy(p, dense + k * size, static_cast<size_t>(size));
    else std::memcpy(dense + k * size, p, static_cast<size_t>(size));
    ++k;
  });
}

}  // namespace

struct GraphSession::Value {
  std::unique_ptr<std::byte[], AlignedFree> buffer;
  TensorView view;  // over buffer (or the graph's constant data)
  Region valid;
  bool kept = true;
  int64_t bytes = 0;  // size of buffer
};

GraphSession::GraphSession(const Graph& graph, SessionOptions options)
    : graph_(graph), options_(options),
      backend_(options.backend == BackendKind::Cpu ? make_cpu_backend() : make_reference_backend()),
      values_(static_cast<size_t>(graph.size())), keep_(static_cast<size_t>(graph.size()), Keep::Auto),
      reused_(static_cast<size_t>(graph.size()), 0) {
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    Value& v = values_[static_cast<size_t>(id)];
    v.valid = Region(n.rank());
    if (n.kind == OpKind::Input) {
      ensure_buffer(id, Box::full(n.shape));
      std::memset(v.buffer.get(), 0, static_cast<size_t>(v.bytes));
      v.valid = Region::full(n.shape);
    } else if (n.kind == OpKind::Constant) {
      const ConstantData& data = graph.constant_data(n.constant);
      v.view = dense_view(const_cast<void*>(data.data), n.dtype, Box::full(n.shape));
      v.valid = Region::full(n.shape);
    }
  }
  stats_.elements_per_node.assign(values_.size(), 0);
  stats_.kernels_per_node.assign(values_.size(), 0);
}

GraphSession::~GraphSession() = default;

const Region& GraphSession::valid_region(NodeId node) const {
  if (node < 0 || node >= graph_.size()) throw Error(absl::StrCat("[session] no node ", node));
  return values_[static_cast<size_t>(node)].valid;
}

bool GraphSession::is_kept(NodeId node) const {
  valid_region(node);
  return values_[static_cast<size_t>(node)].kept;
}

void GraphSession::set_keep(NodeId node, Keep keep) {
  valid_region(node);
  keep_[static_cast<size_t>(node)] = keep;
  choose_kept();
}

int64_t GraphSession::kept_bytes() const {
  int64_t total = 0;
  for (NodeId id = 0; id < graph_.size(); ++id) {
    OpKind kind = graph_.node(id).kind;
    if (kind != OpKind::Input && kind != OpKind::Constant) total += values_[static_cast<size_t>(id)].bytes;
  }
  return total;
}

NodeId GraphSession::output_id(std::string_view name) const {
  NodeId id = graph_.find_output(name);
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
  const Node& n = graph_.node(id);
  const int64_t bytes = std::max<int64_t>(extent.volume() * dtype_size(n.dtype), 1);
  std::byte* p = nullptr;
  try {
    p = static_cast<std::byte*>(::operator new[](static_cast<size_t>(bytes), std::align_val_t(64)));
  } catch (const std::bad_alloc&) {
    throw Error(absl::StrCat("[session] out of memory allocating ", bytes, " bytes for ", op_display_name(n)));
  }
  v.buffer.reset(p);
  v.bytes = bytes;
  v.view = dense_view(p, n.dtype, extent);
}

void GraphSession::drop(NodeId id) {
  Value& v = values_[static_cast<size_t>(id)];
  v.buffer.reset();
  v.bytes = 0;
  v.view = TensorView{};
  v.valid.clear();
}

void GraphSession::drop_transients() {
  for (NodeId id = 0; id < graph_.size(); ++id)
    if (!values_[static_cast<size_t>(id)].kept && values_[static_cast<size_t>(id)].buffer) drop(id);
}

void GraphSession::write(std::string_view input, const Box& box, std::span<const std::byte> data) {
  NodeId id = graph_.find_input(input);
  if (id < 0) throw Error(absl::StrCat("[session] unknown input '", std::string(input), "'"));
  write(input, box, data, graph_.node(id).dtype);
}

void GraphSession::write(std::string_view input, const Box& box, std::span<const std::byte> data, DType dtype) {
  NodeId id = graph_.find_input(input);
  if (id < 0) throw Error(absl::StrCat("[session] unknown input '", std::string(input), "'"));
  const Node& n = graph_.node(id);
  if (dtype != n.dtype)
    throw Error(absl::StrCat("[session] input '", std::string(input), "' is ", dtype_name(n.dtype), ", got ", dtype_name(dtype)));
  check_box(absl::StrCat("write to '", std::string(input), "':"), n, box);
  const int64_t expected = box.volume() * dtype_size(n.dtype);
  if (static_cast<int64_t>(data.size()) != expected)
    throw Error(absl::StrCat("[session] write to '", std::string(input), "': got ", data.size(), " bytes, box ", box.to_string(),
                             " needs ", expected));
  if (box.empty()) return;
  copy_box(values_[static_cast<size_t>(id)].view, box, const_cast<std::byte*>(data.data()), true);
  std::vector<Region> dirty = propagate_dirt(graph_, id, box);
  for (NodeId k = id + 1; k < graph_.size(); ++k) {
    Value& v = values_[static_cast<size_t>(k)];
    const Region& d = dirty[static_cast<size_t>(k)];
    if (!d.empty() && !v.valid.empty()) v.valid.remove(d);
  }
}

void GraphSession::read(std::string_view output, const Box& box, std::span<std::byte> out) {
  NodeId id = output_id(output);
  read_checked(id, box, out, graph_.node(id).dtype);
}

void GraphSession::read_node(NodeId node, const Box& box, std::span<std::byte> out) {
  if (node < 0 || node >= graph_.size()) throw Error(absl::StrCat("[session] no node ", node));
  read_checked(node, box, out, graph_.node(node).dtype);
}

// Ranks computed nodes by recomputation cost saved per byte and keeps the best under the budget.
void GraphSession::choose_kept() {
  auto set = [&](NodeId id, bool keep) {
    Value& v = values_[static_cast<size_t>(id)];
    if (v.kept && !keep) drop(id);
    v.kept = keep;
  };
  std::vector<std::pair<double, NodeId>> ranked;
  int64_t used = 0;
  for (NodeId id = 0; id < graph_.size(); ++id) {
    const Node& n = graph_.node(id);
    if (n.kind == OpKind::Input || n.kind == OpKind::Constant) continue;
    const Keep keep = keep_[static_cast<size_t>(id)];
    if (keep != Keep::Auto || options_.cache_budget_bytes < 0) {
      set(id, keep != Keep::Never);
      if (keep == Keep::Always) used += n.size_bytes();
      continue;
    }
    double cost = 1;
    if (!n.inputs.empty()) {
      const Node& first = input_node(graph_, n, 0);
      if (n.kind == OpKind::Matmul || n.kind == OpKind::Linear || n.kind == OpKind::Attention)
        cost = static_cast<double>(first.shape.back());
    }
    double score = (static_cast<double>(reused_[static_cast<size_t>(id)]) + 1.0) * cost /
                   static_cast<double>(std::max<int64_t>(n.size_bytes(), 1));
    ranked.emplace_back(-score, id);
  }
  std::sort(ranked.begin(), ranked.end());
  for (const auto& [neg_score, id] : ranked) {
    const int64_t bytes = graph_.node(id).size_bytes();
    const bool keep = used + bytes <= options_.cache_budget_bytes;
    if (keep) used += bytes;
    set(id, keep);
  }
}

void GraphSession::read_checked(NodeId target, const Box& box, std::span<std::byte> out, DType dtype) {
  const Node& tn = graph_.node(target);
  const std::string what = absl::StrCat("read of ", op_display_name(tn), ":");
  if (dtype != tn.dtype)
    throw Error(absl::StrCat("[session] ", what, " node is ", dtype_name(tn.dtype), ", buffer is ", dtype_name(dtype)));
  check_box(what, tn, box);
  const int64_t expected = box.volume() * dtype_size(tn.dtype);
  if (static_cast<int64_t>(out.size()) != expected)
    throw Error(absl::StrCat("[session] ", what, " buffer has ", out.size(), " bytes, box needs ", expected));
  const auto start = std::chrono::steady_clock::now();
  std::fill(stats_.elements_per_node.begin(), stats_.elements_per_node.end(), 0);
  std::fill(stats_.kernels_per_node.begin(), stats_.kernels_per_node.end(), 0);
  stats_.elements_computed = stats_.kernels_run = stats_.steps = 0;
  if (box.empty()) return;

  choose_kept();
  std::vector<Region> valid(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) valid[i] = values_[i].valid;
  std::vector<Step> steps = plan_read(graph_, target, box, valid, options_.max_region_boxes, &reused_);
  last_plan_.clear();
  for (const Step& step : steps)
    absl::StrAppend(&last_plan_, "  %", step.node, " ", op_display_name(graph_.node(step.node)), " ",
                    step.compute.to_string(), "\n");
  if (const char* dump = std::getenv("TESSERA_DUMP"); dump != nullptr && std::strstr(dump, "plan") != nullptr)
    std::fprintf(stderr, "[plan] read %s %s: %zu steps\n%s", op_display_name(tn).c_str(), box.to_string().c_str(),
                 steps.size(), last_plan_.c_str());

  std::vector<TensorView> inputs;
  for (const Step& step : steps) {
    const Node& n = graph_.node(step.node);
    Value& v = values_[static_cast<size_t>(step.node)];
    try {
      ensure_buffer(step.node, v.kept ? Box::full(n.shape) : step.compute.bounding_box());
    } catch (...) {
      drop_transients();
      throw;
    }
    inputs.clear();
    for (NodeId in : n.inputs) inputs.push_back(values_[static_cast<size_t>(in)].view);
    for (const Box& b : step.compute.boxes()) {
      absl::Status status = backend_->run(KernelArgs{graph_, n, inputs, v.view, b});
      if (!status.ok()) {
        drop_transients();
        throw Error(absl::StrCat("[", op_display_name(n), "] ", status.message()));
      }
      stats_.kernels_per_node[static_cast<size_t>(step.node)] += 1;
      stats_.elements_per_node[static_cast<size_t>(step.node)] += b.volume();
      stats_.elements_computed += b.volume();
      stats_.kernels_run += 1;
    }
    v.valid.add(step.compute);
    stats_.steps += 1;
  }
  const Value& result = values_[static_cast<size_t>(target)];
  copy_box(result.view, box, out.data(), false);
  drop_transients();
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tessera
