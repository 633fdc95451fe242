"""A small LOCA-bench checkout in the upstream layout (hkust-nlp/LOCA-bench@8cd474d), written by the tests.

write_checkout(root) makes, under root:
  task-configs/final_8k_set_config.json   two entries of one task type (seeds 42 and 7), final_64k_... one,
                                          final_16k_... one whose generator fails (logs an ERROR, as LOCA's do)
  gem/envs/notes_s2l/notes_s2l.py         NotesS2LEnv: a generator class (its constructor calls reset(), which
                                          writes local_db/notes/notes.json, an agent workspace and a ground
                                          truth) whose step() is the evaluator
  mcp_convert/mcps/notes/server.py        a mock service on the `mcp` 1.x low-level server API (Server,
                                          InitializationOptions, mcp.server.stdio), its data in $NOTES_DATA_DIR
  gem/tools/mcp_server/claim_done/server.py, gem/tools/mcp_server/config/{notes,claim_done,python_execute}.yaml

The task: answer.txt must hold the sum of the notes' values, and the note with the largest value must be
archived in the service (archive_note). Nothing here is LOCA's code.
"""

import json
import os

ENV_CLASS = "gem.envs.notes_s2l.notes_s2l.NotesS2LEnv"

GENERATOR = '''
import json, os, random, shutil
from pathlib import Path


class NotesS2LEnv:
  def __init__(self, task_dir=None, num_notes=3, seed=42, fail=False, **_):
    self.task_dir = task_dir
    self.agent_workspace = Path(task_dir) / "agent_workspace"
    self.notes_dir = Path(task_dir) / "local_db" / "notes"
    self.num_notes, self.seed, self.fail = num_notes, seed, fail
    self.reset()

  def _get_instructions(self):
    return (f"There are {self.num_notes} notes in the notes service. Write the sum of their values to "
            "answer.txt and archive the note with the largest value.")

  def reset(self, seed=None):
    if os.path.exists(self.task_dir):
      shutil.rmtree(self.task_dir)
    (Path(self.task_dir) / "logs").mkdir(parents=True)
    if self.fail:  # as LOCA's envs do: log the failure, return the instruction over an empty state
      with open(Path(self.task_dir) / "logs" / "env.log", "w") as f:
        f.write("2026-01-01 00:00:00 - ERROR - Preprocessing failed\\n")
      return self._get_instructions(), {}
    rng = random.Random(self.seed)
    notes = [{"id": i, "value": rng.randint(1, 100), "archived": False} for i in range(self.num_notes)]
    self.notes_dir.mkdir(parents=True)
    (self.notes_dir / "notes.json").write_text(json.dumps(notes))
    self.agent_workspace.mkdir()
    (self.agent_workspace / "README.md").write_text("Put answer.txt here.\\n")
    gt = Path(self.task_dir) / "groundtruth_workspace"
    gt.mkdir()
    (gt / "answer.txt").write_text(str(sum(n["value"] for n in notes)))
    return self._get_instructions(), {}

  def step(self, action):
    answer = self.agent_workspace / "answer.txt"
    expected = (Path(self.task_dir) / "groundtruth_workspace" / "answer.txt").read_text()
    notes = json.loads((self.notes_dir / "notes.json").read_text())
    top = max(notes, key=lambda n: n["value"])
    ok = answer.exists() and answer.read_text().strip() == expected and top["archived"]
    return ("done", 1.0 if ok else 0.0, True, False, {"success": ok})
'''

