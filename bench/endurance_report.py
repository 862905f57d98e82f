"""The endurance run's table, one per store (Markdown)."""

from __future__ import annotations

from typing import Any

LABELS = {
    "connections": "store connections", "worker_fds": "worker fds (sum)", "worker_threads": "worker threads (sum)",
    "worker_rss_mb": "worker RSS MB (sum)", "server_fds": "server fds", "server_threads": "server threads",
    "server_rss_mb": "server RSS MB", "redis_mb": "Redis MB less held jobs",
}


def table(result: dict[str, Any]) -> str:
    if "crashed" in result:
        return f"## {result['store']}: FAILED (the run itself crashed: {result['crashed']})"
    head = f"## {result['store']}: {'passed' if result['passed'] else 'FAILED'} ({result['minutes']:g} min)"
    lines = [head, "", "| figure | at ~1 min | at the end | last third vs bound | |", "|---|---:|---:|---:|---|"]
    for name, label in LABELS.items():
        first, last = result["at_1min"].get(name), result["end"].get(name)
        if first is None and last is None:
            continue
        bound = result["bounds"].get(name)
        limit = f"{bound['tail']:g} <= {bound['limit']:g}" if bound else "–"
        verdict = "" if bound is None else ("ok" if bound["ok"] else "GREW")
        lines.append(f"| {label} | {first:g} | {last:g} | {limit} | {verdict} |")
    o = result["outcomes"]
    lines += ["", f"outcomes: {o['enqueued']:,} enqueued, {o['recorded_once']:,} ran to the end once, "
              f"{o['lost']} lost, {o['twice']} twice, {o['unfinished']} left unfinished or dead; "
              f"store errors logged: {result['errors_logged']}; "
              f"client errors: {result['client_errors']}"]
    for line in result["log_errors"][:5] + result["client_error_lines"][:5]:
        lines.append(f"    {line[:200]}")
    if not result["passed"]:
        lines.append(f"logs: {result['logs']}")
    return "\n".join(lines)
