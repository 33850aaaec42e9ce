"""How many CPU threads torch runs on: the one place that decides (CLI, serve, the nodes).

A decode step at batch 1 is a few hundred small parallel regions per frame, and an OpenMP region
waits for its slowest thread. A thread on a core another process is using stalls the region
until the OS schedules it (milliseconds), so more threads than free cores is far worse than too
few: on the shared 2-core machine the tiny model decoded 2.8 frames/s with 2 threads against 141
with 1 while other processes kept the cores busy (docs/cpu.md). torch's own default is every
logical CPU, busy or not, hyper-threads included.

``default_threads()`` is therefore the physical cores this process may run on (the affinity
mask, SMT siblings counted once: the GEMVs are memory-bound, a sibling adds no bandwidth) less
the cores other processes keep busy (the 1-minute load average, where the OS has one), at least
1. It is read once, at start-up (``apply``): a server keeps its threads. ``OMP_NUM_THREADS`` or
``SAILFISH_THREADS`` set by the user, or ``--threads N`` / the Model Loader's ``threads``,
override it.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

log = logging.getLogger("sailfish.engine")
ENV = "SAILFISH_THREADS"
CPU_SYSFS = Path("/sys/devices/system/cpu")


def allowed_cpus() -> list[int]:
    """Logical CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def physical_cores(cpus: list[int] | None = None, sysfs: Path = CPU_SYSFS) -> int:
    """Physical cores among ``cpus``: logical CPUs sharing a (package, core) count once (Linux
    sysfs); where the topology cannot be read, every logical CPU counts."""
    cpus = allowed_cpus() if cpus is None else cpus
    cores = set()
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(),
                       (topology / "core_id").read_text().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(1, len(cores))


def busy_cores() -> float:
    """Cores other processes keep busy: the 1-minute load average (0 where there is none)."""
    try:
        return max(0.0, os.getloadavg()[0])
    except (AttributeError, OSError):
        return 0.0


def default_threads(cores: int | None = None, busy: float | None = None) -> int:
    """The free physical cores: ``cores`` (``physical_cores()``) less the ``busy`` ones
    (``busy_cores()``, rounded to the nearest), at least 1."""
    cores = physical_cores() if cores is None else cores
    busy = busy_cores() if busy is None else busy
    return max(1, min(cores, cores - math.floor(busy + 0.5)))


def parse_threads(value) -> int | None:
    """``--threads`` / ``threads`` as given: None, 0 or "auto" → None (the default); a
    positive integer → itself; anything else is an error naming the field."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    text = str(value).strip()
    if isinstance(value, bool) or not (isinstance(value, int) or text.isdigit()) or int(value) < 0:
        raise ValueError(f"threads must be a positive integer or 'auto' (0), got {value!r}")
    return int(value) or None


def choose(value=None, environ=os.environ) -> tuple[int, str]:
    """(threads, why): ``value`` if given (``parse_threads``), else ``SAILFISH_THREADS``, else
    ``OMP_NUM_THREADS`` (torch already follows it), else ``default_threads()``."""
    n = parse_threads(value)
    if n:
        return n, "asked for"
    for name in (ENV, "OMP_NUM_THREADS"):
        if environ.get(name, "").strip():
            return parse_threads(environ[name]) or default_threads(), f"${name}"
    cores, busy = physical_cores(), busy_cores()
    return default_threads(cores, busy), f"{cores} physical cores, load {busy:.1f}"


def too_many(n: int, cores: int | None = None) -> str | None:
    """What is wrong with ``n`` threads when it is more than the physical cores this process
    may use (every thread then waits on the others), or None."""
    cores = physical_cores() if cores is None else cores
    if n <= cores:
        return None
    return (f"warning: {n} CPU threads on {cores} physical core{'' if cores == 1 else 's'}: "
            "more threads than free cores is far slower (each step waits on the slowest "
            f"thread); the automatic choice here is {default_threads(cores)} (threads auto, "
            "docs/cpu.md)")


WARNED: set[int] = set()  # counts already warned about (a process warns once per count)


def apply(value=None) -> int:
    """Set torch's intra-op threads (``choose``) and return how many; logged with the reason,
    and a warning (once) for more threads than physical cores (``too_many``). Process-wide:
    call it before the model runs (a thread that already ran parallel work keeps its count)."""
    import torch

    n, why = choose(value)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    log.info("Sailfish: %d CPU thread%s (%s)", n, "" if n == 1 else "s", why)
    warning = too_many(n) if n not in WARNED else None
    if warning:
        WARNED.add(n)
        log.warning(warning)
    return n
