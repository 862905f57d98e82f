"""GET /v1/jobs at scale (server/job_search.py): pages by cursor, q as an exact id or key
and as text, and a cursor from elsewhere refused in one sentence."""

from __future__ import annotations

import deferq
from deferq.server import ServerConfig, create_app
from tests.support.server_helpers import TestClient


def test_pages_and_search(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/s.db")
    ids = [app.enqueue("shop.mail", [f"user{i}@example.com"], queue="email").id for i in range(25)]
    keyed = app.enqueue("shop.charge", [7], queue="payments", key="charge:7")
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
        seen, cursor, pages = [], None, 0
        while True:
            params = {"queue": "email", "limit": 10, **({"cursor": cursor} if cursor else {})}
            answer = api.get("/v1/jobs", params=params).json()
            seen += [job["id"] for job in answer["jobs"]]
            cursor, pages = answer["cursor"], pages + 1
            if cursor is None:
                break
        assert sorted(seen) == sorted(ids) and seen == sorted(seen, reverse=True) and pages == 3
        by_id = api.get("/v1/jobs", params={"q": keyed.id.lower()}).json()
        assert [j["id"] for j in by_id["jobs"]] == [keyed.id] and by_id["search"]["exact"] == 1
        by_key = api.get("/v1/jobs", params={"q": "charge:7"}).json()
        assert by_key["jobs"][0]["id"] == keyed.id
        text = api.get("/v1/jobs", params={"q": "USER13@example"}).json()
        assert [j["id"] for j in text["jobs"]] == [ids[13]]
        assert text["search"] == {"exact": 0, "text": "index", "scanned": None, "complete": True}
        by_task = api.get("/v1/jobs", params={"task": "shop.charge", "state": "queued"}).json()
        assert [j["id"] for j in by_task["jobs"]] == [keyed.id]
        refused = api.get("/v1/jobs", params={"cursor": "bogus"})
        assert refused.status_code == 422 and "cursor" in refused.json()["error"]["message"]
        names = {p["name"] for p in api.get("/openapi.json").json()["paths"]["/v1/jobs"]["get"]["parameters"]}
        assert {"cursor", "q", "task", "window"} <= names
    app.close()
