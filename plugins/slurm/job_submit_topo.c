// SPDX-License-Identifier: GPL-2.0-or-later
//
// job_submit/topo: a Slurm job_submit plugin that asks topo-scheduler where a
// job goes. Copyright (C) the toposched authors. Licensed under the GNU
// General Public License, version 2 or (at your option) any later version;
// see LICENSE in this directory.
//
// For each submission slurmctld calls job_submit() with its job and node
// write locks held. The plugin sends the job's shape as one JSON line over a
// unix stream socket to topo-scheduler and reads one answer line:
//
//   PLACE <toposched id> <node,node,...> [<rank map>]
//                                          req_nodes := the nodes, in rank order
//   HOLD <toposched id> <message>          priority := 0 (held); topo-scheduler
//                                          sets ReqNodeList and releases it later
//   REJECT <message>                       the submission fails with the message
//   PASS <message>                         the job goes on untouched
//
// PLACE and HOLD also set admin_comment to "toposched:<id>", which is how
// topo-scheduler finds the Slurm job id later (it is not known yet here),
// then " signal=[B:]<n>" when the job declared a checkpoint signal with
// --signal=[B:]SIG[@TIME] (the only jobs toposched ever signals), and for
// PLACE the rank map of the answer ("ranks=<nodes in rank order> map=...
// layout=...", which topo-slurm-task lays the job's tasks out by).
//
// Fail-open: no socket, no answer within the budget (timeout_ms, 500 ms by
// default) or an answer it cannot read leaves the job untouched, and says so
// in slurmctld's log. The plugin never calls Slurm back and never blocks
// longer than its budget. docs/slurm.md documents the protocol.
//
// Settings: a file of `key = value` lines, read once in init(): the path in
// $TOPO_PLUGIN_CONF, else topo_plugin.conf next to $SLURM_CONF, else
// /etc/slurm/topo_plugin.conf. Keys: socket (default
// /run/toposched/slurm.sock), timeout_ms (1..10000). A missing file means
// the defaults.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

// Slurm's loader compares plugin_version with its own SLURM_VERSION_NUMBER
// and refuses a plugin built against another release.
const char plugin_name[] = "toposched topology-aware placement";
const char plugin_type[] = "job_submit/topo";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

// From libslurmfull (slurmctld's own symbols): Slurm's allocator and log.
// Strings Slurm frees later must come from slurm_xstrdup.
extern char* slurm_xstrdup(const char* str);
extern void slurm_xfree(void** item);
extern void slurm_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
extern void slurm_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#define TOPO_DEFAULT_SOCKET "/run/toposched/slurm.sock"
#define TOPO_MAX_ANSWER 65536
#define TOPO_MAX_ENV_VALUE 4096

static char g_socket[sizeof(((struct sockaddr_un*)0)->sun_path)] = TOPO_DEFAULT_SOCKET;
static int g_timeout_ms = 500;

// ---------------------------------------------------------------- buffer

struct buf {
  char* data;
  size_t len;
  size_t cap;
  bool failed;
};

static void buf_add(struct buf* b, const char* s, size_t n) {
  if (b->failed) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n + 1) cap *= 2;
    char* grown = realloc(b->data, cap);
    if (grown == NULL) {
      b->failed = true;
      return;
    }
    b->data = grown;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

static void buf_str(struct buf* b, const char* s) { buf_add(b, s, strlen(s)); }

// A JSON string of at most max bytes of s; NULL is null. Bytes outside
// printable ASCII are escaped or, above 0x7f, replaced with '?' (the answer
// must be valid UTF-8 and this side has no decoder).
static void buf_json_string(struct buf* b, const char* s, size_t max) {
  if (s == NULL) {
    buf_str(b, "null");
    return;
  }
  buf_str(b, "\"");
  for (size_t i = 0; s[i] != '\0' && i < max; ++i) {
    unsigned char c = (unsigned char)s[i];
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      buf_add(b, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof(esc), "\\u%04x", c);
      buf_str(b, esc);
    } else if (c >= 0x7f) {
      buf_str(b, "?");
    } else {
      buf_add(b, (const char*)&c, 1);
    }
  }
  buf_str(b, "\"");
}

