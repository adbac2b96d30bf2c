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
//
// Threads: write, read, read_node, set_keep, explain, compile_ahead and save/load_plans may be
// called from any thread; they hold the session's memory pool lock, so calls on all sessions of
// one pool run one at a time (serialised, never interleaved). The references stats(),
// last_plan() and valid_region() return are only stable until the next such call.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "engine/graph.h"
#include "engine/memory_pool.h"
#include "planner/fold.h"
#include "planner/plan.h"
#include "planner/region_analysis.h"
#include "regions/region.h"

namespace tessera {

// The built-in backends; SessionOptions::backend_name selects any backend by name.
enum class BackendKind { Cpu, Reference };

// Whether a node's computed values stay in memory between reads. Auto follows the cache
// policy (everything without a budget; the best recomputation cost saved per byte with one).
// Always pins the node (it counts against the budget first); Never makes it transient: its
// values live only during the read that computes them.
enum class Keep : uint8_t { Auto, Always, Never };

// What a caller tells the cache policy about how it will write an input. The session turns a
// hint into expected reuse per node by simulating one such write and a read of the outputs:
// nodes the read needs beyond what the write dirties (attention's K and V under appends; the
// features around an edit in a conv net) are worth keeping; nodes it never reuses are transient.
struct InputHint {
  enum class Kind : uint8_t {
    Append,  // rows are appended along axis 0 (tokens of a sequence); reads take the new rows
    Edits,   // small boxes of `axes` change (image edits); reads take everything
  };
  std::string input;
  Kind kind = Kind::Append;
  std::vector<int> axes;  // Edits: the edited axes (empty: the last two)
};

struct SessionOptions {
  BackendKind backend = BackendKind::Cpu;
  // When not empty, the backend of this name (backends/registry.h: "cpu", "reference" or a
  // plugin on TESSERA_BACKEND_PATH) instead of `backend`. An absent backend is an Error listing
  // what was tried.
  std::string backend_name;
  // The host backend that runs the nodes the backend above does not support (and, for a
  // device backend, folds constants): those steps run there, with explicit copies of the boxes
  // they exchange with device memory. Reported, never silent: stderr says once which ops fall
  // back, SessionStats counts the steps and copies, explain() names the backend of each node.
  // Empty: no fallback; an unsupported op is an Error at the first read that needs it.
  std::string fallback_backend = "cpu";
  // Bytes of computed node values kept between reads; -1 keeps everything. Nodes that do not
  // fit are recomputed when needed (inputs and constants never count). Only for a session with
  // its own pool: with `pool` set, the pool's budget applies to all its sessions.
  int64_t cache_budget_bytes = -1;
  // The memory pool shared with other sessions (nullptr: a pool of this session's own).
  std::shared_ptr<MemoryPool> pool;
  // How inputs will be written (see InputHint).
  std::vector<InputHint> hints;
  // A region to compute with more boxes than this is widened to its bounding box.
  int max_region_boxes = 16;
  // A valid region with more boxes than this forgets its smallest boxes (they are recomputed
  // when needed), so planning never slows down with a session's history.
  int max_valid_boxes = 64;
  // Threads of the CPU backend's team (one parallel region per read); 0: TESSERA_THREADS or
  // the hardware's cores. Results do not depend on it.
  int threads = 0;
  // Run the fuse pass (planner/fuse.h): user-written composites and elementwise chains become
  // fused ops. Results stay exact (bitwise incremental == fresh) either way.
  bool fuse = true;
  // Nodes pinned from the start (as set_keep(node, Keep::Always) right after creation); the fuse
  // pass never absorbs them into a fused op, so their values exist to be kept.
  std::vector<NodeId> keep_always;
  // Time each step of every read (SessionStats::profile). The CPU backends time each launch
  // inside their one parallel region (with a team: the first member's view, waits included;
  // a group launch's time is its first member's, the others' zero: HostBackend::run);
  // a device backend then runs each step in a call of its own and synchronizes, so its reads
  // are slower: for finding where time goes, not for measuring throughput.
  bool profile = false;
};

// Of SessionOptions::profile: the steps of one op (display name; a linear's also names its
// weight's dtype and shape) over all reads so far.
struct OpProfile {
  int64_t steps = 0;
  double seconds = 0;
};

// Figures of the last read (elements, kernels, steps, seconds, per node) and of the session
// so far (plans, folding, arena).
struct SessionStats {
  int64_t elements_computed = 0;  // output elements computed by kernels, all nodes
  int64_t kernels_run = 0;        // kernel invocations (one per box)
  int64_t steps = 0;              // nodes that computed anything
  double seconds = 0;
  double plan_seconds = 0;  // of `seconds`: region analysis and plan lookup (compile on a miss)
  std::vector<int64_t> elements_per_node;  // indexed by NodeId
  std::vector<int64_t> kernels_per_node;
  bool plan_cache_hit = false;  // the last read ran a cached plan (false when it had no work)
  PlanCacheStats plans;         // cumulative: hits, misses, compiled, loaded, size
  int64_t reads = 0;            // cumulative reads, and those that found everything valid
  int64_t reads_without_work = 0;
  int64_t folded_nodes = 0;  // nodes computed once at creation by the fold pass
  int64_t folded_bytes = 0;
  int64_t merged_nodes = 0;  // nodes the cse pass merged into another
  int64_t fused_patterns = 0;  // user-written composites replaced by the composite op
  int64_t fused_chains = 0;    // elementwise chains replaced by one fused_elementwise node
  int64_t arena_bytes = 0;   // transient arena held now (grows to the largest plan, then stays)
  // Of the last read: steps run on the fallback backend, and explicit copies between host and
  // device memory (boxes and bytes; zero unless the session's backend is a device).
  int64_t fallback_steps = 0;
  int64_t copies = 0;
  int64_t copy_bytes = 0;
  std::map<std::string, OpProfile> profile;  // cumulative, when SessionOptions::profile is set
};

// A read pattern for compile_ahead: writes of boxes of inputs, then a read of a box of an
// output. Only the boxes' extents and relative placement matter to the plan it compiles.
struct ReadPattern {
  std::vector<std::pair<std::string, Box>> writes;
  std::string output;
  Box read;
};

// What a read would compute and why, without running anything (GraphSession::explain).
struct Explanation {
  struct Entry {
    NodeId node;
    std::string op;        // display name
    Region want;           // what the read needs of the node
    Region compute;        // need \ valid: what it would compute
    int64_t valid_elements;  // of `want`, already valid
    std::string why;       // why `compute` is not valid: never computed, not kept, which write dirtied it
    std::string backend;   // the backend that computes it, when the session has two (else empty)
  };
  std::vector<Entry> entries;  // in topological order, every node the read needs
  int64_t elements = 0;        // total elements it would compute
  std::string to_string() const;
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
    const NodeId id = output_id(output);
    // Validated before the result is allocated: a bad or huge box is an Error, not bad_alloc.
    check_box(absl::StrCat("read of '", std::string(output), "':"), graph_->node(id), box);
    MemoryPool::check_allocatable(dtype_bytes(dtype_of<T>(), box.volume()), "the result of a read");
    std::vector<T> out(static_cast<size_t>(box.volume()));
    read_checked(id, box, std::as_writable_bytes(std::span<T>(out)), dtype_of<T>());
    return out;
  }
  // Same for any node of the graph (tests, debugging).
  void read_node(NodeId node, const Box& box, std::span<std::byte> out);

