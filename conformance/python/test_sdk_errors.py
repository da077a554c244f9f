"""Error flows through the SDK, against the gateway and against the native V1
service: the SDK must fail the same way on both.

How the SDK 1.0.1 reports errors (`coreclaw/client.py`, `_parse_response`): any
non-2xx HTTP status raises `CoreClawHTTPError(status_code, body_text)` before the
body is read; only a 2xx answer with `code != 0` raises `CoreClawAPIError`. V1
answers its business errors with HTTP statuses (404 for an unknown worker, task
or run, 400 for bad input, 401 for a bad key), so what a V1 SDK user sees is a
`CoreClawHTTPError` whose message carries the V1 envelope with the code.
"""

from __future__ import annotations

import httpx
import pytest
from coreclaw import CoreClawClient, CoreClawHTTPError

import v1flow

UNKNOWN_RUN = "01KZZZZZZZZZZZZZZZZZZZZZZZ"
UNKNOWN_TASK = "01KYYYYYYYYYYYYYYYYYYYYYYY"
GOOD_INPUT = {"parameters": {"custom": {"max_items": 2}}}


@pytest.fixture(params=["gateway", "native-v1"])
def target(request, sandbox, sdk, legacy_sdk):
    """(base URL, SDK client) of the gateway, then of the native V1 service."""
    if request.param == "gateway":
        return sandbox.gateway, sdk
    return sandbox.legacy, legacy_sdk


def expect_error(call, status: int, code: int) -> dict:
    with pytest.raises(CoreClawHTTPError) as exc:
        call()
    assert exc.value.status_code == status, f"HTTP {exc.value.status_code}, expected {status}: {exc.value}"
    env = v1flow.http_error_envelope(exc.value)
    assert env["code"] == code, f"code {env['code']}, expected {code}: {env}"
    return env


def test_unknown_worker_slug_is_50001(target):
    base, client = target
    env = expect_error(
        lambda: client.scraper("nobody/no-such-worker").run(input=GOOD_INPUT), 404, 50001
    )
    assert env["message"], env
    # The same through worker detail (public GET).
    r = httpx.get(f"{base}/api/scraper", params={"slug": "nobody/no-such-worker"}, timeout=30.0)
    assert (r.status_code, r.json()["code"], r.json()["data"]) == (404, 50001, None), r.text


def test_wrong_key_is_http_401(target, sandbox):
    base, _ = target
    with CoreClawClient(api_key="not-a-valid-key", base_url=base) as bad:
        for call in (
            lambda: bad.post("account/info", {}),
            lambda: bad.post("run/detail", {"run_slug": UNKNOWN_RUN}),
            lambda: bad.scraper("coreclaw/amazon-product-by-asin").run(input=GOOD_INPUT),
            lambda: bad.run(UNKNOWN_RUN).list_results(limit=10, offset=0),
        ):
            expect_error(call, 401, 20001)


@pytest.mark.parametrize(
    "path,payload",
    [
        ("run/detail", {}),
        ("run/last/log", {}),
        ("run/result/export", {"format": "csv", "filter_keys": []}),
        ("scraper/abort", {}),
        ("rerun", {"callback_url": "http://127.0.0.1:9/cb"}),
    ],
    ids=["detail", "log", "export", "abort", "rerun"],
)
def test_unknown_run_is_70001(target, path, payload):
    _, client = target
    expect_error(lambda: client.post(path, {"run_slug": UNKNOWN_RUN, **payload}), 404, 70001)


def test_unknown_run_through_list_results_is_70001(target):
    _, client = target
    expect_error(lambda: client.run(UNKNOWN_RUN).list_results(limit=10, offset=0), 404, 70001)


def test_unknown_task_is_60001(target):
    _, client = target
    expect_error(
        lambda: client.post("task/run", {"task_slug": UNKNOWN_TASK, "callback_url": "http://127.0.0.1:9/cb"}),
        404,
        60001,
    )


@pytest.mark.parametrize(
    "path,payload",
    [
        ("run/detail", {"run_slug": 42}),
        ("run/result/list", {"run_slug": UNKNOWN_RUN, "page_index": "one", "page_size": 10}),
        ("run/result/export", {"run_slug": UNKNOWN_RUN, "format": "pdf", "filter_keys": []}),
        ("task/run", {"task_slug": UNKNOWN_TASK}),
        ("scraper/run", {"scraper_slug": "coreclaw/amazon-product-by-asin", "is_async": True, "input": "x"}),
    ],
    ids=["slug-type", "page-type", "export-format", "task-no-callback", "input-not-object"],
)
def test_invalid_body_is_4000(target, path, payload):
    _, client = target
    expect_error(lambda: client.post(path, payload), 400, 4000)


def test_flat_input_is_4000(target):
    _, client = target
    expect_error(
        lambda: client.scraper("coreclaw/amazon-product-by-asin").run(input={"max_items": 2}),
        400,
        4000,
    )

