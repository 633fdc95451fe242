"""Start-up waits that scale with the machine instead of fixed short timeouts.

A sandboxed environment process or a kernel starts in about a second on an idle machine, but several times
slower when the CPUs are shared (the test suite beside other work on 2 cores). A start-up timeout is
therefore given as the seconds allowed on an idle machine and stretched by `scale()`:

  scale = max(1, load / cpus) * $AGENTIC_RL_TIMEOUT_SCALE

load: the 1-minute load average (runnable processes, os.getloadavg); cpus: the CPUs this process may run on
(os.sched_getaffinity). AGENTIC_RL_TIMEOUT_SCALE (a positive float, default 1) stretches every start-up wait
further, e.g. on a slow CI runner. Used for waits that end in an error when exceeded (process start and MCP
handshake in common.env_client, worker replacement in common.env_pool); per-step timeouts that guard a
running episode are not scaled.
"""

from __future__ import annotations

import os

ENV_VAR = "AGENTIC_RL_TIMEOUT_SCALE"
MAX_LOAD_SCALE = 8.0  # a load spike stretches a wait at most this much (the env var can go further)


def _cpus() -> int:
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except (AttributeError, OSError):
    return max(1, os.cpu_count() or 1)


def scale() -> float:
  """The factor (>= 1 unless $AGENTIC_RL_TIMEOUT_SCALE < 1) by which start-up waits are stretched now.

  Raises:
    ValueError: $AGENTIC_RL_TIMEOUT_SCALE is set but not a positive number.
  """
  try:
    load = os.getloadavg()[0]
  except (AttributeError, OSError):
    load = 0.0
  factor = min(MAX_LOAD_SCALE, max(1.0, load / _cpus()))
  raw = os.environ.get(ENV_VAR, "").strip()
  if raw:
    try:
      user = float(raw)
    except ValueError:
      user = -1.0
    if not user > 0:
      raise ValueError(f"${ENV_VAR}={raw!r}: give a positive number (the factor on start-up timeouts)")
    factor *= user
  return factor


def scaled(seconds: float) -> float:
  """`seconds` (the wait allowed on an idle machine) times `scale()`."""
  return float(seconds) * scale()
