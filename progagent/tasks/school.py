"""School domain: students, courses and grades; grade appeals are workspace files, reports are written there."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

COURSES = (("CS101", "Programming I"), ("CS201", "Data Structures"), ("MA101", "Calculus I"),
           ("MA201", "Linear Algebra"), ("PH101", "Physics I"), ("CH101", "Chemistry I"), ("BI101", "Biology I"),
           ("EN101", "Academic Writing"), ("HI101", "World History"), ("EC101", "Economics I"))

SCHEMA = """
CREATE TABLE courses (id INTEGER PRIMARY KEY, code TEXT, title TEXT, teacher TEXT, room TEXT);
CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT, year INTEGER, email TEXT, address TEXT);
CREATE TABLE enrollments (id INTEGER PRIMARY KEY, student_id INTEGER, course_id INTEGER, grade INTEGER);
CREATE INDEX enr_course ON enrollments(course_id);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  teachers = B.unique_names(rng, len(COURSES))
  B.insert_rows(ctx, "courses", [{"id": i + 1, "code": c, "title": t, "teacher": teachers[i],
                                  "room": f"R{rng.randint(100, 399)}"} for i, (c, t) in enumerate(COURSES)])
  n = 500 * f
  names = B.unique_names(rng, n)
  B.insert_rows(ctx, "students", [{"id": i + 1, "name": nm, "year": rng.randint(1, 4), "email": B.email_of(nm, i + 1),
                                   "address": f"{rng.randint(1, 99)} {rng.choice(B.LAST)} Lane"}
                                  for i, nm in enumerate(names)])
  enr = []
  for s in range(1, n + 1):
    ability = rng.gauss(75, 10)
    for c in rng.sample(range(1, len(COURSES) + 1), rng.randint(4, 6)):
      g = None if rng.random() < 0.1 else max(20, min(100, round(ability + rng.gauss(0, 6))))
      enr.append({"id": len(enr) + 1, "student_id": s, "course_id": c, "grade": g})
  for e in enr:   # student 1 averages exactly 90 (the honour-roll boundary)
    if e["student_id"] == 1:
      e["grade"] = 90
  mine = [e for e in enr if e["student_id"] == 2 and e["course_id"] == 1]   # CS101 always has ungraded work
  if mine:
    mine[0]["grade"] = None
  else:
    enr.append({"id": len(enr) + 1, "student_id": 2, "course_id": 1, "grade": None})
  B.insert_rows(ctx, "enrollments", enr)
  B.write_docs(ctx, rng, "school", ["grading", "appeals", "calendar", "honour_roll", "conduct"])
  graded = [e for e in enr if e["grade"] is not None and 40 <= e["grade"] <= 95 and e["student_id"] > 2]
  for j, e in enumerate(rng.sample(graded, B.n_data_files(f))):
    new = e["grade"] + rng.randint(1, 5) if j % 2 == 0 else e["grade"] - rng.randint(1, 10)
    ctx.write(f"appeals/appeal_{j + 1:03d}.txt", f"Student ID: {e['student_id']}\nCourse: "
              f"{COURSES[e['course_id'] - 1][0]}\nRequested grade: {new}\n\n{B.sentence(rng, 10)}\n")


def _list_enrollments(ctx, course_id):
  if ctx.q1("SELECT id FROM courses WHERE id = ?", course_id) is None:
    raise ToolError(f"no course with id {course_id}; list_courses gives the ids")
  return ctx.q("SELECT student_id, grade FROM enrollments WHERE course_id = ? ORDER BY id", course_id)


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


