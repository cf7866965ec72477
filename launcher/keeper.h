// The keeper: the process between an agent and its application. The agent forks it; it forks
// the application and holds the application's whole process tree, so that no part of the tree
// outlives the slot (docs/launcher.md "The application's process tree"). In a PID namespace the
// keeper is the namespace's first process: when it ends, for whatever reason, the kernel ends
// every process in the namespace. It relays signals to the application's process group, reaps
// every process of the tree, reports the application's wait status to the agent, ends the tree
// when its agent dies (PR_SET_PDEATHSIG), and ends the tree and the agent when the agent stays
// stopped (a stopped process cannot end itself).
//
// RunKeeper runs in a child forked from the multithreaded agent and never calls exec: it uses
// only async-signal-safe system calls and allocates nothing. Everything it needs is prepared by
// the agent (child_process.cc) before the fork.
#pragma once

#include <signal.h>
#include <sys/resource.h>

#include <cstdint>

namespace rtft::launch {

// How the application's tree is held, strongest first.
enum class Isolation : int {
  // A PID and mount namespace of its own (needs CAP_SYS_ADMIN): nothing of the tree can escape,
  // even when the agent and the keeper are SIGKILLed.
  kPidNamespace = 0,
  // The same inside a user namespace (no privilege needed where unprivileged user namespaces
  // are allowed); the application keeps its user and group ids.
  kUserPidNamespace = 1,
  // Fallback: the application in a process group of its own and the keeper a child subreaper,
  // so it sees every orphan of the tree. A SIGKILLed agent is still handled (the keeper ends the
  // tree), a SIGKILLed keeper is not.
  kProcessGroup = 2,
};
const char* IsolationName(Isolation isolation);

// A record on the report pipe (keeper and application to agent), before the application's exec.
struct KeeperNote {
  enum Kind : int32_t {
    kExecFailed = 1,      // err: errno of execve
    kSetupFailed = 2,     // err: errno of the step that failed (the application is not started)
    kProcNotMounted = 3,  // err: errno of mount; the application sees the host's /proc
  };
  int32_t kind = 0;
  int32_t err = 0;
};

// A record on the status pipe (keeper to agent), at most one of each kind, in this order.
struct KeeperStatus {
  enum Kind : int32_t {
    // The application is ending and cannot come back: its descriptors are closed (its life pipe,
    // kLifeFd, saw EOF) and the kernel marks it exiting, with this wait status. The kernel has
    // yet to release what it held (a GPU context with its pinned host memory takes up to half a
    // second, docs/launcher.md "How an ending is seen"). Sent only for a nonzero status.
    kExiting = 1,
    kEnded = 2,  // the whole tree is gone; status: the application's wait status
  };
  int32_t kind = 0;
  int32_t status = 0;
};

// The application's descriptor of its life pipe's write end. The lowest a process gets after
// stdio, so that an ending process closes it before any descriptor it opened itself (the kernel
// closes them in order), a GPU driver's among them.
constexpr int kLifeFd = 3;

// Prepared by the agent before the fork; every pointer stays valid in the child's copy.
struct KeeperPlan {
  Isolation isolation = Isolation::kProcessGroup;
  const char* path = nullptr;      // the resolved executable
  char* const* argv = nullptr;     // argv[0] as the user gave it
  char* const* sh_argv = nullptr;  // {"/bin/sh", path, args...}: a script without "#!"
  char* const* envp = nullptr;
  int report_fd = -1;        // write end: KeeperNote records; EOF once exec succeeded
  int status_fd = -1;        // write end: KeeperStatus records
  int go_fd = -1;            // read end: a byte once the user namespace maps are written
  int agent_stat_fd = -1;    // /proc/<agent>/stat: the agent's state (alive, stopped)
  int kill_switch_fd = -1;   // write end: a byte written here SIGKILLs the agent
  int stop_limit_ms = 0;     // agent stopped this long: end the tree, then the agent
  int kill_tree_signal = 0;  // the agent's request to end the whole tree at once
  rlimit app_nofile{};       // RLIMIT_NOFILE the application starts with
};

// Signals the keeper relays to the application's process group; every other signal the agent
// sends to the keeper is a request to end the tree (`kill_tree_signal`).
constexpr int kRelayedSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM};

// Never returns: the keeper exits with 0 after it reported the application's status, or dies
// with its namespace.
[[noreturn]] void RunKeeper(const KeeperPlan& plan);

}  // namespace rtft::launch
