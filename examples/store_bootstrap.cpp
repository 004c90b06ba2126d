// The bootstrap a native (C++/CUDA) training program does through the job's
// store, without Python: rank 0 creates an id (here 128 random bytes, as an
// ncclUniqueId), publishes it, every rank reads it; then every rank adds its
// rank to a counter and waits until all have, and checks the sum. Exits
// non-zero on any mismatch. Run under ddplaunch:
//   ddplaunch --nnodes 2 --nproc-per-node 2 -- ./store_bootstrap
#include <cstdio>
#include <cstdlib>
#include <ddplaunch/store_client.hpp>
#include <random>
#include <string>

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) {
    std::fprintf(stderr, "%s is not set: run this under ddplaunch\n", name);
    std::exit(2);
  }
  return std::atoi(v);
}

}  // namespace

int main() {
  const int rank = env_int("RANK");
  const int world = env_int("WORLD_SIZE");
  try {
    auto store = ddplaunch::StoreClient::from_environment();
    std::string id;
    if (rank == 0) {
      std::random_device random;
      for (int i = 0; i < 128; ++i) {
        id += static_cast<char>(random() & 0xff);
      }
      store.set("bootstrap/id", id);
    } else {
      id = store.get("bootstrap/id", std::chrono::seconds(60)).value_or("");
    }
    if (id.size() != 128) {
      std::fprintf(stderr, "rank %d: no bootstrap id within 60 s\n", rank);
      return 1;
    }
    store.add("bootstrap/sum", rank);
    if (store.add("bootstrap/arrived", 1) == world) {
      store.set("bootstrap/done", "1");
    }
    if (!store.wait({"bootstrap/done"}, std::chrono::seconds(60))) {
      std::fprintf(stderr, "rank %d: not every rank arrived within 60 s\n", rank);
      return 1;
    }
    const long long sum = store.add("bootstrap/sum", 0);
    const long long expected = static_cast<long long>(world) * (world - 1) / 2;
    // The same id everywhere: each rank publishes what it read, rank 0 compares.
    store.set("bootstrap/seen/" + std::to_string(rank), id);
    if (rank == 0) {
      for (int r = 1; r < world; ++r) {
        if (store.get("bootstrap/seen/" + std::to_string(r), std::chrono::seconds(60)) != id) {
          std::fprintf(stderr, "rank %d read another id than rank 0\n", r);
          return 1;
        }
      }
    }
    std::printf("rank %d of %d: bootstrap id shared, sum %lld (expected %lld)\n", rank, world, sum,
                expected);
    return sum == expected ? 0 : 1;
  } catch (const ddplaunch::StoreError& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 3;
  }
}