TOOLS = (
    B.tool("list_courses", "List the courses: [{id, code, title, teacher}].",
           lambda ctx: ctx.q("SELECT id, code, title, teacher FROM courses ORDER BY id")),
    B.tool("list_enrollments", "List a course's enrollments: [{student_id, grade}] (grade null = not graded "
           "yet).", _list_enrollments, required=("course_id",), course_id=B.p_int("course id")),
    B.tool("get_student", "Get one student.", _get_student, required=("student_id",), student_id=B.p_int("student id")),
    B.tool("set_grade", "Set a student's grade in a course.", _set_grade, required=("student_id", "course_id", "grade"),
           student_id=B.p_int("student id"), course_id=B.p_int("course id"), grade=B.p_num("grade in [0, 100]")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("school", "A school's students, courses and grades.", SCHEMA, generate, TOOLS)

HONOUR = """\
from collections import defaultdict
grades = defaultdict(list)
for c in tools["list_courses"]():
    for e in tools["list_enrollments"](course_id=c["id"]):
        if e["grade"] is not None:
            grades[e["student_id"]].append(e["grade"])
best = [s for s, g in grades.items() if sum(g) / len(g) >= 90]
names = sorted(tools["get_student"](student_id=s)["name"] for s in best)
tools["write_file"](path="reports/honor_roll.txt", content="\\n".join(names) + "\\n")
print(len(names), "students")
tools["submit_answer"]()
"""

FAILING = """\
cs101 = next(c for c in tools["list_courses"]() if c["code"] == "CS101")
n = sum(1 for e in tools["list_enrollments"](course_id=cs101["id"]) if e["grade"] is not None and e["grade"] < 60)
print(n)
tools["submit_answer"](answer=n)
"""

APPEALS = """\
courses = {c["code"]: c["id"] for c in tools["list_courses"]()}
for path in tools["list_files"](directory="appeals"):
    lines = tools["read_file"](path=path)["content"].strip().splitlines()
    fields = dict(l.split(": ", 1) for l in lines if ": " in l)
    sid, cid, new = int(fields["Student ID"]), courses[fields["Course"]], float(fields["Requested grade"])
    cur = next(e["grade"] for e in tools["list_enrollments"](course_id=cid) if e["student_id"] == sid)
    if new > cur:
        tools["set_grade"](student_id=sid, course_id=cid, grade=new)
tools["submit_answer"]()
"""

BEST = """\
avg = {}
for c in tools["list_courses"]():
    g = [e["grade"] for e in tools["list_enrollments"](course_id=c["id"]) if e["grade"] is not None]
    avg[c["code"]] = sum(g) / len(g)
best = min(avg, key=lambda k: (-round(avg[k], 6), k))
print(best, avg[best])
tools["submit_answer"](answer=best)
"""


def _honour(ctx):
  return [r["name"] for r in ctx.q(
      "SELECT s.name FROM enrollments e JOIN students s ON s.id = e.student_id WHERE e.grade IS NOT NULL "
      "GROUP BY s.id HAVING SUM(e.grade) >= 90 * COUNT(e.grade) ORDER BY s.name")]


def _honour_check(ctx, e, a):
  text = ctx.read("reports/honor_roll.txt")
  return text is not None and [line.strip() for line in text.splitlines() if line.strip()] == sorted(e)


def _grades(ctx):
  return {(r["student_id"], r["course_id"]): r["grade"] for r in ctx.q("SELECT * FROM enrollments")}


def _appeals_expected(ctx):
  want = _grades(ctx)
  codes = {c: i + 1 for i, (c, _) in enumerate(COURSES)}
  for rel in ctx.files("appeals"):
    fields = dict(line.split(": ", 1) for line in ctx.read(rel).strip().splitlines() if ": " in line)
    key = (int(fields["Student ID"]), codes[fields["Course"]])
    want[key] = max(want[key], float(fields["Requested grade"]))
  return want


TASKS = [
    B.Task(DOMAIN, "honor_roll_report",
           "Write reports/honor_roll.txt: the names of all students whose average grade over their graded "
           "courses is at least 90, one name per line, sorted alphabetically.", (HONOUR,), _honour,
           check=_honour_check, wrong=(">= 90", "> 90")),
    B.Task(DOMAIN, "failing_cs101",
           "How many students are failing CS101, i.e. have a grade below 60? Enrollments without a grade do "
           "not count.", (FAILING,),
           lambda ctx: ctx.scalar("SELECT COUNT(*) FROM enrollments WHERE course_id = 1 AND grade < 60"),
           answer="int", wrong=('e["grade"] is not None and e["grade"] < 60', '(e["grade"] or 0) < 60')),
    B.Task(DOMAIN, "apply_grade_appeals",
           "Apply the grade appeals in appeals/: set the student's grade in that course to the requested grade, "
           "but only when the requested grade is higher than the current one.", (APPEALS,), _appeals_expected,
           check=lambda ctx, e, a: _grades(ctx) == e, wrong=("if new > cur:", "if True:")),
    B.Task(DOMAIN, "best_course_average",
           "Which course has the highest average grade over its graded enrollments? Submit the course code "
           "(on a tie, the alphabetically first code).", (BEST,),
           lambda ctx: ctx.scalar("SELECT c.code FROM enrollments e JOIN courses c ON c.id = e.course_id WHERE "
                                  "e.grade IS NOT NULL GROUP BY c.id ORDER BY -ROUND(AVG(e.grade), 6), c.code LIMIT 1"),
           answer="text", wrong=("best = min(avg, key=lambda k: (-round(avg[k], 6), k))",
                                 "best = sorted(avg, key=lambda k: (-round(avg[k], 6), k))[1]")),
]
