// Pass "conv_tiles": which convs take 4x4 output tiles (Conv2dAttrs::tile; conv2d_output_tile in
// engine/op_def.h). A conv the CPU backend runs as F(4x4, 3x3) Winograd computes whole 4x4 tiles
// whose outputs' bits depend on the tile's 6x6 input window, so its rules spread dirt over whole
// tiles: ~1.3x faster full forwards, but an edit's dirt grows by a tile a layer instead of a
// pixel. This pass gives 4x4 tiles to the convs of at least 1024 outputs per channel (smaller
// maps run no faster in 4x4 tiles) that any edit of any input dirties whole anyway (those behind
// a group norm, say: a VAE decoder's), where the wider rules cost nothing: a
// one-element write at the first and at the last element of each input dirties the whole of the
// conv's spatial output, or nothing. Every other conv keeps the tile its graph gave it (1 unless
// the graph's builder asked for 4). The choice depends on the graph alone, so every session of a
// graph computes the same bits.
#pragma once

#include <cstdint>
#include <optional>

#include "planner/rebuild.h"

namespace tessera {

// nullopt when no conv changes. `changed`: the convs given 4x4 tiles.
std::optional<Rewritten> choose_conv_tiles(const Graph& graph, int64_t& changed);

}  // namespace tessera