static void buf_key(struct buf* b, const char* key, bool first) {
  if (!first) buf_str(b, ",");
  buf_json_string(b, key, 64);
  buf_str(b, ":");
}

// A uint32 field; NO_VAL and INFINITE are -1.
static void buf_u32(struct buf* b, const char* key, uint32_t v) {
  char num[24];
  buf_key(b, key, false);
  if (v == NO_VAL || v == INFINITE) {
    buf_str(b, "-1");
  } else {
    snprintf(num, sizeof(num), "%" PRIu32, v);
    buf_str(b, num);
  }
}

static void buf_strfield(struct buf* b, const char* key, const char* v) {
  buf_key(b, key, false);
  buf_json_string(b, v, 65536);
}

// ---------------------------------------------------------------- settings

static char* trim(char* s) {
  while (*s == ' ' || *s == '\t') ++s;
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) {
    s[--n] = '\0';
  }
  return s;
}

static void read_settings(void) {
  char path[4096];
  const char* explicit_path = getenv("TOPO_PLUGIN_CONF");
  const char* slurm_conf = getenv("SLURM_CONF");
  if (explicit_path != NULL && explicit_path[0] != '\0') {
    snprintf(path, sizeof(path), "%s", explicit_path);
  } else if (slurm_conf != NULL && strrchr(slurm_conf, '/') != NULL) {
    int dir_len = (int)(strrchr(slurm_conf, '/') - slurm_conf);
    snprintf(path, sizeof(path), "%.*s/topo_plugin.conf", dir_len, slurm_conf);
  } else {
    snprintf(path, sizeof(path), "/etc/slurm/topo_plugin.conf");
  }
  FILE* f = fopen(path, "re");
  if (f == NULL) {
    slurm_info("job_submit/topo: no %s (%s); socket %s, timeout %d ms", path, strerror(errno),
               g_socket, g_timeout_ms);
    return;
  }
  char line[4096];
  int lineno = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    ++lineno;
    char* hash = strchr(line, '#');
    if (hash != NULL) *hash = '\0';
    char* s = trim(line);
    if (*s == '\0') continue;
    char* eq = strchr(s, '=');
    if (eq == NULL) {
      slurm_error("job_submit/topo: %s:%d: expected key = value; line ignored", path, lineno);
      continue;
    }
    *eq = '\0';
    char* key = trim(s);
    char* value = trim(eq + 1);
    if (strcmp(key, "socket") == 0) {
      if (value[0] != '/' || strlen(value) >= sizeof(g_socket)) {
        slurm_error("job_submit/topo: %s:%d: socket must be an absolute path under %zu bytes", path,
                    lineno, sizeof(g_socket));
        continue;
      }
      snprintf(g_socket, sizeof(g_socket), "%s", value);
    } else if (strcmp(key, "timeout_ms") == 0) {
      char* end = NULL;
      long v = strtol(value, &end, 10);
      if (end == value || *end != '\0' || v < 1 || v > 10000) {
        slurm_error("job_submit/topo: %s:%d: timeout_ms must be 1..10000", path, lineno);
        continue;
      }
      g_timeout_ms = (int)v;
    } else {
      slurm_error("job_submit/topo: %s:%d: unknown key \"%s\" (known: socket, timeout_ms)", path,
                  lineno, key);
    }
  }
  fclose(f);
  slurm_info("job_submit/topo: %s: socket %s, timeout %d ms", path, g_socket, g_timeout_ms);
}

int init(void) {
  read_settings();
  return SLURM_SUCCESS;
}

int fini(void) { return SLURM_SUCCESS; }

// ---------------------------------------------------------------- socket

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Waits for events on fd until the deadline: 1 ready, 0 timed out, -1 error.
static int wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0) return 0;
    struct pollfd p = {.fd = fd, .events = events, .revents = 0};
    int r = poll(&p, 1, (int)left);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return 0;
    return 1;
  }
}

