// HostBackend: the Backend interface over host memory, for backends whose kernels are plain
// KernelFns (cpu, reference, and plugins that reuse them). A subclass names itself and picks a
// kernel per node; buffers, copies, plan preparation and running are shared.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "backends/backend.h"
#include "backends/cpu/worker_team.h"

namespace tessera {

class HostBackend : public Backend {
 public:
  HostBackend() : Backend(/*host_addressable=*/true) {}
  ~HostBackend() override;  // frees the buffers still allocated
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

  // OK when kernel_for() has a kernel for the node.
  absl::Status supports(const Graph& graph, const Node& node) const override;
  absl::StatusOr<BufferHandle> allocate(int64_t size_bytes) override;
  void free(BufferHandle buffer) override;
  absl::Status copy_in(const BufferRegion& region, const Box& box, const void* host) override;
  absl::Status copy_out(const BufferRegion& region, const Box& box, void* host) override;
  // One KernelFn per step (kernel_for), plus what KernelArgs needs of the node.
  absl::StatusOr<std::unique_ptr<PreparedPlan>> prepare(const Graph& graph,
                                                        const Plan& plan) override;
  // Runs the launches in one parallel region of the backend's team (set_threads): a launch with
  // enough work is cut into a few tiles per member along the outermost axis that has room
  // (kernels compute each element the same way whatever box they get, so the cut never changes
  // a bit); a lighter launch is one tile, always run by member 0 (a chain of light steps stays on
  // one core while the others read ahead into the coming weights). Members claim tiles from a
  // counter per launch (member 0 from the last tile down, the others from the first up:
  // claim_tile) and start a launch once every tile of the previous one is done, so a
  // member the OS has descheduled holds up the others only by the tile it has claimed, never by
  // the tiles it has not reached. A decode attention with fewer K/V heads than members over
  // enough keys runs in its two phases instead (attention_phases_for; host_team.cc): a scores
  // tile of keys, then a part of the value columns, per member.
  // Consecutive launches of one group (group_kernel_for: the q, k and v linears of a decode
  // step) over the same few rows run as one call of their group kernel, which gives each the
  // bits of its own launch (BackendStats::grouped_launches counts the launches run inside
  // another's call); a team cuts a group into tiles like one launch, each tile the same part of
  // every member's box.
  // Returns the first kernel error unchanged and sets last_failed_step() (the caller knows the
  // step, hence the op). Each member's kernels get their own slice of `scratch` (prepare sized
  // it for the team).
  absl::Status run(const PreparedPlan& prepared, std::span<const StepLaunch> launches,
                   std::span<std::byte> scratch) override;
  // Threads of the team (>= 1; default WorkerTeam::default_size()); plans prepared before a
  // change are refused by run(). Teams are shared by every backend of the same size
  // (WorkerTeam::shared). CPU-only, like host_address.
  void set_threads(int threads);
  int threads() const { return threads_; }
  // When set, each run() stores there the seconds of each of its launches (with a team: from
  // the first member's start of the launch to its start of the next), for SessionOptions::profile.
  void set_launch_times(std::vector<double>* times) { launch_times_ = times; }
  absl::Status synchronize() override { return absl::OkStatus(); }
  // Wakes the team's sleeping members (WorkerTeam::wake), so that they poll when run() starts.
  void expect_run() override;

  // CPU-only accessor: the host address of a buffer of this backend (nullptr when unknown).
  void* host_address(BufferHandle buffer) const;

 protected:
  // The kernel for `node` (nullptr: unsupported). Depends only on the node and its inputs.
  virtual KernelFn kernel_for(const Graph& graph, const Node& node) const = 0;
  // What `kernel` wants prepared once for `node` (KernelNode::prepared; see
  // cpu::prepare_node_data), owned by the backend for its lifetime; nullptr: nothing.
  virtual const void* prepare_node(const Graph& /*graph*/, const Node& /*node*/, KernelFn /*kernel*/) { return nullptr; }
  // Bytes of what prepare_node made for `node` (0: nothing).
  virtual int64_t prepared_size(const Graph& /*graph*/, const Node& /*node*/, KernelFn /*kernel*/) const { return 0; }
  // The group twin of `kernel` (GroupKernelFn), nullptr for none: consecutive launches of it
  // that read the same input 0 over the same rows then run as one call (see run()).
  virtual GroupKernelFn group_kernel_for(KernelFn /*kernel*/) const { return nullptr; }
  // The two phases of `kernel` for an attention `node` (AttentionPhases), empty for none: a
  // team then runs a decode step's attention in them (see run()).
  virtual AttentionPhases attention_phases_for(const Graph& /*graph*/, const Node& /*node*/, KernelFn /*kernel*/) const {
    return {};
  }

 private:
  // Checks `box` and `region` against the buffer; the address of the region's first byte.
  absl::StatusOr<std::byte*> region_address(const BufferRegion& region, const Box& box) const;

  // run() on the team (host_team.cc), once run() has checked the plan and the scratch.
  absl::Status run_team(const PreparedPlan& prepared, std::span<const StepLaunch> launches, std::span<std::byte> scratch);
  absl::Status run_launch(const PreparedPlan& prepared, const StepLaunch& launch, int tile, int tiles,
                          std::span<std::byte> scratch) const;
  // Launches [j, j + count) as one call of their group kernel (their step's boxes checked by
  // groupable()).
  absl::Status run_group(const PreparedPlan& prepared, std::span<const StepLaunch> launches, size_t j, int count,
                         int tile, int tiles, std::span<std::byte> scratch) const;
  struct LaunchTiles;
  // Tile `tile` of an attention launch run in its phases: one of the first `score_tiles` tiles
  // of its scores, else (once those are done) a part of its values.
  absl::Status run_phase(const PreparedPlan& prepared, const StepLaunch& launch, uint32_t tile, uint32_t score_tiles,
                         const LaunchTiles& tiles, std::span<std::byte> scratch, float* shared) const;

  absl::flat_hash_map<uint64_t, int64_t> buffers_;  // live buffers: id (the address) -> bytes
  int threads_ = cpu::WorkerTeam::default_size();
  std::shared_ptr<cpu::WorkerTeam> team_;  // taken on the first run with threads_ > 1
  // Per launch of the current run: tiles claimed and finished (64-byte apart: members poll them).
  struct alignas(64) LaunchTiles {
    std::atomic<uint64_t> claimed{0};  // from both ends: claim_tile
    std::atomic<uint32_t> done{0};
    uint32_t total = 1;
  };
  std::unique_ptr<LaunchTiles[]> tiles_;
  size_t tiles_capacity_ = 0;
  // Where a member reads ahead: a streaming launch of the current run and an address in its weight.
  struct ReadCursor {
    size_t launch;
    const char* at;
  };
  void read_ahead(const PreparedPlan& prepared, std::span<const StepLaunch> launches, size_t j,
                  const LaunchTiles& previous, ReadCursor& cursor) const;
  static constexpr size_t kNoLaunch = ~size_t{0};
  std::vector<size_t> kv_prefetch_;       // per launch of the current run (1 thread; see run())
  std::vector<int> group_count_;          // per launch of the current run (a team; see run())
  std::vector<uint32_t> score_tiles_;     // per launch of the current run (a team; see run())
  std::vector<size_t> previous_;          // per launch of the current run (a team; see run())
  std::vector<size_t> next_stream_;       // per launch of the current run (and one past the last)
  std::vector<int64_t> streamed_before_;  // per launch of the current run (and one past the last)
  std::vector<double>* launch_times_ = nullptr;
};

}  // namespace tessera
