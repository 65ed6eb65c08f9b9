#include "hybrid3d/parallel/comm.hpp"

#include <algorithm>
#include <cstdlib>
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
    o.comm_ = MPI_COMM_NULL;
    o.owned_ = false;
  }
  return *this;
}

Comm Comm::split(int color, int key) const {
  MPI_Comm out;
  H3D_MPI(MPI_Comm_split(comm_, color, key, &out));
  return Comm(out, true);
}

Comm Comm::node() const {
  MPI_Comm out;
  H3D_MPI(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &out));
  return Comm(out, true);
}

Comm Comm::dup() const {
  MPI_Comm out;
  H3D_MPI(MPI_Comm_dup(comm_, &out));
  return Comm(out, true);
}

void Comm::barrier() const { H3D_MPI(MPI_Barrier(comm_)); }

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
  if (size_ > 1 && n > 0) allreduce_chunked(comm_, data, n, MPI_FLOAT);
}
void Comm::allreduce_sum(double* data, int64_t n) const {
  if (size_ > 1 && n > 0) allreduce_chunked(comm_, data, n, MPI_DOUBLE);
}
double Comm::allreduce_max(double v) const {
  if (size_ > 1) H3D_MPI(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, comm_));
  return v;
}
int64_t Comm::allreduce_sum(int64_t v) const {
  if (size_ > 1) H3D_MPI(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_SUM, comm_));
  return v;
}
void Comm::bcast(void* data, int64_t bytes, int root) const {
  if (size_ == 1) return;
  constexpr int64_t kPiece = int64_t(1) << 30;  // MPI counts are int
  for (int64_t off = 0; off < bytes; off += kPiece)
    H3D_MPI(MPI_Bcast(static_cast<char*>(data) + off, static_cast<int>(std::min(kPiece, bytes - off)), MPI_BYTE, root,
                      comm_));
}

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
  int64_t n = int64_t(failure.size());
  comm.bcast(&n, sizeof n, 0);
  failure.resize(size_t(n));
  comm.bcast(&failure[0], n, 0);
  return failure;
}

}  // namespace h3d