// One request, one answer line, within the budget. Returns the answer
// (malloc'd, without the newline) or NULL with *why set.
static char* exchange(const char* request, size_t len, const char** why) {
  const int64_t deadline = now_ms() + g_timeout_ms;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = "socket() failed";
    return NULL;
  }
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", g_socket);
  if (connect(fd, (struct sockaddr*)&addr, sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) {
      *why = errno == ENOENT         ? "no socket (is topo-scheduler running in Slurm mode?)"
             : errno == ECONNREFUSED ? "connection refused (topo-scheduler is not listening)"
             : errno == EAGAIN       ? "topo-scheduler's backlog is full"
                                     : "connect() failed";
      close(fd);
      return NULL;
    }
    if (wait_fd(fd, POLLOUT, deadline) != 1) {
      *why = "connect timed out";
      close(fd);
      return NULL;
    }
  }
  size_t sent = 0;
  while (sent < len) {
    ssize_t n = send(fd, request + sent, len - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (wait_fd(fd, POLLOUT, deadline) != 1) {
        *why = "sending timed out";
        close(fd);
        return NULL;
      }
    } else {
      *why = "send() failed";
      close(fd);
      return NULL;
    }
  }
  char* answer = malloc(TOPO_MAX_ANSWER + 1);
  if (answer == NULL) {
    *why = "out of memory";
    close(fd);
    return NULL;
  }
  size_t got = 0;
  for (;;) {
    char* nl = memchr(answer, '\n', got);
    if (nl != NULL) {
      *nl = '\0';
      close(fd);
      return answer;
    }
    if (got == TOPO_MAX_ANSWER) {
      *why = "the answer is longer than 64 KiB";
      break;
    }
    ssize_t n = recv(fd, answer + got, TOPO_MAX_ANSWER - got, 0);
    if (n > 0) {
      got += (size_t)n;
    } else if (n == 0) {
      *why = "topo-scheduler closed the connection without an answer";
      break;
    } else if (errno == EAGAIN || errno == EINTR) {
      int w = wait_fd(fd, POLLIN, deadline);
      if (w != 1) {
        *why = w == 0 ? "no answer in time" : "poll() failed";
        break;
      }
    } else {
      *why = "recv() failed";
      break;
    }
  }
  free(answer);
  close(fd);
  return NULL;
}

// ---------------------------------------------------------------- job_submit

static char* build_request(const job_desc_msg_t* d, uint32_t uid) {
  struct buf b = {0};
  buf_str(&b, "{\"v\":1,\"op\":\"submit\"");
  buf_u32(&b, "uid", uid);
  buf_strfield(&b, "name", d->name);
  buf_strfield(&b, "account", d->account);
  buf_strfield(&b, "partition", d->partition);
  buf_strfield(&b, "comment", d->comment);
  buf_strfield(&b, "features", d->features);
  buf_strfield(&b, "req_nodes", d->req_nodes);
  buf_strfield(&b, "exc_nodes", d->exc_nodes);
  buf_strfield(&b, "tres_per_job", d->tres_per_job);
  buf_strfield(&b, "tres_per_node", d->tres_per_node);
  // --gpus-per-socket and --gpus-per-task (GPU types only). Sent only when
  // set: a topo-scheduler older than these fields refuses a line that has
  // them (it PASSes the job), and reads every line that leaves them out.
  if (d->tres_per_socket != NULL) buf_strfield(&b, "tres_per_socket", d->tres_per_socket);
  if (d->tres_per_task != NULL) buf_strfield(&b, "tres_per_task", d->tres_per_task);
  buf_u32(&b, "min_nodes", d->min_nodes);
  buf_u32(&b, "max_nodes", d->max_nodes);
  buf_u32(&b, "time_limit_min", d->time_limit);
  // --switches=N[@time] (every release since 2.x).
  buf_u32(&b, "req_switch", d->req_switch);
  buf_u32(&b, "wait4switch", d->wait4switch);
#if TOPO_SLURM_HAS_SEGMENT
  // --segment=N (topology/block, Slurm 24.11 and later; see CMakeLists.txt).
  buf_u32(&b, "segment", d->segment_size == (uint16_t)NO_VAL16 ? NO_VAL : d->segment_size);
#endif
#ifdef JOB_SHARED_TOPO
  // --exclusive=topo (Slurm 25.05 and later).
  buf_key(&b, "exclusive_topo", false);
  buf_str(&b, d->shared == JOB_SHARED_TOPO ? "true" : "false");
#endif
  buf_key(&b, "batch", false);
  buf_str(&b, d->script != NULL ? "true" : "false");
  buf_key(&b, "array", false);
  buf_str(&b, d->array_inx != NULL ? "true" : "false");
  // The TOPO_ convention: variables of the submitting environment.
  buf_key(&b, "env", false);
  buf_str(&b, "{");
  bool first = true;
  for (uint32_t i = 0; d->environment != NULL && i < d->env_size; ++i) {
    const char* e = d->environment[i];
    if (e == NULL || strncmp(e, "TOPO_", 5) != 0) continue;
    const char* eq = strchr(e, '=');
    if (eq == NULL || eq - e > 64) continue;
    char key[72];
    snprintf(key, sizeof(key), "%.*s", (int)(eq - e), e);
    buf_key(&b, key, first);
    buf_json_string(&b, eq + 1, TOPO_MAX_ENV_VALUE);
    first = false;
  }
  buf_str(&b, "}}\n");
  if (b.failed) {
    free(b.data);
    return NULL;
  }
  return b.data;
}

