"""Tests for common/sandbox.py: what an environment process can and cannot do, through the driver.

The probe environment (common/envs/probe_env.py) runs in a sandboxed worker and tries the network,
writes and reads outside its workspace, a fork bomb and a 3 GiB allocation; every attempt must fail
(or be killed) while the driver records the episode and carries on.
"""

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from unittest import mock

import psutil
from absl.testing import absltest

import procs
from common import sandbox as sb
from common import sandbox_cgroup
from common import sandbox_fs
from common.env_client import EnvClient, EnvSpec
from common.env_pool import WorkerPool
from common.rollout import RolloutConfig, RolloutDriver, ScriptedPolicy
from common.trajectory import ByteTokenizer

PROBE = EnvSpec("common.envs.probe_env:ProbeEnv", {"max_steps": 30}, start_timeout_s=60)
HAVE_BWRAP = shutil.which("bwrap") is not None
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1024 ** 2

# Paths that must not be writable / readable from inside.
WRITE_TARGETS = ["/x", "/etc/x", "/usr/x", os.path.join(ROOT, "x"), os.path.join(ROOT, "common", "x"),
                 sys.prefix + "/x", "/root/x"]
READ_TARGETS = ["/etc/shadow", "/etc/passwd", os.path.join(ROOT, "setup.sh"),
                os.path.join(os.path.dirname(ROOT), "shared", "SPEC.md"), "/root/.bashrc"]
MARKER = "AGENTRL_HOST_ONLY_MARKER"


def _call(name, **arguments):
  return json.dumps({"name": name, "arguments": arguments})


def _descendants():
  return [p for p in psutil.Process().children(recursive=True) if procs.alive(p)]


class FakeCgroupDetectionTest(absltest.TestCase):
  """detect_cgroup on fake hierarchies: v2 first, then v1, then rlimit; the reasons are kept."""

  def setUp(self):
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root)

  def _mk(self, rel, files):
    d = os.path.join(self.root, rel)
    os.makedirs(d, exist_ok=True)
    for k, v in files.items():
      with open(os.path.join(d, k), "w") as f:
        f.write(v)
    return d

  def test_v2_with_controllers_is_chosen(self):
    self._mk("v2/me", {"cgroup.controllers": "cpu memory pids", "cgroup.subtree_control": ""})
    roots = sandbox_cgroup.CgroupRoots(os.path.join(self.root, "v2"), None, None, self_v2_path="/me")
    det = sandbox_cgroup.detect_cgroup("auto", roots)
    self.assertEqual(det.mode, "v2")
    self.assertTrue(det.cpu)
    with open(os.path.join(self.root, "v2/me/cgroup.subtree_control")) as f:
      self.assertEqual(f.read(), "+memory +pids +cpu")
    cg = sandbox_cgroup.Cgroup.create(sb.SandboxConfig(cpu_max_cores=0.5), detection=det)
    with open(os.path.join(cg.dirs[0], "cpu.max")) as f:
      self.assertEqual(f.read(), "50000 100000")

  def test_v2_without_memory_falls_back_to_v1(self):
    self._mk("v2", {"cgroup.controllers": "hugetlb", "cgroup.subtree_control": ""})
    mem = self._mk("mem/job", {"memory.limit_in_bytes": ""})
    pids = self._mk("pids", {"cgroup.procs": ""})
    roots = sandbox_cgroup.CgroupRoots(os.path.join(self.root, "v2"), os.path.join(self.root, "mem"),
                           os.path.join(self.root, "pids"), self_v1_memory_path="/job")
    det = sandbox_cgroup.detect_cgroup("auto", roots)
    self.assertEqual(det.mode, "v1")
    self.assertEqual(det.parents, (mem, pids))
    self.assertIn("memory,pids not in", det.why_not[0])
    # Per-sandbox cgroups get the limits written.
    cg = sandbox_cgroup.Cgroup.create(sb.SandboxConfig(memory_max_bytes=123456, pids_max=7), detection=det)
    with open(os.path.join(cg.dirs[0], "memory.limit_in_bytes")) as f:
      self.assertEqual(f.read(), "123456")
    with open(os.path.join(cg.dirs[1], "pids.max")) as f:
      self.assertEqual(f.read(), "7")
    self.assertIn("cgroup v1", cg.description)

  def test_nothing_usable_gives_rlimit(self):
    det = sandbox_cgroup.detect_cgroup("auto", sandbox_cgroup.CgroupRoots(None, None, None))
    self.assertEqual(det.mode, "rlimit")
    self.assertLen(det.why_not, 2)
    with self.assertRaisesRegex(sandbox_cgroup.SandboxError, "v2"):
      sandbox_cgroup.detect_cgroup("v2", sandbox_cgroup.CgroupRoots(None, None, None))
    with self.assertRaisesRegex(sandbox_cgroup.SandboxError, "use 'auto'"):
      sandbox_cgroup.detect_cgroup("bogus")


