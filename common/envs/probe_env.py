"""A diagnostic environment whose tools try what a misbehaving agent might: for sandbox checks.

Run it only through the sandboxed process (tests/sandbox_test.py, tests/rollout_test.py do): its tools
open network connections, write and read arbitrary paths, fork until refused, allocate memory and
crash or hang the process on purpose. Each tool reports what happened as its observation.

Tools:
  echo {text}                  -> the text (a harmless step)
  connect {host, port}         -> 'connected' or the OS error (outbound network)
  interfaces {}                -> network interface names visible inside
  write_file {path, text}      -> 'wrote' or the OS error
  read_file {path}             -> the first 200 characters or the OS error
  fork_bomb {max_children}     -> forks sleeping children until the kernel refuses; reports the count
  alloc {gib}                  -> touches `gib` GiB of memory (the memory cgroup kills the process)
  crash {}                     -> the process exits at once (exit code 3)
  hang {}                      -> never answers (sleeps for an hour)
  finish {answer}              -> ends the episode
Task ids are free-form; reward (info['reward']) is 1.0 when `finish` gets answer == task id.
"""

from __future__ import annotations

import os
import signal
import socket
import time

from common.envs.base import StepResult


def _tool(name, description, props=None, required=()):
  return {"name": name, "description": description,
          "inputSchema": {"type": "object", "properties": props or {}, "required": list(required)}}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}


class ProbeEnv:
  """See the module docstring.

  Args:
    max_steps: calls per episode before done.
  """

  QUERY_METHODS = ("pid",)

  def __init__(self, max_steps: int = 20):
    self.max_steps = max_steps
    self._task = None
    self._steps = 0

  def tools(self):
    return [
        _tool("echo", "Return the text.", {"text": _STR}),
        _tool("connect", "Open a TCP connection.", {"host": _STR, "port": _INT}, ("host", "port")),
        _tool("interfaces", "List network interfaces."),
        _tool("write_file", "Write text to a path.", {"path": _STR, "text": _STR}, ("path",)),
        _tool("read_file", "Read a file.", {"path": _STR}, ("path",)),
        _tool("fork_bomb", "Fork until refused.", {"max_children": _INT}),
        _tool("alloc", "Allocate and touch memory.", {"gib": _NUM}, ("gib",)),
        _tool("crash", "Exit the process."),
        _tool("hang", "Never answer."),
        _tool("finish", "End the episode with an answer.", {"answer": _STR}),
    ]

  def pid(self):
    return os.getpid()

  def reset(self, task_id: str, seed: int) -> str:
    self._task = task_id
    self._steps = 0
    return f"Task {task_id} (seed {seed}). Tools: echo, connect, write_file, read_file, finish..."

  def step(self, call) -> StepResult:
    if self._task is None:
      raise RuntimeError("step() before reset()")
    self._steps += 1
    name, a = call.get("name"), call.get("arguments") or {}
    done = self._steps >= self.max_steps
    info = {"step": self._steps, "tool": name, "reward": 0.0}
    try:
      obs = self._run(name, a, info)
      status = "ok"
    except OSError as e:
      obs, status = f"OSError: [Errno {e.errno}] {e.strerror}", "failed"
      info["errno"] = e.errno
    if name == "finish":
      done = True
      info["reward"] = float(a.get("answer") == self._task)
    if name not in {t["name"] for t in self.tools()}:
      status = "invalid"
    return StepResult(obs, status, done, info)

  def _run(self, name, a, info):
    if name == "echo":
      return str(a.get("text", ""))
    if name == "connect":
      with socket.create_connection((a["host"], int(a["port"])), timeout=3):
        return "connected"
    if name == "interfaces":
      return ",".join(n for _, n in socket.if_nameindex())
    if name == "write_file":
      with open(a["path"], "w") as f:
        f.write(a.get("text", "x"))
      return "wrote"
    if name == "read_file":
      with open(a["path"], errors="replace") as f:
        return f.read(200)
    if name == "fork_bomb":
      return self._fork_bomb(int(a.get("max_children", 10_000)), info)
    if name == "alloc":
      n = int(float(a["gib"]) * (1 << 30))
      buf = bytearray(n)
      for i in range(0, n, 4096):  # touch every page so it is really resident
        buf[i] = 1
      return f"allocated {n} bytes"
    if name == "crash":
      os._exit(3)
    if name == "hang":
      time.sleep(3600)
      return "woke up"
    if name == "finish":
      return "episode finished"
    return f"Error: unknown tool {name!r}"

  def _fork_bomb(self, max_children, info):
    children, err = [], None
    try:
      while len(children) < max_children:
        pid = os.fork()
        if pid == 0:  # child: sleep until killed
          try:
            time.sleep(600)
          finally:
            os._exit(0)
        children.append(pid)
    except OSError as e:
      err = e
    for pid in children:
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    for pid in children:
      try:
        os.waitpid(pid, 0)
      except ChildProcessError:
        pass
    info["children"] = len(children)
    info["refused"] = err is not None
    if err is None:
      return f"forked {len(children)} children, never refused"
    return f"forked {len(children)} children, then refused: [Errno {err.errno}] {err.strerror}"

  def close(self):
    pass
