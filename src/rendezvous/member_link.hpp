// MemberLink: the StoreLink of every agent but node 0's. It waits on one key,
// its own rdzv/plan/<arrival>, for node 0's answer (its rank, then the plan;
// a refusal; or, joining a running elastic job, to wait for admission), and
// checks what it reads there before using it: a rank or a plan from the
// network is range-checked against this node. Once a round starts it leaves
// its last word with the store (ON_CLOSE: "this node was lost"). Between
// rounds it waits for node 0's plan of the next one. Not thread-safe: the
// agent's thread drives it.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>

#include "rendezvous/store_link.hpp"

namespace ddplaunch {

class MemberLink : public StoreLink {
 public:
  using StoreLink::StoreLink;

 protected:
  bool hosts_store() const override { return false; }
  void joined_as(int arrival) override;
  void round_ended(int ended, const std::set<int>& lost) override;
  void results_sent() override;
  void report_progress(long long waited_s) override;
  void round_starting(const Topology& topology, TimePoint now) override;
  void round_starting_soon() override;
  void verdict_arrived() override;
  void preflight_gathered(ProbeReport report) override { send_report(std::move(report)); }
  void preflight_reported() override;

 private:
  void wait_for_answer();
  void take_answer(const std::string& text);
  void take_plan(const std::optional<std::string>& text, int node_rank);
  // `node_rank` (read from `key`) is checked against the plan before use.
  void take_assignment(Topology topology, int node_rank, const std::string& key);
  void wait_for_admission(bool spare);  // it joined once the job ran
  void take_admission(const std::optional<std::string>& text);
  void wait_for_round_plan();
  void take_round_plan(const std::optional<std::string>& text);
  void take_round_rank(const std::optional<std::string>& text, const Topology& topology);
  // ON_CLOSE on round `round`'s stop (default: this round's): the store says
  // this node was lost if it goes.
  void leave_last_word(std::optional<int> round = std::nullopt);

  std::pair<int, int> m_last_word{-1, -1};  // the (round, node rank) it names
  bool m_plan_preflight = false;            // the first round's plan asks for the preflight
};

}  // namespace ddplaunch
