#include "mpi/tree_fence.hpp"

#include <optional>
#include <vector>

#include "config/integer.hpp"
#include "log.hpp"
#include "store/protocol.hpp"

namespace ddplaunch {

namespace {

// A record's first byte: the data itself follows, or the number of parts it
// is in, or why it failed, or that the round ended first.
constexpr char k_inline = 'v';
constexpr char k_in_parts = 'p';
constexpr char k_failed = 'f';
constexpr char k_abandoned = 'a';
// As many parts as one MULTI_GET reply holds: a fence's data is at most
// that (the star's limit too, mpi/fence.cpp).
constexpr size_t k_max_parts = protocol::k_max_reply / protocol::k_max_value - 1;
constexpr size_t k_max_data = k_max_parts * protocol::k_max_value;

std::string part_key(const std::string& key, size_t i) {
  return key + "/" + std::to_string(i);
}

// Writes `data` as the record `key`: inline when it fits one value, else
// its parts and then the head that counts them (one connection's requests
// are served in order). Returns the number of parts (0: inline).
size_t put_record(StoreConnection& conn, const std::string& key, const std::string& data) {
  if (data.size() < protocol::k_max_value) {
    conn.set(key, k_inline + data, [] {});
    return 0;
  }
  const size_t parts = (data.size() + protocol::k_max_value - 1) / protocol::k_max_value;
  for (size_t i = 0; i < parts; ++i) {
    conn.set(part_key(key, i), data.substr(i * protocol::k_max_value, protocol::k_max_value),
             [] {});
  }
  conn.set(key, k_in_parts + std::to_string(parts), [] {});
  return parts;
}

// The record `key` whose head is `head`: its data, or why there is none.
// `parts`: how many parts it was in (theirs to delete).
using Read =
    std::function<void(std::optional<std::string> data, const std::string& why, int parts)>;
void read_record(StoreConnection& conn, const std::string& key, const std::string& head,
                 Read done) {
  const char kind = head.empty() ? '\0' : head[0];
  if (kind == k_inline) {
    done(head.substr(1), "", 0);
    return;
  }
  if (kind == k_failed) {
    done(std::nullopt, head.substr(1), 0);
    return;
  }
  if (kind == k_abandoned) {
    done(std::nullopt, "the round ended first", 0);
    return;
  }
  const auto parts = kind == k_in_parts ? parse_integer_in(std::string_view(head).substr(1), 1,
                                                           static_cast<long long>(k_max_parts))
                                        : std::nullopt;
  if (!parts) {
    done(std::nullopt, "a malformed record under " + key, 0);
    return;
  }
  std::vector<std::string> keys;
  for (size_t i = 0; i < static_cast<size_t>(*parts); ++i) {
    keys.push_back(part_key(key, i));
  }
  const int count = static_cast<int>(*parts);
  conn.multi_get(keys, [done = std::move(done), count, key](auto got) {
    std::string all;
    for (const auto& part : got) {
      if (!part) {
        done(std::nullopt, "a part of " + key + " is missing", count);
        return;
      }
      all += *part;
    }
    done(std::move(all), "", count);
  });
}

std::string too_large(const std::string& whose, size_t bytes) {
  return whose + " is " + std::to_string(bytes) + " bytes, over the " + std::to_string(k_max_data) +
         " a fence can carry (fewer ranks per fence, or Open MPI's direct modex: "
         "OMPI_MCA_pmix_base_async_modex=1)";
}

}  // namespace

struct TreeFence::Fence {
  std::string prefix;  // tree/<nspace>/<set>/<seq>/
  TreePlace place;
  std::string data;  // this node's, then its subtree's
  Done done;
  StoreConnection::Duration timeout;
  std::vector<std::optional<std::string>> from_children;  // by position in place.children
  size_t children_in = 0;
  std::string child_failed;  // why a child's record failed (the first)
  size_t up_parts = 0;       // the parts of this node's record on its parent's store
  bool climbed = false;      // its record is on its parent's store
  bool over = false;

