"""LOCA-bench's own code, run in LOCA's interpreter (not the project's): server commands, state, verdicts.

Run by progagent.bench.loca with the LOCA virtual environment's python (setup.sh: .venv/loca, `mcp` 1.x), never
imported by the project: it imports only the standard library, PyYAML and, for `generate` and `evaluate`, the
checkout's own packages (gem, mcp_convert), so it runs wherever LOCA runs. Every mode prints one JSON object on
its last stdout line.

  python loca_runner.py servers  --loca-dir D --entry ENTRY.json --task-workspace T --agent-workspace A
  python loca_runner.py generate --loca-dir D --entry ENTRY.json --task-dir T
  python loca_runner.py evaluate --loca-dir D --entry ENTRY.json --task-dir T
  python loca_runner.py evaluate --loca-dir D --entry ENTRY.json --assemble PRISTINE --workspace W --state S \
      [--staged local_db ...]

ENTRY.json is one element of a task set's `configurations` list (task-configs/final_<size>_set_config.json:
{name, env_class, env_params, mcp_servers}).

servers: the stdio command of each enabled server of the entry, built as LOCA's
  gem/tools/mcp_server/config_loader.py (ServerConfigLoader.build_stdio_config, hkust-nlp/LOCA-bench@8cd474d)
  builds it from gem/tools/mcp_server/config/<type>.yaml: command_type python / uv / uvx / npx / node / direct,
  parameters with cli_arg (positional when ''), env_var, default, required, aliases, and the terminal server's
  extra variables; `{task_workspace}` and `{agent_workspace}` in the entry's params become T and A. Prints
  {"servers": [{name, type, command, args, env}]}. The working folder (`workspace.cwd_param`) is not made.
generate: instantiates the entry's env class with task_dir=T and its env_params (its constructor runs reset():
  the generator writes T/agent_workspace, T/local_db, T/groundtruth_workspace, ...) and prints
  {"instruction", "errors"}: `errors` are the ERROR lines of T/logs/env.log (LOCA's envs log a failed
  preprocessing there and return the instruction anyway: an empty state that only looks generated).
evaluate: the entry's env class on the state in T, without generating again (its constructor runs with reset()
  a no-op on a scratch folder, then every attribute that names a path in the scratch folder is moved to T),
  then its step('claim_done'): the benchmark's own verdict, as LOCA's claim_done tool triggers it. Prints
  {"reward", "info", "observation"}; exit status 0 when the reward is 1.0, 1 when it is not.
  With --assemble, T is made (a temporary folder unless --task-dir is given) from the task folder as generated
  (PRISTINE, read-only to it), the episode's workspace W as T/agent_workspace and, for each --staged NAME, the
  services' state S/NAME as T/NAME (what the mock servers changed); the evaluators may write in T.
Exit status 2: bad arguments, or the env class cannot be imported.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import pathlib
import shutil
import sys
import tempfile
import traceback

# config_loader.py's terminal-specific variables (ServerConfigLoader._add_terminal_env_vars)
_TERMINAL_ENV = {
    "allowed_commands": "ALLOWED_COMMANDS", "allowed_flags": "ALLOWED_FLAGS",
    "max_command_length": "MAX_COMMAND_LENGTH", "command_timeout": "COMMAND_TIMEOUT",
    "allow_shell_operators": "ALLOW_SHELL_OPERATORS", "max_output_length": "MAX_OUTPUT_LENGTH",
    "max_stdout_length": "MAX_STDOUT_LENGTH", "max_stderr_length": "MAX_STDERR_LENGTH",
    "cli_proxy_enabled": "CLI_PROXY_ENABLED", "cli_proxy_url": "CLI_PROXY_URL",
}


def _emit(obj: dict, code: int = 0) -> None:
  sys.stdout.write("\n" + json.dumps(obj, default=str) + "\n")
  sys.stdout.flush()
  sys.exit(code)


def _placeholders(value, params: dict):
  if not isinstance(value, str):
    return value
  for key in ("task_workspace", "agent_workspace"):
    value = value.replace("{" + key + "}", str(params.get(key, "")))
  return value


def _param_value(name: str, spec: dict, params: dict):
  value = params.get(name)
  if value is None:
    for alias in spec.get("aliases") or ():
      if alias in params:
        value = params[alias]
        break
  return value


def server_commands(loca_dir: str, entry: dict, task_workspace: str, agent_workspace: str) -> list[dict]:
  """The enabled servers of `entry` as {name, type, command, args, env} (module docstring, `servers`)."""
  import yaml  # LOCA's own dependency (pyproject: pyyaml)
  out = []
  config_dir = pathlib.Path(loca_dir, "gem", "tools", "mcp_server", "config")
  for name, server in (entry.get("mcp_servers") or {}).items():
    if not server.get("enabled", True):
      continue
    stype = server.get("type")
    params = {k: _placeholders(v.replace("{task_workspace}", task_workspace).replace(
        "{agent_workspace}", agent_workspace) if isinstance(v, str) else v, {})
              for k, v in (server.get("params") or {}).items()}
    params["task_workspace"], params["agent_workspace"] = task_workspace, agent_workspace
    path = config_dir / f"{stype}.yaml"
    if not path.is_file():
      raise FileNotFoundError(f"server {name!r}: no config {path} for its type {stype!r}")
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    execution = config["execution"]
    kind = execution.get("command_type")
    args: list[str] = []
    env: dict[str, str] = {}
    for pname, spec in (config.get("parameters") or {}).items():
      spec = spec or {}
      if "alias_for" in spec:
        continue
      value = _param_value(pname, spec, params)
      if value is None:
        if spec.get("required") and spec.get("cli_arg") is not None:
          raise ValueError(f"server {name!r}: required parameter {pname!r} not given")
        value = spec.get("default")
      if value is None:
        continue
      value = _placeholders(value, params)
      if spec.get("cli_arg") is not None:
        args += [str(value)] if spec["cli_arg"] == "" else [spec["cli_arg"], str(value)]
      if spec.get("env_var"):
        env[spec["env_var"]] = str(value)
    if config.get("name") == "terminal":
      for pname, var in _TERMINAL_ENV.items():
        if pname in params:
          value = params[pname]
          env[var] = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    if kind in ("python", "uv"):
      script = pathlib.Path(loca_dir, execution["script"]["primary"])
      command, argv = kind, [str(script)] + args
    elif kind in ("uvx", "npx"):
      command, argv = kind, [execution["package_name"]] + args
    elif kind == "node":
      script = pathlib.Path(loca_dir, execution["script"]["primary"])
      fallback = execution.get("fallback_command") or {}
      if script.exists() or not fallback.get("package_name"):
        command, argv = "node", [str(script)] + args
      else:
        command, argv = "npx", [fallback["package_name"]] + args
    elif kind == "direct":
      command, argv = execution["executable_name"], list(execution.get("additional_args") or []) + args
    else:
      raise ValueError(f"server {name!r}: unknown command_type {kind!r} in {path}")
    out.append({"name": name, "type": stype, "command": command, "args": argv, "env": env})
  return out


def _env_class(loca_dir: str, entry: dict):
  if loca_dir not in sys.path:
    sys.path.insert(0, loca_dir)
  module, cls = entry["env_class"].rsplit(".", 1)
  return getattr(importlib.import_module(module), cls)


def _log_errors(task_dir: str) -> list[str]:
  path = os.path.join(task_dir, "logs", "env.log")
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8", errors="replace") as f:
    return [line.rstrip() for line in f if " - ERROR - " in line][:50]


def generate(loca_dir: str, entry: dict, task_dir: str) -> dict:
  """The entry's state in task_dir (module docstring, `generate`)."""
  cls = _env_class(loca_dir, entry)
  params = dict(entry.get("env_params") or {})
  params["task_dir"] = task_dir
  log = io.StringIO()
  with contextlib.redirect_stdout(log):
    env = cls(**params)
    instruction = env._get_instructions() if hasattr(env, "_get_instructions") else env.reset()[0]
  sys.stderr.write(log.getvalue()[-20_000:])
  return {"instruction": instruction, "errors": _log_errors(task_dir)}


