"""A real, third-party MCP server's tools driven as an environment.

`McpServerEnv` wraps any stdio MCP server: its `tools/list` is the environment's tool list and a step
is one `tools/call` (text content -> observation; `isError` -> status 'error', so servers' errors
are never silent). It runs inside the environment process, i.e. inside the sandbox, so the reference
server inherits the sandbox (no network, private workspace, memory and process limits).

`GitTaskEnv` puts the reference git server (PyPI `mcp-server-git` 2026.10.19, by the MCP project;
12 tools: git_status, git_add, git_commit, git_create_branch, git_checkout, git_reset, ...) in front
of small repository tasks with verifiable goals. Each reset builds a fresh repository with plain
`git` (Debian package `git`); after every step the goal is checked on the repository itself and
info['reward'] is 1.0 once it holds (the episode is then done).

Tasks ('<name>', the seed varies file contents):
  commit-readme   README.md is untracked; goal: committed and the tree clean.
  feature-branch  goal: a branch 'feature' exists and is checked out.
  stage-a-only    a.txt and b.txt are untracked; goal: a.txt staged, b.txt still untracked.
  unstage-all     c.txt is staged; goal: nothing staged.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from common.mcp_process import EnvError, LoopThread, McpProcess
from common.envs.base import StepResult

_GIT_ENV = {"GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@example.invalid",
            "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@example.invalid",
            "USER": "agent", "GIT_CONFIG_NOSYSTEM": "1"}


class McpServerEnv:
  """An external stdio MCP server as a ToolEnv (reset/goal logic left to subclasses).

  Args:
    command: argv of the server.
    env: extra environment variables for the server.
    cwd: its working directory.
    max_steps: calls per episode before done.
    start_timeout_s, call_timeout_s: limits for the server's handshake and for one call.
  """

  def __init__(self, command: list[str], *, env: dict | None = None, cwd: str | None = None,
               max_steps: int = 10, start_timeout_s: float = 60.0, call_timeout_s: float = 30.0):
    self.max_steps = max_steps
    self.call_timeout_s = call_timeout_s
    self._lt = LoopThread("mcp-server-env")
    fd, self._log = tempfile.mkstemp(prefix="mcp-server-", suffix=".log")
    os.close(fd)
    self._proc = McpProcess(command, loop=self._lt, env={**os.environ, **(env or {})}, cwd=cwd,
                            stderr_path=self._log)
    try:
      self._proc.start(start_timeout_s)
    except EnvError:
      self._lt.close()
      raise
    self.server_info = self._proc.server_info
    self._tools = [{"name": t["name"], "description": t.get("description", ""),
                    "inputSchema": t.get("inputSchema", {"type": "object"})} for t in self._proc.tools]
    self._names = {t["name"] for t in self._tools}
    self._steps = 0
    self._task_id: str | None = None

  def tools(self) -> list[dict[str, Any]]:
    return [dict(t) for t in self._tools]

  def reset(self, task_id: str, seed: int = 0) -> str:
    self._steps = 0
    self._task_id = str(task_id)
    return self.setup_task(str(task_id), int(seed))

  def step(self, call) -> StepResult:
    if self._task_id is None:
      raise RuntimeError("step() before reset(task_id, seed)")
    self._steps += 1
    name = call.get("name")
    args = call.get("arguments") or {}
    info: dict[str, Any] = {"task_id": self._task_id, "step": self._steps, "tool": name}
    if name not in self._names:
      obs, status = (f"Error: unknown tool {name!r}; the tools are {sorted(self._names)}.", "invalid")
    else:
      res = self._proc.call(name, dict(args), timeout_s=self.call_timeout_s)
      obs = "".join(getattr(c, "text", "") for c in (res.content or []))
      status = "error" if res.is_error else "ok"
    reward = float(self.goal_reached())
    info["reward"] = reward
    done = reward >= 1.0 or self._steps >= self.max_steps
    return StepResult(obs, status, done, info)

  def close(self) -> None:
    try:
      self._proc.close(grace_s=2.0)
    finally:
      self._lt.close()
      if os.path.exists(self._log):
        os.unlink(self._log)

  # subclass hooks
  def setup_task(self, task_id: str, seed: int) -> str:
    return f"Task {task_id}. Use the tools."

  def goal_reached(self) -> bool:
    return False


def _git(repo: str, *args: str) -> str:
  out = subprocess.run(["git", *args], cwd=repo, env={**os.environ, **_GIT_ENV}, check=True,
                       capture_output=True, text=True)
  return out.stdout


class GitTaskEnv(McpServerEnv):
  """Repository tasks solved through the reference `mcp-server-git` (see the module docstring).

  Args:
    repo_dir: where the task repository lives (default: a fresh temporary directory; inside the
      sandbox that is under the private workspace).
    max_steps: calls per episode.
  """

  TASKS = ("commit-readme", "feature-branch", "stage-a-only", "unstage-all")
  QUERY_METHODS = ("task_ids", "solution")

  def __init__(self, *, repo_dir: str | None = None, max_steps: int = 8, **kw):
    self._base = tempfile.mkdtemp(prefix="gitenv-") if repo_dir is None else None
    self.repo = repo_dir or os.path.join(self._base, "repo")
    os.makedirs(self.repo, exist_ok=True)
    if not os.path.isdir(os.path.join(self.repo, ".git")):  # the server insists on a repository
      _git(self.repo, "init", "-q", "-b", "main")
    super().__init__([sys.executable, "-m", "mcp_server_git", "--repository", self.repo],
                     env=_GIT_ENV, max_steps=max_steps, **kw)
    self._goal = None

  def task_ids(self) -> list[str]:
    return list(self.TASKS)

  def solution(self, task_id: str) -> list[dict]:
    """A call sequence that reaches the goal (for tests and scripted baselines)."""
    r = self.repo
    return {
        "commit-readme": [{"name": "git_add", "arguments": {"repo_path": r, "files": ["README.md"]}},
                          {"name": "git_commit", "arguments": {"repo_path": r, "message": "Add README"}}],
        "feature-branch": [{"name": "git_create_branch", "arguments": {"repo_path": r,
                                                                       "branch_name": "feature"}},
                           {"name": "git_checkout", "arguments": {"repo_path": r,
                                                                  "branch_name": "feature"}}],
        "stage-a-only": [{"name": "git_add", "arguments": {"repo_path": r, "files": ["a.txt"]}}],
        "unstage-all": [{"name": "git_reset", "arguments": {"repo_path": r}}],
    }[self._check(task_id)]

  def _check(self, task_id: str) -> str:
    if task_id not in self.TASKS:
      raise ValueError(f"unknown git task {task_id!r}; tasks are {list(self.TASKS)}")
    return task_id

  def setup_task(self, task_id: str, seed: int) -> str:
    self._check(task_id)
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    for entry in os.listdir(self.repo):
      p = os.path.join(self.repo, entry)
      shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    _git(self.repo, "init", "-q", "-b", "main")
    with open(os.path.join(self.repo, "base.txt"), "w") as f:
      f.write(" ".join(rng.choice(words) for _ in range(8)) + "\n")
    _git(self.repo, "add", "base.txt")
    _git(self.repo, "commit", "-q", "-m", "Initial commit")
    text = lambda: " ".join(rng.choice(words) for _ in range(5)) + "\n"  # noqa: E731
    if task_id == "commit-readme":
      open(os.path.join(self.repo, "README.md"), "w").write("# Project\n" + text())
      goal = "Commit the untracked file README.md so that the working tree is clean."
    elif task_id == "feature-branch":
      goal = "Create a branch named 'feature' and check it out."
    elif task_id == "stage-a-only":
      open(os.path.join(self.repo, "a.txt"), "w").write(text())
      open(os.path.join(self.repo, "b.txt"), "w").write(text())
      goal = "Stage a.txt for commit, but leave b.txt untracked. Do not commit."
    else:
      open(os.path.join(self.repo, "c.txt"), "w").write(text())
      _git(self.repo, "add", "c.txt")
      goal = "Unstage everything that is staged (keep the files)."
    self._goal = task_id
    return f"The git repository is at {self.repo} (pass it as repo_path). {goal}"

  def goal_reached(self) -> bool:
    r, t = self.repo, self._goal
    status = _git(r, "status", "--porcelain").splitlines()
    if t == "commit-readme":
      return "README.md" in _git(r, "ls-tree", "--name-only", "HEAD").split() and not status
    if t == "feature-branch":
      return _git(r, "rev-parse", "--abbrev-ref", "HEAD").strip() == "feature"
    if t == "stage-a-only":
      return "A  a.txt" in status and "?? b.txt" in status
    if t == "unstage-all":
      return all(not (s[0] in "AMDR" and s[1] in " MD") for s in status if s and s[0] != "?")
    return False

  def close(self) -> None:
    super().close()
    if self._base:
      shutil.rmtree(self._base, ignore_errors=True)
