// GraphSession: keeps computed values of a graph and recomputes only what changed.
//
// Every node has a valid region: where its stored values equal what a full recomputation from
// the current inputs gives. write() overwrites a box of an input and removes forward(box) from
// the valid region of every downstream node. read() computes need \ valid for exactly the
// elements the read depends on, bottom-up, and copies the requested box out. Results are
// bitwise identical to a fresh session computing the whole graph on the same backend.
//
// Errors (unknown names, boxes out of range, wrong buffer sizes or dtypes, kernel failures such
// as out-of-range ids) throw tessera::Error and leave the session usable: values computed before
// the failure stay valid, nothing half-written is marked valid.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "engine/graph.h"
#include "regions/region.h"

namespace tessera {

enum class BackendKind { Cpu, Reference };

// Whether a node's computed values stay in memory between reads. Auto follows the cache
// policy (everything without a budget; the best recomputation cost saved per byte with one).
// Always pins the node (it counts against the budget first); Never makes it transient: its
// values live only during the read that computes them.
enum class Keep : uint8_t { Auto, Always, Never };

struct SessionOptions {
  BackendKind backend = BackendKind::Cpu;
  // Bytes of computed node values kept between reads; -1 keeps everything. Nodes that do not
  // fit are recomputed when needed (inputs and constants never count).
  int64_t cache_budget_bytes = -1;
  // A region to compute with more boxes than this is widened to its bounding box.
  int max_region_boxes = 16;
};

struct SessionStats {
  int64_t elements_computed = 0;  // output elements computed by kernels, all nodes
  int64_t kernels_run = 0;        // kernel invocations (one per box)
  int64_t steps = 0;              // nodes that computed anything
  double seconds = 0;
  std::vector<int64_t> elements_per_node;  // indexed by NodeId
  std::vector<int64_t> kernels_per_node;
};

class GraphSession {
 public:
  explicit GraphSession(const Graph& graph, SessionOptions options = {});
  ~GraphSession();
  GraphSession(const GraphSession&) = delete;
  GraphSession& operator=(const GraphSession&) = delete;

  // Overwrites `box` of a named input with dense row-major data of the input's dtype.
  void write(std::string_view input, const Box& box, std::span<const std::byte> data);
  template <class T>
  void write(std::string_view input, const Box& box, std::span<const T> data) {
    write(input, box, std::as_bytes(data), dtype_of<T>());
  }
  template <class T>
  void write(std::string_view input, const Box& box, const std::vector<T>& data) {
    write(input, box, std::span<const T>(data));
  }

  // Makes `box` of a named output valid and copies it, dense row-major, into `out`.
  void read(std::string_view output, const Box& box, std::span<std::byte> out);
  template <class T>
  std::vector<T> read(std::string_view output, const Box& box) {
    std::vector<T> out(static_cast<size_t>(box.volume() < 0 ? 0 : box.volume()));
    read_checked(output_id(output), box, std::as_writable_bytes(std::span<T>(out)), dtype_of<T>());
    return out;
  }
  // Same for any node of the graph (tests, debugging).
  void read_node(NodeId node, const Box& box, std::span<std::byte> out);

  const SessionStats& stats() const { return stats_; }
  // The steps of the last read, one line each: node id, op and the region computed. Also
  // printed to stderr on every read when the environment has TESSERA_DUMP=plan.
  const std::string& last_plan() const { return last_plan_; }
  const Graph& graph() const { return graph_; }
  const Region& valid_region(NodeId node) const;
  bool is_kept(NodeId node) const;
  // Sets the keep policy of a node; a node that is no longer kept is dropped now.
  void set_keep(NodeId node, Keep keep);
  int64_t kept_bytes() const;  // bytes of computed values held now
  std::string_view backend_name() const { return backend_->name(); }

 private:
  struct Value;
  template <class T>
  static DType dtype_of();
  void write(std::string_view input, const Box& box, std::span<const std::byte> data, DType dtype);
  void read_checked(NodeId node, const Box& box, std::span<std::byte> out, DType dtype);
  NodeId output_id(std::string_view name) const;
  void check_box(std::string_view what, const Node& node, const Box& box) const;
  void choose_kept();
  void ensure_buffer(NodeId id, const Box& extent);
  void drop(NodeId id);
  void drop_transients();

  const Graph& graph_;
  SessionOptions options_;
  std::unique_ptr<Backend> backend_;
  std::vector<Value> values_;
  std::vector<Keep> keep_;
  std::vector<int64_t> reused_;  // elements reads found valid, per node (cache policy signal)
  SessionStats stats_;
  std::string last_plan_;
};

template <>
inline DType GraphSession::dtype_of<float>() { return DType::F32; }
template <>
inline DType GraphSession::dtype_of<int32_t>() { return DType::I32; }
template <>
inline DType GraphSession::dtype_of<int64_t>() { return DType::I64; }
template <>
inline DType GraphSession::dtype_of<uint8_t>() { return DType::Bool; }

}  // namespace tessera
