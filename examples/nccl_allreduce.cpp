// NCCL without Python: rank 0 creates an ncclUniqueId and publishes it
// through the job's store; every rank reads it, joins the communicator on
// its GPU (LOCAL_RANK), all-reduces one float (rank + 1) and checks the sum.
// Exits non-zero on a mismatch. Built when CMake finds CUDA and NCCL:
//   ddplaunch --nnodes 2 --nproc-per-node gpu -- ./nccl_allreduce
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ddplaunch/store_client.hpp>
#include <string>

#define CHECK(call, what)                                       \
  do {                                                          \
    if (!(call)) {                                              \
      std::fprintf(stderr, "rank %d: %s failed\n", rank, what); \
      return 1;                                                 \
    }                                                           \
  } while (0)

int main() {
  const int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
  const int world = std::atoi(std::getenv("WORLD_SIZE") ? std::getenv("WORLD_SIZE") : "1");
  const int local_rank = std::atoi(std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : "0");
  try {
    auto store = ddplaunch::StoreClient::from_environment();
    ncclUniqueId id;
    if (rank == 0) {
      CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
      store.set("nccl/id", std::string(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      auto text = store.get("nccl/id", std::chrono::seconds(120));
      CHECK(text && text->size() == sizeof id, "reading nccl/id from the store");
      std::memcpy(&id, text->data(), sizeof id);
    }
    CHECK(cudaSetDevice(local_rank) == cudaSuccess, "cudaSetDevice(LOCAL_RANK)");
    ncclComm_t comm;
    CHECK(ncclCommInitRank(&comm, world, id, rank) == ncclSuccess, "ncclCommInitRank");
    float* buffer = nullptr;
    CHECK(cudaMalloc(&buffer, sizeof(float)) == cudaSuccess, "cudaMalloc");
    const float mine = static_cast<float>(rank + 1);
    CHECK(cudaMemcpy(buffer, &mine, sizeof mine, cudaMemcpyHostToDevice) == cudaSuccess,
          "cudaMemcpy");
    CHECK(ncclAllReduce(buffer, buffer, 1, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess,
          "ncclAllReduce");
    float sum = 0;
    CHECK(cudaMemcpy(&sum, buffer, sizeof sum, cudaMemcpyDeviceToHost) == cudaSuccess,
          "cudaMemcpy back");
    const float expected = static_cast<float>(world) * (world + 1) / 2;
    std::printf("rank %d (GPU %d): all-reduce sum %.0f (expected %.0f)\n", rank, local_rank, sum,
                expected);
    cudaFree(buffer);
    ncclCommDestroy(comm);
    return sum == expected ? 0 : 1;
  } catch (const ddplaunch::StoreError& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 3;
  }
}
