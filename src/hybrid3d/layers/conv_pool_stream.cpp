#include "hybrid3d/layers/conv_pool_stream.hpp"

#include <algorithm>

#include "hybrid3d/core/error.hpp"

namespace h3d {

Window1D ConvPoolStream::composed(const Window1D& conv, const Window1D& pool) {
  // Pooling output o reads conv rows [o*s_p - p_p, +k_p), and conv row r
  // reads input rows [r - p_c, +k_c) (stride 1).
  Window1D w;
  w.k = pool.k + conv.k - 1;
  w.s = pool.s;
  w.p_lo = pool.p_lo + conv.p_lo;
  w.p_hi = pool.p_hi + conv.p_hi;
  return w;
}

void ConvPoolStream::plan(const Geometry& g) {
  H3D_CHECK(g.conv.s == 1, "ConvPoolStream: convolution stride " << g.conv.s);
  g_ = g;
  const Box& o = g.own_out;
  // The conv rows of one pooling output plane: s_p planes of the
  // pooling's input extents in H and W.
  const int64_t conv_h = g.pool.needed(o.r[1]).size(), conv_w = g.pool.needed(o.r[2]).size();
  const int64_t per_plane = g.cout * g.pool.s * conv_h * conv_w * int64_t(sizeof(float));
  const int64_t sample = g.cout * g.pool.needed(o.r[0]).size() * conv_h * conv_w * int64_t(sizeof(float));
  const int64_t budget = std::max(g.slab_bytes, sample / 16);
  const int64_t rows = std::clamp<int64_t>(budget / std::max<int64_t>(1, per_plane), 1, o.r[0].size());
  slab_out_.clear();
  mask_offset_.clear();
  mask_words_per_sample_ = 0;
  for (int64_t a = o.r[0].lo; a < o.r[0].hi; a += rows) {
    slab_out_.push_back(Range{a, std::min(a + rows, o.r[0].hi)});
    const Slab s = slab(int64_t(slab_out_.size()) - 1);
    H3D_CHECK(g.padded_in.contains(s.in), "ConvPoolStream: slab input " << s.in << " outside " << g.padded_in);
    mask_offset_.push_back(mask_words_per_sample_);
    mask_words_per_sample_ += s.mask_words;
  }
}

ConvPoolStream::Slab ConvPoolStream::slab(int64_t t) const {
  Slab s;
  s.out = g_.own_out;
  s.out.r[0] = slab_out_[size_t(t)];
  for (int d = 0; d < 3; ++d) s.conv.r[d] = g_.pool.needed(s.out.r[d]);
  s.inside = s.conv.intersect(g_.conv_volume);
  H3D_CHECK(!s.inside.empty(), "ConvPoolStream: the windows of " << s.out << " read only padding");
  for (int d = 0; d < 3; ++d) s.in.r[d] = g_.conv.needed(s.inside.r[d]);
  s.mask_words = max_pool() ? (g_.cout * s.out.volume() + 7) / 8 : (g_.cout * s.inside.volume() + 63) / 64;
  return s;
}

ConvDesc ConvPoolStream::conv_desc(const Slab& s) const {
  ConvDesc d;
  d.n = 1;
  d.cin = g_.cin;
  d.cout = g_.cout;
  d.in = s.in.extents();
  d.out = s.inside.extents();
  d.k = {g_.conv.k, g_.conv.k, g_.conv.k};
  d.bias = g_.bias;
  d.fused_leaky_slope = g_.leaky_slope;
  return d;
}

PoolDesc ConvPoolStream::pool_desc(const Slab& s) const {
  PoolDesc d;
  d.kind = g_.pool_kind;
  // Max pooling's backward applies the ReLU's gradient by the recorded signs.
  if (max_pool() && g_.leaky_slope > 0.0f) d.relu_grad_slope = g_.leaky_slope;
  d.n = 1;
  d.c = g_.cout;
  d.in = s.inside.extents();
  d.out = s.out.extents();
  d.k = {g_.pool.k, g_.pool.k, g_.pool.k};
  d.stride = {g_.pool.s, g_.pool.s, g_.pool.s};
  for (int i = 0; i < 3; ++i) {
    d.pad_lo[size_t(i)] = int(s.inside.r[i].lo - s.conv.r[i].lo);
    d.pad_hi[size_t(i)] = int(s.conv.r[i].hi - s.inside.r[i].hi);
  }
  return d;
}

void ConvPoolStream::shape_buffers(const Slab& s) {
  const auto in = s.in.extents(), conv = s.inside.extents(), out = s.out.extents();
  if (!whole_input(s)) xs_.reshape_uninit({1, g_.cin, in[0], in[1], in[2]});
  cs_.reshape_uninit({1, g_.cout, conv[0], conv[1], conv[2]});
  if (!whole_output(s)) ps_.reshape_uninit({1, g_.cout, out[0], out[1], out[2]});
}

const float* ConvPoolStream::slab_input(Backend& be, const float* xp_sample, const Slab& s) {
  if (whole_input(s)) return xp_sample;
  be.copy_box(xp_sample, g_.padded_in, xs_.data(), s.in, s.in, g_.cin, CopyMode::kAssign);
  return xs_.data();
}

uint64_t* ConvPoolStream::mask_at(int64_t sample, int64_t t) {
  return reinterpret_cast<uint64_t*>(mask_.data()) + sample * mask_words_per_sample_ + mask_offset_[size_t(t)];
}

void ConvPoolStream::forward(Backend& be, bool training, int64_t n, const float* xp, const float* w, const float* b,
                             float* y) {
  for (Tensor* t : {&xs_, &cs_, &ps_}) t->set_allocator(be.allocator());
  if (training && keeps_records()) {
    mask_.set_allocator(be.allocator());
    mask_.reshape_uninit({2 * n * mask_words_per_sample_});  // two floats of storage per word
  }
  const int64_t in_floats = g_.cin * g_.padded_in.volume(), out_floats = g_.cout * g_.own_out.volume();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < slabs(); ++t) {
      const Slab s = slab(t);
      shape_buffers(s);
      be.conv3d_forward(conv_desc(s), slab_input(be, xp + i * in_floats, s), w, b, cs_.data());
      if (training && !max_pool() && g_.leaky_slope > 0.0f) be.sign_mask(cs_.data(), mask_at(i, t), cs_.numel());
      float* y_i = y + i * out_floats;
      float* pooled = whole_output(s) ? y_i : ps_.data();
      if (training && max_pool())
        be.pool3d_forward_argmax(pool_desc(s), cs_.data(), pooled, argmax_at(i, t));
      else
        be.pool3d_forward(pool_desc(s), cs_.data(), pooled);
      if (!whole_output(s)) be.copy_box(ps_.data(), s.out, y_i, g_.own_out, s.out, g_.cout, CopyMode::kAssign);
    }
  xs_.release();
  cs_.release();
  ps_.release();
}

