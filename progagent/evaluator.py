"""A benchmark's own evaluator, run after an episode in a sandbox of its own: its exit status is the verdict.

  ev = Evaluator("python /bench/task/evaluation/main.py --agent_workspace {workspace} "
                 "--groundtruth_workspace {groundtruth}")
  verdict = ev.run(workspace, groundtruth="/bench/task/groundtruth_workspace")
  verdict["passed"], verdict["reward"], verdict["exit_code"], verdict["output"]

Used by `python -m progagent.mcp_runtime_server --evaluator COMMAND [--groundtruth DIR]` (run once the episode
is over, at exit; the verdict goes to `--verdict-file`) and by progagent.mcp_task_env.McpTaskEnv.verify() (the
reward of the trainer's rollouts and of its evaluation stage; config `env.mcp.evaluator`).

Command: split like a shell command (shlex; no shell runs it). Placeholders, replaced inside any argument:
  {workspace}    the episode's workspace, mounted READ-ONLY at /workspace (the path programs and servers used,
                 progagent.mcp_servers.WORKSPACE_INSIDE), also the evaluator's working folder;
  {groundtruth}  the ground-truth folder given to run(), copied for the run into a capped folder of the
                 sandbox user's (so that a folder only root may read is readable there) and mounted read-only at
                 /groundtruth (GROUNDTRUTH_INSIDE); a command that names it without a folder given raises
                 ValueError naming `--groundtruth`.
Other braces are left as they are. The program is resolved as a server's is (progagent.mcp_servers.
resolve_command: `python` is this interpreter, names found on the sandbox's PATH), and every argument that is
an existing absolute host path (the evaluator's script, its data) is mounted read-only at the same path, as are
`ro_paths` (e.g. a benchmark checkout whose helpers the evaluator imports); those must be readable by the sandbox
user (uid 65534).

Sandbox: common.sandbox with `sandbox` (default SandboxConfig(): no network, 2 GiB, 256 processes, 1 core, uid
65534), /tmp a fresh tmpfs and HOME=/tmp, the project's packages not mounted. Without a sandbox
(SandboxConfig(enabled=False)) the command runs on the host with the host paths (debugging only).

Verdict (a dict; host-side only: the runtime server writes it to the verdict file, McpTaskEnv keeps it in
`last_verdict`; it never enters a tool result, a description or an observation):
  passed       exit status 0 (and not timed out);
  reward       1.0 if passed else 0.0;
  exit_code    the evaluator's exit status (None when it was killed at the time limit);
  timed_out    it ran past `timeout_s` (config `env.mcp.evaluator_timeout_s`; default 600 s) and was killed;
  seconds      wall time;
  output       the last `max_output_chars` characters of its stdout and stderr together (default 20,000);
  output_chars how many characters it wrote in all (the sandbox keeps at most SandboxConfig.log_max_bytes);
  command      the command as given.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from typing import Any, Sequence

from common import sandbox_fs
from common import sandbox_guard
from common.sandbox import Sandbox, SandboxConfig
from progagent import kernel_launch
from progagent import mcp_servers

GROUNDTRUTH_PLACEHOLDER = "{groundtruth}"
GROUNDTRUTH_INSIDE = "/groundtruth"


def _group_running(pgid: int) -> bool:
  """Whether a process of process group `pgid` still runs (zombies, which an init may take seconds to reap, do
  not count), read from /proc/<pid>/stat."""
  for name in os.listdir("/proc"):
    if not name.isdigit():
      continue
    try:
      with open(f"/proc/{name}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
      continue
    if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
      return True
  return False


def _wait_group(pgid: int, limit_s: float) -> None:
  """Waits (at most limit_s) until no process of the process group runs: the sandbox's log capper
  (common.sandbox_guard, a `head -c` beside the sandbox) may still be writing the evaluator's last output to
  the log file when the sandbox itself has exited."""
  deadline = time.monotonic() + limit_s
  while time.monotonic() < deadline and _group_running(pgid):
    time.sleep(0.01)


class Evaluator:
  """A sandboxed evaluator command (module docstring).

  Args:
    command: the command line (str, split with shlex) or its argv.
    sandbox: SandboxConfig of the evaluator's sandbox.
    timeout_s: seconds it may run (wall clock) before it is killed (a failed verdict, timed_out True).
    max_output_chars: characters of its output kept in the verdict (the end).
    ro_paths: further host paths mounted read-only at the same place.
    flag: the flag or config key the command came from, for messages.
  Raises:
    ValueError: an empty or unsplittable command, or a program that cannot be found (names `flag`).
  """

  def __init__(self, command: str | Sequence[str], *, sandbox: SandboxConfig = SandboxConfig(),
               timeout_s: float = 600.0, max_output_chars: int = 20_000, ro_paths: Sequence[str] = (),
               flag: str = "--evaluator"):
    if isinstance(command, str):
      try:
        argv = shlex.split(command)
      except ValueError as e:
        raise ValueError(f"{flag} {command!r}: the command cannot be split like a shell command ({e})") from None
      self.command = command
    else:
      argv = [str(a) for a in command]
      self.command = shlex.join(argv)
    if not argv:
      raise ValueError(f"{flag}: the evaluator command is empty")
    if timeout_s <= 0:
      raise ValueError(f"{flag}: timeout_s={timeout_s} must be > 0")
    self.flag = flag
    self.argv = tuple(argv)
    self.sandbox = sandbox
    self.timeout_s = float(timeout_s)
    self.max_output_chars = int(max_output_chars)
    self.ro_paths = tuple(os.path.abspath(p) for p in ro_paths)
    self.needs_groundtruth = any(GROUNDTRUTH_PLACEHOLDER in a for a in argv)
    # Resolve once now, so that a bad command fails before the episode (the workspace is a stand-in).
    self._resolve("/nonexistent-workspace", None)

  def _resolve(self, workspace: str, groundtruth: str | None) -> tuple[list[str], list[str]]:
    inside_gt = GROUNDTRUTH_INSIDE if self.sandbox.enabled else (groundtruth or "")
    argv = [a.replace(GROUNDTRUTH_PLACEHOLDER, inside_gt) for a in self.argv]
    spec = mcp_servers.McpServerSpec("evaluator", tuple(argv), f"{self.flag} {self.command}")
    try:
      return mcp_servers.resolve_command(spec, workspace=workspace, sandboxed=self.sandbox.enabled,
                                         what="evaluator")
    except mcp_servers.McpServerError as e:
      raise ValueError(str(e)) from None

  def run(self, workspace: "str | sandbox_fs.CappedDir", groundtruth: str | None = None) -> dict[str, Any]:
    """Runs the evaluator on `workspace` (and `groundtruth`); returns the verdict (module docstring).

    Args:
      workspace: the episode's workspace: its host folder, or the capped folder programs and servers share.
      groundtruth: host folder of the ground truth, or None.
    Raises:
      ValueError: the command names {groundtruth} and none is given (names `--groundtruth`), or the folder is
        missing.
      common.sandbox.SandboxError: the sandbox could not be made.
    """
    ws = workspace.path if isinstance(workspace, sandbox_fs.CappedDir) else os.path.abspath(workspace)
    if self.needs_groundtruth and groundtruth is None:
      raise ValueError(f"{self.flag} {self.command!r} names {GROUNDTRUTH_PLACEHOLDER} but no ground-truth folder "
                       "is given (--groundtruth DIR, or the task's groundtruth)")
    if groundtruth is not None and not os.path.isdir(groundtruth):
      raise ValueError(f"the ground-truth folder {groundtruth!r} does not exist")
    argv, ro = self._resolve(ws, groundtruth)
    log_path = sandbox_guard.owned_tempfile("eval", suffix=".log")
    sb = gt_cap = gt_dir = None
    t0 = time.monotonic()
    timed_out = False
    try:
      if self.sandbox.enabled:
        binds = [(ws, mcp_servers.WORKSPACE_INSIDE, True)]
        if groundtruth is not None:
          c = self.sandbox
          gt_dir = sandbox_guard.owned_tempdir("gt")
          gt_cap = sandbox_fs.CappedDir(gt_dir, "gt", max_bytes=c.workspace_max_bytes,
                                        max_files=c.workspace_max_files, uid=c.uid, gid=c.gid, mode=0o755,
                                        limits=("SandboxConfig.workspace_max_bytes",
                                                "SandboxConfig.workspace_max_files"))
          gt_cap.restage(os.path.abspath(groundtruth))
          binds.append((gt_cap.path, GROUNDTRUTH_INSIDE, True))
        keep = tuple(ro) + self.ro_paths
        binds += [(p, p, True) for p in keep if os.path.exists(p)]
        cfg = self.sandbox._replace(env=tuple(self.sandbox.env) + (("HOME", "/tmp"),))
        sb = Sandbox(cfg, binds=binds)
        cmd = kernel_launch.strip_project_mounts(sb.command(argv), keep=keep)
        env = {"PATH": mcp_servers.SANDBOX_PATH}
        cwd = None
      else:
        cmd, env, cwd = argv, dict(os.environ), ws
      with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env, cwd=cwd)
      try:
        code = proc.wait(timeout=self.timeout_s)
      except subprocess.TimeoutExpired:
        timed_out = True
        if sb is not None:
          sb.kill()
        try:
          os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
          pass
        proc.wait(timeout=30)
        code = None
      _wait_group(proc.pid, 5.0)
    finally:
      if sb is not None:
        sb.close()
      if gt_cap is not None:
        gt_cap.close()
      if gt_dir is not None:
        shutil.rmtree(gt_dir, ignore_errors=True)
    seconds = time.monotonic() - t0
    with open(log_path, "rb") as f:
      data = f.read().decode("utf-8", "replace")
    os.unlink(log_path)
    passed = code == 0 and not timed_out
    return {"passed": passed, "reward": 1.0 if passed else 0.0, "exit_code": code, "timed_out": timed_out,
            "seconds": round(seconds, 3), "output": data[-self.max_output_chars:] if self.max_output_chars else "",
            "output_chars": len(data), "command": self.command}


