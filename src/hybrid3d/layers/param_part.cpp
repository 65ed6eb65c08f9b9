#include "hybrid3d/layers/param_part.hpp"

#include <algorithm>

#include "hybrid3d/core/error.hpp"

namespace h3d {

namespace {

// The rows [r0, r1) of p's whole matrix (`rows`, [r1 - r0, cols]) into the part's same rows.
void take_rows(const ParamPart& q, const float* rows, int64_t r0, int64_t r1, float* part) {
  const int64_t f = int64_t(q.columns.size());
  for (int64_t r = r0; r < r1; ++r) {
    const float* src = rows + (r - r0) * q.cols;
    float* dst = part + r * f;
    for (int64_t j = 0; j < f; ++j) dst[j] = src[q.columns[size_t(j)]];
  }
}

}  // namespace

void take_part(const Param& p, const float* whole, float* part) {
  if (!p.part) {
    std::copy(whole, whole + p.value.numel(), part);
    return;
  }
  take_rows(*p.part, whole, 0, p.part->rows, part);
}

std::vector<float> gather_whole(const Comm& group, const Param& p, const float* part) {
  H3D_CHECK(p.part, "gather_whole: " << p.name << " is not held in parts");
  const ParamPart& q = *p.part;
  const int64_t f = int64_t(q.columns.size());
  const int ranks = group.size();
  std::vector<int64_t> widths(static_cast<size_t>(ranks));
  group.gather(&f, 1, widths.data(), 0);
  // (The counts matter on the root only, where `widths` is filled.)
  std::vector<int> counts(static_cast<size_t>(ranks)), displs(static_cast<size_t>(ranks), 0);
  for (int r = 0; r < ranks; ++r) counts[size_t(r)] = mpi_count(widths[size_t(r)]);
  for (int r = 1; r < ranks; ++r) displs[size_t(r)] = displs[size_t(r) - 1] + counts[size_t(r) - 1];
  const bool root = group.rank() == 0;
  std::vector<int64_t> columns(root ? size_t(q.cols) : 0);
  group.gatherv(q.columns.data(), f, columns.data(), counts, displs, 0);
  // The parts' values, rank by rank, each [rows, its columns].
  for (int r = 0; r < ranks; ++r) counts[size_t(r)] = mpi_count(widths[size_t(r)] * q.rows);
  for (int r = 1; r < ranks; ++r) displs[size_t(r)] = displs[size_t(r) - 1] + counts[size_t(r) - 1];
  std::vector<float> parts(root ? size_t(q.rows * q.cols) : 0);
  group.gatherv(part, f * q.rows, parts.data(), counts, displs, 0);
  if (!root) return {};
  H3D_CHECK(displs.back() + counts.back() == q.rows * q.cols,
            "the parts of " << p.name << " do not add up to its " << q.rows << " x " << q.cols << " values");
  std::vector<float> whole(size_t(q.rows * q.cols));
  int64_t first = 0;  // the first column of rank r in `columns`
  for (int r = 0; r < ranks; ++r) {
    const int64_t w = widths[size_t(r)];
    const float* src = parts.data() + displs[size_t(r)];
    for (int64_t row = 0; row < q.rows; ++row)
      for (int64_t j = 0; j < w; ++j) whole[size_t(row * q.cols + columns[size_t(first + j)])] = src[row * w + j];
    first += w;
  }
  return whole;
}

void scatter_whole(const Comm& comm, const Param& p, const float* whole, float* part) {
  H3D_CHECK(p.part, "scatter_whole: " << p.name << " is not held in parts");
  const ParamPart& q = *p.part;
  const int64_t rows_per_piece = std::max<int64_t>(1, (int64_t(4) << 20) / int64_t(sizeof(float)) / q.cols);
  std::vector<float> piece;
  for (int64_t r0 = 0; r0 < q.rows; r0 += rows_per_piece) {
    const int64_t r1 = std::min(q.rows, r0 + rows_per_piece);
    piece.resize(size_t((r1 - r0) * q.cols));
    if (comm.rank() == 0) std::copy(whole + r0 * q.cols, whole + r1 * q.cols, piece.data());
    comm.bcast(piece.data(), int64_t(piece.size() * sizeof(float)), 0);
    take_rows(q, piece.data(), r0, r1, part);
  }
}

}  // namespace h3d
