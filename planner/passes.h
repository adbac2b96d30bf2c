// The planner's named passes, in the order they run (DESIGN.md section 4).
//
// Session passes run once when a GraphSession is created, over the whole graph:
//   verify -> fuse_patterns -> fold -> cse -> fuse_elementwise -> conv_tiles
// Read passes run for a read that has work to do:
//   region analysis (every read: exact need \ valid per node) -> plan lookup; on a miss the
//   plan is compiled: kernel choice, memory plan (liveness, in-place reuse, arena offsets).
// `TESSERA_DUMP=passes` prints what each session pass did; `TESSERA_DUMP=plan` prints the steps
// of every read and every plan compiled. Several names may be given: `TESSERA_DUMP=plan,passes`.
#pragma once

#include <span>
#include <string_view>

namespace tessera {

enum class PassStage { Session, Read, Compile };

struct PassInfo {
  const char* name;
  PassStage stage;
  const char* what;  // one line for dumps and docs
};

// Every pass in run order.
std::span<const PassInfo> planner_passes();

// True when the environment variable TESSERA_DUMP lists `what` (read once per process).
bool dump_enabled(std::string_view what);

}  // namespace tessera
