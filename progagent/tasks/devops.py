"""DevOps domain: an issue tracker (issues, labels, comments); service logs are workspace files."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

LABELS = ("bug", "feature", "docs", "question", "performance")
USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")
TITLES = ("Login page {}", "Export job {}", "Search results {}", "API returns 500 when {}", "Dashboard {}",
          "Upload {}", "Settings page {}", "Notifications {}")
PROBLEMS = ("is slow", "shows stale data", "fails on large files", "crashes on save", "times out", "has a typo",
            "needs dark mode", "ignores the locale")
COMPONENTS = ("api", "db", "cache", "auth", "queue", "web")

SCHEMA = """
CREATE TABLE issues (id INTEGER PRIMARY KEY, title TEXT, state TEXT, created TEXT, assignee TEXT, body TEXT,
                     close_reason TEXT);
CREATE TABLE labels (issue_id INTEGER, label TEXT);
CREATE TABLE comments (id INTEGER PRIMARY KEY, issue_id INTEGER, author TEXT, body TEXT);
CREATE INDEX comments_issue ON comments(issue_id);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n = 215 * f
  issues, labels = [], []
  for i in range(n):
    body = B.sentence(rng, 14)
    r = rng.random()
    if r < 0.06:
      body += " The worker hits a segfault in the parser."
    elif r < 0.10:
      body += " It can CRASH the tab."
    issues.append({"id": i + 1, "title": rng.choice(TITLES).format(rng.choice(PROBLEMS)),
                   "state": "open" if rng.random() < 0.6 else "closed", "created": B.rand_date(rng, "2023-06-01"),
                   "assignee": rng.choice(USERS), "body": body, "close_reason": None})
    for lab in rng.sample(LABELS, rng.randint(1, 2)):
      labels.append({"issue_id": i + 1, "label": lab})
  issues[0].update(state="closed", created="2023-01-15")    # the oldest bug is closed
  labels.append({"issue_id": 1, "label": "bug"})
  issues[1].update(state="open", body=issues[1]["body"] + " Segfault on start.")
  B.insert_rows(ctx, "issues", issues)
  B.insert_rows(ctx, "labels", labels)
  comments = []
  for _ in range(475 * f):
    iid = rng.randint(1, n)
    r = rng.random()
    if r < 0.08:
      author, body = "triage-bot", f"Duplicate of #{rng.randint(1, n)}"
    elif r < 0.13:
      author, body = rng.choice(USERS), f"I don't think this is a duplicate of #{rng.randint(1, n)}."
    else:
      author, body = rng.choice(USERS), B.sentence(rng, 10)
    comments.append({"id": len(comments) + 1, "issue_id": iid, "author": author, "body": body})
  comments.append({"id": len(comments) + 1, "issue_id": 2, "author": "triage-bot", "body": "Duplicate of #3"})
  comments.append({"id": len(comments) + 1, "issue_id": 2, "author": "erin", "body": "Not a duplicate of #4 though."})
  B.insert_rows(ctx, "comments", comments)
  B.write_docs(ctx, rng, "devops", ["oncall", "release_process", "labels", "triage", "runbook"])
  for j in range(B.n_data_files(f)):
    lines = []
    for _ in range(rng.randint(40, 80)):
      lvl = rng.choices(("INFO", "WARN", "ERROR"), (8, 3, 2))[0]
      msg = rng.choice(("request served", "retrying", "connection timeout after 30s", "cache miss",
                        "upstream timeout", "slow query", "user logged in", "disk usage 81%"))
      lines.append(f"2024-06-{rng.randint(1, 30):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z "
                   f"{lvl} {rng.choice(COMPONENTS)} {msg}")
    lines += ["2024-06-30T23:59:00Z ERROR db query timeout", "2024-06-30T23:59:30Z WARN api timeout budget low"]
    ctx.write(f"logs/service_{j + 1:03d}.log", "\n".join(lines) + "\n")


def _issue(ctx, issue_id):
  r = ctx.q1("SELECT id, title, state, created, assignee, body FROM issues WHERE id = ?", issue_id)
  if r is None:
    raise ToolError(f"no issue #{issue_id}")
  r["labels"] = [x["label"] for x in ctx.q("SELECT label FROM labels WHERE issue_id = ? ORDER BY rowid", issue_id)]
  return r


def _list_issues(ctx, state, label=None):
  if state not in ("open", "closed"):
    raise ToolError("state must be 'open' or 'closed'")
  if label is None:
    return ctx.q("SELECT id, title, state, created, assignee FROM issues WHERE state = ? ORDER BY id", state)
  return ctx.q("SELECT id, title, state, created, assignee FROM issues WHERE state = ? AND id IN "
               "(SELECT issue_id FROM labels WHERE label = ?) ORDER BY id", state, label)


def _close(ctx, issue_id, reason):
  r = _issue(ctx, issue_id)
  if r["state"] == "closed":
    raise ToolError(f"issue #{issue_id} is already closed")
  ctx.exec("UPDATE issues SET state = 'closed', close_reason = ? WHERE id = ?", reason, issue_id)
  return {"issue_id": issue_id, "state": "closed"}


def _add_label(ctx, issue_id, label):
  r = _issue(ctx, issue_id)
  if label in r["labels"]:
    raise ToolError(f"issue #{issue_id} already has the label {label!r}")
  ctx.exec("INSERT INTO labels (issue_id, label) VALUES (?, ?)", issue_id, label)
  return {"issue_id": issue_id, "labels": r["labels"] + [label]}


