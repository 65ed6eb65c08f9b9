#include "hybrid3d/parallel/comm.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <limits>

#include "hybrid3d/core/error.hpp"

namespace h3d {

void mpi_check(int rc, const char* what, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, buf, &len);
  throw Error(std::string("MPI call failed: ") + what + ": " + std::string(buf, len) + " [" +
              detail::where(file, line) + "]");
}

int mpi_init(int* argc, char*** argv) {
  // OpenMPI busy-polls while it waits. With more threads than cores (ranks
  // oversubscribed, or the gradient reducer's thread), that spinning takes
  // the core from the thread the wait is for; yielding gives it back.
  // Only a default: the user's own setting wins.
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  return provided;
}

void mpi_finalize() { MPI_Finalize(); }

void mpi_abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this tells the compiler so
}

int mpi_count(int64_t n) {
  H3D_CHECK(n >= 0 && n <= std::numeric_limits<int>::max(),
            "an MPI message of " << n << " values exceeds MPI's int count");
  return static_cast<int>(n);
}

bool mpi_thread_multiple() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level == MPI_THREAD_MULTIPLE;
}

int ranks_on_this_node(const Comm& world) { return world.node().size(); }

int cores_on_this_node() { return int(std::max(1u, std::thread::hardware_concurrency())); }

Comm::Comm(MPI_Comm c, bool owned) : comm_(c), owned_(owned) {
  H3D_MPI(MPI_Comm_rank(c, &rank_));
  H3D_MPI(MPI_Comm_size(c, &size_));
}

Comm Comm::simulated(int rank, int size) {
  Comm c;
  c.simulated_ = true;
  c.rank_ = rank;
  c.size_ = size;
  return c;
}

void Comm::require_real(const char* what) const {
  H3D_CHECK(!simulated_, what << " on a simulated communicator (the memory planner replays only reductions, "
                                 "broadcasts and halo messages)");
}

Comm::~Comm() {
  if (owned_ && comm_ != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
}

Comm& Comm::operator=(Comm&& o) noexcept {
  if (this != &o) {
    if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    comm_ = o.comm_;
    owned_ = o.owned_;
    rank_ = o.rank_;
    size_ = o.size_;
    simulated_ = o.simulated_;
    sim_messages_ = o.sim_messages_;
    sim_bytes_ = o.sim_bytes_;
    o.comm_ = MPI_COMM_NULL;
    o.owned_ = false;
  }
  return *this;
}

Comm Comm::split(int color, int key) const {
  require_real("split");
  MPI_Comm out;
  H3D_MPI(MPI_Comm_split(comm_, color, key, &out));
  return Comm(out, true);
}

Comm Comm::node() const {
  require_real("node");
  MPI_Comm out;
  H3D_MPI(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &out));
  return Comm(out, true);
}

Comm Comm::dup() const {
  require_real("dup");
  MPI_Comm out;
  H3D_MPI(MPI_Comm_dup(comm_, &out));
  return Comm(out, true);
}

void Comm::barrier() const {
  if (!simulated_) H3D_MPI(MPI_Barrier(comm_));
}

// MPI counts are int: reduce in chunks so tensors past 2^31 elements work.
template <typename T>
static void allreduce_chunked(MPI_Comm c, T* data, int64_t n, MPI_Datatype type) {
  const int64_t chunk = std::numeric_limits<int>::max() / 2;
  for (int64_t off = 0; off < n; off += chunk) {
    int cnt = static_cast<int>(std::min(chunk, n - off));
    H3D_MPI(MPI_Allreduce(MPI_IN_PLACE, data + off, cnt, type, MPI_SUM, c));
  }
}

void Comm::allreduce_sum(float* data, int64_t n) const {
  if (reduces() && n > 0) allreduce_chunked(comm_, data, n, MPI_FLOAT);
}
void Comm::allreduce_sum(double* data, int64_t n) const {
  if (reduces() && n > 0) allreduce_chunked(comm_, data, n, MPI_DOUBLE);
}
double Comm::allreduce_max(double v) const {
  if (reduces()) H3D_MPI(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, comm_));
  return v;
}
int64_t Comm::allreduce_sum(int64_t v) const {
  if (reduces()) H3D_MPI(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_SUM, comm_));
  return v;
}
void Comm::bcast(void* data, int64_t bytes, int root) const {
  if (!reduces()) return;
  constexpr int64_t kPiece = int64_t(1) << 30;  // MPI counts are int
  for (int64_t off = 0; off < bytes; off += kPiece)
    H3D_MPI(MPI_Bcast(static_cast<char*>(data) + off, static_cast<int>(std::min(kPiece, bytes - off)), MPI_BYTE, root,
                      comm_));
}

