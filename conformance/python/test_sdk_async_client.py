"""The SDK's asyncio client (`CoreClawAsyncClient`): start a run, then fetch all
result pages concurrently; every row must arrive exactly once.
"""

from __future__ import annotations

import asyncio

import httpx
from coreclaw import CoreClawAsyncClient, CoreClawHTTPError

import v1flow

WORKER = "coreclaw/google-maps-scraper"
ROWS = 230
LIMIT = 20


async def start_and_page(sandbox, poller, run_input: dict, version: str) -> tuple[dict, list[dict]]:
    async with CoreClawAsyncClient(api_key=sandbox.key, base_url=sandbox.gateway) as client:
        started = await client.scraper(WORKER).run(input=run_input, version=version)
        slug = started["run_slug"]
        # Polling is synchronous (it moves the simulated clock in between).
        rec, _ = await asyncio.to_thread(poller.until, slug)
        pages = await asyncio.gather(
            *(client.run(slug).list_results(limit=LIMIT, offset=o) for o in range(0, ROWS + LIMIT, LIMIT))
        )
        try:
            await client.run("01KZZZZZZZZZZZZZZZZZZZZZZZ").list_results()
        except CoreClawHTTPError as e:
            assert e.status_code == 404 and v1flow.http_error_envelope(e)["code"] == 70001
        else:
            raise AssertionError("an unknown run gave no error")
    rows = [row for page in pages for row in page["list"]]
    for i, page in enumerate(pages):
        v1flow.check_result_page(page, i + 1, LIMIT)
    return rec, rows


def test_async_client_runs_and_pages_concurrently(sandbox, poller):
    r = httpx.get(f"{sandbox.gateway}/api/scraper", params={"slug": WORKER}, timeout=30.0)
    detail = r.json()["data"]
    run_input = v1flow.build_input(detail, max_results=ROWS)
    rec, rows = asyncio.run(start_and_page(sandbox, poller, run_input, detail["version"]))
    assert rec["status"] == v1flow.SUCCEEDED and rec["results"] == ROWS, rec
    v1flow.assert_each_row_once(rows, ROWS)