  const SessionStats& stats() const { return stats_; }
  void clear_profile() { stats_.profile.clear(); }
  // The steps of the last read, one line each: node id, op and the region computed. Also
  // printed to stderr on every read when the environment has TESSERA_DUMP=plan.
  const std::string& last_plan() const;
  // Which nodes and boxes reading `box` of `output` would compute, and why; runs nothing and
  // changes nothing. Throws Error for unknown names and bad boxes like read().
  Explanation explain(std::string_view output, const Box& box) const;
  // Compiles the plans of declared patterns ahead of time (decode of one token, prefill chunks,
  // an image edit of up to N x N pixels). Each pattern is simulated from the steady state: kept
  // nodes valid, transient ones empty, then the writes' dirt removed. Returns how many plans
  // were new. Throws Error for unknown names or bad boxes.
  int compile_ahead(std::span<const ReadPattern> patterns);
  // The optional on-disk plan cache (see PlanCache::save/load): load() ignores, with a warning,
  // a file that is stale, corrupt or made for another graph or backend, and returns false.
  void save_plans(const std::string& path) const;
  bool load_plans(const std::string& path);
  // The graph the session was created on (node ids in this API are its ids), and the graph it
  // executes: the same after the session passes folded constants into constants, merged equal
  // nodes and fused patterns and elementwise chains (plans, dumps and explain name its nodes).
  const Graph& graph() const { return user_; }
  const Graph& execution_graph() const { return *exec_; }
  // The node of the execution graph that computes a node of graph().
  NodeId execution_node(NodeId node) const;
  const Region& valid_region(NodeId node) const;
  bool is_kept(NodeId node) const;
  // True for nodes the fold pass computed at creation (constant-only subgraphs): always valid,
  // never recomputed, not counted in kept_bytes().
  bool is_folded(NodeId node) const;
  // True when the session passes absorbed the node (into a fused op, or into a folded constant):
  // its value is never computed on its own (reading it with read_node still works, computing it
  // then).
  bool is_fused_away(NodeId node) const;
  // Sets the keep policy of a node; a node that is no longer kept is dropped now. Keep::Always on
  // a node fused away is an Error (its value is never computed): name it in
  // SessionOptions::keep_always instead.
  void set_keep(NodeId node, Keep keep);
  int64_t kept_bytes() const;  // bytes of computed values held now
  const std::shared_ptr<MemoryPool>& pool() const { return pool_; }
  // The cache policy's expected reuse of a node from the hints (0 without hints), in elements.
  double hinted_reuse(NodeId node) const;
  std::string_view backend_name() const { return backend_->name(); }
  // The session's backend and, when it has one, its fallback (nullptr otherwise): for their
  // stats and descriptions.
  const Backend& backend() const { return *backend_; }
  const Backend* fallback() const { return fallback_.get(); }
  // The nodes of the execution graph the session's backend does not support, which run on the
  // fallback backend (empty when there is none or nothing falls back): "op (N nodes)" each.
  std::vector<std::string> fallback_ops() const;

