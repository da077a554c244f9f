"""The flow the V1 documentation teaches, in a plain HTTP client (no SDK):
`GET /api/scraper`, `POST /api/v1/scraper/run`, poll `POST /api/v1/run/detail`
until status 3 (success) or 4 (failure), then page `POST /api/v1/run/result/list`
by `page_index`/`page_size` from 1 until a short page.

Run against the gateway and against the native V1 service; both must give the
same rows for the same input.
"""

from __future__ import annotations

import time

import httpx
import pytest

import v1flow

WORKER = "coreclaw/google-maps-scraper"
ROWS = 45
PAGE_SIZE = 20
MAX_POLLS = 40
MAX_SECONDS = 30.0


def envelope(r: httpx.Response) -> dict:
    assert r.status_code == 200, f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text}"
    body = r.json()
    assert body["code"] == 0 and body["message"] == "success", body
    return body["data"]


def docs_flow(sandbox, base: str, auth: dict, failing: bool = False) -> tuple[dict, list[dict]]:
    worker = "coreclaw/broken-news-scraper" if failing else WORKER
    with httpx.Client(base_url=base, timeout=30.0) as http:
        # 1. Worker detail (public, no key): version and parameters.
        detail = envelope(http.get("/api/scraper", params={"slug": worker}))
        custom = {p["name"]: p.get("default") for p in detail["parameters"]["custom"]["properties"]}
        if not failing:
            custom["max_results"] = ROWS
        system = v1flow.system_from_detail(detail)

        # 2. Start the run asynchronously.
        body = {
            "scraper_slug": worker,
            "version": detail["version"],
            "input": {"parameters": {"system": system, "custom": custom}},
            "is_async": True,
        }
        run_slug = envelope(http.post("/api/v1/scraper/run", json=body, headers=auth))["run_slug"]

        # 3. Poll run detail with backoff until 3 (success) or 4 (failure).
        delay, step = 0.005, 1.0
        deadline = time.monotonic() + MAX_SECONDS
        for _ in range(MAX_POLLS):
            rec = envelope(http.post("/api/v1/run/detail", json={"run_slug": run_slug}, headers=auth))
            v1flow.check_run_record(rec)
            if rec["status"] in (3, 4):
                break
            assert time.monotonic() < deadline, f"run not completed after {MAX_SECONDS}s: {rec}"
            sandbox.advance(step)
            time.sleep(delay)
            delay, step = min(delay * 2, 0.2), min(step * 2, 64.0)
        else:
            raise AssertionError(f"run {run_slug} not completed after {MAX_POLLS} polls")
        if rec["status"] == 4:
            return rec, []

        # 4. Page the results from page 1 until a short page.
        rows: list[dict] = []
        for page_index in range(1, rec["results"] // PAGE_SIZE + 3):
            page = envelope(
                http.post(
                    "/api/v1/run/result/list",
                    json={"run_slug": run_slug, "page_index": page_index, "page_size": PAGE_SIZE},
                    headers=auth,
                )
            )
            v1flow.check_result_page(page, page_index, PAGE_SIZE)
            rows += page["list"]
            if len(page["list"]) < PAGE_SIZE:
                return rec, rows
        raise AssertionError("result paging never reached a short page")


@pytest.mark.parametrize("style", ["api-key", "bearer"])
def test_documented_flow_through_the_gateway(sandbox, style):
    auth = {"api-key": sandbox.key} if style == "api-key" else {"Authorization": f"Bearer {sandbox.key}"}
    rec, rows = docs_flow(sandbox, sandbox.gateway, auth)
    assert rec["status"] == 3 and rec["results"] == ROWS, rec
    v1flow.assert_each_row_once(rows, ROWS)


def test_documented_flow_matches_the_native_v1_service(sandbox):
    auth = {"api-key": sandbox.key}
    ours, our_rows = docs_flow(sandbox, sandbox.gateway, auth)
    theirs, their_rows = docs_flow(sandbox, sandbox.legacy, auth)
    assert (ours["status"], ours["results"]) == (theirs["status"], theirs["results"])
    assert v1flow.without_ids(our_rows) == v1flow.without_ids(their_rows)


def test_documented_flow_ends_on_a_failed_run(sandbox):
    rec, rows = docs_flow(sandbox, sandbox.gateway, {"api-key": sandbox.key}, failing=True)
    assert rec["status"] == 4, rec
    assert rec["err_msg"], f"a failed run carries a non-empty err_msg: {rec}"
    assert rows == []
