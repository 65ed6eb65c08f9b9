// Comm: a thin RAII view of an MPI communicator. Every MPI call goes through
// here (parallel/comm.cpp is the only file that calls MPI; the include check,
// tests/layers/check_includes.py, holds the rest of the code to that), so
// that failures become h3d::Error with MPI's own message and a second
// transport (NCCL for a CUDA backend) has one place to go.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace h3d {

void mpi_check(int rc, const char* what, const char* file, int line);
#define H3D_MPI(call) ::h3d::mpi_check((call), #call, __FILE__, __LINE__)

// MPI_Init_thread asking for MPI_THREAD_MULTIPLE (the gradient reducer's
// background thread needs it); returns what the library provides. Works
// with less: the reducer then reduces after backward, blocking.
int mpi_init(int* argc, char*** argv);
bool mpi_thread_multiple();
void mpi_finalize();
// Ends every rank of the job at once (MPI_Abort on the world): for a failure
// one rank found alone, which the others would otherwise wait on forever.
[[noreturn]] void mpi_abort(int code);
class Comm;
// Runs `work` on rank 0 alone (file system work one rank does for all);
// every rank returns what it threw (its what()), or "" if it succeeded, so
// all can fail alike instead of leaving the others waiting. Collective.
std::string run_on_root(const Comm& comm, const std::function<void()>& work);
// `s` of rank `root` on every rank (collective).
void broadcast_string(const Comm& comm, std::string& s, int root = 0);
// Ranks of `world` on this node (collective), and the node's logical cores.
int ranks_on_this_node(const Comm& world);
int cores_on_this_node();

// Outstanding nonblocking sends and receives (Comm::isend / irecv).
class Requests {
 public:
  Requests() = default;
  Requests(const Requests&) = delete;
  Requests& operator=(const Requests&) = delete;
  Requests(Requests&&) noexcept = default;  // moved only while none is outstanding
  Requests& operator=(Requests&&) noexcept = default;
  ~Requests();  // waits for what is still outstanding
  void wait_all();
  bool empty() const { return reqs_.empty(); }

 private:
  friend class Comm;
  std::vector<MPI_Request> reqs_;
};

enum class ReduceOp { kSum, kMin, kMax };

// n as one of MPI's int counts; an Error if it does not fit.
int mpi_count(int64_t n);

class Comm {
 public:
  // Wraps an existing communicator without owning it (MPI_COMM_WORLD, _SELF).
  static Comm borrow(MPI_Comm c) { return Comm(c, false); }
  static Comm world() { return borrow(MPI_COMM_WORLD); }
  static Comm self() { return borrow(MPI_COMM_SELF); }
  // Rank `rank` of a communicator of `size` ranks that exists only in this
  // process: reductions, broadcasts and point-to-point messages do nothing
  // (each rank's data stays as it is); the rest is an Error. The memory
  // planner replays one rank of a layout with it (plan/memory_model.hpp).
  static Comm simulated(int rank, int size);
  bool is_simulated() const { return simulated_; }
  // What a simulated communicator's isend calls would have sent.
  int64_t simulated_messages() const { return sim_messages_; }
  int64_t simulated_bytes() const { return sim_bytes_; }
  Comm() = default;
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& o) noexcept { *this = std::move(o); }
  Comm& operator=(Comm&& o) noexcept;

  // Collective over this communicator; ranks with the same color form one.
  Comm split(int color, int key) const;
  // The same group in a communicator of its own (collectives on it never
  // interleave with those on this one).
  Comm dup() const;
  // The ranks of this communicator that share this node's memory (collective).
  Comm node() const;

  MPI_Comm raw() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  void barrier() const;
  void allreduce_sum(float* data, int64_t n) const;
  void allreduce_sum(double* data, int64_t n) const;
  double allreduce_max(double v) const;
  int64_t allreduce_sum(int64_t v) const;
  void bcast(void* data, int64_t bytes, int root) const;

  // Typed collectives over T in {int16_t, int, int64_t, uint8_t, float,
  // double}. Counts are per rank; MPI's are int, so each call checks that
  // the counts fit (an Error naming the size otherwise).
  //
  // In place: data[0, n) of every rank combined with `op`.
  template <typename T>
  void allreduce(T* data, int64_t n, ReduceOp op) const;
  int allreduce_min(int v) const;
  // Exact 128-bit integer sums in place (ExactSum's accumulators).
  void allreduce_sum_int128(__int128* data, int64_t n) const;
  // `all` (on root: n * size() values, rank by rank) gets every rank's `mine`.
  template <typename T>
  void gather(const T* mine, int64_t n, T* all, int root) const;
  // Rank q's `n` values land at all[displs[q]], counts[q] of them (root only).
  template <typename T>
  void gatherv(const T* mine, int64_t n, T* all, const std::vector<int>& counts, const std::vector<int>& displs,
               int root) const;
  template <typename T>
  void allgather(const T* mine, int64_t n, T* all) const;
  // Rank q gets send[displs[q], +counts[q]) of root's buffer in out[0, n).
  template <typename T>
  void scatterv(const T* send, const std::vector<int>& counts, const std::vector<int>& displs, T* out, int64_t n,
                int root) const;
  template <typename T>
  void alltoallv(const T* send, const std::vector<int>& send_counts, const std::vector<int>& send_displs, T* recv,
                 const std::vector<int>& recv_counts, const std::vector<int>& recv_displs) const;
  // Sharded optimizer state (train/shard_layout.hpp): rank q gets in
  // mine[0, counts[q]) the sum over ranks of send[displs[q], +counts[q]),
  // with displs the running sum of counts (MPI_Reduce_scatter).
  void reduce_scatter_sum(const float* send, float* mine, const std::vector<int>& counts) const;
  // In place: every rank's data[displs[q], +counts[q]) becomes rank q's
  // (MPI_Allgatherv with MPI_IN_PLACE; displs the running sum of counts).
  void allgatherv_in_place(float* data, const std::vector<int>& counts) const;
  // Nonblocking point-to-point of floats (halo exchange); complete with
  // reqs.wait_all() before the buffers are touched.
  void irecv(float* buf, int64_t n, int peer, int tag, Requests& reqs) const;
  void isend(const float* buf, int64_t n, int peer, int tag, Requests& reqs) const;

 private:
  Comm(MPI_Comm c, bool owned);
  // Whether a reduction must talk to other ranks.
  bool reduces() const { return size_ > 1 && !simulated_; }
  void require_real(const char* what) const;
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false, simulated_ = false;
  mutable int64_t sim_messages_ = 0, sim_bytes_ = 0;
  int rank_ = 0, size_ = 1;
};

}  // namespace h3d