 private:
  struct Value;
  struct Mirror;
  friend class MemoryPool;
  struct KeepCandidate {
    GraphSession* session;
    NodeId node;
    int64_t bytes;
    double score;
  };
  // For MemoryPool::rank (pool lock held): explicit keeps are applied at once (pins add to
  // `pinned`); the others are appended as candidates.
  void collect_candidates(std::vector<KeepCandidate>& candidates, int64_t& pinned);
  void apply_kept(NodeId id, bool keep);
  void derive_hints();
  struct WriteRecord {  // explain formats it: "write #3 to 'ids' [5, 6)"
    int64_t sequence;
    NodeId input;
    Box box;
  };
  template <class T>
  static DType dtype_of();
  void write(std::string_view input, const Box& box, std::span<const std::byte> data, DType dtype);
  void read_checked(NodeId node, const Box& box, std::span<std::byte> out, DType dtype);
  NodeId output_id(std::string_view name) const;
  void check_box(std::string_view what, const Node& node, const Box& box) const;
  void check_graph_unchanged() const;
  void choose_kept();
  void ensure_buffer(NodeId id, const Box& extent);
  void drop(NodeId id);
  void run_passes();
  void fold_constants_now(const Graph& graph, const FoldResult& fold, std::vector<std::shared_ptr<const void>>& values);
  void reset_state();
  void release_buffers();
  NodeId exec_id(NodeId user_node) const;
  ReadState read_state() const;
  // The cached plan of the steps' pattern, compiled (and printed under TESSERA_DUMP=plan when
  // `dump`) on a miss.
  Plan& plan_for(NodeId target, std::span<const Step> steps, bool dump);
  Plan& compile(PlanPattern pattern, bool dump);
  std::vector<Region> simulated_valid(bool transients_valid) const;
  void remove_dirt(std::vector<Region>& valid, NodeId input, const Box& box) const;
  // `target_out`: when set, the last step's output (the read's transient target, computed over
  // exactly the box read) is written there (the caller's buffer) instead of into the arena.
  void execute(const Plan& plan, std::span<const Step> steps, bool count, std::byte* target_out = nullptr);
  void reset_transients(std::span<const Step> steps);
  // The pool's backend for the options (shared by the pool's sessions with the same choice).
  std::shared_ptr<Backend> make_backend(const SessionOptions& options, bool fallback);
  void prepare(Plan& plan);  // the backends' prepared forms, once per plan
  // Device placement (engine/session_device.cc).
  void place_nodes();
  bool on_device(NodeId id) const { return on_device_[static_cast<size_t>(id)] != 0; }
  Backend& backend_of(NodeId id) const { return on_fallback_[static_cast<size_t>(id)] ? *fallback_ : *backend_; }
  void device_view(NodeId id, const Plan& plan, const PlanStep& ps, const Box& extent);
  const TensorView& input_view(const Step& step, int input, bool device_step);
  void copy_to_host(NodeId id, const Box& box, void* dense);
  void invalidate_mirror(NodeId id, const Region& dirt);
  void drop_device(NodeId id);
  // `count`: a read's steps (timed into SessionStats::profile when profiling), not folding.
  absl::Status run_segment(const Plan& plan, size_t begin, size_t end, std::span<std::byte> scratch, bool count,
                           size_t& failed);