TOOLS = (
    B.tool("list_issues", "List issues by state, optionally only those with a label: [{id, title, state, "
           "created, assignee}].", _list_issues, required=("state",), state=B.p_str("open or closed", ("open", "closed")),
           label=B.p_str("only issues carrying this label")),
    B.tool("get_issue", "Get one issue with its body and labels.", _issue, required=("issue_id",),
           issue_id=B.p_int("issue number")),
    B.tool("list_comments", "List an issue's comments: [{id, author, body}].",
           lambda ctx, issue_id: (_issue(ctx, issue_id), ctx.q(
               "SELECT id, author, body FROM comments WHERE issue_id = ? ORDER BY id", issue_id))[1],
           required=("issue_id",), issue_id=B.p_int("issue number")),
    B.tool("close_issue", "Close an open issue with a reason.", _close, required=("issue_id", "reason"),
           issue_id=B.p_int("issue number"), reason=B.p_str("why it is closed")),
    B.tool("add_label", "Add a label to an issue.", _add_label, required=("issue_id", "label"),
           issue_id=B.p_int("issue number"), label=B.p_str("label")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("devops", "A software team's issue tracker and service logs.", SCHEMA, generate, TOOLS)

TIMEOUTS = """\
n = 0
for path in tools["list_files"](directory="logs"):
    for line in tools["read_file"](path=path)["content"].splitlines():
        if " ERROR " in line and "timeout" in line:
            n += 1
print(n)
tools["submit_answer"](answer=n)
"""

DUPLICATES = r"""
import re
closed = []
for issue in tools["list_issues"](state="open"):
    for c in tools["list_comments"](issue_id=issue["id"]):
        m = re.match(r"Duplicate of #(\d+)", c["body"])
        if c["author"] == "triage-bot" and m:
            tools["close_issue"](issue_id=issue["id"], reason=f"duplicate of #{m.group(1)}")
            closed.append(issue["id"])
            break
print(len(closed), "closed")
tools["submit_answer"]()
"""

DUPLICATES_WRONG = """\
for issue in tools["list_issues"](state="open"):
    for c in tools["list_comments"](issue_id=issue["id"]):
        if "duplicate" in c["body"].lower():
            tools["close_issue"](issue_id=issue["id"], reason="duplicate")
            break
tools["submit_answer"]()
"""

CRASH = """\
for issue in tools["list_issues"](state="open"):
    full = tools["get_issue"](issue_id=issue["id"])
    text = (full["title"] + " " + full["body"]).lower()
    if ("crash" in text or "segfault" in text) and "crash" not in full["labels"]:
        tools["add_label"](issue_id=issue["id"], label="crash")
tools["submit_answer"]()
"""

OLDEST = """\
bugs = tools["list_issues"](state="open", label="bug")
first = min(bugs, key=lambda i: (i["created"], i["id"]))
print(first)
tools["submit_answer"](answer=first["id"])
"""

OLDEST_WRONG = """\
bugs = tools["list_issues"](state="open", label="bug") + tools["list_issues"](state="closed", label="bug")
tools["submit_answer"](answer=min(bugs, key=lambda i: (i["created"], i["id"]))["id"])
"""


def _states(ctx):
  return {r["id"]: (r["state"], r["close_reason"]) for r in ctx.q("SELECT id, state, close_reason FROM issues")}


def _dup_expected(ctx):
  import re
  want = _states(ctx)
  for r in ctx.q("SELECT i.id, c.body FROM issues i JOIN comments c ON c.issue_id = i.id WHERE i.state = 'open' "
                 "AND c.author = 'triage-bot' ORDER BY i.id, c.id"):
    m = re.match(r"Duplicate of #(\d+)", r["body"])
    if m and want[r["id"]][0] == "open":
      want[r["id"]] = ("closed", f"duplicate of #{m.group(1)}")
  return want


def _labels(ctx):
  return sorted((r["issue_id"], r["label"]) for r in ctx.q("SELECT * FROM labels"))


def _crash_expected(ctx):
  hits = [(r["id"], "crash") for r in ctx.q("SELECT id, title, body FROM issues WHERE state = 'open'")
          if "crash" in (r["title"] + " " + r["body"]).lower() or "segfault" in (r["title"] + " " + r["body"]).lower()]
  return sorted(_labels(ctx) + hits)


TASKS = [
    B.Task(DOMAIN, "timeout_errors",
           "How many ERROR lines in the files under logs/ mention 'timeout'?", (TIMEOUTS,),
           lambda ctx: sum(1 for p in ctx.files("logs") for line in ctx.read(p).splitlines()
                           if " ERROR " in line and "timeout" in line), answer="int",
           wrong=('" ERROR " in line and ', "")),
    B.Task(DOMAIN, "close_bot_duplicates",
           "Close every open issue that has a comment by 'triage-bot' of the form 'Duplicate of #N', with the "
           "reason 'duplicate of #N' (N from the first such comment). Close no other issue.", (DUPLICATES,),
           _dup_expected, check=lambda ctx, e, a: _states(ctx) == e, wrong=DUPLICATES_WRONG),
    B.Task(DOMAIN, "label_crash_issues",
           "Add the label 'crash' to every open issue whose title or body mentions 'crash' or 'segfault' (any "
           "letter case). Change no other labels.", (CRASH,), _crash_expected,
           check=lambda ctx, e, a: _labels(ctx) == [tuple(x) for x in e],
           wrong=('(full["title"] + " " + full["body"]).lower()', 'full["title"].lower()')),
    B.Task(DOMAIN, "oldest_open_bug",
           "Which open issue labelled 'bug' was created first? Submit its number (on a tie, the smaller number).",
           (OLDEST,), lambda ctx: ctx.scalar("SELECT i.id FROM issues i JOIN labels l ON l.issue_id = i.id WHERE "
                                             "l.label = 'bug' AND i.state = 'open' ORDER BY i.created, i.id LIMIT 1"),
           answer="int", wrong=OLDEST_WRONG),
]
