"""What a V1 client does between calls: build the run input from the worker
detail, poll a run until it completes, page its results. Written the way the V1
documentation teaches it, with every loop bounded in count and in time.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Callable

# V1 integer statuses.
READY, RUNNING, SUCCEEDED, FAILED, ABORTING = 1, 2, 3, 4, 5
COMPLETED = (SUCCEEDED, FAILED)

# The 13 fields of a V1 run record and their types.
RUN_RECORD = {
    "status": int,
    "err_msg": str,
    "slug": str,
    "scraper_title": str,
    "scraper_slug": str,
    "results": int,
    "usage": str,
    "started_at": int,
    "finished_at": int,
    "duration": int,
    "origin": str,
    "traffic": int,
    "version": str,
}

ROW_ID = "__coreclaw_data_id__"
VERSION = re.compile(r"^v\d+\.\d+\.\d+$")
DECIMAL = re.compile(r"^\d+(\.\d+)?$")


def check_run_record(rec: dict[str, Any]) -> None:
    """A V1 run record: the 13 documented fields with their V1 types."""
    missing = set(RUN_RECORD) - set(rec)
    assert not missing, f"run record lacks {sorted(missing)}: {rec}"
    for key, typ in RUN_RECORD.items():
        value = rec[key]
        assert isinstance(value, typ) and not (typ is int and isinstance(value, bool)), (
            f"run record field {key} should be {typ.__name__}, got {value!r}"
        )
    assert rec["status"] in (READY, RUNNING, SUCCEEDED, FAILED, ABORTING), rec
    assert DECIMAL.match(rec["usage"]), f"usage is not a decimal string: {rec['usage']!r}"
    assert rec["started_at"] < 10**11, f"started_at is not in seconds: {rec['started_at']}"
    if rec["status"] in COMPLETED:
        assert rec["finished_at"] >= rec["started_at"] > 0, rec
    else:
        assert rec["finished_at"] == 0 and rec["duration"] == 0, rec


def system_from_detail(detail: dict[str, Any], proxy_region: str = "US") -> dict[str, Any]:
    """`input.parameters.system` from `data.parameters.system` of the worker detail.

    The detail calls the memory field `memory_bytes` (one contract variant `memory`);
    the start-run body calls it `memory`. Both are MB.
    """
    system = dict(detail["parameters"]["system"])
    if "memory_bytes" in system:
        system["memory"] = system.pop("memory_bytes")
    assert "memory" in system, f"worker detail has no memory setting: {system}"
    system["proxy_region"] = proxy_region
    return system


_EMPTY = {"array": [], "string": "", "integer": 0, "number": 0, "boolean": False, "object": {}}


def custom_from_descriptor(detail: dict[str, Any], **values: Any) -> dict[str, Any]:
    """`input.parameters.custom` built from the descriptor `data.parameters.custom`:
    each declared parameter gets the given value, else its default; required ones
    without a default get an empty value of their type. Undeclared names are an error.
    """
    props = detail["parameters"]["custom"]["properties"]
    declared = {p["name"] for p in props}
    unknown = set(values) - declared
    assert not unknown, f"parameters {sorted(unknown)} are not in the descriptor {sorted(declared)}"
    custom: dict[str, Any] = {}
    for p in props:
        name = p["name"]
        if name in values:
            custom[name] = values[name]
        elif "default" in p:
            custom[name] = p["default"]
        elif p.get("required"):
            custom[name] = _EMPTY.get(p.get("type"), None)
    return custom


def build_input(detail: dict[str, Any], **values: Any) -> dict[str, Any]:
    return {
        "parameters": {
            "system": system_from_detail(detail),
            "custom": custom_from_descriptor(detail, **values),
        }
    }


class Poller:
    """Polls `run/detail` until the run is completed, with backoff.

    Between two polls it advances the simulated clock (doubling, the sandbox's
    stand-in for waiting) and sleeps a little real time (doubling too).
    """

    def __init__(self, sandbox, sdk) -> None:
        self.sandbox = sandbox
        self.sdk = sdk

    def detail(self, run_slug: str) -> dict[str, Any]:
        rec = self.sdk.post("run/detail", {"run_slug": run_slug})
        check_run_record(rec)
        assert rec["slug"] == run_slug, rec
        return rec

    def until(
        self,
        run_slug: str,
        done: Callable[[dict[str, Any]], bool] = lambda r: r["status"] in COMPLETED,
        *,
        first_step: float = 1.0,
        max_step: float = 64.0,
        max_polls: int = 40,
        max_seconds: float = 30.0,
    ) -> tuple[dict[str, Any], list[int]]:
        """Poll until `done(record)`; returns the last record and the statuses seen."""
        seen: list[int] = []
        step, pause = first_step, 0.005
        deadline = time.monotonic() + max_seconds
        for _ in range(max_polls):
            rec = self.detail(run_slug)
            if not seen or seen[-1] != rec["status"]:
                seen.append(rec["status"])
            if done(rec):
                return rec, seen
            assert time.monotonic() < deadline, f"run {run_slug} not done after {max_seconds}s: {seen}"
            self.sandbox.advance(step)
            time.sleep(pause)
            step, pause = min(step * 2, max_step), min(pause * 2, 0.2)
        raise AssertionError(f"run {run_slug} not done after {max_polls} polls: statuses {seen}")


def check_result_page(page: dict[str, Any], page_index: int, page_size: int) -> None:
    for key in ("count", "headers", "list"):
        assert key in page, f"result page lacks {key}: {sorted(page)}"
    for h in page["headers"]:
        assert set(h) >= {"key", "label", "format"}, f"V1 header needs key, label, format: {h}"
    if "page_index" in page:
        assert (page["page_index"], page["page_size"]) == (page_index, page_size), (
            f"page echo {page['page_index']}/{page['page_size']}, asked {page_index}/{page_size}"
        )
    keys = {h["key"] for h in page["headers"]} | {ROW_ID}
    for row in page["list"]:
        assert set(row) <= keys, f"row keys {sorted(row)} not in headers {sorted(keys)}"


def page_with_sdk(sdk, run_slug: str, limit: int, expected: int) -> list[dict[str, Any]]:
    """All rows through `list_results(limit, offset)`, offset += limit until a short page."""
    rows: list[dict[str, Any]] = []
    offset = 0
    for _ in range(expected // limit + 2):
        page = sdk.run(run_slug).list_results(limit=limit, offset=offset)
        check_result_page(page, offset // limit + 1, limit)
        assert page["count"] == expected, f"count {page['count']} != {expected} at offset {offset}"
        rows += page["list"]
        if len(page["list"]) < limit:
            return rows
        offset += limit
    raise AssertionError(f"paging with limit {limit} did not end after {expected} rows")


def assert_each_row_once(rows: list[dict[str, Any]], expected: int) -> None:
    ids = [r.get(ROW_ID) for r in rows]
    assert None not in ids, "a row lacks __coreclaw_data_id__"
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, f"{len(dupes)} rows arrived more than once, e.g. {dupes[:3]}"
    assert len(ids) == expected, f"{len(ids)} rows arrived, run has {expected}"


def without_ids(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != ROW_ID} for r in rows]


def http_error_envelope(exc) -> dict[str, Any]:
    """The V1 envelope in a `CoreClawHTTPError` (the SDK puts the body in the message)."""
    text = str(exc)
    body = text.split(": ", 1)[1] if ": " in text else text
    env = json.loads(body)
    assert set(env) >= {"code", "message", "data"}, f"not a V1 envelope: {env}"
    assert env["data"] is None, f"V1 errors carry data null: {env}"
    return env
