// Every rank reads what rank 0 published through the job's store, with the
// client a downstream project links. Exit 0 when every rank read it.
#include <cstdio>
#include <cstdlib>
#include <ddplaunch/store_client.hpp>
#include <string>

int main() {
  const char* rank_text = std::getenv("RANK");
  const std::string rank = rank_text != nullptr ? rank_text : "?";
  try {
    auto store = ddplaunch::StoreClient::from_environment();
    if (rank == "0") {
      store.set("downstream/hello", "from rank 0");
    }
    const auto value = store.get("downstream/hello", std::chrono::seconds(60));
    std::printf("rank %s read '%s' under prefix '%s'\n", rank.c_str(),
                value.value_or("nothing").c_str(), store.prefix().c_str());
    return value == "from rank 0" ? 0 : 1;
  } catch (const ddplaunch::StoreError& e) {
    std::fprintf(stderr, "rank %s: %s\n", rank.c_str(), e.what());
    return 3;
  }
}
