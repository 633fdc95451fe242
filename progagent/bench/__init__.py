"""Outside benchmarks and one evaluation command (issue 29, items 6-8).

  suites.py      the suites (a function returning task records per benchmark) and their registry
  base.py        the records: BenchTask, Suite
  toolathlon.py  Toolathlon's ten local tasks, read from a checkout the user supplies
  policies.py    scripted, checkpoint and endpoint policies
  evaluate.py    `python -m progagent.bench.evaluate --suite ... --harness ... --policy ...`
"""
