"""The policies `python -m progagent.bench.evaluate --policy KIND:VALUE` runs: scripted, a checkpoint, an endpoint.

  make_policy("scripted:do_nothing", ...)      # replies without a tool call: the episode ends untouched
  make_policy("scripted:groundtruth", ...)     # what passes: the library task's oracle; an MCP task's ground truth
  make_policy("checkpoint:gguf:smollm2", ...)  # a local model (common.lm.stages.load_policy: a HF folder,
                                               # 'gguf:PATH' / 'gguf:smollm2', 'tiny:<family>')
  make_policy("endpoint:http://127.0.0.1:8000", model="NAME")   # any OpenAI-compatible server (teacher client)

Each is a factory of harness policies: `factory(bench_task, mode, workspace) -> policy`, a policy being
progagent.harness.Policy, (messages, tools) -> assistant message, with optional `usage()` and `close()`. One
policy serves one episode (the scripted ones keep per-episode state; the model's is built once and shared).

Scripted (CI and the benchmarks' own checks):
  do_nothing   "Done." with no tool call, at the first turn: the evaluator judges the generated state as it is.
  groundtruth  a library task (progagent.tasks): its oracle (progagent.harness.OraclePolicy: the PTC programs, or
               the DTC oracle's calls). An MCP task: its ground-truth folder (read on the host) put into the
               workspace by the agent's own tools: under PTC and Hybrid one program that writes every file of
               the folder under the workspace and unpacks the archives at its top (.tar, .tar.gz, .tgz, .zip;
               Toolathlon ships some ground truths packed: privacy-desensitization's gt_files.tar.gz holds the
               desensitized_documents/ the evaluator compares), the archive then removed; under DTC one call of
               a `write_file` tool per file that is UTF-8 text (the filesystem server's; archives and binary
               files cannot be written that way and are skipped, so such a task fails under DTC). A task without
               a ground truth gets do_nothing's reply.
Checkpoint: the model's chat template renders the conversation and the tool schemas (common.chat.ChatTemplate),
common.lm.sampler.LMSampler samples the reply (KV cache kept across the episode's turns), the template's parser
reads its tool calls. A prompt longer than `max_context_tokens` (default 8192, SmolLM2's window) ends the
episode: an empty reply with no call, counted in `overflow`. Greedy unless `temperature` > 0.
Endpoint: progagent.teacher_client.ChatClient (native function calling), counting the server's usage as
progagent.teacher does.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any, Callable, Mapping, Sequence

from progagent import harness
from progagent import tasks as tasks_lib
from progagent.bench.base import BenchTask
from progagent.teacher_client import ChatClient

KINDS = ("scripted", "checkpoint", "endpoint")
SCRIPTS = ("do_nothing", "groundtruth")
ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")
MAX_GROUNDTRUTH_BYTES = 64 * 1024 ** 2

PolicyFactory = Callable[[BenchTask, str, str], harness.Policy]


class PolicyError(ValueError):
  """A `--policy` that is not KIND:VALUE of a known kind, an unknown script, or an endpoint without --model."""


def parse_policy(spec: str) -> tuple[str, str]:
  """'KIND:VALUE' -> (kind, value); PolicyError naming the forms."""
  form = ("--policy scripted:do_nothing | scripted:groundtruth | checkpoint:PATH (a HF folder, gguf:smollm2, "
          "tiny:qwen2) | endpoint:URL")
  kind, sep, value = str(spec).partition(":")
  if not sep or kind not in KINDS or not value:
    raise PolicyError(f"--policy {spec!r}: expected {form}")
  if kind == "scripted" and value not in SCRIPTS:
    raise PolicyError(f"--policy {spec!r}: the scripted policies are {SCRIPTS}")
  return kind, value


def reply(content: str = "", calls: Sequence[Mapping[str, Any]] = ()) -> dict:
  """An assistant message with native tool calls ({'name', 'arguments'} each)."""
  return harness.assistant_message(content, calls)


# ------------------------------------------------------------------------------------------------ scripted


class DoNothing:
  """Replies "Done." without a tool call (module docstring)."""

  def __call__(self, messages, tools=()):
    return reply("Done.")


def _groundtruth_files(folder: str) -> dict[str, bytes]:
  out, total = {}, 0
  for dirpath, dirnames, filenames in os.walk(folder):
    dirnames.sort()
    for name in sorted(filenames):
      path = os.path.join(dirpath, name)
      with open(path, "rb") as f:
        data = f.read()
      total += len(data)
      if total > MAX_GROUNDTRUTH_BYTES:
        raise PolicyError(f"scripted:groundtruth: {folder} holds more than {MAX_GROUNDTRUTH_BYTES} bytes")
      out[os.path.relpath(path, folder)] = data
  return out


_WRITE_PROGRAM = '''import base64, os, tarfile, zipfile
ROOT = {root!r}
FILES = {files!r}
for rel, data in FILES.items():
    path = os.path.join(ROOT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(base64.b64decode(data))
    if os.sep not in rel and rel.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(path) as t:
            t.extractall(ROOT, filter="data")
        os.remove(path)
    elif os.sep not in rel and rel.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            z.extractall(ROOT)
        os.remove(path)
print(f"wrote {{len(FILES)}} ground-truth files into {{ROOT}}")
'''


def groundtruth_program(folder: str, workspace: str) -> str:
  """The PTC program that puts the ground-truth folder into `workspace` (module docstring)."""
  files = {rel: base64.b64encode(data).decode("ascii") for rel, data in _groundtruth_files(folder).items()}
  return _WRITE_PROGRAM.format(root=workspace, files=files)


class GroundTruth:
  """scripted:groundtruth for one episode (module docstring)."""

  def __init__(self, task: BenchTask, mode: str, workspace: str):
    self.task, self.mode, self.workspace = task, mode, workspace
    self._oracle: harness.OraclePolicy | None = None
    self._calls: list[dict] | None = None

  def __call__(self, messages, tools=()):
    names = [t["function"]["name"] if "function" in t else t.get("name") for t in tools]
    if self.task.task is None:  # a library task: its oracle
      if self._oracle is None:
        tid = self.task.task_id.split("@v")[0]
        self._oracle = harness.OraclePolicy(tasks_lib.get_task(tid), self.mode,
                                            [n for n in names if n != harness.PROGRAM_TOOL])
      return self._oracle(messages, tools)
    gt = self.task.task.groundtruth
    if gt is None:
      return reply("Done.")
    if self._calls is None:
      if self.mode in ("ptc", "hybrid"):
        self._calls = [{"name": harness.PROGRAM_TOOL,
                        "arguments": {"code": groundtruth_program(gt, self.workspace)}}]
      else:
        write = next((n for n in names if n == "write_file" or n.endswith("__write_file")), None)
        self._calls = []
        for rel, data in _groundtruth_files(gt).items():
          if write is None or rel.endswith(ARCHIVES):
            continue
          try:
            text = data.decode("utf-8")
          except UnicodeDecodeError:
            continue
          self._calls.append({"name": write, "arguments": {"path": os.path.join(self.workspace, rel),
                                                           "content": text}})
    if not self._calls:
      return reply("Done.")
    return reply("", [self._calls.pop(0)])

  def close(self) -> None:
    if self._oracle is not None:
      self._oracle.close()


# ------------------------------------------------------------------------------------------------ checkpoint


class ModelPolicy:
  """A local checkpoint as a harness policy (module docstring).

  Args:
    checkpoint: common.lm.stages.load_policy's `model.checkpoint` (a HF folder, 'gguf:smollm2', 'tiny:qwen2').
    max_new_tokens: tokens per reply.
    max_context_tokens: the longest prompt served; a longer one ends the episode (counted in `overflow`).
    temperature: 0 = greedy.
    seed: the sampler's key.
    corpus: a 'tiny:' checkpoint's tokenizer training texts.
  Raises:
    ValueError: the checkpoint cannot be resolved (common.lm.checkpoints).
  """

  def __init__(self, checkpoint: str, *, max_new_tokens: int = 512, max_context_tokens: int = 8192,
               temperature: float = 0.0, seed: int = 0, corpus: Sequence[str] = ()):
    import jax  # pylint: disable=g-import-not-at-top
    import ml_collections  # pylint: disable=g-import-not-at-top
    from common.lm import checkpoints as lm_checkpoints  # pylint: disable=g-import-not-at-top
    from common.lm import stages  # pylint: disable=g-import-not-at-top
    from common.lm import testing  # pylint: disable=g-import-not-at-top
    from common.lm.sampler import LMSampler  # pylint: disable=g-import-not-at-top
    node = ml_collections.ConfigDict({"checkpoint": checkpoint, "dtype": "float32", "param_dtype": "float32",
                                      "cache_dir": ""})
    template = None
    if checkpoint.startswith(lm_checkpoints.TINY_PREFIX):
      template = (testing.LLAMA31_TOOL_TEMPLATE if checkpoint.endswith("llama") else testing.QWEN3_TOOL_TEMPLATE)
    self.policy = stages.load_policy(node, corpus=list(corpus), chat_template=template, seed=seed,
                                     config_key="--policy checkpoint:")
    self.chat = self.policy.chat
    self.max_new_tokens = int(max_new_tokens)
    self.max_context_tokens = int(max_context_tokens)
    self.sampler = LMSampler(self.policy.params, self.policy.model, key=jax.random.key(seed), rows=1,
                             max_new_tokens=self.max_new_tokens, temperature=float(temperature),
                             stop_tokens=tuple(self.policy.model.eos_token_ids) + tuple(self.chat.stop_ids),
                             pad_id=self.policy.model.pad_token_id or 0)
    self.episode = 0
    self.overflow = 0
    self.generated_tokens = 0

  @property
  def tokenizer(self):
    """The checkpoint's tokenizer (token counts of the episode accounting)."""
    return self.chat.hf

  def for_episode(self, task: BenchTask, mode: str, workspace: str) -> "_ModelEpisode":
    self.episode += 1
    return _ModelEpisode(self, self.episode, task.task_id if task is not None else "request")


