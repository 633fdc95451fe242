"""The command line shared by the benchmark modules: `--quick`, `--json FILE`, then `run(quick)`."""

import argparse
import json
import logging
from typing import Any, Callable


def main(run: Callable[..., Any], description: str) -> Any:
  """Parses `--quick` and `--json`, calls `run(quick=...)` (which prints its own table), saves the JSON."""
  p = argparse.ArgumentParser(description=description.splitlines()[0])
  p.add_argument("--quick", action="store_true", help="small sizes, seconds")
  p.add_argument("--json", default=None, help="also write the results to this JSON file")
  a = p.parse_args()
  logging.basicConfig(level=logging.WARNING)
  res = run(quick=a.quick)
  if a.json:
    with open(a.json, "w") as f:
      json.dump(res, f, indent=1, default=str)
  return res
