// Copying a global-coordinate box between [N, C, d, h, w] tensors that each
// cover their own box of the global volume (their "origin"), and packing a box
// into / out of a contiguous [N, C, box] message buffer.
#pragma once
#include "hybrid3d/core/box.hpp"
#include "hybrid3d/core/tensor.hpp"

namespace h3d {

enum class CopyMode { kAssign, kAdd };

// dst[region] (=|+=) src[region]; `src_origin`/`dst_origin` are the global
// boxes the two tensors cover. N and C are taken from src.
void copy_box(const Tensor& src, const Box& src_origin, Tensor& dst, const Box& dst_origin, const Box& region,
              CopyMode mode = CopyMode::kAssign);

// Contiguous [N, C, region] buffer <-> a box of a tensor.
void pack_box(const Tensor& src, const Box& src_origin, const Box& region, float* buf);
void unpack_box(const float* buf, const Box& region, Tensor& dst, const Box& dst_origin, CopyMode mode);

}  // namespace h3d

namespace h3d {

// In-place change of layout inside one buffer `t` of N*C channels: the cells
// of `region` move from the layout over box `from` to the layout over box
// `to`. Either `to` contains `from` (growing into a halo-padded layout; the
// buffer's capacity must hold the larger one) or `from` contains `to`
// (shrinking back). Cells of the new layout outside `region` are left as
// they are: fill them with fill_outside().
void relayout_in_place(float* t, int64_t nc, const Box& from, const Box& to, const Box& region);

// Sets every cell of the [nc, origin] buffer outside `inner` to v.
void fill_outside(float* t, int64_t nc, const Box& origin, const Box& inner, float v);

}  // namespace h3d
