"""The main V1 flow through the published SDK against the gateway: store search,
worker detail, async run built from the detail, polling, paging every result,
export and download, run log, account info.

The SDK only has methods for `scraper/run` and `run/result/list`; every other
`/api/v1/*` operation goes through its generic `post(path, payload)`, and the two
public GET operations (`/api/store`, `/api/scraper`) through plain httpx, without
a key, as V1 clients call them.
"""

from __future__ import annotations

import csv
import io
import json

import httpx
import pytest

import v1flow

SEARCH = "maps"
WORKER_PATH = "coreclaw/google-maps-scraper"
ROWS = 137
BULK_PATH = "coreclaw/tiktok-comments-bulk"
BULK_ROWS = 2600  # the bulk worker's default


def get_v1(base: str, path: str, **params) -> dict:
    r = httpx.get(f"{base}{path}", params=params, timeout=30.0)
    assert r.status_code == 200, f"GET {path}: {r.status_code} {r.text}"
    body = r.json()
    assert body["code"] == 0 and body["message"] == "success", body
    return body["data"]


@pytest.fixture(scope="module")
def store_item(sandbox):
    data = get_v1(sandbox.gateway, "/api/store", search=SEARCH, limit=10)
    items = data["scraper"]
    assert items, f"store search {SEARCH!r} found nothing"
    for item in items:
        assert set(item) == {"slug", "title", "description"}, f"V1 store item: {item}"
    hits = [i for i in items if "Google Maps" in i["title"]]
    assert len(hits) == 1, f"expected one Google Maps worker in {items}"
    return hits[0]


@pytest.fixture(scope="module")
def detail(sandbox, store_item):
    return get_v1(sandbox.gateway, "/api/scraper", slug=store_item["slug"])


@pytest.fixture(scope="module")
def finished_run(sdk, poller, store_item, detail):
    run_input = v1flow.build_input(detail, max_results=ROWS)
    started = sdk.scraper(store_item["slug"]).run(input=run_input, version=detail["version"])
    assert set(started) == {"run_slug"}, f"async start answers only run_slug: {started}"
    slug = started["run_slug"]
    first = poller.detail(slug)
    rec, seen = poller.until(slug)
    return {"slug": slug, "first": first, "record": rec, "seen": seen}


def test_store_search_honours_limit(sandbox):
    items = get_v1(sandbox.gateway, "/api/store", search="e", limit=2)["scraper"]
    assert 1 <= len(items) <= 2, items


def test_worker_detail_has_the_v1_shape(detail):
    assert set(detail) >= {"version", "parameters", "readme"}, sorted(detail)
    assert v1flow.VERSION.match(detail["version"]), detail["version"]
    system = detail["parameters"]["system"]
    assert set(system) >= {"cpus", "max_total_charge", "max_total_traffic", "execute_limit_time_seconds"}
    assert "memory_bytes" in system or "memory" in system, system
    props = detail["parameters"]["custom"]["properties"]
    assert props, "the custom descriptor declares no parameters"
    for p in props:
        assert set(p) >= {"name", "type", "title", "editor", "required", "description"}, p


def test_async_run_completes_with_status_3(finished_run, store_item, detail):
    first, rec, seen = finished_run["first"], finished_run["record"], finished_run["seen"]
    assert first["status"] in (v1flow.READY, v1flow.RUNNING), first
    assert seen[-1] == v1flow.SUCCEEDED, f"statuses seen: {seen}"
    assert seen == sorted(seen), f"statuses went backwards: {seen}"
    assert rec["results"] == ROWS, rec
    assert rec["err_msg"] == "", rec
    assert rec["scraper_slug"] == store_item["slug"], rec
    assert rec["scraper_title"] == store_item["title"], rec
    assert rec["version"] == detail["version"], rec
    assert rec["origin"] == "api", rec
    assert rec["duration"] == rec["finished_at"] - rec["started_at"], rec


def test_run_detail_matches_the_native_v1_service(finished_run, legacy_sdk):
    legacy = legacy_sdk.post("run/detail", {"run_slug": finished_run["slug"]})
    gateway = dict(finished_run["record"])
    # The native service shows V2-started runs with their V2 origin name.
    legacy.pop("origin"), gateway.pop("origin")
    assert gateway == legacy


@pytest.mark.parametrize("limit", [10, 25, 50, 137, 200])
def test_list_results_pages_every_row_exactly_once(sdk, finished_run, limit):
    rows = v1flow.page_with_sdk(sdk, finished_run["slug"], limit, ROWS)
    v1flow.assert_each_row_once(rows, ROWS)


def test_result_pages_match_the_native_v1_service(sdk, legacy_sdk, finished_run):
    slug = finished_run["slug"]
    for offset in (0, 40, 120):
        ours = sdk.run(slug).list_results(limit=40, offset=offset)
        theirs = legacy_sdk.run(slug).list_results(limit=40, offset=offset)
        assert ours == theirs, f"page at offset {offset} differs from the native V1 service"


def test_a_page_past_the_end_is_empty(sdk, legacy_sdk, finished_run):
    slug = finished_run["slug"]
    ours = sdk.run(slug).list_results(limit=40, offset=160)
    theirs = legacy_sdk.run(slug).list_results(limit=40, offset=160)
    assert ours["list"] == [] and ours["count"] == ROWS, ours
    # V2 headers carry no `format`; the gateway infers it from the page's rows, so on
    # an empty page every column reads `text`. Keys and labels must still match.
    strip = lambda page: [(h["key"], h["label"]) for h in page["headers"]]  # noqa: E731
    assert strip(ours) == strip(theirs)
    assert {k: v for k, v in ours.items() if k != "headers"} == {
        k: v for k, v in theirs.items() if k != "headers"
    }