def _moved(value, scratch: str, task_dir: str):
  if isinstance(value, pathlib.PurePath) and str(value).startswith(scratch):
    return type(value)(task_dir + str(value)[len(scratch):])
  if isinstance(value, str) and value.startswith(scratch):
    return task_dir + value[len(scratch):]
  return value


def evaluate(loca_dir: str, entry: dict, task_dir: str) -> dict:
  """The benchmark's verdict on the state in task_dir (module docstring, `evaluate`)."""
  cls = _env_class(loca_dir, entry)
  # generating imports the env folder's modules with it on sys.path (e.g. canvas_arrange_exam_s2l's
  # main_simplified.py), and some evaluators rely on that (its check_local.py: `from helper import ...`)
  env_dir = os.path.dirname(os.path.abspath(sys.modules[cls.__module__].__file__))
  if env_dir not in sys.path:
    sys.path.append(env_dir)
  params = dict(entry.get("env_params") or {})
  scratch = tempfile.mkdtemp(prefix="loca-init-")
  params["task_dir"] = scratch
  log = io.StringIO()
  reset = cls.reset
  cls.reset = lambda self, *a, **k: ("", {})  # the constructor must not generate (and wipe) the state again
  try:
    with contextlib.redirect_stdout(log):
      env = cls(**params)
  finally:
    cls.reset = reset
  for key, value in list(vars(env).items()):
    setattr(env, key, _moved(value, scratch, task_dir))
  with contextlib.redirect_stdout(log):
    observation, reward, _, _, info = env.step("claim_done")
  shutil.rmtree(scratch, ignore_errors=True)
  sys.stderr.write(log.getvalue()[-20_000:])
  return {"reward": float(reward), "info": info, "observation": str(observation)[-4000:]}


