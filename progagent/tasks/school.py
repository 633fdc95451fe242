"""School domain: students, courses and grades; grade appeals (several formats) are workspace files, reports are
written there."""

from __future__ import annotations

import json
import random
import re

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

SUBJECTS = (("MA", "Mathematics"), ("PH", "Physics"), ("CH", "Chemistry"), ("BI", "Biology"), ("EN", "English"),
            ("HI", "History"), ("EC", "Economics"), ("PS", "Psychology"), ("GE", "Geography"), ("AR", "Art"),
            ("MU", "Music"), ("CS", "Computing"), ("PL", "Philosophy"), ("LA", "Latin"))
COURSE_KINDS = ("Foundations of", "Topics in", "Advanced", "Introduction to", "Seminar in", "Methods in")
N_COURSES = 10
STUDENT_STATUSES = ("active", "probation")

SCHEMA = """
CREATE TABLE courses (id INTEGER PRIMARY KEY, code TEXT, title TEXT, teacher TEXT, room TEXT);
CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT, year INTEGER, email TEXT, status TEXT);
CREATE TABLE enrollments (id INTEGER PRIMARY KEY, student_id INTEGER, course_id INTEGER, grade INTEGER);
CREATE INDEX enr_course ON enrollments(course_id);
CREATE INDEX enr_student ON enrollments(student_id);
"""


def _course_list(rng: random.Random) -> list[tuple[str, str]]:
  """CS101 (named by a task) plus N_COURSES - 1 courses with seeded codes, in seeded order."""
  out, codes = [("CS101", "Programming I")], {"CS101"}
  while len(out) < N_COURSES:
    pre, subject = rng.choice(SUBJECTS)
    code = f"{pre}{rng.randint(102, 499)}"
    if code not in codes:
      codes.add(code)
      out.append((code, f"{rng.choice(COURSE_KINDS)} {subject}"))
  rng.shuffle(out)
  return out


def _plant_mean(rng: random.Random, rows: list[dict], total_delta: int) -> None:
  """Grades of `rows` (>= 2) around 90 with sum 90 * len + total_delta and one grade above 90."""
  d = rng.randint(2, 6)
  grades = [90 + d, 90 - d + total_delta] + [90] * (len(rows) - 2)
  rng.shuffle(grades)
  for e, g in zip(rows, grades):
    e["grade"] = g


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  courses = _course_list(rng)
  teachers = G.unique_names(rng, N_COURSES)
  G.insert_rows(ctx, "courses", [{"id": i + 1, "code": c, "title": t, "teacher": teachers[i],
                                  "room": f"R{rng.randint(100, 399)}"} for i, (c, t) in enumerate(courses)])
  ids = list(range(1, N_COURSES + 1))
  cs101 = 1 + [c for c, _ in courses].index("CS101")
  best = rng.choice([i for i in ids if i != cs101])
  offset = {c: rng.gauss(0, 1.0) for c in ids}
  offset[best] = 3.5 + rng.random()   # the best course average, by a clear margin
  n = 440 * f
  names = G.unique_names(rng, n)
  G.insert_rows(ctx, "students", [{"id": i + 1, "name": nm, "year": rng.randint(1, 4), "email": G.email_of(nm, i + 1),
                                   "status": "active"} for i, nm in enumerate(names)])
  enr: list[dict] = []
  by_student: dict[int, list[dict]] = {}
  for s in range(1, n + 1):
    ability = rng.gauss(72, 7)
    for c in rng.sample(ids, rng.randint(4, 6)):
      g = None if rng.random() < 0.08 else max(20, min(100, round(ability + offset[c] + rng.gauss(0, 4))))
      e = {"id": len(enr) + 1, "student_id": s, "course_id": c, "grade": g}
      enr.append(e)
      by_student.setdefault(s, []).append(e)
  planted = rng.sample(range(1, n + 1), 12)
  for s in planted[:rng.randint(2, 4)]:           # honour roll: an average of exactly 90
    _plant_mean(rng, by_student[s], 0)
  for s in planted[4:4 + rng.randint(1, 3)]:      # ... and just below 90
    _plant_mean(rng, by_student[s], -1)
  for s in planted[7:7 + rng.randint(1, 3)]:      # probation: two failing grades
    for e in rng.sample(by_student[s], 2):
      e["grade"] = rng.randint(35, 59)
  cs = [e for e in enr if e["course_id"] == cs101 and e["student_id"] not in planted and e["grade"] is not None]
  for e in rng.sample(cs, rng.randint(1, 3)):     # CS101 grades of exactly 60 pass
    e["grade"] = 60
  G.insert_rows(ctx, "enrollments", enr)
  G.write_docs(ctx, rng, "school", ["grading", "appeals", "calendar", "honour_roll", "conduct"])
  graded = [e for e in enr if e["grade"] is not None and 40 <= e["grade"] <= 95 and e["student_id"] not in planted]
  k = B.n_data_files(f)
  fmts = ["txt", "json", "csv", rng.choice(("txt", "json", "csv"))] + [rng.choice(("txt", "json", "csv"))
                                                                        for _ in range(k - 4)]
  rng.shuffle(fmts)
  for j, (e, fmt) in enumerate(zip(rng.sample(graded, k), fmts)):
    new = min(100, e["grade"] + rng.randint(1, 5)) if rng.random() < 0.5 else e["grade"] - rng.randint(1, 10)
    code, note = courses[e["course_id"] - 1][0], G.sentence(rng, 10)
    if fmt == "txt":
      text = f"Student ID: {e['student_id']}\nCourse: {code}\nRequested grade: {new}\n\n{note}\n"
    elif fmt == "json":
      text = json.dumps({"student": e["student_id"], "course": code, "requested": new, "comment": note}, indent=1)
    else:
      text = f"student_id,course_code,requested_grade,comment\n{e['student_id']},{code},{new},\"{note}\"\n"
    ctx.write(f"appeals/appeal_{j + 1:03d}.{fmt}", text)


