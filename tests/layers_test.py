"""The package layers: import-linter contracts of setup.cfg, plus the dynamic imports import-linter cannot see.

Layers (setup.cfg, [importlinter]): experiments | benchmarks > configs > phgpo | planpo | progagent > common.
`common/` never imports a method folder (not even lazily, inside a function, or by a module-name string) and
the method folders never import each other.
"""

import ast
import configparser
import os
import pathlib
import re
import subprocess
import sys

from absl.testing import absltest

REPO = pathlib.Path(__file__).resolve().parents[1]
LINT_IMPORTS = pathlib.Path(sys.executable).parent / "lint-imports"
ABOVE_COMMON = ("phgpo", "planpo", "progagent", "configs", "experiments", "benchmarks")
# Calls that import a module named by a string.
_IMPORT_CALLS = {"import_module", "__import__", "find_spec", "run_module", "find_module", "load_module"}
# A 'package.module:attr' factory string (as common/env_server.py resolves).
_FACTORY = re.compile(r"^(%s)(\.[A-Za-z_][\w.]*)?:[A-Za-z_]\w*$" % "|".join(ABOVE_COMMON))


def _lint_imports(cwd, config=None, env=None):
  if not LINT_IMPORTS.exists():
    raise AssertionError(f"{LINT_IMPORTS} not found: install the test extras (pip install -e '.[test]')")
  cmd = [str(LINT_IMPORTS), "--no-cache"] + ([f"--config={config}"] if config else [])
  return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _common_layer_modules() -> list[str]:
  """The modules named by setup.cfg's layers contract inside common/ ([importlinter:contract:common-layers])."""
  cfg = configparser.ConfigParser()
  cfg.read(REPO / "setup.cfg")
  layers = cfg.get("importlinter:contract:common-layers", "layers", fallback="")
  return [m.strip("() ") for line in layers.splitlines() for m in re.split(r"[|:]", line) if m.strip("() ")]


def _call_name(func: ast.expr) -> str:
  if isinstance(func, ast.Attribute):
    return func.attr
  if isinstance(func, ast.Name):
    return func.id
  return ""


def _docstring_nodes(tree: ast.AST) -> set[int]:
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      body = node.body
      if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        out.add(id(body[0].value))
  return out


def dynamic_imports_of_upper_layers(folder: pathlib.Path, base: pathlib.Path = REPO) -> list[str]:
  """'file:line: what' for every string-named import of a package above common/ in `folder`'s sources.

  Finds importlib.import_module("phgpo..."), __import__("progagent..."), importlib.util.find_spec(...),
  runpy.run_module(...) with such a literal first argument, and 'phgpo.x:make' factory strings anywhere
  outside docstrings.
  """
  found = []
  for path in sorted(folder.rglob("*.py")):
    rel = path.relative_to(base)
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = _docstring_nodes(tree)
    for node in sorted((n for n in ast.walk(tree) if hasattr(n, "lineno")), key=lambda n: n.lineno):
      if isinstance(node, ast.Call) and _call_name(node.func) in _IMPORT_CALLS and node.args:
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
          root = arg.value.split(".")[0].split(":")[0]
          if root in ABOVE_COMMON:
            found.append(f"{rel}:{node.lineno}: {_call_name(node.func)}({arg.value!r})")
      elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and _FACTORY.match(node.value)):
        found.append(f"{rel}:{node.lineno}: factory string {node.value!r}")
  return found


class LayersTest(absltest.TestCase):

  def test_import_contracts_kept(self):
    out = _lint_imports(REPO)
    self.assertEqual(out.returncode, 0,
                     f"an import breaks the layers of setup.cfg [importlinter]:\n{out.stdout}\n{out.stderr}")
    self.assertIn("0 broken", out.stdout)

  def test_contracts_catch_a_method_import_in_common(self):
    # The contracts are live: a toy tree with the same package names and one forbidden import fails them.
    root = pathlib.Path(self.create_tempdir().full_path)
    for pkg in ABOVE_COMMON + ("common",):
      (root / pkg).mkdir()
      (root / pkg / "__init__.py").write_text("")
    for module in _common_layer_modules():   # the layers inside common/ name modules that must exist
      path = root.joinpath(*module.split("."))
      path.mkdir(parents=True, exist_ok=True)
      (path / "__init__.py").write_text("")
    (root / "common" / "core.py").write_text("def f():\n  from phgpo import train\n  return train\n")
    (root / "phgpo" / "train.py").write_text("import common.core\n")
    (root / "progagent" / "train.py").write_text("from phgpo import train\n")
    env = dict(os.environ, PYTHONPATH=str(root))
    out = _lint_imports(root, config=REPO / "setup.cfg", env=env)
    self.assertNotEqual(out.returncode, 0, out.stdout + out.stderr)
    self.assertIn("common.core -> phgpo.train", out.stdout)
    self.assertIn("progagent.train -> phgpo.train", out.stdout)

  def test_common_names_no_upper_module_in_a_string(self):
    found = dynamic_imports_of_upper_layers(REPO / "common")
    self.assertEmpty(found, "common/ imports a method folder by name (the layers forbid it even lazily):\n  "
                     + "\n  ".join(found))

  def test_string_check_sees_importlib(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    src = ('"""Docstring naming phgpo.replay_env:make_replay_env is fine."""\nimport importlib\n'
           'def f():\n  return importlib.import_module("progagent.runtime")\n'
           'SPEC = "phgpo.replay_env:make_replay_env"\n')
    (tmp / "x.py").write_text(src)
    found = dynamic_imports_of_upper_layers(tmp, base=tmp)
    self.assertLen(found, 2, found)
    self.assertIn("import_module('progagent.runtime')", found[0])
    self.assertIn("factory string 'phgpo.replay_env:make_replay_env'", found[1])


if __name__ == "__main__":
  absltest.main()
