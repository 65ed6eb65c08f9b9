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