# -- tools

def _get_student(ctx, student_id):
  r = ctx.q1("SELECT * FROM students WHERE id = ?", student_id)
  if r is None:
    raise ToolError(f"no student with id {student_id}")
  return r


def _set_grade(ctx, student_id, course_id, grade):
  if not 0 <= grade <= 100:
    raise ToolError("grade must lie in [0, 100]")
  n = ctx.exec("UPDATE enrollments SET grade = ? WHERE student_id = ? AND course_id = ?", grade, student_id, course_id)
  if n == 0:
    raise ToolError(f"student {student_id} is not enrolled in course {course_id}")
  return {"student_id": student_id, "course_id": course_id, "grade": grade}


def _set_status(ctx, student_id, status):
  if status not in STUDENT_STATUSES:
    raise ToolError(f"unknown status {status!r}; use one of {list(STUDENT_STATUSES)}")
  prev = _get_student(ctx, student_id)["status"]
  ctx.exec("UPDATE students SET status = ? WHERE id = ?", status, student_id)
  return {"student_id": student_id, "status": status, "previous": prev}


def _report_text(ctx, course_id) -> str:
  c = ctx.q1("SELECT * FROM courses WHERE id = ?", course_id)
  if c is None:
    raise ToolError(f"no course with id {course_id}; list_courses gives the ids")
  rows = [r["grade"] for r in ctx.q("SELECT grade FROM enrollments WHERE course_id = ?", course_id)]
  g = sorted(x for x in rows if x is not None)
  if not g:
    return f"{c['code']} {c['title']}, taught by {c['teacher']} in room {c['room']}: no graded work yet."
  mean = sum(g) / len(g)
  return (f"{c['code']} {c['title']}, taught by {c['teacher']} in room {c['room']}. {len(rows)} students enrolled, "
          f"{len(g)} of them graded so far; the mean grade is {mean:.2f} (median {g[len(g) // 2]}, lowest {g[0]}, "
          f"highest {g[-1]}), and {sum(1 for x in g if x < 60)} graded students are below 60.")