namespace {

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<int16_t>() { return MPI_INT16_T; }
template <>
MPI_Datatype mpi_type<int>() { return MPI_INT; }
template <>
MPI_Datatype mpi_type<int64_t>() { return MPI_INT64_T; }
template <>
MPI_Datatype mpi_type<uint8_t>() { return MPI_UINT8_T; }
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
  }
  return MPI_SUM;
}

void add_int128(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const unsigned char*>(in);
  auto* b = static_cast<unsigned char*>(inout);
  for (int i = 0; i < *len; ++i) {
    __int128 x, y;
    std::memcpy(&x, a + 16 * i, 16);  // MPI's buffers need not be 16-aligned
    std::memcpy(&y, b + 16 * i, 16);
    y += x;
    std::memcpy(b + 16 * i, &y, 16);
  }
}

// The 128-bit integer type and its sum, made once (after MPI_Init) on first use.
struct Int128Mpi {
  MPI_Datatype type;
  MPI_Op op;
  Int128Mpi() {
    H3D_MPI(MPI_Type_contiguous(2, MPI_INT64_T, &type));
    H3D_MPI(MPI_Type_commit(&type));
    H3D_MPI(MPI_Op_create(&add_int128, /*commute=*/1, &op));
  }
};

}  // namespace

template <typename T>
void Comm::allreduce(T* data, int64_t n, ReduceOp op) const {
  if (reduces() && n > 0) H3D_MPI(MPI_Allreduce(MPI_IN_PLACE, data, mpi_count(n), mpi_type<T>(), mpi_op(op), comm_));
}

int Comm::allreduce_min(int v) const {
  allreduce(&v, 1, ReduceOp::kMin);
  return v;
}

void Comm::allreduce_sum_int128(__int128* data, int64_t n) const {
  if (!reduces() || n == 0) return;
  static const Int128Mpi m;
  const int64_t chunk = std::numeric_limits<int>::max() / 32;
  for (int64_t off = 0; off < n; off += chunk)
    H3D_MPI(MPI_Allreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min(chunk, n - off)), m.type, m.op, comm_));
}

template <typename T>
void Comm::gather(const T* mine, int64_t n, T* all, int root) const {
  require_real("gather");
  H3D_MPI(MPI_Gather(mine, mpi_count(n), mpi_type<T>(), all, mpi_count(n), mpi_type<T>(), root, comm_));
}

template <typename T>
void Comm::gatherv(const T* mine, int64_t n, T* all, const std::vector<int>& counts, const std::vector<int>& displs,
                   int root) const {
  require_real("gatherv");
  H3D_MPI(MPI_Gatherv(mine, mpi_count(n), mpi_type<T>(), all, counts.data(), displs.data(), mpi_type<T>(), root,
                      comm_));
}

template <typename T>
void Comm::allgather(const T* mine, int64_t n, T* all) const {
  require_real("allgather");
  H3D_MPI(MPI_Allgather(mine, mpi_count(n), mpi_type<T>(), all, mpi_count(n), mpi_type<T>(), comm_));
}

template <typename T>
void Comm::scatterv(const T* send, const std::vector<int>& counts, const std::vector<int>& displs, T* out, int64_t n,
                    int root) const {
  require_real("scatterv");
  H3D_MPI(MPI_Scatterv(send, counts.data(), displs.data(), mpi_type<T>(), out, mpi_count(n), mpi_type<T>(), root,
                       comm_));
}

