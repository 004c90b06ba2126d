#include "rendezvous/status_relay.hpp"

#include <algorithm>
#include <memory>

#include "config/integer.hpp"
#include "status/status_codec.hpp"
#include "store/value_parts.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {

RequestKeys tree_status_keys(const std::string& round) {
  return RequestKeys("status/" + round);
}

std::chrono::milliseconds gather_time(double timeout_s, int depth, int height) {
  // A step of at most a second a level, and at most half the time in all.
  const double step = std::min(1.0, timeout_s / (2.0 * std::max(1, height + 1)));
  const double wait = std::max(0.001, timeout_s - step * std::max(1, depth));
  return std::chrono::milliseconds(static_cast<long long>(wait * 1000));
}

std::string join_answers(const std::string& own, const std::vector<std::string>& theirs) {
  size_t size = own.size();
  for (const auto& t : theirs) {
    size += t.size() + 1;
  }
  std::string all;
  all.reserve(size + 1);
  all = own;
  for (const auto& t : theirs) {
    if (!t.empty()) {
      if (!all.empty() && all.back() != '\n') {
        all += '\n';
      }
      all += t;
    }
  }
  return all;
}

std::optional<int> subtree_answer_of(std::string_view key, std::string_view under, int nnodes) {
  if (!key.starts_with(under)) {
    return std::nullopt;
  }
  const auto node = parse_integer_in(key.substr(under.size()), 1, nnodes - 1);
  return node ? std::optional(static_cast<int>(*node)) : std::nullopt;
}

void place_subtree(std::string_view text, int node, int nnodes, int fanout,
                   const std::vector<int>& index, std::vector<std::optional<NodeStatus>>& answers) {
  place_subtree_answer(text, node, node + tree_place(node, nnodes, fanout).subtree, index, answers);
}

void relay_status(StoreConnection& down, const RequestKeys& keys, const std::string& request,
                  const std::vector<int>& children, std::chrono::milliseconds wait,
                  std::function<void(std::string)> done) {
  down.add(
      keys.seq(), 1,
      [&down, keys, request, children, wait, done = std::move(done)](int64_t n) mutable {
        down.set(keys.request(n), request, [] {});
        std::vector<std::string> answers;
        answers.reserve(children.size());
        for (const int c : children) {
          answers.push_back(keys.answer(n, c));
        }
        down.wait(answers, wait, [&down, keys, n, answers, done = std::move(done)](bool) mutable {
          value_parts::get_all(
              down, answers,
              [&down, keys, n, answers, done = std::move(done)](
                  std::vector<std::optional<std::string>> got, std::vector<std::string> parts) {
                std::vector<std::string> theirs;
                theirs.reserve(got.size());
                for (auto& g : got) {
                  theirs.push_back(g.value_or(""));
                }
                down.erase(keys.request(n), [] {});
                for (const auto& key : answers) {
                  down.erase(key, [] {});
                }
                for (const auto& key : parts) {
                  down.erase(key, [] {});
                }
                done(join_answers("", theirs));
              });
        });
      });
}

}  // namespace ddplaunch
