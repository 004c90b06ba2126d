// Slurm's host-list syntax: "n[01-04,07]", "gpu-[1-2],cpu3",
// "rack[1-2]-n[01-02]" (several bracket groups multiply), zero padding kept,
// names with dashes and dots. Expanded, counted without expanding, and
// written back from a list of names; and Slurm's tasks-per-node counts.
// Pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddplaunch {

// Every host of `list`, in Slurm's order. Throws UsageError naming the list
// and what is wrong with it (an unclosed bracket, a reversed range, ...).
std::vector<std::string> expand_nodelist(std::string_view list);
// How many hosts `list` names, checked as expand_nodelist() checks it, but
// without building a name.
size_t count_nodelist(std::string_view list);

// The inverse: `hosts` written in that syntax, in the same order, runs of
// consecutive numbers after a shared prefix folded ("n01,n02,n03,x" ->
// "n[01-03],x"), so that expand_nodelist() gives `hosts` back. Empty when a
// name cannot be written in it (empty, or holding '[', ']' or ',').
std::string compress_nodelist(const std::vector<std::string>& hosts);

// Slurm's per-node task counts: "2(x3),1" -> {2, 2, 2, 1}. Throws UsageError.
std::vector<int> expand_tasks_per_node(std::string_view value);

}  // namespace ddplaunch
