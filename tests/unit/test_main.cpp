// Unit tests run under MPI with one rank (layers need a communicator).
#include <gtest/gtest.h>
#include <mpi.h>

#include "hybrid3d/parallel/comm.hpp"

int main(int argc, char** argv) {
  h3d::mpi_init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