@absltest.skipUnless(os.geteuid() == 0, "mounting a tmpfs needs root")
class CappedDirTest(absltest.TestCase):
  """common.sandbox_fs.CappedDir: a folder is a tmpfs of fixed size while mounted, and gets its content back
  with its owners and modes (issue 27, items 3 and 7)."""

  def setUp(self):
    super().setUp()
    self.d = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.d, ignore_errors=True)

  def cap(self, **kw):
    c = sandbox_fs.CappedDir(self.d, "test", max_bytes=kw.pop("max_bytes", 1 << 20),
                             max_files=kw.pop("max_files", 100), uid=65534, gid=65534, keep=True, **kw)
    self.addCleanup(c.close, copy_back=False)
    return c

  def test_round_trip_keeps_owners_modes_and_untouched_files(self):
    p = pathlib.Path(self.d)
    (p / "keep.txt").write_text("same")
    (p / "edit.txt").write_text("old")
    (p / "sub").mkdir(mode=0o700)
    (p / "sub" / "gone.txt").write_text("x")
    os.symlink("/etc/hostname", p / "link")
    os.mkfifo(p / "fifo")
    for f in ("keep.txt", "edit.txt", "sub", "sub/gone.txt", "link"):
      os.chown(p / f, 1234, 1234, follow_symlinks=False)
    os.chmod(p / "edit.txt", 0o640)
    ino = os.stat(p / "keep.txt").st_ino
    c = self.cap()
    self.assertNotEqual(os.stat(self.d).st_dev, os.stat(os.path.dirname(self.d)).st_dev)
    self.assertEqual(sorted(os.listdir(self.d)), ["edit.txt", "keep.txt", "link", "sub"])  # no FIFO copied in
    self.assertEqual(os.stat(p / "edit.txt").st_uid, 65534)
    (p / "edit.txt").write_text("new")
    os.chmod(p / "edit.txt", 0o4777)
    os.unlink(p / "sub" / "gone.txt")
    deep = p.joinpath(*["n"] * (sandbox_fs.MAX_COPY_DEPTH + 5))
    deep.mkdir(parents=True)
    (p / "new.txt").write_text("made")
    with open(p / f".agentrl-copy-{os.getpid()}-0", "w") as f:  # a name the copy-back uses for itself
      f.write("planted")
    c.close()
    self.assertEqual(os.stat(p / "keep.txt").st_ino, ino)  # not rewritten
    self.assertEqual((p / "edit.txt").read_text(), "new")
    st = os.stat(p / "edit.txt")
    self.assertEqual((st.st_uid, st.st_mode & 0o7777), (1234, 0o640))
    self.assertEqual(os.listdir(p / "sub"), [])
    self.assertEqual(os.stat(p / "new.txt").st_uid, os.stat(self.d).st_uid)  # new: the folder's owner
    self.assertEqual(os.readlink(p / "link"), "/etc/hostname")
    self.assertTrue(os.path.exists(p / "fifo"))
    self.assertTrue((p / ("n/" * sandbox_fs.MAX_COPY_DEPTH)).is_dir())
    self.assertFalse((p / ("n/" * (sandbox_fs.MAX_COPY_DEPTH + 1))).exists())

  def test_size_and_file_count_are_hard(self):
    c = self.cap(max_bytes=1 << 20, max_files=3)
    with self.assertRaises(OSError) as cm:
      with open(os.path.join(self.d, "big"), "wb") as f:
        f.write(b"x" * (2 << 20))
    self.assertEqual(cm.exception.strerror, "No space left on device")
    self.assertIn("disk budget reached", c.full())
    os.unlink(os.path.join(self.d, "big"))
    for i in range(3):
      open(os.path.join(self.d, f"f{i}"), "w").close()
    with self.assertRaises(OSError):
      open(os.path.join(self.d, "f3"), "w").close()
    self.assertIn("file limit reached", c.full())

  def test_folder_over_the_budget_is_refused_and_left_alone(self):
    with open(os.path.join(self.d, "big"), "wb") as f:
      f.write(b"x" * (2 << 20))
    with self.assertRaisesRegex(sb.SandboxError, "more than its budget.*raise them or empty the folder"):
      sandbox_fs.CappedDir(self.d, "test", max_bytes=1 << 20, max_files=10, uid=65534, gid=65534, keep=True,
                           limits=("SandboxConfig.workspace_max_bytes", "SandboxConfig.workspace_max_files"))
    self.assertEqual(os.listdir(self.d), ["big"])
    self.assertEqual(sandbox_fs.owned_mounts(), [m for m in sandbox_fs.owned_mounts() if m[1] != self.d])

  def test_write_back_never_exceeds_the_budget(self):
    # Issue 27 review, F2: what a write-back puts on the host is counted before anything is written: sparse
    # files and hard links at their full size, each link on its own. Before: 4 MiB of sparse files and 5 hard
    # links to a 300 kB file (1 MiB budget, 300 kB of the tmpfs) were written back as 6 MB.
    p = pathlib.Path(self.d)
    (p / "mine.txt").write_text("kept")
    c = self.cap(max_bytes=1 << 20, max_files=100)
    with open(p / "sparse", "wb") as f:
      f.truncate(4 << 20)
    (p / "f").write_bytes(b"x" * 300_000)
    for i in range(5):
      os.link(p / "f", p / f"l{i}")
    # 4 MiB + 6 x 300,000 + 4 bytes in 8 entries, counted before anything is written
    with self.assertRaisesRegex(sandbox_fs.CapError, r"not written back: the sandbox left 5994308 bytes, more "
                                r"than max_bytes=1048576 .*the folder is as it was before"):
      c.close()
    self.assertEqual(os.listdir(self.d), ["mine.txt"])
    self.assertEqual((p / "mine.txt").read_text(), "kept")
    self.assertEqual(sandbox_fs.owned_mounts(), [m for m in sandbox_fs.owned_mounts() if m[1] != self.d])

  def test_write_back_within_the_budget_and_file_count(self):
    p = pathlib.Path(self.d)
    c = self.cap(max_bytes=1 << 20, max_files=4)
    with open(p / "sparse", "wb") as f:   # a sparse file within the budget is written back (holes as zeros)
      f.truncate(512 << 10)
    (p / "sub").mkdir()
    os.symlink("sparse", p / "sub" / "link")
    self.assertEqual(c.write_back_size(), ((512 << 10) + 6, 3))
    c.close()
    self.assertEqual(os.path.getsize(p / "sparse"), 512 << 10)
    self.assertEqual(os.readlink(p / "sub" / "link"), "sparse")

  def test_write_back_stops_at_the_budget_if_the_tree_grew(self):
    # The count before writing is the rule; the copy also stops at the budget (a tree that changed after
    # the count), naming it.
    p = pathlib.Path(self.d)
    c = self.cap(max_bytes=1 << 20, max_files=100)
    for i in range(2):
      with open(p / f"s{i}", "wb") as f:
        f.truncate(800 << 10)
    with mock.patch.object(sandbox_fs.CappedDir, "write_back_size", return_value=(0, 0)):
      with self.assertRaisesRegex(sandbox_fs.CapError, r"writing back stopped at 's1'.*max_bytes=1048576"):
        c.close()
    self.assertEqual(os.listdir(p), ["s0"])

  def test_link_as_folder_is_refused_naming_the_real_one(self):
    # Issue 27 review, F8. Before: NotADirectoryError: "Not a directory", naming neither cause nor fix.
    link = self.d + "-link"
    os.symlink(self.d, link)
    self.addCleanup(os.unlink, link)
    with self.assertRaisesRegex(sb.SandboxError, rf"{link} is a symbolic link .*pass the real folder, {self.d}"):
      sandbox_fs.CappedDir(link, "test", max_bytes=1 << 20, max_files=10, uid=65534, gid=65534, keep=True)
    if HAVE_BWRAP:
      with self.assertRaisesRegex(sb.SandboxError, "is a symbolic link"):
        sb.Sandbox(sb.SandboxConfig(), workspace=link)
    self.assertEqual(sandbox_fs.owned_mounts(), [m for m in sandbox_fs.owned_mounts() if m[1] != self.d])


