"""Test-session setup: 8 fake CPU devices for the sharding tests, set before JAX starts."""
import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
  os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# absltest helpers (create_tempdir, ...) read absl flags; pytest never parses them.
from absl import flags as _absl_flags  # noqa: E402

if not _absl_flags.FLAGS.is_parsed():
  _absl_flags.FLAGS.mark_as_parsed()