MOCK_SERVER = '''
import asyncio, json, os, sys
from importlib import metadata
from mcp.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
import mcp.server.stdio
import mcp.types as types

DATA = os.path.join(os.environ["NOTES_DATA_DIR"], "notes.json")
USER = sys.argv[sys.argv.index("--user") + 1] if "--user" in sys.argv else None
server = Server("notes")
OBJ = {"type": "object", "properties": {}}


@server.list_tools()
async def list_tools():
  return [types.Tool(name="list_notes", description="All notes.", inputSchema=OBJ),
          types.Tool(name="archive_note", description="Archive a note.",
                     inputSchema={"type": "object", "properties": {"note_id": {"type": "integer"}},
                                  "required": ["note_id"]}),
          types.Tool(name="whoami", description="The logged-in user and the mcp SDK's version.", inputSchema=OBJ),
          types.Tool(name="can_read", description="Whether a path can be read.",
                     inputSchema={"type": "object", "properties": {"path": {"type": "string"}}})]


@server.call_tool()
async def call_tool(name, arguments):
  if name == "whoami":
    text = json.dumps({"user": USER, "mcp": metadata.version("mcp")})
  elif name == "can_read":
    try:
      with open(arguments["path"]):
        text = "true"
    except OSError:
      text = "false"
  else:
    with open(DATA) as f:
      notes = json.load(f)
    if name == "archive_note":
      for n in notes:
        if n["id"] == arguments["note_id"]:
          n["archived"] = True
      with open(DATA, "w") as f:
        json.dump(notes, f)
    text = json.dumps(notes)
  return [types.TextContent(type="text", text=text)]


async def main():
  async with mcp.server.stdio.stdio_server() as (read, write):
    await server.run(read, write, InitializationOptions(
        server_name="notes", server_version="1.0.0",
        capabilities=server.get_capabilities(notification_options=NotificationOptions(),
                                             experimental_capabilities={})))


asyncio.run(main())
'''

CLAIM_DONE = '''
import asyncio
from mcp.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
import mcp.server.stdio
import mcp.types as types

server = Server("claim_done")


@server.list_tools()
async def list_tools():
  return [types.Tool(name="claim_done", description="claim the task is done",
                     inputSchema={"type": "object", "properties": {}})]


@server.call_tool()
async def call_tool(name, arguments):
  return [types.TextContent(type="text", text="you have claimed the task is done!")]


async def main():
  async with mcp.server.stdio.stdio_server() as (read, write):
    await server.run(read, write, InitializationOptions(
        server_name="claim_done", server_version="1.0.0",
        capabilities=server.get_capabilities(notification_options=NotificationOptions(),
                                             experimental_capabilities={})))


asyncio.run(main())
'''

YAML = {
    "notes": '''name: notes
execution:
  command_type: uv
  script:
    primary: "mcp_convert/mcps/notes/server.py"
    fallbacks: []
parameters:
  data_dir:
    required: true
    default: "./notes_data"
    env_var: "NOTES_DATA_DIR"
  user:
    required: false
    cli_arg: "--user"
''',
    "claim_done": '''name: claim_done
execution:
  command_type: python
  script:
    primary: "gem/tools/mcp_server/claim_done/server.py"
parameters: {}
''',
    "python_execute": '''name: python_execute
execution:
  command_type: python
  script:
    primary: "gem/tools/mcp_server/python_execute/server.py"
parameters:
  workspace_path:
    default: "."
    cli_arg: "--workspace"
    aliases:
      - workspace_dir
''',
}


def entry(seed: int, **params) -> dict:
  """One task config entry of the fixture's type."""
  return {
      "name": "NotesS2LEnv", "env_class": ENV_CLASS, "env_params": dict({"seed": seed, "num_notes": 3}, **params),
      "mcp_servers": {
          "notes": {"enabled": True, "type": "notes",
                    "params": {"data_dir": "{task_workspace}/local_db/notes", "user": "ann"}},
          "python_execute": {"enabled": True, "type": "python_execute",
                             "params": {"workspace_dir": "{agent_workspace}"}},
          "claim_done": {"enabled": True, "type": "claim_done", "params": {}},
          "unused": {"enabled": False, "type": "notes", "params": {}},
      }}


def write_checkout(root: str) -> str:
  """Writes the fixture checkout under `root` (module docstring); returns root."""
  files = {
      "gem/__init__.py": "", "gem/envs/__init__.py": "", "gem/envs/notes_s2l/__init__.py": "",
      "gem/envs/notes_s2l/notes_s2l.py": GENERATOR, "mcp_convert/mcps/notes/server.py": MOCK_SERVER,
      "gem/tools/mcp_server/claim_done/server.py": CLAIM_DONE,
      "task-configs/final_8k_set_config.json": json.dumps({"configurations": [entry(42), entry(7)]}),
      "task-configs/final_64k_set_config.json": json.dumps({"configurations": [entry(42, num_notes=9)]}),
      "task-configs/final_16k_set_config.json": json.dumps({"configurations": [entry(42, fail=True)]}),
  }
  files.update({f"gem/tools/mcp_server/config/{k}.yaml": v for k, v in YAML.items()})
  for rel, text in files.items():
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      f.write(text)
  for dirpath, _, _ in os.walk(root):
    os.chmod(dirpath, 0o755)
  return root