class _ModelEpisode:
  """One episode's view of a ModelPolicy."""

  def __init__(self, model: ModelPolicy, episode: int, task_id: str):
    self.model, self.episode, self.task_id, self.turn = model, episode, task_id, 0

  def __call__(self, messages, tools=()):
    from common import chat as chat_lib  # pylint: disable=g-import-not-at-top
    from common import policy_io  # pylint: disable=g-import-not-at-top
    m = self.model
    ids = m.chat.prompt_ids(messages, tools)
    room = m.max_context_tokens - len(ids)
    if room <= 0:
      m.overflow += 1
      return reply("")
    out = m.sampler([policy_io.PolicyRequest(self.episode, self.task_id, 0, self.turn, ids,
                                             min(m.max_new_tokens, room))])[0]
    self.turn += 1
    m.generated_tokens += len(out.token_ids)
    parsed = m.chat.parse(m.chat.decode(out.token_ids))
    msg = chat_lib.assistant_message(parsed)
    if getattr(parsed, "error", None):
      msg["error"] = parsed.error
    return msg

  def close(self) -> None:
    self.model.sampler.release(self.episode)


# ------------------------------------------------------------------------------------------------ endpoint


class EndpointPolicy:
  """An OpenAI-compatible endpoint (progagent.teacher_client.ChatClient); usage summed per episode."""

  def __init__(self, client: ChatClient):
    self.client = client

  def for_episode(self, task: BenchTask, mode: str, workspace: str) -> "_EndpointEpisode":
    return _EndpointEpisode(self.client)