  std::shared_ptr<MemoryPool> pool_;  // first: every buffer below is returned to it
  const Graph& user_;
  const std::weak_ptr<const void> user_alive_;  // expires with the user graph (Graph::liveness)
  const int32_t node_count_;  // the user graph's size when the session was created
  std::unique_ptr<Graph> exec_;    // what the session runs (section "execution graph" above)
  const Graph* graph_ = nullptr;   // the graph the per-node state below indexes: exec_ (or
                                   // the user graph while folding)
  uint64_t graph_hash_ = 0;
  std::vector<NodeId> to_exec_;    // per user node
  std::vector<NodeId> to_user_;    // per exec node: the first user node it stands for, or -1
  SessionOptions options_;
  std::shared_ptr<Backend> backend_;   // the pool's (see MemoryPool::backend)
  std::shared_ptr<Backend> fallback_;  // host backend for what backend_ lacks (nullptr: none)
  std::vector<uint8_t> on_fallback_;   // per node of graph_: its steps run on fallback_
  std::vector<uint8_t> on_device_;     // per node: its value lives in backend_'s device memory
  std::vector<Mirror> mirrors_;        // per node (device sessions only): the other side's copy
  BufferHandle device_arena_;          // transients of device steps, at the plan's offsets
  int64_t device_arena_bytes_ = 0;
  std::vector<std::byte> staging_;     // dense boxes on their way between host and device
  std::vector<Value> values_;
  std::vector<Region> valid_;   // per node: where its stored values are current
  std::vector<uint8_t> kept_;   // per node: 1 when the cache policy keeps it
  std::vector<uint8_t> fixed_;  // per node: inputs and constants (folded values are constants)
  std::vector<uint8_t> live_;   // per node: reachable from an output (fused-away nodes are not)
  std::vector<uint8_t> user_reaches_output_;  // per user node: some output of the user graph reads it
  std::vector<Keep> keep_;
  std::vector<int64_t> reused_;       // elements reads found valid, per node (cache policy signal)
  std::vector<int64_t> invalidated_;  // elements writes took from valid values, per node
  bool keep_changed_ = true;
  int64_t reads_since_ranking_ = 0;
  SessionStats stats_;
  PlanCache plans_;
  std::vector<double> hint_reuse_;  // per node, from options_.hints (empty: no hints)
  ReadScratch scratch_;
  DirtScratch dirt_scratch_;  // of write()
  std::vector<Step> steps_;
  std::vector<NodeId> counted_;  // nodes whose per-node stats the last read set
  std::vector<KernelInput> input_views_;  // of every step of the running plan (reused)
  std::vector<StepLaunch> launches_;
  mutable std::string last_plan_;
  mutable bool last_plan_stale_ = false;
  std::vector<int64_t> dirtied_by_;  // per node: sequence of the last write that dirtied it, -1 none
  std::vector<WriteRecord> write_log_;  // the last writes, for explain: write #s at (s - 1) % 64
  int64_t write_sequence_ = 0;
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
