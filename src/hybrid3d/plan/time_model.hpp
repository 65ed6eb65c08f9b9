// The time model: one training step of one rank, priced from the work its
// replay recorded (plan/memory_model.hpp) with a machine's rates:
//   compute   = each convolution class's flops over its measured rate, per
//               pass (forward, backward data, backward weights), + the dense
//               GEMMs + the memory-bound ops' bytes over the stream bandwidth;
//   halo      = messages x latency + bytes / bandwidth (point to point);
//   allreduce = the gradients over the world, as a ring:
//               2 (P-1)/P bytes / bandwidth + 2 (P-1) latency.
// No overlap is credited: the halo's interior overlap and the bucketed
// allreduce's overlap with backward make real steps shorter by at most
// the smaller of the two terms (docs/scaling.md says how much here).
//
// A machine is a JSON file: `hybrid3d plan --calibrate FILE` measures this
// machine's rates on the network's own convolution classes; files for other
// machines are written by hand (docs/scaling.md has two).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "hybrid3d/plan/memory_model.hpp"

namespace h3d {

class Comm;

struct Machine {
  std::string name = "built-in (this project's 2-core test machine, 1 thread per rank)";
  struct ConvRate {
    ConvClass cls;
    std::array<double, 3> gflops{};  // forward, backward data, backward weights
  };
  std::vector<ConvRate> conv;                     // measured classes
  std::array<double, 3> conv_gflops{25, 25, 20};  // any other class
  double gemm_gflops = 25, stream_gbps = 6;
  std::array<double, 2> pool_gbps{6, 3};  // pooling forward, backward (bytes of pool3d_*)
  // Measured step over the kernels' sum: what a real step pays beyond its
  // kernels timed alone (fresh buffers' page faults, cold caches, the
  // layers' own loops). --calibrate measures it on the model; compute is
  // multiplied by it.
  double step_factor = 1.0;
  double p2p_latency_s = 3e-6, p2p_gbps = 4;
  double allreduce_latency_s = 5e-6, allreduce_gbps = 3;
  int threads_per_rank = 1;
  // The ranks that ran on the node while --calibrate measured (each rank
  // measured at once): the rates are those of a rank among that many.
  int calibrated_ranks_per_node = 1;
  // Cores per node: ranks x threads beyond it share the cores, and compute
  // slows by that factor (0: this machine's).
  int cores_per_node = 0;
  // The rates of `c` (a measured class, or the default).
  std::array<double, 3> rates(const ConvClass& c) const;
  // UsageError naming the file and the field for a missing or bad one.
  static Machine load(const std::string& path);
  void save(const std::string& path) const;  // atomically
};

struct StepTime {
  double compute = 0, halo = 0, allreduce = 0;
  double total() const { return compute + halo + allreduce; }
  // What dominates: "compute", "halo" or "allreduce".
  std::string limit() const;
};

// One rank's step (`ranks`: the world, for the allreduce).
StepTime predict_step(const RankReplay& r, const Machine& m, int ranks, int ranks_per_node);
// The layout's step: the slowest of its replayed ranks.
StepTime predict_step(const std::vector<RankReplay>& ranks, const Machine& m, int world, int ranks_per_node);

// This machine's rates for the convolution classes of `r`'s network, timed
// on the real backend with the current OpenMP threads; the rest of the
// fields keep their defaults.
Machine calibrate(const MemoryRequest& r);

// Collective over `world` (2 ranks or more; a no-op on 1): the point-to-point
// terms from a ping-pong between ranks 0 and 1 (a message of 8 bytes and one
// of 8 MiB: latency, then bandwidth) and the allreduce terms from allreduces
// over the world of 8 bytes and 16 MiB, fitted to the ring the model uses.
// Sets them on every rank's `m`.
void calibrate_network(const Comm& world, Machine& m);

}  // namespace h3d
