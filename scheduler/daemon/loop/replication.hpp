#pragma once
// HA (docs/ha.md): how the loop hands what it commits to the replicated log
// before the local store takes it. Unset hooks: the single daemon.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>

#include "store/store.hpp"
#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::daemon {

// Hands a commit's batch, and the seq of its first entry, to the replicated
// log before the local append; an error fails the commit.
using ReplicateBatch = std::function<core::Status(
    int64_t first_seq, std::span<const store::LogEntry> batch, const core::Topology& topology)>;

// Hands a topology import's new meta values (topology, topology_from_seq,
// policy) and the epoch's first seq to the replicated log before the
// store's meta changes; an error fails the import (503).
using ReplicateEpoch = std::function<core::Status(
    int64_t from_seq, std::span<const std::pair<std::string, std::string>> meta)>;

}  // namespace topo::daemon