@pytest.fixture(scope="module")
def bulk_run(sandbox, sdk, poller):
    detail = get_v1(sandbox.gateway, "/api/scraper", slug=BULK_PATH)
    started = sdk.scraper(BULK_PATH).run(input=v1flow.build_input(detail), version=detail["version"])
    rec, _ = poller.until(started["run_slug"])
    assert rec["status"] == v1flow.SUCCEEDED and rec["results"] == BULK_ROWS, rec
    return started["run_slug"]


@pytest.mark.parametrize("limit", [100, 250, 1000])
def test_large_pages_of_a_bulk_run_arrive_exactly_once(sdk, bulk_run, limit):
    rows = v1flow.page_with_sdk(sdk, bulk_run, limit, BULK_ROWS)
    v1flow.assert_each_row_once(rows, BULK_ROWS)


def _cell(v) -> str:
    if v is None:
        return ""
    return v if isinstance(v, str) else json.dumps(v)


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("filter_keys", [[], ["title", "rating"]], ids=["all", "filtered"])
def test_export_downloads_every_row(sdk, finished_run, fmt, filter_keys):
    slug = finished_run["slug"]
    data = sdk.post("run/result/export", {"run_slug": slug, "format": fmt, "filter_keys": filter_keys})
    assert set(data) == {"download_url"}, data
    r = httpx.get(data["download_url"], timeout=30.0)
    assert r.status_code == 200, f"download: {r.status_code} {r.text[:200]}"

    page = sdk.run(slug).list_results(limit=ROWS, offset=0)
    keys = filter_keys or [h["key"] for h in page["headers"]]
    expected = [{k: row.get(k) for k in keys} for row in page["list"]]

    if fmt == "json":
        exported = r.json()
        assert isinstance(exported, list), type(exported)
        assert [{k: row.get(k) for k in keys} for row in exported] == expected
        assert all(set(row) <= set(keys) | {v1flow.ROW_ID} for row in exported)
    else:
        table = list(csv.reader(io.StringIO(r.text)))
        assert table[0] == keys, f"csv header {table[0]}, expected {keys}"
        assert table[1:] == [[_cell(row[k]) for k in keys] for row in expected]


def test_run_log_has_v1_entries(sdk, legacy_sdk, finished_run):
    slug = finished_run["slug"]
    log = sdk.post("run/last/log", {"run_slug": slug})
    assert set(log) >= {"all_logs_url", "list", "result_count"}, sorted(log)
    assert log["result_count"] == ROWS, log["result_count"]
    assert log["list"], "empty log"
    for entry in log["list"]:
        assert set(entry) == {"type", "group", "content", "timestamp"}, entry
        assert entry["type"] in (1, 2, 3, 4), entry
        assert isinstance(entry["group"], str) and isinstance(entry["content"], str), entry
        assert entry["timestamp"] > 10**12, f"log timestamp is not in ms: {entry}"
    full = httpx.get(log["all_logs_url"], timeout=30.0)
    assert full.status_code == 200, full.status_code
    for entry in log["list"]:
        assert entry["content"] in full.text, f"{entry['content']!r} missing from the full log"
    assert log == legacy_sdk.post("run/last/log", {"run_slug": slug})


def test_run_list_finds_the_run(sdk, finished_run, store_item):
    slug = finished_run["slug"]
    data = sdk.post(
        "run/list",
        {"page_index": 1, "page_size": 50, "status": v1flow.SUCCEEDED, "scraper_slug": store_item["slug"]},
    )
    assert set(data) >= {"count", "list"}, sorted(data)
    for rec in data["list"]:
        v1flow.check_run_record(rec)
        assert rec["status"] == v1flow.SUCCEEDED and rec["scraper_slug"] == store_item["slug"], rec
    assert slug in [r["slug"] for r in data["list"]]


def test_account_info(sdk):
    acct = sdk.post("account/info", {})
    assert set(acct) >= {"balance", "traffic", "traffic_expiration_at"}, sorted(acct)
    assert v1flow.DECIMAL.match(acct["balance"]), acct
    assert isinstance(acct["traffic"], int) and acct["traffic"] >= 0, acct
    assert isinstance(acct["traffic_expiration_at"], int), acct
    assert acct["traffic_expiration_at"] < 10**11, f"not Unix seconds: {acct}"


def test_sdk_calls_become_v2_calls(sandbox, sdk, finished_run, store_item, detail):
    """What the V2 service received for two SDK calls (from `/__sandbox/requests`)."""
    http = httpx.Client(base_url=sandbox.upstream, timeout=10.0)
    http.delete("/__sandbox/requests")
    sdk.run(finished_run["slug"]).list_results(limit=50, offset=50)
    sdk.scraper(store_item["slug"]).run(input=v1flow.build_input(detail, max_results=1), version=detail["version"])
    seen = http.get("/__sandbox/requests").json()
    http.close()

    results = [r for r in seen if r["operation"] == "listWorkerRunResults"]
    assert len(results) == 1, seen
    assert results[0]["path"] == f"/api/v2/worker-runs/{finished_run['slug']}/result"
    assert sorted(results[0]["query"].split("&")) == ["limit=50", "offset=2"], results[0]["query"]

    runs = [r for r in seen if r["operation"] == "runWorker"]
    assert len(runs) == 1, seen
    body = runs[0]["body"]
    # V1-only fields (`scraper_slug`, the window of an async run) do not reach V2.
    assert "scraper_slug" not in body and "page_index" not in body, body
    assert body["is_async"] is True and body["version"] == detail["version"], body
    assert body["input"]["parameters"]["custom"]["max_results"] == 1, body
    assert {r["auth"] for r in seen} == {"bearer"}, "the gateway sends the key as Bearer"