void ConvPoolStream::backward(Backend& be, int64_t n, const float* xp, const float* dy, float* dw, float* db) {
  for (Tensor* t : {&xs_, &cs_, &ps_}) t->set_allocator(be.allocator());
  const int64_t weights = g_.cout * g_.cin * int64_t(g_.conv.k) * g_.conv.k * g_.conv.k;
  Tensor part_w(be.allocator()), part_b(be.allocator());  // a later slab's partial sums
  part_w.reshape_uninit({weights});
  part_b.reshape_uninit({g_.cout});
  const int64_t in_floats = g_.cin * g_.padded_in.volume(), out_floats = g_.cout * g_.own_out.volume();
  bool first = true;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < slabs(); ++t) {
      const Slab s = slab(t);
      shape_buffers(s);
      const float* dy_i = dy + i * out_floats;
      if (!whole_output(s)) {
        be.copy_box(dy_i, g_.own_out, ps_.data(), s.out, s.out, g_.cout, CopyMode::kAssign);
        dy_i = ps_.data();
      }
      H3D_CHECK(!keeps_records() || mask_.numel() >= 2 * n * mask_words_per_sample_,
                "ConvPoolStream: backward without a training forward");
      if (max_pool()) {
        be.pool3d_backward_argmax(pool_desc(s), argmax_at(i, t), dy_i, cs_.data());
      } else {
        be.pool3d_backward(pool_desc(s), nullptr, dy_i, cs_.data());
        if (g_.leaky_slope > 0.0f)
          be.masked_slope_backward(mask_at(i, t), g_.leaky_slope, cs_.data(), cs_.data(), cs_.numel());
      }
      be.conv3d_backward_weights(conv_desc(s), slab_input(be, xp + i * in_floats, s), cs_.data(),
                                 first ? dw : part_w.data(), g_.bias ? (first ? db : part_b.data()) : nullptr);
      if (!first) {
        be.axpy(weights, 1.0f, part_w.data(), dw);
        if (g_.bias) be.axpy(g_.cout, 1.0f, part_b.data(), db);
      }
      first = false;
    }
  xs_.release();
  cs_.release();
  ps_.release();
}

}  // namespace h3d