@absltest.skipUnless(os.geteuid() == 0, "the cgroup registry is root's")
class CgroupRegistryTest(absltest.TestCase):
  """Issue 27 review, F4: the record of each sandbox's cgroup folders (common.sandbox_cgroup)."""

  def test_record_outside_a_cgroup_file_system_is_not_swept(self):
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"agentrl-{dead.pid}-0"
    fake = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, fake)
    os.mkdir(os.path.join(fake, name))   # empty: an rmdir of it would succeed
    sandbox_cgroup._register(name, "v1", [os.path.join(fake, name)])
    rec = os.path.join(sandbox_cgroup._registry(), name)
    self.addCleanup(lambda: os.path.exists(rec) and os.unlink(rec))
    self.assertTrue(os.path.isfile(rec))
    self.assertNotIn(("v1", dead.pid, name), sandbox_cgroup._registered())
    sandbox_cgroup.sweep_stale()
    self.assertTrue(os.path.isdir(os.path.join(fake, name)))
    os.rmdir(os.path.join(fake, name))
    sandbox_cgroup.sweep_stale()   # its folders gone: the record goes too
    self.assertFalse(os.path.exists(rec))

  def test_registry_of_another_owner_is_not_used(self):
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp)
    os.mkdir(os.path.join(tmp, ".agentrl-cgroups"), 0o700)
    os.chown(os.path.join(tmp, ".agentrl-cgroups"), 4321, 4321)
    with mock.patch.object(tempfile, "tempdir", tmp):
      self.assertIsNone(sandbox_cgroup._registry(create=True))
      sandbox_cgroup._register("agentrl-1-0", "v1", ["/sys/fs/cgroup/memory/agentrl-1-0"])
    self.assertEqual(os.listdir(os.path.join(tmp, ".agentrl-cgroups")), [])


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap missing: apt-get install -y bubblewrap")
class PrivateParentTest(absltest.TestCase):
  """A read-only path inside a 0700 folder (a checkout in `mktemp -d`, as CI may clone) stays readable by
  the sandbox user: bubblewrap would make the missing parents 0700, so they are made 0755 first."""

  def test_checkout_under_private_tmp_folder_is_importable(self):
    private = tempfile.mkdtemp(dir="/tmp")   # mode 0700, as `mktemp -d` makes it
    self.addCleanup(shutil.rmtree, private)
    root = pathlib.Path(private) / "checkout"
    (root / "common").mkdir(parents=True)
    (root / "common" / "probe.py").write_text("X = 'importable'\n")
    for d in (root, root / "common"):
      os.chmod(d, 0o755)
    os.chmod(root / "common" / "probe.py", 0o644)
    with mock.patch.object(sb, "_PROJECT_ROOT", root):
      box = sb.Sandbox(sb.SandboxConfig())
      self.addCleanup(box.close)
      cmd = box.command([sys.executable, "-c", "import common.probe as p; print(p.X)"])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    self.assertEqual((out.returncode, out.stdout.strip()), (0, "importable"), out.stderr)


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap missing: apt-get install -y bubblewrap")
class BwrapArgvTest(absltest.TestCase):

  def test_isolation_flags(self):
    ws = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, ws)
    a = sb.bwrap_argv(["true"], workspace=ws, config=sb.SandboxConfig())
    for flag in ("--die-with-parent", "--unshare-pid", "--unshare-net", "--new-session",
                 "--clearenv"):
      self.assertIn(flag, a)
    # the whole root is remounted read-only last (a checkout under /tmp also gets its read-only stub remounted)
    self.assertEqual(a[len(a) - 1 - a[::-1].index("--remount-ro") + 1], "/")
    self.assertIn("/workspace", a)
    self.assertNotIn("--unshare-net", sb.bwrap_argv(["true"], workspace=ws,
                                                    config=sb.SandboxConfig(network=True)))

  def test_limits_line_names_the_mechanism(self):
    s = sb.Sandbox(sb.SandboxConfig())
    try:
      self.assertRegex(s.limits, r"(cgroup v[12] memory\S*=2147483648 pids.max=256|ulimit -v)")
      if s.cgroup.mode in ("v1", "v2"):
        for d in s.cgroup.dirs:
          self.assertTrue(os.path.isdir(d))
    finally:
      dirs = s.cgroup.dirs
      s.close()
    for d in dirs:
      self.assertFalse(os.path.exists(d))


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap missing: apt-get install -y bubblewrap")
class SandboxThroughDriverTest(absltest.TestCase):
  """One driver run: every probe is one episode; the run carries on past the killed one."""

  @classmethod
  def setUpClass(cls):
    cls.listener = socket.socket()
    cls.listener.bind(("127.0.0.1", 0))
    cls.listener.listen(1)
    port = cls.listener.getsockname()[1]
    tok = ByteTokenizer()
    scripts = {
        "net": [_call("connect", host="127.0.0.1", port=port), _call("interfaces")],
        "write": [_call("write_file", path=p) for p in WRITE_TARGETS]
                 + [_call("write_file", path="/workspace/ok.txt"), _call("write_file", path="/tmp/ok")],
        "read": [_call("read_file", path=p) for p in READ_TARGETS]
                + [_call("read_file", path="/proc/1/environ")],
        "fork": [_call("fork_bomb", max_children=5000)],
        "alloc": [_call("alloc", gib=3)],
        "after": [_call("echo", text="still running")],
    }

    def script(req):
      calls = scripts[req.task_id]
      if req.turn < len(calls):
        return calls[req.turn]
      return _call("finish", answer=req.task_id)

    os.environ[MARKER] = "1"
    cls.pool = WorkerPool(PROBE, 1, step_timeout_s=60)
    del os.environ[MARKER]
    cls.limits = cls.pool.workers[0].limits
    cls.driver = RolloutDriver(cls.pool, ScriptedPolicy(script, tok), tok,
                               config=RolloutConfig(group_size=1, max_turns=20, step_timeout_s=60,
                                                    max_context_tokens=100_000))
    order = ["net", "write", "read", "fork", "alloc", "after"]
    cls.trajs = {t.task_id: t for t in cls.driver.run(order)}
    cls.whole = cls.pool.wait_until_whole(120)
    cls.pool.close()
    cls.left = _descendants()

  @classmethod
  def tearDownClass(cls):
    cls.listener.close()

  def _obs(self, task):
    return [(t.call["arguments"].get("path"), t.status, t.observation) for t in self.trajs[task].turns]

  def test_outbound_connection_fails(self):
    t = self.trajs["net"]
    self.assertEqual(t.turns[0].status, "failed")
    self.assertIn("Errno", t.turns[0].observation)  # refused: the host's listener is not reachable
    self.assertEqual(t.turns[1].observation, "lo")   # only loopback in the private namespace
    self.assertEqual(t.termination, "done")
    self.assertEqual(t.reward, 1.0)

  def test_write_outside_workspace_fails(self):
    obs = self._obs("write")
    for path, status, text in obs[:len(WRITE_TARGETS)]:
      self.assertEqual(status, "failed", msg=f"{path}: {text}")
      self.assertRegex(text, r"Errno (30|2|13)")
    self.assertEqual([s for _, s, _ in obs[len(WRITE_TARGETS):len(WRITE_TARGETS) + 2]], ["ok", "ok"])
    for p in WRITE_TARGETS:
      self.assertFalse(os.path.exists(p) and p.endswith("/x") and os.path.getsize(p) == 1, msg=p)

  def test_reading_host_files_fails(self):
    obs = self._obs("read")
    for path, status, text in obs[:len(READ_TARGETS)]:
      self.assertEqual(status, "failed", msg=f"{path} was readable: {text[:80]}")
    # The sandbox's pid 1 (bubblewrap, root) is unreadable to the sandbox user; were it readable,
    # it would not carry the driver's environment.
    _, status, text = obs[len(READ_TARGETS)]
    names = {kv.split("=")[0] for kv in text.split("\0") if kv}
    self.assertNotIn(MARKER, text)
    if status != "failed":
      self.assertLessEqual(names, {"PATH", "PWD", "OLDPWD", "SHLVL", "_"})

  def test_fork_bomb_stops_at_process_limit(self):
    turn = self.trajs["fork"].turns[0]
    self.assertTrue(turn.info["refused"], msg=turn.observation)
    self.assertLess(turn.info["children"], 256)
    self.assertGreater(turn.info["children"], 100)
    self.assertEqual(self.trajs["fork"].termination, "done")

  def test_3gib_allocation_is_killed_and_recorded(self):
    t = self.trajs["alloc"]
    self.assertEqual(t.termination, "env_error")
    self.assertTrue(t.error.startswith("crash:"), msg=t.error)
    if "cgroup" in self.limits:
      self.assertIn("memory limit", t.error)
    self.assertEqual(t.turns[-1].status, "env_error")

  def test_driver_carries_on(self):
    t = self.trajs["after"]
    self.assertEqual(t.termination, "done")
    self.assertEqual(t.turns[0].observation, "still running")
    self.assertEqual(self.driver.stats["restarts"], 1)
    self.assertEqual(self.driver.stats["terminations"]["env_error"], 1)
    self.assertTrue(self.whole)

  def test_no_process_left_behind(self):
    self.assertEqual(self.left, [])


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap missing: apt-get install -y bubblewrap")
class LifetimeTest(absltest.TestCase):

  def test_network_flag_reaches_host_loopback(self):
    # Control for the network check: with network=True the same connect succeeds.
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    try:
      with EnvClient(PROBE, sandbox=sb.SandboxConfig(network=True)) as c:
        c.reset("n")
        r = c.step({"name": "connect", "arguments": {"host": "127.0.0.1",
                                                     "port": lst.getsockname()[1]}})
      self.assertEqual(r.observation, "connected")
    finally:
      lst.close()

  def test_sandbox_dies_with_its_parent(self):
    code = textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {ROOT!r})
        from common.env_client import EnvClient, EnvSpec
        c = EnvClient(EnvSpec("common.envs.probe_env:ProbeEnv"))
        cg = c.sandbox.cgroup.dirs if c.sandbox.cgroup else ()
        print(json.dumps([c.server_pid(), c.sandbox.workspace, c.stderr_path, list(cg)]), flush=True)
        time.sleep(600)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
      server_pid, ws, log, cgroups = json.loads(p.stdout.readline())
      self.assertTrue(psutil.pid_exists(server_pid))
      os.kill(p.pid, signal.SIGKILL)
      p.wait()
      deadline = time.monotonic() + 10
      while time.monotonic() < deadline:
        try:
          if psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE:
            break
        except psutil.NoSuchProcess:
          break
        time.sleep(0.05)
      else:
        self.fail(f"env server {server_pid} outlived its parent")
      # What the killed parent could not clean up: its workspace, log and (now empty) cgroups (its reaper
      # may have removed them already).
      shutil.rmtree(ws, ignore_errors=True)
      try:
        os.unlink(log)
      except FileNotFoundError:
        pass
      for d in cgroups:
        deadline = time.monotonic() + 10
        while os.path.exists(d) and time.monotonic() < deadline:
          try:
            os.rmdir(d)
          except OSError:
            time.sleep(0.05)
        self.assertFalse(os.path.exists(d), msg=f"cgroup {d} still has members")
    finally:
      if p.poll() is None:
        p.kill()
        p.wait()


if __name__ == "__main__":
  absltest.main()
