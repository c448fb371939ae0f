#include "topo/core/status.hpp"

// Status and Result are header-only; this unit keeps the library's file list
// stable for the pieces that will grow here (error codes for the daemon).
namespace topo::core {}
