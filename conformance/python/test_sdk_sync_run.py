"""A synchronous run (`wait_for_finish=True`) and its result window
(`limit`/`offset` → `page_index`/`page_size`), through the gateway and, for
comparison, through the native V1 service.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

import v1flow

SMALL_PATH = "coreclaw/amazon-product-by-asin"
ROWS = 8  # the worker's default
MAX_SECONDS = 60.0


def run_sync(sandbox, client, **kwargs) -> dict:
    """Start a sync run in a thread and move the simulated clock until it answers."""
    out: dict = {}

    def call() -> None:
        try:
            out["data"] = client.scraper(SMALL_PATH).run(wait_for_finish=True, **kwargs)
        except BaseException as e:  # reported below, in the test's thread
            out["error"] = e

    t = threading.Thread(target=call, daemon=True)
    t.start()
    deadline = time.monotonic() + MAX_SECONDS
    step = 0.5
    while t.is_alive():
        assert time.monotonic() < deadline, f"sync run did not answer within {MAX_SECONDS}s"
        sandbox.advance(step)
        step = min(step * 2, 30.0)
        t.join(0.05)
    if "error" in out:
        raise out["error"]
    return out["data"]


@pytest.fixture(scope="module")
def detail(sandbox):
    r = httpx.get(f"{sandbox.gateway}/api/scraper", params={"slug": SMALL_PATH}, timeout=30.0)
    return r.json()["data"]


@pytest.fixture(scope="module")
def run_input(detail):
    return v1flow.build_input(detail)


def check_sync_shape(data: dict, page_index: int, page_size: int) -> None:
    assert set(data) >= {
        "run_slug",
        "run_status",
        "error_message",
        "result_message",
        "execution_start_timestamp",
        "execution_end_timestamp",
        "running_duration",
        "results",
    }, sorted(data)
    assert data["run_status"] == "completed", data["run_status"]
    assert data["error_message"] == "", data
    start, end = data["execution_start_timestamp"], data["execution_end_timestamp"]
    assert start > 10**12 and end >= start, f"sync timestamps are ms: {start}, {end}"
    assert isinstance(data["running_duration"], int), data
    res = data["results"]
    v1flow.check_result_page(res, page_index, page_size)
    assert res["count"] == ROWS, res["count"]


@pytest.mark.parametrize(
    "limit,offset,expected_rows",
    [(10, 0, ROWS), (3, 3, 3), (3, 6, 2), (4, 8, 0)],
    ids=["default-window", "page-2", "short-page", "past-the-end"],
)
def test_sync_run_returns_the_result_window(
    sandbox, sdk, poller, detail, run_input, limit, offset, expected_rows
):
    # No `version`: as the SDK's README shows, the latest version is used.
    data = run_sync(sandbox, sdk, input=run_input, limit=limit, offset=offset)
    check_sync_shape(data, offset // limit + 1, limit)
    window = data["results"]["list"]
    assert len(window) == expected_rows, f"window has {len(window)} rows"

    rec = poller.detail(data["run_slug"])
    assert rec["status"] == v1flow.SUCCEEDED and rec["results"] == ROWS, rec
    assert rec["version"] == detail["version"], f"latest version expected: {rec}"
    assert data["execution_start_timestamp"] // 1000 == rec["started_at"], (data, rec)
    page = sdk.run(data["run_slug"]).list_results(limit=limit, offset=offset)
    assert window == page["list"], "the sync window differs from the same page read later"


def test_sync_run_matches_the_native_v1_service(sandbox, sdk, legacy_sdk, run_input):
    ours = run_sync(sandbox, sdk, input=run_input, limit=5, offset=5)
    theirs = run_sync(sandbox, legacy_sdk, input=run_input, limit=5, offset=5)
    assert set(ours) == set(theirs), f"keys: {sorted(ours)} vs native {sorted(theirs)}"
    assert set(ours["results"]) == set(theirs["results"])
    assert ours["results"]["headers"] == theirs["results"]["headers"]
    assert v1flow.without_ids(ours["results"]["list"]) == v1flow.without_ids(theirs["results"]["list"])