template <typename T>
void Comm::alltoallv(const T* send, const std::vector<int>& send_counts, const std::vector<int>& send_displs, T* recv,
                     const std::vector<int>& recv_counts, const std::vector<int>& recv_displs) const {
  require_real("alltoallv");
  H3D_MPI(MPI_Alltoallv(send, send_counts.data(), send_displs.data(), mpi_type<T>(), recv, recv_counts.data(),
                        recv_displs.data(), mpi_type<T>(), comm_));
}

namespace {
std::vector<int> running_sum(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  int64_t at = 0;
  for (size_t q = 0; q < counts.size(); ++q) displs[q] = mpi_count(at), at += counts[q];
  mpi_count(at);
  return displs;
}
}  // namespace

void Comm::reduce_scatter_sum(const float* send, float* mine, const std::vector<int>& counts) const {
  H3D_CHECK(int(counts.size()) == size_, "reduce_scatter_sum: " << counts.size() << " counts for " << size_ << " ranks");
  if (!reduces()) {
    if (!simulated_) std::copy(send, send + counts[0], mine);
    return;
  }
  H3D_MPI(MPI_Reduce_scatter(send, mine, counts.data(), MPI_FLOAT, MPI_SUM, comm_));
}

void Comm::allgatherv_in_place(float* data, const std::vector<int>& counts) const {
  H3D_CHECK(int(counts.size()) == size_, "allgatherv: " << counts.size() << " counts for " << size_ << " ranks");
  if (!reduces()) return;
  const std::vector<int> displs = running_sum(counts);
  H3D_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(), MPI_FLOAT, comm_));
}

void Comm::irecv(float* buf, int64_t n, int peer, int tag, Requests& reqs) const {
  if (simulated_) return;
  reqs.reqs_.emplace_back();
  H3D_MPI(MPI_Irecv(buf, mpi_count(n), MPI_FLOAT, peer, tag, comm_, &reqs.reqs_.back()));
}

void Comm::isend(const float* buf, int64_t n, int peer, int tag, Requests& reqs) const {
  if (simulated_) {
    ++sim_messages_;
    sim_bytes_ += n * int64_t(sizeof(float));
    return;
  }
  reqs.reqs_.emplace_back();
  H3D_MPI(MPI_Isend(buf, mpi_count(n), MPI_FLOAT, peer, tag, comm_, &reqs.reqs_.back()));
}

void Requests::wait_all() {
  if (!reqs_.empty()) H3D_MPI(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE));
  reqs_.clear();
}

Requests::~Requests() {
  // Never leave MPI writing into freed buffers; errors cannot be thrown here.
  if (!reqs_.empty()) MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
}

#define H3D_COMM_TYPED(T)                                                                                           \
  template void Comm::allreduce<T>(T*, int64_t, ReduceOp) const;                                                   \
  template void Comm::gather<T>(const T*, int64_t, T*, int) const;                                                 \
  template void Comm::gatherv<T>(const T*, int64_t, T*, const std::vector<int>&, const std::vector<int>&, int)     \
      const;                                                                                                        \
  template void Comm::allgather<T>(const T*, int64_t, T*) const;                                                   \
  template void Comm::scatterv<T>(const T*, const std::vector<int>&, const std::vector<int>&, T*, int64_t, int)    \
      const;                                                                                                        \
  template void Comm::alltoallv<T>(const T*, const std::vector<int>&, const std::vector<int>&, T*,                \
                                   const std::vector<int>&, const std::vector<int>&) const;
H3D_COMM_TYPED(int16_t)
H3D_COMM_TYPED(int)
H3D_COMM_TYPED(int64_t)
H3D_COMM_TYPED(uint8_t)
H3D_COMM_TYPED(float)
H3D_COMM_TYPED(double)
#undef H3D_COMM_TYPED

std::string run_on_root(const Comm& comm, const std::function<void()>& work) {
  std::string failure;
  if (comm.rank() == 0) {
    try {
      work();
    } catch (const std::exception& e) {
      failure = e.what();
      if (failure.empty()) failure = "unknown error";
    }
  }
  broadcast_string(comm, failure, 0);
  return failure;
}

void broadcast_string(const Comm& comm, std::string& s, int root) {
  int64_t n = int64_t(s.size());
  comm.bcast(&n, sizeof n, root);
  s.resize(size_t(n));
  if (n > 0) comm.bcast(&s[0], n, root);
}

}  // namespace h3d
