// Comm: a thin RAII view of an MPI communicator. Every MPI call goes through
// here so that failures become h3d::Error with MPI's own message.
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
class Comm;
// Runs `work` on rank 0 alone (file system work one rank does for all);
// every rank returns what it threw (its what()), or "" if it succeeded, so
// all can fail alike instead of leaving the others waiting. Collective.
std::string run_on_root(const Comm& comm, const std::function<void()>& work);
// Ranks of `world` on this node (collective), and the node's logical cores.
int ranks_on_this_node(const Comm& world);
int cores_on_this_node();

class Comm {
 public:
  // Wraps an existing communicator without owning it (MPI_COMM_WORLD, _SELF).
  static Comm borrow(MPI_Comm c) { return Comm(c, false); }
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

 private:
  Comm(MPI_Comm c, bool owned);
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0, size_ = 1;
};

}  // namespace h3d
