"""Files every stage writes: atomic JSON and binary files, JSON-lines append, read and truncate.

A killed process never leaves a half-written file under a final name: `atomic_write` writes a temporary file
in the same folder (so the rename stays on one filesystem) and renames it over the target (os.replace is
atomic on POSIX). JSON-lines files are append-only logs; a killed writer can leave a truncated last line,
which `read_jsonl` skips, and a run resumed from an earlier checkpoint drops the rows written after it
(`truncate_jsonl`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any, Callable, IO, Iterable, Iterator, Mapping


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, fsync: bool = False,
                 permissions: int = 0o644) -> Iterator[IO]:
  """Opens a temporary file beside `path` and renames it over `path` when the block ends without an error.

  Args:
    path: the final file.
    mode: 'w' (text, UTF-8) or 'wb' (bytes).
    fsync: flush the data to disk before the rename (files another process polls, e.g. a verdict).
    permissions: the file's mode bits (0o600 for a file only its owner may read).
  Yields:
    The open temporary file.
  Raises:
    ValueError: a mode other than 'w' / 'wb'. Whatever the block raises; the temporary file is removed and
      `path` keeps its old content.
  """
  if mode not in ("w", "wb"):
    raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
  path = os.fspath(path)
  folder = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
  try:
    with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
      yield f
      if fsync:
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, permissions)
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      os.unlink(tmp)
    raise


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 1, sort_keys: bool = False,
               default: Callable[[Any], Any] | None = None, ensure_ascii: bool = True, fsync: bool = False,
               newline: bool = False, permissions: int = 0o644) -> None:
  """json.dump(obj) into `path` atomically (`atomic_write`); the keywords are json.dump's, `newline` ends the
  file with a line break, `permissions` are the file's mode bits.

  Raises:
    TypeError: obj is not JSON-serialisable (and `default` does not convert it); `path` is unchanged.
  """
  with atomic_write(path, fsync=fsync, permissions=permissions) as f:
    json.dump(obj, f, indent=indent, sort_keys=sort_keys, default=default, ensure_ascii=ensure_ascii)
    if newline:
      f.write("\n")


def read_json(path: str | os.PathLike) -> Any:
  """The JSON value in `path` (FileNotFoundError / json.JSONDecodeError as json raises them)."""
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def write_jsonl(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]], *, ensure_ascii: bool = True) -> None:
  """Writes `rows`, one JSON object a line, into `path` atomically (replacing what was there)."""
  with atomic_write(path) as f:
    for r in rows:
      f.write(json.dumps(r, ensure_ascii=ensure_ascii) + "\n")


def append_jsonl(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]], *, ensure_ascii: bool = True) -> None:
  """Appends `rows`, one JSON object a line, to `path` (created if missing)."""
  with open(path, "a", encoding="utf-8") as f:
    for r in rows:
      f.write(json.dumps(r, ensure_ascii=ensure_ascii) + "\n")


def read_jsonl(path: str | os.PathLike) -> list[dict]:
  """The JSON objects of a JSON-lines file; blank lines and a truncated line (a killed writer) are skipped."""
  rows = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if not line:
        continue
      try:
        rows.append(json.loads(line))
      except json.JSONDecodeError:
        continue
  return rows


def truncate_jsonl(path: str | os.PathLike, last_step: int | None, *, key: str = "step") -> None:
  """Keeps only the rows of `path` whose `key` is <= last_step (rows written after the checkpoint a run resumes
  from; they will be written again); last_step None drops every row. The kept lines are written back byte for
  byte (their encoding is the writer's); blank and truncated lines are dropped. A missing file is left missing."""
  if not os.path.exists(path):
    return
  kept = []
  if last_step is not None:
    with open(path, encoding="utf-8") as f:
      for line in f:
        try:
          row = json.loads(line)
        except json.JSONDecodeError:
          continue
        if int(row.get(key, -1)) <= int(last_step):
          kept.append(line if line.endswith("\n") else line + "\n")
  with atomic_write(path) as f:
    f.writelines(kept)
