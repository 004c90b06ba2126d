#!/bin/sh
# A shell worker that uses the job's store (ddplaunch store): one writer per
# node is elected with `add`, then every rank meets at a barrier made of `add`
# and `wait`. Run it under ddplaunch, for example on two nodes of two workers:
#   ddplaunch --nnodes 2 --nproc-per-node 2 -- sh examples/store_barrier.sh
set -eu
# DDPLAUNCH_EXE is the launcher's own path: ddplaunch need not be on PATH.
store="${DDPLAUNCH_EXE:-ddplaunch} store"

# The first rank of each node to get here writes the node's record.
if [ "$($store add "node/$GROUP_RANK/writers" 1)" = 1 ]; then
  $store set "node/$GROUP_RANK/host" "$(hostname)"
  echo "rank $RANK writes for node $GROUP_RANK"
fi

# Barrier: the last rank to arrive opens it; everyone waits for that.
if [ "$($store add barrier/arrived 1)" = "$WORLD_SIZE" ]; then
  $store set barrier/open 1
fi
$store wait barrier/open --timeout 60
echo "rank $RANK passed the barrier"
