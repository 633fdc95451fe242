"""PEP 562 lazy re-exports for a package's `__init__`: `import pkg` loads nothing, `pkg.name` imports the
module that defines `name` on first use (common/, phgpo/ and planpo/ re-export their maths this way, so
environment processes never load JAX through a package's `__init__` and no import cycle forms through it)."""

from __future__ import annotations

import importlib
from typing import Callable


def lazy_exports(package: str, exports: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
  """The module-level `__getattr__` and `__dir__` of `package` for `exports` (name -> defining module).

  Args:
    package: the package's name, used in the AttributeError message.
    exports: exported name -> the module that defines it.
    namespace: the package's globals(); a resolved name is stored there, so later lookups skip __getattr__.
  Returns:
    (__getattr__, __dir__).
  """
  def __getattr__(name):  # pylint: disable=invalid-name
    module = exports.get(name)
    if module is None:
      raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value

  def __dir__():  # pylint: disable=invalid-name
    return sorted(set(namespace) | set(exports))

  return __getattr__, __dir__
