"""Run lifecycle operations through the SDK's `post`: abort a long run, rerun a
finished one, run a saved task (created on the V2 side, since V1 cannot create
tasks).
"""

from __future__ import annotations

import httpx
import pytest
from coreclaw import CoreClawHTTPError

import v1flow

SLOW_PATH = "coreclaw/slow-site-crawler"
SMALL_PATH = "coreclaw/amazon-product-by-asin"
SMALL_V2_ID = "coreclaw~amazon-product-by-asin"


def detail_of(sandbox, slug: str) -> dict:
    r = httpx.get(f"{sandbox.gateway}/api/scraper", params={"slug": slug}, timeout=30.0)
    assert r.status_code == 200, r.text
    return r.json()["data"]


def test_abort_shows_status_5_then_completes(sandbox, sdk, legacy_sdk, poller):
    detail = detail_of(sandbox, SLOW_PATH)
    slug = sdk.scraper(SLOW_PATH).run(input=v1flow.build_input(detail), version=detail["version"])[
        "run_slug"
    ]
    running, _ = poller.until(slug, lambda r: r["status"] == v1flow.RUNNING)
    assert running["finished_at"] == 0, running

    assert sdk.post("scraper/abort", {"run_slug": slug}) is None, "abort answers data null"
    aborting = poller.detail(slug)
    assert aborting["status"] == v1flow.ABORTING, aborting
    assert aborting["finished_at"] == 0, aborting

    rec, seen = poller.until(slug)
    assert seen[0] == v1flow.ABORTING and seen[-1] == v1flow.FAILED, f"statuses after abort: {seen}"
    assert rec["err_msg"], f"an aborted run carries an err_msg: {rec}"
    assert rec["finished_at"] > 0, rec

    # Aborting a completed run is the documented abort failure (500 / 70002), as natively.
    for client in (sdk, legacy_sdk):
        with pytest.raises(CoreClawHTTPError) as exc:
            client.post("scraper/abort", {"run_slug": slug})
        assert exc.value.status_code == 500
        assert v1flow.http_error_envelope(exc.value)["code"] == 70002


@pytest.fixture(scope="module")
def small_run(sandbox, sdk, poller):
    detail = detail_of(sandbox, SMALL_PATH)
    run_input = v1flow.build_input(detail, max_items=6)
    slug = sdk.scraper(SMALL_PATH).run(input=run_input, version=detail["version"])["run_slug"]
    rec, _ = poller.until(slug)
    assert rec["status"] == v1flow.SUCCEEDED and rec["results"] == 6, rec
    return rec


def test_rerun_starts_a_new_run_with_the_same_input(sdk, poller, small_run, callback_url):
    data = sdk.post("rerun", {"run_slug": small_run["slug"], "callback_url": callback_url})
    assert set(data) == {"run_slug"}, data
    new = data["run_slug"]
    assert new != small_run["slug"]
    rec, seen = poller.until(new)
    assert seen[-1] == v1flow.SUCCEEDED, seen
    for key in ("scraper_slug", "scraper_title", "version", "results"):
        assert rec[key] == small_run[key], f"rerun {key}: {rec[key]!r} != {small_run[key]!r}"
    old_rows = v1flow.page_with_sdk(sdk, small_run["slug"], 10, 6)
    new_rows = v1flow.page_with_sdk(sdk, new, 10, 6)
    assert v1flow.without_ids(new_rows) == v1flow.without_ids(old_rows)


def test_rerun_requires_a_callback_url(sdk, small_run):
    with pytest.raises(CoreClawHTTPError) as exc:
        sdk.post("rerun", {"run_slug": small_run["slug"]})
    assert exc.value.status_code == 400
    assert v1flow.http_error_envelope(exc.value)["code"] == 4000


def test_task_run(sandbox, sdk, poller, callback_url):
    detail = detail_of(sandbox, SMALL_PATH)
    task_input = {"parameters": {"custom": v1flow.custom_from_descriptor(detail, max_items=4)}}
    created = sandbox.v2(
        "POST",
        "/api/v2/worker-tasks",
        json={"worker_id": SMALL_V2_ID, "title": "conformance task", "input": task_input},
    )
    task_slug = created["data"]["slug"]

    data = sdk.post("task/run", {"task_slug": task_slug, "callback_url": callback_url})
    assert set(data) == {"run_slug"}, data
    rec, seen = poller.until(data["run_slug"])
    assert seen[-1] == v1flow.SUCCEEDED, seen
    assert rec["results"] == 4, rec
    assert rec["scraper_title"] == "Amazon Product By ASIN", rec
    rows = v1flow.page_with_sdk(sdk, data["run_slug"], 3, 4)
    v1flow.assert_each_row_once(rows, 4)
