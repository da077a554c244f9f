"""The n8n V1 node (`n8n-nodes-coreclaw` 0.1.x) against the gateway in the
configuration the README documents for it (`business_error_status = "200"`,
`empty_store_search = "all"`, `missing_key_status = "400"`), and against the
sandbox's native V1 service in the same dialect.

The node's credential test sends `POST /api/v1/account/info` with the body `{}`
and the key in `api-key` (an empty key field is sent as `api-key:` with no
value), and decides by HTTP status alone: 401 is an invalid key, 400 a missing
key, any other failure status a failed test, and a 2xx answer a working
credential. Its workflow steps read business errors from the envelope's `code`
under HTTP 200. `credential_test` below is those rules, written out.
"""

from __future__ import annotations

import httpx
import pytest

VALID, INVALID, MISSING = "valid", "invalid", "missing"

UNKNOWN_WORKER = "nobody/no-such-worker"


def credential_test(status: int) -> str:
    """What the node's credential test shows for an answer's HTTP status."""
    if status == 401:
        return INVALID
    if status == 400:
        return MISSING
    if 200 <= status < 300:
        return VALID
    return f"failed (HTTP {status})"


def test_the_rules_read_statuses_as_the_node_does():
    assert [credential_test(s) for s in (200, 204, 401, 400, 404, 500)] == [
        VALID,
        VALID,
        INVALID,
        MISSING,
        "failed (HTTP 404)",
        "failed (HTTP 500)",
    ]


@pytest.fixture(params=["gateway", "native-v1"])
def n8n_base(request, n8n_sandbox):
    """Base URL of the gateway, then of the native V1 service, both in the n8n
    configuration."""
    return n8n_sandbox.gateway if request.param == "gateway" else n8n_sandbox.legacy


def account_info(base: str, headers: dict[str, str]) -> httpx.Response:
    """The node's credential test request."""
    return httpx.post(
        f"{base}/api/v1/account/info",
        json={},
        headers={"Content-Type": "application/json", **headers},
        timeout=30.0,
    )


@pytest.mark.parametrize(
    "key,expected,code",
    [
        ("good", VALID, 0),
        ("wrong", INVALID, 20001),
        ("empty", MISSING, 4000),
        ("none", MISSING, 4000),
    ],
)
def test_credential_test_tells_good_wrong_and_missing_keys_apart(
    n8n_base, n8n_sandbox, key, expected, code
):
    headers = {
        "good": {"api-key": n8n_sandbox.key},
        "wrong": {"api-key": "not-a-valid-key"},
        "empty": {"api-key": ""},
        "none": {},
    }[key]
    r = account_info(n8n_base, headers)
    assert credential_test(r.status_code) == expected, f"HTTP {r.status_code}: {r.text}"
    body = r.json()
    assert body["code"] == code, body
    if code == 0:
        assert set(body["data"]) >= {"balance", "traffic", "traffic_expiration_at"}, body
    else:
        assert body["data"] is None, body
    if expected == MISSING:
        # The answer says which header to fill in.
        assert "api-key" in body["message"], body


def test_business_errors_still_come_as_http_200_with_their_code(n8n_base, n8n_sandbox):
    """A run of an unknown worker with a good key: the node's error hints read
    `code` (50001, "Scraper not found") from an HTTP 200 answer."""
    r = httpx.post(
        f"{n8n_base}/api/v1/scraper/run",
        json={
            "scraper_slug": UNKNOWN_WORKER,
            "is_async": True,
            "input": {"parameters": {"custom": {"max_items": 1}}},
        },
        headers={"api-key": n8n_sandbox.key},
        timeout=30.0,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["code"], body["data"]) == (50001, None), body
