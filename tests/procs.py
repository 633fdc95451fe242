"""Process helpers shared by the tests that look for processes a run left behind."""
import psutil


def cmdline(proc: psutil.Process) -> str:
  """`proc`'s command line joined by spaces, or "" once it has exited or is a zombie not yet reaped.

  `psutil.Process.children` lists a child that has exited but not been reaped; its `cmdline()` raises
  `psutil.ZombieProcess`, which made process checks fail at random under load.
  """
  try:
    return " ".join(proc.cmdline())
  except psutil.Error:
    return ""
