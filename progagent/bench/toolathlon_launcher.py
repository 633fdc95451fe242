"""Runs one of a Toolathlon checkout's task scripts (its `preprocess/main.py` or `evaluation/main.py`) as Toolathlon
runs it, inside a ProgAgent sandbox, with the benchmark's own interpreter.

  <bench python> toolathlon_launcher.py --checkout ROOT --module tasks.finalpool.NAME.evaluation.main \
      [--writable-copy FLAG] -- SCRIPT ARGS...

Toolathlon runs `uv run -m tasks.finalpool.<name>.<stage>.main ARGS` from its checkout's root (its
utils/data_structures/task_config.py), so its scripts import `utils.general.helper` and their own modules
(`from .check_local import ...`) from there. This launcher does the same, and nothing else:
  * the checkout's root is the working folder and the first entry of sys.path; the module runs as __main__
    (runpy.run_module, as `python -m` does);
  * `configs.global_configs`: Toolathlon's install script copies configs/global_configs_example.py to
    configs/global_configs.py; a checkout without that copy gets the example's module under that name
    (utils.general.helper imports it; no evaluator of the local tasks reads a key of it);
  * `--res_log_file`: Toolathlon hands its evaluators the agent's trajectory log, which several of them read
    (and none of the local tasks' checks use); when the arguments name none, a minimal log
    {"status": "success", "messages": []} is written to a temporary file and named;
  * `--writable-copy NAME` (repeatable): the folder after `--NAME` in the script's arguments is copied into a
    private temporary folder and the copy is named instead: some evaluators write into their ground-truth folder
    (privacy-desensitization and paper-checker extract an archive there), which the sandbox mounts read-only.
The script's exit status is the launcher's (SystemExit passes through; an uncaught exception exits 1 with its
traceback, as `python -m` does).

Standard library only: it runs in the benchmark's interpreter (setup.sh: .venv/toolathlon/eval), where the
project's packages are neither installed nor mounted. Used by progagent.bench.toolathlon.
"""

import argparse
import importlib.util
import json
import os
import runpy
import shutil
import sys
import tempfile


def main(argv):
  p = argparse.ArgumentParser(prog="toolathlon_launcher.py")
  p.add_argument("--checkout", required=True, help="the Toolathlon checkout's root")
  p.add_argument("--module", required=True, help="e.g. tasks.finalpool.privacy-desensitization.evaluation.main")
  p.add_argument("--writable-copy", action="append", default=[],
                 help="NAME: the folder after --NAME in the script's arguments is copied first")
  p.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the script's own arguments")
  a = p.parse_args(argv)
  rest = list(a.rest)
  if rest[:1] == ["--"]:
    rest = rest[1:]
  root = os.path.abspath(a.checkout)
  scratch = tempfile.mkdtemp(prefix="toolathlon-")
  for name in a.writable_copy:
    flag = "--" + name
    if flag in rest and rest.index(flag) + 1 < len(rest):
      i = rest.index(flag) + 1
      copy = os.path.join(scratch, name)
      shutil.copytree(rest[i], copy)
      rest[i] = copy
  if a.module.endswith(".evaluation.main") and "--res_log_file" not in rest:
    log = os.path.join(scratch, "traj_log.json")
    with open(log, "w", encoding="utf-8") as f:
      json.dump({"status": "success", "messages": []}, f)
    rest += ["--res_log_file", log]
  os.chdir(root)
  sys.path.insert(0, root)
  if not os.path.exists(os.path.join(root, "configs", "global_configs.py")):
    example = os.path.join(root, "configs", "global_configs_example.py")
    if os.path.exists(example):
      spec = importlib.util.spec_from_file_location("configs.global_configs", example)
      mod = importlib.util.module_from_spec(spec)
      sys.modules["configs.global_configs"] = mod
      spec.loader.exec_module(mod)
  sys.argv = [a.module] + rest
  runpy.run_module(a.module, run_name="__main__", alter_sys=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
