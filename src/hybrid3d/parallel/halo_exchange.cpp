#include "hybrid3d/parallel/halo_exchange.hpp"

#include <algorithm>
#include <limits>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/profiler.hpp"

namespace h3d {

namespace {
constexpr int kTagForward = 7001;
constexpr int kTagReverse = 7002;

// The input box (unclipped) that rank s's outputs read.
Box needed_box(const Window3D& w, const Distribution& out, int s) {
  Box ob = out.box(s), nb;
  for (int d = 0; d < 3; ++d) nb.r[d] = w[d].needed(ob.r[d]);
  return nb;
}

std::vector<int64_t> with_nc(int64_t n, int64_t c, const Box& b) {
  auto e = b.extents();
  return {n, c, e[0], e[1], e[2]};
}

}  // namespace

HaloExchange::HaloExchange(const Distribution& in, const Window3D& w, const Distribution& out, int me,
                           float pad_value)
    : HaloExchange(in, [&](int q) { return needed_box(w, out, q); }, me, pad_value) {}

HaloExchange::HaloExchange(const Distribution& from, const std::function<Box(int)>& needed, int me,
                           float pad_value)
    : pad_value_(pad_value) {
  const Box volume{{Range{0, from.extent()[0]}, Range{0, from.extent()[1]}, Range{0, from.extent()[2]}}};
  own_ = from.box(me);
  padded_ = needed(me);
  Box need = padded_.intersect(volume);
  local_ = need.intersect(own_);
  for (int q = 0; q < from.group_size(); ++q) {
    if (q == me) continue;
    Box from_q = need.intersect(from.box(q));
    if (!from_q.empty()) recv_.push_back({q, from_q, {}});
    Box to_q = needed(q).intersect(volume).intersect(own_);
    if (!to_q.empty()) send_.push_back({q, to_q, {}});
  }
  trivial_ = recv_.empty() && send_.empty() && padded_ == own_;
}

Box HaloExchange::early_box() const {
  Box b = padded_;
  // Each received box lies beside the own box in at least one dimension;
  // keeping to the own range there excludes it.
  for (const auto& r : recv_)
    for (int d = 0; d < 3; ++d) {
      if (r.box.r[d].hi <= own_.r[d].lo) b.r[d].lo = std::max(b.r[d].lo, own_.r[d].lo);
      if (r.box.r[d].lo >= own_.r[d].hi) b.r[d].hi = std::min(b.r[d].hi, own_.r[d].hi);
    }
  return b;
}

void HaloExchange::wait_all() { reqs_.wait_all(); }

// Posts a receive for every `incoming` region, then packs every `outgoing`
// region of `src` (which covers `src_origin`) and sends it.
void HaloExchange::post(const Comm& group, BoxKernels& k, std::vector<Region>& incoming, std::vector<Region>& outgoing,
                        const Tensor& src, const Box& src_origin, int tag) {
  ProfileScope timed(prof::kHaloExposed);
  const int64_t nc = src.dim(0) * src.dim(1);
  H3D_CHECK(reqs_.empty(), "a halo exchange started while the previous one is outstanding");
  // Message buffers come from the exchanged tensor's allocator (device
  // memory for a device backend) and are kept between steps.
  auto size_buffer = [&](Region& r) {
    if (&r.buf.allocator() != &src.allocator()) r.buf.release();
    r.buf.set_allocator(src.allocator());
    r.buf.reshape_uninit({nc * r.box.volume()});
  };
  for (auto& r : incoming) {
    size_buffer(r);
    group.irecv(r.buf.data(), r.buf.numel(), r.peer, tag, reqs_);
  }
  for (auto& r : outgoing) {
    size_buffer(r);
    k.copy_box(src.data(), src_origin, r.buf.data(), r.box, r.box, nc, CopyMode::kAssign);
    group.isend(r.buf.data(), r.buf.numel(), r.peer, tag, reqs_);
  }
}

void HaloExchange::start(const Comm& group, BoxKernels& k, const Tensor& x, Tensor& xp) {
  const int64_t nc = x.dim(0) * x.dim(1);
  post(group, k, recv_, send_, x, own_, kTagForward);
  xp.set_allocator(x.allocator());
  xp.reshape_uninit(with_nc(x.dim(0), x.dim(1), padded_));
  k.fill_outside(xp.data(), nc, padded_, local_, pad_value_);
  k.copy_box(x.data(), own_, xp.data(), padded_, local_, nc, CopyMode::kAssign);
}

bool HaloExchange::start_in_place(const Comm& group, BoxKernels& k, Tensor& x, Tensor& xp) {
  auto shape = with_nc(x.dim(0), x.dim(1), padded_);
  if (x.capacity() < size_t(Tensor::count(shape)) || !padded_.contains(own_)) return false;
  const int64_t nc = x.dim(0) * x.dim(1);
  post(group, k, recv_, send_, x, own_, kTagForward);  // packs the outgoing cells before they move
  k.relayout_in_place(x.data(), nc, own_, padded_, local_);
  xp = std::move(x);
  xp.reshape_uninit(shape);  // fits the capacity: the cells stay where they were moved
  k.fill_outside(xp.data(), nc, padded_, local_, pad_value_);
  return true;
}

void HaloExchange::finish(BoxKernels& k, Tensor& xp) {
  ProfileScope timed(prof::kHaloExposed);
  wait_all();
  const int64_t nc = xp.dim(0) * xp.dim(1);
  for (auto& r : recv_) k.copy_box(r.buf.data(), r.box, xp.data(), padded_, r.box, nc, CopyMode::kAssign);
}

void HaloExchange::reverse_start(const Comm& group, BoxKernels& k, Tensor& dxp, Tensor& dx) {
  // The cells I received in forward go back to their owners; the cells I
  // sent come back to me as gradients.
  post(group, k, send_, recv_, dxp, padded_, kTagReverse);
  const int64_t nc = dxp.dim(0) * dxp.dim(1);
  auto shape = with_nc(dxp.dim(0), dxp.dim(1), own_);
  if (padded_.contains(own_)) {  // shrink dxp into dx's layout in place
    k.relayout_in_place(dxp.data(), nc, padded_, own_, local_);
    dx = std::move(dxp);
    dx.reshape_uninit(shape);
  } else {
    dx.set_allocator(dxp.allocator());
    dx.reshape_uninit(shape);
    k.copy_box(dxp.data(), padded_, dx.data(), own_, local_, nc, CopyMode::kAssign);
    dxp.release();
  }
  k.fill_outside(dx.data(), nc, own_, local_, 0.0f);
}

void HaloExchange::reverse_finish(BoxKernels& k, Tensor& dx) {
  ProfileScope timed(prof::kHaloExposed);
  wait_all();
  const int64_t nc = dx.dim(0) * dx.dim(1);
  for (auto& r : send_) k.copy_box(r.buf.data(), r.box, dx.data(), own_, r.box, nc, CopyMode::kAdd);
}

}  // namespace h3d
