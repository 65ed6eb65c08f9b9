// The MPI test harness: every test is collective; rank 0 prints, and the
// job fails if a test failed on any rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include "hybrid3d/parallel/comm.hpp"

int main(int argc, char** argv) {
  h3d::mpi_init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS(), worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst != rc) std::printf("a test failed on another rank\n");
  MPI_Finalize();
  return worst;
}
