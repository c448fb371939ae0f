#pragma once
// The Unix account a job runs as, and the job's private directories.
//
// topo-agent runs as root; every rank runs as the job's submitter (see
// ARCHITECTURE.md "Trust boundaries"). The account is resolved in the agent
// (getpwnam_r, getgrouplist) before any fork, so the child between fork and
// exec only calls setgroups/setgid/setuid with values already at hand.
//
// Directory layout and modes (what one job can see of another's):
//   ROOT (log root, local and persistent checkpoint roots)  root, 0711:
//       traversable by everybody, listable by nobody but root;
//   ROOT/JOB                                                 the account, 0700;
//   files the agent writes for a job (rank logs, persistent copies)
//                                                            the account, 0600.
// The supervisor's state dir is root 0700 and never handed to a job.

#include <sys/types.h>

#include <string>
#include <vector>

#include "topo/core/status.hpp"

namespace topo::agent {

struct UnixAccount {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;              // primary group
  std::vector<gid_t> groups;  // every group of the account (primary included)
  std::string home;           // pw_dir (may not exist)
  std::string shell;          // pw_shell
};

// Who owns the files written for a job.
struct FileOwner {
  uid_t uid = 0;
  gid_t gid = 0;
};

// This node's name, for messages ("on node N").
std::string NodeName();

// Looks the account up. Errors: empty name ("the job names no Unix account"),
// no such account on this node ("no Unix account 'ada' on this node NODE:
// create it or set the user's unix_user"), lookup failures. `missing`, when
// given, is set to whether the error says the account does not exist (or
// none was named) as opposed to a lookup that failed (NSS down, a directory
// server that timed out), which may pass.
// Blocking: NSS may ask a directory server (LDAP, sssd) and wait for it, so
// the agent never calls it on its event loop (supervisor.hpp, StartingLaunch).
// Thread-safe (reentrant libc calls only).
core::Result<UnixAccount> ResolveUnixAccount(const std::string& name, bool* missing = nullptr);

// The node's rules for the accounts jobs run as (topo-agent
// --allow-root-jobs, --min-job-uid), whatever the scheduler sent:
//   uid 0                 only with allow_root (the launch's or the site's);
//   0 < uid < min_uid     never: system accounts (daemon, bin, the package
//                         accounts of the node's services) own files and
//                         processes no job may touch;
//   uid >= min_uid        yes.
// Default 1000: login.defs' UID_MIN, where useradd starts ordinary accounts.
inline constexpr uid_t kDefaultMinJobUid = 1000;
struct AccountPolicy {
  bool allow_root = false;
  uid_t min_uid = kDefaultMinJobUid;
};

// The account a job's ranks (and its checkpoint copies) run as:
// ResolveUnixAccount, then the node's rules. Errors besides the lookup's:
// uid 0 without allow_root ("jobs may not run as root; ..."), a uid below
// min_uid ("Unix account 'daemon' has uid 1, below this node's floor of
// 1000 (topo-agent --min-job-uid ...)"), and an account other than the
// agent's own where the agent is not root.
// `permanent` is set to whether no retry can help (the account is missing:
// accounts come from the site's database, the same on every node; or it is
// root or below the floor and refused); a missing account's error says so.
// Blocking and thread-safe, as ResolveUnixAccount.
core::Result<UnixAccount> JobAccount(const std::string& unix_user, const AccountPolicy& policy,
                                     bool* permanent);

// Makes PATH (and missing parents) a root directory of the layout above:
// owned by root, mode 0711. An existing PATH gets that owner and mode; a
// PATH that is a symlink or not a directory is an error naming it.
// REQUIRES: euid 0 to change the owner (otherwise the mode alone is set).
core::Status EnsureTraversableRoot(const std::string& path);

// Makes PATH the job's private directory: owned by owner, mode 0700.
//   - missing: created (parents as root 0711 when they are missing too);
//   - owned by root: written by the agent for the job (e.g. a checkpoint
//     staged from the persistent tier before the launch): the whole tree is
//     handed to owner (lchown, symlinks never followed; directories 0700,
//     files 0600);
//   - owned by owner: only its mode is reset to 0700;
//   - owned by anybody else, a symlink or not a directory: an error that
//     names the path and the fix (nothing is changed).
core::Status EnsurePrivateDir(const std::string& path, FileOwner owner);

}  // namespace topo::agent