TOOLS = (
    B.list_tool("list_courses", "List the courses: items {id, code, title, teacher, room}.", table="courses",
                columns="id, code, title, teacher, room",
                filters=[B.Filter("code", "code = ?", B.p_str("exact course code, e.g. 'CS101'")),
                         B.Filter("teacher", "teacher LIKE ?", B.p_str("part of the teacher's name"), like=True)]),
    B.list_tool("list_enrollments", "List enrollments: items {student_id, course_id, grade} (grade null = not "
                "graded yet; the grade filters skip ungraded rows).", table="enrollments",
                columns="student_id, course_id, grade",
                filters=[B.Filter("course_id", "course_id = ?", B.p_int("only this course")),
                         B.Filter("student_id", "student_id = ?", B.p_int("only this student")),
                         B.Filter("min_grade", "grade >= ?", B.p_num("only grades >= this")),
                         B.Filter("below_grade", "grade < ?", B.p_num("only grades < this"))]),
    B.tool("get_student", "Get one student: {id, name, year, email, status}.", _get_student, required=("student_id",),
           student_id=B.p_int("student id")),
    B.tool("set_grade", "Set a student's grade in a course.", _set_grade, required=("student_id", "course_id", "grade"),
           student_id=B.p_int("student id"), course_id=B.p_int("course id"), grade=B.p_num("grade in [0, 100]")),
    B.tool("set_student_status", "Set a student's academic status ('active' or 'probation').", _set_status,
           required=("student_id", "status"), student_id=B.p_int("student id"),
           status=B.p_str("new status", STUDENT_STATUSES)),
    B.tool("course_report", "The registrar's summary of one course: {course_id, report} where report is a "
           "sentence of statistics.", lambda ctx, course_id: {"course_id": course_id,
                                                             "report": _report_text(ctx, course_id)},
           required=("course_id",), course_id=B.p_int("course id")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("school", "A school's students, courses and grades.", SCHEMA, generate, TOOLS)

PAGES = B.paging_prelude("fetch", tool="tool", kwargs="kw", rows="out", offset="off", page="p")

HONOUR = PAGES + """\
cands = sorted({e["student_id"] for e in fetch("list_enrollments", min_grade=90)})
best = []
for s in cands:
    g = [e["grade"] for e in fetch("list_enrollments", student_id=s) if e["grade"] is not None]
    if sum(g) >= 90 * len(g):
        best.append(s)
names = sorted(tools["get_student"](student_id=s)["name"] for s in best)
tools["write_file"](path="reports/honor_roll.txt", content="\\n".join(names) + "\\n")
print(len(cands), "candidates,", len(names), "on the roll")
tools["submit_answer"]()
"""

FAILING = PAGES + """\
cs101 = tools["list_courses"](code="CS101")["items"][0]
ids = sorted(e["student_id"] for e in fetch("list_enrollments", course_id=cs101["id"], below_grade=60))
print(len(ids), ids)
tools["submit_answer"](answer=ids)
"""

APPEALS = PAGES + """\
import csv, io, json
courses = {c["code"]: c["id"] for c in fetch("list_courses")}
applied = 0
for path in tools["list_files"](directory="appeals"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        d = json.loads(text)
        sid, code, new = d["student"], d["course"], d["requested"]
    elif path.endswith(".csv"):
        row = next(csv.DictReader(io.StringIO(text)))
        sid, code, new = row["student_id"], row["course_code"], row["requested_grade"]
    else:
        fields = dict(l.split(": ", 1) for l in text.splitlines() if ": " in l)
        sid, code, new = fields["Student ID"], fields["Course"], fields["Requested grade"]
    sid, cid, new = int(sid), courses[code.strip()], int(new)
    cur = tools["list_enrollments"](student_id=sid, course_id=cid)["items"][0]["grade"]
    if cur is None or new > cur:
        tools["set_grade"](student_id=sid, course_id=cid, grade=new)
        applied += 1
print(applied, "appeals applied")
tools["submit_answer"]()
"""

BEST = PAGES + """\
import re
means = {}
for c in fetch("list_courses"):
    rep = tools["course_report"](course_id=c["id"])["report"]
    m = re.search(r"mean grade is (\\d+(?:\\.\\d+)?)", rep)
    if m:
        means[c["code"]] = float(m.group(1))
best = min(means, key=lambda k: (-means[k], k))
print(best, means[best])
tools["submit_answer"](answer=best)
"""

PROBATION = PAGES + """\
from collections import Counter
fails = Counter(e["student_id"] for e in fetch("list_enrollments", below_grade=60))
flagged = sorted(s for s, k in fails.items() if k >= 2)
for s in flagged:
    tools["set_student_status"](student_id=s, status="probation")
tools["write_file"](path="reports/probation.txt", content="".join(f"{s}\\n" for s in flagged))
print(len(flagged), "students on probation")
tools["submit_answer"]()
"""


def _honour(ctx):
  return [r["name"] for r in ctx.q(
      "SELECT s.name FROM enrollments e JOIN students s ON s.id = e.student_id WHERE e.grade IS NOT NULL "
      "GROUP BY s.id HAVING SUM(e.grade) >= 90 * COUNT(e.grade) ORDER BY s.name")]


def _lines(ctx, rel):
  text = ctx.read(rel)
  return None if text is None else [line.strip() for line in text.splitlines() if line.strip()]


def _grades(ctx):
  return {(r["student_id"], r["course_id"]): r["grade"] for r in ctx.q("SELECT * FROM enrollments")}


def _appeals_expected(ctx):
  want = _grades(ctx)
  codes = {r["code"]: r["id"] for r in ctx.q("SELECT id, code FROM courses")}
  for rel in ctx.files("appeals"):
    d = read_records(rel, ctx.read(rel))[0]
    if rel.endswith(".json"):
      sid, code, new = d["student"], d["course"], d["requested"]
    elif rel.endswith(".csv"):
      sid, code, new = d["student_id"], d["course_code"], d["requested_grade"]
    else:
      sid, code, new = d["Student ID"], d["Course"], d["Requested grade"]
    key = (int(sid), codes[code])
    want[key] = max(want[key], int(new))
  return want


def _best(ctx):
  means = {}
  for c in ctx.q("SELECT id, code FROM courses"):
    m = re.search(r"mean grade is (\d+(?:\.\d+)?)", _report_text(ctx, c["id"]))
    if m:
      means[c["code"]] = float(m.group(1))
  return min(means, key=lambda k: (-means[k], k))


def _probation(ctx):
  return [r["student_id"] for r in ctx.q("SELECT student_id FROM enrollments WHERE grade < 60 GROUP BY student_id "
                                         "HAVING COUNT(*) >= 2 ORDER BY student_id")]


def _probation_check(ctx, e, a):
  on = [r["id"] for r in ctx.q("SELECT id FROM students WHERE status = 'probation' ORDER BY id")]
  return on == e and _lines(ctx, "reports/probation.txt") == [str(s) for s in e]


TASKS = [
    B.Task(DOMAIN, "honor_roll_report",
           "Write reports/honor_roll.txt: the names of all students whose average grade over their graded "
           "courses is at least 90, one name per line, sorted alphabetically.", (HONOUR,), _honour,
           check=lambda ctx, e, a: _lines(ctx, "reports/honor_roll.txt") == sorted(e),
           wrong=(">= 90 * len(g)", "> 90 * len(g)")),
    B.Task(DOMAIN, "failing_cs101",
           "Which students are failing CS101, i.e. have a grade below 60 in it? Enrollments without a grade do "
           "not count. Submit the list of their student ids.", (FAILING,),
           lambda ctx: [r["student_id"] for r in ctx.q(
               "SELECT e.student_id FROM enrollments e JOIN courses c ON c.id = e.course_id "
               "WHERE c.code = 'CS101' AND e.grade < 60")],
           answer="set", wrong=("below_grade=60", "below_grade=61"),
           conditions=(("CS101", ('course_id=cs101["id"], ', '')),)),
    B.Task(DOMAIN, "apply_grade_appeals",
           "Apply the grade appeals in appeals/ (one appeal per file; the files do not all use the same format): "
           "set the student's grade in that course to the requested grade, but only when the requested grade is "
           "higher than the current one. Change no other grade.", (APPEALS,), _appeals_expected,
           check=lambda ctx, e, a: _grades(ctx) == e, wrong=("if cur is None or new > cur:", "if True:"),
           tags=("explore",)),
    B.Task(DOMAIN, "best_course_average",
           "Which course has the highest mean grade over its graded enrollments, as the registrar's course "
           "reports state it? Submit the course code (on a tie, the alphabetically first code).", (BEST,), _best,
           answer="text", wrong=("best = min(means, key=lambda k: (-means[k], k))",
                                 "best = sorted(means, key=lambda k: (-means[k], k))[1]"), tags=("errors",)),
    B.Task(DOMAIN, "probation_report",
           "Put on probation every student with at least two graded courses below 60: set their status to "
           "'probation' and write reports/probation.txt listing their student ids, one per line in increasing "
           "order. Change no other student's status.", (PROBATION,), _probation, check=_probation_check,
           wrong=("if k >= 2", "if k >= 1"), tags=("writeback",)),
]