class _EndpointEpisode:

  def __init__(self, client: ChatClient):
    self.client = client
    self.usage_counts = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}

  def __call__(self, messages, tools=()):
    c = self.client.complete(messages, tools)
    self.usage_counts["requests"] += 1
    self.usage_counts["prompt_tokens"] += max(0, c.prompt_tokens)
    self.usage_counts["completion_tokens"] += max(0, c.completion_tokens)
    return c.message

  def usage(self) -> dict:
    return dict(self.usage_counts)


# ------------------------------------------------------------------------------------------------ factory


class Scripted:
  """scripted:<name> as a factory."""

  def __init__(self, name: str):
    self.name = name

  def for_episode(self, task: BenchTask, mode: str, workspace: str):
    return DoNothing() if self.name == "do_nothing" else GroundTruth(task, mode, workspace)


def make_policy(spec: str, *, model: str = "", api_key: str | None = None, temperature: float = 0.0,
                max_new_tokens: int = 512, max_context_tokens: int = 8192, seed: int = 0, timeout_s: float = 300.0,
                corpus: Sequence[str] = ()) -> Any:
  """The policy of `--policy` as an object with `for_episode(bench_task, mode, workspace) -> harness policy`.

  Raises:
    PolicyError: a bad spec (parse_policy), or an endpoint without `model` (--model).
  """
  kind, value = parse_policy(spec)
  if kind == "scripted":
    return Scripted(value)
  if kind == "checkpoint":
    return ModelPolicy(value, max_new_tokens=max_new_tokens, max_context_tokens=max_context_tokens,
                       temperature=temperature, seed=seed, corpus=corpus)
  if not model:
    raise PolicyError(f"--policy {spec!r}: an endpoint needs --model NAME (the served model's name)")
  return EndpointPolicy(ChatClient(value, model, api_key=api_key, temperature=temperature,
                                   max_tokens=max_new_tokens, enable_thinking=False, timeout_s=timeout_s))


def describe(spec: str) -> dict:
  """{'kind', 'value'} of a spec, for the results file."""
  kind, value = parse_policy(spec)
  return {"kind": kind, "value": value, "spec": json.dumps(spec)[1:-1]}
