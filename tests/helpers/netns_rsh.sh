#!/bin/sh
# mpirun's rsh agent for the tests' network-namespace hosts (netns.py): where
# ssh would log in to HOST, this enters HOST's network namespace (named
# $DDPLAUNCH_NETNS_PREFIX$HOST) under its own host name and runs the command.
#   netns_rsh.sh [ssh options] HOST command...
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"
shift
exec ip netns exec "${DDPLAUNCH_NETNS_PREFIX:?}$host" unshare --uts \
  sh -c 'hostname "$0" && eval "$1"' "$host" "$*"
