"""The public faces of common/, phgpo/ and planpo/: every re-exported name exists and is its module's object."""

import importlib
import pathlib
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized

PACKAGES = ("common", "phgpo", "planpo")
REPO = pathlib.Path(__file__).resolve().parents[1]


class PublicApiTest(parameterized.TestCase):

  @parameterized.parameters(*PACKAGES)
  def test_each_name_is_the_object_of_its_module(self, package):
    pkg = importlib.import_module(package)
    self.assertNotEmpty(pkg.__all__)
    self.assertEqual(sorted(pkg.__all__), sorted(pkg._EXPORTS))
    for name, module in pkg._EXPORTS.items():
      self.assertTrue(module.startswith(package + "."), (name, module))
      self.assertIs(getattr(pkg, name), getattr(importlib.import_module(module), name), f"{package}.{name}")
      self.assertIn(name, dir(pkg))

  @parameterized.parameters(*PACKAGES)
  def test_unknown_name_is_an_attribute_error(self, package):
    with self.assertRaisesRegex(AttributeError, "no attribute 'nope'"):
      getattr(importlib.import_module(package), "nope")

  def test_importing_the_packages_loads_nothing(self):
    # Lazy: environment processes import `common` (python -m common.env_server) and must not load JAX for it;
    # only the small lazy-export helper itself is imported.
    code = ("import sys, common, phgpo, planpo; "
            "print(sorted(m for m in sys.modules if m.startswith(('jax', 'common.', 'phgpo.', 'planpo.'))"
            " and m != 'common.lazy_exports'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True, cwd=REPO)
    self.assertEqual(out.stdout.strip(), "[]", out.stderr)


if __name__ == "__main__":
  absltest.main()