  std::string up_key(int node) const { return prefix + "up/" + std::to_string(node); }
  std::string down_key() const { return prefix + "down"; }
  std::string read_key() const { return prefix + "read"; }
};

TreeFence::TreeFence(TreeLinks& links) : m_links(links) {
  m_links.on_lost([this](const std::string& why) {
    const auto live = m_live;  // fail() ends them
    for (const auto& f : live) {
      fail(f, why);
    }
  });
}

TreeFence::~TreeFence() {
  m_links.on_lost(nullptr);
  for (const auto& f : m_live) {
    f->over = true;
  }
}

void TreeFence::enter(const std::string& nspace, const std::string& signature, int self, int nnodes,
                      int fanout, std::string data, Done done, StoreConnection::Duration timeout) {
  m_links.begin(nspace, self, nnodes, fanout);
  auto f = std::make_shared<Fence>();
  const std::string set = nspace + "/" + signature;
  f->prefix = "tree/" + set + "/" + std::to_string(m_seq[set]++) + "/";
  f->place = m_links.place();
  f->data = std::move(data);
  f->done = std::move(done);
  f->timeout = timeout;
  m_live.insert(f);
  if (f->data.size() > k_max_data) {
    fail(f, too_large("node " + std::to_string(self) + "'s data", f->data.size()));
    return;
  }
  gather(f);
}

// Its children's records, once every one is on this node's store: one WAIT
// for them all, then a GET each (one MULTI_GET might be over a reply's size).
void TreeFence::gather(const Shared& f) {
  StoreConnection* down = m_links.down();
  if (f->place.children.empty()) {
    climb(f, std::move(f->data));
    return;
  }
  if (down == nullptr) {
    // Its children could not reach it either (its address said why): the
    // fence fails rather than go on without their data.
    fail(f, "node " + std::to_string(f->place.node) + " has no store for its children");
    return;
  }
  std::vector<std::string> keys;
  for (const int child : f->place.children) {
    keys.push_back(f->up_key(child));
  }
  f->from_children.resize(keys.size());
  down->wait(keys, f->timeout, [this, f, down, keys](bool all) {
    if (f->over) {
      return;
    }
    if (!all) {
      end(f, Outcome::k_timed_out, {});
      return;
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      down->get(keys[i], StoreConnection::Duration(0),
                [this, f, down, i, key = keys[i]](std::optional<std::string> head) {
                  if (f->over) {
                    return;
                  }
                  read_record(
                      *down, key, head.value_or(""),
                      [this, f, i](std::optional<std::string> data, const std::string& why, int) {
                        if (f->over) {
                          return;
                        }
                        if (!data && f->child_failed.empty()) {
                          f->child_failed = why;
                        }
                        f->from_children[i] = std::move(data);
                        if (++f->children_in == f->from_children.size()) {
                          gathered(f);
                        }
                      });
                });
    }
  });
}

void TreeFence::gathered(const Shared& f) {
  if (!f->child_failed.empty()) {
    fail(f, f->child_failed);
    return;
  }
  std::string subtree = std::move(f->data);
  for (auto& part : f->from_children) {
    subtree += *part;
    if (subtree.size() > k_max_data) {
      fail(f, too_large("the data of node " + std::to_string(f->place.node) + "'s subtree",
                        subtree.size()));
      return;
    }
    part.reset();
  }
  climb(f, std::move(subtree));
}

// Its subtree's record on its parent's store, then the result from there.
void TreeFence::climb(const Shared& f, std::string subtree) {
  if (f->place.parent < 0) {
    descend(f, std::move(subtree));
    return;
  }
  m_links.up(
      [this, f, subtree = std::move(subtree)](StoreConnection* up, const std::string& no_up) {
        if (f->over) {
          return;
        }
        if (up == nullptr) {
          fail(f, no_up);
          return;
        }
        f->up_parts = put_record(*up, f->up_key(f->place.node), subtree);
        f->climbed = true;
        up->get(f->down_key(), f->timeout, [this, f, up](std::optional<std::string> head) {
          if (f->over) {
            return;
          }
          if (!head) {
            end(f, Outcome::k_timed_out, {});
            return;
          }
          read_record(
              *up, f->down_key(), *head,
              [this, f, up](std::optional<std::string> result, const std::string& why, int parts) {
                if (f->over) {
                  return;
                }
                release(f, *up, parts);
                if (!result) {
                  fail(f, why);
                  return;
                }
                descend(f, std::move(*result));
              });
        });
      });
}

// The result on this node's store for its children, then to its ranks.
void TreeFence::descend(const Shared& f, std::string result) {
  if (StoreConnection* down = m_links.down(); down != nullptr && !f->place.children.empty()) {
    put_record(*down, f->down_key(), result);
  }
  end(f, Outcome::k_ok, std::move(result));
}

// Done with the parent's store: this node's record goes, and the last of
// the parent's children to read the result deletes what they shared.
void TreeFence::release(const Shared& f, StoreConnection& up, int result_parts) {
  const std::string mine = f->up_key(f->place.node);
  for (size_t i = 0; i < f->up_parts; ++i) {
    up.erase(part_key(mine, i), [] {});
  }
  up.erase(mine, [] {});
  up.add(f->read_key(), 1, [&up, f, result_parts](int64_t read) {
    if (read != f->place.parent_children) {
      return;
    }
    for (size_t i = 0; i < static_cast<size_t>(result_parts); ++i) {
      up.erase(part_key(f->down_key(), i), [] {});
    }
    up.erase(f->down_key(), [] {});
    up.erase(f->read_key(), [] {});
  });
}

// The failure goes up (unless this node's data is there already: then it
// comes down from above) and down, so that every node's fence ends with it.
void TreeFence::fail(const Shared& f, const std::string& why) {
  if (f->over) {
    return;
  }
  log::warn("a PMIx fence across the job's nodes failed on node {}: {}", f->place.node, why);
  if (StoreConnection* down = m_links.down(); down != nullptr && !f->place.children.empty()) {
    down->set(f->down_key(), k_failed + why, [] {});
  }
  if (!f->climbed && f->place.parent >= 0) {
    // Its failed record, then, once the failed result comes down, counted
    // out as its siblings are, so that their parent's store keeps nothing.
    m_links.up([f, record = k_failed + why](StoreConnection* up, const std::string&) {
      if (up == nullptr || up->failed()) {
        return;
      }
      up->set(f->up_key(f->place.node), record, [] {});
      up->get(f->down_key(), f->timeout, [f, up](std::optional<std::string> head) {
        const bool parts = head && !head->empty() && (*head)[0] == k_in_parts;
        release(f, *up,
                parts ? static_cast<int>(parse_integer_in(std::string_view(*head).substr(1), 1,
                                                          static_cast<long long>(k_max_parts))
                                             .value_or(0))
                      : 0);
      });
    });
  }
  end(f, Outcome::k_failed, {});
}

void TreeFence::end(const Shared& f, Outcome outcome, std::string data) {
  if (f->over) {
    return;
  }
  f->over = true;
  m_live.erase(f);
  f->done(outcome, std::move(data));
}

// The requests the round's fences keep parked go too: the children's GET
// of the result is answered (the key stays, for a child that asks later),
// and this node's WAIT for their records (the keys go at once).
void TreeFence::abandon() {
  const auto live = m_live;
  for (const auto& f : live) {
    if (StoreConnection* down = m_links.down(); down != nullptr && !f->place.children.empty()) {
      down->set(f->down_key(), std::string(1, k_abandoned), [] {});
      for (const int child : f->place.children) {
        if (f->children_in < f->from_children.size()) {
          down->set(f->up_key(child), std::string(1, k_abandoned), [] {});
          down->erase(f->up_key(child), [] {});
        }
      }
    }
    end(f, Outcome::k_failed, {});
  }
}

}  // namespace ddplaunch
