"""``serve/scheduler.py``: the batching policy is only an admission rule (``schedule``), tested
on stand-in rows and tasks whose jobs are built; the served results of both policies are
compared on the tiny model in ``test_rows.py``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fish_core.serve.limits import Limits  # noqa: E402
from fish_core.serve.scheduler import Scheduler, Task  # noqa: E402


class Rows:
    """What ``schedule`` reads of ``JobRows``: its busy rows and its free ones."""

    def __init__(self, rows: int, busy: int):
        self.rows, self.busy = rows, busy

    def __len__(self) -> int:
        return self.busy

    @property
    def free(self) -> int:
        return self.rows - self.busy


class Job:
    def cancel(self) -> None:
        pass


def queued(scheduler: Scheduler, n: int) -> list[Task]:
    tasks = [Task(None, lambda kind, value: None, 60.0) for _ in range(n)]
    for task in tasks:
        task.job = Job()  # built: ``schedule`` takes it as it is
        scheduler._queue.append(task)
    return tasks


def scheduler(batching: str) -> Scheduler:
    return Scheduler(model=None, voices=None, limits=Limits(), max_batch=4, batching=batching)


def test_continuous_admits_whenever_rows_are_free():
    s = scheduler("continuous")
    tasks = queued(s, 6)
    assert s.schedule(None, Rows(4, 0)) == tasks[:4]
    assert s.schedule(None, Rows(4, 3)) == tasks[4:5]
    assert s.schedule(None, Rows(4, 4)) == []
    assert s.waiting == 1


def test_static_admits_a_round_only_when_no_row_is_busy():
    s = scheduler("static")
    tasks = queued(s, 6)
    assert s.schedule(None, Rows(4, 1)) == []  # a round is running: nobody joins it
    assert s.schedule(None, Rows(4, 0)) == tasks[:4]  # the next round, together, from the front
    assert s.schedule(None, Rows(4, 0)) == tasks[4:]


def test_cancelled_and_timed_out_tasks_do_not_join():
    s = scheduler("continuous")
    gone, late, ok = queued(s, 3)
    gone.cancel()
    late.deadline = 0.0
    errors = []
    late.emit = lambda kind, value: errors.append((kind, value.status))
    assert s.schedule(None, Rows(4, 0)) == [ok]
    assert errors == [("error", 504)]