// Node lists from topo-scheduler are plain names joined by commas.
static bool valid_node_list(const char* s) {
  if (*s == '\0') return false;
  for (; *s != '\0'; ++s) {
    char c = *s;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == ',' || c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

static void set_string(char** field, const char* value) {
  if (*field != NULL) slurm_xfree((void**)field);
  *field = slurm_xstrdup(value);
}

// The rank map's tokens ("map=0:0-7/1:0-7 layout=tp:8,...,order:tp-cp-ep-dp-pp"):
// printable, no quotes, at most 48 KiB.
static bool valid_rank_map(const char* s) {
  if (strlen(s) > 48 * 1024) return false;
  for (; *s != '\0'; ++s) {
    char c = *s;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == ',' || c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '=' ||
              c == ' ';
    if (!ok) return false;
  }
  return true;
}

// "toposched:ID", the job's checkpoint signal if it declared one, and for
// placed jobs the rank map (common/slurm_rank_map.hpp): Slurm keeps
// allocations as sorted sets, so the rank order travels here (`scontrol show
// job $SLURM_JOB_ID`, docs/slurm.md). The answer's map starts with its own
// "ranks=" token, written once; a placed job whose answer carried no valid
// map gets " ranks=NODE,NODE,..." alone.
static void set_admin_comment(job_desc_msg_t* d, const char* id, const char* nodes,
                              const char* map) {
  struct buf b = {0};
  buf_str(&b, "toposched:");
  buf_str(&b, id);
  // --signal=[B:]SIG[@TIME]: warn_signal is NO_VAL16 when the job has none.
  if (d->warn_signal != NO_VAL16 && d->warn_signal >= 1 && d->warn_signal <= 64) {
    char sig[24];
    const bool batch = d->warn_flags != NO_VAL16 && (d->warn_flags & KILL_JOB_BATCH) != 0;
    snprintf(sig, sizeof(sig), " signal=%s%u", batch ? "B:" : "", (unsigned)d->warn_signal);
    buf_str(&b, sig);
  }
  const bool has_map = map != NULL && map[0] != '\0';
  if (nodes != NULL && !(has_map && strncmp(map, "ranks=", 6) == 0)) {
    buf_str(&b, " ranks=");
    buf_str(&b, nodes);
  }
  if (has_map) {
    buf_str(&b, " ");
    buf_str(&b, map);
  }
  if (!b.failed) set_string(&d->admin_comment, b.data);
  free(b.data);
}

// "ID REST": splits at the first space; id must be digits.
static bool split_id(char* s, char** id, char** rest) {
  char* sp = strchr(s, ' ');
  if (sp == NULL || sp == s || sp - s > 18) return false;
  *sp = '\0';
  for (char* p = s; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
  }
  *id = s;
  *rest = sp + 1;
  return true;
}

int job_submit(job_desc_msg_t* job_desc, uint32_t submit_uid, char** err_msg) {
  const char* name = job_desc->name != NULL ? job_desc->name : "";
  char* request = build_request(job_desc, submit_uid);
  if (request == NULL) {
    slurm_error("job_submit/topo: job \"%s\" of uid %u: out of memory; fail-open", name,
                submit_uid);
    return SLURM_SUCCESS;
  }
  const char* why = "";
  const int64_t t0 = now_ms();
  char* answer = exchange(request, strlen(request), &why);
  free(request);
  if (answer == NULL) {
    slurm_error("job_submit/topo: job \"%s\" of uid %u: %s (socket %s, after %" PRId64
                " ms); fail-open: the job goes on without toposched",
                name, submit_uid, why, g_socket, now_ms() - t0);
    return SLURM_SUCCESS;
  }
  int rc = SLURM_SUCCESS;
  char *id = NULL, *rest = NULL;
  char* map = NULL;
  if (strncmp(answer, "PLACE ", 6) == 0 && split_id(answer + 6, &id, &rest)) {
    char* sp = strchr(rest, ' ');
    if (sp != NULL) {
      *sp = '\0';
      map = sp + 1;
    }
  }
  if (map != NULL && !valid_rank_map(map)) {
    // Placed all the same; tasks keep Slurm's order (topo-slurm-task finds no map).
    slurm_error(
        "job_submit/topo: job \"%s\" of uid %u: the rank map is over 48 KiB or malformed; "
        "placing without it",
        name, submit_uid);
    map = NULL;
  }
  if (id != NULL && valid_node_list(rest)) {
    uint32_t count = 1;
    for (const char* p = rest; *p != '\0'; ++p) count += *p == ',';
    set_string(&job_desc->req_nodes, rest);
    job_desc->min_nodes = count;
    job_desc->max_nodes = count;
    set_admin_comment(job_desc, id, rest, map);
    slurm_info("job_submit/topo: job \"%s\" of uid %u: toposched job %s placed on %s", name,
               submit_uid, id, rest);
  } else if (strncmp(answer, "HOLD ", 5) == 0 && split_id(answer + 5, &id, &rest)) {
    job_desc->priority = 0;
    set_admin_comment(job_desc, id, NULL, NULL);
    char msg[1024];
    snprintf(msg, sizeof(msg), "toposched: held until capacity frees: %s", rest);
    if (err_msg != NULL) set_string(err_msg, msg);
    slurm_info("job_submit/topo: job \"%s\" of uid %u: toposched job %s held: %s", name, submit_uid,
               id, rest);
  } else if (strncmp(answer, "REJECT ", 7) == 0) {
    char msg[2048];
    snprintf(msg, sizeof(msg), "toposched: %s", answer + 7);
    if (err_msg != NULL) set_string(err_msg, msg);
    slurm_info("job_submit/topo: job \"%s\" of uid %u rejected: %s", name, submit_uid, answer + 7);
    rc = ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE;
  } else if (strncmp(answer, "PASS", 4) == 0) {
    slurm_info("job_submit/topo: job \"%s\" of uid %u: not toposched's (%s)", name, submit_uid,
               answer[4] == ' ' ? answer + 5 : "");
  } else {
    slurm_error("job_submit/topo: job \"%s\" of uid %u: unreadable answer \"%.200s\"; fail-open",
                name, submit_uid, answer);
  }
  free(answer);
  return rc;
}

// Modifications (scontrol update, including topo-scheduler's own
// ReqNodeList updates) go through untouched: answering them would need the
// socket while slurmctld holds its locks, for no gain.
int job_modify(job_desc_msg_t* job_desc, void* job_ptr, uint32_t submit_uid) {
  (void)job_desc;
  (void)job_ptr;
  (void)submit_uid;
  return SLURM_SUCCESS;
}
