"""Figures the reliability suites record, aggregated into docs/reliability.md.

Every suite calls record() once per scenario it survived (or failed); the report
generator (tools/reliability_report.py) reads the JSON lines back.  The file
lives under build/reliability/ unless RELIABILITY_FIGURES names another path.
"""
import json
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_PATH = os.path.join(ROOT, "build", "reliability", "figures.jsonl")

# categories shown in the report, in this order
CATEGORIES = ("interruption", "concurrency", "fault", "fuzz", "secrets")


def figures_path():
    """Where figures are appended."""
    return os.environ.get("RELIABILITY_FIGURES", DEFAULT_PATH)


def record(category, scenario, survived, count=1, data_lost=0, detail=""):
    """Append one figure.

    category  one of CATEGORIES
    scenario  short name, e.g. "SIGKILL during volume grow" or "vm arguments"
    survived  True when the scenario ended with a clear result and a world the next run converges
    count     how many cases the scenario covered (kill points, generated inputs, ...)
    data_lost number of volumes whose checksum changed / records lost (must be 0)
    """
    if category not in CATEGORIES:
        raise ValueError(f"category must be one of {CATEGORIES}, got {category!r}")
    entry = {
        "category": category,
        "scenario": str(scenario),
        "survived": bool(survived),
        "count": int(count),
        "data_lost": int(data_lost),
        "detail": str(detail),
        "time": time.time(),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
    }
    path = figures_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry


def read(path=None):
    """All figures recorded so far (list of dicts); a missing file is an empty list."""
    path = path or figures_path()
    try:
        with open(path, encoding="utf-8") as stream:
            return [json.loads(line) for line in stream if line.strip()]
    except FileNotFoundError:
        return []
