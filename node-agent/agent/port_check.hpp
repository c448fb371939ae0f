#pragma once
// Is a TCP port free on this node? Used for MASTER_PORT on the node that
// holds rank 0, before its ranks start (agent_core.hpp): rank 0's
// rendezvous store listens there on every address.
//
// Binds (and closes) a TCP socket on the IPv4 wildcard address and, where
// the node has IPv6, on the IPv6 wildcard (IPV6_V6ONLY), both with
// SO_REUSEADDR as PyTorch's TCPStore does, so a port held only by
// connections in TIME_WAIT counts as free (the store can bind it) while a
// listener or a bound socket on any address makes it busy. A check, not a
// reservation: a process may take the port between the check and the rank's
// bind.
//
// Thread safety: thread-safe (no shared state).

#include "topo/core/status.hpp"

namespace topo::agent {

// Ok when `port` can be bound; otherwise an error naming the port and the
// reason ("port 29500 is in use (IPv4 bind: Address already in use)").
// REQUIRES: 1 <= port <= 65535.
core::Status CheckTcpPortFree(int port);

}  // namespace topo::agent
