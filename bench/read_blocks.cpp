// Read throughput of the hybrid-parallel block reader (not a test).
//
// usage: mpirun -np P read_blocks DATA SPATIAL MODE [REPEATS]
// Every data group reads its share of the samples in DATA, each rank only
// its block of each (as training does), in read mode MODE (independent |
// collective | naive); the best of REPEATS passes is printed by rank 0 as
// one JSON line: seconds, bytes as stored (per rank and in total) and GB/s.
// Call it with the page cache emptied (bench/io_throughput.py does) for
// reads from the disk.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hybrid3d/data/hdf5_source.hpp"
#include "hybrid3d/parallel/distribution.hpp"
#include "hybrid3d/parallel/parse_spatial.hpp"
#include "hybrid3d/parallel/process_grid.hpp"

int main(int argc, char** argv) {
  h3d::mpi_init(&argc, &argv);
  int code = 0;
  try {
    if (argc < 4) throw std::runtime_error("usage: read_blocks DATA SPATIAL MODE [REPEATS]");
    h3d::Comm world = h3d::Comm::borrow(MPI_COMM_WORLD);
    const int repeats = argc > 4 ? std::atoi(argv[4]) : 1;
    h3d::ProcessGrid grid(world, h3d::parse_spatial(argv[2]));
    h3d::Hdf5Universes src(grid.group(), argv[1], h3d::InputTransform::kNone, h3d::parse_read_mode(argv[3]));
    const h3d::Box box = h3d::Distribution::balanced(src.extent(), grid.spatial(), 1).box(grid.spatial_rank());
    std::vector<float> out(size_t(box.volume() * src.channels()));
    float target[4];
    const int64_t g = grid.group_index(), G = grid.data_groups();
    // Bytes as stored: the files' total over the samples, in this rank's share.
    const double per_value = double(src.bytes()) / double(src.size() * src.channels() * src.extent()[0] *
                                                          src.extent()[1] * src.extent()[2]);
    double best = 1e30;
    int64_t mine = 0;
    for (int r = 0; r < repeats; ++r) {
      world.barrier();
      const double t0 = MPI_Wtime();
      mine = 0;
      for (int64_t i = g; i < src.size(); i += G) {
        src.load(i, box, out.data(), target);
        mine += int64_t(out.size());
      }
      world.barrier();
      best = std::min(best, MPI_Wtime() - t0);
    }
    const double rank_bytes = double(mine) * per_value;
    const double total = double(world.allreduce_sum(mine)) * per_value;
    if (world.rank() == 0)
      std::printf("{\"ranks\": %d, \"spatial\": \"%s\", \"mode\": \"%s\", \"seconds\": %.4f, \"rank_bytes\": %.0f, "
                  "\"total_bytes\": %.0f, \"rank_gbps\": %.4f, \"total_gbps\": %.4f}\n",
                  world.size(), argv[2], argv[3], best, rank_bytes, total, rank_bytes / best / 1e9,
                  total / best / 1e9);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "read_blocks: %s\n", e.what());
    code = 1;
  }
  MPI_Finalize();
  return code;
}