def assemble(pristine: str, workspace: str, state: str | None, staged: list[str], task_dir: str | None) -> str:
  """The task folder to evaluate (module docstring, `evaluate --assemble`); returns its path."""
  task_dir = task_dir or tempfile.mkdtemp(prefix="loca-task-")
  os.makedirs(task_dir, exist_ok=True)
  skip = {"agent_workspace", *staged}
  for name in os.listdir(pristine):
    if name in skip:
      continue
    src, dst = os.path.join(pristine, name), os.path.join(task_dir, name)
    if os.path.isdir(src) and not os.path.islink(src):
      shutil.copytree(src, dst, symlinks=True)
    else:
      shutil.copy2(src, dst, follow_symlinks=False)
  shutil.copytree(workspace, os.path.join(task_dir, "agent_workspace"), symlinks=True)
  for name in staged:
    src = os.path.join(state, name) if state else None
    if src and os.path.isdir(src):
      shutil.copytree(src, os.path.join(task_dir, name), symlinks=True)
    else:
      os.makedirs(os.path.join(task_dir, name), exist_ok=True)
  return task_dir


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("mode", choices=("servers", "generate", "evaluate"))
  p.add_argument("--loca-dir", required=True)
  p.add_argument("--entry", required=True, help="a JSON file holding one task config entry")
  p.add_argument("--task-dir")
  p.add_argument("--task-workspace")
  p.add_argument("--agent-workspace")
  p.add_argument("--assemble", help="evaluate: the task folder as generated")
  p.add_argument("--workspace", help="evaluate --assemble: the episode's workspace")
  p.add_argument("--state", help="evaluate --assemble: the services' state folder")
  p.add_argument("--staged", action="append", default=[], help="evaluate --assemble: a folder of --state")
  a = p.parse_args(argv)
  loca_dir = os.path.abspath(a.loca_dir)
  with open(a.entry, encoding="utf-8") as f:
    entry = json.load(f)
  os.environ.setdefault("LOCA_QUIET", "1")
  os.environ["PYTHONPATH"] = loca_dir + os.pathsep + os.environ.get("PYTHONPATH", "")  # the envs' subprocesses
  if a.mode == "servers":
    _emit({"servers": server_commands(loca_dir, entry, a.task_workspace, a.agent_workspace)})
  try:
    _env_class(loca_dir, entry)
  except Exception as e:  # noqa: BLE001 - reported to the host, which names the checkout
    _emit({"error": f"cannot import {entry.get('env_class')!r}: {type(e).__name__}: {e}",
           "traceback": traceback.format_exc()[-4000:]}, 2)
  if a.mode == "generate":
    os.chdir(loca_dir)
    _emit(generate(loca_dir, entry, os.path.abspath(a.task_dir)))
  task_dir = a.task_dir
  if a.assemble:
    task_dir = assemble(a.assemble, a.workspace, a.state, a.staged, task_dir)
  try:
    os.chdir(loca_dir)
    result = evaluate(loca_dir, entry, os.path.abspath(task_dir))
  except Exception as e:  # noqa: BLE001 - an evaluator that crashes is a failed verdict
    _emit({"reward": 0.0, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}, 1)
  _emit(result, 0 if result["reward"] >= 1.0 else 1)


if __name__ == "__main__":
  main()
